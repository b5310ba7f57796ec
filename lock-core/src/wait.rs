//! How a blocked acquirer sleeps between attempts, and how long it keeps trying while
//! Redis does not answer.

use std::time::{Duration, Instant};

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

/// How long a waiting request keeps trying while Redis does not answer (the locker's
/// `unreachable_timeout`): separate from its wait for a holder, so that an outage fails a
/// request within this bound rather than after its whole wait.
///
/// The clock starts with the first attempt that got no answer (a refused or dropped
/// connection, a command timeout, a Redlock round short of a majority) and stops at the
/// next answer, whatever it says.
#[derive(Debug)]
pub(crate) struct Outage {
    limit: Duration,
    /// When the first unanswered attempt of the current run of them started.
    since: Option<Instant>,
}

impl Outage {
    pub fn new(limit: Duration) -> Outage {
        Outage { limit, since: None }
    }

    /// Redis answered: the outage, if there was one, is over.
    pub fn answered(&mut self) {
        self.since = None;
    }

    /// An attempt started at `started` got no answer: whether the request may try again.
    pub fn may_retry(&mut self, started: Instant) -> bool {
        let since = *self.since.get_or_insert(started);
        Instant::now() < since + self.limit
    }

    /// When the request gives up unless Redis answers first (`None`: it is answering).
    pub fn gives_up_at(&self) -> Option<Instant> {
        self.since.map(|since| since + self.limit)
    }

    /// Whether the request may still try again: no outage, or one younger than the limit.
    pub fn keeps_trying(&self) -> bool {
        self.gives_up_at().is_none_or(|end| Instant::now() < end)
    }

    /// The limit.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Whether an attempt starting at `started` reaches the outage's end (see
    /// [`Outage::cap`]) before `bound`: capped at `bound` or not, it ends at the outage's
    /// end then.
    pub fn ends_before(&self, bound: Instant, started: Instant) -> bool {
        self.since.unwrap_or(started) + self.limit < bound
    }

    /// The latest end of an attempt starting at `started`: the earlier of the request's
    /// `bound` and the outage's end (counted from `started` when none runs yet: an attempt
    /// that gets no answer by then starts an outage that is already over), and whether the
    /// outage's end is the earlier.
    pub fn cap(&self, bound: Option<Instant>, started: Instant) -> (Option<Instant>, bool) {
        let end = self.since.unwrap_or(started) + self.limit;
        match bound {
            Some(bound) if bound <= end => (Some(bound), false),
            _ => (Some(end), true),
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

    #[test]
    fn an_outage_is_counted_from_its_first_unanswered_attempt() {
        let mut outage = Outage::new(Duration::from_secs(60));
        assert_eq!(outage.gives_up_at(), None);
        let started = Instant::now();
        assert!(outage.may_retry(started));
        assert_eq!(
            outage.gives_up_at(),
            Some(started + Duration::from_secs(60))
        );
        // A later failure does not move the start.
        assert!(outage.may_retry(started + Duration::from_secs(1)));
        assert_eq!(
            outage.gives_up_at(),
            Some(started + Duration::from_secs(60))
        );
        let far = started + Duration::from_secs(3600);
        assert_eq!(outage.cap(Some(far), far), (outage.gives_up_at(), true));
        assert!(outage.keeps_trying());
        outage.answered();
        assert_eq!(outage.gives_up_at(), None);
        // Without an outage, an attempt may run for the limit from its start.
        let near = started + Duration::from_secs(1);
        assert_eq!(outage.cap(Some(near), started), (Some(near), false));
        assert_eq!(
            outage.cap(None, started),
            (Some(started + Duration::from_secs(60)), true)
        );
        let mut over = Outage::new(Duration::ZERO);
        assert!(!over.may_retry(Instant::now()));
        assert!(!over.keeps_trying());
    }

    /// A bound the outage's end comes before caps nothing: the attempt ends as it would
    /// without it (what lets the fast path leave such a deadline unweighed).
    #[test]
    fn a_bound_after_the_outage_end_changes_no_cap() {
        let started = Instant::now();
        let limit = Duration::from_secs(2);
        let fresh = Outage::new(limit);
        let mut failing = Outage::new(limit);
        failing.may_retry(started - Duration::from_secs(1));
        for outage in [&fresh, &failing] {
            let end = outage.since.unwrap_or(started) + limit;
            for bound in [
                end - Duration::from_millis(1),
                end,
                end + Duration::from_millis(1),
            ] {
                assert_eq!(
                    outage.ends_before(bound, started),
                    outage.cap(Some(bound), started) == outage.cap(None, started),
                );
            }
        }
    }
}
