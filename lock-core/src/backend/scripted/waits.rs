//! Deadlock detection on one Redis (or behind Sentinel, or within one Cluster slot): the
//! waits-for check and record of `scripts/waits_for.lua`, its clean-up, and the listing of
//! `scripts/waits_list.lua`. A library of its own, beside the lock's scripts: nothing
//! here touches a lock key or its queue (see `backend/waits.rs`).

use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::calls::Announce;
use super::Scripted;
use crate::backend::lua::{self, Lua};
use crate::backend::millis;
use crate::backend::waits::{Checked, WaitRecord, WaitsOn};
use crate::connection::shared::is_connection_failure;
use crate::key::LockKeys;
use crate::limits::MAX_WAIT_CHAIN;
use crate::slot::cluster_slot;
use crate::LockError;

static WAITS_FOR: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "waits_for",
        include_str!("../../scripts/waits_for.lua"),
    )
});
static WAITS_LIST: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        LIBRARY_NAME,
        library,
        "waits_list",
        include_str!("../../scripts/waits_list.lua"),
    )
});
static LIBRARY: LazyLock<String> =
    LazyLock::new(|| lua::library(LIBRARY_NAME, &[&WAITS_FOR, &WAITS_LIST]));
/// Versioned like the lock's library (see `calls.rs`).
const LIBRARY_NAME: &str = "lockcore_waits_v1";

fn library() -> &'static str {
    LIBRARY.as_str()
}

/// The waits-for hash of a lock: `<lock key>:wf`, in the lock's slot.
fn hash_of(lock: &str) -> String {
    format!("{lock}:wf")
}

impl Scripted {
    /// A Cluster: a script may only declare keys of one slot.
    fn on_cluster(&self) -> bool {
        self.announce == Announce::InShard
    }

    /// See [`crate::backend::AnyBackend::check_wait`]. The script walks the locks it was
    /// given; when the walk reaches locks it could not read (not declared), it records
    /// nothing and names them, and is sent again with them declared: one round trip per
    /// link of the chain, until the walk is whole (or finds a cycle), or would read more
    /// than [`MAX_WAIT_CHAIN`] - 1 locks of others ([`Checked::TooLong`]). Each send walks
    /// from the start, so what it records it recorded after a whole walk in one script.
    ///
    /// On a Cluster, only the locks in the slot of the lock waited for take part: held
    /// locks elsewhere are not recorded, and a walk that reaches another slot stops there
    /// (recorded as incomplete: no later walk can read that slot either).
    pub(crate) async fn check_wait(&self, wait: &WaitRecord<'_>) -> Result<Checked, LockError> {
        let slot = self
            .on_cluster()
            .then(|| cluster_slot(wait.wanted.lock.as_bytes()));
        let in_slot = |key: &str| slot.is_none_or(|slot| cluster_slot(key.as_bytes()) == slot);
        let held: Vec<&(LockKeys, String)> = wait
            .held
            .iter()
            .filter(|(keys, _)| in_slot(&keys.lock) && keys.lock != wait.wanted.lock)
            .collect();
        if held.is_empty() {
            return Ok(Checked::NothingHeld);
        }
        // The lock waited for, the held ones, then those the walk asked for: `others`
        // counts the first and the last (locks of others the walk reads).
        let mut locks: Vec<String> = Vec::with_capacity(held.len() + 1);
        locks.push(wait.wanted.lock.clone());
        locks.extend(held.iter().map(|(keys, _)| keys.lock.clone()));
        let mut others = 1;
        let life = millis(wait.life).to_string();
        let count = held.len().to_string();
        let seen_before = wait.seen_before.unwrap_or_default();
        let mut force = false;
        loop {
            let hashes: Vec<String> = locks.iter().map(|lock| hash_of(lock)).collect();
            let keys: Vec<&str> = locks
                .iter()
                .zip(&hashes)
                .flat_map(|(lock, hash)| [lock.as_str(), hash.as_str()])
                .collect();
            let mut args: Vec<&[u8]> = Vec::with_capacity(held.len() + 5);
            args.push(wait.id.as_bytes());
            args.push(life.as_bytes());
            args.push(count.as_bytes());
            args.extend(held.iter().map(|(_, value)| value.as_bytes()));
            args.push(seen_before.as_bytes());
            args.push(if force { b"1" } else { b"0" });
            let reply: Vec<Value> = self.run_on(&WAITS_FOR, wait.wanted, &keys, &args).await?;
            let (code, rest) = match reply.split_first() {
                Some((Value::Int(code), rest)) => (*code, rest),
                _ => return Err(unexpected(wait.wanted)),
            };
            let texts: Vec<String> = rest.iter().filter_map(text).collect();
            match code {
                0 => return Ok(Checked::Free),
                1 | 4 => {
                    return Ok(Checked::Recorded {
                        holder: texts.into_iter().next().unwrap_or_default(),
                        complete: code == 1,
                    })
                }
                2 => {
                    let before = locks.len();
                    for key in texts {
                        if !in_slot(&key) || locks.contains(&key) {
                            continue;
                        }
                        if others + 1 >= MAX_WAIT_CHAIN {
                            return Ok(Checked::TooLong {
                                limit: MAX_WAIT_CHAIN,
                            });
                        }
                        locks.push(key);
                        others += 1;
                    }
                    // Only locks of other slots are left unread: record without them.
                    force = locks.len() == before;
                }
                3 => {
                    let mut texts = texts.into_iter();
                    let mut cycle = Vec::new();
                    while let (Some(key), Some(value)) = (texts.next(), texts.next()) {
                        cycle.push((key, value));
                    }
                    return Ok(Checked::Cycle(cycle));
                }
                5 => return Ok(Checked::Unchanged),
                6 => return Ok(Checked::NothingHeld),
                _ => return Err(unexpected(wait.wanted)),
            }
        }
    }

    /// Deletes the records of the wait `id`: one round trip (a pipeline of `HDEL`s, in the
    /// slot of the lock waited for on a Cluster, where the records are).
    pub(crate) async fn end_wait(
        &self,
        id: &str,
        wanted: &LockKeys,
        held: &[(LockKeys, String)],
    ) -> Result<(), LockError> {
        let slot = self
            .on_cluster()
            .then(|| cluster_slot(wanted.lock.as_bytes()));
        let by = format!("by:{id}");
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL")
            .arg(hash_of(&wanted.lock))
            .arg(&by)
            .ignore();
        for (keys, _) in held {
            if slot.is_none_or(|slot| cluster_slot(keys.lock.as_bytes()) == slot) {
                pipe.cmd("HDEL").arg(hash_of(&keys.lock)).arg(id).ignore();
            }
        }
        let lent = self.conn.get(&wanted.name).await?;
        let mut conn = lent.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(|err| {
            if is_connection_failure(&err) {
                self.conn.retire(&lent);
            }
            LockError::from_redis(&wanted.name, &wanted.lock, err)
        })
    }

    /// See [`crate::backend::AnyBackend::waits_on`].
    pub(crate) async fn waits_on(&self, keys: &LockKeys) -> Result<WaitsOn, LockError> {
        let hash = hash_of(&keys.lock);
        let reply: Vec<Value> = self
            .run_on(&WAITS_LIST, keys, &[&keys.lock, &hash], &[])
            .await?;
        let [holder, by, waits] = reply.as_slice() else {
            return Err(unexpected(keys));
        };
        let holder = text(holder).filter(|holder| !holder.is_empty());
        let mut waits_on = WaitsOn {
            holder,
            ..WaitsOn::default()
        };
        for entry in items(by) {
            let Some((left, held)) = entry.split_first() else {
                continue;
            };
            let held: Vec<String> = held.iter().filter_map(text).collect();
            let pairs = held
                .chunks_exact(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect();
            waits_on.waited_by.push((millis_of(left), pairs));
        }
        for entry in items(waits) {
            if let [key, behind, left] = entry
                && let (Some(key), Some(behind)) = (text(key), text(behind))
            {
                waits_on.waits_for.push((key, behind, millis_of(left)));
            }
        }
        Ok(waits_on)
    }
}

/// The arrays inside an array reply.
fn items(value: &Value) -> Vec<&[Value]> {
    match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| match item {
                Value::Array(inner) => Some(inner.as_slice()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn millis_of(value: &Value) -> Duration {
    match value {
        Value::Int(ms) => Duration::from_millis(u64::try_from(*ms).unwrap_or(0)),
        _ => Duration::ZERO,
    }
}

fn unexpected(keys: &LockKeys) -> LockError {
    LockError::connection(
        &keys.name,
        "the deadlock check's script answered in an unexpected shape; is another program writing `:wf` keys?",
    )
}
