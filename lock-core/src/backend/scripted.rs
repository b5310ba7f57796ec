//! One Redis, Lua scripts: one round trip per operation. The default backend.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Script, ScriptInvocation};

use super::{millis, remaining_from_pttl, Attempt, Backend, RawState};
use crate::conn::{is_connection_failure, SharedConnection};
use crate::key::LockKeys;
use crate::LockError;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release.lua")));
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/extend.lua")));

pub(crate) struct Scripted {
    conn: SharedConnection,
}

impl Scripted {
    pub fn new(conn: SharedConnection) -> Scripted {
        Scripted { conn }
    }

    /// Runs a script on the shared connection. `invoke_async` sends EVALSHA and falls back
    /// to loading the script on NOSCRIPT, so a flushed script cache or a failover to a
    /// server that never saw the script costs one extra round trip, never an error.
    async fn run<T: FromRedisValue>(
        &self,
        keys: &LockKeys,
        invocation: ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        invocation.invoke_async(&mut conn).await.map_err(|err| {
            if is_connection_failure(&err) {
                self.conn.retire(&lent);
            }
            LockError::from_redis(&keys.name, &keys.lock, err)
        })
    }
}

impl Backend for Scripted {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
    ) -> Result<Attempt, LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        let mut invocation = ACQUIRE.key(&keys.lock);
        invocation
            .key(&keys.fence)
            .arg(value)
            .arg(millis(ttl))
            .arg(if fencing { "1" } else { "0" });
        let undo = UndoOnDrop {
            conn: &lent.conn,
            keys,
            value,
            armed: true,
        };
        let reply = invocation
            .invoke_async::<(i64, i64, Vec<u8>)>(&mut conn)
            .await;
        match reply {
            Ok((1, fence, _)) => {
                undo.disarm();
                Ok(Attempt::Acquired {
                    fencing_token: fencing.then(|| u64::try_from(fence).unwrap_or(0)),
                })
            }
            Ok((_, pttl, holder)) => {
                undo.disarm();
                Ok(Attempt::Busy {
                    remaining: remaining_from_pttl(pttl),
                    holder_value: (!holder.is_empty())
                        .then(|| String::from_utf8_lossy(&holder).into_owned()),
                })
            }
            Err(err) => {
                // A server error means the script did not take the lock; anything else
                // (timeout, broken connection) may have taken it, so the undo stays armed.
                if matches!(err.kind(), redis::ErrorKind::Server(_)) {
                    undo.disarm();
                }
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                Err(LockError::from_redis(&keys.name, &keys.lock, err))
            }
        }
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        let mut invocation = RELEASE.key(&keys.lock);
        invocation.arg(value);
        self.run::<i64>(keys, invocation).await.map(|n| n == 1)
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        let mut invocation = EXTEND.key(&keys.lock);
        invocation.arg(value).arg(millis(ttl));
        self.run::<i64>(keys, invocation).await.map(|n| n == 1)
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        let (value, pttl, fence): (Option<Vec<u8>>, i64, Option<u64>) = redis::pipe()
            .get(&keys.lock)
            .pttl(&keys.lock)
            .get(&keys.fence)
            .query_async(&mut conn)
            .await
            .map_err(|err| {
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                LockError::from_redis(&keys.name, &keys.lock, err)
            })?;
        Ok(RawState {
            value: value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            remaining: remaining_from_pttl(pttl),
            fencing_counter: fence,
        })
    }
}

/// Undoes an acquire whose reply never arrived (the caller dropped the future, or the
/// command timed out): a compare-and-delete of our own value, sent in the background on the
/// same multiplexed connection. The connection keeps request order, so the delete reaches
/// Redis after the SET it undoes.
struct UndoOnDrop<'a> {
    conn: &'a MultiplexedConnection,
    keys: &'a LockKeys,
    value: &'a str,
    armed: bool,
}

impl UndoOnDrop<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for UndoOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to run the undo on; the TTL will clean up
        };
        let mut conn = self.conn.clone();
        let key = self.keys.lock.clone();
        let value = self.value.to_owned();
        runtime.spawn(async move {
            let mut invocation = RELEASE.key(&key);
            invocation.arg(&value);
            if let Err(err) = invocation.invoke_async::<i64>(&mut conn).await {
                tracing::debug!(%key, %err, "undo of an abandoned acquire failed; the TTL will free the lock");
            }
        });
    }
}
