//! `Locker`: the entry point, and its builder.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_redis::Pool;
use futures_util::FutureExt as _;

use crate::backend::memory::Memory;
use crate::backend::redlock::Redlock;
use crate::backend::scripted::{ScriptMode, Scripted};
use crate::backend::transaction::Transactional;
use crate::backend::{AnyBackend, Backend as _};
use crate::background::Background;
use crate::conn::{SharedConnection, Source};
use crate::connect::{self, TlsSetting};
use crate::key::{validate_ttl, validate_wait, LockKeys};
use crate::local::LocalNames;
use crate::notifier::Notifier;
use crate::renew::Renewer;
use crate::request::LockRequest;
use crate::token::{bound_label, decode_value, default_label};
use crate::{Lease, LockError};

/// The environment variable [`Locker::from_env`] reads.
pub const REDIS_URL_ENV: &str = "REDIS_URL";

/// Where [`Locker::from_env`] connects when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";

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
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    backend: AnyBackend,
    settings: Settings,
    local: Arc<LocalNames>,
    /// Release notifications; `None` when the locker has no URL to open a pub/sub
    /// connection with (built from a pool) or needs none (memory).
    notifier: Option<Notifier>,
    /// Waiters stand in the lock's Redis-side queue and are told their turn on the
    /// notifier's own channel (one Redis or a Cluster, on Lua scripts, with a notifier);
    /// otherwise they subscribe to each lock's release channel, or poll.
    queued_waits: bool,
    /// Every command this locker sends answers or fails within the command timeout (the
    /// connections were configured here): an attempt that ends well before a request's
    /// deadline needs no timer of its own.
    commands_bounded: bool,
    renewer: Renewer,
    background: Arc<Background>,
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub prefix: String,
    pub default_ttl: Duration,
    pub default_wait: Duration,
    pub label: Option<String>,
    pub fencing: bool,
    pub command_timeout: Duration,
}

/// How the Redis backends talk to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// Lua scripts (`EVALSHA`, falling back to `EVAL` after a script-cache flush): one round
    /// trip per operation. The default.
    #[default]
    Scripts,
    /// `WATCH`/`MULTI`/`EXEC` only, for servers or proxies where scripting is disabled. Same
    /// guarantees, two round trips per operation.
    Transactions,
}

impl Locker {
    /// A locker on the Redis at `url` (`redis://[user:password@]host[:port][/db]`, or
    /// `rediss://` for TLS with the `tls-rustls` feature), with default settings. Connects
    /// lazily: a wrong host shows up as [`LockError::Connection`] on the first lock, a
    /// malformed URL as [`LockError::Config`] here.
    pub fn from_url(url: &str) -> Result<Locker, LockError> {
        Locker::builder().url(url).build()
    }

    /// A locker on `$REDIS_URL`, or on [`DEFAULT_REDIS_URL`] when it is not set.
    pub fn from_env() -> Result<Locker, LockError> {
        let url = std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
        Locker::from_url(&url)
    }

    /// A locker on an existing deadpool-redis pool, with default settings, whose waiters
    /// poll.
    ///
    /// A pool gives no way to open the pub/sub connection that tells waiters their turn, so
    /// a locker built this way neither stands in the waiter queue nor hears releases: its
    /// waiting requests retry on a timer (2 ms growing to 100 ms, cut short by the holder's
    /// TTL), a hand-off of tens of milliseconds instead of about one, and waiters of several
    /// processes race for each release. Give the builder a client for the same server next
    /// to the pool ([`LockerBuilder::pubsub_client`]) and its waiters queue and are told
    /// their turn like those of [`Locker::from_url`]:
    ///
    /// ```
    /// # use lock_core::{deadpool_redis, Locker};
    /// # use lock_core::deadpool_redis::redis;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "redis://127.0.0.1:6379/";
    /// let pool = deadpool_redis::Config::from_url(url).create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
    /// let locker = Locker::builder()
    ///     .pool(pool)
    ///     .pubsub_client(redis::Client::open(url)?)
    ///     .build()?;
    /// # drop(locker);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_pool(pool: Pool) -> Locker {
        let settings = LockerBuilder::new().settings();
        let conn = SharedConnection::new(Source::Pool(pool), settings.command_timeout);
        Locker::with_backend(
            AnyBackend::Scripted(Scripted::new(conn, ScriptMode::Eval)),
            settings,
            None,
        )
    }

    /// A locker whose locks live in this process only: the same semantics (TTL, tokens,
    /// fencing) without a server. For tests and single-process applications; clones share
    /// the locks, separate `memory()` lockers do not.
    pub fn memory() -> Locker {
        Locker::builder().memory().build_infallible()
    }

    /// A builder for every setting.
    pub fn builder() -> LockerBuilder {
        LockerBuilder::new()
    }

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
        LockRequest::new(self.clone(), name.into())
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

    /// Runs `work` while holding `name` (waiting up to the locker's default wait), without
    /// renewal, and releases the lock on every path: normal completion, an error inside
    /// `work`, or a panic (which is resumed after the release). If the lease was lost while
    /// `work` ran, the result is [`LockError::Lost`].
    ///
    /// Deprecated: `work`'s own `Result` ends up nested in the lock's, it gets neither its
    /// lease nor renewal, and a loss replaces its output. [`Locker::using`] is the same
    /// with the lease passed to a closure, renewal on, one `?` for both kinds of error, and
    /// the lost-lease rule of `#[redis_locked]`:
    ///
    /// ```
    /// # use lock_core::{Locker, LockError};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let locker = Locker::memory();
    /// // Before: locker.with_lock("nightly-report", ttl, async { 40 + 2 }).await?
    /// let total = locker
    ///     .using("nightly-report", |_lease| async { Ok::<_, LockError>(40 + 2) })
    ///     .await?;
    /// assert_eq!(total, 42);
    /// # Ok(())
    /// # }
    /// ```
    #[deprecated(
        since = "0.1.0",
        note = "use `locker.lock(name).ttl(ttl).using(|lease| async { .. })`: the work gets its lease, is renewed, and composes with `?`"
    )]
    pub async fn with_lock<F>(
        &self,
        name: impl Into<String>,
        ttl: Duration,
        work: F,
    ) -> Result<F::Output, LockError>
    where
        F: Future,
    {
        let lease = self.lock(name).ttl(ttl).acquire().await?;
        let outcome = AssertUnwindSafe(work).catch_unwind().await;
        let name = lease.name().to_owned();
        let released = lease.release().await;
        let output = match outcome {
            Ok(output) => output,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        match released {
            Ok(true) => Ok(output),
            Ok(false) => Err(LockError::Lost { name }),
            Err(err) => {
                // The work is done and the lock was ours; only the courtesy release failed,
                // and the TTL will free the lock.
                tracing::warn!(%name, %err, "release after with_lock failed; the TTL will free the lock");
                Ok(output)
            }
        }
    }

    /// Who holds `name` right now, if anyone: holder label, remaining TTL and the fencing
    /// counter.
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let keys = LockKeys::new(&self.inner.settings.prefix, name.to_owned())?;
        let state = self.backend().inspect(&keys).await?;
        Ok(state.value.map(|value| {
            let (_, holder) = decode_value(&value);
            LockInfo {
                name: name.to_owned(),
                key: keys.lock.clone(),
                holder: holder.map(str::to_owned),
                remaining: state.remaining,
                fencing_counter: state.fencing_counter,
            }
        }))
    }

    /// The key prefix (default `lock:`).
    pub fn prefix(&self) -> &str {
        &self.inner.settings.prefix
    }

    /// The TTL used when a request does not set one.
    pub fn default_ttl(&self) -> Duration {
        self.inner.settings.default_ttl
    }

    /// The wait used when a request does not set one.
    pub fn default_wait(&self) -> Duration {
        self.inner.settings.default_wait
    }

    /// The label stored beside each token, telling who holds a lock.
    pub fn holder_label(&self) -> Option<&str> {
        self.inner.settings.label.as_deref()
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub(crate) fn backend(&self) -> &AnyBackend {
        &self.inner.backend
    }

    /// True when both handles are clones of one locker.
    pub(crate) fn same_as(&self, other: &Locker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
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
        tokio::time::timeout(timeout, self.inner.background.idle())
            .await
            .is_ok()
    }

    /// Runs `work` in the background, counted for [`Locker::shutdown`]; false outside a
    /// tokio runtime (nothing runs then).
    pub(crate) fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        self.inner.background.spawn(work)
    }

    pub(crate) fn local(&self) -> &Arc<LocalNames> {
        &self.inner.local
    }

    pub(crate) fn renewer(&self) -> &Renewer {
        &self.inner.renewer
    }

    pub(crate) fn notifier(&self) -> Option<&Notifier> {
        self.inner.notifier.as_ref()
    }

    /// The notifier, when waiters use the Redis-side waiter queue.
    pub(crate) fn queue_notifier(&self) -> Option<&Notifier> {
        self.inner
            .notifier
            .as_ref()
            .filter(|_| self.inner.queued_waits)
    }

    /// Whether one attempt, started now, certainly ends before `deadline` without a timer of
    /// its own: the connection set-up and each of its at most `commands` commands are bounded
    /// by the command timeout. True saves a timer per uncontended acquisition.
    pub(crate) fn attempt_ends_before(&self, deadline: Instant, commands: u32) -> bool {
        let inner = &self.inner;
        inner.commands_bounded
            && Instant::now() + inner.settings.command_timeout * (commands + 1) < deadline
    }

    fn with_backend(backend: AnyBackend, settings: Settings, notifier: Option<Notifier>) -> Locker {
        Locker::with_bounds(backend, settings, notifier, false)
    }

    fn with_bounds(
        backend: AnyBackend,
        settings: Settings,
        notifier: Option<Notifier>,
        commands_bounded: bool,
    ) -> Locker {
        // The queue needs the scripts, and a channel to be told on.
        let queued_waits = notifier.is_some() && matches!(backend, AnyBackend::Scripted(_));
        Locker {
            inner: Arc::new(Inner {
                backend,
                settings,
                local: Arc::default(),
                notifier,
                queued_waits,
                commands_bounded,
                renewer: Renewer::default(),
                background: Arc::default(),
            }),
        }
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.inner.backend)
            .field("settings", &self.inner.settings)
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
}

/// Builds a [`Locker`]. Every setting has a default; `url`, `pool` or `memory` picks the
/// store (default: `$REDIS_URL`, else [`DEFAULT_REDIS_URL`]).
///
/// ```
/// use lock_core::{Locker, Protocol};
/// use std::time::Duration;
///
/// let locker = Locker::builder()
///     .url("redis://127.0.0.1:6379/")
///     .prefix("myapp:lock:")
///     .default_ttl(Duration::from_secs(15))
///     .default_wait(Duration::from_secs(3))
///     .pool_size(16)
///     .app_name("billing")
///     .protocol(Protocol::Scripts)
///     .build()?;
/// assert_eq!(locker.prefix(), "myapp:lock:");
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug, Clone)]
pub struct LockerBuilder {
    store: Store,
    prefix: String,
    default_ttl: Duration,
    default_wait: Duration,
    pool_size: Option<usize>,
    label: Label,
    protocol: Protocol,
    fencing: bool,
    command_timeout: Duration,
    node_timeout: Duration,
    script_mode: ScriptMode,
    tls: TlsSetting,
    pubsub_client: Option<redis::Client>,
}

#[derive(Clone)]
enum Store {
    Env,
    Url(String),
    Pool(Pool),
    Memory,
    Redlock(Vec<String>),
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Store::Env => f.write_str("Env"),
            // A URL may carry a password.
            Store::Url(_) => f.write_str("Url(..)"),
            Store::Pool(_) => f.write_str("Pool(..)"),
            Store::Memory => f.write_str("Memory"),
            Store::Redlock(urls) => write!(f, "Redlock({} nodes)", urls.len()),
            #[cfg(feature = "cluster")]
            Store::Cluster(urls) => write!(f, "Cluster({} seeds)", urls.len()),
            #[cfg(feature = "sentinel")]
            Store::Sentinel { master, .. } => write!(f, "Sentinel({master})"),
        }
    }
}

#[derive(Debug, Clone)]
enum Label {
    Default { app: Option<String> },
    Custom(String),
    Off,
}

impl LockerBuilder {
    fn new() -> LockerBuilder {
        LockerBuilder {
            store: Store::Env,
            prefix: "lock:".to_owned(),
            default_ttl: crate::defaults::TTL,
            default_wait: crate::defaults::WAIT,
            pool_size: None,
            label: Label::Default { app: None },
            protocol: Protocol::Scripts,
            fencing: false,
            command_timeout: Duration::from_secs(3),
            node_timeout: Duration::from_millis(100),
            script_mode: ScriptMode::Eval,
            tls: TlsSetting::default(),
            pubsub_client: None,
        }
    }

    /// Connect to the Redis at `url`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.store = Store::Url(url.into());
        self
    }

    /// Use an existing deadpool-redis pool. Without [`LockerBuilder::pubsub_client`] its
    /// waiters poll (see [`Locker::from_pool`]).
    pub fn pool(mut self, pool: Pool) -> Self {
        self.store = Store::Pool(pool);
        self
    }

    /// With [`LockerBuilder::pool`]: a client for the pool's server (same address, auth and
    /// TLS settings), with which the locker opens the one pub/sub connection that tells its
    /// waiters their turn. Waiting then works as with a URL: the Redis-side waiter queue,
    /// hand-offs of about a millisecond. With any other store, [`LockError::Config`] at
    /// `build`: those open their own.
    pub fn pubsub_client(mut self, client: redis::Client) -> Self {
        self.pubsub_client = Some(client);
        self
    }

    /// Redlock over independent Redis masters (N odd, typically 3 or 5): a lock needs a
    /// majority of them, so locking keeps working while a minority is down. See the crate
    /// docs for the guarantees and the delayed-restart rule.
    ///
    /// ```
    /// # use lock_core::Locker;
    /// let locker = Locker::builder()
    ///     .redlock(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"])
    ///     .build()?;
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn redlock<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.store = Store::Redlock(urls.into_iter().map(Into::into).collect());
        self
    }

    /// A Redis Cluster, reached through any of its nodes (`seeds`). Every key of one lock
    /// carries the lock name as a hash tag, so each lock lives in one slot and its scripts
    /// never touch two slots; the cluster connection follows MOVED/ASK redirections during
    /// resharding and failover. Requires the `cluster` feature.
    ///
    /// ```no_run
    /// # use lock_core::Locker;
    /// let locker = Locker::builder()
    ///     .cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
    ///     .build()?;
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn cluster<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.store = Store::Cluster(seeds.into_iter().map(Into::into).collect());
        self
    }

    /// The master that Redis Sentinel names for `master` (the `sentinels` are the
    /// Sentinels' URLs). After a failover, the first failed command makes the locker ask
    /// the Sentinels again. Requires the `sentinel` feature.
    ///
    /// Caveat: Redis replication is asynchronous. A lock written to a master that fails
    /// before the write reached a replica is gone after the failover, and another client
    /// can take it while the first still believes it holds it. Use fencing tokens where
    /// that matters, or Redlock over independent masters.
    #[cfg(feature = "sentinel")]
    pub fn sentinel<I, S>(mut self, sentinels: I, master: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.store = Store::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master: master.into(),
        };
        self
    }

    /// Redlock: how long one node may take to answer one operation (default 100 ms). Keep
    /// it well under the TTL: validity left after an acquire is TTL minus the time taken.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Keep locks in this process (see [`Locker::memory`]).
    pub fn memory(mut self) -> Self {
        self.store = Store::Memory;
        self
    }

    /// Prefix of every lock key (default `lock:`). Keys are `<prefix>{<name>}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// TTL for requests that do not set one (default 30 s).
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// How long requests keep trying when they do not say (default 10 s, the book's
    /// `acquire_timeout`). Zero means try once.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.default_wait = wait;
        self
    }

    /// Maximum number of pooled connections when the locker builds its own pool (default:
    /// deadpool's, 4 per CPU). Lock commands share one multiplexed connection; the pool
    /// serves reconnects and the [`Protocol::Transactions`] backend.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = Some(size);
        self
    }

    /// Application name put in front of the default holder label (`app@host:pid`).
    pub fn app_name(mut self, app: impl Into<String>) -> Self {
        self.label = Label::Default {
            app: Some(app.into()),
        };
        self
    }

    /// Replaces the holder label entirely (cut to 200 bytes). It is stored beside the token
    /// so that `inspect` and error messages can say who holds a lock.
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.label = Label::Custom(label.into());
        self
    }

    /// Stores no holder label, only the token.
    pub fn without_holder_label(mut self) -> Self {
        self.label = Label::Off;
        self
    }

    /// Lua scripts (default) or WATCH/MULTI transactions.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// How the Lua scripts are invoked: `EVALSHA` (default, any Redis with scripting) or
    /// Redis Functions (7.0+, loaded once, persisted and replicated to replicas, so a
    /// failover does not even cost the one `EVAL` fallback).
    pub fn script_mode(mut self, mode: ScriptMode) -> Self {
        self.script_mode = mode;
        self
    }

    /// Draw a fencing token on every acquisition (default off; a request can turn it on
    /// with [`LockRequest::fencing`]).
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// TLS settings for `rediss://` URLs: a private CA, a client certificate, the server name
    /// (see [`TlsConfig`](crate::TlsConfig)). Requires the `tls-rustls` feature; a bare
    /// `rediss://` URL needs no settings when the server's certificate is publicly trusted.
    #[cfg(feature = "tls-rustls")]
    pub fn tls(mut self, config: crate::TlsConfig) -> Self {
        self.tls.config = Some(config);
        self
    }

    /// Deadline for one Redis operation, pool checkout included (default 3 s). A server
    /// that stops answering yields [`LockError::Connection`] after it.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Builds the locker. Fails on a malformed URL or an out-of-range setting; does not
    /// connect yet.
    pub fn build(mut self) -> Result<Locker, LockError> {
        validate_ttl("(default)", self.default_ttl)?;
        validate_wait("(default)", self.default_wait)?;
        if self.command_timeout.is_zero() {
            return Err(LockError::Config(
                "command_timeout must be above zero".into(),
            ));
        }
        let settings = self.settings();
        let store = std::mem::replace(&mut self.store, Store::Env);
        // A pool built elsewhere may have no response timeout; WATCH/MULTI bounds each
        // operation itself.
        let commands_bounded =
            !matches!(store, Store::Pool(_)) || self.protocol == Protocol::Transactions;
        let pubsub_client = self.pubsub_client.take();
        if pubsub_client.is_some() && !matches!(store, Store::Pool(_)) {
            return Err(LockError::Config(
                "pubsub_client is for a locker on a pool; other lockers open their own".into(),
            ));
        }
        let (pool, notifier) = match store {
            Store::Memory => {
                let backend = AnyBackend::Memory(Memory::default());
                return Ok(Locker::with_bounds(backend, settings, None, true));
            }
            Store::Pool(pool) => {
                let notifier =
                    pubsub_client.map(|client| Notifier::new(client, own_channel(&settings)));
                (pool, notifier)
            }
            Store::Redlock(urls) => return self.build_redlock(&urls, settings),
            #[cfg(feature = "cluster")]
            Store::Cluster(seeds) => return self.build_cluster(&seeds, settings),
            #[cfg(feature = "sentinel")]
            Store::Sentinel { sentinels, master } => {
                return self.build_sentinel(sentinels, master, settings)
            }
            Store::Env => {
                let url =
                    std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
                let (pool, dial) =
                    connect::pool(&url, self.pool_size, self.command_timeout, &self.tls)?;
                (pool, Some(Notifier::new(dial, own_channel(&settings))))
            }
            Store::Url(url) => {
                let (pool, dial) =
                    connect::pool(&url, self.pool_size, self.command_timeout, &self.tls)?;
                (pool, Some(Notifier::new(dial, own_channel(&settings))))
            }
        };
        let backend = match self.protocol {
            Protocol::Scripts => AnyBackend::Scripted(Scripted::new(
                SharedConnection::new(Source::Pool(pool), settings.command_timeout),
                self.script_mode,
            )),
            Protocol::Transactions => {
                AnyBackend::Transaction(Transactional::new(pool, settings.command_timeout))
            }
        };
        Ok(Locker::with_bounds(
            backend,
            settings,
            notifier,
            commands_bounded,
        ))
    }

    fn build_redlock(&self, urls: &[String], settings: Settings) -> Result<Locker, LockError> {
        if urls.is_empty() {
            return Err(LockError::Config(
                "redlock needs at least one Redis URL".into(),
            ));
        }
        if self.protocol != Protocol::Scripts {
            return Err(LockError::Config(
                "redlock runs on Lua scripts; Protocol::Transactions is for a single server".into(),
            ));
        }
        if self.node_timeout.is_zero() || self.node_timeout >= settings.default_ttl {
            return Err(LockError::Config(format!(
                "node_timeout {:?} must be above zero and well under the TTL",
                self.node_timeout
            )));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        let mut first_dial = None;
        for url in urls {
            let (pool, dial) = connect::pool(url, self.pool_size, self.command_timeout, &self.tls)?;
            first_dial.get_or_insert(dial);
            nodes.push(
                Scripted::new(
                    SharedConnection::new(Source::Pool(pool), self.command_timeout),
                    self.script_mode,
                )
                .announcing_every_release(),
            );
        }
        // No waiter queue over independent nodes (each would hand the lock to its own head,
        // and no head might reach a majority): releases are announced on every node to the
        // lock's subscribers, and listening to one node is enough; if it is down, waiters
        // fall back to timed retries.
        let channel = own_channel(&settings);
        let notifier = first_dial.map(|dial| Notifier::new(dial, channel));
        let backend = AnyBackend::Redlock(Redlock::new(nodes, self.node_timeout));
        Ok(Locker::with_backend(backend, settings, notifier))
    }

    #[cfg(feature = "cluster")]
    fn build_cluster(&self, seeds: &[String], settings: Settings) -> Result<Locker, LockError> {
        self.scripts_only("a Redis Cluster")?;
        // PUBLISH reaches every node of a cluster, so one node's subscription hears all
        // releases; if that node goes, waiters fall back to timed retries.
        let (client, dial) = connect::cluster(seeds, self.command_timeout, &self.tls)?;
        let notifier = dial.map(|dial| Notifier::new(dial, own_channel(&settings)));
        let conn = SharedConnection::new(Source::Cluster(Box::new(client)), self.command_timeout);
        let backend = AnyBackend::Scripted(Scripted::new(conn, self.script_mode));
        Ok(Locker::with_bounds(backend, settings, notifier, true))
    }

    #[cfg(feature = "sentinel")]
    fn build_sentinel(
        &self,
        sentinels: Vec<String>,
        master: String,
        settings: Settings,
    ) -> Result<Locker, LockError> {
        self.scripts_only("Sentinel")?;
        let client = connect::sentinel(sentinels, master, &self.tls)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.command_timeout))
            .set_response_timeout(Some(self.command_timeout));
        // The notifier asks the Sentinels for the master whenever it (re)connects, so after a
        // failover its subscription moves to the new master with the lock commands.
        let notifier = Notifier::new(
            connect::Dial::Sentinel(std::sync::Arc::clone(&client)),
            own_channel(&settings),
        );
        let source = Source::Sentinel {
            client,
            config: Box::new(config),
        };
        let conn = SharedConnection::new(source, self.command_timeout);
        let backend = AnyBackend::Scripted(Scripted::new(conn, self.script_mode));
        Ok(Locker::with_bounds(backend, settings, Some(notifier), true))
    }

    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    fn scripts_only(&self, what: &str) -> Result<(), LockError> {
        if self.protocol == Protocol::Scripts {
            return Ok(());
        }
        Err(LockError::Config(format!(
            "{what} runs on Lua scripts; Protocol::Transactions is for a single server"
        )))
    }

    fn build_infallible(self) -> Locker {
        let settings = self.settings();
        Locker::with_bounds(AnyBackend::Memory(Memory::default()), settings, None, true)
    }

    fn settings(&self) -> Settings {
        let label = match &self.label {
            Label::Default { app } => Some(default_label(app.as_deref())),
            Label::Custom(label) => Some(bound_label(label.clone())),
            Label::Off => None,
        };
        Settings {
            prefix: self.prefix.clone(),
            default_ttl: self.default_ttl,
            default_wait: self.default_wait,
            label,
            fencing: self.fencing,
            command_timeout: self.command_timeout,
        }
    }
}

/// A channel name of this Locker's own (`<prefix>waiters:<random>`): its name in waiter
/// queues, where its turns are announced. Not a secret: a forged message only makes a
/// waiter look at Redis once more.
fn own_channel(settings: &Settings) -> String {
    format!("{}waiters:{:016x}", settings.prefix, fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_config_errors() {
        for url in ["", "http://x", "redis://:99999999/", "not a url"] {
            let err = Locker::from_url(url).unwrap_err();
            assert!(matches!(err, LockError::Config(_)), "{url}: {err:?}");
        }
    }

    #[test]
    fn locker_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Locker>();
    }
}
