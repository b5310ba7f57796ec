//! A lock request being configured (facade); its `.await` runs the engine's acquisition.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::current::{held_by_this_task, task_holds};
use crate::engine::acquire::{acquire, Spec};
use crate::engine::deadlock::Holds;
use crate::engine::held::Renewal;
use crate::engine::Engine;
use crate::{Lease, LockError};

/// A lock request: set what differs from the locker's defaults, then `.await` it.
///
/// ```
/// # use lock_core::Locker;
/// # use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let lease = locker
///     .lock("inventory:sku-19")
///     .ttl(Duration::from_secs(5))       // the lock frees itself after 5 s
///     .wait(Duration::from_millis(500))  // keep trying for up to 0.5 s
///     .fencing()                          // draw a fencing token
///     .await?;
/// assert!(lease.fencing_token().is_some());
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct LockRequest {
    /// Owned (one `Arc`), so that a request can be spawned.
    engine: Arc<Engine>,
    spec: Spec,
}

impl LockRequest {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> LockRequest {
        LockRequest {
            engine,
            spec: Spec {
                name,
                ttl: None,
                wait: None,
                fencing: None,
                renew: None,
                hold_at_least: None,
                holds: Holds {
                    of_task: Some(task_holds),
                    declared: Vec::new(),
                },
            },
        }
    }

    /// How long the lock lives if it is not released or extended (between
    /// [`MIN_TTL`](crate::MIN_TTL) and [`MAX_TTL`](crate::MAX_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.spec.ttl = Some(ttl);
        self
    }

    /// How long to keep trying while someone else holds the lock. Zero tries once and fails
    /// with [`LockError::Busy`] (that one attempt is bounded by the locker's
    /// `command_timeout`); otherwise the request fails with [`LockError::Timeout`] when the
    /// time is up.
    ///
    /// The wait is a deadline, also against a slow or stalled server: an attempt still in
    /// flight when it passes is abandoned, and undone in the background like a cancelled
    /// acquire, so the request returns within its wait plus the timer's granularity (about
    /// a millisecond) and never grants a lease after it.
    ///
    /// A waiting request rides out transient failures (a dropped connection, a server
    /// restarting, no Redlock quorum) by trying again within its wait; if the wait runs
    /// out first, it fails with the last such error rather than [`LockError::Timeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.spec.wait = Some(wait);
        self
    }

    /// Draw a fencing token: a number that strictly increases with every acquisition of this
    /// name, available as [`LeaseHandle::fencing_token`](crate::LeaseHandle::fencing_token).
    ///
    /// The token is the lock server's clock in microseconds, or one more than the name's
    /// previous token when that is not below it, drawn in the grant's own script: so it
    /// keeps increasing across a server restarted empty, a flush, a failover to a replica
    /// that missed the last grants and a Cluster slot's move, provided that a new server's
    /// clock is not behind the old one's by more than the time between their grants
    /// (a Locker warns when a name's token comes back lower than one it was handed).
    /// Tokens stay below 2^53 (exact in JSON and JavaScript) until 2255. The
    /// [`fenced`](crate::fenced) module enforces them where the data is: guarded writes
    /// that a holder paused past its TTL cannot get through.
    pub fn fencing(mut self) -> Self {
        self.spec.fencing = Some(true);
        self
    }

    /// Keeps the lease alive until it is released or dropped: a background task of the
    /// locker extends it every third of its TTL, batched with the locker's other renewed
    /// leases. If Redis says the lock is no longer ours, the lease is marked lost at once
    /// ([`LeaseHandle::lost`](crate::LeaseHandle::lost) fires).
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let lease = locker
    ///     .lock("import:catalog")
    ///     .ttl(Duration::from_millis(300))
    ///     .auto_renew()
    ///     .max_hold(Duration::from_secs(3600)) // a hung holder gives up after an hour
    ///     .await?;
    /// tokio::time::sleep(Duration::from_millis(700)).await; // longer than the TTL
    /// assert!(!lease.is_lost());
    /// assert!(lease.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn auto_renew(mut self) -> Self {
        self.spec.renew.get_or_insert(Renewal { max_hold: None });
        self
    }

    /// With [`auto_renew`](LockRequest::auto_renew): stop renewing this long after the
    /// acquisition, so that a hung holder cannot keep the lock forever. The lease then
    /// expires at the end of its last TTL and is reported lost. Independent of `ttl` and
    /// `wait`; no default (renewal lasts until release).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.spec
            .renew
            .get_or_insert(Renewal { max_hold: None })
            .max_hold = Some(max_hold);
        self
    }

    /// Holds the lock at least this long from the start of the acquisition, even when it is
    /// released (or dropped) sooner: the release then leaves the lock to expire at that
    /// point, by the server's clock, instead of deleting it. For scheduled jobs (ShedLock's
    /// `lockAtLeastFor`): replicas whose schedule fires a little later, their clocks a
    /// little off, find the lock taken and skip the tick the first one ran. More than zero,
    /// at most [`MAX_TTL`](crate::MAX_TTL); no default (a release frees the lock at once).
    /// The hold is measured from the start of the attempt that took the lock, by this
    /// process's clock, and set as the key's remaining TTL at the release, so it ends by the
    /// server's clock no earlier than that. Requests that wait for the lock learn of its end
    /// from their timers, not from a release message.
    ///
    /// See [`LockRequest::run_once`], which runs a job once per tick with it.
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let lease = locker
    ///     .lock("jobs:hourly-digest")
    ///     .hold_at_least(Duration::from_secs(30))
    ///     .await?;
    /// assert!(lease.release().await?); // given back, but held until 30 s after the start
    /// assert!(locker.try_lock("jobs:hourly-digest", Duration::from_secs(1)).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.spec.hold_at_least = Some(hold);
        self
    }

    /// Whether a `wait` was given (otherwise the locker's default applies).
    pub(crate) fn has_wait(&self) -> bool {
        self.spec.wait.is_some()
    }

    /// A lease the request's task holds while it waits (see `LockRequest::holding`).
    pub(crate) fn declare_held(&mut self, held: Arc<crate::engine::held::Held>) {
        self.spec.holds.declared.push(held);
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// This request's wait, or the locker's default.
    pub(crate) fn resolved_wait(&self) -> Duration {
        self.spec
            .wait
            .unwrap_or(self.engine.settings().default_wait)
    }

    /// The acquisition itself, without the box `.await` on the request puts it in (the
    /// `IntoFuture` type must be nameable). `try_lock` and `#[redis_locked]` call this.
    // The async block is the point (see `engine::acquire::run`).
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn acquire(self) -> impl Future<Output = Result<Lease, LockError>> + Send {
        // Checked when first polled, on the task that awaits the request (a spawned
        // request is another task's). An async block, not an async fn: see `acquire`.
        async move {
            if held_by_this_task(&self.engine, &self.spec.name) {
                return Err(LockError::HeldByThisTask {
                    name: self.spec.name,
                });
            }
            acquire(self.engine, self.spec, Lease::new).await
        }
    }
}

/// The boxed acquisition: `'static`, so `tokio::spawn(locker.lock("x").into_future())` works.
impl IntoFuture for LockRequest {
    type Output = Result<Lease, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        // The box is allocated first and the future written into it, which an optimised
        // build does in place: `Box::pin(future)` built the future on the stack and copied
        // it in, its whole size (kilobytes, most of them the states of later awaits) for
        // every lock.
        let boxed = Box::write(Box::new_uninit(), self.acquire());
        Box::into_pin(boxed)
    }
}

#[cfg(test)]
mod tests {
    use crate::Locker;

    /// Every acquisition's future is boxed (`IntoFuture`), all of it whatever state it
    /// starts in, so its size is allocated per lock (and was copied per lock too, until
    /// the box was written in place). Opening the watch connection for
    /// the strict eviction check (several kilobytes, awaited once per Locker) made it 4.7 KB
    /// until that await was boxed; the slow path is boxed for the same reason.
    #[test]
    fn an_acquisition_future_stays_small() {
        let locker = Locker::memory();
        let future = locker.lock("size").acquire();
        let size = std::mem::size_of_val(&future);
        assert!(size <= 2_600, "the acquisition future is {size} bytes");
    }
}
