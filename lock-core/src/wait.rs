//! How long a blocked acquirer sleeps between attempts.

use std::time::Duration;

/// Pauses when nothing tells the waiter about releases (a locker built from a pool, or a
/// pub/sub connection that failed): short, because polling is the only way to learn.
const POLLING: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(100));
/// Pauses when releases are notified: the timed retry is only a safety net for a lock that
/// disappeared without a release message (deleted by hand, or released by another client
/// library). Expiry is covered by sleeping until the holder's PTTL, and a lost pub/sub
/// connection wakes every waiter.
const NOTIFIED: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(5));

/// Jittered exponential backoff, cut short when the holder's lease runs out sooner.
///
/// The jitter (each pause is drawn from the upper half of the current step) keeps waiters
/// that failed together from retrying together.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(notified: bool) -> Backoff {
        let (first, max) = if notified { NOTIFIED } else { POLLING };
        Backoff { step: first, max }
    }

    /// The next pause; `holder_remaining` is the holder's TTL as Redis reported it.
    pub fn next(&mut self, holder_remaining: Option<Duration>) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let half = step / 2;
        let jittered = half + half.mul_f64(fastrand::f64());
        match holder_remaining {
            // Wake just after the holder's lease would expire.
            Some(left) => jittered.min(left + Duration::from_micros(200)),
            None => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_a_bound_and_respects_the_holder() {
        let mut backoff = Backoff::new(false);
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = backoff.next(None);
            assert!(last <= POLLING.1);
        }
        assert!(last >= POLLING.1 / 2);
        assert!(backoff.next(Some(Duration::from_millis(1))) <= Duration::from_micros(1200));
    }
}
