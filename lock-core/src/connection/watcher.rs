//! The watch connection: one RESP3 connection per `Locker` (opened at its first lease),
//! with `CLIENT TRACKING on` in Redis's default mode: every key this connection reads is
//! remembered by the server, which pushes an invalidation when the key is next modified,
//! deleted, expired, evicted or flushed. A read here therefore both checks a key and asks
//! to be told about its next change.
//!
//! Behind Sentinel the connection goes to the master the Sentinels name, opened the way the
//! lock commands' connections are ([`crate::connection::sentinel`]), and is retired at
//! each switch of master: the listener is told, as for a dropped connection, that
//! everything it read may have changed unheard.
//!
//! A connection that only listens never finds out by itself that it died silently (a
//! stalled server, a host gone without a reset, a network stall that ate the pushes):
//! [`Watcher::ping`] is the heartbeat its owner sends while it listens; a ping that fails
//! or does not answer within the command timeout retires the connection like a drop.
//!
//! When it opens, the connection also reads the server's `maxmemory-policy` and
//! `maxmemory` (the settings that decide whether Redis may evict keys with a TTL), and
//! hands them to its listener; a reopened connection (a restart, a failover, a dropped
//! socket) reads them again.
//!
//! Nothing here knows about locks: the listener (the engine's loss watch) maps keys to
//! leases. Pushes arrive on redis-rs's connection task and are handed over at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};

use crate::connection::connect::Dial;

/// What the watch connection tells its listener.
pub(crate) trait WatchListener: Send + Sync {
    /// The server pushed an invalidation for these keys.
    fn invalidated(&self, keys: Vec<Vec<u8>>);
    /// Everything read before may have changed unheard: the database was flushed (a null
    /// invalidation), or the connection of generation `generation` dropped (its tracking
    /// ended with it).
    fn everything(&self, generation: Option<u64>);
    /// A connection (generation `generation`) was opened, and the server's eviction
    /// settings read on it (or why they could not be).
    fn opened(&self, generation: u64, eviction: Result<Eviction, String>);
}

/// The server's eviction settings, as `INFO memory` reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Eviction {
    /// `maxmemory-policy`: `noeviction`, `volatile-lru`, `allkeys-lru`, ...
    pub policy: String,
    /// `maxmemory` in bytes; 0 is no limit (Redis never evicts then).
    pub maxmemory: u64,
}

impl Eviction {
    /// Whether Redis may delete a held lock's key to free memory: a memory limit is set
    /// and the policy evicts (`volatile-*` picks exactly the keys with a TTL, such as
    /// every lock; `allkeys-*` any key).
    pub fn may_evict_locks(&self) -> bool {
        self.maxmemory > 0 && self.policy != "noeviction"
    }
}

/// Why reading keys on the watch connection failed.
#[derive(Debug)]
pub(crate) enum WatchError {
    /// The server refuses key tracking (no RESP3, `CLIENT TRACKING` refused by an ACL or a
    /// managed service): it will not be asked again.
    Refused(String),
    /// The connection failed; it is reopened at the next read.
    Failed(redis::RedisError),
    /// A Cluster node answered that the key's slot is served elsewhere, or not served
    /// right now (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): the connection is kept.
    Redirected(redis::RedisError),
}

/// Where the watch connection opens.
// One per Locker, and the plain client, the common case, is the large variant: boxing it
// would buy nothing. (The lint fires only with `sentinel`.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum WatchDial {
    /// One server: a RESP3 client (the Locker's URL and TLS settings).
    Client(redis::Client),
    /// The master the Sentinels name now, asked again at every connect; a connection is
    /// retired at each switch of master.
    #[cfg(feature = "sentinel")]
    Sentinel {
        client: Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
        switches: Arc<crate::connection::sentinel::Switches>,
    },
}

pub(crate) struct Watcher {
    dial: WatchDial,
    timeout: Duration,
    /// Whether to turn tracking on (off: the connection only reads the eviction settings).
    track: bool,
    conn: tokio::sync::Mutex<Option<(MultiplexedConnection, u64)>>,
    /// The newest connection's generation (shared with the task that retires a
    /// connection at a Sentinel switch).
    generation: Arc<AtomicU64>,
    /// The newest generation whose connection dropped (set from redis-rs's task).
    dropped: Arc<AtomicU64>,
    refused: AtomicBool,
    /// Why the server refused `CLIENT TRACKING`, when it did (the connection still reads
    /// the eviction settings).
    tracking_refused: std::sync::Mutex<Option<String>>,
    listener: Weak<dyn WatchListener>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("track", &self.track)
            .finish()
    }
}

impl Watcher {
    /// Where the watch connection of a Locker that dials `dial` opens, or `None` where it
    /// cannot be opened on its own (a TLS server name pinned to another host: the Locker
    /// keeps renewal-time detection there).
    pub fn dial_for(dial: &Dial) -> Option<WatchDial> {
        match dial {
            Dial::Client(client) => resp3(client).map(WatchDial::Client),
            #[cfg(feature = "sentinel")]
            Dial::Sentinel {
                client, switches, ..
            } => Some(WatchDial::Sentinel {
                client: Arc::clone(client),
                switches: Arc::clone(switches),
            }),
            #[cfg(feature = "tls-rustls")]
            Dial::Pinned(..) => None,
        }
    }

    /// A watcher on `dial` (from [`Watcher::dial_for`]), telling `listener`.
    pub fn new(
        dial: WatchDial,
        timeout: Duration,
        track: bool,
        listener: Weak<dyn WatchListener>,
    ) -> Watcher {
        Watcher {
            dial,
            timeout,
            track,
            conn: tokio::sync::Mutex::new(None),
            generation: Arc::new(AtomicU64::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
            refused: AtomicBool::new(false),
            tracking_refused: std::sync::Mutex::new(None),
            listener,
        }
    }

    /// Whether the server refused tracking (for good).
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// Opens the connection if it is not open (reading the eviction settings as it does).
    pub async fn ensure_open(&self) -> Result<(), WatchError> {
        self.connection().await.map(|_| ())
    }

    /// Reads `keys` (MGET) and so asks the server to push their next change; `None` for a
    /// key that is absent or not a string.
    pub async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>, WatchError> {
        let (mut conn, generation) = self.connection().await?;
        if let Some(reason) = self
            .tracking_refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            return Err(WatchError::Refused(reason));
        }
        let result: redis::RedisResult<Vec<Option<Vec<u8>>>> =
            redis::cmd("MGET").arg(keys).query_async(&mut conn).await;
        result.map_err(|err| {
            if is_refusal(&err) {
                let reason = format!("MGET was refused: {err}");
                *self
                    .tracking_refused
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason.clone());
                return WatchError::Refused(reason);
            }
            if is_redirect(&err) {
                return WatchError::Redirected(err);
            }
            self.forget(generation);
            WatchError::Failed(err)
        })
    }

    /// The heartbeat: a `PING` on the open connection, answered within the command
    /// timeout. A connection that fails it is retired (the next read opens a new one) and
    /// the error returned: everything it listened for may have changed unheard. Nothing is
    /// sent while no connection is open, or while one is being opened.
    pub async fn ping(&self) -> Result<(), WatchError> {
        self.probe(redis::cmd("PING")).await.map(|_| ())
    }

    /// The heartbeat of a Cluster node's watch connection: `ROLE`, answered within the
    /// command timeout, whose reply says whether the node is still a master (`None`: no
    /// connection open, nothing sent). A connection that fails it is retired.
    #[cfg(feature = "cluster")]
    pub async fn role(&self) -> Result<Option<bool>, WatchError> {
        let reply = self.probe(redis::cmd("ROLE")).await?;
        Ok(reply.map(|role| match role {
            Value::Array(items) => matches!(
                items.first(),
                Some(Value::BulkString(role)) if role.as_slice() == b"master"
            ),
            _ => false,
        }))
    }

    /// Sends `command` on the open connection, if there is one and it is not being
    /// (re)opened; a failure retires the connection.
    async fn probe(&self, command: redis::Cmd) -> Result<Option<Value>, WatchError> {
        let open = match self.conn.try_lock() {
            Ok(slot) => slot.clone(),
            Err(_) => None,
        };
        let Some((mut conn, generation)) = open else {
            return Ok(None);
        };
        if generation <= self.dropped.load(Ordering::Acquire) {
            return Ok(None);
        }
        let reply: redis::RedisResult<Value> = command.query_async(&mut conn).await;
        reply.map(Some).map_err(|err| {
            tracing::debug!(%err, "the watch connection missed its heartbeat; it is retired");
            self.forget(generation);
            WatchError::Failed(err)
        })
    }

    /// Drops the connection of `generation` (a failed command): the next read opens a new one.
    fn forget(&self, generation: u64) {
        self.dropped.fetch_max(generation, Ordering::AcqRel);
        if let Ok(mut conn) = self.conn.try_lock()
            && conn.as_ref().is_some_and(|(_, open)| *open == generation)
        {
            *conn = None;
        }
    }

    async fn connection(&self) -> Result<(MultiplexedConnection, u64), WatchError> {
        if self.refused() {
            return Err(WatchError::Refused("refused before".into()));
        }
        let mut slot = self.conn.lock().await;
        if let Some((conn, generation)) = slot.as_ref()
            && *generation > self.dropped.load(Ordering::Acquire)
        {
            return Ok((conn.clone(), *generation));
        }
        *slot = None;
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let listener = self.listener.clone();
        let dropped = Arc::clone(&self.dropped);
        let push = move |info: PushInfo| -> Result<(), std::convert::Infallible> {
            if info.kind == PushKind::Disconnection {
                dropped.fetch_max(generation, Ordering::AcqRel);
            }
            if let Some(listener) = listener.upgrade() {
                deliver(&*listener, generation, info);
            }
            Ok(())
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_push_sender(push);
        let mut conn = match self.open(&config, generation).await {
            Ok(conn) => conn,
            Err(err) if refuses_resp3(&err) => {
                let refused = self.refuse(&err);
                if let Some(listener) = self.listener.upgrade() {
                    listener.opened(
                        generation,
                        Err(format!("the server does not speak RESP3 (HELLO 3): {err}")),
                    );
                }
                return Err(refused);
            }
            Err(err) => return Err(WatchError::Failed(err)),
        };
        if self.track {
            let tracking: redis::RedisResult<()> = redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("ON")
                .query_async(&mut conn)
                .await;
            match tracking {
                Ok(()) => {}
                Err(err) if is_refusal(&err) => {
                    *self
                        .tracking_refused
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(format!("CLIENT TRACKING was refused: {err}"));
                }
                Err(err) => return Err(WatchError::Failed(err)),
            }
        }
        let eviction = read_eviction(&mut conn).await;
        *slot = Some((conn.clone(), generation));
        drop(slot);
        if let Some(listener) = self.listener.upgrade() {
            listener.opened(generation, eviction);
        }
        Ok((conn, generation))
    }

    /// Opens connection `generation` with `config`: to the server, or to the master the
    /// Sentinels name (retired at the next switch).
    async fn open(
        &self,
        config: &AsyncConnectionConfig,
        generation: u64,
    ) -> redis::RedisResult<MultiplexedConnection> {
        #[cfg(not(feature = "sentinel"))]
        let _ = generation;
        match &self.dial {
            WatchDial::Client(client) => {
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
            #[cfg(feature = "sentinel")]
            WatchDial::Sentinel { client, switches } => {
                let changes = switches.changes();
                let opening =
                    crate::connection::sentinel::open_with(client, switches, |named| async move {
                        resp3(&named)
                            .ok_or_else(|| {
                                redis::RedisError::from((
                                    redis::ErrorKind::InvalidClientConfig,
                                    "the Sentinels' master cannot be dialled with RESP3",
                                ))
                            })?
                            .get_multiplexed_async_connection_with_config(config)
                            .await
                    });
                let (conn, epoch) = match tokio::time::timeout(self.timeout, opening).await {
                    Ok(opened) => opened?,
                    Err(_) => {
                        return Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "no connection to the Sentinels' master within {:?}",
                                self.timeout
                            ),
                        )))
                    }
                };
                let retire = Retire {
                    generation,
                    current: Arc::clone(&self.generation),
                    dropped: Arc::clone(&self.dropped),
                    listener: self.listener.clone(),
                };
                tokio::spawn(retire.at_switch(changes, epoch));
                Ok(conn)
            }
        }
    }

    fn refuse(&self, err: &redis::RedisError) -> WatchError {
        self.refused.store(true, Ordering::Release);
        WatchError::Refused(err.to_string())
    }
}

/// `client` speaking RESP3 (pushes), with its address, credentials and TLS kept.
pub(crate) fn resp3(client: &redis::Client) -> Option<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings)).ok()
}

/// Retires a watch connection to the Sentinels' master at the next switch of master.
#[cfg(feature = "sentinel")]
struct Retire {
    generation: u64,
    current: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    listener: Weak<dyn WatchListener>,
}

#[cfg(feature = "sentinel")]
impl Retire {
    /// Waits for a switch after `epoch` (the one the connection was opened in); then, if
    /// the connection is still the newest, retires it and tells the listener. Ends early
    /// when the Locker is gone or a newer connection took over.
    async fn at_switch(self, mut changes: tokio::sync::watch::Receiver<u64>, epoch: u64) {
        loop {
            if *changes.borrow_and_update() > epoch {
                break;
            }
            if changes.changed().await.is_err()
                || self.current.load(Ordering::Acquire) != self.generation
                || self.listener.strong_count() == 0
            {
                return;
            }
        }
        if self.current.load(Ordering::Acquire) != self.generation {
            return;
        }
        self.dropped.fetch_max(self.generation, Ordering::AcqRel);
        tracing::debug!(
            generation = self.generation,
            "the Sentinels switched the master: the watch connection is retired"
        );
        if let Some(listener) = self.listener.upgrade() {
            listener.everything(Some(self.generation));
        }
    }
}

/// Hands one push of connection `generation` to the listener.
fn deliver(listener: &dyn WatchListener, generation: u64, info: PushInfo) {
    match info.kind {
        PushKind::Invalidate => match info.data.into_iter().next() {
            Some(Value::Array(keys)) => {
                let keys = keys
                    .into_iter()
                    .filter_map(|key| match key {
                        Value::BulkString(key) => Some(key),
                        Value::SimpleString(key) => Some(key.into_bytes()),
                        _ => None,
                    })
                    .collect();
                listener.invalidated(keys);
            }
            // A null invalidation: FLUSHDB / FLUSHALL.
            _ => listener.everything(None),
        },
        PushKind::Disconnection => listener.everything(Some(generation)),
        _ => {}
    }
}

/// The server's `maxmemory-policy` and `maxmemory` (from `INFO memory`, which a
/// least-privilege user may run where `CONFIG GET`, which shows passwords too, is refused),
/// or why they could not be read.
pub(crate) async fn read_eviction(conn: &mut MultiplexedConnection) -> Result<Eviction, String> {
    let reply: redis::RedisResult<String> =
        redis::cmd("INFO").arg("memory").query_async(conn).await;
    let text = reply.map_err(|err| format!("INFO memory was refused: {err}"))?;
    parse_eviction(&text)
}

/// `maxmemory` and `maxmemory_policy` of an `INFO memory` reply.
fn parse_eviction(text: &str) -> Result<Eviction, String> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.trim().to_owned())
    };
    let policy = field("maxmemory_policy")
        .ok_or_else(|| "INFO memory did not report maxmemory_policy".to_owned())?;
    let maxmemory = field("maxmemory")
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| "INFO memory did not report maxmemory".to_owned())?;
    Ok(Eviction { policy, maxmemory })
}

/// A Cluster node's answer that a slot is served elsewhere or not served right now.
fn is_redirect(err: &redis::RedisError) -> bool {
    matches!(
        err.code(),
        Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")
    )
}

/// The server does not speak RESP3 (Redis before 6 answers HELLO with an error).
fn refuses_resp3(err: &redis::RedisError) -> bool {
    let text = err.to_string();
    text.contains("HELLO") || text.contains("unknown command") || text.contains("NOPROTO")
}

/// An answer that will not change when retried: the command is unknown, disabled, or
/// forbidden to this user.
fn is_refusal(err: &redis::RedisError) -> bool {
    let code = err.code().unwrap_or_default();
    let text = err.to_string();
    code == "NOPERM"
        || text.contains("NOPERM")
        || text.contains("unknown command")
        || text.contains("unknown subcommand")
        || text.contains("not allowed")
        || code == "ERR" && !err.is_io_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_memory_limit_with_an_evicting_policy_puts_locks_at_risk() {
        let eviction = |policy: &str, maxmemory| Eviction {
            policy: policy.into(),
            maxmemory,
        };
        assert!(!eviction("noeviction", 1 << 20).may_evict_locks());
        assert!(!eviction("volatile-lru", 0).may_evict_locks());
        assert!(eviction("volatile-lru", 1 << 20).may_evict_locks());
        assert!(eviction("allkeys-random", 1 << 20).may_evict_locks());
    }

    #[test]
    fn info_memory_is_read() {
        let info = "# Memory\r\nused_memory:1000\r\nmaxmemory:2097152\r\nmaxmemory_human:2.00M\r\nmaxmemory_policy:volatile-lru\r\n";
        assert_eq!(
            parse_eviction(info),
            Ok(Eviction {
                policy: "volatile-lru".into(),
                maxmemory: 2 << 20
            })
        );
        assert!(parse_eviction("# Memory\r\n").is_err());
    }
}
