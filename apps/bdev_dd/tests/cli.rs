//! End-to-end tests of the bdev_dd binary: files, aio (and uring) bdevs
//! over temporary files from a `--json` config, the copy arithmetic seen
//! from outside (`--skip`, `--seek`, `--count`), `--sparse`, `direct`,
//! and bad input (one error line, exit status 1).

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("bdev_dd-cli-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }

        /// A `--json` config with the given bdev entries.
        fn config(&self, entries: &[String]) -> PathBuf {
            let p = self.path("bdevs.json");
            let body = format!(
                r#"{{"subsystems":[{{"subsystem":"bdev","config":[{}]}}]}}"#,
                entries.join(",")
            );
            std::fs::write(&p, body).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A bdev of `module` (aio or uring) named `name` over a new file of
    /// `size` bytes filled with `fill`.
    fn kernel_bdev(
        dir: &Dir,
        module: &str,
        name: &str,
        size: usize,
        fill: u8,
    ) -> (String, PathBuf) {
        let disk = dir.path(&format!("{name}.img"));
        std::fs::write(&disk, vec![fill; size]).unwrap();
        let entry = format!(
            r#"{{"method":"bdev_{module}_create","params":{{"name":"{name}","filename":"{}","block_size":512}}}}"#,
            disk.display()
        );
        (entry, disk)
    }

    fn dd(args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_bdev_dd"))
            .args(args)
            .arg("--interrupt-mode")
            .output()
            .unwrap()
    }

    fn s(p: &Path) -> &str {
        p.to_str().unwrap()
    }

    fn stderr(o: &Output) -> String {
        String::from_utf8_lossy(&o.stderr).into_owned()
    }

    fn ok(o: &Output) {
        assert!(
            o.status.success(),
            "bdev_dd failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        );
        assert!(
            stderr(o).contains("(average "),
            "no final progress line:\n{}",
            stderr(o)
        );
    }

    /// Fails with exactly one line on stderr, `bdev_dd: error: MSG`.
    fn fails(o: &Output, msg: &str) {
        let err = stderr(o);
        assert_eq!(o.status.code(), Some(1), "stderr:\n{err}");
        assert_eq!(err.lines().count(), 1, "one line:\n{err}");
        assert_eq!(err.trim_end(), format!("bdev_dd: error: {msg}"));
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i.to_le_bytes()[0]).wrapping_mul(29).wrapping_add(seed)
                    ^ (i >> 11).to_le_bytes()[0]
            })
            .collect()
    }

    fn uring_available() -> bool {
        match bdevkit_uring::available() {
            Ok(()) => true,
            Err(e) => {
                println!("uring part skipped: io_uring not available: {e}");
                false
            }
        }
    }

    /// File -> kernel bdev at unit 1 -> file from unit 1: the backing
    /// file holds the data where --seek put it, and the copy back equals
    /// the input followed by the bdev's old bytes up to the last unit.
    fn file_bdev_file(module: &str) {
        let dir = Dir::new(module);
        let (entry, disk) = kernel_bdev(&dir, module, "K0", 1 << 20, 0x11);
        let cfg = dir.config(&[entry]);
        let data = pattern(300_001, 3);
        std::fs::write(dir.path("in"), &data).unwrap();
        let (inp, out) = (dir.path("in"), dir.path("out"));
        ok(&dd(&[
            "--json",
            s(&cfg),
            "--if",
            s(&inp),
            "--ob",
            "K0",
            "--bs",
            "64k",
            "--seek",
            "1",
            "--qd",
            "4",
        ]));
        let img = std::fs::read(&disk).unwrap();
        assert!(
            img[..65536].iter().all(|b| *b == 0x11),
            "before --seek untouched"
        );
        assert!(img[65536..65536 + data.len()] == data[..], "data at --seek");
        assert!(
            img[65536 + data.len()..].iter().all(|b| *b == 0x11),
            "after the data untouched"
        );
        ok(&dd(&[
            "--json",
            s(&cfg),
            "--ib",
            "K0",
            "--of",
            s(&out),
            "--bs",
            "64k",
            "--skip",
            "1",
            "--count",
            "5",
        ]));
        let back = std::fs::read(&out).unwrap();
        assert_eq!(back.len(), 5 * 65536);
        assert!(back[..data.len()] == data[..]);
        assert!(back[data.len()..].iter().all(|b| *b == 0x11));
    }

    #[test]
    fn file_aio_file() {
        file_bdev_file("aio");
    }

    #[test]
    fn file_uring_file() {
        if uring_available() {
            file_bdev_file("uring");
        }
    }

    /// bdev -> bdev with --skip, --seek and --count.
    #[test]
    fn aio_to_aio() {
        let dir = Dir::new("a2a");
        let (e0, d0) = kernel_bdev(&dir, "aio", "A0", 256 << 10, 0);
        let (e1, d1) = kernel_bdev(&dir, "aio", "A1", 256 << 10, 0x22);
        std::fs::write(&d0, pattern(256 << 10, 9)).unwrap();
        let cfg = dir.config(&[e0, e1]);
        ok(&dd(&[
            "--json",
            s(&cfg),
            "--ib",
            "A0",
            "--ob",
            "A1",
            "--bs",
            "8192",
            "--skip",
            "3",
            "--seek",
            "10",
            "--count",
            "7",
        ]));
        let (src, dst) = (std::fs::read(&d0).unwrap(), std::fs::read(&d1).unwrap());
        assert!(dst[..10 * 8192].iter().all(|b| *b == 0x22));
        assert!(dst[10 * 8192..17 * 8192] == src[3 * 8192..10 * 8192]);
        assert!(dst[17 * 8192..].iter().all(|b| *b == 0x22));
    }

    /// file -> file: the output is truncated, holds zeroes before --seek
    /// and ends with the copy.
    #[test]
    fn file_to_file_with_units() {
        let dir = Dir::new("f2f");
        let data = pattern(100_000, 5);
        std::fs::write(dir.path("in"), &data).unwrap();
        std::fs::write(dir.path("out"), vec![0x33; 1 << 20]).unwrap();
        let (inp, out) = (dir.path("in"), dir.path("out"));
        ok(&dd(&[
            "--if",
            s(&inp),
            "--of",
            s(&out),
            "--bs",
            "4k",
            "--skip",
            "2",
            "--seek",
            "1",
        ]));
        let back = std::fs::read(&out).unwrap();
        assert_eq!(back.len(), 4096 + data.len() - 8192);
        assert!(back[..4096].iter().all(|b| *b == 0));
        assert!(back[4096..] == data[8192..]);
        // --count from a character device.
        ok(&dd(&["--if", "/dev/zero", "--of", s(&out), "--count", "3"]));
        assert_eq!(std::fs::read(&out).unwrap(), vec![0; 3 * 4096]);
    }

    /// --sparse: units in holes or all zero are not written; an output
    /// file still gets the whole length, and reads back equal.
    #[test]
    fn sparse_file_to_file_and_bdev() {
        use std::os::unix::fs::FileExt;
        let dir = Dir::new("sparse");
        let inp = dir.path("in");
        let f = std::fs::File::create(&inp).unwrap();
        f.write_all_at(&pattern(4096, 1), 64 << 10).unwrap();
        f.write_all_at(&pattern(8192, 2), 512 << 10).unwrap();
        // Data the file system stores, but zeroes.
        f.write_all_at(&[0u8; 4096], 256 << 10).unwrap();
        f.set_len(1 << 20).unwrap();
        drop(f);
        let out = dir.path("out");
        let o = dd(&["--if", s(&inp), "--of", s(&out), "--sparse"]);
        ok(&o);
        assert!(
            stderr(&o).contains("1036288 of 1048576 bytes not written"),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&inp).unwrap());
        let m = std::fs::metadata(&out).unwrap();
        assert_eq!(m.len(), 1 << 20);
        assert!(
            m.blocks() * 512 < 512 << 10,
            "output not sparse: {} blocks",
            m.blocks()
        );

        // Onto a bdev, skipped units keep what the bdev had (spdk_dd).
        let (entry, disk) = kernel_bdev(&dir, "aio", "A0", 1 << 20, 0x44);
        let cfg = dir.config(&[entry]);
        ok(&dd(&[
            "--json",
            s(&cfg),
            "--if",
            s(&inp),
            "--ob",
            "A0",
            "--sparse",
        ]));
        let img = std::fs::read(&disk).unwrap();
        assert!(img[..64 << 10].iter().all(|b| *b == 0x44));
        assert_eq!(img[64 << 10..68 << 10], pattern(4096, 1)[..]);
        assert!(img[256 << 10..260 << 10].iter().all(|b| *b == 0x44));
        assert_eq!(img[512 << 10..520 << 10], pattern(8192, 2)[..]);
    }

    /// `direct` files: a last unit shorter than a block is written
    /// rounded up, and the file cut back to its length.
    #[test]
    fn direct_output_file() {
        let dir = Dir::new("direct");
        let data = pattern(10_000, 8);
        std::fs::write(dir.path("in"), &data).unwrap();
        let (inp, out) = (dir.path("in"), dir.path("out"));
        let o = dd(&[
            "--if",
            s(&inp),
            "--iflag",
            "direct",
            "--of",
            s(&out),
            "--oflag",
            "direct,dsync",
        ]);
        if stderr(&o).contains("Invalid argument") {
            println!("skipped: the temp dir's file system has no O_DIRECT");
            return;
        }
        ok(&o);
        assert_eq!(std::fs::read(&out).unwrap(), data);
    }

    #[test]
    fn bad_input() {
        let dir = Dir::new("bad");
        let (entry, _) = kernel_bdev(&dir, "aio", "A0", 64 << 10, 0);
        let cfg = dir.config(&[entry]);
        let cfg = s(&cfg);
        let out = dir.path("out");
        let out = s(&out);
        fails(
            &dd(&["--json", cfg, "--ib", "Nope", "--of", out]),
            "Could not open bdev Nope: No such device",
        );
        fails(
            &dd(&["--if", "/nonexistent/in", "--of", out]),
            "Could not open file /nonexistent/in: No such file or directory",
        );
        fails(
            &dd(&["--json", cfg, "--ib", "A0", "--of", out, "--bs", "1000"]),
            "--bs value must be a multiple of input native block size (512)",
        );
        fails(
            &dd(&["--json", cfg, "--ib", "A0", "--of", out, "--bs", "256"]),
            "--bs value cannot be less than input (512) neither output (1) native block size",
        );
        fails(
            &dd(&["--json", cfg, "--ib", "A0", "--of", out, "--count", "17"]),
            "--count value too big (17) - only 16 blocks available from input",
        );
        fails(
            &dd(&[
                "--json",
                cfg,
                "--if",
                "/dev/zero",
                "--ob",
                "A0",
                "--count",
                "10",
                "--seek",
                "7",
            ]),
            "--count value too big (10) - only 9 blocks available in output",
        );
        fails(
            &dd(&["--json", cfg, "--ib", "A0", "--of", out, "--skip", "17"]),
            "--skip value too big (17) - only 16 blocks available in input",
        );
        fails(
            &dd(&["--if", "a", "--ib", "b", "--of", out]),
            "You may specify either --if or --ib, but not both.",
        );
        fails(&dd(&["--if", "a"]), "You must specify either --of or --ob");
        fails(
            &dd(&["--if", "a", "--of", out, "--iflag", "bogus"]),
            "Unknown file flag: bogus",
        );
        fails(
            &dd(&["--if", "/dev/zero", "--of", out]),
            "--count must be given: the input has no size (a character device)",
        );
        let o = dd(&["--json", "/nonexistent/cfg.json", "--ib", "A0", "--of", out]);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(
            stderr(&o).contains("/nonexistent/cfg.json"),
            "{}",
            stderr(&o)
        );
    }
}
