//! Multi-locks: several exclusive locks taken all-or-nothing, held as one lease.

mod acquire;
mod release;

use std::future::{Future, IntoFuture};
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture};

use super::env::Env;
use super::guard::{Guard, GuardHandle, Ops, Parts};
use super::options::{request_options, Options};
use crate::backend::prim_scripts::Server;
use crate::backend::Backend as _;
use crate::key::LockKeys;
use crate::token::{decode_value, is_ours};
use crate::{LockError, Locker};

impl Locker {
    /// A request for every lock of `names` at once, all or nothing: "lock buyer, seller and
    /// item together". The locks are the same as [`Locker::lock`]'s (a multi-lock and a
    /// plain lock of one name exclude each other), and the result is one lease that renews
    /// and releases them together.
    ///
    /// - **One Redis**: one script checks and sets every key, one round trip; a holder
    ///   that crashes half-way cannot exist (the script is atomic). The release is one
    ///   script too: it frees every name still holding the lease's value and hands a name
    ///   that a single-lock waiter queues for to that waiter, as a plain lock's release
    ///   does (N + 2 Redis calls to take N names, 3 to give them back).
    /// - **WATCH/MULTI**: every key is watched and read in one round trip, then all are
    ///   set in one `MULTI`/`EXEC`, or none: nobody ever sees part of the multi-lock held.
    ///   The release frees the names one by one.
    /// - **Cluster, Redlock, memory**: the locks are taken one by one in the
    ///   order of their keys, each with its TTL, and at the first busy one those already
    ///   taken are given back before the request waits. Nobody holds part of a multi-lock
    ///   while waiting for the rest, so two multi-locks can never deadlock; a holder that
    ///   crashes half-way leaves only locks that expire with their TTL.
    ///
    /// Duplicate names count once. A waiting multi-lock does not stand in the locks'
    /// waiter queues: it wakes at each release of the lock that was busy, whoever holds it
    /// by then (it marks each holder's value it finds as listened for), or at its holder's
    /// TTL, and tries again. So two multi-locks looping on the same names each get in,
    /// but under a steady stream of single-lock waiters on one of its names (who are
    /// handed the lock in turn, without a gap) it can wait its whole `wait`.
    ///
    /// ```
    /// use lock_core::Locker;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let trade = locker
    ///     .lock_all(["buyer:7", "seller:3", "item:17"])
    ///     .ttl(Duration::from_secs(10))
    ///     .await?;
    /// assert!(locker.try_lock("item:17", Duration::from_secs(1)).await.is_err());
    /// assert!(trade.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_all<I, S>(&self, names: I) -> MultiRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiRequest {
            env: Env::new(self),
            names: names.into_iter().map(Into::into).collect(),
            options: Options::default(),
        }
    }
}

/// A request for several locks at once (see [`Locker::lock_all`]); `.await` it.
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct MultiRequest {
    env: Env,
    names: Vec<String>,
    options: Options,
}

impl MultiRequest {
    request_options!("every lock");
}

impl IntoFuture for MultiRequest {
    type Output = Result<MultiLease, LockError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

impl MultiRequest {
    async fn acquire(self) -> Result<MultiLease, LockError> {
        let MultiRequest {
            env,
            names,
            options,
        } = self;
        let mut keys = names
            .into_iter()
            .map(|name| LockKeys::new(env.prefix(), name))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(LockError::InvalidName {
                name: String::new(),
                reason: "lock_all needs at least one name",
            });
        }
        // One global order for everyone: the keys'.
        keys.sort_by(|a, b| a.lock.cmp(&b.lock));
        keys.dedup_by(|a, b| a.lock == b.lock);
        let joined = keys
            .iter()
            .map(|k| k.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let (ttl, wait) = options.resolve(&env, &joined)?;
        let span = tracing::debug_span!("lock.multi.acquire", names = %joined, ttl_ms = ttl.as_millis() as u64, wait_ms = wait.as_millis() as u64);
        let taken =
            tracing::Instrument::instrument(acquire::acquire(&env, &keys, ttl, wait), span).await?;
        let token = decode_value(&taken.value).0.to_owned();
        let names = keys.iter().map(|k| k.name.clone()).collect();
        let ops = MultiOps {
            env: env.clone(),
            keys,
            value: taken.value,
            server: taken.server,
            given_back: release::GivenBack::default(),
        };
        let guard = Guard::new(Parts {
            env,
            name: joined,
            token,
            ops: Box::new(ops),
            ttl,
            started: taken.started,
            renew: options.renew,
        });
        Ok(MultiLease { guard, names })
    }
}

/// Several locks held together, taken by [`Locker::lock_all`]. Renewal, release and
/// `lost()` cover all of them: the lease is lost as soon as any one is. Dropping it
/// releases them in the background; their TTL frees them in any case.
#[must_use = "the locks are released as soon as the lease is dropped; bind it: `let _lease = ...`"]
#[derive(Debug)]
pub struct MultiLease {
    guard: Guard,
    names: Vec<String>,
}

impl MultiLease {
    /// The lock names, in the order they were taken (their keys' order), duplicates
    /// removed.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Releases every lock. `Ok(true)` if all were still ours; `Ok(false)` if any had
    /// ended (the others are released all the same, and nobody else's lock is touched).
    /// Through a blip it is tried again as [`Lease::release`](crate::Lease::release) is,
    /// for the locks whose release failed.
    pub async fn release(self) -> Result<bool, LockError> {
        self.guard.release().await
    }

    /// Resets every lock's TTL to `ttl` from now, in one round trip on one Redis;
    /// [`LockError::Lost`] if any had ended.
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        self.guard.extend(ttl).await
    }

    /// A cloneable view of this lease.
    pub fn handle(&self) -> GuardHandle {
        self.guard.handle().clone()
    }
}

impl Deref for MultiLease {
    type Target = GuardHandle;

    fn deref(&self) -> &GuardHandle {
        self.guard.handle()
    }
}

struct MultiOps {
    env: Env,
    keys: Vec<LockKeys>,
    value: String,
    /// The server whose one script took every lock: it gives them back in one script.
    /// `None`: they were taken one by one, and go back one by one.
    server: Option<Server>,
    /// Taken one by one: the answers to the locks' releases so far.
    given_back: release::GivenBack,
}

impl Ops for MultiOps {
    fn release(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            match &self.server {
                Some(server) => release::release_all(server, None, &self.keys, &self.value).await,
                None => {
                    release::release_rest(&self.env, &self.keys, &self.value, &self.given_back)
                        .await
                }
            }
        })
    }

    fn extend(&self, ttl: Duration) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let items: Vec<_> = self
                .keys
                .iter()
                .map(|k| (k, self.value.as_str(), ttl))
                .collect();
            let extended = self.env.backend().extend_many(&items).await;
            extended
                .into_iter()
                .try_fold(true, |all, one| one.map(|held| all && held))
        })
    }

    fn held(&self) -> BoxFuture<'_, Result<bool, LockError>> {
        Box::pin(async move {
            let backend = self.env.backend();
            let states = join_all(
                self.keys
                    .iter()
                    .map(|k| self.env.run(&k.name, backend.inspect(k))),
            )
            .await;
            states.into_iter().try_fold(true, |all, state| {
                state.map(|s| {
                    all && s
                        .value
                        .is_some_and(|stored| is_ours(stored.as_bytes(), &self.value))
                })
            })
        })
    }
}
