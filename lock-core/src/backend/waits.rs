//! Deadlock detection's store: the waits-for records of waiters that hold other leases,
//! beside the locks and their queues (nothing here touches a lock key or a queue).
//!
//! A waiter that holds leases records, under each lock it holds (on Redis, in the hash
//! `<lock key>:wf`), "the holder of this lock, with this value, waits for lock W, held by
//! value t, until x". One atomic check walks those records from W: lock -> its holder's
//! records -> the locks they wait for, each record counted only while the lock it is under
//! still holds the recorded value, W still holds `t` and `x` has not passed. Reaching a
//! lock held by the requester closes a cycle: the requester is told instead of recording
//! (it is the victim). A walk that would read more than [`MAX_WAIT_CHAIN`] - 1 locks of
//! others (a chain of more than [`MAX_WAIT_CHAIN`] with the requester's own) ends the
//! request with [`Checked::TooLong`] instead: no
//! chain longer than that is ever recorded, so no cycle forms that no walk can see. See
//! `scripts/waits_for.lua` and `engine/deadlock.rs`.
//!
//! On a single Redis (and behind Sentinel) the check is one script, sent again with more
//! keys declared as long as its walk reaches locks it could not read (one round trip per
//! link of the chain, at most [`MAX_WAIT_CHAIN`]); on a Cluster only over locks in the
//! waited-for lock's slot; in memory under the store's mutex. Redlock and WATCH/MULTI do
//! not detect.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::AnyBackend;
use crate::key::LockKeys;
use crate::limits::MAX_WAIT_CHAIN;
use crate::LockError;

/// One wait, as it is checked and recorded.
#[derive(Debug)]
pub(crate) struct WaitRecord<'a> {
    /// Unique to this wait: its field in each held lock's record hash.
    pub id: &'a str,
    /// The lock waited for.
    pub wanted: &'a LockKeys,
    /// The leases the waiter holds: their keys and values (as stored, unmarked).
    pub held: &'a [(LockKeys, String)],
    /// How long the record counts unless the wait ends first: its remaining wait.
    pub life: Duration,
    /// The holder of `wanted` this wait recorded last time, if it recorded: the check is
    /// skipped while it is still the holder.
    pub seen_before: Option<&'a str>,
}

/// What a check came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Checked {
    /// The lock waited for is free: nothing recorded (the wait's next attempt takes it).
    Free,
    /// Recorded: the holder of the lock waited for at the check, and whether the walk read
    /// every lock it reached (false on a Cluster when a chain leaves the slot).
    Recorded { holder: String, complete: bool },
    /// The walk would read more than `limit` locks ([`MAX_WAIT_CHAIN`]) without finding a
    /// cycle: nothing recorded (the request gives up rather than wait unchecked).
    TooLong { limit: usize },
    /// The holder is the one recorded before: nothing changed.
    Unchanged,
    /// The waiter holds none of the leases any more: nothing recorded.
    NothingHeld,
    /// Recording would close a cycle: (lock key, holder value) from the lock waited for,
    /// each holder waiting for the next lock, the last one held by the waiter. Nothing is
    /// recorded for this wait any more.
    Cycle(Vec<(String, String)>),
    /// This backend does not detect deadlocks.
    Unsupported,
}

impl AnyBackend {
    /// Whether this backend detects deadlocks at all (no call is made where it does not).
    pub(crate) fn detects_deadlocks(&self) -> bool {
        matches!(self, AnyBackend::Scripted(_) | AnyBackend::Memory(_))
    }

    /// Checks `wait` against the other waiters' records and records it unless it would
    /// close a cycle.
    pub(crate) async fn check_wait(&self, wait: &WaitRecord<'_>) -> Result<Checked, LockError> {
        match self {
            AnyBackend::Scripted(scripted) => Box::pin(scripted.check_wait(wait)).await,
            AnyBackend::Memory(memory) => Ok(memory.waits().check(wait, |key| memory.holder(key))),
            AnyBackend::Transaction(_) | AnyBackend::Redlock(_) => Ok(Checked::Unsupported),
        }
    }

    /// Deletes the records of the wait `id` (it ended: granted, timed out, cancelled).
    pub(crate) async fn end_wait(
        &self,
        id: &str,
        wanted: &LockKeys,
        held: &[(LockKeys, String)],
    ) -> Result<(), LockError> {
        match self {
            AnyBackend::Scripted(scripted) => Box::pin(scripted.end_wait(id, wanted, held)).await,
            AnyBackend::Memory(memory) => {
                memory.waits().forget(id, held);
                Ok(())
            }
            AnyBackend::Transaction(_) | AnyBackend::Redlock(_) => Ok(()),
        }
    }

    /// The records about the lock `keys` that count: who waits for it while holding what,
    /// and what its holder waits for.
    pub(crate) async fn waits_on(&self, keys: &LockKeys) -> Result<WaitsOn, LockError> {
        match self {
            AnyBackend::Scripted(scripted) => Box::pin(scripted.waits_on(keys)).await,
            AnyBackend::Memory(memory) => Ok(memory.waits().on(keys, |key| memory.holder(key))),
            AnyBackend::Transaction(_) | AnyBackend::Redlock(_) => Ok(WaitsOn::default()),
        }
    }
}

/// A waiter's record: how long it still counts, and the leases (lock key, value) it holds.
pub(crate) type WaiterRecord = (Duration, Vec<(String, String)>);

/// The records about one lock, for tools (`Locker::waits_on`, `lockctl waits`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WaitsOn {
    /// The lock's holder (its value), if it is held.
    pub holder: Option<String>,
    /// Waiters for the lock: how long each record still counts, and the leases (lock key,
    /// value) the waiter holds.
    pub waited_by: Vec<WaiterRecord>,
    /// What the holder waits for: (lock key, that lock's holder when recorded, how long
    /// the record still counts).
    pub waits_for: Vec<(String, String, Duration)>,
}

/// The records of the in-memory backend, by lock key: wait id -> record.
#[derive(Default)]
pub(crate) struct MemoryWaits {
    records: Mutex<HashMap<String, HashMap<String, MemoryRecord>>>,
}

#[derive(Debug, Clone)]
struct MemoryRecord {
    holder: String,
    waits_for: String,
    behind: String,
    until: Instant,
}

impl MemoryWaits {
    /// The check of `scripts/waits_for.lua`, under this map's mutex (held across the walk,
    /// so that it is atomic with every other check), reading lock holders through
    /// `holder_of` (the store's own mutex, taken after this one, never before).
    pub(crate) fn check(
        &self,
        wait: &WaitRecord<'_>,
        holder_of: impl Fn(&str) -> Option<String>,
    ) -> Checked {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let held: Vec<&(LockKeys, String)> = wait
            .held
            .iter()
            .filter(|(keys, value)| holder_of(&keys.lock).as_deref() == Some(value.as_str()))
            .collect();
        let forget = |records: &mut HashMap<String, HashMap<String, MemoryRecord>>| {
            for (keys, _) in wait.held {
                if let Some(under) = records.get_mut(&keys.lock) {
                    under.remove(wait.id);
                }
            }
        };
        if held.is_empty() {
            forget(&mut records);
            return Checked::NothingHeld;
        }
        let mine: HashSet<&str> = held.iter().map(|(_, value)| value.as_str()).collect();
        let Some(top) = holder_of(&wait.wanted.lock) else {
            forget(&mut records);
            return Checked::Free;
        };
        if wait.seen_before == Some(top.as_str()) {
            return Checked::Unchanged;
        }
        let wanted = wait.wanted.lock.clone();
        let mut value_of: HashMap<String, String> = HashMap::from([(wanted.clone(), top.clone())]);
        let mut parent: HashMap<String, String> = HashMap::new();
        let mut frontier = vec![wanted.clone()];
        let mut found = mine.contains(top.as_str()).then(|| wanted.clone());
        // Locks of others the walk may read (`value_of` counts them, the one waited for
        // first): a chain of at most MAX_WAIT_CHAIN with one of the waiter's own.
        let room = MAX_WAIT_CHAIN - 1;
        let mut too_long = false;
        let mut at = 0;
        while found.is_none() && at < frontier.len() {
            let key = frontier[at].clone();
            at += 1;
            let holder = value_of.get(&key).cloned().unwrap_or_default();
            let Some(under) = records.get(&key) else {
                continue;
            };
            for record in under.values() {
                if record.holder != holder || record.until <= now {
                    continue;
                }
                let target = &record.waits_for;
                if value_of.contains_key(target) {
                    continue;
                }
                let Some(next) = holder_of(target).filter(|next| *next == record.behind) else {
                    continue;
                };
                let own = mine.contains(next.as_str());
                if !own && value_of.len() >= room {
                    too_long = true;
                    continue;
                }
                parent.insert(target.clone(), key.clone());
                value_of.insert(target.clone(), next.clone());
                if own {
                    found = Some(target.clone());
                    break;
                }
                frontier.push(target.clone());
            }
        }
        if let Some(last) = found {
            let mut path = Vec::new();
            let mut key = Some(last);
            while let Some(at) = key {
                let value = value_of.get(&at).cloned().unwrap_or_default();
                key = parent.get(&at).cloned();
                path.push((at, value));
            }
            path.reverse();
            forget(&mut records);
            return Checked::Cycle(path);
        }
        if too_long {
            return Checked::TooLong {
                limit: MAX_WAIT_CHAIN,
            };
        }
        let until = now + wait.life;
        for (keys, value) in held {
            let under = records.entry(keys.lock.clone()).or_default();
            under.retain(|_, record| record.holder == *value && record.until > now);
            under.insert(
                wait.id.to_owned(),
                MemoryRecord {
                    holder: value.clone(),
                    waits_for: wanted.clone(),
                    behind: top.clone(),
                    until,
                },
            );
        }
        Checked::Recorded {
            holder: top,
            complete: true,
        }
    }

    pub(crate) fn forget(&self, id: &str, held: &[(LockKeys, String)]) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        for (keys, _) in held {
            if let Some(under) = records.get_mut(&keys.lock) {
                under.remove(id);
                if under.is_empty() {
                    records.remove(&keys.lock);
                }
            }
        }
    }

    pub(crate) fn on(
        &self,
        keys: &LockKeys,
        holder_of: impl Fn(&str) -> Option<String>,
    ) -> WaitsOn {
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let Some(holder) = holder_of(&keys.lock) else {
            return WaitsOn::default();
        };
        let mut by: HashMap<&str, WaiterRecord> = HashMap::new();
        let mut waits_for = Vec::new();
        for (under, ids) in records.iter() {
            for (id, record) in ids {
                if record.until <= now {
                    continue;
                }
                let left = record.until.saturating_duration_since(now);
                if record.waits_for == keys.lock && record.behind == holder {
                    let entry = by.entry(id.as_str()).or_insert((left, Vec::new()));
                    entry.1.push((under.clone(), record.holder.clone()));
                }
                if *under == keys.lock && record.holder == holder {
                    waits_for.push((record.waits_for.clone(), record.behind.clone(), left));
                }
            }
        }
        WaitsOn {
            holder: Some(holder),
            waited_by: by.into_values().collect(),
            waits_for,
        }
    }
}
