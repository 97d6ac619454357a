//! Compiles the engine's C shim against the headers of the installed fio.
//!
//! fio's engine structure (`struct ioengine_ops`) and its version change
//! between fio releases, so the shim (`csrc/engine.c`) is compiled against
//! a configured fio source of exactly the fio that will load the engine:
//! `$FIO_SRC`, or the cache `scripts/fetch-fio-src.sh` fills
//! (`$BDEVKIT_FIO_CACHE`, default `~/.cache/bdevkit-fio/current`). Without
//! one the crate still builds, with `csrc/noheaders.c`: the library then
//! says "built without fio headers" when fio loads it, so a fresh
//! workspace build never needs fio.

use std::path::{Path, PathBuf};

fn env_path(key: &str) -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed={key}");
    std::env::var_os(key)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where the fio source is, if anywhere.
fn fio_src() -> Option<PathBuf> {
    if let Some(p) = env_path("FIO_SRC") {
        return Some(p);
    }
    let cache = env_path("BDEVKIT_FIO_CACHE").or_else(|| {
        env_path("XDG_CACHE_HOME")
            .or_else(|| env_path("HOME").map(|h| h.join(".cache")))
            .map(|c| c.join("bdevkit-fio"))
    })?;
    let current = cache.join("current");
    println!("cargo:rerun-if-changed={}", current.display());
    current.exists().then_some(current)
}

/// The fio version the source is of (`fio_version_string` of that fio):
/// `DEF_VER` of FIO-VERSION-GEN, as fio's build without git uses it.
fn fio_version(src: &Path) -> Option<String> {
    let gen = std::fs::read_to_string(src.join("FIO-VERSION-GEN")).ok()?;
    gen.lines()
        .find_map(|l| l.strip_prefix("DEF_VER="))
        .map(|v| v.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=csrc/engine.c");
    println!("cargo:rerun-if-changed=csrc/noheaders.c");
    let src = fio_src().filter(|s| {
        ["fio.h", "ioengines.h", "config-host.h"]
            .iter()
            .all(|f| s.join(f).is_file())
    });
    let mut build = cc::Build::new();
    build.warnings(false).flag_if_supported("-std=gnu11");
    match src.as_ref().and_then(|s| fio_version(s).map(|v| (s, v))) {
        Some((src, version)) => {
            for f in [
                "fio.h",
                "ioengines.h",
                "io_u.h",
                "thread_options.h",
                "config-host.h",
            ] {
                println!("cargo:rerun-if-changed={}", src.join(f).display());
            }
            build
                .file("csrc/engine.c")
                .include(src)
                .flag("-include")
                .flag(src.join("config-host.h").to_string_lossy().as_ref())
                .define("_GNU_SOURCE", None)
                .define("_LARGEFILE_SOURCE", None)
                .define("_FILE_OFFSET_BITS", "64")
                .define("BK_FIO_BUILT_FOR", format!("\"{version}\"").as_str());
            println!("cargo:rustc-env=BDEVKIT_FIO_BUILT_FOR={version}");
        }
        None => {
            build.file("csrc/noheaders.c");
            println!("cargo:rustc-env=BDEVKIT_FIO_BUILT_FOR=");
        }
    }
    build.compile("bdevkit_fio_shim");
}
