//! [`RedisStore`]: guarded writes to Redis, each one script (`scripts/fenced_*.lua`) that
//! checks the lease's token against the resource's guard, writes, and records the token.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{FromRedisValue, ToRedisArgs, Value};
use tracing::Instrument as _;

use crate::backend::AnyBackend;
use crate::connection::shared::{is_connection_failure, Conn, SharedConnection};
use crate::fenced::error::FenceError;
use crate::fenced::fence::{AsFence, Fence};
use crate::locker::Locker;
use crate::slot::cluster_slot;

/// The guard's check and record, before every fenced script.
const GUARD: &str = include_str!("../scripts/fenced_guard.lua");

static SET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&[GUARD, include_str!("../scripts/fenced_set.lua")].concat())
});
static HSET: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&[GUARD, include_str!("../scripts/fenced_hset.lua")].concat())
});

/// The wrapper of a user's script: what comes before and after its text.
const EVAL: &str = include_str!("../scripts/fenced_eval.lua");
const BODY_MARK: &str = "--@body\n";

/// How long [`RedisStore::connect`] waits to connect, and then for each answer: the
/// Locker's default command timeout.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Guarded writes to one Redis (or a Redis Cluster): each applies only if the lease's
/// fencing token is at least the highest the resource has accepted, records it, and
/// writes, in one script (one round trip). See [the module](crate::fenced) for the rule.
///
/// The store can be the lock's own Redis ([`RedisStore::of`]) or any other
/// ([`RedisStore::connect`], [`RedisStore::from_connection`], [`RedisStore::from_pool`],
/// and on a Cluster `RedisStore::from_cluster`). Each written key has a guard beside it,
/// [`RedisStore::guard_key`], a hash of the highest token and its lock's name, that never
/// expires.
///
/// ```no_run
/// use lock_core::fenced::{FenceError, RedisStore};
/// use lock_core::Locker;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let locker = Locker::from_url("redis://127.0.0.1:6379/")?;
/// let store = RedisStore::of(&locker)?; // the lock's own Redis
///
/// let lease = locker.lock("item:17").fencing().await?;
/// match store.set(&lease, "stock:{item:17}", 41).await {
///     Ok(()) => {}
///     // Paused past the TTL: a newer holder wrote first, and this write was refused.
///     Err(FenceError::Stale { token, seen, .. }) => eprintln!("stale: {token} < {seen}"),
///     Err(other) => return Err(other.into()),
/// }
/// store.hset(&lease, "item:{item:17}", &[("stock", "41"), ("price", "950")]).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    target: Target,
}

#[derive(Clone)]
enum Target {
    /// A Locker's own connection (one Redis, Sentinel's master, a Cluster), reconnected as
    /// the Locker's are.
    Shared(SharedConnection),
    Conn(MultiplexedConnection),
    Pool(deadpool_redis::Pool),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.target {
            Target::Shared(_) => "the locker's connection",
            Target::Conn(_) => "a connection",
            Target::Pool(_) => "a pool",
            #[cfg(feature = "cluster")]
            Target::Cluster(_) => "a cluster connection",
        };
        f.debug_struct("RedisStore").field("on", &kind).finish()
    }
}

impl RedisStore {
    /// Guarded writes on the Redis that `locker` locks on (one Redis, Sentinel's master or
    /// a Cluster, with Lua scripts), through the locker's own connection: one round trip
    /// per write, and the locker's command timeout. A Redlock, WATCH/MULTI or in-memory
    /// locker has no one such connection: [`FenceError::Unsupported`]; connect to the data's
    /// Redis with [`RedisStore::connect`] instead.
    pub fn of(locker: &Locker) -> Result<RedisStore, FenceError> {
        match locker.engine().backend() {
            AnyBackend::Scripted(scripted) => Ok(RedisStore {
                target: Target::Shared(scripted.connection().clone()),
            }),
            other => Err(FenceError::Unsupported {
                reason: format!(
                    "a {} locker has no single Redis connection to write through; give the \
                     store its own with RedisStore::connect(url)",
                    match other {
                        AnyBackend::Redlock(_) => "Redlock",
                        AnyBackend::Transaction(_) => "WATCH/MULTI",
                        _ => "memory",
                    }
                ),
            }),
        }
    }

    /// Guarded writes on the Redis at `url` (`redis://`, `rediss://`), on one multiplexed
    /// connection that connects, and answers each write, within 3 s.
    pub async fn connect(url: &str) -> Result<RedisStore, FenceError> {
        let unavailable = |err: redis::RedisError| FenceError::Unavailable {
            resource: crate::redact::redact_url(url),
            reason: err.to_string(),
            source: Some(Box::new(err)),
        };
        let client = redis::Client::open(url).map_err(unavailable)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(unavailable)?;
        Ok(RedisStore::from_connection(conn))
    }

    /// Guarded writes on `conn` (its own timeouts apply).
    pub fn from_connection(conn: MultiplexedConnection) -> RedisStore {
        RedisStore {
            target: Target::Conn(conn),
        }
    }

    /// Guarded writes on connections of `pool` (one checkout per write).
    pub fn from_pool(pool: deadpool_redis::Pool) -> RedisStore {
        RedisStore {
            target: Target::Pool(pool),
        }
    }

    /// Guarded writes on a Redis Cluster: every key of a write and its guard must be in
    /// one slot, which is checked before anything is sent ([`FenceError::CrossSlot`]).
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn from_cluster(conn: redis::cluster_async::ClusterConnection) -> RedisStore {
        RedisStore {
            target: Target::Cluster(conn),
        }
    }

    /// The guard of `key`: where the highest token written to it and its lock's name are
    /// kept (a hash, fields `token` and `lock`). It is in `key`'s Cluster slot whenever
    /// that can be: `<key>:fence` when the key has a hash tag, `{<key>}:fence` when it has
    /// none and no `}`; otherwise `<key>:fence`, which a Cluster refuses
    /// ([`FenceError::CrossSlot`]).
    ///
    /// ```
    /// use lock_core::fenced::RedisStore;
    ///
    /// assert_eq!(RedisStore::guard_key("stock:{item:17}"), "stock:{item:17}:fence");
    /// assert_eq!(RedisStore::guard_key("stock:17"), "{stock:17}:fence");
    /// ```
    pub fn guard_key(key: &str) -> String {
        if has_hash_tag(key) || key.is_empty() || key.contains('}') {
            format!("{key}:fence")
        } else {
            format!("{{{key}}}:fence")
        }
    }

    /// `SET key value`, if `fence`'s token is at least the highest `key` has seen.
    pub async fn set(
        &self,
        fence: impl AsFence,
        key: &str,
        value: impl ToRedisArgs,
    ) -> Result<(), FenceError> {
        let fence = fence.fence()?;
        self.write("set", &SET, &fence, key, &[], |call| {
            call.arg(value);
        })
        .await?;
        Ok(())
    }

    /// `HSET key field value [field value ...]`, if `fence`'s token is at least the highest
    /// `key` has seen.
    pub async fn hset<F: ToRedisArgs, V: ToRedisArgs>(
        &self,
        fence: impl AsFence,
        key: &str,
        fields: &[(F, V)],
    ) -> Result<(), FenceError> {
        let fence = fence.fence()?;
        if fields.is_empty() {
            return Err(FenceError::Script {
                reason: format!("an HSET of `{key}` needs at least one field"),
            });
        }
        self.write("hset", &HSET, &fence, key, &[], |call| {
            for (field, value) in fields {
                call.arg(field).arg(value);
            }
        })
        .await?;
        Ok(())
    }

    /// Runs `script` with `keys` and `args` if `fence`'s token is at least the highest
    /// `keys[0]` (the resource, whose guard is checked) has seen, and returns its reply.
    /// On a Cluster every key must be in the guard's slot.
    ///
    /// ```no_run
    /// use lock_core::fenced::{FencedScript, RedisStore};
    /// use lock_core::Locker;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let locker = Locker::from_url("redis://127.0.0.1:6379/")?;
    /// let store = RedisStore::of(&locker)?;
    /// // The same text as a plain EVAL script: KEYS and ARGV are the write's own.
    /// let take = FencedScript::new(
    ///     "local left = tonumber(redis.call('GET', KEYS[1]) or '0') - tonumber(ARGV[1]) \
    ///      if left < 0 then return -1 end \
    ///      redis.call('SET', KEYS[1], left) return left",
    /// )?;
    /// let lease = locker.lock("item:17").fencing().await?;
    /// let left: i64 = store.eval(&lease, &take, &["stock:{item:17}"], &[2]).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn eval<T: FromRedisValue, A: ToRedisArgs>(
        &self,
        fence: impl AsFence,
        script: &FencedScript,
        keys: &[&str],
        args: &[A],
    ) -> Result<T, FenceError> {
        let fence = fence.fence()?;
        let Some((resource, others)) = keys.split_first() else {
            return Err(FenceError::Script {
                reason: "a guarded script needs at least one key, the resource whose guard \
                         it checks (KEYS[1])"
                    .to_owned(),
            });
        };
        let reply = self
            .write("eval", &script.script, &fence, resource, others, |call| {
                for arg in args {
                    call.arg(arg);
                }
            })
            .await?;
        T::from_redis_value(reply).map_err(|err| FenceError::Store {
            resource: (*resource).to_owned(),
            reason: format!("the script's reply does not convert: {err}"),
        })
    }

    /// What `key`'s guard holds: the highest token written to it and the lock whose tokens
    /// it compares, or `None` when nothing was ever written under a fence.
    pub async fn guard(&self, key: &str) -> Result<Option<Fence>, FenceError> {
        let guard = RedisStore::guard_key(key);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&guard).arg("token").arg("lock");
        let reply = self.send(&[&guard], Request::Cmd(&cmd), key).await?;
        let (token, lock): (Option<u64>, Option<String>) = from_value(key, reply)?;
        Ok(token.map(|token| Fence::new(lock.unwrap_or_default(), token)))
    }

    /// Runs one fenced script: KEYS are the guard, `resource` and `others`; ARGV the
    /// token, the lock's name, then what `fill` adds.
    async fn write(
        &self,
        op: &'static str,
        script: &redis::Script,
        fence: &Fence,
        resource: &str,
        others: &[&str],
        fill: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<Value, FenceError> {
        let guard = RedisStore::guard_key(resource);
        let mut keys: Vec<&str> = Vec::with_capacity(2 + others.len());
        keys.push(&guard);
        keys.push(resource);
        keys.extend_from_slice(others);
        let mut call = script.prepare_invoke();
        for key in &keys {
            call.key(*key);
        }
        call.arg(fence.token()).arg(fence.lock());
        fill(&mut call);
        let span = tracing::debug_span!(
            "lock.fenced_write",
            op,
            lock = fence.lock(),
            token = fence.token(),
            resource
        );
        async {
            let reply = self.send(&keys, Request::Script(&call), resource).await?;
            let outcome = refusal_or_reply(reply, fence, resource);
            if let Err(err) = &outcome {
                tracing::debug!(%err, "guarded write refused");
            }
            outcome
        }
        .instrument(span)
        .await
    }

    /// Sends `request`, after the Cluster check of `keys` (on a Cluster).
    async fn send(
        &self,
        keys: &[&str],
        request: Request<'_>,
        resource: &str,
    ) -> Result<Value, FenceError> {
        #[cfg(not(feature = "cluster"))]
        let _ = keys; // only a Cluster has slots to check
        match &self.target {
            Target::Shared(shared) => {
                let lent = shared
                    .get(resource)
                    .await
                    .map_err(|err| FenceError::Unavailable {
                        resource: resource.to_owned(),
                        reason: err.to_string(),
                        source: Some(Box::new(err)),
                    })?;
                #[cfg(feature = "cluster")]
                if matches!(lent.conn, Conn::Cluster(_)) {
                    same_slot(keys)?;
                }
                let mut conn: Conn = lent.conn.clone();
                let reply = request.on(&mut conn).await;
                if let Err(err) = &reply
                    && is_connection_failure(err)
                {
                    shared.retire(&lent);
                }
                reply.map_err(|err| store_error(resource, err))
            }
            Target::Conn(conn) => run(&mut conn.clone(), request, resource).await,
            Target::Pool(pool) => {
                let mut conn = pool.get().await.map_err(|err| FenceError::Unavailable {
                    resource: resource.to_owned(),
                    reason: format!("no connection from the pool: {err}"),
                    source: Some(Box::new(err)),
                })?;
                run(&mut conn, request, resource).await
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(conn) => {
                same_slot(keys)?;
                run(&mut conn.clone(), request, resource).await
            }
        }
    }
}

/// What a store sends: a fenced script, or a plain command.
enum Request<'a> {
    Script(&'a redis::ScriptInvocation<'a>),
    Cmd(&'a redis::Cmd),
}

impl Request<'_> {
    async fn on<C: ConnectionLike + Send>(&self, conn: &mut C) -> redis::RedisResult<Value> {
        match self {
            Request::Script(call) => call.invoke_async(conn).await,
            Request::Cmd(cmd) => cmd.query_async(conn).await,
        }
    }
}

async fn run<C: ConnectionLike + Send>(
    conn: &mut C,
    request: Request<'_>,
    resource: &str,
) -> Result<Value, FenceError> {
    request
        .on(conn)
        .await
        .map_err(|err| store_error(resource, err))
}

/// The reply of a fenced script: `{1, reply}` when it ran, `{0, token seen, lock seen}`
/// when the guard refused.
fn refusal_or_reply(reply: Value, fence: &Fence, resource: &str) -> Result<Value, FenceError> {
    let unexpected = |reply: &Value| FenceError::Store {
        resource: resource.to_owned(),
        reason: format!("unexpected reply {reply:?}"),
    };
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply));
    };
    let mut items = items.into_iter();
    match items.next() {
        Some(Value::Int(1)) => Ok(items.next().unwrap_or(Value::Nil)),
        Some(Value::Int(0)) => {
            let (seen, guarded_by): (String, String) =
                from_value(resource, Value::Array(items.collect()))?;
            if guarded_by != fence.lock() {
                return Err(FenceError::OtherLock {
                    lock: fence.lock().to_owned(),
                    resource: resource.to_owned(),
                    guarded_by,
                });
            }
            Err(FenceError::Stale {
                lock: guarded_by,
                resource: resource.to_owned(),
                token: fence.token(),
                seen: seen.parse().unwrap_or(u64::MAX),
            })
        }
        other => Err(unexpected(&other.unwrap_or(Value::Nil))),
    }
}

fn from_value<T: FromRedisValue>(resource: &str, value: Value) -> Result<T, FenceError> {
    T::from_redis_value(value).map_err(|err| FenceError::Store {
        resource: resource.to_owned(),
        reason: err.to_string(),
    })
}

/// A failed round trip: the store unreachable or silent (nothing, or the whole write,
/// happened), or an error it answered with.
fn store_error(resource: &str, err: redis::RedisError) -> FenceError {
    if err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
    {
        return FenceError::Unavailable {
            resource: resource.to_owned(),
            reason: err.to_string(),
            source: Some(Box::new(err)),
        };
    }
    FenceError::Store {
        resource: resource.to_owned(),
        reason: err.to_string(),
    }
}

/// Whether `key` has a Redis Cluster hash tag: a `{` followed later by a `}` with
/// something between them.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|close| close > 0)
}

/// [`FenceError::CrossSlot`] unless every key is in the first one's slot (the guard's).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
fn same_slot(keys: &[&str]) -> Result<(), FenceError> {
    let Some((first, rest)) = keys.split_first() else {
        return Ok(());
    };
    let slot = cluster_slot(first.as_bytes());
    for key in rest {
        let key_slot = cluster_slot(key.as_bytes());
        if key_slot != slot {
            return Err(FenceError::CrossSlot {
                key: (*key).to_owned(),
                key_slot,
                other: (*first).to_owned(),
                other_slot: slot,
            });
        }
    }
    Ok(())
}

/// A user's Lua script, run by [`RedisStore::eval`] under the guard: the same text as for
/// a plain `EVAL` (it reads its own `KEYS` and `ARGV`), wrapped once, when it is created,
/// in the guard's check and record, and sent as `EVALSHA` (with `EVAL` after `NOSCRIPT`).
///
/// The text is code you trust, as any script you `EVAL`: it is pasted into the wrapper, so
/// a body with an unbalanced `end` breaks out of it (Redis then refuses the script, or it
/// runs outside the guard's order). Never build it from a request's input; pass values
/// as `ARGV`.
#[derive(Clone)]
pub struct FencedScript {
    script: redis::Script,
}

impl FencedScript {
    /// Wraps `body`, a Lua script as `EVAL` would take it. A script with a `#!lua` line
    /// (flags, `no-writes`) cannot run inside another: [`FenceError::Script`].
    ///
    /// ```
    /// use lock_core::fenced::FencedScript;
    ///
    /// assert!(FencedScript::new("return redis.call('INCRBY', KEYS[1], ARGV[1])").is_ok());
    /// assert!(FencedScript::new("#!lua flags=no-writes\nreturn 1").is_err());
    /// ```
    pub fn new(body: &str) -> Result<FencedScript, FenceError> {
        if body.trim_start().starts_with("#!") {
            return Err(FenceError::Script {
                reason: "a script with a `#!lua` line cannot run under the guard: remove the \
                         line (its flags do not apply to a guarded write, which writes)"
                    .to_owned(),
            });
        }
        let (before, after) = EVAL.split_once(BODY_MARK).unwrap_or((EVAL, ""));
        // The body ends with a newline, so that a last line that is a comment cannot
        // swallow the wrapper's `end`.
        let text = [GUARD, before, body, "\n", after].concat();
        Ok(FencedScript {
            script: redis::Script::new(&text),
        })
    }
}

impl std::fmt::Debug for FencedScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedScript")
            .field("sha1", &self.script.get_hash())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_is_in_its_keys_slot_whenever_it_can_be() {
        for key in ["stock:17", "stock:{item:17}", "a{b}c", "{x}", "é:17", "q{"] {
            let guard = RedisStore::guard_key(key);
            assert_eq!(
                cluster_slot(guard.as_bytes()),
                cluster_slot(key.as_bytes()),
                "{key} and {guard}"
            );
            assert!(same_slot(&[&guard, key]).is_ok());
        }
        // A `}` and no hash tag: no guard name shares the slot; a Cluster refuses it.
        for key in ["a}b", "x{}y", "{}{x}"] {
            let guard = RedisStore::guard_key(key);
            assert_eq!(guard, format!("{key}:fence"));
            assert!(matches!(
                same_slot(&[&guard, key]),
                Err(FenceError::CrossSlot { .. })
            ));
        }
    }

    #[test]
    fn the_wrapper_keeps_the_scripts_text_whole() {
        let script = FencedScript::new("return 1 -- a comment on the last line").expect("script");
        let text = [
            GUARD,
            EVAL.split_once(BODY_MARK).expect("mark").0,
            "return 1 -- a comment on the last line",
            "\n",
            EVAL.split_once(BODY_MARK).expect("mark").1,
        ]
        .concat();
        assert_eq!(
            script.script.get_hash(),
            redis::Script::new(&text).get_hash()
        );
        assert!(EVAL.contains(BODY_MARK));
    }
}
