//! Read-write locks: many readers or one writer, and a writer that waits is never starved
//! by readers that keep coming.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use super::env::Env;
use super::guard::{Guard, GuardHandle};
use super::info::{HoldMode, PermitHolders};
use super::options::{request_options, Options};
use super::permits::take::take;
use crate::backend::permits::{Ask, PermitKeys, RW_CAPACITY};
use crate::{LockError, Locker};

/// A read-write lock: any number of readers at once, or one writer alone, across every
/// process. Each side is a lease with a TTL (judged by the Redis server's clock), optional
/// auto-renewal, a loss signal, and a release on drop.
///
/// **Writers are not starved.** Requests queue in one FIFO line: once a writer waits,
/// readers that arrive after it queue behind it instead of joining the readers inside, so
/// the writer gets in as soon as the readers ahead of it are done. When a writer leaves,
/// every reader queued before the next writer gets in together.
///
/// **A writer steps down; a reader does not step up.** [`RwLease::downgrade`] turns the
/// write lease into a read lease in one atomic step: no other writer gets in between, and
/// the readers queued behind it (up to the next queued writer) get in at once. The reverse,
/// [`RwLease::upgrade`], is refused with [`LockError::UpgradeRefused`]: two readers
/// upgrading at once would each wait for the other to leave, forever. A reader that asks
/// for the write side through [`RwLock::write`] waits for itself (until its `wait` runs
/// out): release the read lease first.
///
/// Made by [`Locker::rwlock`]; cheap to clone. Works on one Redis, a Redis Cluster and in
/// memory; not on Redlock nor with `Protocol::Transactions` ([`LockError::Config`]).
///
/// ```
/// use lock_core::Locker;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let catalog = locker.rwlock("catalog");
/// let reader = catalog.read().await?;
/// let another = catalog.read().await?; // readers share
/// assert!(catalog.write().wait(Duration::ZERO).await.is_err()); // the writer must wait
/// drop((reader, another));
/// let writer = catalog.write().ttl(Duration::from_secs(10)).await?;
/// writer.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    env: Env,
    name: String,
}

impl Locker {
    /// A read-write lock on `name` (see [`RwLock`]). Its keys (`<prefix>{name}:rw`, and
    /// `:rw:q`, `:rw:qe` while requests wait) never meet the lock or the semaphore of the
    /// same name.
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock {
            env: Env::new(self),
            name: name.into(),
        }
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A request for the shared (read) side.
    pub fn read(&self) -> RwRequest {
        self.request(HoldMode::Read)
    }

    /// A request for the exclusive (write) side.
    pub fn write(&self) -> RwRequest {
        self.request(HoldMode::Write)
    }

    fn request(&self, mode: HoldMode) -> RwRequest {
        RwRequest {
            lock: self.clone(),
            mode,
            options: Options::default(),
        }
    }

    /// Who holds the lock right now (readers or the writer, by the store's clock), and how
    /// many requests wait.
    pub async fn holders(&self) -> Result<PermitHolders, LockError> {
        let keys = self.keys()?;
        let store = self.env.store(&self.name)?;
        let raw = self.env.run(&self.name, store.holders(&keys)).await?;
        Ok(PermitHolders::from_raw(raw, true))
    }

    fn keys(&self) -> Result<PermitKeys, LockError> {
        PermitKeys::new(self.env.prefix(), self.name.clone(), "rw")
    }
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A request for one side of a [`RwLock`]; `.await` it.
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct RwRequest {
    lock: RwLock,
    mode: HoldMode,
    options: Options,
}

impl RwRequest {
    request_options!("the lock");
}

impl IntoFuture for RwRequest {
    type Output = Result<RwLease, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let RwRequest {
                lock,
                mode,
                options,
            } = self;
            let weight = if mode == HoldMode::Write {
                RW_CAPACITY
            } else {
                1
            };
            let ask = Ask {
                capacity: RW_CAPACITY,
                weight,
            };
            // The request owns its handle: the name moves into the keys, not cloned.
            let RwLock { env, name } = lock;
            let keys = PermitKeys::new(env.prefix(), name, "rw")?;
            let guard = take(env, keys, ask, options).await?;
            Ok(RwLease { guard, mode })
        })
    }
}

/// A held side of a [`RwLock`]: a read lease (shared) or the write lease (exclusive).
/// Release it with [`RwLease::release`]; dropping it releases it in the background, and
/// its TTL frees it in any case. The read-only view ([`GuardHandle`]) is reachable through
/// `Deref`.
#[must_use = "a lease is released as soon as it is dropped; bind it: `let _lease = ...`"]
#[derive(Debug)]
pub struct RwLease {
    guard: Guard,
    mode: HoldMode,
}

impl RwLease {
    /// [`HoldMode::Read`] or [`HoldMode::Write`].
    pub fn mode(&self) -> HoldMode {
        self.mode
    }

    /// Gives the lease back. `Ok(true)` if it was still ours; `Ok(false)` if it had
    /// already ended (nobody else's lease is touched). Through a blip it is tried again as
    /// [`Lease::release`](crate::Lease::release) is.
    pub async fn release(self) -> Result<bool, LockError> {
        self.guard.release().await
    }

    /// Resets its TTL to `ttl` from now; [`LockError::Lost`] if it had already ended, or if
    /// the answer came after its validity had run out (the lease, still ours in Redis, is
    /// then given back at once; auto-renewal does the same).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.guard.extend(ttl).await
    }

    /// Steps a write lease down to a read lease, atomically: the lease stays held
    /// throughout (same token, same TTL, its renewal goes on), no other writer can get in
    /// between, and the readers waiting behind it, up to the next waiting writer, are let
    /// in at once. A read lease stays as it is. [`LockError::Lost`] if the lease had already
    /// ended; after another error (Redis unreachable) it is still the write lease.
    ///
    /// ```
    /// # use lock_core::{HoldMode, Locker};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let catalog = locker.rwlock("catalog");
    /// let mut lease = catalog.write().await?;
    /// // ... write the new catalog ...
    /// lease.downgrade().await?; // now a reader: others read with us, no writer in between
    /// assert_eq!(lease.mode(), HoldMode::Read);
    /// let reader = catalog.read().wait(Duration::ZERO).await?;
    /// assert!(catalog.write().wait(Duration::ZERO).await.is_err());
    /// # drop(reader);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(&mut self) -> Result<(), LockError> {
        if self.mode == HoldMode::Read {
            return Ok(());
        }
        self.guard.reweigh(1).await?;
        self.mode = HoldMode::Read;
        Ok(())
    }

    /// Refused for a read lease, with [`LockError::UpgradeRefused`] saying why: two readers
    /// upgrading at once would each wait for the other's read lease to end, forever.
    /// Release the read lease and ask for the write side (re-reading what was read: it may
    /// have changed in between), or take the write side from the start and
    /// [`downgrade`](RwLease::downgrade) it once the write is done. A write lease is left
    /// as it is (`Ok`).
    ///
    /// ```
    /// # use lock_core::{LockError, Locker};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let mut reader = locker.rwlock("catalog").read().await?;
    /// let refused = reader.upgrade().unwrap_err();
    /// assert!(matches!(refused, LockError::UpgradeRefused { .. }));
    /// assert!(refused.to_string().contains("would each wait for the other"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn upgrade(&mut self) -> Result<(), LockError> {
        if self.mode == HoldMode::Read {
            return Err(LockError::UpgradeRefused {
                name: self.name().to_owned(),
            });
        }
        Ok(())
    }

    /// A cloneable view of this lease.
    pub fn handle(&self) -> GuardHandle {
        self.guard.handle().clone()
    }
}

impl Deref for RwLease {
    type Target = GuardHandle;

    fn deref(&self) -> &GuardHandle {
        self.guard.handle()
    }
}
