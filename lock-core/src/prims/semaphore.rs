//! Counting semaphores: at most N holders of a name at once, across every process.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use super::env::Env;
use super::guard::{Guard, GuardHandle};
use super::info::PermitHolders;
use super::options::{request_options, Options};
use super::permits::take::take;
use crate::backend::permits::{Ask, CapacitySet, PermitKeys};
use crate::{LockError, Locker};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u64 = 1_000_000;

/// How long a number of permits set with [`Semaphore::set_capacity`] outlives the
/// semaphore's last use (24 hours): while permits are held or requests wait it stays; once
/// the semaphore is idle this long, it is forgotten and the next request stores its own
/// number.
pub const CAPACITY_PIN: Duration = Duration::from_secs(24 * 60 * 60);

/// A counting semaphore: at most `permits` holders of its name at once, across every
/// process. Each permit is a lease with a TTL (judged by the Redis server's clock, so a
/// crashed holder's permit comes back when its TTL ends), optional auto-renewal, a loss
/// signal, and a release on drop. Waiters queue in FIFO order and are woken one by one as
/// permits come free (no herd).
///
/// Made by [`Locker::semaphore`]; cheap to clone.
///
/// **The number of permits is the semaphore's, stored with it.** The first request while the
/// semaphore is idle (nobody holds a permit, nobody waits) stores its `permits` with it (in
/// Redis, next to the holders); while anyone holds or waits, a request that asks for
/// another number fails at once with [`LockError::CapacityMismatch`] (naming both numbers)
/// and takes nothing, so two processes that disagree never admit more holders than the
/// stored number. To change N while the semaphore is in use, call
/// [`Semaphore::set_capacity`]: the number it stores wins over the one requests ask for
/// (raising it lets waiters in at once; lowering it takes no permit from a holder). Or
/// deploy the new number and let the semaphore fall idle: the next request stores its own.
/// [`Semaphore::holders`] shows the stored number.
///
/// Works on one Redis, a Redis Cluster (every key of a semaphore shares its name's hash
/// tag) and in memory. Not on Redlock (N per node does not bound a majority's holders to
/// N) nor with `Protocol::Transactions` (no scripts): the request fails with
/// [`LockError::Config`].
///
/// ```
/// use lock_core::Locker;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// let locker = Locker::memory();
/// let exports = locker.semaphore("exports", 2); // at most 2 exports at once, fleet-wide
/// let first = exports.acquire().ttl(Duration::from_secs(30)).await?;
/// let second = exports.acquire().await?;
/// let refused = exports.try_acquire(Duration::from_secs(30)).await.unwrap_err();
/// assert!(matches!(refused, lock_core::LockError::LimitReached { permits: 2, .. }));
/// assert!(refused.to_string().starts_with("all 2 permits of `exports` are taken"));
/// first.release().await?;
/// let third = exports.acquire().auto_renew().await?; // the freed permit
/// assert_eq!(exports.holders().await?.holders.len(), 2);
/// assert_eq!(exports.holders().await?.capacity, Some(2)); // stored with the semaphore
/// // Another process asking for 3 while it is in use is refused, not admitted:
/// let wider = locker.semaphore("exports", 3);
/// assert!(matches!(
///     wider.try_acquire(Duration::from_secs(30)).await,
///     Err(lock_core::LockError::CapacityMismatch { stored: 2, asked: 3, .. })
/// ));
/// # drop((second, third));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    env: Env,
    name: String,
    permits: u64,
}

impl Locker {
    /// A counting semaphore of `permits` holders on `name` (see [`Semaphore`]). Its keys
    /// (`<prefix>{name}:sem`, and `:sem:q`, `:sem:qe` while requests wait) never meet the
    /// lock or the read-write lock of the same name.
    pub fn semaphore(&self, name: impl Into<String>, permits: u64) -> Semaphore {
        Semaphore {
            env: Env::new(self),
            name: name.into(),
            permits,
        }
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle's requests ask for; they must agree with the number
    /// stored with the semaphore while it is in use (see [`Semaphore`]).
    pub fn permits(&self) -> u64 {
        self.permits
    }

    /// A request for one permit: set `.ttl(..)`, `.wait(..)`, `.auto_renew()`, then
    /// `.await` it. No permit free (within the wait) is [`LockError::LimitReached`], "all N
    /// permits of `name` are taken" (see [`LockError`]'s rule).
    pub fn acquire(&self) -> PermitRequest {
        self.acquire_many(1)
    }

    /// A request for `n` permits at once, held and released together as one [`Permit`]
    /// (tokio's `Semaphore::acquire_many`). It waits in the same FIFO line as one-permit
    /// requests and is never starved by them: a request that does not fit stops the line
    /// behind it, so the permits freed by the holders ahead of it accumulate for it, and
    /// it gets in once they are enough. The same Redis calls per acquisition and release as
    /// one permit. More than the semaphore has is refused at once with
    /// [`LockError::PermitsAboveCapacity`].
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let gpus = locker.semaphore("gpus", 8);
    /// let training = gpus.acquire_many(6).ttl(Duration::from_secs(60)).await?;
    /// assert_eq!(training.permits(), 6);
    /// let small = gpus.acquire_many(2).await?;        // the last 2
    /// assert!(gpus.try_acquire(Duration::from_secs(5)).await.is_err());
    /// assert_eq!(gpus.holders().await?.holders.iter().map(|h| h.weight).sum::<u64>(), 8);
    /// assert!(matches!(
    ///     gpus.acquire_many(9).await,
    ///     Err(LockError::PermitsAboveCapacity { asked: 9, permits: 8, .. })
    /// ));
    /// # drop((training, small));
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_many(&self, n: u64) -> PermitRequest {
        PermitRequest {
            semaphore: self.clone(),
            options: Options::default(),
            weight: n,
        }
    }

    /// Tries once to take a permit for `ttl`; [`LockError::LimitReached`] (with `waited:
    /// None`) if all are held, or requests are queued ahead.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Permit, LockError> {
        self.acquire().ttl(ttl).wait(Duration::ZERO).await
    }

    /// Who holds permits right now (by the store's clock), how many requests wait, and the
    /// number of permits stored with the semaphore ([`PermitHolders::capacity`]).
    pub async fn holders(&self) -> Result<PermitHolders, LockError> {
        let keys = self.keys()?;
        let store = self.env.store(&self.name)?;
        let raw = self.env.run(&self.name, store.holders(&keys)).await?;
        Ok(PermitHolders::from_raw(raw, false))
    }

    /// Changes the number of permits stored with the semaphore, while it is in use, and
    /// returns the number stored before (`None`: none was, the semaphore was idle).
    ///
    /// - **Raising** it lets the waiters that now fit in at once, in their order (woken in
    ///   the same step, as a release wakes them).
    /// - **Lowering** it takes no permit from anyone: the holders keep theirs, and no
    ///   request is granted until the permits held are fewer than the new number.
    /// - The change is one atomic step: of two concurrent calls, one number ends up stored,
    ///   and no request is judged against a mix of both.
    ///
    /// The number set is **pinned**: every request is judged against it instead of its own
    /// number (one asking for another gets in against the stored one rather than failing
    /// with [`LockError::CapacityMismatch`]; one asking for more permits at once than it has
    /// fails with [`LockError::PermitsAboveCapacity`]). The pin lives with the semaphore's
    /// keys: while permits are held or requests wait it stays, and once the semaphore is
    /// idle it is forgotten after [`CAPACITY_PIN`] (then the next request stores its own
    /// number again). A number below what a waiting request asks for at once is refused
    /// with [`LockError::Config`] (that request could never be granted). On one Redis,
    /// Sentinel, a Cluster and in memory; not on Redlock (as every semaphore operation).
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// let exports = locker.semaphore("exports", 1);
    /// let first = exports.acquire().await?;
    /// assert!(exports.try_acquire(Duration::from_secs(5)).await.is_err());
    /// assert_eq!(exports.set_capacity(2).await?, Some(1)); // raised while in use
    /// let second = exports.try_acquire(Duration::from_secs(5)).await?;
    /// assert_eq!(exports.holders().await?.capacity, Some(2));
    /// exports.set_capacity(1).await?; // lowered: both keep their permits
    /// assert_eq!(exports.holders().await?.holders.len(), 2);
    /// second.release().await?;
    /// assert!(exports.try_acquire(Duration::from_secs(5)).await.is_err()); // 1 held of 1
    /// # drop(first);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_capacity(&self, permits: u64) -> Result<Option<u64>, LockError> {
        check_permits(&self.name, permits)?;
        let keys = self.keys()?;
        let store = self.env.store(&self.name)?;
        let span = tracing::debug_span!("set_capacity", name = %self.name, permits);
        let _entered = span.enter();
        let set = self
            .env
            .run(
                &self.name,
                store.set_capacity(&keys, permits, CAPACITY_PIN, self.env.queue_notifier()),
            )
            .await?;
        match set {
            CapacitySet::Set { before } => {
                tracing::debug!(name = %self.name, ?before, permits, "semaphore capacity set");
                Ok(before)
            }
            CapacitySet::WaiterAbove { weight } => Err(LockError::Config(format!(
                "semaphore `{}`: a waiting request asks for {weight} permits at once, more                  than the {permits} asked for, so it could never be granted; set at least                  {weight}, or let that request end first",
                self.name
            ))),
        }
    }

    fn keys(&self) -> Result<PermitKeys, LockError> {
        PermitKeys::new(self.env.prefix(), self.name.clone(), "sem")
    }

    fn ask(&self, weight: u64) -> Result<Ask, LockError> {
        check_permits(&self.name, self.permits)?;
        if weight == 0 {
            return Err(LockError::Config(format!(
                "semaphore `{}`: a request for 0 permits takes nothing; ask for 1 or more",
                self.name
            )));
        }
        if weight > self.permits {
            return Err(LockError::PermitsAboveCapacity {
                name: self.name.clone(),
                asked: weight,
                permits: self.permits,
            });
        }
        Ok(Ask {
            capacity: self.permits,
            weight,
        })
    }
}

/// A semaphore's number of permits must be between 1 and [`MAX_PERMITS`].
fn check_permits(name: &str, permits: u64) -> Result<(), LockError> {
    if !(1..=MAX_PERMITS).contains(&permits) {
        return Err(LockError::Config(format!(
            "semaphore `{name}`: {permits} permits; it needs between 1 and {MAX_PERMITS}"
        )));
    }
    Ok(())
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

/// A request for one permit (or, from [`Semaphore::acquire_many`], several) of a
/// [`Semaphore`]; `.await` it.
#[must_use = "a permit request does nothing until it is awaited"]
#[derive(Debug)]
pub struct PermitRequest {
    semaphore: Semaphore,
    options: Options,
    weight: u64,
}

impl PermitRequest {
    request_options!("a permit");
}

impl IntoFuture for PermitRequest {
    type Output = Result<Permit, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let PermitRequest {
                semaphore,
                options,
                weight,
            } = self;
            let ask = semaphore.ask(weight)?;
            // The request owns its handle: the name moves into the keys, not cloned.
            let Semaphore { env, name, permits } = semaphore;
            let keys = PermitKeys::new(env.prefix(), name, "sem")?;
            let guard = take(env, keys, ask, options)
                .await
                .map_err(|err| err.into_limit_of(permits, weight))?;
            Ok(Permit { guard, weight })
        })
    }
}

/// One held permit of a [`Semaphore`]. Release it with [`Permit::release`]; dropping it
/// releases it in the background, and its TTL frees it in any case. The read-only view
/// ([`GuardHandle`]: name, validity, loss signal) is reachable through `Deref`.
#[must_use = "a permit is released as soon as it is dropped; bind it: `let _permit = ...`"]
#[derive(Debug)]
pub struct Permit {
    guard: Guard,
    weight: u64,
}

impl Permit {
    /// How many permits this holds (1, or `n` from [`Semaphore::acquire_many`]).
    pub fn permits(&self) -> u64 {
        self.weight
    }

    /// Gives the permit back. `Ok(true)` if it was still ours; `Ok(false)` if it had
    /// already ended (nobody else's permit is touched). Through a blip it is tried again as
    /// [`Lease::release`](crate::Lease::release) is.
    pub async fn release(self) -> Result<bool, LockError> {
        self.guard.release().await
    }

    /// Resets its TTL to `ttl` from now; [`LockError::Lost`] if it had already ended (it
    /// is then marked lost), or if the answer came after its validity had run out (the
    /// permit, still ours in Redis, is then given back at once; auto-renewal does the same).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.guard.extend(ttl).await
    }

    /// A cloneable view of this permit.
    pub fn handle(&self) -> GuardHandle {
        self.guard.handle().clone()
    }
}

impl Deref for Permit {
    type Target = GuardHandle;

    fn deref(&self) -> &GuardHandle {
        self.guard.handle()
    }
}
