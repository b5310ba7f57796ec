//! The leases held on this task's call stack by `#[redis_locked]` functions, `using`
//! closures and `LockLayer`-guarded handlers: for [`current_lease`] and for reentrancy.

use std::future::Future;

use std::sync::Arc;

use crate::engine::Engine;
use crate::LeaseHandle;

tokio::task_local! {
    /// The leases held on this task's call stack, innermost last.
    static HELD: Vec<LeaseHandle>;
}

/// The lease of the innermost `#[redis_locked]` function, `using` closure or
/// `LockLayer`-guarded handler running on this task, if any: its fencing token, its
/// validity, and a `lost()` signal, without adding parameters.
///
/// ```
/// # use lock_core::{Locker, LockError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// assert!(lock_core::current_lease().is_none());
/// # Ok(())
/// # }
/// ```
pub fn current_lease() -> Option<LeaseHandle> {
    HELD.try_with(|held| held.last().cloned()).ok().flatten()
}

/// Runs `work` with `lease` as its [`current_lease`] (innermost, over any outer ones), as
/// `LockLayer` does for the handler it guards.
pub(crate) async fn with_current_lease<F: Future>(lease: LeaseHandle, work: F) -> F::Output {
    let mut stack = HELD.try_with(Vec::clone).unwrap_or_default();
    stack.push(lease);
    HELD.scope(stack, work).await
}

/// The lease for `name` on `engine` (one Locker's clones) that this task already holds,
/// innermost first.
pub(crate) fn enclosing_lease(engine: &Arc<Engine>, name: &str) -> Option<LeaseHandle> {
    HELD.try_with(|held| {
        held.iter()
            .rev()
            .find(|lease| lease.same_lock(engine, name))
            .cloned()
    })
    .ok()
    .flatten()
}
