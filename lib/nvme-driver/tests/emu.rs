//! The driver against the in-process emulated controller: bring-up, I/O
//! through PRPs, SGLs and bounce buffers, CQ wrap, fused compare-and-write,
//! and the faults: error statuses, a command that never completes (aged
//! out, then aborted), controller fatal status, surprise removal.

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bdevkit_nvme_driver::emu::{
        EmuController, EmuKind, EmuNamespace, EmuOptions, Fault, FaultAction,
    };
    use bdevkit_nvme_driver::{
        Completion, Controller, ControllerOptions, Data, Health, PcieTransport, Qpair,
        QueueTransport, Request, SubmitError, Transport,
    };
    use bdevkit_nvme_spec::admin::Abort;
    use bdevkit_nvme_spec::io::{BlockRange, Compare, Read, Write};
    use bdevkit_nvme_spec::{Command, Sqe, Status};

    type Q = <PcieTransport as Transport>::Queue;

    /// A request over one allocation: segments are (offset, len) in `buf`,
    /// whose first page-aligned byte is at `base`.
    struct Req {
        buf: Vec<u8>,
        base: usize,
        segs: Vec<(usize, usize)>,
        aux: Vec<(usize, usize)>,
        tag: u64,
    }

    impl Req {
        fn new(layout: &[(usize, usize)], tag: u64) -> Req {
            let end = layout.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
            let buf = vec![0u8; end + 8192];
            let p = buf.as_ptr() as usize;
            let base = p.next_multiple_of(4096) - p;
            Req {
                buf,
                base,
                segs: layout.to_vec(),
                aux: Vec::new(),
                tag,
            }
        }
        fn list(&self, d: Data) -> &[(usize, usize)] {
            if d == Data::Aux {
                &self.aux
            } else {
                &self.segs
            }
        }
        fn fill(&mut self, seed: u8) {
            let segs = self.segs.clone();
            for (i, (o, l)) in segs.iter().enumerate() {
                for (j, b) in self.buf[self.base + o..self.base + o + l]
                    .iter_mut()
                    .enumerate()
                {
                    *b = seed.wrapping_add(u8::try_from((i * 7 + j * 13) % 251).unwrap());
                }
            }
        }
        fn bytes(&self, d: Data) -> Vec<u8> {
            let mut v = Vec::new();
            for (o, l) in self.list(d) {
                v.extend_from_slice(&self.buf[self.base + o..self.base + o + l]);
            }
            v
        }
    }

    // SAFETY: the segments lie in the request's own `Vec` (never resized
    // while it is in flight); the tests read or change it only once the
    // queue pair gave the request back.
    unsafe impl Request for Req {
        fn segment_count(&self, d: Data) -> usize {
            self.list(d).len()
        }
        fn segment(&self, d: Data, i: usize) -> (usize, usize) {
            let (o, l) = self.list(d)[i];
            (self.buf.as_ptr() as usize + self.base + o, l)
        }
        fn for_each_segment(&self, d: Data, f: &mut dyn FnMut(&[u8])) {
            for (o, l) in self.list(d) {
                f(&self.buf[self.base + o..self.base + o + l]);
            }
        }
        fn for_each_segment_mut(&mut self, d: Data, f: &mut dyn FnMut(&mut [u8])) -> bool {
            let segs = self.list(d).to_vec();
            for (o, l) in segs {
                f(&mut self.buf[self.base + o..self.base + o + l]);
            }
            true
        }
    }

    struct Rig {
        emu: EmuController,
        ctrlr: Arc<Controller<PcieTransport>>,
        qp: Qpair<Q, Req>,
    }

    fn rig(name: &str, emu_opts: EmuOptions, io_entries: u16) -> Rig {
        let emu = EmuController::start(name, emu_opts).unwrap();
        let t = PcieTransport::new(emu.function()).unwrap();
        let opts = ControllerOptions {
            io_entries,
            admin_timeout: Duration::from_secs(30),
            ..ControllerOptions::default()
        };
        let ctrlr = Controller::attach(t, opts).unwrap();
        let qp = ctrlr.create_io_qpair::<Req>().unwrap();
        Rig { emu, ctrlr, qp }
    }

    /// Polls until `n` completions arrived (or 60 s).
    fn wait(qp: &mut Qpair<Q, Req>, n: usize) -> Vec<Completion<Req>> {
        let mut all = Vec::new();
        let mut batch = Vec::with_capacity(64);
        let start = Instant::now();
        while all.len() < n && start.elapsed() < Duration::from_secs(60) {
            qp.flush();
            qp.process(&mut batch);
            all.append(&mut batch);
            std::thread::yield_now();
        }
        all
    }

    fn rw(nsid: u32, write: bool, slba: u64, blocks: u32) -> Sqe {
        let r = BlockRange::new(slba, blocks).unwrap();
        if write {
            Write::new(nsid, r).to_sqe(0)
        } else {
            Read::new(nsid, r).to_sqe(0)
        }
    }

    fn write_read(rig: &mut Rig, layout: &[(usize, usize)], slba: u64, seed: u8) {
        let len: usize = layout.iter().map(|s| s.1).sum();
        let blocks = u32::try_from(len / 512).unwrap();
        let mut w = Req::new(layout, 1);
        w.fill(seed);
        let expect = w.bytes(Data::Main);
        rig.qp
            .submit(
                rw(1, true, slba, blocks),
                Data::Main,
                bdevkit_nvme_driver::Dir::ToDevice,
                w,
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 1);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].status().is_success(),
            "write {layout:?}: {}",
            c[0].status()
        );
        let r = Req::new(layout, 2);
        rig.qp
            .submit(
                rw(1, false, slba, blocks),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                r,
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 1);
        assert!(
            c[0].status().is_success(),
            "read {layout:?}: {}",
            c[0].status()
        );
        assert_eq!(c[0].ctx.bytes(Data::Main), expect, "data of {layout:?}");
    }

    #[test]
    fn bring_up_identify_and_namespaces() {
        let opts = EmuOptions {
            namespaces: vec![
                EmuNamespace {
                    nsid: 1,
                    kind: EmuKind::Ram,
                    block_size: 512,
                    num_blocks: 4096,
                },
                EmuNamespace {
                    nsid: 3,
                    kind: EmuKind::Null,
                    block_size: 4096,
                    num_blocks: 1 << 20,
                },
            ],
            ..EmuOptions::default()
        };
        let rig = rig("bringup", opts, 64);
        let id = rig.ctrlr.identify();
        assert_eq!(id.serial(), "EMU0001");
        let ns = rig.ctrlr.namespaces();
        assert_eq!(ns.iter().map(|n| n.id).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(ns[1].block_size, 4096);
        assert_eq!(ns[1].num_blocks, 1 << 20);
        // Identifiers from the descriptor list: an NGUID per namespace,
        // no UUID or EUI-64 (the emulated controller reports none).
        let (a, b) = (ns[0].ids, ns[1].ids);
        assert!(a.nguid.is_some() && b.nguid.is_some() && a.nguid != b.nguid);
        assert_eq!((a.uuid, a.eui64), (None, None));
        assert_eq!(rig.ctrlr.max_transfer_bytes(), 512 * 1024);
        assert_eq!(rig.ctrlr.health(), Health::Ok);
        rig.ctrlr.delete_io_qpair(rig.qp);
        rig.ctrlr.shutdown().unwrap();
    }

    #[test]
    fn prp_sgl_and_bounce_layouts_move_the_right_bytes() {
        for sgl in [true, false] {
            let opts = EmuOptions {
                sgl,
                ..EmuOptions::default()
            };
            let mut rig = rig(if sgl { "lay-sgl" } else { "lay-prp" }, opts, 32);
            // One segment: in one page, across two pages, over many (a list).
            write_read(&mut rig, &[(0, 512)], 0, 1);
            write_read(&mut rig, &[(3584, 1024)], 8, 2);
            write_read(&mut rig, &[(512, 64 * 1024)], 16, 3);
            write_read(&mut rig, &[(0, 512 * 1024)], 1024, 4);
            // PRP-shaped multi-segment: first ends on a page, others aligned.
            write_read(
                &mut rig,
                &[(3072, 1024), (8192, 4096), (16384, 512)],
                200,
                5,
            );
            // Not PRP-shaped: two 512-byte pieces of one page (SGL or bounce).
            write_read(&mut rig, &[(0, 512), (1024, 512)], 300, 6);
            write_read(
                &mut rig,
                &[(100 * 4, 512 * 3), (8192 + 12, 512 * 5)],
                400,
                7,
            );
            rig.ctrlr.delete_io_qpair(rig.qp);
        }
    }

    #[test]
    fn cq_wraps_many_times_on_a_tiny_queue() {
        let mut rig = rig("wrap", EmuOptions::default(), 4);
        assert_eq!(rig.qp.depth(), 3);
        let mut done = 0;
        let mut tag = 0u64;
        let mut batch = Vec::with_capacity(64);
        let start = Instant::now();
        while done < 1000 && start.elapsed() < Duration::from_secs(60) {
            loop {
                let req = Req::new(&[(0, 512)], tag);
                match rig.qp.submit(
                    rw(1, tag.is_multiple_of(2), tag % 64, 1),
                    Data::Main,
                    bdevkit_nvme_driver::Dir::ToDevice,
                    req,
                ) {
                    Ok(_) => tag += 1,
                    Err((_, SubmitError::Busy)) => break,
                    Err((_, e)) => panic!("{e:?}"),
                }
            }
            rig.qp.flush();
            rig.qp.process(&mut batch);
            for c in batch.drain(..) {
                assert!(c.status().is_success());
                done += 1;
            }
        }
        assert!(done >= 1000, "only {done} completions");
    }

    #[test]
    fn fused_compare_and_write() {
        let mut rig = rig("fused", EmuOptions::default(), 16);
        write_read(&mut rig, &[(0, 512)], 5, 9);
        let mut expect = Req::new(&[(0, 512)], 0);
        expect.fill(9);
        let old = expect.bytes(Data::Main);
        for (cmp_seed, should_pass) in [(9u8, true), (9u8, false)] {
            let mut req = Req::new(&[(0, 512), (4096, 512)], 1);
            req.fill(cmp_seed);
            req.segs = vec![(0, 512)];
            req.aux = vec![(4096, 512)];
            let newdata: Vec<u8> = (0..512u32)
                .map(|i| u8::try_from(i % 251).unwrap())
                .collect();
            let b = req.base;
            req.buf[b + 4096..b + 4608].copy_from_slice(&newdata);
            if !should_pass {
                // The first pass changed the block: comparing with the old
                // data fails now.
                let b = req.base;
                req.buf[b..b + 512].copy_from_slice(&old);
            }
            let r = BlockRange::new(5, 1).unwrap();
            rig.qp
                .submit_fused(
                    Compare::new(1, r).to_sqe(0),
                    Write::new(1, r).to_sqe(0),
                    req,
                )
                .map_err(|e| e.1)
                .unwrap();
            let c = wait(&mut rig.qp, 1);
            assert_eq!(c.len(), 1);
            if should_pass {
                assert!(c[0].status().is_success(), "{}", c[0].status());
            } else {
                assert_eq!(c[0].status(), Status::COMPARE_FAILURE);
            }
        }
        assert_eq!(rig.qp.outstanding(), 0);
    }

    #[test]
    fn error_status_reaches_the_request() {
        let mut rig = rig("status", EmuOptions::default(), 16);
        rig.emu.inject(Fault {
            admin: false,
            opcode: Some(0x02),
            count: 1,
            action: FaultAction::Status(Status::new(2, 0x81).with_dnr()),
        });
        rig.qp
            .submit(
                rw(1, false, 0, 1),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 512)], 7),
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 1);
        assert_eq!(
            (c[0].status().sct, c[0].status().sc, c[0].status().dnr),
            (2, 0x81, true)
        );
        assert_eq!(c[0].ctx.tag, 7);
        // Out of range and bad namespace come from the device itself.
        rig.qp
            .submit(
                rw(1, false, 8192, 1),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 512)], 8),
            )
            .map_err(|e| e.1)
            .unwrap();
        rig.qp
            .submit(
                rw(9, false, 0, 1),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 512)], 9),
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 2);
        let mut got: Vec<(u64, Status)> = c.iter().map(|c| (c.ctx.tag, c.status())).collect();
        got.sort_by_key(|g| g.0);
        assert_eq!(got[0].1, Status::LBA_OUT_OF_RANGE.with_dnr());
        assert_eq!(got[1].1, Status::INVALID_NAMESPACE.with_dnr());
    }

    #[test]
    fn a_lost_command_ages_out_and_abort_completes_it() {
        let mut rig = rig("timeout", EmuOptions::default(), 16);
        rig.emu.inject(Fault {
            admin: false,
            opcode: Some(0x02),
            count: 1,
            action: FaultAction::Drop,
        });
        let cid = rig
            .qp
            .submit(
                rw(1, false, 0, 1),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 512)], 1),
            )
            .map_err(|e| e.1)
            .unwrap();
        rig.qp.flush();
        let mut timed_out = Vec::new();
        let mut batch = Vec::new();
        for _ in 0..4 {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(5) {
                rig.qp.process(&mut batch);
            }
            rig.qp.age(3, &mut timed_out);
        }
        assert!(batch.is_empty(), "the dropped command must not complete");
        assert_eq!(timed_out, vec![cid]);
        let qid = rig.qp.transport().qid();
        let abort = rig.ctrlr.exec(Abort { sqid: qid, cid }.to_sqe(0)).unwrap();
        assert!(abort.status().is_success());
        assert_eq!(abort.dw0.get() & 1, 0, "the command was aborted");
        let c = wait(&mut rig.qp, 1);
        assert_eq!(c[0].status(), Status::ABORTED_BY_REQUEST);
    }

    #[test]
    fn fatal_status_then_reset_brings_the_queue_back() {
        let mut rig = rig("fatal", EmuOptions::default(), 16);
        write_read(&mut rig, &[(0, 4096)], 0, 3);
        rig.emu.set_fatal();
        let start = Instant::now();
        while rig.ctrlr.poll_admin() != Health::Fatal && start.elapsed() < Duration::from_secs(60) {
        }
        assert_eq!(rig.ctrlr.health(), Health::Fatal);
        rig.qp
            .submit(
                rw(1, false, 0, 8),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 4096)], 1),
            )
            .map_err(|e| e.1)
            .unwrap();
        rig.qp.flush();
        // Reset: disable, fail what was in flight, enable, reconnect.
        rig.ctrlr.disable().unwrap();
        let mut failed = Vec::new();
        // Disabled since the queue connected: everything comes back.
        assert!(rig.qp.fail_all(Status::ABORTED_SQ_DELETION, &mut failed));
        assert_eq!(failed.len(), 1);
        rig.ctrlr.enable().unwrap();
        rig.ctrlr.reconnect_io_qpair(&mut rig.qp).unwrap();
        assert_eq!(rig.ctrlr.health(), Health::Ok);
        write_read(&mut rig, &[(0, 4096)], 8, 4);
    }

    #[test]
    fn surprise_removal_reads_all_ones() {
        let mut rig = rig("removal", EmuOptions::default(), 16);
        rig.qp
            .submit(
                rw(1, false, 0, 1),
                Data::Main,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[(0, 512)], 1),
            )
            .map_err(|e| e.1)
            .unwrap();
        rig.emu.remove();
        rig.qp.flush();
        assert_eq!(rig.ctrlr.poll_admin(), Health::Removed);
        let mut failed = Vec::new();
        // The controller was not stopped: nothing is handed back while it
        // might still work on the commands; once it is disabled (it is
        // gone: bus mastering goes off), they come back.
        assert!(!rig.qp.fail_all(Status::ABORTED_SQ_DELETION, &mut failed));
        assert!(matches!(
            rig.ctrlr.exec(Sqe::new(0x06, 0, 0)),
            Err(bdevkit_nvme_driver::Error::Removed)
        ));
        assert!(rig.ctrlr.disable().is_err());
        assert!(rig.qp.fail_all(Status::ABORTED_SQ_DELETION, &mut failed));
        assert_eq!(failed.len() + wait(&mut rig.qp, 0).len(), 1);
    }

    #[test]
    fn namespace_change_event_rescans() {
        let rig = rig("aer", EmuOptions::default(), 16);
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        rig.ctrlr.set_event_handler(Box::new(move |ev| {
            let _ = tx.lock().unwrap().send(ev);
        }));
        rig.emu.add_namespace(EmuNamespace {
            nsid: 2,
            kind: EmuKind::Null,
            block_size: 512,
            num_blocks: 100,
        });
        let start = Instant::now();
        let mut ev = None;
        while ev.is_none() && start.elapsed() < Duration::from_secs(60) {
            rig.ctrlr.poll_admin();
            ev = rx.try_recv().ok();
        }
        assert!(ev.is_some(), "no event");
        assert_eq!(rig.ctrlr.namespaces().len(), 2);
    }

    /// Safe code cannot point the device at memory through the command
    /// itself: a command without data gets no data pointer (the device
    /// reaches nothing and reports a transfer error), vendor specific I/O
    /// commands are refused, and admin commands that carry host
    /// addresses (or take over the driver's queues) are refused.
    #[test]
    fn commands_cannot_smuggle_host_addresses() {
        let mut rig = rig("smuggle", EmuOptions::default(), 16);
        let decoy = vec![0xaau8; 8192];
        let at = (decoy.as_ptr() as u64 + 4095) & !4095;
        let mut sqe = rw(1, false, 0, 1);
        sqe.set_prps(at, 0);
        sqe.mptr.set(at);
        rig.qp
            .submit(
                sqe,
                Data::None,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[], 1),
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 1);
        assert_eq!(c.len(), 1);
        assert!(
            c[0].status().is(Status::DATA_TRANSFER_ERROR),
            "{}",
            c[0].status()
        );
        assert!(
            decoy.iter().all(|b| *b == 0xaa),
            "the device wrote the decoy"
        );
        // The same through the short path.
        let mut sqe = rw(1, false, 0, 1);
        sqe.set_prps(at, 0);
        rig.qp
            .submit_short(
                sqe,
                Data::None,
                bdevkit_nvme_driver::Dir::FromDevice,
                Req::new(&[], 1),
            )
            .map_err(|e| e.1)
            .unwrap();
        let c = wait(&mut rig.qp, 1);
        assert!(c[0].status().is(Status::DATA_TRANSFER_ERROR));
        assert!(decoy.iter().all(|b| *b == 0xaa));
        // Vendor specific I/O: the driver cannot vet its fields.
        let mut v = rw(1, false, 0, 1);
        v.opcode = 0x81;
        let r = rig.qp.submit(
            v,
            Data::None,
            bdevkit_nvme_driver::Dir::FromDevice,
            Req::new(&[], 1),
        );
        assert!(matches!(r, Err((_, SubmitError::Invalid))));
        // Admin: queue creation, doorbell buffers, host memory buffer,
        // vendor specific.
        let create_cq = bdevkit_nvme_spec::admin::CreateIoCq {
            qid: 9,
            qsize: 15,
            prp1: at,
            pc: true,
            ien: false,
            iv: 0,
        };
        assert!(rig.ctrlr.exec(create_cq.to_sqe(0)).is_err());
        let mut dbbuf = Sqe::new(0x7c, 0, 0);
        dbbuf.set_prps(at, at);
        assert!(rig.ctrlr.exec(dbbuf).is_err());
        let mut hmb = Sqe::new(0x09, 0, 0);
        hmb.cdw10.set(0x0d);
        hmb.cdw13.set(u32::try_from(at & 0xffff_ffff).unwrap());
        assert!(rig.ctrlr.exec(hmb).is_err());
        let (tx, rx) = std::sync::mpsc::channel();
        rig.ctrlr.submit_admin(
            Sqe::new(0xc1, 0, 0),
            None,
            Box::new(move |st, _, _| tx.send(st).unwrap()),
        );
        assert_eq!(rx.recv().unwrap(), Status::INVALID_OPCODE);
        // An admin command without data loses its pointer too: Get Log
        // Page with nowhere to write gets a transfer error.
        let mut log = Sqe::new(0x02, 0, 0);
        log.cdw10.set(0x02 | (127 << 16));
        log.set_prps(at, 0);
        let r = rig.ctrlr.exec(log);
        assert!(r.is_err() || !r.unwrap().status().is_success());
        assert!(decoy.iter().all(|b| *b == 0xaa));
        write_read(&mut rig, &[(0, 4096)], 0, 3);
    }
}
