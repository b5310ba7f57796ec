//! The tick schedule of the `schedule` workload, shared by the clients (which fire on it)
//! and the checker (which judges runs per tick).
//!
//! Every replica numbers ticks the same way, from the shared monotonic clock: tick `k`
//! begins at `k * interval`. A replica fires each tick up to [`Cadence::max_offset`] late
//! (a random offset per tick and replica: clock skew and timer jitter), and runs the job
//! with `run_once`, a minimum hold of [`Cadence::hold`] and a TTL of the same length (so
//! that a replica paused or killed mid-run holds the tick as long as a live one). The
//! numbers make the design's promise checkable:
//!
//! - the hold outlasts the spread of the fires (`hold > max_offset`), so the first replica
//!   to fire holds the lock until every other one has fired: one run per tick;
//! - the hold, counted from the latest fire, ends before the next tick begins
//!   (`max_offset + hold < interval`), so each tick finds the lock free: no tick without a
//!   run while nothing fails.

use crate::clock::Nanos;

/// The schedule of a run with a given TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    /// Between two ticks (five TTLs).
    pub interval: Nanos,
    /// The latest a replica fires a tick after it begins (one and a half TTLs).
    pub max_offset: Nanos,
    /// The minimum hold, and the TTL of the run's lock (two TTLs).
    pub hold: Nanos,
    /// The longest job (a quarter of a TTL).
    pub job_max: Nanos,
    /// A replica that would fire later than `max_offset` plus this (half a TTL: the
    /// process was not scheduled) skips the tick instead, as a scheduler drops a missed
    /// tick.
    pub too_late: Nanos,
}

impl Cadence {
    /// The schedule for leases of `ttl_ms`.
    pub fn for_ttl(ttl_ms: u64) -> Cadence {
        let ttl = ttl_ms.saturating_mul(1_000_000);
        Cadence {
            interval: ttl * 5,
            max_offset: ttl * 3 / 2,
            hold: ttl * 2,
            job_max: ttl / 4,
            too_late: ttl / 2,
        }
    }

    /// The tick that begins next after `t`.
    pub fn next_tick(&self, t: Nanos) -> u64 {
        t / self.interval + 1
    }

    /// When tick `tick` begins.
    pub fn start(&self, tick: u64) -> Nanos {
        tick.saturating_mul(self.interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_covers_the_fires_and_ends_before_the_next_tick() {
        for ttl_ms in [20, 100, 200, 1000] {
            let c = Cadence::for_ttl(ttl_ms);
            assert!(c.hold > c.max_offset, "{c:?}");
            assert!(c.max_offset + c.hold + c.job_max < c.interval, "{c:?}");
            assert!(c.job_max < c.hold, "{c:?}");
        }
        let c = Cadence::for_ttl(200);
        assert_eq!(c.next_tick(0), 1);
        assert_eq!(c.next_tick(c.interval), 2);
        assert_eq!(c.start(3), 3 * c.interval);
    }
}
