//! `Locker`: the entry point. A facade over the [`Engine`] its clones share; the builder
//! is in `builder`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend as _;
use crate::engine::Engine;
use crate::key::LockKeys;
use crate::request::LockRequest;
use crate::token::decode_value;
use crate::{Lease, LockError};

/// Takes, waits for, inspects and releases named locks.
///
/// Cheap to clone (an `Arc`), `Send + Sync`: build one at startup and share it. Every clone
/// talks to the same Redis with the same settings.
///
/// ```
/// use lock_core::Locker;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// // Locker::from_url("redis://127.0.0.1:6379/")? in production; memory() needs no server.
/// let locker = Locker::memory();
/// let lease = locker
///     .lock("payments:order-7")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .await?;
/// // ... charge the order: no other process holds "payments:order-7" now ...
/// lease.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Locker {
    engine: Arc<Engine>,
}

impl Locker {
    /// Starts a lock request for `name`: set `.ttl(..)`, `.wait(..)`, then `.await` it.
    ///
    /// The request owns a clone of the locker, so its future can be spawned:
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # use std::future::IntoFuture as _;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let pending = tokio::spawn(locker.lock("export").into_future());
    /// let lease = pending.await.expect("join")?;
    /// assert!(lease.release().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> LockRequest {
        LockRequest::new(Arc::clone(&self.engine), name.into())
    }

    /// Tries once to take `name` for `ttl`; [`LockError::Busy`] if someone holds it.
    pub async fn try_lock(
        &self,
        name: impl Into<String>,
        ttl: Duration,
    ) -> Result<Lease, LockError> {
        self.lock(name)
            .ttl(ttl)
            .wait(Duration::ZERO)
            .acquire()
            .await
    }

    /// Who holds `name` right now, if anyone: holder label, remaining TTL and the fencing
    /// counter.
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(&self.engine.settings().prefix, name.to_owned())?;
        let state = self.engine.backend().inspect(&keys).await?;
        Ok(state.value.map(|value| {
            let (_, holder) = decode_value(&value);
            LockInfo {
                name: name.to_owned(),
                key: keys.lock.clone(),
                holder: holder.map(str::to_owned),
                remaining: state.remaining,
                fencing_counter: state.fencing_counter,
                on_replicas: state.on_replicas,
            }
        }))
    }

    /// The key prefix (default `lock:`).
    pub fn prefix(&self) -> &str {
        &self.engine.settings().prefix
    }

    /// The TTL used when a request does not set one.
    pub fn default_ttl(&self) -> Duration {
        self.engine.settings().default_ttl
    }

    /// The wait used when a request does not set one.
    pub fn default_wait(&self) -> Duration {
        self.engine.settings().default_wait
    }

    /// The label stored beside each token, telling who holds a lock.
    pub fn holder_label(&self) -> Option<&str> {
        self.engine.settings().label.as_deref()
    }

    /// Waits, up to `timeout`, for the work this locker left running in the background: the
    /// releases of dropped leases, late grants given back, waiter queues left. Call it last,
    /// before the runtime stops (at the end of `main`, after the server's graceful shutdown),
    /// so that no lock is left to its TTL because its release never ran. True when nothing
    /// is left. The locker stays usable; work started after the call is not waited for.
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::memory();
    /// let lease = locker.lock("report").await?;
    /// drop(lease); // released in the background
    /// assert!(locker.shutdown(Duration::from_secs(5)).await);
    /// assert!(locker.inspect("report").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.engine.idle())
            .await
            .is_ok()
    }

    pub(crate) fn from_engine(engine: Engine) -> Locker {
        Locker {
            engine: Arc::new(engine),
        }
    }

    /// What every clone of this locker shares.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", self.engine.backend())
            .field("settings", self.engine.settings())
            .finish()
    }
}

impl LockInfo {
    /// The holder label read into its parts (`app`, `host`, `pid`), when there is a label.
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let locker = Locker::builder().memory().app_name("billing").build()?;
    /// let _lease = locker.lock("invoices").await?;
    /// let info = locker.inspect("invoices").await?.expect("held");
    /// let holder = info.holder_parts().expect("a label");
    /// assert_eq!(holder.app.as_deref(), Some("billing"));
    /// assert_eq!(holder.pid, Some(std::process::id()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder_parts(&self) -> Option<crate::Holder> {
        self.holder.as_deref().map(crate::Holder::parse)
    }
}

/// What [`Locker::inspect`] found on a held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// The Redis key.
    pub key: String,
    /// The holder's label (`host:pid` by default, `app@host:pid` with an application name),
    /// when it stored one.
    pub holder: Option<String>,
    /// The holder's remaining TTL, when the key has one.
    pub remaining: Option<Duration>,
    /// The lock's fencing counter: the last fencing token handed out for this name.
    pub fencing_counter: Option<u64>,
    /// With the replica acknowledgement check on ([`ReplicaSync`](crate::ReplicaSync)):
    /// how many replicas had the lock's current value when it was inspected, counted by
    /// `WAIT` up to the required number (within the sync timeout). `None` when the check is
    /// off (or the master has no replicas), the value changed while it was counted, or
    /// the master could not be asked.
    pub on_replicas: Option<u32>,
}
