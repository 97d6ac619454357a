//! A reactor that panics ends the process: the panic message is printed
//! (the standard hook), the RPC sockets the process serves are removed, and
//! it exits with status 101, as a panicking `main` does. A process with a
//! dead reactor would otherwise hang — its I/O never completes, its
//! shutdown waits for it — or ignore signals.

use std::path::PathBuf;
use std::sync::{Mutex, Once};

/// RPC sockets to remove when a reactor panics.
static SOCKETS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

/// Status a panicking reactor exits the process with.
pub const REACTOR_PANIC_EXIT: i32 = 101;

/// Installs the hook (once per process); `socket` is removed on a reactor
/// panic.
pub(crate) fn exit_on_reactor_panic(socket: Option<PathBuf>) {
    if let Some(s) = socket {
        if let Ok(mut v) = SOCKETS.lock() {
            v.push(s);
        }
    }
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let on_reactor = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("reactor_"));
            if !on_reactor {
                return;
            }
            eprintln!("fatal: a reactor panicked; exiting");
            if let Ok(v) = SOCKETS.lock() {
                for s in v.iter() {
                    let _ = std::fs::remove_file(s);
                }
            }
            std::process::exit(REACTOR_PANIC_EXIT);
        }));
    });
}

/// The socket is gone with its app: nothing to remove on a later panic.
pub(crate) fn forget_socket(socket: &std::path::Path) {
    if let Ok(mut v) = SOCKETS.lock() {
        v.retain(|s| s != socket);
    }
}
