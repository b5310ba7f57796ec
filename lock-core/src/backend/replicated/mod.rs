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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use redis::aio::ConnectionLike;

use self::shards::{probe, Master, Shards};
use crate::connection::shared::{SharedConnection, Source};
use crate::key::LockKeys;
use crate::replication::SyncRule;

mod shards;
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

pub(crate) struct Replicated {
    conns: Vec<SharedConnection>,
    next: AtomicUsize,
    rule: SyncRule,
    /// `Auto`'s decision, shard by shard.
    shards: Shards,
    /// The values whose grant was waiting for replicas when its attempt was dropped (at
    /// the request's deadline), until the request asks ([`Replicated::was_cut`]); a few
    /// at most, each forgotten after [`CUT_KEPT`].
    cut: Mutex<Vec<(String, Instant)>>,
    /// The masters (by `run_id`) seen with a connected replica, the last few.
    masters: Mutex<Vec<String>>,
    /// One of the check's connections has opened.
    warm: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How many masters seen with replicas are remembered.
const MASTERS_KEPT: usize = 64;

/// How long the value of an attempt dropped during its replica wait is remembered.
const CUT_KEPT: std::time::Duration = std::time::Duration::from_secs(10);

/// Notes the value of a grant waiting for replicas if it is dropped before
/// [`WaitWatch::done`].
pub(crate) struct WaitWatch<'a> {
    replicated: &'a Replicated,
    value: Option<&'a str>,
}

impl WaitWatch<'_> {
    /// The wait ended (either way).
    pub fn done(mut self) {
        self.value = None;
    }
}

impl Drop for WaitWatch<'_> {
    fn drop(&mut self) {
        let Some(value) = self.value else {
            return;
        };
        let now = Instant::now();
        let mut cut = self
            .replicated
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        cut.retain(|(_, at)| now.duration_since(*at) < CUT_KEPT);
        cut.push((value.to_owned(), now));
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
            cut: Mutex::new(Vec::new()),
            masters: Mutex::new(Vec::new()),
            warm: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// Watches the replica wait of the grant of `value` (see [`WaitWatch`]).
    pub fn watch_wait<'a>(&'a self, value: &'a str) -> WaitWatch<'a> {
        WaitWatch {
            replicated: self,
            value: Some(value),
        }
    }

    /// Whether the grant of `value` was dropped while it waited for replicas (once):
    /// the required count and the timeout of the check.
    pub fn was_cut(&self, value: &str) -> Option<(u32, std::time::Duration)> {
        let mut cut = self.cut.lock().unwrap_or_else(PoisonError::into_inner);
        let at = cut.iter().position(|(v, _)| v == value)?;
        cut.swap_remove(at);
        Some((self.rule.replicas, self.rule.timeout))
    }

    /// Whether the check is on now for `key` (with `Auto`, once its master was seen with
    /// replicas): until then, writes stay on the shared connection, where a lone Redis is
    /// fastest.
    pub fn is_on(&self, key: &str) -> bool {
        let shard = self.shards.of(key);
        !self.rule.when_replicated || (self.shards.is_seen(shard) && !self.shards.is_bare(shard))
    }

    /// Whether the confirmation of a write on `key` would send nothing at `now` (a clock
    /// read of the caller's, moments old at most: the look is due every few seconds): the
    /// check is off for it and no look at its master is due ([`Replicated::required`]
    /// would answer false at once).
    pub fn is_quiet(&self, key: &str, now: Instant) -> bool {
        !self.is_on(key) && !self.shards.probe_would_be_due(self.shards.of(key), now)
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
            let warm = std::sync::Arc::clone(&self.warm);
            runtime.spawn(async move {
                match conn.get("").await {
                    Ok(_) => warm.store(true, Ordering::Relaxed),
                    Err(err) => {
                        tracing::debug!(%err, "cannot open a connection for the replica check yet; the first write on it will");
                    }
                }
            });
        }
    }

    /// Whether the write just made on `conn` must be acknowledged: always with
    /// `ReplicaSync::Required`; with `Auto` once a master was seen with a replica, unless
    /// it was found without one since (looked at with `INFO` on the master of `key`, at
    /// most every few seconds). A shard under the check is looked at every few seconds
    /// too, to learn which masters had replicas (see [`Replicated::judge`]).
    pub async fn required<C: ConnectionLike + Send>(&self, conn: &mut C, key: &str) -> bool {
        let on = self.is_on(key);
        let shard = self.shards.of(key);
        if !self.shards.probe_due(shard) {
            return on;
        }
        let Some(master) = probe(conn, key).await else {
            // Asked again in a few seconds (a user without `+info` is refused each time:
            // the check stays as it was).
            return on;
        };
        if master.online == 0 {
            // A promoted replica found before any grant there waited in vain.
            if on && self.bare_if_promoted(shard, &master) {
                return false;
            }
            return on;
        }
        self.had_replicas(&master.run_id);
        if self.shards.mark_seen(shard) {
            crate::metrics::unreplicated_master(false);
            tracing::warn!(
                replicas = master.online,
                required = self.rule.replicas,
                "the master has a connected replica again: lock writes on it count once replicas acknowledge them"
            );
        }
        if !self.shards.announced.swap(true, Ordering::Relaxed) {
            self.open_all();
            tracing::info!(
                replicas = master.online,
                required = self.rule.replicas,
                "the master has replicas: lock writes on it now count once replicas acknowledge them"
            );
        }
        true
    }

    /// Notes that the master with `run_id` had a connected replica.
    fn had_replicas(&self, run_id: &str) {
        let mut seen = self.masters.lock().unwrap_or_else(PoisonError::into_inner);
        if !seen.iter().any(|id| id == run_id) {
            if seen.len() >= MASTERS_KEPT {
                seen.remove(0);
            }
            seen.push(run_id.to_owned());
        }
    }

    fn ever_had_replicas(&self, run_id: &str) -> bool {
        self.masters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|id| id == run_id)
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
        self.judge(conn, name, key, acknowledged).await
    }

    /// [`Replicated::confirm`] for a write made on another connection (a lock's grant goes
    /// out on the shared connection, so that a busy answer never waits behind another
    /// task's `WAIT`): on one of the check's connections, `cover` (a write that succeeds,
    /// answering 1, only while the grant is still in place on that server, so that it
    /// follows the grant in the replication stream) and `WAIT` after it. The caller has
    /// asked [`Replicated::required`] already. `Err(None)` when `cover` could not run as
    /// sent (a script the server does not have: run it with loading, then
    /// [`Replicated::confirm_after`]).
    ///
    /// Until the check's connections have opened (the first grants after the master was
    /// seen with replicas), on `shared` instead: one `WAIT` there rather than a
    /// connection set-up inside the grant, which a waiter would see as the lock held.
    pub async fn confirm_covered(
        &self,
        shared: &SharedConnection,
        name: &str,
        key: &str,
        cover: redis::Cmd,
    ) -> Result<(), Option<LockError>> {
        let Some(dedicated) = self.connection() else {
            return Ok(());
        };
        // Until one of the check's connections has opened (once: a connection retired
        // later is reopened by its next write, never replaced by the shared one).
        let dedicated = if self.warm.load(Ordering::Relaxed) {
            dedicated
        } else {
            shared
        };
        let lent = dedicated.get(name).await.map_err(Some)?;
        let mut conn = lent.conn.clone();
        let reply: redis::RedisResult<(i64, i64)> = redis::pipe()
            .add_command(cover)
            .cmd("WAIT")
            .arg(self.rule.replicas)
            .arg(self.timeout_ms())
            .query_async(&mut conn)
            .await;
        let acknowledged = match reply {
            Ok((1, acknowledged)) => u32::try_from(acknowledged).unwrap_or(0),
            // The grant is not on the server this connection reaches (it ran out, or a
            // failover moved this connection to another master): nothing confirms it.
            Ok((_, _)) => return Err(Some(self.not_replicated(name, 0, None))),
            Err(err) if unblocked(&err) => 0,
            Err(err) if is_missing_script(&err) => return Err(None),
            Err(err) => {
                if crate::connection::shared::is_connection_failure(&err) {
                    dedicated.retire(&lent);
                }
                return Err(Some(LockError::from_redis(name, key, err)));
            }
        };
        self.judge(&mut conn, name, key, acknowledged)
            .await
            .map_err(Some)
    }

    /// [`Replicated::confirm_covered`] when the covering write was made already (on `conn`,
    /// one of the check's connections, answering `covered`).
    pub async fn confirm_after<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        key: &str,
        covered: bool,
    ) -> Result<(), LockError> {
        if !covered {
            return Err(self.not_replicated(name, 0, None));
        }
        let acknowledged = self.wait(conn, name, key).await?;
        self.judge(conn, name, key, acknowledged).await
    }

    /// Whether `acknowledged` replicas are enough. Too few: the master is asked how many
    /// replicas it has connected. With `ReplicaSync::Auto` a master with none that this
    /// locker never saw with one (a replica promoted by a failover, whose own replica has
    /// not attached yet) has nothing to wait for: nothing with the grant could be promoted,
    /// and waiting would stop locking until a replica attaches. The write counts, the shard
    /// grants without waiting until a replica is connected again, and the change is logged
    /// once and counted. A master seen with replicas that now has none (a deposed master
    /// whose replicas follow the new one, or one whose replicas all failed) is refused, as
    /// is everything with `Required`: [`LockError::NotReplicated`], with the number
    /// connected.
    async fn judge<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        key: &str,
        acknowledged: u32,
    ) -> Result<(), LockError> {
        if acknowledged >= self.rule.replicas {
            return Ok(());
        }
        let master = probe(conn, key).await;
        let connected = master.as_ref().map(|master| master.online);
        let shard = self.shards.of(key);
        if master
            .as_ref()
            .is_some_and(|master| self.bare_if_promoted(shard, master))
        {
            return Ok(());
        }
        Err(self.not_replicated(name, acknowledged, connected))
    }

    /// With `ReplicaSync::Auto`, a master without a connected replica that this locker
    /// never saw with one (a replica promoted by a failover): the shard grants without
    /// waiting from now on, until a replica is connected (logged once per change, and
    /// counted). False otherwise.
    fn bare_if_promoted(&self, shard: u16, master: &Master) -> bool {
        if !self.rule.when_replicated || master.online > 0 || self.ever_had_replicas(&master.run_id)
        {
            return false;
        }
        if self.shards.mark_bare(shard) {
            crate::metrics::unreplicated_master(true);
            tracing::warn!(
                required = self.rule.replicas,
                "the master (a promoted replica) has no connected replica: ReplicaSync::Auto grants locks on it without waiting for acknowledgements (a failover now would lose them) until a replica is connected; ReplicaSync::Required refuses instead"
            );
        }
        true
    }

    fn not_replicated(&self, name: &str, acknowledged: u32, connected: Option<u32>) -> LockError {
        LockError::NotReplicated {
            name: name.to_owned(),
            acknowledged,
            required: self.rule.replicas,
            timeout: self.rule.timeout,
            connected,
        }
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.rule.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
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
        let timeout_ms = self.timeout_ms();
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

/// A script the server does not have (`NOSCRIPT`, or a Functions library not loaded).
fn is_missing_script(err: &redis::RedisError) -> bool {
    let missing = |code: &str, details: Option<&str>| {
        code == "NOSCRIPT" || details.is_some_and(|d| d.contains("Function not found"))
    };
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || err.to_string().contains("Function not found")
        || err.clone().into_server_errors().is_some_and(|errors| {
            errors
                .iter()
                .any(|(_, error)| missing(error.code(), error.details()))
        })
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
