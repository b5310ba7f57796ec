//! How a blocked acquirer sleeps between attempts, and how long it (or a release) keeps
//! trying while Redis does not answer.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::LockError;

/// Pauses when nothing tells the waiter about releases (a locker built from a pool, or a
/// pub/sub connection that failed): short, because polling is the only way to learn.
const POLLING: (Duration, Duration) = (Duration::from_millis(2), Duration::from_millis(100));
/// Pauses when releases are notified: the timed retry is only a safety net for a lock that
/// disappeared without a release message (deleted by hand, or released by another client
/// library). Expiry is covered by sleeping until the holder's PTTL, and a lost pub/sub
/// connection wakes every waiter.
const NOTIFIED: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(5));

/// How often a waiter (of a lock, of permits) tries again, without queueing, while its
/// listening is being set up: nothing tells it of a release before that, and opening the
/// pub/sub connection on a cold start took up to 113 ms on a Cluster and 184-206 ms on
/// Redlock under load. Jittered between half of it and all of it ([`Backoff::steady`]):
/// well within a claim window (the longest a waiter may be kept from a free lock), and
/// longer than listening takes on an open connection (tens of microseconds to a couple of
/// milliseconds), so that it costs no call then.
pub(crate) const LOOK_WHILE_LISTENING: Duration = Duration::from_millis(40);

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

    /// Pauses of `step` each, jittered as the others (between half of it and all of it).
    pub fn steady(step: Duration) -> Backoff {
        Backoff { step, max: step }
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

/// A release that failed with `first`, a transient error (a dropped connection, a Cluster
/// slot between masters): `attempt` is run again, with the polling backoff, until Redis
/// answers, for up to `limit` (the locker's unreachable timeout) from `failed_at` and no
/// later than `worth_until`, the lease's local validity, past which its TTL frees the lock
/// anyway. The last error when neither let it through.
///
/// A release that may have run before (its answer lost) and now finds the lock no longer
/// its own cannot tell whether it freed the lock itself: that first error is the answer
/// then, not a `false` that would say the lock had already gone.
pub(crate) async fn retry_release<F, Fut>(
    first: LockError,
    failed_at: Instant,
    (limit, worth_until): (Duration, Instant),
    mut attempt: F,
) -> Result<bool, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, LockError>>,
{
    let end = (failed_at + limit).min(worth_until);
    let mut backoff = Backoff::new(false);
    // The error to end with: the latest refusal, until one after which the release may
    // have run (that one stays).
    let mut answer = first;
    let mut unsure = !answer.refused_unrun();
    loop {
        let pause = backoff.next(None);
        if Instant::now() + pause >= end {
            return Err(answer);
        }
        tokio::time::sleep(pause).await;
        // A try still unanswered at the end is cut there: past it the lock is not worth
        // freeing (its TTL does), or the caller has waited the whole unreachable timeout.
        // What the cut try did is not known; the error stands.
        let Ok(answered) = tokio::time::timeout_at(end.into(), attempt()).await else {
            return Err(answer);
        };
        match answered {
            Err(err) if err.is_transient() => {
                tracing::debug!(%err, "release failed; retrying within the unreachable timeout");
                if !unsure {
                    unsure = !err.refused_unrun();
                    answer = err;
                }
            }
            Ok(false) if unsure => return Err(answer),
            answered => return answered,
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

    /// A Cluster slot between masters: the error after `redis-rs`'s own retries.
    fn cluster_down() -> LockError {
        let err = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
            "CLUSTERDOWN",
            "Hash slot not served".to_owned(),
        ));
        LockError::from_redis("n", "lock:{n}", err)
    }

    /// Runs [`retry_release`] after `first`, with `answers` as the attempts' answers.
    async fn retried(
        first: LockError,
        answers: Vec<Result<bool, LockError>>,
    ) -> (Result<bool, LockError>, usize) {
        let answers = std::sync::Mutex::new(answers.into_iter());
        let tries = std::sync::atomic::AtomicUsize::new(0);
        let bounds = (
            Duration::from_secs(5),
            Instant::now() + Duration::from_secs(5),
        );
        let result = retry_release(first, Instant::now(), bounds, || {
            tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let answer = answers.lock().ok().and_then(|mut answers| answers.next());
            async move { answer.unwrap_or(Ok(true)) }
        })
        .await;
        (result, tries.into_inner())
    }

    /// A release refused unrun and then answered says what the answer says; one whose
    /// answer was lost cannot say the lock had gone when a retry no longer finds it.
    #[tokio::test]
    async fn a_retried_release_answers_for_what_it_knows() {
        let (result, tries) = retried(cluster_down(), vec![Err(cluster_down()), Ok(true)]).await;
        assert!(
            matches!(result, Ok(true)) && tries == 2,
            "{result:?} after {tries}"
        );
        let (result, _) = retried(cluster_down(), vec![Ok(false)]).await;
        assert!(matches!(result, Ok(false)), "{result:?}");
        let lost = || LockError::connection("n", "timed out");
        let (result, _) = retried(lost(), vec![Ok(false)]).await;
        assert!(
            matches!(&result, Err(LockError::Connection { reason, .. }) if reason == "timed out"),
            "{result:?}"
        );
        // Refused, then lost, then gone: the lost one is the answer.
        let (result, tries) = retried(
            cluster_down(),
            vec![Err(lost()), Err(cluster_down()), Ok(false)],
        )
        .await;
        assert!(
            matches!(&result, Err(LockError::Connection { reason, .. }) if reason == "timed out")
                && tries == 3,
            "{result:?} after {tries}"
        );
        // Not a transient error: no more tries.
        let (result, tries) =
            retried(lost(), vec![Err(LockError::Lost { name: "n".into() })]).await;
        assert!(
            matches!(result, Err(LockError::Lost { .. })) && tries == 1,
            "{result:?}"
        );
    }

    /// Tries end at the earlier of the unreachable timeout and the lease's validity. The
    /// earlier bound is 300 ms, the later 5 s: ending within 2 s tells them apart on a
    /// loaded machine (whose timers run late), without timing the 300 ms itself.
    #[tokio::test]
    async fn a_release_keeps_trying_no_longer_than_its_bounds() {
        let apart = Duration::from_secs(2);
        for (limit, valid) in [(300, 5_000), (5_000, 300)] {
            let begun = Instant::now();
            let bounds = (
                Duration::from_millis(limit),
                begun + Duration::from_millis(valid),
            );
            let result = retry_release(cluster_down(), begun, bounds, || async {
                Err::<bool, _>(cluster_down())
            })
            .await;
            let took = begun.elapsed();
            assert!(result.is_err_and(|err| err.refused_unrun()));
            assert!(took < apart, "{took:?}");
        }
        // A try that never answers (a connection that swallows everything, and a command
        // timeout longer than what is left) is cut at the bound.
        let begun = Instant::now();
        let bounds = (Duration::from_millis(300), begun + Duration::from_secs(5));
        let hung = tokio::time::timeout(
            Duration::from_secs(10),
            retry_release(cluster_down(), begun, bounds, || {
                std::future::pending::<Result<bool, LockError>>()
            }),
        )
        .await;
        let took = begun.elapsed();
        assert!(
            hung.as_ref().is_ok_and(|result| result.is_err()),
            "{hung:?}"
        );
        assert!(took < apart, "{took:?}");
        let expired = retry_release(
            cluster_down(),
            Instant::now(),
            (Duration::from_secs(5), Instant::now()),
            || async { Ok(true) },
        )
        .await;
        assert!(
            expired.is_err(),
            "tried past the lease's validity: {expired:?}"
        );
    }
}
