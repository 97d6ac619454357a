//! Copies inside one process: file -> malloc bdev -> malloc bdev -> file
//! on one app, so that RAM bdevs can be read back (the binary's own
//! tests in `tests/` go through files and aio bdevs).

use std::path::{Path, PathBuf};

use bdevkit_app::{App, CommonArgs};

use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("bdev_dd-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An app with malloc bdevs M0 (4 KiB blocks) and M1 (512-byte blocks),
/// 1 MiB each.
fn app(dir: &Dir) -> App {
    let cfg = dir.path("bdevs.json");
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_malloc_create","params":{"name":"M0","num_blocks":256,"block_size":4096}},
            {"method":"bdev_malloc_create","params":{"name":"M1","num_blocks":2048,"block_size":512}}]}]}"#,
    )
    .unwrap();
    let common = CommonArgs {
        json: Some(cfg),
        interrupt_mode: true,
        ..CommonArgs::default()
    };
    App::start(&common, &bdevkit_app::default_modules()).unwrap()
}

fn file(path: &Path) -> Target {
    Target::File {
        path: path.to_path_buf(),
        flags: 0,
    }
}

fn bdev(name: &str) -> Target {
    Target::Bdev(name.into())
}

fn dd(
    app: &App,
    input: Target,
    output: Target,
    bs: u64,
    count: Option<u64>,
    skip: u64,
    seek: u64,
) -> Result<()> {
    let opts = Opts {
        input,
        output,
        bs,
        qd: 3,
        count,
        skip,
        seek,
        sparse: false,
        common: CommonArgs::default(),
        logging_asked: false,
    };
    run_copy(app, &opts, &mut Reporter::new())
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i.to_le_bytes()[0]).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9).to_le_bytes()[0]
        })
        .collect()
}

/// 700 001 bytes go to M0 at unit 2 (64 KiB units; the last block of M0
/// is read, merged and written back), M0 units 2..13 to M1 at 0, and M1
/// back to a file: the data, then zeroes to the end of the last unit.
#[test]
fn file_to_malloc_to_malloc_to_file() {
    let dir = Dir::new("chain");
    let app = app(&dir);
    let data = pattern(700_001, 7);
    std::fs::write(dir.path("in"), &data).unwrap();
    let bs = 64 << 10;
    dd(&app, file(&dir.path("in")), bdev("M0"), bs, None, 0, 2).unwrap();
    dd(&app, bdev("M0"), bdev("M1"), bs, Some(11), 2, 0).unwrap();
    dd(
        &app,
        bdev("M1"),
        file(&dir.path("out")),
        4096,
        Some(176),
        0,
        0,
    )
    .unwrap();
    let out = std::fs::read(dir.path("out")).unwrap();
    assert_eq!(out.len(), 176 * 4096);
    assert!(out[..data.len()] == data[..], "data differs");
    assert!(out[data.len()..].iter().all(|b| *b == 0));
    app.shutdown().unwrap();
}

/// A last unit shorter than the output's block keeps the rest of that
/// block as it was.
#[test]
fn short_last_unit_keeps_the_rest_of_the_block() {
    let dir = Dir::new("tail");
    let app = app(&dir);
    std::fs::write(dir.path("aa"), vec![0xaa; 8192]).unwrap();
    std::fs::write(dir.path("short"), pattern(1000, 1)).unwrap();
    dd(&app, file(&dir.path("aa")), bdev("M0"), 4096, None, 0, 0).unwrap();
    dd(&app, file(&dir.path("short")), bdev("M0"), 4096, None, 0, 1).unwrap();
    dd(
        &app,
        bdev("M0"),
        file(&dir.path("out")),
        4096,
        Some(2),
        0,
        0,
    )
    .unwrap();
    let out = std::fs::read(dir.path("out")).unwrap();
    assert!(out[..4096].iter().all(|b| *b == 0xaa), "unit 0 untouched");
    assert_eq!(out[4096..5096], pattern(1000, 1)[..]);
    assert!(
        out[5096..].iter().all(|b| *b == 0xaa),
        "rest of the block kept"
    );
    app.shutdown().unwrap();
}

/// Refusals name the side and leave the output file alone.
#[test]
fn refusals() {
    let dir = Dir::new("refuse");
    let app = app(&dir);
    std::fs::write(dir.path("keep"), b"keep me").unwrap();
    let e = dd(
        &app,
        bdev("M0"),
        file(&dir.path("keep")),
        4096,
        Some(300),
        0,
        0,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--count value too big (300) - only 256 blocks available from input"
    );
    assert_eq!(std::fs::read(dir.path("keep")).unwrap(), b"keep me");
    let e = dd(&app, bdev("M9"), bdev("M0"), 4096, None, 0, 0).unwrap_err();
    assert_eq!(e.to_string(), "Could not open bdev M9: No such device");
    let e = dd(&app, bdev("M1"), bdev("M0"), 2048, None, 0, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--bs value cannot be less than input (512) neither output (4096) native block size"
    );
    app.shutdown().unwrap();
}
