//! How long a blocked acquirer sleeps between attempts.

use std::time::Duration;

/// First pause after a busy attempt.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
/// Longest pause: a waiter looks at least this often even when the holder's TTL is long,
/// because most holders release long before their TTL runs out.
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Jittered exponential backoff, cut short when the holder's lease runs out sooner.
///
/// The jitter (each pause is drawn from the upper half of the current step) keeps waiters
/// that failed together from retrying together.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { step: FIRST_PAUSE }
    }

    /// The next pause; `holder_remaining` is the holder's TTL as Redis reported it.
    pub fn next(&mut self, holder_remaining: Option<Duration>) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(MAX_PAUSE);
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
        let mut backoff = Backoff::new();
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = backoff.next(None);
            assert!(last <= MAX_PAUSE);
        }
        assert!(last >= MAX_PAUSE / 2);
        assert!(backoff.next(Some(Duration::from_millis(1))) <= Duration::from_micros(1200));
    }
}
