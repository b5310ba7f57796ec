//! The holds on this task's call stack, made by `#[redis_locked]` functions, `using`
//! closures and `LockLayer`-guarded handlers: the one record of "who holds what in this
//! task", for [`current_lease`], for reentrancy (a nested call borrows the enclosing lease,
//! one nested call at a time), and for refusing a plain `lock()` of a name this task
//! already holds.
//!
//! The record is a task-local stack, scoped around each guarded body: every future polled
//! inside that body sees it, sibling futures of one `join!` included, and a spawned task
//! does not. So the task-local alone cannot tell the holder from its siblings: each lock
//! entry also carries a lending slot (a one-permit semaphore) that a nested call takes
//! for as long as it runs, and pushes a fresh entry of its own for its own nested calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::engine::Engine;
use crate::{LeaseHandle, LockError, WaitSetting};

/// One hold on the stack.
#[derive(Clone)]
struct Entry {
    lease: LeaseHandle,
    /// Lent to one nested call of the same lock at a time (a lock's lease only).
    lend: Option<Arc<Semaphore>>,
}

tokio::task_local! {
    /// The holds on this task's call stack, innermost last.
    static HELD: Vec<Entry>;
}

/// The lease of the innermost `#[redis_locked]` function, `using` closure or
/// `LockLayer`-guarded handler running on this task, if any: its fencing token, its
/// validity, and a `lost()` signal, without adding parameters.
///
/// Innermost means the hold taken last on the call stack: inside a `permits`, `mode` or
/// `keys` function nested in a locked one, that function's hold (a view of the permit,
/// read-write lock side or multi-lock); with two `#[redis_locked]` attributes stacked on one
/// function, the upper one (the lower attribute's lock is taken first, around it). After a
/// nested call returns, the enclosing hold is current again.
///
/// ```
/// # use lock_core::{Locker, LockError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// assert!(lock_core::current_lease().is_none());
/// let locker = Locker::memory();
/// locker
///     .using("outer", |_| async {
///         let inner = locker
///             .using("inner", |_| async { Ok::<_, LockError>(lock_core::current_lease()) })
///             .await?;
///         assert_eq!(inner.map(|lease| lease.name().to_owned()).as_deref(), Some("inner"));
///         assert_eq!(lock_core::current_lease().map(|l| l.name().to_owned()).as_deref(), Some("outer"));
///         Ok::<_, LockError>(())
///     })
///     .await
/// # }
/// ```
pub fn current_lease() -> Option<LeaseHandle> {
    HELD.try_with(|held| held.last().map(|entry| entry.lease.clone()))
        .ok()
        .flatten()
}

/// Runs `work` with `lease` as its [`current_lease`] (innermost, over any outer ones), as
/// `LockLayer` does for the handler it guards. A lock's lease can be lent to nested calls.
pub(crate) async fn with_current_lease<F: Future>(lease: LeaseHandle, work: F) -> F::Output {
    let lend = lease.is_lock().then(|| Arc::new(Semaphore::new(1)));
    let mut stack = HELD.try_with(Vec::clone).unwrap_or_default();
    stack.push(Entry { lease, lend });
    HELD.scope(stack, work).await
}

/// A lease of the lock asked for that this task already holds on its call stack, with
/// the slot through which it is lent to one nested call at a time.
pub(crate) struct Enclosing {
    lease: LeaseHandle,
    lend: Arc<Semaphore>,
}

/// The innermost lease for `name` on `engine` (one Locker's clones) that this task already
/// holds on its call stack.
pub(crate) fn enclosing_lease(engine: &Arc<Engine>, name: &str) -> Option<Enclosing> {
    HELD.try_with(|held| {
        held.iter().rev().find_map(|entry| {
            let lend = entry.lend.as_ref()?;
            entry.lease.same_lock(engine, name).then(|| Enclosing {
                lease: entry.lease.clone(),
                lend: Arc::clone(lend),
            })
        })
    })
    .ok()
    .flatten()
}

/// Who a nested call finds holding the enclosing lease when a sibling has borrowed it.
pub(crate) const SIBLING_HOLDER: &str = "another nested call on this task";

impl Enclosing {
    /// The enclosing lease, once no other nested call of this task has it: at once when
    /// `wait` is zero (else [`LockError::Busy`]), or within `wait` (else
    /// [`LockError::Timeout`]). The lease is lent until the returned permit is dropped.
    pub(crate) async fn borrow(
        self,
        name: &str,
        wait: Duration,
    ) -> Result<(LeaseHandle, OwnedSemaphorePermit), LockError> {
        let busy = || LockError::Busy {
            name: name.to_owned(),
            holder: Some(SIBLING_HOLDER.to_owned()),
            retry_after: None,
            wait_setting: WaitSetting::default(),
        };
        // The semaphore is never closed; a closed one would be a lease no longer lendable.
        let permit = if wait.is_zero() {
            Arc::clone(&self.lend)
                .try_acquire_owned()
                .map_err(|_| busy())?
        } else {
            match tokio::time::timeout(wait, Arc::clone(&self.lend).acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) => return Err(busy()),
                Err(_) => {
                    return Err(LockError::Timeout {
                        name: name.to_owned(),
                        waited: wait,
                        holder: Some(SIBLING_HOLDER.to_owned()),
                        retry_after: None,
                        wait_setting: WaitSetting::default(),
                    })
                }
            }
        };
        Ok((self.lease, permit))
    }
}

/// True when this task holds the lock `name` of `engine` on its call stack (an enclosing
/// `#[redis_locked]` function, `using` closure or `LockLayer`-guarded handler).
pub(crate) fn held_by_this_task(engine: &Arc<Engine>, name: &str) -> bool {
    HELD.try_with(|held| held.iter().any(|entry| entry.lease.same_lock(engine, name)))
        .unwrap_or(false)
}

/// The leases of `engine`'s locks that this task holds on its call stack (the holds a
/// wait is checked against for deadlocks; see `engine/deadlock.rs`).
pub(crate) fn task_holds(engine: &Arc<Engine>) -> Vec<Arc<crate::engine::held::Held>> {
    HELD.try_with(|held| {
        held.iter()
            .filter_map(|entry| entry.lease.held_of(engine))
            .collect()
    })
    .unwrap_or_default()
}
