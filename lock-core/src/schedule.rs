//! Scheduled runs (facade): a job that fires on every replica of a fleet runs once per tick,
//! ShedLock's model. [`LockRequest::run_once`] tries the lock without waiting, runs the job
//! under it (renewed, released on every exit) and reports a tick someone else took as
//! [`Tick::Skipped`], an ordinary outcome rather than an error; with
//! [`LockRequest::hold_at_least`] the lock outlives a short job, so that replicas whose
//! schedule fires a little later skip the same tick.

use std::future::Future;
use std::time::Duration;

use crate::using::{hold, OnLost, UsingRequest};
use crate::{LeaseHandle, LockError, LockRequest, Locker};

/// What one scheduled run came to: the job ran here, or another replica holds the tick.
///
/// ```
/// # use lock_core::{Locker, LockError, Tick};
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let locker = Locker::memory();
/// let job = || async { Ok::<_, LockError>("sent 12 digests") };
/// let first = locker
///     .lock("jobs:digest")
///     .hold_at_least(Duration::from_secs(60))
///     .run_once(|_| job())
///     .await?;
/// assert_eq!(first, Tick::Ran("sent 12 digests"));
/// // A replica whose timer fires a moment later: the tick is taken, the job does not run.
/// let second = locker
///     .lock("jobs:digest")
///     .hold_at_least(Duration::from_secs(60))
///     .run_once(|_| job())
///     .await?;
/// assert!(second.is_skipped());
/// # Ok(())
/// # }
/// ```
#[must_use = "a Tick says whether the job ran here; match it, or call `.ran()`"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick<T> {
    /// This replica held the lock and ran the job; its result.
    Ran(T),
    /// Another holder has the lock (it runs this tick, or its minimum hold has not ended):
    /// the job did not run here. Nothing failed.
    #[non_exhaustive]
    Skipped {
        /// Who holds it, when the holder stored a label (`app@host:pid`).
        holder: Option<String>,
        /// When the holder's lease runs out, as Redis reported it.
        free_in: Option<Duration>,
    },
}

impl<T> Tick<T> {
    /// The job's result if it ran here, `None` if the tick was skipped.
    pub fn ran(self) -> Option<T> {
        match self {
            Tick::Ran(value) => Some(value),
            Tick::Skipped { .. } => None,
        }
    }

    /// True when another holder had the tick and the job did not run here.
    pub fn is_skipped(&self) -> bool {
        matches!(self, Tick::Skipped { .. })
    }

    /// Reads the result of a lock that was tried without waiting (for instance an
    /// `#[redis_locked(hold_at_least = "..")]` function returning `Result<T, LockError>`):
    /// a busy lock ([`LockError::Busy`] or [`LockError::Timeout`]) is a skipped tick, any
    /// other error stays an error.
    ///
    /// ```
    /// # use lock_core::{LockError, Tick};
    /// let busy: Result<(), LockError> = Err(LockError::Busy {
    ///     name: "jobs:digest".into(), holder: None, retry_after: None,
    ///     wait_setting: Default::default(),
    /// });
    /// assert!(Tick::from_result(busy).unwrap().is_skipped());
    /// ```
    pub fn from_result(result: Result<T, LockError>) -> Result<Tick<T>, LockError> {
        match result {
            Ok(value) => Ok(Tick::Ran(value)),
            Err(err) => Tick::skipped_by(err),
        }
    }

    /// A contention error as the skipped tick it means; any other error as itself.
    fn skipped_by(err: LockError) -> Result<Tick<T>, LockError> {
        match err {
            LockError::Busy {
                holder,
                retry_after,
                ..
            }
            | LockError::Timeout {
                holder,
                retry_after,
                ..
            } => Ok(Tick::Skipped {
                holder,
                free_in: retry_after,
            }),
            other => Err(other),
        }
    }
}

impl LockRequest {
    /// Runs `work` once for this tick of a schedule, unless another holder has the lock:
    /// [`Tick::Ran`] with `work`'s value, or [`Tick::Skipped`] (not an error, `work` never
    /// ran). Call it from every replica's timer; with [`hold_at_least`](Self::hold_at_least)
    /// set to a good part of the interval, each tick runs once across the fleet even when
    /// the job is shorter than the replicas' clock offsets.
    ///
    /// Defaults (each can be changed on the request):
    ///
    /// - **wait**: none. A busy lock means the tick is taken; give `wait` to queue instead
    ///   (a request that waits out its `wait` is also a skipped tick).
    /// - **renewal**: on while `work` runs, as for [`using`](Self::using), so a long job
    ///   keeps its lock. The longest a dead replica holds the lock is one TTL (the
    ///   locker's, 30 s, unless [`ttl`](Self::ttl) says); [`max_hold`](Self::max_hold)
    ///   bounds a hung one.
    /// - **a lost lease**: the job's result stands and the loss is reported
    ///   ([`OnLost::Report`]); [`on_lost`](Self::on_lost) changes it.
    ///
    /// Errors: those of `work`, and the lock's other errors (an unreachable server, a bad
    /// name) as `E::from(LockError)`.
    ///
    /// ```no_run
    /// # use lock_core::{Locker, LockError, Tick};
    /// # use std::time::Duration;
    /// # async fn send_digests() -> Result<u32, LockError> { Ok(3) }
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::from_env()?;
    /// let mut every_minute = tokio::time::interval(Duration::from_secs(60));
    /// loop {
    ///     every_minute.tick().await;
    ///     let tick = locker
    ///         .lock("jobs:digest")
    ///         .hold_at_least(Duration::from_secs(50)) // replicas firing later skip
    ///         .ttl(Duration::from_secs(120))          // a dead replica's hold, at most
    ///         .run_once(|_lease| send_digests())
    ///         .await;
    ///     match tick {
    ///         Ok(Tick::Ran(sent)) => tracing::info!(sent, "digests sent"),
    ///         Ok(Tick::Skipped { .. }) => {} // another replica has this tick
    ///         Err(err) => tracing::warn!(%err, "digest run failed"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn run_once<F, Fut, T, E>(self, work: F) -> Result<Tick<T>, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.on_lost(OnLost::default()).run_once(work).await
    }
}

impl UsingRequest {
    /// [`LockRequest::run_once`] with this request's [`OnLost`] rule.
    pub async fn run_once<F, Fut, T, E>(self, work: F) -> Result<Tick<T>, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let (request, on_lost) = self.into_parts();
        let request = if request.has_wait() {
            request
        } else {
            request.wait(Duration::ZERO)
        };
        // Boxed (through IntoFuture), as `using` does.
        let lease = match request.auto_renew().await {
            Ok(lease) => lease,
            Err(err) => return Tick::skipped_by(err).map_err(E::from),
        };
        hold(lease, on_lost, work).await.map(Tick::Ran)
    }
}

impl Locker {
    /// [`LockRequest::run_once`] with the locker's TTL and no minimum hold: runs `work`
    /// under `name` unless someone else holds it.
    ///
    /// ```
    /// # use lock_core::{Locker, LockError, Tick};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let tick = locker.run_once("jobs:cleanup", |_| async { Ok::<_, LockError>(7) }).await?;
    /// assert_eq!(tick.ran(), Some(7));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_once<F, Fut, T, E>(
        &self,
        name: impl Into<String>,
        work: F,
    ) -> Result<Tick<T>, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.lock(name).run_once(work).await
    }
}
