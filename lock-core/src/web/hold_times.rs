//! How long requests guarded by one `LockLayer` hold their lock, as this process saw them:
//! the basis of a `Retry-After` tighter than the holder's TTL.
//!
//! With auto-renewal on, the holder's remaining TTL is renewed all along, so it says when
//! the lock would free itself if the holder crashed, not when it will be released: a
//! request holding the lock for 200 ms would have its rivals told to come back in 30 s.
//! Twice the typical hold is an honest estimate of when a retry is likely to succeed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The shortest hint: `Retry-After` counts whole seconds.
const MIN_HINT: Duration = Duration::from_secs(1);

/// An exponentially weighted moving average of hold times (weight 1/8 for each new one).
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    /// Microseconds; zero until a hold was recorded.
    average_us: AtomicU64,
}

impl HoldTimes {
    pub fn record(&self, held: Duration) {
        let held = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .average_us
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |average| {
                Some(if average == 0 {
                    held
                } else {
                    average - average / 8 + held / 8
                })
            });
    }

    /// When a rejected request should come back: twice the typical hold (at least a second),
    /// and never later than `holder_bound` (when the holder's lease would run out). `None`
    /// keeps whatever the holder said.
    pub fn hint(&self, holder_bound: Option<Duration>) -> Option<Duration> {
        let average = self.average_us.load(Ordering::Acquire);
        if average == 0 {
            return holder_bound;
        }
        let typical = (Duration::from_micros(average) * 2).max(MIN_HINT);
        Some(holder_bound.map_or(typical, |bound| bound.min(typical)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_follows_the_holds_and_stays_under_the_holders_bound() {
        let holds = HoldTimes::default();
        let thirty = Some(Duration::from_secs(30));
        assert_eq!(holds.hint(thirty), thirty, "nothing seen yet");
        for _ in 0..20 {
            holds.record(Duration::from_millis(200));
        }
        assert_eq!(holds.hint(thirty), Some(MIN_HINT));
        for _ in 0..40 {
            holds.record(Duration::from_secs(4));
        }
        let hint = holds.hint(thirty).unwrap();
        assert!(
            hint > Duration::from_secs(7) && hint <= Duration::from_secs(8),
            "{hint:?}"
        );
        assert_eq!(
            holds.hint(Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
    }
}
