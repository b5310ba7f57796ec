//! The watch connection: one RESP3 connection per `Locker` (opened at its first lease),
//! with `CLIENT TRACKING on` in Redis's default mode: every key this connection reads is
//! remembered by the server, which pushes an invalidation when the key is next modified,
//! deleted, expired, evicted or flushed. A read here therefore both checks a key and asks
//! to be told about its next change.
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
}

pub(crate) struct Watcher {
    /// A RESP3 client to the server (the Locker's URL and TLS settings).
    client: redis::Client,
    timeout: Duration,
    /// Whether to turn tracking on (off: the connection only reads the eviction settings).
    track: bool,
    conn: tokio::sync::Mutex<Option<(MultiplexedConnection, u64)>>,
    generation: AtomicU64,
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
    /// A RESP3 client to the server `dial` reaches, or `None` where the watch connection
    /// cannot be opened on its own (a Sentinel-named master, or a TLS server name pinned to
    /// another host: the Locker keeps renewal-time detection there).
    pub fn client_for(dial: &Dial) -> Option<redis::Client> {
        #[allow(irrefutable_let_patterns)]
        let Dial::Client(client) = dial
        else {
            return None;
        };
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        redis::Client::open(info.set_redis_settings(settings)).ok()
    }

    /// A watcher on `client` (from [`Watcher::client_for`]), telling `listener`.
    pub fn new(
        client: redis::Client,
        timeout: Duration,
        track: bool,
        listener: Weak<dyn WatchListener>,
    ) -> Watcher {
        Watcher {
            client,
            timeout,
            track,
            conn: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
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
            self.forget(generation);
            WatchError::Failed(err)
        })
    }

    /// Drops the connection of `generation` (a failed command): the next read opens a new one.
    fn forget(&self, generation: u64) {
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
        let mut conn = match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
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

    fn refuse(&self, err: &redis::RedisError) -> WatchError {
        self.refused.store(true, Ordering::Release);
        WatchError::Refused(err.to_string())
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
