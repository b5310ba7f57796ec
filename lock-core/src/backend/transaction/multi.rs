//! A multi-lock's names taken in one WATCH/MULTI transaction: every lock key watched and
//! read in one round trip, then all of them set in one `MULTI`/`EXEC`, or none.
//!
//! Nobody ever sees part of a multi-lock: a name is set only with all the others, and a
//! look that finds one held writes none of them (only the listened-for mark on the held
//! one). So a waiter for one of the free names never meets it held for a moment by an
//! attempt that is about to give it back.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Connection, Pool};

use super::{mark_watched, release_now, Transactional, MAX_OPTIMISTIC_RETRIES};
use crate::backend::remaining_from_pttl;
use crate::backend::replicated::Replicated;
use crate::backend::{foreign_key, millis};
use crate::connection::shared::checkout;
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
    /// the release channel whatever protocol its holder uses. What a transaction took for
    /// a caller that dropped this half-way, or that a replica check refused, is given back
    /// here; after an error with the transaction's answer lost (a broken connection), the
    /// caller gives the names back (the multi-lock's `GiveBack`), and their TTL bounds it.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[LockKeys],
        value: &str,
        ttl: Duration,
    ) -> Result<Option<HeldAt>, LockError> {
        let pool = self.pool.clone();
        let (task_keys, task_value) = (keys.to_vec(), value.to_owned());
        let address = self.address.clone();
        let replicated = self.replicated.clone();
        let waiters = Arc::clone(&self.waiters);
        let exchange = async move {
            take_all(
                (&pool, address.as_deref(), replicated.as_deref(), &waiters),
                &task_keys,
                &task_value,
                ttl,
            )
            .await
        };
        let took = |result: &Result<Option<HeldAt>, LockError>| matches!(result, Ok(None));
        self.in_own_task(keys, value, took, exchange).await
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
                // Marked only if no key changed since the look: else look again.
                if !mark_watched(&mut conn, &key.lock, &holder)
                    .await
                    .map_err(redis_err)?
                {
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
    let replies = look
        .query_async::<Vec<redis::Value>>(&mut *conn)
        .await
        .and_then(|values| {
            if values.len() != 2 * keys.len() {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the look before the transaction came back short",
                )));
            }
            values
                .chunks_exact(2)
                .map(|pair| {
                    Ok((
                        redis::from_redis_value(pair[0].clone())?,
                        redis::from_redis_value(pair[1].clone())?,
                    ))
                })
                .collect()
        });
    match replies {
        Ok(replies) => Ok(replies),
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
    foreign_key(keys, &types)
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
