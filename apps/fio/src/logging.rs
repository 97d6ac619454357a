//! The engine's log output: bdevkit's `tracing` events on stderr, warnings
//! and errors only unless `RUST_LOG` asks for more. In fio the engine is
//! the application, so it installs the subscriber (once per process).
//! Failures that stop a job are not logged here but returned, and the
//! shim prints them through fio's `log_err`.

use std::sync::Once;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber (the first call does).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("RUST_LOG")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .and_then(|s| EnvFilter::try_new(s).ok())
            // The framework also logs a failed start, which the engine
            // reports itself.
            .unwrap_or_else(|| {
                EnvFilter::new(
                    "warn,bdevkit_app::config=off,bdevkit_app::app=off,bdevkit_app::shared=off",
                )
            });
        // Another subscriber (a test harness's) is fine too.
        let _ = bdevkit_app::logging::init_with(filter, "warn", &[]);
    });
}
