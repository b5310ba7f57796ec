//! One Redis, WATCH/MULTI/EXEC only (seed 000's first implementation): for servers or
//! proxies where `EVAL` is disabled. Same guarantees as the scripted backend, at the cost of
//! two round trips per operation and a pooled connection of its own for each (WATCH state
//! belongs to a connection).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Connection, Pool};

use super::replicated::Replicated;
use super::{millis, remaining_from_pttl, Attempt, AttemptKind, Backend, RawState, WAITER_ID_LEN};
use crate::connection::shared::checkout;
use crate::deadline::within;
use crate::fence::{micros_of_time, next_token};
use crate::key::LockKeys;
use crate::token::{is_ours, LISTENED_MARK, RESERVED_MARK};
use crate::LockError;

pub(crate) mod multi;

/// How often an operation re-runs after EXEC was aborted by a concurrent write. Every abort
/// means the key changed, and the next look usually settles the outcome (busy, not ours).
const MAX_OPTIMISTIC_RETRIES: usize = 16;

pub(crate) struct Transactional {
    pool: Pool,
    /// Bounds every operation: a pooled connection has no response timeout of its own.
    command_timeout: Duration,
    /// The server's URL without credentials, named when it cannot be reached.
    address: Option<String>,
    /// The replica acknowledgement check, when it is on: `WAIT` after a grant or an
    /// extension, on the operation's own pooled connection (which nobody else's commands
    /// queue behind).
    replicated: Option<Arc<Replicated>>,
    /// The waiters' channel prefix, `<prefix>waiters:`: a release that hands the lock to
    /// the head of its queue tells it there (see `scripts/queue.lua`).
    waiters: Arc<str>,
}

impl Transactional {
    pub fn new(
        pool: Pool,
        command_timeout: Duration,
        address: Option<String>,
        waiters: &str,
    ) -> Transactional {
        Transactional {
            pool,
            command_timeout,
            address,
            replicated: None,
            waiters: Arc::from(waiters),
        }
    }

    /// Grants only what replicas acknowledged (see [`Replicated`]).
    pub fn with_replica_sync(mut self, replicated: Option<Replicated>) -> Transactional {
        self.replicated = replicated.map(Arc::new);
        self
    }
}

impl Backend for Transactional {
    async fn acquire(
        &self,
        keys: &LockKeys,
        value: &str,
        ttl: Duration,
        fencing: bool,
        kind: AttemptKind<'_>,
    ) -> Result<Attempt, LockError> {
        let pool = self.pool.clone();
        let (task_keys, task_value) = (keys.clone(), value.to_owned());
        let address = self.address.clone();
        let mark = matches!(kind, AttemptKind::Listening);
        let replicated = self.replicated.clone();
        let exchange = async move {
            acquire_once(
                (&pool, address.as_deref(), replicated.as_deref()),
                &task_keys,
                &task_value,
                ttl,
                fencing,
                mark,
            )
            .await
        };
        let took =
            |result: &Result<Attempt, LockError>| matches!(result, Ok(Attempt::Acquired { .. }));
        self.in_own_task(std::slice::from_ref(keys), value, took, exchange)
            .await
    }

    async fn release(&self, keys: &LockKeys, value: &str) -> Result<bool, LockError> {
        within(self.command_timeout, &keys.name, async {
            let mut conn = checkout(&self.pool, &keys.name, self.address.as_deref()).await?;
            release_now(&mut conn, keys, value, &self.waiters).await
        })
        .await
    }

    async fn extend(&self, keys: &LockKeys, value: &str, ttl: Duration) -> Result<bool, LockError> {
        within(self.command_timeout, &keys.name, async {
            let mut conn = checkout(&self.pool, &keys.name, self.address.as_deref()).await?;
            let extended = compare_and(&mut conn, keys, value, |pipe| {
                pipe.pexpire(&keys.lock, millis(ttl) as i64).ignore();
            })
            .await?;
            if let (true, Some(replicated)) = (extended, &self.replicated) {
                // Not counted unless replicas have it: the lease's validity stays as it was.
                replicated
                    .confirm(&mut conn, &keys.name, &keys.lock)
                    .await?;
            }
            Ok(extended)
        })
        .await
    }

    async fn inspect(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        within(self.command_timeout, &keys.name, self.inspect_now(keys)).await
    }
}

impl Transactional {
    /// Runs an acquisition's WATCH ... EXEC exchange in a task of its own, within the
    /// command timeout, so that a caller who gives up half-way cannot cut it between its
    /// round trips. If the caller is gone when it finishes and `took` says it took the
    /// locks of `keys` (holding `value`), `Undo` gives them back.
    async fn in_own_task<T: Send + 'static>(
        &self,
        keys: &[LockKeys],
        value: &str,
        took: fn(&Result<T, LockError>) -> bool,
        exchange: impl Future<Output = Result<T, LockError>> + Send + 'static,
    ) -> Result<T, LockError> {
        let name = keys.first().map_or("", |key| key.name.as_str());
        within(self.command_timeout, name, async {
            let (reply, outcome) = tokio::sync::oneshot::channel();
            let mut undo = Undo {
                pool: self.pool.clone(),
                keys: keys.to_vec(),
                value: value.to_owned(),
                waiters: Arc::clone(&self.waiters),
                armed: false,
            };
            tokio::spawn(async move {
                let result = exchange.await;
                undo.armed = took(&result);
                // A caller gone: the result is dropped in the channel, and `undo` with it.
                let _ = reply.send((result, undo));
            });
            let (result, undo) = outcome
                .await
                .map_err(|_| LockError::connection(name, "the acquire task was cancelled"))?;
            undo.disarm();
            result
        })
        .await
    }

    async fn inspect_now(&self, keys: &LockKeys) -> Result<RawState, LockError> {
        let mut conn = checkout(&self.pool, &keys.name, self.address.as_deref()).await?;
        let (value, pttl, fence): (Option<Vec<u8>>, i64, Option<u64>) = redis::pipe()
            .get(&keys.lock)
            .pttl(&keys.lock)
            .get(keys.fence())
            .query_async(&mut conn)
            .await
            .map_err(|err| LockError::from_redis(&keys.name, &keys.lock, err))?;
        Ok(RawState {
            value: value.map(|v| String::from_utf8_lossy(&v).into_owned()),
            remaining: remaining_from_pttl(pttl),
            fencing_counter: fence,
            on_replicas: None,
        })
    }
}

async fn acquire_once(
    (pool, address, replicated): (&Pool, Option<&str>, Option<&Replicated>),
    keys: &LockKeys,
    value: &str,
    ttl: Duration,
    fencing: bool,
    mark: bool,
) -> Result<Attempt, LockError> {
    let redis_err = |err| LockError::from_redis(&keys.name, &keys.lock, err);
    let mut conn = checkout(pool, &keys.name, address).await?;
    let fence = fencing.then(|| keys.fence());
    'look: for _ in 0..MAX_OPTIMISTIC_RETRIES {
        // WATCH and the look at the key travel together; GET raises WRONGTYPE on a foreign
        // value, so such a key is an error, never "free". A fencing acquisition also
        // watches the counter and reads it with the server's clock: its token is drawn
        // here, by the rule of `crate::fence`, and written by the transaction.
        let mut look = redis::pipe();
        look.cmd("WATCH").arg(&keys.lock);
        if let Some(fence) = &fence {
            look.arg(fence);
        }
        look.ignore().get(&keys.lock).pttl(&keys.lock);
        if let Some(fence) = &fence {
            look.get(fence).cmd("TIME");
        }
        let looked: Vec<redis::Value> = look.query_async(&mut conn).await.map_err(redis_err)?;
        let (current, pttl, token) = read_look(looked, fencing).map_err(redis_err)?;
        if let Some(holder) = current {
            if mark && holder.first() != Some(&LISTENED_MARK) {
                // A waiter listening on the release channel: mark the holder's value (same
                // TTL, only if it is still that value), so that its release is announced
                // even by a holder on Lua scripts, whose unmarked release is a silent
                // delete. EXEC answers nil if the key changed meanwhile: look again.
                if !mark_watched(&mut conn, &keys.lock, &holder)
                    .await
                    .map_err(redis_err)?
                {
                    continue 'look;
                }
                return Ok(Attempt::Busy {
                    remaining: remaining_from_pttl(pttl),
                    holder_value: Some(String::from_utf8_lossy(&holder).into_owned()),
                    place: None,
                });
            }
            redis::cmd("UNWATCH")
                .query_async::<()>(&mut *conn)
                .await
                .map_err(redis_err)?;
            return Ok(Attempt::Busy {
                remaining: remaining_from_pttl(pttl),
                holder_value: Some(String::from_utf8_lossy(&holder).into_owned()),
                place: None,
            });
        }
        let mut tx = redis::pipe();
        tx.atomic()
            .cmd("SET")
            .arg(&keys.lock)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        match (&fence, token) {
            (Some(fence), Some(token)) => tx.cmd("SET").arg(fence).arg(token),
            _ => tx.cmd("PING"),
        };
        // EXEC answers nil when a watched key changed in between: someone else moved first.
        let executed: Option<(Option<String>, redis::Value)> =
            tx.query_async(&mut conn).await.map_err(redis_err)?;
        match executed {
            Some((Some(_), _)) => {
                let fencing_token = token;
                if let Some(replicated) = replicated
                    && let Err(err) = replicated.confirm(&mut conn, &keys.name, &keys.lock).await
                {
                    // Too few replicas have it: deleted again on this connection, after
                    // the grant (if that fails, the TTL frees it), and a failed attempt.
                    let undone = compare_and(&mut conn, keys, value, |pipe| {
                        pipe.del(&keys.lock).ignore();
                    })
                    .await;
                    if let Err(undo) = undone {
                        tracing::debug!(key = %keys.lock, %undo, "undoing a grant no replica acknowledged failed; the TTL will free the lock");
                    }
                    return Err(err);
                }
                return Ok(Attempt::Acquired {
                    fencing_token,
                    listened: false,
                });
            }
            Some((None, _)) | None => continue,
        }
    }
    Ok(Attempt::busy_unknown())
}

/// Marks `holder`, the value found on the watched `lock`, as listened for (same TTL), in a
/// transaction: false when a watched key changed since the look (nothing is written then).
async fn mark_watched(
    conn: &mut Connection,
    lock: &str,
    holder: &[u8],
) -> redis::RedisResult<bool> {
    let mut marked = Vec::with_capacity(holder.len() + 1);
    marked.push(LISTENED_MARK);
    marked.extend_from_slice(holder);
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("SET")
        .arg(lock)
        .arg(marked)
        .arg("XX")
        .arg("KEEPTTL")
        .ignore();
    let executed: Option<()> = tx.query_async(conn).await?;
    Ok(executed.is_some())
}

/// The look before an acquisition's transaction: the lock's value and PTTL, and with
/// `fencing` the token the transaction will write (the counter and the server's `TIME`).
fn read_look(
    looked: Vec<redis::Value>,
    fencing: bool,
) -> redis::RedisResult<(Option<Vec<u8>>, i64, Option<u64>)> {
    let mut replies = looked.into_iter();
    let mut next = || {
        replies.next().ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "the look before the transaction came back short",
            ))
        })
    };
    let current: Option<Vec<u8>> = redis::from_redis_value(next()?)?;
    let pttl: i64 = redis::from_redis_value(next()?)?;
    if !fencing {
        return Ok((current, pttl, None));
    }
    // A counter that is not a number (written by hand) counts as none: the clock restarts it.
    let previous: Option<String> = redis::from_redis_value(next()?)?;
    let previous = previous.and_then(|p| p.parse::<u64>().ok()).unwrap_or(0);
    let (seconds, micros): (u64, u64) = redis::from_redis_value(next()?)?;
    Ok((
        current,
        pttl,
        Some(next_token(previous, micros_of_time(seconds, micros))),
    ))
}

/// Gives the lock up if it still holds `value`; false when it does not (nothing is written
/// then). As `release.lua` does: an unmarked value (nobody listens) is deleted; a marked one
/// is handed to the head of the lock's Redis-side queue (Lockers on Lua scripts stand there
/// and are told their turn on their own channel, never on the release channel), or deleted
/// when nobody waits there. Every release is announced on the release channel, where this
/// protocol's own waiters listen.
///
/// A deleted marked value left a queued waiter asleep until its safety net or the holder's
/// TTL while the lock lay free after a holder on this protocol (found by lock-torture's
/// liveness rule).
async fn release_now(
    conn: &mut Connection,
    keys: &LockKeys,
    value: &str,
    waiters: &str,
) -> Result<bool, LockError> {
    let redis_err = |err| LockError::from_redis(&keys.name, &keys.lock, err);
    let queue = keys.queue();
    for _ in 0..MAX_OPTIMISTIC_RETRIES {
        let Some(stored) = watch_ours(conn, keys, value).await? else {
            return Ok(false);
        };
        let mut tx = redis::pipe();
        tx.atomic();
        if stored.first() == Some(&LISTENED_MARK) {
            // The queue is watched too: a waiter that joins or leaves it meanwhile aborts
            // the EXEC, and the next round looks again.
            let (line,): (Vec<Vec<u8>>,) = redis::pipe()
                .cmd("WATCH")
                .arg(&queue)
                .ignore()
                .zrange(&queue, 0, LOOK_AHEAD)
                .query_async(&mut *conn)
                .await
                .map_err(redis_err)?;
            let alive = listening(conn, waiters, &line).await;
            hand_over(&mut tx, &keys.lock, &queue, waiters, &line, &alive);
        } else {
            tx.del(&keys.lock).ignore();
        }
        tx.publish(keys.channel(), "released").ignore();
        let executed: Option<()> = tx.query_async(&mut *conn).await.map_err(redis_err)?;
        if executed.is_some() {
            return Ok(true);
        }
    }
    Err(kept_changing(keys))
}

/// As `SKIP_DEAD` in `queue.lua`: the most waiters found dead that one hand-over drops from
/// the line (the rest go at the next), so that a release's work stays bounded.
const SKIP_DEAD: usize = 8;

/// The last index of the queue a hand-over reads: the dead it may drop, the head after
/// them and the one after the head.
const LOOK_AHEAD: isize = SKIP_DEAD as isize + 1;

/// Which of `line`'s members still listen on their Locker's channel (`PUBSUB NUMSUB`), in
/// order. A member nobody listens for is a waiter whose Locker is gone (a process that died
/// or was killed while queued: Redis dropped its subscription with its connection). Asked
/// before the `EXEC`, because inside it a `PUBLISH`'s count of listeners can decide nothing
/// (`notify` in `queue.lua` decides on it). Should the question fail, every member counts as
/// alive: the hand-over is then what it was before the check.
async fn listening(conn: &mut Connection, waiters: &str, line: &[Vec<u8>]) -> Vec<bool> {
    if line.is_empty() {
        return Vec::new();
    }
    let channels: Vec<Vec<u8>> = line
        .iter()
        .map(|member| channel_of(waiters, member))
        .collect();
    let counts: Result<HashMap<Vec<u8>, i64>, _> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channels)
        .query_async(&mut *conn)
        .await;
    match counts {
        Ok(counts) => channels
            .iter()
            .map(|channel| counts.get(channel).is_none_or(|&count| count > 0))
            .collect(),
        Err(err) => {
            tracing::debug!(%err, "PUBSUB NUMSUB failed; every waiter in line counts as listening");
            vec![true; line.len()]
        }
    }
}

/// Queues in `tx` what `hand_over` in `queue.lua` does to the free lock `lock`, given the
/// first members of its queue (`line`, up to [`LOOK_AHEAD`]) and which of them still
/// listen (`alive`): the waiters before the first that listens died in line and leave it
/// (at most [`SKIP_DEAD`]; after that many the next is taken as it is); the head leaves the
/// line, the lock is reserved for it (`?<member>`, marked when someone else waits) for the
/// claim window, and it is told its turn (`g`), the next one that listens to stand by
/// (`s`). Nobody alive in line: the dead leave it and the lock is deleted.
///
/// Without the check, the lock lay reserved for a dead waiter for a claim window, with
/// another dead one told to stand by, while the live waiters behind them slept until their
/// own timers (lock-torture's single-server `kill-waiter` liveness flags).
fn hand_over(
    tx: &mut redis::Pipeline,
    lock: &str,
    queue: &str,
    waiters: &str,
    line: &[Vec<u8>],
    alive: &[bool],
) {
    let window = millis(super::CLAIM_WINDOW);
    let listens = |at: usize| alive.get(at).copied().unwrap_or(true);
    let head = (0..line.len()).find(|&at| listens(at) || at == SKIP_DEAD);
    for dead in &line[..head.unwrap_or(line.len())] {
        tx.zrem(queue, dead).ignore();
    }
    let Some(at) = head else {
        tx.del(lock).ignore();
        return;
    };
    let head = &line[at];
    // Marked when someone else waits: the head's claim passes the mark on.
    let mut reserved = Vec::with_capacity(head.len() + 2);
    if line.len() > at + 1 {
        reserved.push(LISTENED_MARK);
    }
    reserved.push(RESERVED_MARK);
    reserved.extend_from_slice(head);
    tx.zrem(queue, head)
        .ignore()
        .cmd("SET")
        .arg(lock)
        .arg(reserved)
        .arg("PX")
        .arg(window)
        .ignore()
        .publish(channel_of(waiters, head), format!("g:{window}:{lock}"))
        .ignore();
    if let Some(next) = (at + 1..line.len()).find(|&next| listens(next)) {
        tx.publish(
            channel_of(waiters, &line[next]),
            format!("s:{window}:{lock}"),
        )
        .ignore();
    }
}

/// The channel of queue member `member`: the waiters' prefix and the member's first
/// [`WAITER_ID_LEN`] bytes (as `notify` in `queue.lua` finds it).
fn channel_of(waiters: &str, member: &[u8]) -> Vec<u8> {
    let id = &member[..member.len().min(WAITER_ID_LEN)];
    let mut channel = Vec::with_capacity(waiters.len() + id.len());
    channel.extend_from_slice(waiters.as_bytes());
    channel.extend_from_slice(id);
    channel
}

/// WATCHes the lock key and reads it: the stored value when it holds `value` (marked or
/// not), else `None`, the WATCH undone.
async fn watch_ours(
    conn: &mut Connection,
    keys: &LockKeys,
    value: &str,
) -> Result<Option<Vec<u8>>, LockError> {
    let redis_err = |err| LockError::from_redis(&keys.name, &keys.lock, err);
    let (current,): (Option<Vec<u8>>,) = redis::pipe()
        .cmd("WATCH")
        .arg(&keys.lock)
        .ignore()
        .get(&keys.lock)
        .query_async(&mut *conn)
        .await
        .map_err(redis_err)?;
    match current {
        Some(stored) if is_ours(&stored, value) => Ok(Some(stored)),
        _ => {
            redis::cmd("UNWATCH")
                .query_async::<()>(&mut *conn)
                .await
                .map_err(redis_err)?;
            Ok(None)
        }
    }
}

/// Every EXEC was aborted by a write to the key, yet every look found our value: the lock
/// may well still be ours, so "not held" would be a lie that marks the lease lost. An error
/// leaves the decision to the caller (the renewer retries; the TTL bounds it).
fn kept_changing(keys: &LockKeys) -> LockError {
    LockError::connection(
        &keys.name,
        format!("the key kept changing under WATCH ({MAX_OPTIMISTIC_RETRIES} aborted transactions in a row)"),
    )
}

/// WATCH the key, check it holds `value`, then run `then` in MULTI/EXEC. False when the lock
/// is not ours (nothing is written then).
async fn compare_and(
    conn: &mut Connection,
    keys: &LockKeys,
    value: &str,
    then: impl Fn(&mut redis::Pipeline),
) -> Result<bool, LockError> {
    let redis_err = |err| LockError::from_redis(&keys.name, &keys.lock, err);
    for _ in 0..MAX_OPTIMISTIC_RETRIES {
        if watch_ours(conn, keys, value).await?.is_none() {
            return Ok(false);
        }
        let mut tx = redis::pipe();
        tx.atomic();
        then(&mut tx);
        let executed: Option<()> = tx.query_async(&mut *conn).await.map_err(redis_err)?;
        if executed.is_some() {
            return Ok(true);
        }
    }
    Err(kept_changing(keys))
}

/// Deletes the locks taken for a caller who is no longer there to receive them.
struct Undo {
    pool: Pool,
    keys: Vec<LockKeys>,
    value: String,
    waiters: Arc<str>,
    armed: bool,
}

impl Undo {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.pool.clone();
        let keys = std::mem::take(&mut self.keys);
        let value = std::mem::take(&mut self.value);
        let waiters = Arc::clone(&self.waiters);
        runtime.spawn(async move {
            let Some(first) = keys.first() else {
                return;
            };
            if let Ok(mut conn) = checkout(&pool, &first.name, None).await {
                for keys in &keys {
                    let _ = release_now(&mut conn, keys, &value, &waiters).await;
                }
            }
        });
    }
}
