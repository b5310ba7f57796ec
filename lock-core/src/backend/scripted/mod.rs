//! One Redis, Lua scripts: one round trip per operation. The default backend.

mod calls;
mod confirm;
mod cut;
mod in_flight;
mod master;
mod waits;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::FromRedisValue;

pub(crate) use self::calls::CLAIM_WINDOW_MS;
use self::calls::{
    acquire_queued, acquire_script, release_lean_script, release_script, set_nx_get, Announce,
    Queue, EXTEND, LEAVE_QUEUE,
};
use crate::backend::lua::{Lua, ScriptMode};
use crate::backend::prim_scripts::Server;
use crate::backend::replicated::Replicated;
use crate::backend::{millis, remaining_from_pttl, Attempt, AttemptKind, Backend, RawState};
use crate::connection::shared::{is_connection_failure, Conn, Lent, SharedConnection};
use crate::key::LockKeys;
use crate::LockError;

pub(crate) struct Scripted {
    conn: SharedConnection,
    mode: ScriptMode,
    /// Where the release of a value marked as listened for is announced.
    announce: Announce,
    /// A Redlock master: its waiter queue is ordered by the waiters' tickets, the same on
    /// every master, rather than by this server's clock.
    ordered_by_ticket: bool,
    /// The waiters' channel prefix, `<prefix>waiters:` (see `Queue::waiters`).
    waiters: Arc<str>,
    /// Whether the server accepts `SET .. NX .. GET` (Redis 7.0+); cleared on the first
    /// syntax error, after which acquires use the script.
    set_get: AtomicBool,
    /// The replica acknowledgement check, when it is on: acquisitions and extensions run on
    /// its connections and wait for replicas there.
    replicated: Option<Arc<Replicated>>,
}

impl Scripted {
    /// A backend on `conn`; `waiters` is the waiters' channel prefix (`<prefix>waiters:`),
    /// where the release tells the head of a lock's queue its turn.
    pub fn new(conn: SharedConnection, mode: ScriptMode, waiters: &str) -> Scripted {
        Scripted {
            conn,
            mode,
            announce: Announce::WhenListened,
            ordered_by_ticket: false,
            waiters: Arc::from(waiters),
            set_get: AtomicBool::new(true),
            replicated: None,
        }
    }

    /// Grants only what replicas acknowledged (see [`Replicated`]).
    pub fn with_replica_sync(mut self, replicated: Option<Replicated>) -> Scripted {
        self.replicated = replicated.map(Arc::new);
        self
    }

    /// Where the writes a holder relies on go: a connection of the replica check's when it
    /// is on, the shared one otherwise.
    fn writer(&self, keys: &[&str]) -> &SharedConnection {
        match &self.replicated {
            Some(replicated) => replicated.writer(&self.conn, keys),
            None => &self.conn,
        }
    }

    /// Announces the release of a marked value on the lock's release channel with SPUBLISH,
    /// in the lock's shard (a Cluster whose notifier listens there), without asking.
    #[cfg(feature = "cluster")]
    pub fn announcing_in_shards(mut self) -> Scripted {
        self.announce = Announce::InShard;
        self
    }

    /// Runs a script on the shared connection, retiring the connection if it broke.
    async fn run<T: FromRedisValue>(
        &self,
        script: &Lua,
        keys: &LockKeys,
        args: &[&[u8]],
    ) -> Result<T, LockError> {
        self.run_on(script, keys, &[&keys.lock], args).await
    }

    /// [`Scripted::run`] with more keys than the lock's own (all under its hash tag).
    async fn run_on<T: FromRedisValue>(
        &self,
        script: &Lua,
        keys: &LockKeys,
        script_keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        script
            .run(self.mode, &mut conn, script_keys, args)
            .await
            .map_err(|err| {
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                LockError::from_redis(&keys.name, &keys.lock, err)
            })
    }
}

/// What the semaphores, read-write locks and multi-locks (`crate::prims`) run their own
/// scripts on.
impl Scripted {
    /// Whether a try started now ends within one command timeout with no timer of its own:
    /// its connection is open (no set-up before the command), its one `SET` or script is
    /// bounded by the response timeout, and the `PTTL` that may follow a busy `SET` by the
    /// rest of that timeout. (On Redis before 7.0 the first `SET .. GET` is refused at once
    /// and the script follows: one round trip more, once per locker.) Never with the
    /// replica check on.
    pub(crate) fn try_is_bounded(&self) -> bool {
        // A grant checked with replicas takes more commands, on two connections: the
        // engine bounds such a try with a timer of its own.
        self.conn.is_open() && self.replicated.is_none()
    }

    pub(crate) fn connection(&self) -> &SharedConnection {
        &self.conn
    }

    /// A release script's reply: given up (1) or not ours. The connection is kept for this
    /// thread's next operation, or retired if it broke.
    fn released(
        &self,
        reply: redis::RedisResult<i64>,
        lent: Lent,
        keys: &LockKeys,
    ) -> Result<bool, LockError> {
        match reply {
            Ok(n) => {
                self.conn.give_back(lent);
                Ok(n == 1)
            }
            Err(err) => {
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                Err(LockError::from_redis(&keys.name, &keys.lock, err))
            }
        }
    }

    /// The server the primitives run their scripts on: this backend's shared connection,
    /// script mode and replica acknowledgement check.
    pub(crate) fn server(&self) -> Server {
        Server {
            conn: self.conn.clone(),
            mode: self.mode,
            replicated: self.replicated.clone(),
            announce: self.announce.flag(),
            waiters: Arc::clone(&self.waiters),
        }
    }

    /// Compare-and-deletes `value` on `conn`, the connection an abandoned attempt sent its
    /// commands on (a multi-lock's give-back): a multiplexed connection keeps request
    /// order, so the delete reaches Redis after the attempt, even when the shared
    /// connection was retired meanwhile (as [`Backend::acquire`]'s own undo does). The
    /// connection is not retired on failure: it may already have been replaced.
    pub(crate) async fn release_on(
        &self,
        conn: &Conn,
        keys: &LockKeys,
        value: &str,
    ) -> Result<bool, LockError> {
        let mut conn = conn.clone();
        release_script(
            self.mode,
            self.announce,
            &self.waiters,
            &mut conn,
            keys,
            value,
        )
        .await
        .map(|n| n == 1)
        .map_err(|err| LockError::from_redis(&keys.name, &keys.lock, err))
    }
}

impl Backend for Scripted {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        kind: AttemptKind<'_>,
    ) -> Result<Attempt, LockError> {
        // Read only for the attempts that may ask for the holder's PTTL after a busy answer.
        let started = matches!(kind, AttemptKind::Try | AttemptKind::Listening).then(Instant::now);
        // On the shared connection even with the replica check on: most answers (busy, a
        // place in line) wait for no replica, and must not queue behind another task's
        // `WAIT` on the check's connections. A grant is confirmed from there afterwards.
        let shared = &self.conn;
        // A reply that never arrives (the caller dropped the future, or the command timed
        // out) may hide a SET that took the lock: the armed flight undoes it with a
        // compare-and-delete on the same multiplexed connection, which keeps request order,
        // so the delete reaches Redis after the SET it undoes.
        let mut lent = shared.get(&keys.name).await?;
        let mut flight = self.flight(&mut lent, keys, value);
        let conn = &mut flight.lent.conn;
        let waiter = match kind {
            AttemptKind::Queued(waiter) => Some(waiter),
            AttemptKind::Try | AttemptKind::Listening | AttemptKind::BeforeQueueing => None,
        };
        let mut use_set_get = !fencing && waiter.is_none() && self.set_get.load(Ordering::Relaxed);
        // Only the uncontended SET is awaited inline; the scripts are boxed, so that the
        // future of every acquisition stays small.
        let mut reply = if let Some(waiter) = waiter {
            Box::pin(acquire_queued(
                self.mode,
                conn,
                keys,
                value,
                ttl,
                fencing,
                waiter,
                &Queue {
                    waiters: &self.waiters,
                    ordered_by_ticket: self.ordered_by_ticket,
                    claim_first: self.announce == Announce::InShard,
                },
            ))
            .await
        } else if use_set_get {
            set_nx_get(conn, keys, value, ttl).await
        } else {
            Box::pin(acquire_script(self.mode, conn, keys, value, ttl, fencing)).await
        };
        if use_set_get && reply.as_ref().is_err_and(is_syntax_error) {
            // Redis before 7.0 refuses NX together with GET: use the script from now on.
            self.set_get.store(false, Ordering::Relaxed);
            use_set_get = false;
            reply = Box::pin(acquire_script(self.mode, conn, keys, value, ttl, fencing)).await;
        }
        let attempt = match reply {
            Ok(attempt) => attempt,
            Err(err) => {
                // A server error means nothing was written; anything else (timeout, broken
                // connection) may have taken the lock, so the undo stays armed.
                if matches!(err.kind(), redis::ErrorKind::Server(_)) {
                    flight.armed = false;
                }
                if is_connection_failure(&err) {
                    shared.retire(flight.lent);
                }
                return Err(LockError::from_redis(&keys.name, &keys.lock, err));
            }
        };
        if matches!(attempt, Attempt::Acquired { .. })
            && let Some(replicated) = &self.replicated
        {
            // Granted only once replicas have it; otherwise undone (the armed flight, on
            // this connection, after the write) and a failed attempt.
            Box::pin(self.confirm_grant(replicated, &mut flight.lent.conn, keys, value, ttl))
                .await?;
        }
        flight.armed = false;
        drop(flight);
        let attempt = match attempt {
            // SET ... GET does not say how long the holder has left; ask, on this
            // contended path only, so that waiters and `Busy` errors can use it (a request
            // about to queue learns it from the queued attempt instead).
            Attempt::Busy {
                remaining: None,
                holder_value,
                place,
            } if use_set_get && matches!(kind, AttemptKind::Try | AttemptKind::Listening) => {
                // Within the attempt's one command timeout: a try ends by then (the engine
                // counts on it), and the lock is busy whatever this says. Without an answer
                // in time, the holder's TTL is simply not known.
                let mut cmd = redis::cmd("PTTL");
                let pttl = cmd.arg(&keys.lock).query_async::<i64>(&mut lent.conn);
                let until = started.unwrap_or_else(Instant::now) + shared.timeout();
                let remaining = match tokio::time::timeout_at(until.into(), Box::pin(pttl)).await {
                    Ok(Ok(pttl)) => remaining_from_pttl(pttl),
                    Ok(Err(err)) => {
                        if is_connection_failure(&err) {
                            shared.retire(&lent);
                        }
                        None
                    }
                    Err(_) => None,
                };
                Attempt::Busy {
                    remaining,
                    holder_value,
                    place,
                }
            }
            attempt => attempt,
        };
        shared.give_back(lent);
        Ok(attempt)
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        // The lent connection itself: no second clone of it per release.
        let mut lent = self.conn.get(&keys.name).await?;
        let released = release_script(
            self.mode,
            self.announce,
            &self.waiters,
            &mut lent.conn,
            keys,
            value,
        )
        .await;
        self.released(released, lent, keys)
    }

    async fn release_unlistened(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        let mut lent = self.conn.get(&keys.name).await?;
        let released = match release_lean_script(self.mode, &mut lent.conn, keys, value).await {
            // Marked since it was granted: a waiter stands in line, the full release hands
            // the lock over. Boxed: the futures of every release above stay small.
            Ok(2) => {
                Box::pin(release_script(
                    self.mode,
                    self.announce,
                    &self.waiters,
                    &mut lent.conn,
                    keys,
                    value,
                ))
                .await
            }
            other => other,
        };
        self.released(released, lent, keys)
    }

    async fn leave_queue(&self, keys: &LockKeys, waiter: &str) -> Result<(), LockError> {
        self.run_on::<i64>(
            &LEAVE_QUEUE,
            keys,
            &[&keys.lock, &keys.queue()],
            &[
                waiter.as_bytes(),
                CLAIM_WINDOW_MS.as_bytes(),
                self.waiters.as_bytes(),
            ],
        )
        .await
        .map(drop)
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        let ttl = millis(ttl).to_string();
        let Some(replicated) = &self.replicated else {
            return self
                .run::<i64>(&EXTEND, keys, &[value.as_bytes(), ttl.as_bytes()])
                .await
                .map(|n| n == 1);
        };
        let shared = self.writer(&[&keys.lock]);
        let lent = shared.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        let extended = EXTEND
            .run::<i64>(
                self.mode,
                &mut conn,
                &[&keys.lock],
                &[value.as_bytes(), ttl.as_bytes()],
            )
            .await
            .map_err(|err| {
                if is_connection_failure(&err) {
                    shared.retire(&lent);
                }
                LockError::from_redis(&keys.name, &keys.lock, err)
            })?
            == 1;
        if extended {
            // An extension no replica has is not counted: the lease's validity stays as it
            // was (the TTL on the master is longer, which costs nobody safety).
            replicated
                .confirm(&mut conn, &keys.name, &keys.lock)
                .await?;
        }
        Ok(extended)
    }

    async fn extend_many(
        &self,
        items: &[(&LockKeys, &str, Duration)],
    ) -> Vec<Result<bool, LockError>> {
        let Some((first, _, _)) = items.first() else {
            return Vec::new();
        };
        let locks: Vec<&str> = items
            .iter()
            .map(|(keys, _, _)| keys.lock.as_str())
            .collect();
        let shared = self.writer(&locks);
        let lent = match shared.get(&first.name).await {
            Ok(lent) => lent,
            Err(err) => return items.iter().map(|_| Err(clone_error(&err))).collect(),
        };
        let mut conn = lent.conn.clone();
        let mut pipe = redis::pipe();
        for (keys, value, ttl) in items {
            pipe.add_command(EXTEND.mode_command(
                self.mode,
                &[&keys.lock],
                &[value.as_bytes(), millis(*ttl).to_string().as_bytes()],
            ));
        }
        match pipe.query_async::<Vec<i64>>(&mut conn).await {
            Ok(replies) if replies.len() == items.len() => {
                let confirmed = match &self.replicated {
                    // One WAIT covers every extension of the batch: all went to one master
                    // on this connection (a Cluster refuses a pipeline over several slots;
                    // such a batch goes one by one below, each extension checked alone).
                    Some(replicated) if replies.contains(&1) => {
                        replicated
                            .confirm(&mut conn, &first.name, &first.lock)
                            .await
                    }
                    _ => Ok(()),
                };
                match confirmed {
                    Ok(()) => replies.into_iter().map(|n| Ok(n == 1)).collect(),
                    Err(err) => replies
                        .into_iter()
                        .zip(items)
                        .map(|(n, (keys, _, _))| {
                            if n == 1 {
                                Err(not_replicated_for(&err, &keys.name))
                            } else {
                                Ok(false)
                            }
                        })
                        .collect(),
                }
            }
            Ok(_) | Err(_) => {
                // NOSCRIPT (a restarted server) or a broken connection: one by one, which
                // reloads the script or reports each failure.
                let mut results = Vec::with_capacity(items.len());
                for (keys, value, ttl) in items {
                    results.push(self.extend(keys, value, *ttl).await);
                }
                results
            }
        }
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        let lent = self.conn.get(&keys.name).await?;
        let mut conn = lent.conn.clone();
        let (value, pttl, fence): (Option<Vec<u8>>, i64, Option<u64>) = redis::pipe()
            .get(&keys.lock)
            .pttl(&keys.lock)
            .get(keys.fence())
            .query_async(&mut conn)
            .await
            .map_err(|err| {
                if is_connection_failure(&err) {
                    self.conn.retire(&lent);
                }
                LockError::from_redis(&keys.name, &keys.lock, err)
            })?;
        let on_replicas = match (&self.replicated, &value) {
            (Some(replicated), Some(value)) => replicated.replicas_having(keys, value).await,
            _ => None,
        };
        Ok(RawState {
            value: value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            remaining: remaining_from_pttl(pttl),
            fencing_counter: fence,
            on_replicas,
        })
    }
}

/// The batch's replica check failure, for one of its leases.
fn not_replicated_for(err: &LockError, name: &str) -> LockError {
    match err {
        LockError::NotReplicated {
            acknowledged,
            required,
            timeout,
            connected,
            ..
        } => LockError::NotReplicated {
            name: name.to_owned(),
            acknowledged: *acknowledged,
            required: *required,
            timeout: *timeout,
            connected: *connected,
        },
        other => LockError::connection(name, other.to_string()),
    }
}

/// A copy of a connection error for each lease of a failed batch.
fn clone_error(err: &LockError) -> LockError {
    LockError::connection(err.name().unwrap_or(""), err.to_string())
}

fn is_syntax_error(err: &redis::RedisError) -> bool {
    err.to_string().contains("syntax error")
}
