//! The README's shell blocks for the daemon run as pasted, in order, on a
//! fresh `bdev_tgt`, so that they cannot go stale.
//!
//! A block is for the daemon when it runs `bdev_tgt`, `spdk-rpc` or
//! `bdev_rpc`. Its commands run one after the other with `sh -c` in a
//! temporary directory (files such as `config.json` land there), each of
//! which must exit 0, with only these changes:
//!
//! * every `/var/tmp/NAME` (the sockets) becomes `TMPDIR/NAME`, and a
//!   `bdev_tgt` without `-r` gets its default socket, so nothing touches a
//!   daemon of the machine;
//! * `target/release/BIN` is the binary of the build this test runs in,
//!   `spdk-rpc` the client `bdevkit_test::spdk_rpc` finds;
//! * `bdev_tgt` and `bdevperf` get `--interrupt-mode` where they lack it
//!   (tests never spin cores; results do not matter here);
//! * a command ending in `&` starts in the background, and the next one
//!   runs once its `-r` socket answers; whatever still runs at the end is
//!   stopped with SIGTERM, and each must exit 0.
//!
//! Any other program (`cargo` included: the quick start's first command,
//! `cargo build --release`, builds every tool the page uses, which this
//! test checks too) fails the test, so a new kind of line needs a rule
//! here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bdevkit_jsonrpc::Client;
use bdevkit_test::daemon::{bin, temp_dir, TIMEOUT};
use bdevkit_test::spdk_rpc::{repo_root, spdk_rpc};

/// Longest one README command may take (bdevperf runs of a few seconds in
/// a debug build); reached only when something hangs.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// A command of a shell block and its line in the README.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cmd {
    line: usize,
    text: String,
}

/// The lines of each ```` ```sh ```` block, with their (1-based) numbers.
fn sh_blocks(md: &str) -> Vec<Vec<(usize, &str)>> {
    let mut blocks = Vec::new();
    let mut cur: Option<Vec<(usize, &str)>> = None;
    for (i, line) in md.lines().enumerate() {
        let t = line.trim();
        match &mut cur {
            None if t == "```sh" || t == "```bash" || t == "```shell" => cur = Some(Vec::new()),
            None => {}
            Some(_) if t == "```" => blocks.extend(cur.take()),
            Some(b) => b.push((i + 1, line)),
        }
    }
    blocks
}

/// `line` up to an unquoted `#` that starts a word (a shell comment).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev_space) = (false, false, true);
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return &line[..i],
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// A block's commands: comments and blank lines dropped, `\` continuations
/// joined.
fn commands(block: &[(usize, &str)]) -> Vec<Cmd> {
    let mut out: Vec<Cmd> = Vec::new();
    let mut pending: Option<Cmd> = None;
    for &(no, raw) in block {
        let text = strip_comment(raw).trim();
        let (text, more) = match text.strip_suffix('\\') {
            Some(t) => (t.trim_end(), true),
            None => (text, false),
        };
        let cmd = match pending.take() {
            Some(mut p) => {
                p.text.push(' ');
                p.text.push_str(text);
                p
            }
            None if text.is_empty() => continue,
            None => Cmd {
                line: no,
                text: text.to_string(),
            },
        };
        if more {
            pending = Some(cmd);
        } else {
            out.push(cmd);
        }
    }
    out.extend(pending);
    out
}

/// The program a command runs (its first word).
fn program(cmd: &str) -> &str {
    cmd.split_whitespace().next().unwrap_or("")
}

/// Whether the block talks to the daemon.
fn for_the_daemon(cmds: &[Cmd]) -> bool {
    cmds.iter().any(|c| {
        matches!(
            program(&c.text),
            "spdk-rpc" | "target/release/bdev_tgt" | "target/release/bdev_rpc"
        )
    })
}

/// Every `/var/tmp/NAME` in `cmd` as `dir/NAME`.
fn private_paths(cmd: &str, dir: &Path) -> String {
    const PREFIX: &str = "/var/tmp/";
    let mut out = String::new();
    let mut rest = cmd;
    while let Some(i) = rest.find(PREFIX) {
        out.push_str(&rest[..i]);
        let after = &rest[i + PREFIX.len()..];
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
            .unwrap_or(after.len());
        out.push_str(&dir.join(&after[..end]).to_string_lossy());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn has_word(cmd: &str, words: &[&str]) -> bool {
    cmd.split_whitespace().any(|w| words.contains(&w))
}

/// The socket after `-r` in a command.
fn socket_arg(cmd: &str) -> Option<PathBuf> {
    let mut words = cmd.split_whitespace();
    words.find(|w| *w == "-r" || *w == "--rpc-socket")?;
    words.next().map(PathBuf::from)
}

/// One README command as this test runs it; `Err` for a line it has no
/// rule for.
fn rewrite(cmd: &Cmd, dir: &Path, spdk_rpc: &Path) -> Result<(String, bool), String> {
    let mut text = cmd.text.clone();
    let background = text.ends_with('&') && !text.ends_with("&&");
    if background {
        text.pop();
        text = text.trim_end().to_string();
    }
    let prog = program(&text).to_string();
    let args = text[prog.len()..].to_string();
    let exe = match prog.as_str() {
        "spdk-rpc" => spdk_rpc.to_path_buf(),
        p => match p.strip_prefix("target/release/") {
            Some(name) => bin(name),
            None => {
                return Err(format!(
                    "README line {}: no rule to run `{p}` (test/tests/e2e/readme.rs)",
                    cmd.line
                ))
            }
        },
    };
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut args = args;
    if matches!(name.as_str(), "spdk-rpc" | "bdev_rpc") && !has_word(&args, &["-s"]) {
        return Err(format!(
            "README line {}: give {name} its socket with -s",
            cmd.line
        ));
    }
    if name == "bdev_tgt" && !has_word(&args, &["-r", "--rpc-socket"]) {
        args.push_str(" -r /var/tmp/bdevkit.sock");
    }
    if matches!(name.as_str(), "bdev_tgt" | "bdevperf") && !has_word(&args, &["--interrupt-mode"]) {
        args.push_str(" --interrupt-mode");
    }
    if background && socket_arg(&args).is_none() {
        return Err(format!(
            "README line {}: a background {name} needs -r (its socket)",
            cmd.line
        ));
    }
    let line = format!("'{}'{}", exe.display(), private_paths(&args, dir));
    Ok((line, background))
}

/// A command started with `&`.
struct Background {
    line: usize,
    child: Child,
    log: PathBuf,
}

/// The README's daemon session: its directory and what runs in the
/// background (killed on drop if the test fails half-way).
struct Session {
    dir: tempfile::TempDir,
    spdk_rpc: PathBuf,
    background: Vec<Background>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for b in &mut self.background {
            let _ = b.child.kill();
            let _ = b.child.wait();
        }
    }
}

impl Session {
    fn logs(&self) -> String {
        self.background
            .iter()
            .map(|b| {
                format!(
                    "--- background command of README line {}:\n{}",
                    b.line,
                    std::fs::read_to_string(&b.log).unwrap_or_default()
                )
            })
            .collect()
    }

    fn run(&mut self, cmd: &Cmd) {
        let (line, background) =
            rewrite(cmd, self.dir.path(), &self.spdk_rpc).unwrap_or_else(|e| panic!("{e}"));
        if background {
            self.start(cmd, &line);
            return;
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&line)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("invariant: sh runs");
        let start = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > COMMAND_TIMEOUT {
                let _ = child.kill();
                panic!("README line {}: `{}` did not finish", cmd.line, cmd.text);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("invariant: child output");
        assert!(
            out.status.success(),
            "README line {}: `{}` failed ({})\nran: {line}\nstdout:\n{}\nstderr:\n{}\n{}",
            cmd.line,
            cmd.text,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
    }

    /// Starts a `&` command and waits until its socket answers.
    fn start(&mut self, cmd: &Cmd, line: &str) {
        let log = self.dir.path().join(format!("line{}.log", cmd.line));
        let out = std::fs::File::create(&log).expect("invariant: log in temp dir");
        let err = out.try_clone().expect("invariant: clone log file");
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {line}"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("invariant: sh runs");
        self.background.push(Background {
            line: cmd.line,
            child,
            log,
        });
        let socket = socket_arg(line).expect("invariant: checked by rewrite");
        let start = Instant::now();
        loop {
            let b = self.background.last_mut().expect("invariant: just pushed");
            if let Some(st) = b.child.try_wait().ok().flatten() {
                panic!(
                    "README line {}: `{}` exited ({st}) before it answered\n{}",
                    cmd.line,
                    cmd.text,
                    self.logs()
                );
            }
            if let Ok(mut c) = Client::connect_unix(&socket) {
                c.set_timeout(Some(TIMEOUT));
                if c.call("spdk_get_version", None).is_ok() {
                    return;
                }
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "README line {}: no answer on {}\n{}",
                cmd.line,
                socket.display(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops what still runs (SIGTERM) and checks that everything that ran
    /// in the background exited 0.
    fn finish(&mut self) {
        let mut bad = Vec::new();
        for b in &mut self.background {
            if b.child.try_wait().ok().flatten().is_none() {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(b.child.id().to_string())
                    .status();
            }
            let st = wait_exit(&mut b.child);
            if !st.is_some_and(|s| s.success()) {
                bad.push(format!("README line {}: exited {st:?}", b.line));
            }
        }
        assert!(bad.is_empty(), "{}\n{}", bad.join("\n"), self.logs());
    }
}

fn wait_exit(child: &mut Child) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().ok().flatten() {
            return Some(st);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn readme_daemon_blocks_run_as_pasted() {
    let Some(exe) = spdk_rpc() else { return };
    let readme = std::fs::read_to_string(repo_root().join("README.md"))
        .expect("invariant: README.md at the repository root");
    let blocks: Vec<Vec<Cmd>> = sh_blocks(&readme).iter().map(|b| commands(b)).collect();
    // The first build builds the whole workspace: what `cargo run --bin`
    // resolves features for too, so nothing later on the page rebuilds.
    let build = blocks
        .iter()
        .flatten()
        .next()
        .expect("README has shell blocks");
    assert_eq!(
        build.text, "cargo build --release",
        "README line {}: the first command builds every tool the page uses",
        build.line
    );
    let blocks: Vec<Vec<Cmd>> = blocks.into_iter().filter(|c| for_the_daemon(c)).collect();
    let all: Vec<&Cmd> = blocks.iter().flatten().collect();
    let first = all
        .first()
        .expect("README has a shell block for the daemon");
    assert!(
        program(&first.text) == "target/release/bdev_tgt" && first.text.ends_with('&'),
        "README line {}: the daemon's blocks start a fresh bdev_tgt in the background, got `{}`",
        first.line,
        first.text
    );
    for prog in ["spdk-rpc", "target/release/bdev_rpc"] {
        assert!(
            all.iter().any(|c| program(&c.text) == prog),
            "README's daemon blocks never run {prog}"
        );
    }
    let mut s = Session {
        dir: temp_dir(),
        spdk_rpc: exe,
        background: Vec::new(),
    };
    for c in all {
        s.run(c);
    }
    s.finish();
}

#[test]
fn blocks_commands_and_rewrites() {
    let md = "text\n```sh\n# a comment\nspdk-rpc -s /var/tmp/x.sock a \\\n  b   # trailing\n\n\
              target/release/bdev_tgt -m 0x1 &   # socket /var/tmp/bdevkit.sock\n```\n\
              ```text\nnot shell\n```\n```sh\ncargo build\n```\n";
    let blocks = sh_blocks(md);
    assert_eq!(blocks.len(), 2);
    let cmds = commands(&blocks[0]);
    assert_eq!(
        cmds,
        [
            Cmd {
                line: 4,
                text: "spdk-rpc -s /var/tmp/x.sock a b".into()
            },
            Cmd {
                line: 7,
                text: "target/release/bdev_tgt -m 0x1 &".into()
            },
        ]
    );
    assert!(for_the_daemon(&cmds));
    assert!(!for_the_daemon(&commands(&blocks[1])));
    assert_eq!(strip_comment(r#"a -b "x # y" # z"#), r#"a -b "x # y" "#);
    assert_eq!(strip_comment("a#b"), "a#b");

    let dir = Path::new("/tmp/d");
    assert_eq!(
        private_paths("x -s /var/tmp/bdevkit.sock > /var/tmp/a_b-1.json", dir),
        "x -s /tmp/d/bdevkit.sock > /tmp/d/a_b-1.json"
    );
    let rpc = Path::new("/venv/spdk-rpc");
    let (line, bg) = rewrite(&cmds[0], dir, rpc).unwrap();
    assert_eq!(line, "'/venv/spdk-rpc' -s /tmp/d/x.sock a b");
    assert!(!bg);
    for bad in ["cargo build --release", "spdk-rpc bdev_get_bdevs", "ls /"] {
        let c = Cmd {
            line: 1,
            text: bad.into(),
        };
        assert!(rewrite(&c, dir, rpc).is_err(), "{bad}");
    }
    assert_eq!(
        socket_arg("bdevperf -z -r /tmp/d/p.sock -c x"),
        Some(PathBuf::from("/tmp/d/p.sock"))
    );
}
