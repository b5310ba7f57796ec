//! Locks for synchronous code: the [`Locker`] of this module blocks the calling thread
//! instead of returning a future, as `reqwest::blocking` and redis-rs's blocking client do.
//! No tokio in the caller's code: use it from a plain `fn main`, from `#[test]` functions,
//! and from many `std::thread`s at once.
//!
//! (Facade layer: a thin wrapper over [`crate::Locker`] and the primitives.)
//!
//! Each `blocking::Locker` owns a small tokio runtime on a thread of its own: it drives the
//! locker's sockets and timers, and runs its background work (auto-renewal, the release of
//! a dropped lease). A call runs on the caller's thread and blocks it until its answer; a
//! waiting request waits the same herd-free FIFO way as the async API's. Clones share the
//! runtime; it stops when the last clone, lease and permit are gone (waiting up to 2 s for
//! releases still in flight).
//!
//! Everything the async API guarantees holds here: TTLs judged by the server's clock,
//! waiting without polling, auto-renewal, fencing tokens, semaphores, read-write locks,
//! countdown latches, every deployment (one Redis, Redlock, Cluster, Sentinel, memory).
//!
//! **Not inside an async runtime.** A call made on a thread that runs async code (inside
//! `#[tokio::main]`, a tokio task, `spawn_blocking`) fails with
//! [`LockError::BlockingInAsync`] instead of blocking that runtime's worker: there, use the
//! async API ([`Locker::as_async`] gives this locker's). A lease dropped there is released in
//! the background, as the async API's.
//!
//! ```
//! use lock_core::blocking::Locker;
//! use std::time::Duration;
//!
//! fn main() -> Result<(), lock_core::LockError> {
//!     // In production: Locker::from_url("redis://127.0.0.1:6379/")? or Locker::from_env()?
//!     let locker = Locker::memory()?;
//!
//!     let lease = locker
//!         .lock("reports:daily")
//!         .ttl(Duration::from_secs(10))
//!         .wait(Duration::from_secs(2))
//!         .fencing()
//!         .acquire()?;
//!     let token = lease.fencing_token(); // hand it to the stores you write to
//!     assert!(token.is_some());
//!     lease.extend(Duration::from_secs(20))?;
//!     // ... build the report: no other process holds "reports:daily" now ...
//!     assert!(lease.release()?);
//!
//!     // From many threads at once: each waits its turn.
//!     let threads: Vec<_> = (0..4)
//!         .map(|_| {
//!             let locker = locker.clone();
//!             std::thread::spawn(move || -> Result<(), lock_core::LockError> {
//!                 let _lease = locker.lock("counter").wait(Duration::from_secs(5)).acquire()?;
//!                 Ok(()) // released on drop
//!             })
//!         })
//!         .collect();
//!     for thread in threads {
//!         thread.join().expect("thread")?;
//!     }
//!
//!     let exports = locker.semaphore("exports", 2);
//!     let _permit = exports.permit().ttl(Duration::from_secs(30)).auto_renew().acquire()?;
//!     Ok(())
//! }
//! ```

mod latch;
mod lease;
mod prims;
mod runtime;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use latch::Latch;
pub use lease::Lease;
pub use prims::{Permit, PermitRequest, RwLease, RwLock, RwRequest, Semaphore};

use crate::builder::LockerBuilder;
use crate::locker::LockInfo;
use crate::LockError;
use runtime::{inside_runtime, Runtime, SHUTDOWN_GRACE};

/// Takes, waits for, inspects and releases named locks from synchronous code (see the
/// [module docs](self)). Cheap to clone, `Send + Sync`: build one at startup and share it
/// with every thread.
///
/// ```
/// use lock_core::blocking::Locker;
/// use lock_core::LockError;
/// use std::time::Duration;
///
/// # fn main() -> Result<(), LockError> {
/// let locker = Locker::memory()?;
/// let held = locker.try_lock("payments:order-7", Duration::from_secs(10))?;
/// assert!(matches!(
///     locker.try_lock("payments:order-7", Duration::from_secs(10)),
///     Err(LockError::Busy { .. })
/// ));
/// drop(held); // released (in the background, at once)
/// let info = locker.inspect("payments:order-7")?;
/// # let _ = info;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<Shared>,
}

/// What a blocking locker's clones, requests, leases and permits share: the async locker
/// and the runtime it runs on.
#[derive(Debug)]
pub(crate) struct Shared {
    locker: crate::Locker,
    runtime: Runtime,
}

impl Shared {
    fn block_on<F: std::future::Future>(
        &self,
        call: &'static str,
        work: F,
    ) -> Result<F::Output, LockError> {
        self.runtime.block_on(call, work)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The releases of leases dropped just before are tasks on the runtime: let them
        // end, so that no lock is left to its TTL because its release never ran.
        if !inside_runtime() {
            let done = self
                .runtime
                .handle()
                .block_on(self.locker.shutdown(SHUTDOWN_GRACE));
            if !done {
                tracing::warn!("lock_core::blocking: releases still running after {SHUTDOWN_GRACE:?} were cut off; their TTLs will free them");
            }
        }
    }
}

impl Locker {
    /// A locker on the Redis at `url`, with default settings (see
    /// [`crate::Locker::from_url`]). Connects lazily; starts the locker's runtime thread.
    pub fn from_url(url: &str) -> Result<Locker, LockError> {
        Locker::build(crate::Locker::builder().url(url))
    }

    /// A locker on `$REDIS_URL`, or on [`DEFAULT_REDIS_URL`](crate::DEFAULT_REDIS_URL).
    pub fn from_env() -> Result<Locker, LockError> {
        let url = std::env::var(crate::REDIS_URL_ENV)
            .unwrap_or_else(|_| crate::DEFAULT_REDIS_URL.to_owned());
        Locker::from_url(&url)
    }

    /// An in-process locker (for tests and single-process programs).
    pub fn memory() -> Result<Locker, LockError> {
        Locker::build(crate::Locker::builder().memory())
    }

    /// A locker from every setting of [`LockerBuilder`] (Redlock, Cluster, Sentinel, TLS,
    /// timeouts, labels):
    ///
    /// ```
    /// use lock_core::blocking;
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), lock_core::LockError> {
    /// let locker = blocking::Locker::build(
    ///     lock_core::Locker::builder()
    ///         .memory() // .url(..), .redlock([..]), .cluster([..]), .sentinel(..)
    ///         .app_name("billing")
    ///         .default_ttl(Duration::from_secs(20)),
    /// )?;
    /// assert_eq!(locker.as_async().default_ttl(), Duration::from_secs(20));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The locker is built inside its runtime, so that what it starts (a Sentinel
    /// follower) runs there. Refused inside an async runtime ([`LockError::BlockingInAsync`]).
    pub fn build(builder: LockerBuilder) -> Result<Locker, LockError> {
        runtime::refuse_inside_runtime("Locker::build")?;
        let runtime = Runtime::start()?;
        let locker = {
            let _entered = runtime.handle().enter();
            builder.build()?
        };
        Ok(Locker {
            shared: Arc::new(Shared { locker, runtime }),
        })
    }

    /// Starts a lock request for `name`: set `.ttl(..)`, `.wait(..)`, then `.acquire()`.
    pub fn lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest {
            request: self.shared.locker.lock(name),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Tries once to take `name` for `ttl`; [`LockError::Busy`] if someone holds it.
    pub fn try_lock(&self, name: impl Into<String>, ttl: Duration) -> Result<Lease, LockError> {
        self.lock(name).ttl(ttl).wait(Duration::ZERO).acquire()
    }

    /// Who holds `name` right now, if anyone (see [`crate::Locker::inspect`]).
    pub fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.shared
            .block_on("Locker::inspect", self.shared.locker.inspect(name))?
    }

    /// A counting semaphore of `permits` holders on `name` (see [`crate::Semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>, permits: u64) -> Semaphore {
        Semaphore::new(
            Arc::clone(&self.shared),
            self.shared.locker.semaphore(name, permits),
        )
    }

    /// A countdown latch on `name` (see [`crate::Latch`]).
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch::new(Arc::clone(&self.shared), self.shared.locker.latch(name))
    }

    /// A read-write lock on `name` (see [`crate::RwLock`]).
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(Arc::clone(&self.shared), self.shared.locker.rwlock(name))
    }

    /// Waits, up to `timeout`, for the releases of dropped leases and permits still in
    /// flight; true when none is left (see [`crate::Locker::shutdown`]). The last clone's
    /// drop does this by itself, for up to 2 s.
    pub fn shutdown(&self, timeout: Duration) -> Result<bool, LockError> {
        self.shared
            .block_on("Locker::shutdown", self.shared.locker.shutdown(timeout))
    }

    /// The async locker this one wraps: the same settings, connections and local queues,
    /// for async code next to the synchronous code (a lease taken through either excludes
    /// the other's requests).
    pub fn as_async(&self) -> &crate::Locker {
        &self.shared.locker
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Locker")
            .field("locker", &self.shared.locker)
            .finish_non_exhaustive()
    }
}

/// A lock request of a [`blocking::Locker`](Locker): set what differs from the locker's
/// defaults, then call [`acquire`](LockRequest::acquire).
///
/// ```
/// # use lock_core::blocking::Locker;
/// # use std::time::Duration;
/// # fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory()?;
/// let lease = locker
///     .lock("import:catalog")
///     .ttl(Duration::from_millis(300))
///     .auto_renew() // renewed by the locker's runtime thread
///     .acquire()?;
/// std::thread::sleep(Duration::from_millis(700)); // longer than the TTL
/// assert!(!lease.is_lost());
/// assert!(lease.release()?);
/// # Ok(())
/// # }
/// ```
#[must_use = "a lock request does nothing until `.acquire()` is called"]
#[derive(Debug)]
pub struct LockRequest {
    shared: Arc<Shared>,
    request: crate::LockRequest,
}

impl LockRequest {
    /// How long the lock lives if it is not released or extended (see
    /// [`crate::LockRequest::ttl`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.request = self.request.ttl(ttl);
        self
    }

    /// How long to wait while someone else holds the lock; zero tries once (see
    /// [`crate::LockRequest::wait`]).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.request = self.request.wait(wait);
        self
    }

    /// Draw a fencing token (see [`crate::LockRequest::fencing`]).
    pub fn fencing(mut self) -> Self {
        self.request = self.request.fencing();
        self
    }

    /// Keep the lease alive until it is released or dropped (see
    /// [`crate::LockRequest::auto_renew`]); the locker's runtime thread renews it, so the
    /// calling thread may block or compute meanwhile.
    pub fn auto_renew(mut self) -> Self {
        self.request = self.request.auto_renew();
        self
    }

    /// With auto-renewal: stop renewing this long after the acquisition (see
    /// [`crate::LockRequest::max_hold`]).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.request = self.request.max_hold(max_hold);
        self
    }

    /// Hold the lock at least this long from the start, even when released sooner (see
    /// [`crate::LockRequest::hold_at_least`]).
    pub fn hold_at_least(mut self, hold: Duration) -> Self {
        self.request = self.request.hold_at_least(hold);
        self
    }

    /// Takes the lock, blocking the calling thread for up to the request's wait.
    pub fn acquire(self) -> Result<Lease, LockError> {
        let LockRequest { shared, request } = self;
        let lease = shared.block_on("LockRequest::acquire", request.acquire())??;
        Ok(Lease::new(shared, lease))
    }
}
