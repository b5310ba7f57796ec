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

/// How far apart the two clock readings around a probe may be for the probe's stamp to
/// count as settled. A client preempted between reading the clock and reading an `Instant`'s
/// age (this machine is loaded on purpose) would otherwise be off by the whole preemption:
/// one 30-minute soak stamped a lease's attempt 3.8 ms before the call that made it.
pub const SETTLED: Nanos = 20_000;

/// Tries for a settled bracket before taking the narrowest one seen.
const TRIES: usize = 16;

/// Runs `probe` (which reads the monotonic clock once) between two readings of `clock`,
/// again while they are more than [`SETTLED`] apart (up to [`TRIES`] times), and returns
/// the narrowest bracket: `(before, probe's value, after)`.
fn bracket<T>(mut clock: impl FnMut() -> Nanos, mut probe: impl FnMut() -> T) -> (Nanos, T, Nanos) {
    let mut narrowest: Option<(Nanos, T, Nanos)> = None;
    for _ in 0..TRIES {
        let before = clock();
        let value = probe();
        let after = clock();
        let width = after.saturating_sub(before);
        if width <= SETTLED {
            return (before, value, after);
        }
        if narrowest
            .as_ref()
            .is_none_or(|(b, _, a)| width < a.saturating_sub(*b))
        {
            narrowest = Some((before, value, after));
        }
    }
    match narrowest {
        Some(found) => found,
        // TRIES is above zero; this only keeps the function total.
        None => {
            let before = clock();
            (before, probe(), clock())
        }
    }
}

/// The monotonic stamp of a past `Instant` (within [`SETTLED`] of it, as a rule).
pub fn stamp_past(instant: Instant) -> Nanos {
    let (before, age, after) = bracket(now, || nanos(instant.elapsed()));
    (before + (after - before) / 2).saturating_sub(age)
}

/// The monotonic stamp of a moment `left()` from now, never below it: `left` reads the
/// clock once (for example `LeaseHandle::expires_in`).
pub fn stamp_ahead(left: impl FnMut() -> Duration) -> Nanos {
    let (_, left, after) = bracket(now, left);
    after.saturating_add(nanos(left))
}

/// A reading of `left()` (which reads the clock once, for example
/// `LeaseHandle::expires_in`): the stamp just before it, the value read, and the moment
/// `left` from the reading as [`stamp_ahead`] gives it (never below it).
pub fn reading(left: impl FnMut() -> Duration) -> (Nanos, Duration, Nanos) {
    let (before, left, after) = bracket(now, left);
    (before, left, after.saturating_add(nanos(left)))
}

/// `ns` as milliseconds with three decimals, for messages.
pub fn ms(ns: Nanos) -> String {
    format!("{:.3}ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preempted_reading_is_taken_again() {
        // The first bracket is 5 ms wide (preempted between the readings), the second 10 ns.
        let mut readings = [0, 5_000_000, 6_000_000, 6_000_010].into_iter();
        let mut probes = [111, 222].into_iter();
        let (before, value, after) = bracket(
            || readings.next().unwrap_or(u64::MAX),
            || probes.next().unwrap_or(0),
        );
        assert_eq!((before, value, after), (6_000_000, 222, 6_000_010));
    }

    #[test]
    fn without_a_settled_reading_the_narrowest_is_kept() {
        let mut t = 0;
        let mut widths = [9_000_000u64, 1_000_000, 4_000_000].into_iter().cycle();
        let mut pending = None;
        let clock = || {
            // Each bracket: `before` at t, `after` at t + the next width.
            match pending.take() {
                None => {
                    let w = widths.next().unwrap_or(0);
                    pending = Some(t + w);
                    t
                }
                Some(after) => {
                    t = after + 1;
                    after
                }
            }
        };
        let (before, _, after) = bracket(clock, || ());
        assert_eq!(after - before, 1_000_000);
    }

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
