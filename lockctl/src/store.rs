//! What lockctl asks Redis directly, where lock-core has no API: listing locks with SCAN,
//! reading a lock's raw state, deleting a lock whoever holds it, and the release channel.
//!
//! The key layout is lock-core's ([`lock_core::KeyLayout`]): a lock named `N` is
//! `<prefix>{N}` holding `<token>[:<label>]` with a PX TTL (with a NUL byte before `N` when
//! `N` begins with `}` or NUL, so that the Cluster hash tag is never empty), its fencing
//! counter is that key and `:fence`, and releases are published on that key and
//! `:released`.

use std::time::Duration;

use lock_core::__private::redact_url;
use lock_core::{KeyLayout, MAX_NAME_LEN, NAME_ESCAPE};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};

use crate::exit::Failure;
use crate::holder::{display_safe, split_value};

/// What `release --force` publishes on the release channel. lock-core's waiters wake on any
/// message; `watch` tells it apart from an ordinary `released`.
pub const FORCED_MESSAGE: &str = "forced";

/// Keys looked at per SCAN call.
const SCAN_COUNT: usize = 500;

/// How often `release --force` retries when the lock changes hands under it.
const FORCE_ATTEMPTS: usize = 10;

/// Where lockctl talks to Redis, and how the lock keys are named there.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given (may hold a password: never print it, use `shown_url`).
    url: String,
    /// The URL with any password replaced.
    pub shown_url: String,
    /// The key prefix.
    pub prefix: String,
    /// lock-core's key layout under that prefix.
    pub layout: KeyLayout,
    /// Connect and per-command deadline.
    pub timeout: Duration,
}

impl Target {
    /// Checks the URL (without connecting) and keeps the settings.
    pub fn new(url: &str, prefix: &str, timeout: Duration) -> Result<Target, Failure> {
        let shown_url = redact_url(url);
        Client::open(url).map_err(|err| {
            // lock-core says what is wrong with the URL (a scheme that is not Redis's, none,
            // no host, a bad port); redis-rs only that it did not parse.
            let why = match lock_core::Locker::from_url(url) {
                Err(lock_core::LockError::Config(why)) => why,
                _ => format!(
                    "invalid Redis URL {shown_url:?} ({err}); expected \
                     redis://[user:password@]host[:port][/db]"
                ),
            };
            Failure::usage(why)
        })?;
        if timeout.is_zero() {
            return Err(Failure::usage("--timeout must be above zero"));
        }
        Ok(Target {
            url: url.to_owned(),
            shown_url,
            prefix: prefix.to_owned(),
            layout: KeyLayout::new(prefix),
            timeout,
        })
    }

    /// The URL to hand to lock-core.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Redis keys of lock `name`, after checking the name as lock-core does.
    pub fn keys(&self, name: &str) -> Result<LockKeys, Failure> {
        check_name(name)?;
        let lock = self.layout.lock_key(name);
        Ok(LockKeys {
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            lock,
        })
    }

    /// A client for this target.
    pub fn client(&self) -> Result<Client, Failure> {
        Client::open(self.url.as_str())
            .map_err(|err| Failure::usage(format!("invalid Redis URL {:?}: {err}", self.shown_url)))
    }

    /// Opens a connection whose every command answers within the timeout or fails.
    pub async fn connect(&self) -> Result<Store, Failure> {
        Ok(Store {
            conn: self.connection().await?,
            target: self.clone(),
        })
    }

    /// The connection of [`Target::connect`], bare.
    pub async fn connection(&self) -> Result<MultiplexedConnection, Failure> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let client = self.client()?;
        let connecting = client.get_multiplexed_async_connection_with_config(&config);
        let conn = match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(Failure::from_redis(&err, &self.shown_url)),
            Err(_) => {
                return Err(Failure::unavailable(format!(
                    "cannot reach Redis at {}: no answer within {:?}",
                    self.shown_url, self.timeout
                )))
            }
        };
        Ok(conn)
    }
}

/// A master's replication, as `INFO replication` and `INFO cluster` report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replication {
    /// Replicas connected and online (`slaveN:...state=online`).
    pub online: u32,
    /// Whether this master has or had replicas: one is connected (online or still
    /// syncing), its replication backlog is active (created when a replica first
    /// connects, freed an hour after the last one left), or it was promoted from a replica
    /// (`master_replid2` set).
    pub had_replicas: bool,
    /// Whether the server is a Redis Cluster node (`cluster_enabled:1`).
    pub cluster: bool,
}

impl Replication {
    /// Reads the two INFO sections; `None` unless the server is a master.
    pub fn parse(replication: &str, cluster: &str) -> Option<Replication> {
        let mut master = false;
        let mut found = Replication::default();
        for line in replication.lines().chain(cluster.lines()) {
            let Some((field, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            match field {
                "role" => master = value == "master",
                "connected_slaves" if value != "0" => found.had_replicas = true,
                "repl_backlog_active" if value == "1" => found.had_replicas = true,
                "master_replid2" if value.bytes().any(|b| b != b'0') => {
                    found.had_replicas = true;
                }
                "cluster_enabled" => found.cluster = value == "1",
                _ if field.starts_with("slave") && value.contains("state=online") => {
                    found.online += 1;
                }
                _ => {}
            }
        }
        master.then_some(found)
    }

    /// A lone Redis: a master that never had a replica, outside a Cluster. Nothing can be
    /// promoted in its place, so no failover can lose a lock taken on it.
    pub fn standalone(&self) -> bool {
        self.online == 0 && !self.had_replicas && !self.cluster
    }
}

/// The keys of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// `<prefix>{<name>}` (see [`KeyLayout`])
    pub lock: String,
    /// `<lock>:fence`
    pub fence: String,
    /// `<lock>:released`
    pub channel: String,
}

/// The state of one held lock, as read from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    /// The lock name.
    pub name: String,
    /// The Redis key.
    pub key: String,
    /// The holder label, when one was stored.
    pub holder: Option<String>,
    /// Remaining TTL; `None` when the key has none (not written by lock-core).
    pub remaining: Option<Duration>,
    /// The fencing counter, when the lock ever drew a fencing token.
    pub fencing_counter: Option<u64>,
}

/// What one listing found.
#[derive(Debug, Default)]
pub struct Listing {
    /// Held locks, sorted by name.
    pub locks: Vec<HeldLock>,
    /// Keys that look like locks but hold something else than a string.
    pub foreign: usize,
}

/// An open connection to the target.
#[derive(Debug)]
pub struct Store {
    conn: MultiplexedConnection,
    target: Target,
}

impl Store {
    /// The target this store talks to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    fn fail(&self, err: &redis::RedisError) -> Failure {
        Failure::from_redis(err, &self.target.shown_url)
    }

    /// The fencing counter of `name` (`None` if it never drew a fencing token).
    pub async fn fencing_counter(&mut self, name: &str) -> Result<Option<u64>, Failure> {
        let keys = self.target.keys(name)?;
        let counter: Option<String> = redis::cmd("GET")
            .arg(&keys.fence)
            .query_async(&mut self.conn)
            .await
            .map_err(|err| self.fail(&err))?;
        Ok(counter.and_then(|c| c.parse().ok()))
    }

    /// What the server says of its replication, if it is a master that answers `INFO`
    /// (`None` otherwise: a replica, or no `+info`). One round trip: `INFO replication`
    /// and `INFO cluster` in a pipeline.
    pub async fn replication(&mut self) -> Option<Replication> {
        let (replication, cluster): (String, String) = redis::pipe()
            .cmd("INFO")
            .arg("replication")
            .cmd("INFO")
            .arg("cluster")
            .query_async(&mut self.conn)
            .await
            .ok()?;
        Replication::parse(&replication, &cluster)
    }

    /// The raw value and remaining TTL of the lock key: `None` when it does not exist.
    /// A key holding a non-string value is an error.
    pub async fn peek(
        &mut self,
        keys: &LockKeys,
    ) -> Result<Option<(String, Option<Duration>)>, Failure> {
        let (value, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("GET")
            .arg(&keys.lock)
            .cmd("PTTL")
            .arg(&keys.lock)
            .query_async(&mut self.conn)
            .await
            .map_err(|err| self.not_a_lock(&keys.lock, &err))?;
        Ok(value.map(|v| (String::from_utf8_lossy(&v).into_owned(), ttl_of(pttl))))
    }

    /// [`Store::peek`] for `watch`: also marks the holder's value as listened for (a `~`
    /// in front; token, label and TTL stay as they are), so that lock-core announces its
    /// release on the release channel: an unmarked value is released without a word. The
    /// value comes back without the mark.
    pub async fn peek_listening(
        &mut self,
        keys: &LockKeys,
    ) -> Result<Option<(String, Option<Duration>)>, Failure> {
        let (value, pttl): (Option<Vec<u8>>, i64) = MARK_LISTENED
            .key(&keys.lock)
            .invoke_async(&mut self.conn)
            .await
            .map_err(|err| self.not_a_lock(&keys.lock, &err))?;
        Ok(value.map(|v| (String::from_utf8_lossy(&v).into_owned(), ttl_of(pttl))))
    }

    fn not_a_lock(&self, key: &str, err: &redis::RedisError) -> Failure {
        if err.code() == Some("WRONGTYPE") {
            Failure::internal(format!(
                "key {:?} holds a non-string value: it is not a lock (another part of the system writes to it)",
                display_safe(key)
            ))
        } else {
            self.fail(err)
        }
    }

    /// All held locks whose name matches the glob `pattern`, walking the keyspace with SCAN.
    pub async fn list(&mut self, pattern: &str) -> Result<Listing, Failure> {
        let mut listing = Listing::default();
        for scan in scans(&self.target.layout, pattern, "") {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(scan.pattern.as_bytes())
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query_async(&mut self.conn)
                    .await
                    .map_err(|err| self.fail(&err))?;
                let names: Vec<(String, String)> = keys
                    .iter()
                    .filter_map(|key| {
                        let key = std::str::from_utf8(key).ok()?;
                        let name = scan.name_of(&self.target.layout, key)?;
                        Some((name.to_owned(), key.to_owned()))
                    })
                    .collect();
                self.read_page(names, &mut listing).await?;
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        listing.locks.sort_by(|a, b| a.name.cmp(&b.name));
        // SCAN may return a key more than once.
        listing.locks.dedup_by(|a, b| a.key == b.key);
        Ok(listing)
    }

    /// Reads value, TTL and fencing counter of one SCAN page in one round trip.
    async fn read_page(
        &mut self,
        names: Vec<(String, String)>,
        listing: &mut Listing,
    ) -> Result<(), Failure> {
        if names.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (_, key) in &names {
            pipe.cmd("GET").arg(key);
            pipe.cmd("PTTL").arg(key);
            pipe.cmd("GET").arg(format!("{key}:fence"));
        }
        let replies: Vec<redis::RedisResult<Value>> = pipe
            .query_async(&mut self.conn)
            .await
            .map_err(|err| self.fail(&err))?;
        let mut replies = replies.into_iter();
        for (name, key) in names {
            let (Some(value), Some(pttl), Some(fence)) =
                (replies.next(), replies.next(), replies.next())
            else {
                return Err(Failure::internal("Redis sent fewer replies than commands"));
            };
            let value = match value {
                Ok(Value::BulkString(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                // Released between SCAN and GET.
                Ok(Value::Nil) => continue,
                Err(err) if err.code() == Some("WRONGTYPE") => {
                    listing.foreign += 1;
                    continue;
                }
                Err(err) => return Err(self.fail(&err)),
                Ok(other) => {
                    return Err(Failure::internal(format!(
                        "unexpected reply to GET {key:?}: {other:?}"
                    )))
                }
            };
            let remaining = match pttl {
                Ok(Value::Int(-2)) => continue,
                Ok(Value::Int(ms)) => ttl_of(ms),
                _ => None,
            };
            let fencing_counter = match fence {
                Ok(Value::BulkString(bytes)) => std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|s| s.parse().ok()),
                _ => None,
            };
            let (_, holder) = split_value(&value);
            listing.locks.push(HeldLock {
                holder: holder.map(str::to_owned),
                name,
                key,
                remaining,
                fencing_counter,
            });
        }
        Ok(())
    }

    /// Tells the first waiter in the lock's Redis-side queue (lock-core's waiter queue, see
    /// its crate docs) that the lock is free, as a release would: it looks at once instead
    /// of at the removed holder's TTL. Best effort: the waiter's timers cover a failure.
    async fn wake_queue_head(&mut self, lock_key: &str) {
        let head: Result<Vec<String>, _> = redis::cmd("ZRANGE")
            .arg(format!("{lock_key}:q"))
            .arg(0)
            .arg(0)
            .query_async(&mut self.conn)
            .await;
        if let Some(head) = head.ok().and_then(|mut heads| heads.pop()) {
            let _: Result<i64, _> = redis::cmd("PUBLISH")
                .arg(head)
                .arg(format!("g:0:{lock_key}"))
                .query_async(&mut self.conn)
                .await;
        }
    }

    /// Deletes lock `name` whoever holds it, tells its waiters, and returns what it held
    /// (`None` if it was free). Atomic: WATCH the key, read it, then DEL and PUBLISH in one
    /// MULTI/EXEC, retried if the lock changed hands in between, so the holder reported is
    /// the one removed. Needs no scripting.
    pub async fn force_release(&mut self, name: &str) -> Result<Option<HeldLock>, Failure> {
        let keys = self.target.keys(name)?;
        for _ in 0..FORCE_ATTEMPTS {
            redis::cmd("WATCH")
                .arg(&keys.lock)
                .query_async::<()>(&mut self.conn)
                .await
                .map_err(|err| self.fail(&err))?;
            let peeked = match self.peek(&keys).await {
                Ok(peeked) => peeked,
                Err(failure) => {
                    self.unwatch().await;
                    return Err(failure);
                }
            };
            let Some((value, remaining)) = peeked else {
                self.unwatch().await;
                return Ok(None);
            };
            let done: Option<(i64, i64)> = redis::pipe()
                .atomic()
                .cmd("DEL")
                .arg(&keys.lock)
                .cmd("PUBLISH")
                .arg(&keys.channel)
                .arg(FORCED_MESSAGE)
                .query_async(&mut self.conn)
                .await
                .map_err(|err| self.fail(&err))?;
            if done.is_some() {
                self.wake_queue_head(&keys.lock).await;
                let (_, holder) = split_value(&value);
                return Ok(Some(HeldLock {
                    name: name.to_owned(),
                    key: keys.lock,
                    holder: holder.map(str::to_owned),
                    remaining,
                    fencing_counter: None,
                }));
            }
            // The lock changed between the read and EXEC: look again.
        }
        Err(Failure::internal(format!(
            "lock `{}` changed hands {FORCE_ATTEMPTS} times while being removed; try again",
            display_safe(name)
        )))
    }

    async fn unwatch(&mut self) {
        // Best effort: the connection is closed right after anyway.
        let _ = redis::cmd("UNWATCH")
            .query_async::<()>(&mut self.conn)
            .await;
    }
}

/// A PTTL reply as a remaining TTL: `None` for "no TTL" (-1) or "no key" (-2).
/// GET + PTTL of a lock key, marking its value as listened for (lock-core's
/// `scripts/queue.lua` describes the mark). Returns the value without the mark.
static MARK_LISTENED: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local v = redis.call('GET', KEYS[1])
         if not v then return {false, -2} end
         if string.byte(v, 1) == 126 then
           v = string.sub(v, 2)
         else
           redis.call('SET', KEYS[1], '~' .. v, 'KEEPTTL')
         end
         return {v, redis.call('PTTL', KEYS[1])}",
    )
});

fn ttl_of(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// Refuses names lock-core would refuse, before anything is sent.
fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(Failure::usage("invalid lock name \"\": it is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Failure::usage(format!(
            "invalid lock name: it is {} bytes long, the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    Ok(())
}

/// One SCAN of [`scans`]: its MATCH pattern, and which stored names it may report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The MATCH pattern.
    pub pattern: String,
    /// `Some(true)`: only names stored after lock-core's NUL byte; `Some(false)`: only the
    /// others; `None`: every name (the pattern matches all).
    escaped: Option<bool>,
    suffix: &'static str,
}

impl Scan {
    /// The name whose key (the lock key and the suffix) is `key`, if this scan reports it.
    pub fn name_of<'k>(&self, layout: &KeyLayout, key: &'k str) -> Option<&'k str> {
        let lock = key.strip_suffix(self.suffix)?;
        let name = layout.name_of(lock)?;
        let escaped = lock[layout.lead().len()..].starts_with(NAME_ESCAPE);
        match self.escaped {
            Some(wanted) if wanted != escaped => None,
            _ => Some(name),
        }
    }
}

/// The SCANs that find the keys (`<lock key><suffix>`) of every name matching the glob
/// `pattern`. lock-core stores a name that begins with `}` or NUL after a NUL byte (see
/// [`KeyLayout`]), so a pattern other than `*` takes two: one over the names as they are,
/// one over the names after the NUL byte; each reports only its own kind, so that the
/// pattern applies to the names, not to the bytes stored.
pub(crate) fn scans(layout: &KeyLayout, pattern: &str, suffix: &'static str) -> Vec<Scan> {
    let lead = glob_escape(layout.lead());
    let scan = |escape: &str, escaped| Scan {
        pattern: format!("{lead}{escape}{pattern}}}{}", glob_escape(suffix)),
        escaped,
        suffix,
    };
    if pattern == "*" {
        return vec![scan("", None)];
    }
    vec![scan("", Some(false)), scan("\0", Some(true))]
}

/// Escapes the glob metacharacters of a literal (the prefix), so only the user's pattern
/// matches anything.
pub(crate) fn glob_escape(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len());
    for c in literal.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_lock_core_layout() {
        let target = Target::new("redis://127.0.0.1/", "lock:", Duration::from_secs(1)).unwrap();
        let keys = target.keys("a b ü").unwrap();
        assert_eq!(keys.lock, "lock:{a b ü}");
        assert_eq!(keys.fence, "lock:{a b ü}:fence");
        assert_eq!(keys.channel, "lock:{a b ü}:released");
        assert!(target.keys("").is_err());
        assert!(target.keys(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn names_beginning_with_a_brace_get_lock_cores_keys() {
        let target = Target::new("redis://127.0.0.1/", "lock:", Duration::from_secs(1)).unwrap();
        let keys = target.keys("}job").unwrap();
        assert_eq!(keys.lock, "lock:{\0}job}");
        assert_eq!(keys.fence, "lock:{\0}job}:fence");
        assert_eq!(keys.lock, KeyLayout::new("lock:").lock_key("}job"));
        let braced = Target::new("redis://127.0.0.1/", "app{}:", Duration::from_secs(1)).unwrap();
        assert_eq!(braced.keys("job").unwrap().lock, "app{\0}:{job}");
    }

    #[test]
    fn scans_report_each_name_once_by_its_own_pattern() {
        let layout = KeyLayout::new("lock:");
        let all = scans(&layout, "*", "");
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].pattern, "lock:{*}");
        assert_eq!(all[0].name_of(&layout, "lock:{\0}job}"), Some("}job"));
        assert_eq!(all[0].name_of(&layout, "lock:{job}"), Some("job"));
        // An older version's key of `}job` is not a key of this layout.
        assert_eq!(all[0].name_of(&layout, "lock:{}job}"), None);
        let some = scans(&layout, "}j*", ":sem");
        assert_eq!(some[0].pattern, "lock:{}j*}:sem");
        assert_eq!(some[1].pattern, "lock:{\0}j*}:sem");
        assert_eq!(some[1].name_of(&layout, "lock:{\0}job}:sem"), Some("}job"));
        assert_eq!(some[0].name_of(&layout, "lock:{\0}job}:sem"), None);
        assert_eq!(some[1].name_of(&layout, "lock:{jx}:sem"), None);
        assert_eq!(some[0].name_of(&layout, "lock:{jx}:sem"), Some("jx"));
    }

    #[test]
    fn bad_urls_are_usage_errors_without_password() {
        let err = Target::new("http://u:secret@x/", "lock:", Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.code, crate::exit::USAGE);
        assert!(!err.message.contains("secret"), "{}", err.message);
    }

    #[test]
    fn prefix_metacharacters_are_escaped() {
        assert_eq!(glob_escape("a*[b]:{"), "a\\*\\[b\\]:{");
    }
}
