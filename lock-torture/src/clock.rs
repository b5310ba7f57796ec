//! Timestamps that every process on this machine agrees on.
//!
//! Client processes and the orchestrator stamp events with `CLOCK_MONOTONIC` in nanoseconds.
//! The monotonic clock is shared by all processes of one Linux host (it counts from boot), it
//! never jumps with NTP or a manual date change, and it keeps running while a process is
//! stopped with SIGSTOP, so stamps from different logs can be compared directly. It is also
//! the clock `std::time::Instant` reads on Linux, which lets a client convert the `Instant`s
//! that `lock-core` hands out without loss.

use std::time::{Duration, Instant};

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub type Nanos = u64;

/// The current monotonic time.
pub fn now() -> Nanos {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A `Duration` in nanoseconds (saturating).
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The monotonic stamp of a past `Instant`.
pub fn stamp_past(instant: Instant) -> Nanos {
    now().saturating_sub(nanos(instant.elapsed()))
}

/// `ns` as milliseconds with three decimals, for messages.
pub fn ms(ns: Nanos) -> String {
    format!("{:.3}ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_instant() {
        let before = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let stamped = stamp_past(before);
        let direct = now();
        assert!(direct >= stamped + 5_000_000);
        assert!(direct - stamped < 1_000_000_000);
    }
}
