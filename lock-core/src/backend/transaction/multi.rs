//! A multi-lock's names taken in one WATCH/MULTI transaction: every lock key watched and
//! read in one round trip, then all of them set in one `MULTI`/`EXEC`, or none.
//!
//! Taking the names one by one and giving them back at the first busy one held the first
//! names for a moment, long enough for another waiter to find one held while nobody was
//! going to keep it (lock-torture's liveness rule flagged such waits under load). Here
//! nobody ever sees part of a multi-lock: a name is set only with all the others, in one
//! transaction, and a look that finds one held writes nothing.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Connection, Pool};

use super::{release_now, Transactional, Undo, MAX_OPTIMISTIC_RETRIES};
use crate::backend::millis;
use crate::backend::remaining_from_pttl;
use crate::backend::replicated::Replicated;
use crate::connection::shared::checkout;
use crate::deadline::within;
use crate::key::LockKeys;
use crate::token::LISTENED_MARK;
use crate::LockError;

/// The first lock of a multi-lock (in the order of its keys) found held.
#[derive(Debug)]
pub(crate) struct HeldAt {
    /// Its place among the keys.
    pub index: usize,
    /// The value it held, as found (its listened-for mark, if any, included); `None` when
    /// the keys kept changing and nothing was seen for sure.
    pub holder_value: Option<String>,
    /// The holder's TTL left.
    pub remaining: Option<Duration>,
}

impl Transactional {
    /// Takes every lock of `keys` (sorted, distinct, at least one) with `value` for `ttl`,
    /// all in one transaction: `None` when all were taken, else the first one found held,
    /// whose value is then marked as listened for, so that its release is announced on
    /// the release channel whatever protocol its holder uses. Nothing is left held when
    /// this returns anything but `Ok(None)`, nor when its caller drops it half-way.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[LockKeys],
        value: &str,
        ttl: Duration,
    ) -> Result<Option<HeldAt>, LockError> {
        let Some(first) = keys.first() else {
            return Ok(None);
        };
        within(self.command_timeout, &first.name, async {
            // In a task of its own, as a single lock's acquisition: a caller who gives up
            // cannot cut the exchange between its round trips, and what it took for a
            // caller gone by then is given back (`Undo`).
            let (reply, outcome) = tokio::sync::oneshot::channel();
            let pool = self.pool.clone();
            let task_keys = keys.to_vec();
            let task_value = value.to_owned();
            let address = self.address.clone();
            let replicated = self.replicated.clone();
            let waiters = Arc::clone(&self.waiters);
            tokio::spawn(async move {
                let result = take_all(
                    (&pool, address.as_deref(), replicated.as_deref(), &waiters),
                    &task_keys,
                    &task_value,
                    ttl,
                )
                .await;
                let undo = matches!(result, Ok(None)).then(|| Undo {
                    pool,
                    keys: task_keys,
                    value: task_value,
                    waiters,
                    armed: true,
                });
                let _ = reply.send((result, undo));
            });
            let (result, undo) = outcome.await.map_err(|_| {
                LockError::connection(&first.name, "the multi-lock's acquire task was cancelled")
            })?;
            if let Some(undo) = undo {
                undo.disarm();
            }
            result
        })
        .await
    }
}

/// The body of [`Transactional::acquire_all`], on one pooled connection.
async fn take_all(
    (pool, address, replicated, waiters): (&Pool, Option<&str>, Option<&Replicated>, &str),
    keys: &[LockKeys],
    value: &str,
    ttl: Duration,
) -> Result<Option<HeldAt>, LockError> {
    let Some(first) = keys.first() else {
        return Ok(None);
    };
    let mut conn = checkout(pool, &first.name, address).await?;
    for _ in 0..MAX_OPTIMISTIC_RETRIES {
        let looked = look(&mut conn, keys).await?;
        if let Some((index, holder, pttl)) = looked
            .into_iter()
            .enumerate()
            .find_map(|(i, (holder, pttl))| holder.map(|h| (i, h, pttl)))
        {
            let key = &keys[index];
            let redis_err = |err| LockError::from_redis(&key.name, &key.lock, err);
            if holder.first() == Some(&LISTENED_MARK) {
                redis::cmd("UNWATCH")
                    .query_async::<()>(&mut *conn)
                    .await
                    .map_err(redis_err)?;
            } else {
                // Marked only if no key changed since the look (same TTL): else look again.
                let mut marked = Vec::with_capacity(holder.len() + 1);
                marked.push(LISTENED_MARK);
                marked.extend_from_slice(&holder);
                let mut tx = redis::pipe();
                tx.atomic()
                    .cmd("SET")
                    .arg(&key.lock)
                    .arg(marked)
                    .arg("XX")
                    .arg("KEEPTTL")
                    .ignore();
                let executed: Option<()> = tx.query_async(&mut *conn).await.map_err(redis_err)?;
                if executed.is_none() {
                    continue;
                }
            }
            return Ok(Some(HeldAt {
                index,
                holder_value: Some(String::from_utf8_lossy(&holder).into_owned()),
                remaining: remaining_from_pttl(pttl),
            }));
        }
        // All free: all set together, unless a watched key changed since the look.
        let mut tx = redis::pipe();
        tx.atomic();
        for key in keys {
            tx.cmd("SET")
                .arg(&key.lock)
                .arg(value)
                .arg("NX")
                .arg("PX")
                .arg(millis(ttl));
        }
        let redis_err = |err| LockError::from_redis(&first.name, &first.lock, err);
        let executed: Option<Vec<Option<String>>> =
            tx.query_async(&mut *conn).await.map_err(redis_err)?;
        let Some(set) = executed else {
            continue;
        };
        if set.len() == keys.len() && set.iter().all(Option::is_some) {
            if let Some(replicated) = replicated {
                // One `WAIT` covers every key: they went out together on this connection.
                if let Err(err) = replicated
                    .confirm(&mut conn, &first.name, &first.lock)
                    .await
                {
                    give_back(&mut conn, keys, value, waiters).await;
                    return Err(err);
                }
            }
            return Ok(None);
        }
        // A key set by someone else between the look and the EXEC without aborting it
        // (nothing known does): what was set goes back, and the next round looks again.
        give_back(&mut conn, keys, value, waiters).await;
    }
    Ok(Some(HeldAt {
        index: 0,
        holder_value: None,
        remaining: None,
    }))
}

/// WATCHes every lock key and reads each one's value and PTTL, in one round trip. A key
/// holding something other than a string (`GET` answers WRONGTYPE) is named in the error.
async fn look(
    conn: &mut Connection,
    keys: &[LockKeys],
) -> Result<Vec<(Option<Vec<u8>>, i64)>, LockError> {
    let mut look = redis::pipe();
    look.cmd("WATCH");
    for key in keys {
        look.arg(&key.lock);
    }
    look.ignore();
    for key in keys {
        look.get(&key.lock).pttl(&key.lock);
    }
    let replies: redis::RedisResult<Vec<(Option<Vec<u8>>, i64)>> = look
        .query_async::<Vec<redis::Value>>(&mut *conn)
        .await
        .and_then(|values| {
            values
                .chunks(2)
                .map(|pair| match pair {
                    [value, pttl] => Ok((
                        redis::from_redis_value(value.clone())?,
                        redis::from_redis_value(pttl.clone())?,
                    )),
                    _ => Err(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "the look before the transaction came back short",
                    ))),
                })
                .collect()
        });
    match replies {
        Ok(replies) if replies.len() == keys.len() => Ok(replies),
        Ok(_) => {
            let first = &keys[0];
            Err(LockError::from_redis(
                &first.name,
                &first.lock,
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the look before the transaction came back short",
                )),
            ))
        }
        Err(err) => {
            let culprit = culprit(conn, keys).await.unwrap_or(&keys[0]);
            Err(LockError::from_redis(&culprit.name, &culprit.lock, err))
        }
    }
}

/// The first key of `keys` that is not a string (the one a WRONGTYPE answer was about),
/// when there is one; the transaction's WATCH is undone.
async fn culprit<'k>(conn: &mut Connection, keys: &'k [LockKeys]) -> Option<&'k LockKeys> {
    let mut types = redis::pipe();
    types.cmd("UNWATCH").ignore();
    for key in keys {
        types.cmd("TYPE").arg(&key.lock);
    }
    let types: Vec<String> = types.query_async(&mut *conn).await.ok()?;
    keys.iter()
        .zip(types)
        .find(|(_, kind)| kind != "string" && kind != "none")
        .map(|(key, _)| key)
}

/// Gives back whatever of `keys` holds `value`, on `conn`, after a grant its caller cannot
/// use; the TTL frees what this fails to.
async fn give_back(conn: &mut Connection, keys: &[LockKeys], value: &str, waiters: &str) {
    for key in keys {
        if let Err(err) = release_now(conn, key, value, waiters).await {
            tracing::debug!(key = %key.lock, %err, "giving back a multi-lock's lock failed; the TTL will free it");
        }
    }
}
