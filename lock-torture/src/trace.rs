//! lock-core's own events in a client process's standard error (kept in the run's logs as
//! `client-N.stderr`), for tracing down what a violation's history does not show: set
//! `LOCK_TORTURE_TRACE` to a level (`trace`, `debug`) when starting `lock-torture run`. Each
//! line is stamped with the same monotonic nanoseconds as the history's events.

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::clock;
use crate::BoxError;

/// The environment variable naming the level of lock-core's events to log.
pub const VARIABLE: &str = "LOCK_TORTURE_TRACE";

/// Stamps lines with [`clock::now`].
struct Monotonic;

impl FormatTime for Monotonic {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", clock::now())
    }
}

/// Installs the subscriber when [`VARIABLE`] is set; nothing otherwise.
pub fn init() -> Result<(), BoxError> {
    let Ok(level) = std::env::var(VARIABLE) else {
        return Ok(());
    };
    let level: LevelFilter = level
        .parse()
        .map_err(|_| format!("{VARIABLE}={level:?}: expected trace, debug, info, warn or error"))?;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_timer(Monotonic);
    tracing_subscriber::registry()
        .with(layer.with_filter(Targets::new().with_target("lock_core", level)))
        .try_init()?;
    Ok(())
}
