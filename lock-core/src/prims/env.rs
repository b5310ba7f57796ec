//! What the primitives need from a `Locker`'s engine, in one place: its settings, its
//! backend, its notifier and its background tasks. The only module of `prims` that reads
//! the engine, so that a change there touches one file here.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::permits::Store;
use crate::backend::prim_scripts::Server;
use crate::backend::{AnyBackend, Backend as _};
use crate::connection::notifier::Notifier;
use crate::connection::shared::Conn;
use crate::engine::local::NameRef;
use crate::engine::Engine;
use crate::key::LockKeys;
use crate::{LockError, Locker};

/// A Locker's engine, seen from the primitives.
#[derive(Clone, Debug)]
pub(crate) struct Env {
    engine: Arc<Engine>,
}

impl Env {
    pub fn new(locker: &Locker) -> Env {
        Env {
            engine: Arc::clone(locker.engine()),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.engine.settings().prefix
    }

    pub fn label(&self) -> Option<&str> {
        self.engine.settings().label.as_deref()
    }

    pub fn default_ttl(&self) -> Duration {
        self.engine.settings().default_ttl
    }

    pub fn default_wait(&self) -> Duration {
        self.engine.settings().default_wait
    }

    /// A waiting request's count of Redis's silence, with the locker's unreachable timeout.
    pub fn outage(&self) -> crate::wait::Outage {
        crate::wait::Outage::new(self.engine.settings().unreachable_timeout)
    }

    /// Before an acquisition of `name` begun at `begun` with `wait`: the Locker's server
    /// check (`EvictionCheck`), within the request's own time.
    pub async fn server_ready(
        &self,
        name: &str,
        begun: std::time::Instant,
        wait: Duration,
    ) -> Result<(), LockError> {
        self.engine.server_ready(name, begun, wait).await
    }

    pub fn backend(&self) -> &AnyBackend {
        self.engine.backend()
    }

    /// Where permits (semaphores, read-write locks) live for this locker: a
    /// [`LockError::Config`] naming what is missing on Redlock and WATCH/MULTI lockers.
    pub fn store(&self, name: &str) -> Result<Store, LockError> {
        if let Some(server) = self.server() {
            return Ok(Store::Server(server));
        }
        let missing = match self.engine.backend() {
            AnyBackend::Scripted(_) => "here",
            AnyBackend::Memory(memory) => return Ok(Store::Memory(Arc::clone(memory.permits()))),
            AnyBackend::Redlock(_) => {
                "on Redlock: N permits granted by a majority of nodes that each admit N \
                 holders do not bound the holders to N (three nodes with two permits each \
                 admit three majority holders)"
            }
            AnyBackend::Transaction(_) => {
                "with Protocol::Transactions: admission, expiry and the waiter queue are one \
                 Lua script"
            }
        };
        Err(LockError::Config(format!(
            "`{name}`: semaphores and read-write locks are not available {missing}; use a \
             locker on one Redis or a Cluster with Lua scripts, or Locker::memory()"
        )))
    }

    /// The scripted backend's server (one Redis or a Cluster), if that is the backend.
    pub fn server(&self) -> Option<Server> {
        match self.engine.backend() {
            AnyBackend::Scripted(scripted) => Some(scripted.server()),
            _ => None,
        }
    }

    /// The notifier whose own channel announces turns in Redis-side queues; `None` when
    /// waiters poll (a locker built from a pool, on Sentinel, or in memory).
    pub fn queue_notifier(&self) -> Option<&Notifier> {
        self.engine.queue_notifier()
    }

    /// The notifier that hears releases on `<lock key>:released`, when there is one.
    pub fn notifier(&self) -> Option<&Notifier> {
        self.engine.notifier()
    }

    /// The per-name signal of this locker's exclusive locks: fired when a lease of this
    /// locker releases `name`, or (once subscribed) when any release of it is announced.
    /// Sharing it with the lock's own waiters keeps one subscription per name and Locker.
    pub fn name_signal(&self, name: &str) -> NameRef {
        self.engine.local().get(name)
    }

    /// Gives back `value` on lock `keys`: on `sent_on`, the connection the attempt that
    /// may have taken it went out on, when there is one (the scripted backend; see
    /// `Scripted::release_on`), else through the backend's own release.
    pub async fn give_back(
        &self,
        sent_on: Option<&Conn>,
        keys: &LockKeys,
        value: &str,
    ) -> Result<bool, LockError> {
        match (self.engine.backend(), sent_on) {
            (AnyBackend::Scripted(scripted), Some(conn)) => {
                scripted.release_on(conn, keys, value).await
            }
            (backend, _) => backend.release(keys, value).await,
        }
    }

    /// Runs `work` in the background, counted for `Locker::shutdown`.
    pub fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        self.engine.spawn_background(work)
    }

    /// Runs one backend operation. Each backend bounds its own operations by the
    /// command deadline (the connections' response timeout, or WATCH/MULTI's own timer).
    pub async fn run<T>(
        &self,
        _name: &str,
        operation: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        operation.await
    }
}
