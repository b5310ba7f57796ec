//! The guard of a lock held through `lock_core::blocking`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;
use crate::lease::LeaseHandle;
use crate::LockError;

/// A lock held through a [`blocking::Locker`](super::Locker). Release it with
/// [`Lease::release`]; dropping it releases it too, at once, on the locker's runtime
/// thread (the drop itself does not block), and its TTL frees it in any case.
///
/// ```
/// # use lock_core::blocking::Locker;
/// # use std::time::Duration;
/// # fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory()?;
/// let lease = locker.lock("invoice:42").ttl(Duration::from_secs(10)).acquire()?;
/// assert_eq!(lease.name(), "invoice:42");
/// assert!(lease.expires_in() <= Duration::from_secs(10));
/// assert!(lease.is_held()?); // asks the store
/// lease.extend(Duration::from_secs(20))?;
/// assert!(lease.release()?, "we still held it");
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock is released as soon as its Lease is dropped; bind it: `let _lease = ...`"]
pub struct Lease {
    shared: Arc<Shared>,
    /// Taken by `release`; dropped on the runtime otherwise.
    lease: Option<crate::Lease>,
    /// The same lease's view, for the accessors (taken once: `Lease`'s `Deref` is cheap).
    handle: LeaseHandle,
}

impl Lease {
    pub(super) fn new(shared: Arc<Shared>, lease: crate::Lease) -> Lease {
        let handle = lease.handle();
        Lease {
            shared,
            lease: Some(lease),
            handle,
        }
    }

    /// Gives the lock back: `Ok(true)` if we still held it and it is now free, `Ok(false)`
    /// if it had already expired or been taken over (see [`crate::Lease::release`]).
    pub fn release(mut self) -> Result<bool, LockError> {
        super::runtime::refuse_inside_runtime("Lease::release")?;
        let Some(lease) = self.lease.take() else {
            return Ok(false);
        };
        self.shared.block_on("Lease::release", lease.release())?
    }

    /// Resets the TTL to `ttl` from now; [`LockError::Lost`] if the lock is no longer ours.
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let Some(lease) = &self.lease else {
            return Err(LockError::Lost {
                name: self.name().to_owned(),
            });
        };
        self.shared.block_on("Lease::extend", lease.extend(ttl))?
    }

    /// Asks the store whether the lock still holds this lease's token; marks it lost if not.
    pub fn is_held(&self) -> Result<bool, LockError> {
        self.shared
            .block_on("Lease::is_held", self.handle.is_held())?
    }

    /// Blocks until the lease is lost or `timeout` passes; true if it was lost. For a
    /// watchdog thread that must stop the work when the lock goes.
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool, LockError> {
        // Made inside the runtime (a timer needs its context).
        let lost = async { tokio::time::timeout(timeout, self.handle.lost()).await };
        Ok(self.shared.block_on("Lease::wait_lost", lost)?.is_ok())
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The Redis key that holds the lock.
    pub fn key(&self) -> &str {
        self.handle.key()
    }

    /// The 128-bit random token that proves ownership.
    pub fn token(&self) -> &str {
        self.handle.token()
    }

    /// The fencing token, when the request asked for one ([`super::LockRequest::fencing`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.handle.fencing_token()
    }

    /// When the lock was acquired.
    pub fn acquired_at(&self) -> Instant {
        self.handle.acquired_at()
    }

    /// How long the lease is still valid by the local clock, with a drift margin.
    pub fn expires_in(&self) -> Duration {
        self.handle.expires_in()
    }

    /// True once the lease is known to be lost (a cheap local check).
    pub fn is_lost(&self) -> bool {
        self.handle.is_lost()
    }

    /// The async view of this lease (see [`LeaseHandle`]), for async code.
    pub fn handle(&self) -> LeaseHandle {
        self.handle.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            // The async lease's drop spawns its release on the current runtime: ours.
            let _entered = self.shared.runtime.handle().enter();
            drop(lease);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Lease")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("expires_in", &self.expires_in())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    fn _send_sync<T: Send + Sync>() {}

    #[test]
    fn blocking_types_are_send_and_sync() {
        _send_sync::<super::Lease>();
        _send_sync::<super::super::Locker>();
        _send_sync::<super::super::Semaphore>();
        _send_sync::<super::super::Permit>();
        _send_sync::<super::super::RwLock>();
        _send_sync::<super::super::RwLease>();
        _send_sync::<super::super::Latch>();
    }
}
