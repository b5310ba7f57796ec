//! `using`: run a closure while holding a lock, node-redlock style. The closure gets the
//! lease, the lease is renewed while it runs, and the lock is released on every exit. The
//! same code runs `#[redis_locked]` bodies, so both follow one rule for a lease lost while
//! the work ran ([`OnLost`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;

use crate::current::{enclosing_lease, with_current_lease, Enclosing};
use crate::{Lease, LeaseHandle, LockError, LockRequest, Locker};

/// What happens when the lease is lost while the work under it runs (its TTL ran out
/// without renewal, renewal failed, someone deleted the lock, the server restarted empty).
/// One rule for [`Locker::using`], `#[redis_locked(on_lost = "..")]` and `LockLayer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// The work's result stands, and the loss is reported: a `tracing` warning, the
    /// `lock_lost_total` metric, and `is_lost()` / `lost()` on the lease the work was given.
    /// An error now would invite a retry that repeats finished work. The default.
    #[default]
    Report,
    /// A finished work's `Ok` becomes `Err(LockError::Lost)`: for callers that must not
    /// act on work that may have run beside another holder.
    Error,
    /// The work is dropped (at its next `.await`) as soon as the loss is known, and the call
    /// returns `Err(LockError::Lost)`.
    Cancel,
}

/// A lock request with its [`OnLost`] rule, waiting for [`UsingRequest::using`].
#[must_use = "nothing happens until `.using(..)` is awaited"]
#[derive(Debug)]
pub struct UsingRequest {
    request: LockRequest,
    on_lost: OnLost,
}

impl LockRequest {
    /// Sets what [`using`](LockRequest::using) does when the lease is lost while its work
    /// runs (default [`OnLost::Report`]).
    ///
    /// ```
    /// # use lock_core::{Locker, LockError, OnLost};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// locker
    ///     .lock("payments:batch")
    ///     .on_lost(OnLost::Cancel) // stop paying out the moment the lock is gone
    ///     .using(|lease| async move {
    ///         // ... pay out, checking nothing: a lost lease drops this future ...
    ///         # let _ = lease;
    ///         Ok::<_, LockError>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn on_lost(self, on_lost: OnLost) -> UsingRequest {
        UsingRequest {
            request: self,
            on_lost,
        }
    }

    /// Runs `work` while holding the lock: takes it (with this request's TTL, wait and
    /// fencing), renews it while `work` runs, and releases it on every exit, a panic
    /// included (resumed after the release). `work` receives the lease's handle: its
    /// fencing token, and `is_lost()` / `lost()` to stop writing once the lock is gone.
    /// [`current_lease`](crate::current_lease) returns it too, inside `work`.
    ///
    /// `work` returns `Result<T, E>` with `E: From<LockError>`, and so does `using`: a lock
    /// that cannot be had is `Err(E::from(..))` and `work` never runs, so one `?` gives the
    /// value and both kinds of error travel in the caller's own error type. A lease lost
    /// while `work` ran follows [`OnLost::Report`] unless [`on_lost`](LockRequest::on_lost)
    /// says otherwise. Where Rust cannot tell the closure's error type (it ends in `Ok(..)`
    /// and its `?`s convert), name it once: `Ok::<_, AppError>(value)`.
    ///
    /// Called inside a `using` or `#[redis_locked]` body holding the same lock on the same
    /// locker and task, it runs `work` with the enclosing lease, without acquiring again
    /// (after checking with Redis that the lease is still held; if not, `Err(Lost)`).
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # use std::time::Duration;
    /// #[derive(Debug)]
    /// enum ReportError { Lock(LockError), Empty }
    /// impl From<LockError> for ReportError {
    ///     fn from(err: LockError) -> Self { ReportError::Lock(err) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ReportError> {
    /// let locker = Locker::memory();
    /// let rows: u64 = locker
    ///     .lock("nightly-report")
    ///     .ttl(Duration::from_secs(10))
    ///     .fencing()
    ///     .using(|lease| async move {
    ///         let token = lease.fencing_token(); // hand it to the store you write to
    ///         if token.is_none() { return Err(ReportError::Empty); }
    ///         Ok(42)
    ///     })
    ///     .await?; // one `?`: the lock's errors and the work's
    /// assert_eq!(rows, 42);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn using<F, Fut, T, E>(self, work: F) -> Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.on_lost(OnLost::default()).using(work).await
    }
}

impl UsingRequest {
    pub(crate) fn into_parts(self) -> (LockRequest, OnLost) {
        (self.request, self.on_lost)
    }

    /// [`LockRequest::using`] with this request's [`OnLost`] rule.
    pub async fn using<F, Fut, T, E>(self, work: F) -> Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let UsingRequest { request, on_lost } = self;
        if let Some(enclosing) = enclosing_lease(request.engine(), request.name()) {
            let name = request.name().to_owned();
            let wait = request.resolved_wait();
            return reenter(enclosing, name, wait, work).await;
        }
        // Boxed (through IntoFuture): the acquisition would otherwise make every caller's
        // future several kilobytes larger.
        let lease = request.auto_renew().await.map_err(E::from)?;
        hold(lease, on_lost, work).await
    }
}

impl Locker {
    /// [`LockRequest::using`] with the locker's default TTL and wait: runs `work` while
    /// holding `name`, renewed, released on every exit; `work` gets the lease.
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let total = locker
    ///     .using("nightly-report", |_lease| async { Ok::<_, LockError>(40 + 2) })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn using<F, Fut, T, E>(&self, name: impl Into<String>, work: F) -> Result<T, E>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        self.lock(name).using(work).await
    }
}

/// A nested call for a lock the task already holds: `work` runs with the enclosing lease,
/// once no other nested call of this task has it (lent to one at a time, waited for within
/// `wait`), and once Redis confirms the lease is still ours. Once it is lost another
/// process may hold the lock, and the nested work must not run beside it; acquiring anew
/// instead would hand the outer work, which believes it held the lock throughout, a gap it
/// cannot see.
pub(crate) async fn reenter<F, Fut, T, E>(
    enclosing: Enclosing,
    name: String,
    wait: std::time::Duration,
    work: F,
) -> Result<T, E>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    // Sibling futures of the holder (`join!`, `select!`, `join_all`) all see the enclosing
    // lease: two of them must not run their bodies at once, so the lease is lent to one.
    let (lease, _lent) = Box::pin(enclosing.borrow(&name, wait))
        .await
        .map_err(E::from)?;
    // The local check is free; the question to Redis (one round trip, as a fresh call
    // would make) catches a loss the renewer has not seen yet. Boxed: nesting is rare, and
    // inlining the inspection would grow every caller's future by kilobytes.
    if lease.is_lost() || !Box::pin(lease.is_held()).await.map_err(E::from)? {
        return Err(E::from(LockError::Lost { name }));
    }
    // Redis's answer says the key still held our value when it read it, not that the lease
    // is still trusted now: an answer that took longer than what was left of the lease's
    // validity (a slow network, a stalled process) arrives after the lease ended, when
    // another holder may already have the lock. Looked at again once the answer is in.
    if lease.is_lost() {
        return Err(E::from(LockError::Lost { name }));
    }
    // The nested call's own entry (with a fresh lending slot) for its own nested calls.
    with_current_lease(lease.clone(), work(lease)).await
}

/// Runs `work` under `lease` (its `current_lease`), applies `on_lost`, releases the lease,
/// and resumes a panic of `work` after the release.
pub(crate) async fn hold<F, Fut, T, E>(lease: Lease, on_lost: OnLost, work: F) -> Result<T, E>
where
    F: FnOnce(LeaseHandle) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let guarded =
        AssertUnwindSafe(with_current_lease(lease.handle(), work(lease.handle()))).catch_unwind();
    let outcome = if on_lost == OnLost::Cancel {
        let watch = lease.handle();
        tokio::select! {
            biased;
            outcome = guarded => Some(outcome),
            () = watch.lost() => None,
        }
    } else {
        Some(guarded.await)
    };
    let name = lease.name().to_owned();
    let Some(outcome) = outcome else {
        // The work was dropped mid-way because the lease was lost.
        let _ = lease.release().await;
        tracing::warn!(%name, "lease lost: the locked work was cancelled");
        return Err(E::from(LockError::Lost { name }));
    };
    // Lost before the release (validity ran out, renewal failed), or found so by it.
    let lost_before = lease.is_lost();
    let released = lease.release().await;
    let result = match outcome {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    let lost = lost_before || matches!(released, Ok(false));
    if let Err(err) = &released {
        tracing::warn!(%name, %err, "release failed; the TTL will free the lock");
    }
    match result {
        Ok(_) if lost && on_lost == OnLost::Error => Err(E::from(LockError::Lost { name })),
        result => {
            if lost {
                tracing::warn!(%name, "the lease was lost while the locked work ran; its result stands");
            }
            result
        }
    }
}
