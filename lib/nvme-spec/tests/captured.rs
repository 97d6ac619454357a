//! Parsing bytes captured from implementations nobody here wrote: QEMU's
//! emulated NVMe controller and the Linux kernel's NVMe/TCP target
//! (nvmet), checked field by field against nvme-cli's own JSON decoding of
//! the same bytes (captured in the same VM run: see
//! `tests/fixtures/refresh.sh` and `doc/nvme-spec.md`).

#[cfg(test)]
mod tests {
    use bdevkit_nvme_spec::discovery::{self, adrfam, subtype, treq, trtype};
    use bdevkit_nvme_spec::identify::{
        cntrltype, parse_ns_id_descriptors, DeallocatedRead, IdentifyController, IdentifyNamespace,
        NamespaceList, NsIdDescriptor, NvmIdentifyController, SglSupport,
    };
    use bdevkit_nvme_spec::log::SmartLog;
    use bdevkit_nvme_spec::regs::Vs;
    use bdevkit_nvme_spec::zerocopy::FromBytes;
    use serde_json::Value;

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn json(name: &str) -> Value {
        serde_json::from_slice(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// nvme-cli prints small numbers as numbers and 128-bit ones as strings.
    fn num(v: &Value, key: &str) -> u128 {
        match &v[key] {
            Value::Number(n) => u128::from(n.as_u64().unwrap_or_else(|| panic!("{key}: {n}"))),
            Value::String(s) => s.parse().unwrap_or_else(|e| panic!("{key}: {s}: {e}")),
            other => panic!("{key}: {other}"),
        }
    }

    fn text<'a>(v: &'a Value, key: &str) -> &'a str {
        v[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} is not a string"))
    }

    /// Every field nvme-cli decodes, compared with ours.
    fn check_controller(c: &IdentifyController, j: &Value) {
        let fields: &[(&str, u128)] = &[
            ("vid", c.vid.get().into()),
            ("ssvid", c.ssvid.get().into()),
            ("rab", c.rab.into()),
            (
                "ieee",
                u128::from(u32::from_le_bytes([c.ieee[0], c.ieee[1], c.ieee[2], 0])),
            ),
            ("cmic", c.cmic.into()),
            ("mdts", c.mdts.into()),
            ("cntlid", c.cntlid.get().into()),
            ("ver", c.ver.get().into()),
            ("rtd3r", c.rtd3r.get().into()),
            ("rtd3e", c.rtd3e.get().into()),
            ("oaes", c.oaes.get().into()),
            ("ctratt", c.ctratt.get().into()),
            ("rrls", c.rrls.get().into()),
            ("cntrltype", c.cntrltype.into()),
            ("crdt1", c.crdt[0].get().into()),
            ("crdt2", c.crdt[1].get().into()),
            ("crdt3", c.crdt[2].get().into()),
            ("nvmsr", c.nvmsr.into()),
            ("vwci", c.vwci.into()),
            ("mec", c.mec.into()),
            ("oacs", c.oacs.get().into()),
            ("acl", c.acl.into()),
            ("aerl", c.aerl.into()),
            ("frmw", c.frmw.into()),
            ("lpa", c.lpa.into()),
            ("elpe", c.elpe.into()),
            ("npss", c.npss.into()),
            ("avscc", c.avscc.into()),
            ("apsta", c.apsta.into()),
            ("wctemp", c.wctemp.get().into()),
            ("cctemp", c.cctemp.get().into()),
            ("mtfa", c.mtfa.get().into()),
            ("hmpre", c.hmpre.get().into()),
            ("hmmin", c.hmmin.get().into()),
            ("tnvmcap", c.tnvmcap.get()),
            ("unvmcap", c.unvmcap.get()),
            ("rpmbs", c.rpmbs.get().into()),
            ("edstt", c.edstt.get().into()),
            ("dsto", c.dsto.into()),
            ("fwug", c.fwug.into()),
            ("kas", c.kas.get().into()),
            ("hctma", c.hctma.get().into()),
            ("mntmt", c.mntmt.get().into()),
            ("mxtmt", c.mxtmt.get().into()),
            ("sanicap", c.sanicap.get().into()),
            ("hmminds", c.hmminds.get().into()),
            ("hmmaxd", c.hmmaxd.get().into()),
            ("nsetidmax", c.nsetidmax.get().into()),
            ("endgidmax", c.endgidmax.get().into()),
            ("anatt", c.anatt.into()),
            ("anacap", c.anacap.into()),
            ("anagrpmax", c.anagrpmax.get().into()),
            ("nanagrpid", c.nanagrpid.get().into()),
            ("pels", c.pels.get().into()),
            ("domainid", c.domainid.get().into()),
            ("megcap", c.megcap.get()),
            ("sqes", c.sqes.into()),
            ("cqes", c.cqes.into()),
            ("maxcmd", c.maxcmd.get().into()),
            ("nn", c.nn.get().into()),
            ("oncs", c.oncs.get().into()),
            ("fuses", c.fuses.get().into()),
            ("fna", c.fna.into()),
            ("vwc", c.vwc.into()),
            ("awun", c.awun.get().into()),
            ("awupf", c.awupf.get().into()),
            ("icsvscc", c.nvscc.into()),
            ("nwpc", c.nwpc.into()),
            ("acwu", c.acwu.get().into()),
            ("ocfs", c.ocfs.get().into()),
            ("sgls", c.sgls.get().into()),
            ("mnan", c.mnan.get().into()),
            ("maxdna", c.maxdna.get()),
            ("maxcna", c.maxcna.get().into()),
            ("ioccsz", c.ioccsz.get().into()),
            ("iorcsz", c.iorcsz.get().into()),
            ("icdoff", c.icdoff.get().into()),
            ("fcatt", c.fcatt.into()),
            ("msdbd", c.msdbd.into()),
            ("ofcs", c.ofcs.get().into()),
        ];
        for &(key, ours) in fields {
            assert_eq!(ours, num(j, key), "{key}");
        }
        assert_eq!(c.serial(), text(j, "sn").trim_end());
        assert_eq!(c.model(), text(j, "mn").trim_end());
        assert_eq!(c.firmware(), text(j, "fr").trim_end());
        assert_eq!(c.subnqn(), text(j, "subnqn"));
        let psds = j["psds"].as_array().expect("psds");
        assert_eq!(psds.len(), usize::from(c.npss) + 1);
        for (p, jp) in c.psd.iter().zip(psds) {
            assert_eq!(u128::from(p.mp.get()), num(jp, "max_power"));
            assert_eq!(u128::from(p.enlat.get()), num(jp, "entry_lat"));
            assert_eq!(u128::from(p.exlat.get()), num(jp, "exit_lat"));
            assert_eq!(u128::from(p.flags), num(jp, "flags"));
        }
    }

    #[test]
    fn qemu_identify_controller() {
        let bytes = fixture("qemu-id-ctrl.bin");
        let c = IdentifyController::ref_from_bytes(&bytes).expect("4096 bytes");
        check_controller(c, &json("qemu-id-ctrl.json"));
        // What the drivers ask of it.
        assert_eq!(c.serial(), "deadbeef");
        assert_eq!(c.model(), "QEMU NVMe Ctrl");
        assert_eq!(c.version(), Vs::V1_4);
        assert_eq!(c.cntrltype, cntrltype::IO);
        // MDTS 7 with 4 KiB pages (the harness README: MDTS 7).
        assert_eq!(c.max_transfer_bytes(0), Some(512 * 1024));
        assert!(c.supports_compare() && c.supports_dsm() && c.supports_write_zeroes());
        assert!(!c.supports_write_uncorrectable() && c.supports_copy());
        assert!(c.volatile_write_cache());
        assert_eq!((c.sq_entry_size(), c.cq_entry_size()), (64, 16));
        assert_eq!(c.sgl_support(), SglSupport::Supported);
        assert_eq!(c.keep_alive_granularity_ms(), None);
    }

    #[test]
    fn nvmet_fabrics_identify_controller() {
        let bytes = fixture("nvmet-id-ctrl.bin");
        let c = IdentifyController::ref_from_bytes(&bytes).expect("4096 bytes");
        check_controller(c, &json("nvmet-id-ctrl.json"));
        assert_eq!(c.serial(), "BDEVKITSPEC0001");
        assert_eq!(c.subnqn(), "nqn.2024-01.io.bdevkit:spec");
        assert_eq!(c.version(), Vs::V1_3);
        assert_eq!(c.max_transfer_bytes(0), None);
        // Fabrics fields: 16 KiB of in-capsule data, one SGL data block,
        // offset SGLs; keep alive in 1 s steps.
        assert_eq!(c.in_capsule_data_bytes(), 16384);
        assert!(c.supports_sgl_offset());
        assert_eq!(c.keep_alive_granularity_ms(), Some(1000));
        assert!(c.supports_dsm() && c.supports_write_zeroes() && !c.supports_compare());
    }

    #[test]
    fn qemu_identify_namespace() {
        let bytes = fixture("qemu-id-ns.bin");
        let n = IdentifyNamespace::ref_from_bytes(&bytes).expect("4096 bytes");
        let j = json("qemu-id-ns.json");
        let fields: &[(&str, u128)] = &[
            ("nsze", n.nsze.get().into()),
            ("ncap", n.ncap.get().into()),
            ("nuse", n.nuse.get().into()),
            ("nsfeat", n.nsfeat.into()),
            ("nlbaf", n.nlbaf.into()),
            ("flbas", n.flbas.into()),
            ("mc", n.mc.into()),
            ("dpc", n.dpc.into()),
            ("dps", n.dps.into()),
            ("nmic", n.nmic.into()),
            ("rescap", n.rescap.into()),
            ("fpi", n.fpi.into()),
            ("dlfeat", n.dlfeat.into()),
            ("nawun", n.nawun.get().into()),
            ("nawupf", n.nawupf.get().into()),
            ("nacwu", n.nacwu.get().into()),
            ("nabsn", n.nabsn.get().into()),
            ("nabo", n.nabo.get().into()),
            ("nabspf", n.nabspf.get().into()),
            ("noiob", n.noiob.get().into()),
            ("nvmcap", n.nvmcap.get()),
            ("nsattr", n.nsattr.into()),
            ("nvmsetid", n.nvmsetid.get().into()),
            ("npwg", n.npwg.get().into()),
            ("npwa", n.npwa.get().into()),
            ("npdg", n.npdg.get().into()),
            ("npda", n.npda.get().into()),
            ("nows", n.nows.get().into()),
            ("mssrl", n.mssrl.get().into()),
            ("mcl", n.mcl.get().into()),
            ("msrc", n.msrc.into()),
            ("nulbaf", n.nulbaf.into()),
            ("anagrpid", n.anagrpid.get().into()),
            ("endgid", n.endgid.get().into()),
        ];
        for &(key, ours) in fields {
            assert_eq!(ours, num(&j, key), "{key}");
        }
        let lbafs = j["lbafs"].as_array().expect("lbafs");
        assert_eq!(lbafs.len(), usize::from(n.nlbaf) + 1);
        for (f, jf) in n.lbaf.iter().zip(lbafs) {
            assert_eq!(u128::from(f.ms.get()), num(jf, "ms"));
            assert_eq!(u128::from(f.lbads), num(jf, "ds"));
            assert_eq!(u128::from(f.rp), num(jf, "rp"));
        }
        // Geometry as the xnvme module computes it.
        assert_eq!(n.lba_size(), Some(512));
        assert_eq!(n.metadata_size(), 0);
        assert_eq!(n.nsze.get() * 512, 256 << 20);
        assert_eq!(n.lbaf[7].block_size(), Some(4096));
        assert_eq!(n.deallocated_read_value(), DeallocatedRead::Zeroes);
        assert!(!n.extended_lba());
    }

    #[test]
    fn qemu_nvm_identify_controller() {
        let bytes = fixture("qemu-id-ctrl-nvm.bin");
        let c = NvmIdentifyController::ref_from_bytes(&bytes).expect("4096 bytes");
        let j = json("qemu-id-ctrl-nvm.json");
        assert_eq!(u128::from(c.vsl), num(&j, "vsl"));
        assert_eq!(u128::from(c.wzsl), num(&j, "wzsl"));
        assert_eq!(u128::from(c.wusl), num(&j, "wusl"));
        assert_eq!(u128::from(c.dmrl), num(&j, "dmrl"));
        assert_eq!(u128::from(c.dmrsl.get()), num(&j, "dmrsl"));
        assert_eq!(u128::from(c.dmsl.get()), num(&j, "dmsl"));
        assert_eq!(c.dsm_max_ranges(), Some(255));
        assert_eq!(c.dsm_max_range_blocks(), Some(4_194_303));
        assert_eq!(c.write_zeroes_max_bytes(0), None);
    }

    #[test]
    fn qemu_active_namespace_list() {
        let bytes = fixture("qemu-active-ns.bin");
        let l = NamespaceList::ref_from_bytes(&bytes).expect("4096 bytes");
        assert_eq!(l.iter().collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn namespace_id_descriptors() {
        // QEMU reports only the command set (no UUID configured).
        assert_eq!(
            parse_ns_id_descriptors(&fixture("qemu-ns-descs.bin")),
            [NsIdDescriptor::Csi(0)]
        );
        // nvmet: a UUID and the command set.
        let descs = parse_ns_id_descriptors(&fixture("nvmet-ns-descs.bin"));
        let j = json("nvmet-ns-descs.json");
        let want_uuid = text(&j["ns-descs"][0], "uuid").replace('-', "");
        let NsIdDescriptor::Uuid(uuid) = &descs[0] else {
            panic!("not a uuid: {descs:?}")
        };
        let got: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want_uuid);
        assert_eq!(descs[1], NsIdDescriptor::Csi(0));
        assert_eq!(descs.len(), 2);
    }

    #[test]
    fn qemu_smart_log() {
        let bytes = fixture("qemu-smart-log.bin");
        let s = SmartLog::ref_from_bytes(&bytes).expect("512 bytes");
        let j = json("qemu-smart-log.json");
        let fields: &[(&str, u128)] = &[
            ("critical_warning", s.critical_warning.into()),
            ("temperature", s.temperature.get().into()),
            ("avail_spare", s.avail_spare.into()),
            ("spare_thresh", s.spare_thresh.into()),
            ("percent_used", s.percent_used.into()),
            (
                "endurance_grp_critical_warning_summary",
                s.endurance_group_warning.into(),
            ),
            ("data_units_read", s.data_units_read.get()),
            ("data_units_written", s.data_units_written.get()),
            ("host_read_commands", s.host_reads.get()),
            ("host_write_commands", s.host_writes.get()),
            ("controller_busy_time", s.ctrl_busy_time.get()),
            ("power_cycles", s.power_cycles.get()),
            ("power_on_hours", s.power_on_hours.get()),
            ("unsafe_shutdowns", s.unsafe_shutdowns.get()),
            ("media_errors", s.media_errors.get()),
            ("num_err_log_entries", s.num_err_log_entries.get()),
            ("warning_temp_time", s.warning_temp_time.get().into()),
            ("critical_comp_time", s.critical_temp_time.get().into()),
            (
                "thm_temp1_trans_count",
                s.thm_temp1_trans_count.get().into(),
            ),
            (
                "thm_temp2_trans_count",
                s.thm_temp2_trans_count.get().into(),
            ),
            ("thm_temp1_total_time", s.thm_temp1_total_time.get().into()),
            ("thm_temp2_total_time", s.thm_temp2_total_time.get().into()),
        ];
        for &(key, ours) in fields {
            assert_eq!(ours, num(&j, key), "{key}");
        }
        assert!(s.host_reads.get() > 0, "the capture read the device");
    }

    #[test]
    fn nvmet_discovery_log() {
        let bytes = fixture("nvmet-discovery-log.bin");
        let log = discovery::parse_discovery_log(&bytes).expect("a header");
        assert!(log.is_complete());
        let j = json("nvmet-discovery-log.json");
        assert_eq!(u128::from(log.header.genctr.get()), num(&j, "genctr"));
        let records = j["records"].as_array().expect("records");
        assert_eq!(log.entries.len(), records.len());
        for (e, r) in log.entries.iter().zip(records) {
            assert_eq!(e.trtype, trtype::TCP);
            assert_eq!(text(r, "trtype"), "tcp");
            assert_eq!(e.adrfam, adrfam::IPV4);
            assert_eq!(
                e.treq & treq::DISABLE_SQ_FLOW_CONTROL,
                treq::DISABLE_SQ_FLOW_CONTROL
            );
            assert_eq!(u128::from(e.portid.get()), num(r, "portid"));
            assert_eq!(e.trsvcid(), text(r, "trsvcid"));
            assert_eq!(e.traddr(), text(r, "traddr"));
            assert_eq!(e.subnqn(), text(r, "subnqn"));
            assert_eq!(e.cntlid.get(), 0xffff);
        }
        assert_eq!(log.entries[0].subtype, subtype::CURRENT_DISCOVERY);
        assert_eq!(
            log.entries[0].subnqn(),
            bdevkit_nvme_spec::fabrics::DISCOVERY_NQN
        );
        assert_eq!(log.entries[1].subtype, subtype::NVME);
        // Rebuilding the page from the parsed entries gives the same bytes.
        let again = discovery::build_discovery_log(log.header.genctr.get(), log.entries);
        assert_eq!(again, bytes);
    }
}
