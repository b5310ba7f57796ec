//! Semaphores and read-write locks for synchronous code: blocking wrappers of
//! [`crate::Semaphore`] and [`crate::RwLock`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;
use crate::prims::{GuardHandle, HoldMode, PermitHolders};
use crate::LockError;

/// A counting semaphore for synchronous code: at most `permits` holders of its name at
/// once, across every process (see [`crate::Semaphore`] for its rules). Made by
/// [`blocking::Locker::semaphore`](super::Locker::semaphore); cheap to clone.
///
/// ```
/// use lock_core::blocking::Locker;
/// use lock_core::LockError;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), LockError> {
/// let locker = Locker::memory()?;
/// let exports = locker.semaphore("exports", 2);
/// let first = exports.permit().ttl(Duration::from_secs(30)).acquire()?;
/// let _second = exports.try_acquire(Duration::from_secs(30))?;
/// assert!(matches!(
///     exports.try_acquire(Duration::from_secs(30)),
///     Err(LockError::LimitReached { permits: 2, .. })
/// ));
/// assert_eq!(exports.holders()?.holders.len(), 2);
/// first.release()?;
/// let _third = exports.permit().wait(Duration::from_secs(1)).acquire()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
    semaphore: crate::Semaphore,
}

impl Semaphore {
    pub(super) fn new(shared: Arc<Shared>, semaphore: crate::Semaphore) -> Semaphore {
        Semaphore { shared, semaphore }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// The number of permits this handle's requests ask for.
    pub fn permits(&self) -> u64 {
        self.semaphore.permits()
    }

    /// A request for one permit: set `.ttl(..)`, `.wait(..)`, `.auto_renew()`, then
    /// `.acquire()`. No permit free within the wait is [`LockError::LimitReached`].
    pub fn permit(&self) -> PermitRequest {
        PermitRequest {
            shared: Arc::clone(&self.shared),
            request: self.semaphore.acquire(),
        }
    }

    /// A request for `n` permits at once, held together (see
    /// [`crate::Semaphore::acquire_many`]).
    pub fn permit_many(&self, n: u64) -> PermitRequest {
        PermitRequest {
            shared: Arc::clone(&self.shared),
            request: self.semaphore.acquire_many(n),
        }
    }

    /// Tries once to take a permit for `ttl`; [`LockError::LimitReached`] if all are held.
    pub fn try_acquire(&self, ttl: Duration) -> Result<Permit, LockError> {
        self.permit().ttl(ttl).wait(Duration::ZERO).acquire()
    }

    /// Who holds permits right now, how many requests wait, and the stored capacity.
    pub fn holders(&self) -> Result<PermitHolders, LockError> {
        self.shared
            .block_on("Semaphore::holders", self.semaphore.holders())?
    }

    /// Changes the number of permits stored with the semaphore while it is in use, and
    /// returns the number stored before (see [`crate::Semaphore::set_capacity`]: raising
    /// it lets waiters in at once, lowering it takes no permit from a holder).
    ///
    /// ```
    /// # fn main() -> Result<(), lock_core::LockError> {
    /// let locker = lock_core::blocking::Locker::memory()?;
    /// let exports = locker.semaphore("exports", 1);
    /// let first = exports.try_acquire(std::time::Duration::from_secs(5))?;
    /// assert_eq!(exports.set_capacity(2)?, Some(1));
    /// let second = exports.try_acquire(std::time::Duration::from_secs(5))?;
    /// # drop((first, second));
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_capacity(&self, permits: u64) -> Result<Option<u64>, LockError> {
        self.shared.block_on(
            "Semaphore::set_capacity",
            self.semaphore.set_capacity(permits),
        )?
    }

    /// The async semaphore this one wraps.
    pub fn as_async(&self) -> &crate::Semaphore {
        &self.semaphore
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Semaphore")
            .field(&self.semaphore)
            .finish()
    }
}

/// The `ttl`, `wait`, `auto_renew` and `max_hold` methods of a blocking request wrapping
/// an async one in its `request` field.
macro_rules! blocking_options {
    () => {
        /// How long the hold lives if it is not released, extended or renewed (default: the
        /// locker's).
        pub fn ttl(mut self, ttl: Duration) -> Self {
            self.request = self.request.ttl(ttl);
            self
        }

        /// How long to wait; zero tries once (default: the locker's).
        pub fn wait(mut self, wait: Duration) -> Self {
            self.request = self.request.wait(wait);
            self
        }

        /// Keep the hold alive until it is released or dropped; the locker's runtime
        /// thread renews it.
        pub fn auto_renew(mut self) -> Self {
            self.request = self.request.auto_renew();
            self
        }

        /// With auto-renewal: stop renewing this long after the acquisition.
        pub fn max_hold(mut self, max_hold: Duration) -> Self {
            self.request = self.request.max_hold(max_hold);
            self
        }
    };
}

/// A request for one permit of a blocking [`Semaphore`]; call
/// [`acquire`](PermitRequest::acquire).
#[must_use = "a permit request does nothing until `.acquire()` is called"]
#[derive(Debug)]
pub struct PermitRequest {
    shared: Arc<Shared>,
    request: crate::PermitRequest,
}

impl PermitRequest {
    blocking_options!();

    /// Takes a permit, blocking the calling thread for up to the request's wait.
    pub fn acquire(self) -> Result<Permit, LockError> {
        let PermitRequest { shared, request } = self;
        let permit = shared.block_on(
            "PermitRequest::acquire",
            std::future::IntoFuture::into_future(request),
        )??;
        let hold = Hold::new(shared, permit.handle());
        Ok(Permit {
            permit: Some(permit),
            hold,
        })
    }
}

/// The view and the runtime every blocking guard of a primitive keeps.
struct Hold {
    shared: Arc<Shared>,
    handle: GuardHandle,
}

impl Hold {
    fn new(shared: Arc<Shared>, handle: GuardHandle) -> Hold {
        Hold { shared, handle }
    }

    fn is_held(&self) -> Result<bool, LockError> {
        self.shared.block_on("is_held", self.handle.is_held())?
    }

    fn wait_lost(&self, timeout: Duration) -> Result<bool, LockError> {
        // Made inside the runtime (a timer needs its context).
        let lost = async { tokio::time::timeout(timeout, self.handle.lost()).await };
        Ok(self.shared.block_on("wait_lost", lost)?.is_ok())
    }

    /// Drops an async guard on the runtime, which releases it in the background there.
    fn drop_on_runtime<T>(&self, guard: T) {
        let _entered = self.shared.runtime.handle().enter();
        drop(guard);
    }
}

/// The accessors of a blocking guard with a `hold: Hold` field.
macro_rules! hold_accessors {
    () => {
        /// Asks the store whether the hold is still ours; marks it lost if not.
        pub fn is_held(&self) -> Result<bool, LockError> {
            self.hold.is_held()
        }

        /// Blocks until the hold is lost or `timeout` passes; true if it was lost.
        pub fn wait_lost(&self, timeout: Duration) -> Result<bool, LockError> {
            self.hold.wait_lost(timeout)
        }

        /// The name of the semaphore or read-write lock.
        pub fn name(&self) -> &str {
            self.hold.handle.name()
        }

        /// The random token that proves ownership.
        pub fn token(&self) -> &str {
            self.hold.handle.token()
        }

        /// When it was acquired.
        pub fn acquired_at(&self) -> Instant {
            self.hold.handle.acquired_at()
        }

        /// How long it is still valid by the local clock, with a drift margin.
        pub fn expires_in(&self) -> Duration {
            self.hold.handle.expires_in()
        }

        /// True once it is known to be lost (a cheap local check).
        pub fn is_lost(&self) -> bool {
            self.hold.handle.is_lost()
        }

        /// The async view (see [`GuardHandle`]).
        pub fn handle(&self) -> GuardHandle {
            self.hold.handle.clone()
        }
    };
}

/// One held permit of a blocking [`Semaphore`]. Release it with [`Permit::release`];
/// dropping it releases it on the locker's runtime thread (the drop does not block).
#[must_use = "a permit is released as soon as it is dropped; bind it: `let _permit = ...`"]
pub struct Permit {
    permit: Option<crate::Permit>,
    hold: Hold,
}

impl Permit {
    /// Gives the permit back; `Ok(false)` if it had already ended.
    pub fn release(mut self) -> Result<bool, LockError> {
        super::runtime::refuse_inside_runtime("Permit::release")?;
        let Some(permit) = self.permit.take() else {
            return Ok(false);
        };
        self.hold
            .shared
            .block_on("Permit::release", permit.release())?
    }

    /// How many permits this holds (1, or `n` from [`Semaphore::permit_many`]).
    pub fn permits(&self) -> u64 {
        self.permit.as_ref().map_or(0, crate::Permit::permits)
    }

    /// Resets its TTL to `ttl` from now; [`LockError::Lost`] if it had already ended.
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        match &self.permit {
            Some(permit) => self
                .hold
                .shared
                .block_on("Permit::extend", permit.extend(ttl))?,
            None => Err(LockError::Lost {
                name: self.name().to_owned(),
            }),
        }
    }

    hold_accessors!();
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.hold.drop_on_runtime(permit);
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Permit")
            .field("name", &self.name())
            .field("expires_in", &self.expires_in())
            .finish_non_exhaustive()
    }
}

/// A read-write lock for synchronous code: many readers or one writer (see
/// [`crate::RwLock`]). Made by [`blocking::Locker::rwlock`](super::Locker::rwlock).
///
/// ```
/// use lock_core::blocking::Locker;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory()?;
/// let catalog = locker.rwlock("catalog");
/// let reader = catalog.read().acquire()?;
/// let another = catalog.read().acquire()?; // readers share
/// assert!(catalog.write().wait(Duration::ZERO).acquire().is_err());
/// drop((reader, another));
/// let writer = catalog.write().wait(Duration::from_secs(1)).acquire()?;
/// writer.release()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    shared: Arc<Shared>,
    lock: crate::RwLock,
}

impl RwLock {
    pub(super) fn new(shared: Arc<Shared>, lock: crate::RwLock) -> RwLock {
        RwLock { shared, lock }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// A request for the shared (read) side.
    pub fn read(&self) -> RwRequest {
        RwRequest {
            shared: Arc::clone(&self.shared),
            request: self.lock.read(),
        }
    }

    /// A request for the exclusive (write) side.
    pub fn write(&self) -> RwRequest {
        RwRequest {
            shared: Arc::clone(&self.shared),
            request: self.lock.write(),
        }
    }

    /// Who holds the lock right now, and how many requests wait.
    pub fn holders(&self) -> Result<PermitHolders, LockError> {
        self.shared
            .block_on("RwLock::holders", self.lock.holders())?
    }

    /// The async read-write lock this one wraps.
    pub fn as_async(&self) -> &crate::RwLock {
        &self.lock
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::RwLock").field(&self.lock).finish()
    }
}

/// A request for one side of a blocking [`RwLock`]; call [`acquire`](RwRequest::acquire).
#[must_use = "a lock request does nothing until `.acquire()` is called"]
#[derive(Debug)]
pub struct RwRequest {
    shared: Arc<Shared>,
    request: crate::RwRequest,
}

impl RwRequest {
    blocking_options!();

    /// Takes the side, blocking the calling thread for up to the request's wait.
    pub fn acquire(self) -> Result<RwLease, LockError> {
        let RwRequest { shared, request } = self;
        let lease = shared.block_on(
            "RwRequest::acquire",
            std::future::IntoFuture::into_future(request),
        )??;
        let hold = Hold::new(shared, lease.handle());
        Ok(RwLease {
            mode: lease.mode(),
            lease: Some(lease),
            hold,
        })
    }
}

/// A held side of a blocking [`RwLock`]. Release it with [`RwLease::release`]; dropping
/// it releases it on the locker's runtime thread.
#[must_use = "a lease is released as soon as it is dropped; bind it: `let _lease = ...`"]
pub struct RwLease {
    lease: Option<crate::RwLease>,
    mode: HoldMode,
    hold: Hold,
}

impl RwLease {
    /// [`HoldMode::Read`] or [`HoldMode::Write`].
    pub fn mode(&self) -> HoldMode {
        self.mode
    }

    /// Gives the lease back; `Ok(false)` if it had already ended.
    pub fn release(mut self) -> Result<bool, LockError> {
        super::runtime::refuse_inside_runtime("RwLease::release")?;
        let Some(lease) = self.lease.take() else {
            return Ok(false);
        };
        self.hold
            .shared
            .block_on("RwLease::release", lease.release())?
    }

    /// Resets its TTL to `ttl` from now; [`LockError::Lost`] if it had already ended.
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        match &self.lease {
            Some(lease) => self
                .hold
                .shared
                .block_on("RwLease::extend", lease.extend(ttl))?,
            None => Err(LockError::Lost {
                name: self.name().to_owned(),
            }),
        }
    }

    /// Steps a write lease down to a read lease atomically (see
    /// [`crate::RwLease::downgrade`]).
    pub fn downgrade(&mut self) -> Result<(), LockError> {
        let Some(lease) = self.lease.as_mut() else {
            return Err(LockError::Lost {
                name: self.hold.handle.name().to_owned(),
            });
        };
        self.hold
            .shared
            .block_on("RwLease::downgrade", lease.downgrade())??;
        self.mode = lease.mode();
        Ok(())
    }

    /// Refused for a read lease with [`LockError::UpgradeRefused`] (see
    /// [`crate::RwLease::upgrade`]).
    pub fn upgrade(&mut self) -> Result<(), LockError> {
        match self.lease.as_mut() {
            Some(lease) => lease.upgrade(),
            None => Ok(()),
        }
    }

    hold_accessors!();
}

impl Drop for RwLease {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.hold.drop_on_runtime(lease);
        }
    }
}

impl fmt::Debug for RwLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::RwLease")
            .field("name", &self.name())
            .field("mode", &self.mode)
            .field("expires_in", &self.expires_in())
            .finish_non_exhaustive()
    }
}
