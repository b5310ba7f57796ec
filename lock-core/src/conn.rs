//! How lock commands reach Redis: one multiplexed connection taken from the pool.
//!
//! A deadpool-redis checkout answers a `PING` (and `UNWATCH`) before handing out the
//! connection, which doubles the round trips of a one-command lock operation. Lock commands
//! are short and independent, so they share one multiplexed connection instead: every task
//! pipelines on the same socket, which is also what makes 64 concurrent lockers fast. The
//! pool still creates (and, after a failure, re-creates) that connection, so its URL, TLS
//! and auth settings apply, and the WATCH/MULTI backend keeps using checkouts because it
//! needs a connection of its own.

use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::Duration;

use deadpool_redis::{Connection, Pool};
use redis::aio::MultiplexedConnection;

use crate::locker::within;
use crate::LockError;

/// The pool plus the shared connection currently in use.
#[derive(Clone)]
pub(crate) struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// Deadline for opening a connection (the pool's own timeouts may be unset when the
    /// user built the pool).
    connect_timeout: Duration,
    current: RwLock<Option<Slot>>,
    /// Serialises reconnects so that a burst of failures opens one new connection, not one
    /// per waiting task.
    reconnect: tokio::sync::Mutex<()>,
}

#[derive(Clone)]
struct Slot {
    conn: MultiplexedConnection,
    generation: u64,
}

/// A clone of the shared connection, remembering which one it was so that a failure can
/// retire exactly that connection.
pub(crate) struct Lent {
    pub conn: MultiplexedConnection,
    generation: u64,
}

impl SharedConnection {
    pub fn new(pool: Pool, connect_timeout: Duration) -> SharedConnection {
        SharedConnection {
            inner: Arc::new(Inner {
                pool,
                connect_timeout,
                current: RwLock::new(None),
                reconnect: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The shared connection, opening it first if there is none.
    pub async fn get(&self, name: &str) -> Result<Lent, LockError> {
        if let Some(slot) = self.current() {
            return Ok(Lent {
                conn: slot.conn,
                generation: slot.generation,
            });
        }
        let _one_at_a_time = self.inner.reconnect.lock().await;
        if let Some(slot) = self.current() {
            return Ok(Lent {
                conn: slot.conn,
                generation: slot.generation,
            });
        }
        let checked_out = Box::pin(within(
            self.inner.connect_timeout,
            name,
            checkout(&self.inner.pool, name),
        ))
        .await?;
        let conn = Connection::take(checked_out);
        let generation = {
            let mut current = write_ignoring_poison(&self.inner.current);
            let generation = current.as_ref().map_or(1, |s| s.generation + 1);
            *current = Some(Slot {
                conn: conn.clone(),
                generation,
            });
            generation
        };
        Ok(Lent { conn, generation })
    }

    /// Retires the connection `lent` came from after an I/O failure, so the next command
    /// opens a fresh one. A newer connection is left alone.
    pub fn retire(&self, lent: &Lent) {
        let mut current = write_ignoring_poison(&self.inner.current);
        if current
            .as_ref()
            .is_some_and(|slot| slot.generation == lent.generation)
        {
            *current = None;
        }
    }

    fn current(&self) -> Option<Slot> {
        self.inner
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A pooled connection of its own, for commands that need connection state (WATCH).
pub(crate) async fn checkout(pool: &Pool, name: &str) -> Result<Connection, LockError> {
    pool.get().await.map_err(|err| LockError::Connection {
        name: name.to_owned(),
        reason: format!("no Redis connection: {err}"),
        source: Some(Box::new(err)),
    })
}

/// A poisoned lock here only means another thread panicked while swapping a connection
/// handle; the handle itself is always in a valid state.
fn write_ignoring_poison<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// True when the error means the connection itself is unusable.
pub(crate) fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_unrecoverable_error()
}
