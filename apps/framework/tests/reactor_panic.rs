//! A reactor that panics ends the process with the panic message and a
//! non-zero status, instead of leaving it hung (issue 17, bug 1).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bdevkit_app::{App, CommonArgs, REACTOR_PANIC_EXIT};
use clap::Parser;

const CHILD: &str = "BDEVKIT_REACTOR_PANIC_CHILD";

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

/// In the child: an app with an RPC socket whose app thread panics.
fn child(socket: &str) {
    let cli = Cli::parse_from(["test", "-m", "0x1", "--interrupt-mode", "-r", socket]);
    let app = App::start(&cli.common, &[]).expect("app starts");
    app.app_thread()
        .send_msg(|| panic!("reactor test panic 0xdead"))
        .expect("message sent");
    // The hook ends the process; getting here means it did not.
    std::thread::sleep(Duration::from_secs(20));
    std::process::exit(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reactor_panic_ends_the_process_with_its_message() {
        if let Some(socket) = std::env::var_os(CHILD) {
            child(&socket.to_string_lossy());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("rpc.sock");
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::a_reactor_panic_ends_the_process_with_its_message",
                "--nocapture",
            ])
            .env(CHILD, &socket)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("the process did not end after its reactor panicked");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert_eq!(status.code(), Some(REACTOR_PANIC_EXIT), "{err}");
        assert!(err.contains("reactor test panic 0xdead"), "{err}");
        assert!(err.contains("a reactor panicked"), "{err}");
        assert!(!socket.exists(), "the RPC socket was removed");
    }
}
