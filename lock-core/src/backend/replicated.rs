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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use redis::aio::ConnectionLike;

use crate::connection::shared::{SharedConnection, Source};
use crate::key::LockKeys;
use crate::replication::SyncRule;
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
    /// `Auto`: a master was seen with a connected replica; from then on the check holds.
    seen: AtomicBool,
    /// `Auto`: when a master was last seen without replicas (ms since `epoch`, 0: never).
    probed_at: AtomicU64,
    epoch: Instant,
}

impl Replicated {
    pub fn new(source: &Source, timeout: std::time::Duration, rule: SyncRule) -> Replicated {
        Replicated::with_connections(
            (0..CONNECTIONS)
                .map(|_| SharedConnection::new(source.clone(), timeout, None))
                .collect(),
            rule,
        )
    }

    /// The check for a backend that writes on connections of its own, none shared (each
    /// WATCH/MULTI operation has a pooled connection to itself): it only confirms, on the
    /// connection the write went out on.
    pub fn on_callers_connections(rule: SyncRule) -> Replicated {
        Replicated::with_connections(Vec::new(), rule)
    }

    fn with_connections(conns: Vec<SharedConnection>, rule: SyncRule) -> Replicated {
        Replicated {
            conns,
            next: AtomicUsize::new(0),
            rule,
            seen: AtomicBool::new(!rule.when_replicated),
            probed_at: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Whether the check is on now (with `Auto`, once a master was seen with replicas):
    /// until then, writes stay on the shared connection, where a lone Redis is fastest.
    pub fn is_on(&self) -> bool {
        self.seen.load(Ordering::Relaxed)
    }

    /// Where the next write that a holder relies on goes: a dedicated connection while the
    /// check is on, `shared` otherwise.
    pub fn writer<'a>(&'a self, shared: &'a SharedConnection) -> &'a SharedConnection {
        if self.is_on() {
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
        if self.seen.load(Ordering::Relaxed) {
            return true;
        }
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.probed_at.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < PROBE_EVERY_MS {
            return false;
        }
        self.probed_at.store(now.max(1), Ordering::Relaxed);
        // A pipeline goes where its first keyed command goes: on a Cluster, the master of
        // the lock's slot.
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
            self.open_all();
            tracing::info!(
                replicas,
                required = self.rule.replicas,
                "the master has replicas: lock writes now count once replicas acknowledge them"
            );
            self.seen.store(true, Ordering::Relaxed);
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
        if !self.is_on() && !self.required(&mut conn, &keys.lock).await {
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
        let (_, acknowledged): (i64, i64) = redis::pipe()
            .cmd("PTTL")
            .arg(key)
            .cmd("WAIT")
            .arg(self.rule.replicas)
            .arg(timeout_ms)
            .query_async(conn)
            .await
            .map_err(|err| LockError::from_redis(name, key, err))?;
        Ok(u32::try_from(acknowledged).unwrap_or(0))
    }
}
