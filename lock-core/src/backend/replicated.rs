//! The replica acknowledgement check (`ReplicaSync`): writes that a holder relies on (the
//! grants and extensions of locks, permits and multi-locks) run on a few connections of
//! their own, each followed by `WAIT numreplicas timeout` on the same connection (on
//! WATCH/MULTI, on the operation's own pooled connection).
//!
//! `WAIT` blocks the connection it is sent on, and it waits for every earlier write of that
//! connection: on the shared multiplexed connection every command queued behind it (the
//! releases, inspections and busy answers of every other task) would wait for the replicas
//! too. The writes that need the check take turns on `CONNECTIONS` dedicated connections
//! instead; the shared one keeps serving everything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use redis::aio::ConnectionLike;

use crate::connection::shared::{SharedConnection, Source};
use crate::key::LockKeys;
use crate::replication::SyncRule;
use crate::slot::{cluster_slot, CLUSTER_SLOTS};
use crate::LockError;

/// Rewrites a lock's value as it is, keeping its TTL, if it is still `ARGV[1]`: a write
/// after the value's own in the replication stream, for `WAIT` to count the replicas that
/// have it. A plain script (not of the lock library): only inspections run it.
static REWRITE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL', 'XX') return 1 end return 0",
    )
});

/// Dedicated connections for the writes that wait for replicas.
pub(crate) const CONNECTIONS: usize = 4;

/// How often a master seen without replicas is looked at again (`ReplicaSync::Auto`).
const PROBE_EVERY_MS: u64 = 5_000;

pub(crate) struct Replicated {
    conns: Vec<SharedConnection>,
    next: AtomicUsize,
    rule: SyncRule,
    /// `Auto`'s decision, shard by shard.
    shards: Shards,
}

/// `ReplicaSync::Auto`'s decision, per shard: whether its master was seen with a connected
/// replica (from then on the check holds there: a replica that stops must not turn it off
/// when it matters most), and when a master seen without one was last asked.
///
/// On a Cluster a shard is a key slot: masters differ (one may have replicas, another
/// none), and a slot's data, and the decision with it, follows the slot through a failover
/// to the replica promoted in its master's place (which may have no replica of its own
/// yet). A slot moved to another master by resharding keeps the decision too. Elsewhere
/// (one Redis, Sentinel's master) every key is in the one shard, whichever server is the
/// master now.
struct Shards {
    /// Keys are spread over a Cluster's slots.
    cluster: bool,
    /// One bit per shard: seen with a replica.
    seen: Box<[AtomicU64]>,
    /// When each shard not seen with a replica was last asked (ms since `epoch`).
    probed: Mutex<HashMap<u16, u64>>,
    /// A shard was seen with replicas (logged once).
    announced: AtomicBool,
    epoch: Instant,
}

impl Shards {
    fn new(cluster: bool) -> Shards {
        let shards = if cluster {
            usize::from(CLUSTER_SLOTS)
        } else {
            1
        };
        Shards {
            cluster,
            seen: (0..shards.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            probed: Mutex::new(HashMap::new()),
            announced: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    fn of(&self, key: &str) -> u16 {
        if self.cluster {
            cluster_slot(key.as_bytes())
        } else {
            0
        }
    }

    fn is_seen(&self, shard: u16) -> bool {
        let (word, bit) = (usize::from(shard / 64), shard % 64);
        self.seen
            .get(word)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << bit) != 0)
    }

    fn mark_seen(&self, shard: u16) {
        let (word, bit) = (usize::from(shard / 64), shard % 64);
        if let Some(w) = self.seen.get(word) {
            w.fetch_or(1 << bit, Ordering::Relaxed);
        }
        self.probed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&shard);
    }

    /// Whether `shard`'s master is to be asked now (at most every few seconds), recording
    /// the time if so.
    fn probe_due(&self, shard: u16) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut probed = self.probed.lock().unwrap_or_else(PoisonError::into_inner);
        match probed.get(&shard) {
            Some(&last) if now.saturating_sub(last) < PROBE_EVERY_MS => false,
            _ => {
                probed.insert(shard, now);
                true
            }
        }
    }
}

impl Replicated {
    pub fn new(source: &Source, timeout: std::time::Duration, rule: SyncRule) -> Replicated {
        #[cfg(feature = "cluster")]
        let cluster = matches!(source, Source::Cluster(_));
        #[cfg(not(feature = "cluster"))]
        let cluster = false;
        Replicated::with_connections(
            (0..CONNECTIONS)
                .map(|_| SharedConnection::new(source.clone(), timeout, None))
                .collect(),
            rule,
            cluster,
        )
    }

    /// The check for a backend that writes on connections of its own, none shared (each
    /// WATCH/MULTI operation has a pooled connection to itself, on one Redis): it only
    /// confirms, on the connection the write went out on.
    pub fn on_callers_connections(rule: SyncRule) -> Replicated {
        Replicated::with_connections(Vec::new(), rule, false)
    }

    fn with_connections(conns: Vec<SharedConnection>, rule: SyncRule, cluster: bool) -> Replicated {
        Replicated {
            conns,
            next: AtomicUsize::new(0),
            rule,
            shards: Shards::new(cluster),
        }
    }

    /// Whether the check is on now for `key` (with `Auto`, once its master was seen with
    /// replicas): until then, writes stay on the shared connection, where a lone Redis is
    /// fastest.
    pub fn is_on(&self, key: &str) -> bool {
        !self.rule.when_replicated || self.shards.is_seen(self.shards.of(key))
    }

    /// Where the next write that a holder relies on (on `keys`) goes: a dedicated
    /// connection while the check is on for any of them, `shared` otherwise.
    pub fn writer<'a>(
        &'a self,
        shared: &'a SharedConnection,
        keys: &[&str],
    ) -> &'a SharedConnection {
        if keys.iter().any(|key| self.is_on(key)) {
            self.connection().unwrap_or(shared)
        } else {
            shared
        }
    }

    /// The connection for the next checked write (they take turns); `None` for a check
    /// on the callers' connections.
    pub fn connection(&self) -> Option<&SharedConnection> {
        if !self.rule.when_replicated && self.next.load(Ordering::Relaxed) == 0 {
            self.open_all();
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.conns.get(i % self.conns.len().max(1))
    }

    /// Opens every dedicated connection in the background, so that the first checked writes
    /// do not pay for connecting (a Cluster connection reaches every node first).
    fn open_all(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for conn in &self.conns {
            let conn = conn.clone();
            runtime.spawn(async move {
                if let Err(err) = conn.get("").await {
                    tracing::debug!(%err, "cannot open a connection for the replica check yet; the first write on it will");
                }
            });
        }
    }

    /// Whether the write just made on `conn` must be acknowledged: always with
    /// `ReplicaSync::Required`; with `Auto` once a master was seen with a replica (looked
    /// at with `ROLE` on the master of `key`, at most every few seconds while it has none).
    async fn required<C: ConnectionLike + Send>(&self, conn: &mut C, key: &str) -> bool {
        if self.is_on(key) {
            return true;
        }
        let shard = self.shards.of(key);
        if !self.shards.probe_due(shard) {
            return false;
        }
        // A pipeline goes where its first keyed command goes: on a Cluster, the master of
        // the key's slot.
        let probe = redis::pipe()
            .cmd("PTTL")
            .arg(key)
            .cmd("ROLE")
            .query_async::<(i64, redis::Role)>(conn)
            .await;
        let replicas = match probe {
            Ok((_, redis::Role::Primary { replicas, .. })) => replicas.len(),
            Ok(_) => 0,
            Err(err) => {
                // Asked again in a few seconds (a user without `+role` is refused each
                // time: the check stays off for it).
                tracing::debug!(%err, "cannot ask the master for its replicas; asking again in a few seconds");
                return false;
            }
        };
        if replicas > 0 {
            self.shards.mark_seen(shard);
            if !self.shards.announced.swap(true, Ordering::Relaxed) {
                self.open_all();
                tracing::info!(
                    replicas,
                    required = self.rule.replicas,
                    "the master has replicas: lock writes on it now count once replicas acknowledge them"
                );
            }
        }
        replicas > 0
    }

    /// Waits for the replicas to acknowledge every write made so far on `conn` (the one
    /// just made among them, on `key` of lock or primitive `name`);
    /// [`LockError::NotReplicated`] when too few did in time.
    ///
    /// Any connection that the write went out on will do: a dedicated one of
    /// [`Replicated::connection`], or a pooled one of WATCH/MULTI's (which no other task
    /// shares while it is lent).
    pub async fn confirm<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        key: &str,
    ) -> Result<(), LockError> {
        if !self.required(conn, key).await {
            return Ok(());
        }
        let acknowledged = self.wait(conn, name, key).await?;
        if acknowledged >= self.rule.replicas {
            return Ok(());
        }
        Err(LockError::NotReplicated {
            name: name.to_owned(),
            acknowledged,
            required: self.rule.replicas,
            timeout: self.rule.timeout,
        })
    }

    /// How many replicas have `value` on the lock's key (at least; up to the required
    /// number, `WAIT` stops counting there), or `None` when the check is off for this
    /// master, the value changed meanwhile or the master could not be asked. The value is
    /// written again as it is (same TTL) from a dedicated connection, and `WAIT` on that
    /// connection tells how many replicas have everything up to that write.
    pub async fn replicas_having(&self, keys: &LockKeys, value: &[u8]) -> Option<u32> {
        let shared = self.connection()?;
        let lent = shared.get(&keys.name).await.ok()?;
        let mut conn = lent.conn.clone();
        if !self.required(&mut conn, &keys.lock).await {
            return None;
        }
        let same: i64 = REWRITE
            .key(&keys.lock)
            .arg(value)
            .invoke_async(&mut conn)
            .await
            .inspect_err(|err| {
                if crate::connection::shared::is_connection_failure(err) {
                    shared.retire(&lent);
                }
            })
            .ok()?;
        if same != 1 {
            return None;
        }
        self.wait(&mut conn, &keys.name, &keys.lock).await.ok()
    }

    /// `WAIT numreplicas timeout` on `conn`: how many replicas acknowledged its writes.
    async fn wait<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        key: &str,
    ) -> Result<u32, LockError> {
        let timeout_ms = u64::try_from(self.rule.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // Behind a keyed command, so that a Cluster connection sends it to the lock's
        // master, on the connection its write went through (alone, WAIT goes to every
        // master).
        let reply: redis::RedisResult<(i64, i64)> = redis::pipe()
            .cmd("PTTL")
            .arg(key)
            .cmd("WAIT")
            .arg(self.rule.replicas)
            .arg(timeout_ms)
            .query_async(conn)
            .await;
        match reply {
            Ok((_, acknowledged)) => Ok(u32::try_from(acknowledged).unwrap_or(0)),
            // The master was turned into a replica (a failover demoted it) while WAIT
            // blocked: no replica of it acknowledged the write, which the demotion's resync
            // discards anyway. Unreplicated, so the attempt is retried within its wait.
            Err(err) if unblocked(&err) => Ok(0),
            Err(err) => Err(LockError::from_redis(name, key, err)),
        }
    }
}

/// Whether `err` is Redis's `UNBLOCKED` reply (alone or as a pipeline's failure): a blocked
/// command cut short because the server stopped being a master.
fn unblocked(err: &redis::RedisError) -> bool {
    err.code() == Some("UNBLOCKED")
        || err
            .clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == "UNBLOCKED"))
}
