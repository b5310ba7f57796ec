//! [`LockerBuilder`]: every setting of a [`Locker`], with its default, and the
//! constructors that take the defaults. `build` (in [`build`]) turns the settings into the
//! connections, the backend and the engine.

mod build;

use std::fmt;
use std::time::Duration;

use deadpool_redis::Pool;

use crate::backend::lua::ScriptMode;
use crate::connection::connect::TlsSetting;
use crate::{LockError, Locker};

/// The environment variable [`Locker::from_env`] reads.
pub const REDIS_URL_ENV: &str = "REDIS_URL";

/// Where [`Locker::from_env`] connects when `REDIS_URL` is not set.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";

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
        LockerBuilder::new().pool_locker(pool)
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
    unreachable_timeout: Duration,
    node_timeout: Duration,
    script_mode: ScriptMode,
    tls: TlsSetting,
    pubsub_client: Option<redis::Client>,
    replica_sync: crate::ReplicaSync,
    sync_timeout: Option<Duration>,
    track_keys: bool,
    eviction_check: crate::EvictionCheck,
    /// Tests only: how far off (ms) this Locker's clock reads when it takes Redlock tickets.
    ticket_skew_ms: i64,
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
            unreachable_timeout: crate::defaults::UNREACHABLE,
            node_timeout: Duration::from_millis(100),
            ticket_skew_ms: 0,
            script_mode: ScriptMode::Eval,
            tls: TlsSetting::default(),
            pubsub_client: None,
            replica_sync: crate::ReplicaSync::default(),
            sync_timeout: None,
            track_keys: true,
            eviction_check: crate::EvictionCheck::Warn,
        }
    }

    /// Whether a held lease learns at once that its key was deleted, overwritten, expired,
    /// evicted or flushed on the server (default on): the Locker keeps one RESP3 connection
    /// with `CLIENT TRACKING` on, reads each granted key there once its lease has been held
    /// 2 ms (batched with the others due then: at most one extra call per acquisition,
    /// none for a lease released sooner, none per release), and
    /// the server pushes the key's next change, after which `lost()` fires within
    /// milliseconds. Off (or on a server that refuses tracking, said once in a warning),
    /// a lost lease is noticed at its next renewal or at the end of its validity. The age
    /// of fresh leases is watched by one thread of the process, `lock-core-clock`, shared
    /// by every Locker and parked while no lease is younger than 2 ms (a timer of the async
    /// runtime firing every 2 ms would slow the tasks that take locks).
    ///
    /// Locks on one Redis given by URL (or `REDIS_URL`), behind Sentinel (on the master the
    /// Sentinels name, every lease re-checked after a switch) and on a Redis Cluster (one
    /// such connection per master, each key read on its slot's master). While leases are
    /// watched, each watch connection is pinged every second (on a Cluster with
    /// `ROLE`): a connection that falls silent counts as dropped, and every lease re-reads
    /// its key. Redlock, a locker built on a pool, a TLS server name pinned to another
    /// host, semaphores, read-write locks and multi-locks keep renewal-time detection.
    ///
    /// ```
    /// let locker = lock_core::Locker::builder()
    ///     .url("redis://127.0.0.1:6379/0")
    ///     .track_keys(false)
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn track_keys(mut self, on: bool) -> Self {
        self.track_keys = on;
        self
    }

    /// What to do when the server could evict held locks (`maxmemory` set and
    /// `maxmemory-policy` not `noeviction`): warn once (the default), refuse acquisitions
    /// with `Misconfigured`, or not check. See [`EvictionCheck`](crate::EvictionCheck).
    ///
    /// ```
    /// use lock_core::{EvictionCheck, Locker};
    ///
    /// let locker = Locker::builder()
    ///     .url("redis://127.0.0.1:6379/0")
    ///     .eviction_check(EvictionCheck::Refuse)
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn eviction_check(mut self, check: crate::EvictionCheck) -> Self {
        self.eviction_check = check;
        self
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
    /// hand-offs of about a millisecond. It must reach the pool's server itself, not one
    /// of its replicas: a hand-over passes over a waiter that its turn message reaches on
    /// no connection of that server (taken for a dead process). With any other store,
    /// [`LockError::Config`] at `build`: those open their own.
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
    /// Redis replication is asynchronous: a lock written to a master that fails before the
    /// write reached a replica is gone after the failover. The replica acknowledgement check
    /// (on by default when the master has replicas, see [`ReplicaSync`](crate::ReplicaSync))
    /// grants a lock only once a replica has it; what it does not cover is said there. The
    /// locker also follows the Sentinels' `+switch-master` announcements: connections to a
    /// deposed master are retired at the switch.
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

    /// For tests of clock skew: this Locker reads its clock `skew_ms` off (ahead when
    /// positive) where it takes Redlock waiters' tickets, as a client whose clock is wrong
    /// would. Not a setting: leave it alone.
    #[doc(hidden)]
    pub fn ticket_clock_skew_ms(mut self, skew_ms: i64) -> Self {
        self.ticket_skew_ms = skew_ms;
        self
    }

    /// Keep locks in this process (see [`Locker::memory`]).
    pub fn memory(mut self) -> Self {
        self.store = Store::Memory;
        self
    }

    /// Prefix of every lock key (default `lock:`). Keys are `<prefix>{<name>}` (see
    /// [`KeyLayout`](crate::KeyLayout): a prefix whose first `{` is directly followed by `}`
    /// is stored with a NUL byte between them, so that a Cluster hash tag is never empty; a
    /// prefix with a complete hash tag, such as `{locks}:`, puts every lock in one slot).
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
    /// deadpool's, 4 per CPU). Lock commands share one multiplexed connection (four sockets,
    /// their writes gathered), which the Locker opens (and reopens after a failure) itself;
    /// the pool serves the
    /// [`Protocol::Transactions`] backend, whose operations each need a connection of
    /// their own.
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
    /// with [`LockRequest::fencing`](crate::LockRequest::fencing)).
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

    /// The replica acknowledgement check (default [`ReplicaSync::Auto`](crate::ReplicaSync)
    /// with 1 replica: on as soon as the master is seen with a connected replica). Applies to
    /// one Redis, a Cluster and Sentinel, on Lua scripts and on [`Protocol::Transactions`],
    /// and to every grant and extension there: locks, semaphore permits, read-write leases,
    /// multi-locks. Not to Redlock, whose nodes are independent masters: its safety rests on
    /// a majority of them.
    ///
    /// ```
    /// use lock_core::{Locker, ReplicaSync};
    /// // The behaviour before the check: a grant counts once the master wrote it.
    /// let locker = Locker::builder()
    ///     .url("redis://127.0.0.1:6379/")
    ///     .replica_sync(ReplicaSync::Off)
    ///     .build()?;
    /// # drop(locker);
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn replica_sync(mut self, sync: crate::ReplicaSync) -> Self {
        self.replica_sync = sync;
        self
    }

    /// How long the replica acknowledgement check waits for the replicas (`WAIT`'s timeout;
    /// default 500 ms, or half the command timeout if that is shorter). Must be under the
    /// command timeout.
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = Some(timeout);
        self
    }

    /// Deadline for one Redis operation, pool checkout included (default 3 s). A server
    /// that stops answering yields [`LockError::Connection`] after it.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a request that waits keeps trying while Redis does not answer (default
    /// 2 s), separate from its wait for a holder: a refused or dropped connection, a
    /// command that times out, a Redlock round short of a majority. It is counted from the
    /// start of the first attempt that got no answer, and an attempt in flight is cut when
    /// it runs out (so a waiting request's command gets at most the smaller of this and the
    /// command timeout: raise both on a slow link); the request then fails with [`LockError::Connection`] (Redlock:
    /// [`LockError::NoQuorum`]) even if its wait is longer. Any answer from Redis resets it.
    /// So an outage turns a locked call into an error within this bound, not a stall for
    /// the whole wait; raise it to ride out a longer restart or a Sentinel failover.
    ///
    /// A server that refuses this client's settings (a missing or wrong password, a
    /// database that does not exist) fails at once with [`LockError::Misconfigured`]
    /// instead, and a try (`wait` zero) makes one attempt, bounded by the
    /// [command timeout](LockerBuilder::command_timeout).
    ///
    /// ```
    /// # use lock_core::Locker;
    /// # use std::time::Duration;
    /// // Ride out a failover of up to 10 s.
    /// let locker = Locker::builder()
    ///     .url("redis://127.0.0.1:6379/")
    ///     .unreachable_timeout(Duration::from_secs(10))
    ///     .build()?;
    /// # drop(locker);
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn unreachable_timeout(mut self, timeout: Duration) -> Self {
        self.unreachable_timeout = timeout;
        self
    }
}
