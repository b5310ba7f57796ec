//! Fencing tokens: the rule every store follows when it draws one, and a Locker's check that
//! the tokens it is handed never go backward. A leaf.
//!
//! # The rule
//!
//! A lock's fencing token is **the server's clock in microseconds since the Unix epoch, or
//! one more than the lock's previous token when that is not below it**:
//!
//! ```text
//! token = max(previous + 1, TIME in µs)
//! ```
//!
//! drawn in the same script as the grant (`scripts/fence.lua`; the WATCH/MULTI backend
//! reads `TIME` and the counter in the look that precedes its transaction, the memory
//! backend the process's clock), and stored back in the counter `<prefix>{name}:fence`.
//! On one server the tokens of a name strictly increase whatever its clock does: a clock
//! that steps back is met by `previous + 1`. What the counter cannot survive on its own, the
//! clock covers: a server restarted empty, a `FLUSHALL`, a deleted counter, a failover to a
//! replica that missed the last grants, a Cluster slot moved without its counter. There
//! the new counter starts from the new server's clock, above every earlier token
//! **provided that the new server's clock is not behind the old one's by more than the
//! time that passed between the last grant on the old server and the first on the new
//! one** (the restart, the failover's detection and promotion: seconds, against clocks kept
//! by NTP within milliseconds). A server whose clock is behind by more than that hands out
//! tokens below earlier ones until its clock catches up; a [`FenceWatch`] in every Locker
//! notices that for the names it has seen and warns (a guarded write then refuses the
//! holder with the lower token, so the data stays safe, but that holder cannot write).
//!
//! Redlock takes the largest token of a majority and writes it back to the masters
//! (`raise_fence.lua`), so its tokens follow the fastest clock of the majority; a master
//! restarted empty starts from its own clock, and the same assumption applies to it.
//!
//! # Range
//!
//! Tokens stay below 2^53 (9,007,199,254,740,992) until June 2255: every JSON parser
//! and JavaScript `Number` holds them exactly, as do a PostgreSQL `bigint` and Lua's
//! numbers inside Redis scripts (doubles, exact up to 2^53). A token read as microseconds
//! says when it was drawn (`1767225600000000` is 2026-01-01 00:00:00 UTC), which also
//! makes a token that went backward easy to date. Tokens of locks taken by lock-core
//! before this rule (1, 2, 3, ...) are all below the new ones, so a store that kept them
//! accepts the new holders at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The token that follows `previous` at `now_micros` on the store's clock.
pub(crate) fn next_token(previous: u64, now_micros: u64) -> u64 {
    now_micros.max(previous.saturating_add(1))
}

/// This process's clock in microseconds since the Unix epoch (the memory backend's `TIME`).
/// A clock set before 1970 reads as 0: the counter then carries on from its last token.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// The microseconds of `TIME`'s reply (`[seconds, microseconds]`).
pub(crate) fn micros_of_time(seconds: u64, micros: u64) -> u64 {
    seconds.saturating_mul(1_000_000).saturating_add(micros)
}

/// How many names a [`FenceWatch`] remembers; past that it forgets them all and starts
/// again (the check is a best effort: the guarded writes are the enforcement).
const WATCHED_NAMES: usize = 4096;

/// The highest token a Locker has been handed per name (up to [`WATCHED_NAMES`] names):
/// a grant that comes back with a token not above it means a server's clock is behind an
/// earlier one's by more than the rule above allows. It is logged as a warning (and
/// counted in `lock_fence_regressions_total` with the `metrics` feature); the lease stands,
/// since the lock itself is held, but a guarded write with its token will be refused.
#[derive(Debug, Default)]
pub(crate) struct FenceWatch {
    highest: Mutex<HashMap<Box<str>, u64>>,
}

/// What a [`FenceWatch`] made of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Above every token this Locker had been handed for the name.
    Forward,
    /// Not above `highest`, which this Locker had been handed for the name before.
    Backward { highest: u64 },
}

impl FenceWatch {
    /// Records `token`, just granted for `name`, and says whether it went backward.
    pub(crate) fn observe(&self, name: &str, token: u64) -> Seen {
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = highest.get_mut(name) {
            if token <= *seen {
                return Seen::Backward { highest: *seen };
            }
            *seen = token;
            return Seen::Forward;
        }
        if highest.len() >= WATCHED_NAMES {
            highest.clear();
        }
        highest.insert(name.into(), token);
        Seen::Forward
    }

    /// [`FenceWatch::observe`], with the warning and the metric when the token went
    /// backward.
    pub(crate) fn check(&self, name: &str, token: u64) {
        if let Seen::Backward { highest } = self.observe(name, token) {
            tracing::warn!(
                name,
                token,
                highest,
                "fencing token went backward: this Locker was handed {highest} for this lock before, \
                 and now {token}; the lock's server has a clock behind the one that granted {highest} \
                 (a failover or a restart onto a server whose clock is off). Guarded writes refuse \
                 this lease's token until that clock passes {highest}; check the servers' NTP"
            );
            #[cfg(feature = "metrics")]
            metrics::counter!("lock_fence_regressions_total", "lock" => crate::metrics::family(name).to_owned())
                .increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_follows_the_clock_and_never_goes_back() {
        assert_eq!(next_token(0, 1_767_225_600_000_000), 1_767_225_600_000_000);
        // Two grants within one microsecond, or a clock that stepped back.
        assert_eq!(
            next_token(1_767_225_600_000_000, 1_767_225_600_000_000),
            1_767_225_600_000_001
        );
        assert_eq!(next_token(1_767_225_600_000_000, 5), 1_767_225_600_000_001);
        // Counters of the old rule are far below the clock.
        assert_eq!(next_token(41, 1_767_225_600_000_000), 1_767_225_600_000_000);
        assert_eq!(next_token(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn tokens_stay_below_two_to_the_53_until_2255() {
        // 2255-01-01T00:00:00Z
        let year_2255 = micros_of_time(8_993_721_600, 0);
        assert!(year_2255 < 1 << 53);
        assert!(unix_micros() < 1 << 53);
        assert_eq!(micros_of_time(1_767_225_600, 17), 1_767_225_600_000_017);
    }

    #[test]
    fn the_watch_tells_a_token_that_went_backward() {
        let watch = FenceWatch::default();
        assert_eq!(watch.observe("a", 10), Seen::Forward);
        assert_eq!(watch.observe("a", 11), Seen::Forward);
        assert_eq!(watch.observe("b", 3), Seen::Forward, "names are apart");
        assert_eq!(watch.observe("a", 11), Seen::Backward { highest: 11 });
        assert_eq!(watch.observe("a", 4), Seen::Backward { highest: 11 });
        assert_eq!(watch.observe("a", 12), Seen::Forward);
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn a_token_that_went_backward_is_counted() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let watch = FenceWatch::default();
        metrics::with_local_recorder(&recorder, || {
            watch.check("orders:1", 10);
            watch.check("orders:1", 11);
            watch.check("orders:1", 9);
        });
        let regressions: u64 = snapshotter
            .snapshot()
            .into_vec()
            .iter()
            .filter(|(key, _, _, _)| key.key().name() == "lock_fence_regressions_total")
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => *n,
                _ => 0,
            })
            .sum();
        assert_eq!(regressions, 1);
    }

    #[test]
    fn the_watch_forgets_rather_than_grows() {
        let watch = FenceWatch::default();
        for i in 0..WATCHED_NAMES {
            watch.observe(&i.to_string(), 5);
        }
        watch.observe("one more", 5);
        let highest = watch.highest.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(highest.len(), 1);
    }
}
