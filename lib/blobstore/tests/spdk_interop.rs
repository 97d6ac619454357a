//! The reverse direction: a store this library makes on a file loads in the
//! reference SPDK (spdk_tgt over an aio bdev): `bdev_lvol_get_lvstores` and
//! `bdev_lvol_get_lvols` show what was written, spdk_dd reads the thin
//! lvol's data back, and after SPDK's own clean unload this library loads
//! the store again. A copy taken before our unload (dirty) loads in SPDK
//! too. Runs when the reference build is present (`BDEVKIT_REF_SPDK` or
//! ~/.cache/bdevkit-ref-spdk); prints SKIPPED otherwise.

mod common;

#[cfg(test)]
mod tests {
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    use bdevkit_blobstore::{
        bstype, BlobDevice, BlobOptions, Blobstore, DeviceError, InitOptions, LoadOptions,
    };
    use serde_json::Value;

    use crate::common::{check_invariants, run, state};

    /// A file as a block device (blocking I/O: a test helper).
    struct FileDevice {
        file: File,
        block_size: u32,
        blocks: u64,
    }

    impl FileDevice {
        fn open(path: &Path, block_size: u32) -> Rc<Self> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .unwrap();
            let blocks = file.metadata().unwrap().len() / u64::from(block_size);
            Rc::new(FileDevice {
                file,
                block_size,
                blocks,
            })
        }
    }

    impl BlobDevice for FileDevice {
        fn block_size(&self) -> u32 {
            self.block_size
        }
        fn num_blocks(&self) -> u64 {
            self.blocks
        }
        async fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
            Ok(self
                .file
                .read_exact_at(buf, lba * u64::from(self.block_size))?)
        }
        async fn write(&self, lba: u64, buf: &[u8]) -> Result<(), DeviceError> {
            Ok(self
                .file
                .write_all_at(buf, lba * u64::from(self.block_size))?)
        }
        async fn unmap(&self, lba: u64, n: u64) -> Result<(), DeviceError> {
            self.write_zeroes(lba, n).await
        }
        async fn write_zeroes(&self, lba: u64, n: u64) -> Result<(), DeviceError> {
            let zeros = vec![0u8; 1 << 20];
            let (mut at, end) = (
                lba * u64::from(self.block_size),
                (lba + n) * u64::from(self.block_size),
            );
            while at < end {
                let k = usize::try_from((end - at).min(zeros.len() as u64)).unwrap();
                self.file.write_all_at(&zeros[..k], at)?;
                at += k as u64;
            }
            Ok(())
        }
    }

    fn spdk_dir() -> Option<PathBuf> {
        let dir = std::env::var_os("BDEVKIT_REF_SPDK")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/bdevkit-ref-spdk"))
            })?;
        (dir.join("build/bin/spdk_tgt").exists() && dir.join("scripts/rpc.py").exists())
            .then_some(dir)
    }

    /// A running spdk_tgt, killed on drop.
    struct Tgt {
        child: Child,
        spdk: PathBuf,
        sock: PathBuf,
    }

    impl Tgt {
        fn start(spdk: &Path, dir: &Path) -> Tgt {
            let sock = dir.join("spdk.sock");
            let log = File::create(dir.join("tgt.log")).unwrap();
            let child = Command::new(spdk.join("build/bin/spdk_tgt"))
                .args(["--no-huge", "-s", "2048", "--disable-cpumask-locks", "-r"])
                .arg(&sock)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let t = Tgt {
                child,
                spdk: spdk.to_path_buf(),
                sock,
            };
            let start = Instant::now();
            while t.try_rpc(&["rpc_get_methods"]).is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "spdk_tgt did not start"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            t
        }

        fn try_rpc(&self, args: &[&str]) -> Option<Value> {
            let out = Command::new(self.spdk.join("scripts/rpc.py"))
                .arg("-s")
                .arg(&self.sock)
                .args(args)
                .stderr(Stdio::null())
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            let s = String::from_utf8_lossy(&out.stdout);
            Some(serde_json::from_str(&s).unwrap_or(Value::String(s.trim().to_string())))
        }

        fn rpc(&self, args: &[&str]) -> Value {
            self.try_rpc(args)
                .unwrap_or_else(|| panic!("rpc {args:?} failed"))
        }

        /// Clean shutdown: SPDK unloads the lvstore.
        fn stop(mut self) {
            self.rpc(&["spdk_kill_instance", "SIGTERM"]);
            let _ = self.child.wait();
        }
    }

    impl Drop for Tgt {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    const LVS_UUID: &str = "1b7c9d0e-2f3a-4b5c-8d6e-7f8091a2b3c4";
    const THICK_UUID: &str = "2c8dae1f-3a4b-4c5d-9e6f-8091a2b3c4d5";
    const THIN_UUID: &str = "3d9ebf20-4b5c-4d6e-af70-91a2b3c4d5e6";
    const THIN2_UUID: &str = "4eafc031-5c6d-4e7f-8081-a2b3c4d5e6f7";
    const RLE_UUID: &str = "5fb0d142-6d7e-4f80-9192-b3c4d5e6f708";

    fn lvol_name(name: &str) -> Vec<u8> {
        let mut v = name.as_bytes().to_vec();
        v.resize(64, 0); // lvol stores names as SPDK_LVOL_NAME_MAX bytes
        v
    }

    fn cstr(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    }

    /// Makes the store as the lvol module would; returns the thin lvol's
    /// data cluster LBA (blocks of 4096).
    fn make_store(path: &Path) -> u64 {
        let dev = FileDevice::open(path, 4096);
        let lvol = |name: &str, uuid: &str| {
            vec![
                ("name".into(), lvol_name(name)),
                ("uuid".into(), cstr(uuid)),
            ]
        };
        run(async {
            let opts = InitOptions {
                cluster_size: 1 << 20,
                bstype: bstype("LVOLSTORE"),
                ..InitOptions::default()
            };
            let bs = Blobstore::init(dev.clone(), &opts).await.unwrap();
            let sb = bs
                .create_blob(&BlobOptions {
                    xattrs: vec![
                        ("uuid".into(), cstr(LVS_UUID)),
                        ("name".into(), cstr("ourlvs")),
                    ],
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            bs.set_super_blob(Some(sb)).await.unwrap();
            // Two large extra xattrs: a chain of three pages.
            let mut xattrs = lvol("thick1", THICK_UUID);
            xattrs.push(("x1".into(), vec![1; 3000]));
            xattrs.push(("x2".into(), vec![2; 3000]));
            bs.create_blob(&BlobOptions {
                num_clusters: 8,
                xattrs,
                ..BlobOptions::default()
            })
            .await
            .unwrap();
            let thin = bs
                .create_blob(&BlobOptions {
                    num_clusters: 16,
                    thin_provision: true,
                    xattrs: lvol("thin1", THIN_UUID),
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(thin).unwrap();
            let lba = b.allocate_cluster(3).await.unwrap();
            dev.write(lba, &vec![0xA5u8; 1 << 20]).await.unwrap();
            drop(b);
            // A large thin blob: an extent table with a run of missing pages.
            let big = bs
                .create_blob(&BlobOptions {
                    num_clusters: 2000,
                    thin_provision: true,
                    xattrs: lvol("thin2", THIN2_UUID),
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            let b = bs.open_blob(big).unwrap();
            b.allocate_cluster(0).await.unwrap();
            b.allocate_cluster(1600).await.unwrap();
            drop(b);
            // RLE extents, as older SPDK wrote them.
            let rle = bs
                .create_blob(&BlobOptions {
                    num_clusters: 8,
                    thin_provision: true,
                    use_extent_table: false,
                    xattrs: lvol("rle1", RLE_UUID),
                    ..BlobOptions::default()
                })
                .await
                .unwrap();
            bs.open_blob(rle)
                .unwrap()
                .allocate_cluster(5)
                .await
                .unwrap();
            lba
        })
    }

    fn check_spdk_view(tgt: &Tgt, lvs_name: &str, max_growable: u64) {
        let start = Instant::now();
        let lvs = loop {
            if let Some(v) = tgt.try_rpc(&["bdev_lvol_get_lvstores", "-l", lvs_name]) {
                break v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "SPDK did not load the lvstore"
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let lvs = &lvs[0];
        eprintln!("spdk_interop: bdev_lvol_get_lvstores: {lvs}");
        assert_eq!(lvs["uuid"], LVS_UUID);
        assert_eq!(lvs["name"], "ourlvs");
        assert_eq!(lvs["cluster_size"], 1 << 20);
        assert_eq!(lvs["block_size"], 4096);
        assert_eq!(lvs["total_data_clusters"], 63);
        assert_eq!(lvs["free_clusters"], 63 - 12);
        assert_eq!(lvs["max_growable_size"], max_growable);
        let lvols = tgt.rpc(&["bdev_lvol_get_lvols", "-l", lvs_name]);
        eprintln!("spdk_interop: bdev_lvol_get_lvols: {lvols}");
        let lvols = lvols.as_array().unwrap();
        assert_eq!(lvols.len(), 4);
        for l in lvols {
            let name = l["name"].as_str().unwrap();
            let (uuid, thin, alloc, mib) = match name {
                "thick1" => (THICK_UUID, false, 8, 8),
                "thin1" => (THIN_UUID, true, 1, 16),
                "thin2" => (THIN2_UUID, true, 2, 2000),
                "rle1" => (RLE_UUID, true, 1, 8),
                other => panic!("unexpected lvol {other}"),
            };
            assert_eq!(l["uuid"], uuid);
            assert_eq!(l["alias"], format!("ourlvs/{name}"));
            assert_eq!(l["is_thin_provisioned"], thin);
            assert_eq!(l["num_allocated_clusters"], alloc);
            assert_eq!(l["lvs"]["uuid"], LVS_UUID);
            let bdev = tgt.rpc(&["bdev_get_bdevs", "-b", &format!("ourlvs/{name}")]);
            assert_eq!(bdev[0]["num_blocks"], mib * 256, "size of {name}");
        }
    }

    #[test]
    fn spdk_loads_our_store() {
        let Some(spdk) = spdk_dir() else {
            eprintln!("SKIPPED spdk_interop: no reference SPDK build (set BDEVKIT_REF_SPDK or build ~/.cache/bdevkit-ref-spdk)");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("ours.img");
        File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let lba = make_store(&img);
        let dirty = dir.path().join("ours-dirty.img");
        std::fs::copy(&img, &dirty).unwrap();
        let (before, max_growable) = {
            let bs = run(Blobstore::load(
                FileDevice::open(&img, 4096),
                &LoadOptions::default(),
            ))
            .unwrap();
            let s = (state(&bs), bs.info().max_growable_size);
            run(bs.unload()).unwrap();
            s
        };

        // Clean: SPDK loads it, and reads the thin lvol's data.
        let tgt = Tgt::start(&spdk, dir.path());
        tgt.rpc(&["bdev_aio_create", img.to_str().unwrap(), "aio0", "4096"]);
        check_spdk_view(&tgt, "ourlvs", max_growable);
        tgt.stop();
        let conf = dir.path().join("dd.json");
        std::fs::write(
            &conf,
            format!(
                r#"{{"subsystems":[{{"subsystem":"bdev","config":[{{"method":"bdev_aio_create","params":{{"name":"aio0","filename":"{}","block_size":4096}}}}]}}]}}"#,
                img.display()
            ),
        )
        .unwrap();
        let out = dir.path().join("thin1.out");
        let st = Command::new(spdk.join("build/bin/spdk_dd"))
            .args([
                "--no-huge",
                "-s",
                "512",
                "--disable-cpumask-locks",
                "--json",
            ])
            .arg(&conf)
            .arg("--ib=ourlvs/thin1")
            .arg(format!("--of={}", out.display()))
            .args(["--bs=1048576", "--count=16"])
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "spdk_dd: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        let data = std::fs::read(&out).unwrap();
        assert_eq!(data.len(), 16 << 20);
        for (i, mib) in data.chunks(1 << 20).enumerate() {
            let want = if i == 3 { 0xA5 } else { 0 };
            assert!(
                mib.iter().all(|&b| b == want),
                "thin1 MiB {i} read through SPDK"
            );
        }
        assert_eq!(
            lba,
            (1 + 8) * 256,
            "the thin lvol's cluster follows the metadata and the thick lvol"
        );

        // After SPDK's own unload, this library loads it clean, unchanged.
        let bs = run(Blobstore::load(
            FileDevice::open(&img, 4096),
            &LoadOptions::default(),
        ))
        .unwrap();
        assert!(bs.info().clean_on_disk);
        assert_eq!(state(&bs), before);
        check_invariants(&bs);

        // Dirty (never unloaded): SPDK recovers it.
        let tgt = Tgt::start(&spdk, dir.path());
        tgt.rpc(&["bdev_aio_create", dirty.to_str().unwrap(), "aio1", "4096"]);
        check_spdk_view(&tgt, "ourlvs", max_growable);
        drop(tgt);
        eprintln!("spdk_interop: SPDK loaded our store clean and dirty");
    }
}
