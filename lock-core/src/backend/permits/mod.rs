//! Weighted permits: the one engine behind semaphores and read-write locks.
//!
//! A name has a set of holders, each with a weight and an end (a TTL judged by the store's
//! clock: Redis's `TIME` inside the scripts, or this process's in memory), a capacity stored
//! with it (set by the first request while the name is idle; a request that asks for
//! another while anyone holds or waits gets [`Attempt::Mismatch`]; or set and pinned by
//! [`Store::set_capacity`], after which the stored number wins over the one a request asks
//! for until the keys expire), and a FIFO queue of
//! waiters, each with its own weight. A request is admitted while the holders' total weight
//! plus its own stays within the capacity, and nobody is queued ahead of it. A semaphore of
//! N permits is capacity N, weight 1; a read-write lock is capacity [`RW_CAPACITY`] (the
//! same constant in every process, so nothing of a read-write lock must be agreed on per
//! request), readers weigh 1 and a writer weighs the whole capacity, so a writer fits only
//! when nobody holds, and a queued writer holds back every reader behind it.
//!
//! When capacity frees up (a release, a permit that ran out, a waiter that gave up), it is
//! handed to the queue in order: each waiter at its head that fits leaves the queue with
//! its permit, granted for its own TTL, and is told on its Locker's channel (a targeted
//! wake-up: no herd) with the server time of the grant; the first one that does not fit
//! stops the hand-out and is told when the first permit ends, in case its holder crashed.
//! A waiter that polls (no channel) gets its permit reserved for a claim window instead.
//!
//! On Redis every operation is O(log n) in holders and waiters (`scripts/permits_lib.lua`):
//! the capacity, the held weight, a bound on the first end, the queue's size and its head's
//! weight are kept beside the holders instead of being recomputed, ended permits are swept
//! only once the first end has passed, and a name nobody waits on never touches its queue
//! key. Taking a free permit is three calls inside one script (the clock, one read, one
//! write), giving one back two (no clock); a release behind a waiting writer reads no queue
//! entry. A permit handed to a waiter of the releasing Locker is woken from the release's
//! reply, valid from when the release was sent. A waiter of another Locker is told by one
//! message per Locker however many of its waiters were handed one, and needs no claim
//! either: it counts its permit from the earliest instant of its own clock at which the
//! grant can have happened (the server time of the grant, less the server time its queued
//! attempt read, after the instant that attempt was sent; see `Anchors` in
//! `prims/permits/acquire.rs`). A message that provably reached nobody (no connection
//! listens on the channel: the Locker's process died) takes the grant back, and the permit
//! goes to the next in line in the same step (a live Locker whose pub/sub connection is
//! being re-opened at that instant loses its waiter's place too: its waiters are woken
//! when the connection is back, and queue again). A waiter whose request ended as its grant
//! came gives it back through its request's guard. A Locker that must have replicas
//! acknowledge a grant claims it instead (a claim rewrites it, and waits).

pub(crate) mod memory;
mod redis;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::prim_scripts::SentOn;
use crate::connection::notifier::Notifier;
use crate::connection::shared::Conn;
use crate::signal::Wake;
use crate::LockError;

/// The capacity of a read-write lock: a writer weighs all of it, a reader one unit.
pub(crate) const RW_CAPACITY: u64 = 1_000_000_000;

/// The keys of one permit set: the name's lock key and a suffix each, so all in the slot of
/// the name's hash tag (see [`KeyLayout`](crate::KeyLayout)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitKeys {
    /// The name as the user gave it.
    pub name: String,
    /// `<lock key>:<kind>`: the holders (a sorted set).
    pub holders: String,
    /// `<holders>:q`: the waiters in arrival order, each member its entry.
    pub queue: String,
}

impl PermitKeys {
    /// `kind` tells semaphores (`sem`) and read-write locks (`rw`) of one name apart.
    pub fn new(prefix: &str, name: String, kind: &str) -> Result<PermitKeys, LockError> {
        crate::limits::validate_name(&name)?;
        let mut holders = crate::key::lock_key(prefix, &name);
        holders.push(':');
        holders.push_str(kind);
        let mut queue = String::with_capacity(holders.len() + 2);
        queue.push_str(&holders);
        queue.push_str(":q");
        Ok(PermitKeys {
            queue,
            holders,
            name,
        })
    }

    /// What a waiter's turn messages are routed by: unique per waiting request.
    pub fn route(&self, waiter_id: &str) -> String {
        format!("{}#{waiter_id}", self.holders)
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub capacity: u64,
    pub weight: u64,
}

/// The holder's entry: `<weight> <value>`, as the scripts store it.
pub(crate) fn member(weight: u64, value: &str) -> String {
    format!("{weight} {value}")
}

/// A waiting request's member of the queue on Redis: `<weight> <life ms> <ttl ms> <id>
/// <channel length> <channel><value>`, the same on every attempt of the request (`life`
/// is its wait as it started waiting), so that it finds and leaves its place by it.
pub(crate) fn queue_entry(
    weight: u64,
    life: Duration,
    ttl: Duration,
    id: &str,
    channel: &str,
    value: &str,
) -> String {
    use std::fmt::Write as _;
    let mut entry = String::with_capacity(48 + id.len() + channel.len() + value.len());
    let _ = write!(
        entry,
        "{weight} {} {} {id} {} {channel}{value}",
        crate::backend::millis(life),
        crate::backend::millis(ttl),
        channel.len()
    );
    entry
}

/// A request leaving the queue: its id (in memory) and its queue member (on Redis).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaving<'a> {
    pub id: &'a str,
    pub entry: &'a str,
}

/// A waiting request, as it stands in the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueWaiter<'a> {
    /// Unique per request (a random token).
    pub id: &'a str,
    /// Its member of the queue on Redis (see [`queue_entry`]).
    pub entry: &'a str,
    /// The Locker's channel, where its turn is announced ('' when it polls).
    pub channel: &'a str,
    /// Its wake-up signal (the in-memory store posts to it directly).
    pub wake: &'a Arc<Wake>,
    /// How long the entry counts unless renewed: the request's remaining wait.
    pub life: Duration,
}

/// The result of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Taken,
    Busy {
        /// Until the first held permit ends, if any is held.
        first_end: Option<Duration>,
        /// Our place among the blocked waiters (0 = first), for a queued attempt.
        place: Option<u64>,
        /// The number of permits the request was judged against: the request's own, or
        /// one set with `set_capacity` (pinned), which wins over it.
        capacity: u64,
        /// The store's time when it answered (ms, Redis's `TIME`; `None` in memory): a
        /// permit granted to this waiter later, at a server time told with the grant, was
        /// granted that much after this answer.
        server_ms: Option<u64>,
    },
    /// The name is in use with another capacity (stored with it): nothing was changed.
    Mismatch {
        stored: u64,
    },
}

/// What `set_capacity` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapacitySet {
    /// Stored and pinned; `before` the capacity stored until then, if any.
    Set { before: Option<u64> },
    /// Nothing changed: a live waiter asks for `weight` permits, more than the new capacity.
    WaiterAbove { weight: u64 },
}

/// What `holders` reads: the live holders, how many requests wait, and the capacity stored
/// with the name (`None` while it is idle).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawHolders {
    pub holders: Vec<RawHolder>,
    pub waiting: u64,
    pub capacity: Option<u64>,
}

/// One holder, as listed by `holders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawHolder {
    pub weight: u64,
    pub value: String,
    pub remaining: Duration,
}

/// Parses a holder entry `<weight> <value>`.
pub(crate) fn parse_member(member: &str) -> (u64, &str) {
    match member.split_once(' ') {
        Some((weight, value)) => (weight.parse().unwrap_or(1), value),
        None => (1, member),
    }
}

/// Where permits live: one Redis or a Cluster (Lua scripts), or this process.
#[derive(Clone)]
pub(crate) enum Store {
    Server(crate::backend::prim_scripts::Server),
    Memory(Arc<memory::MemoryPermits>),
}

impl Store {
    /// Whether a permit on `keys` granted outright to a waiter of this Locker (by a release
    /// of another, told with the grant's server time) counts as it is: unless the replica
    /// acknowledgement check would ask anything of the master now. It is claimed
    /// otherwise, by an attempt that rewrites it and waits for the replicas (which then
    /// have the grant too: it came first).
    pub fn takes_outright(&self, keys: &PermitKeys) -> bool {
        match self {
            Store::Server(server) => server
                .replicated
                .as_ref()
                .is_none_or(|replicated| replicated.is_quiet(&keys.holders, Instant::now())),
            Store::Memory(_) => true,
        }
    }

    /// One attempt; on Redis, `sent` notes the connection it goes out on until it is
    /// answered, for a give-back to follow it there (see [`SentOn`]), and the waiters of
    /// `local` (this Locker's notifier) it hands a permit are woken from its reply.
    #[allow(clippy::too_many_arguments)]
    pub async fn acquire(
        &self,
        keys: &PermitKeys,
        member: &str,
        ttl: Duration,
        ask: Ask,
        waiter: Option<&QueueWaiter<'_>>,
        sent: &SentOn,
        local: Option<&Notifier>,
    ) -> Result<Attempt, LockError> {
        match self {
            Store::Server(server) => {
                redis::acquire(server, keys, member, ttl, ask, waiter, sent, local).await
            }
            Store::Memory(memory) => Ok(memory.acquire(keys, member, ttl, ask, waiter)),
        }
    }

    /// Gives `member` back and takes `leaving` out of the queue; true when the permit was
    /// still held (on Redis: still there, by no clock; the holder's own clock judges
    /// whether it had ended). On Redis, on `sent_on` when given: the connection of an
    /// attempt that may have taken it and was never answered (see [`SentOn`]); the waiters
    /// of `local` (this Locker's notifier) it hands a permit are woken from its reply.
    pub async fn release(
        &self,
        keys: &PermitKeys,
        member: &str,
        leaving: Option<Leaving<'_>>,
        sent_on: Option<&Conn>,
        local: Option<&Notifier>,
    ) -> Result<bool, LockError> {
        match self {
            Store::Server(server) => {
                redis::release(server, keys, member, leaving, sent_on, local).await
            }
            Store::Memory(memory) => Ok(memory.release(keys, member, leaving.map(|l| l.id))),
        }
    }

    /// Replaces the held `member` by `lighter` (the same value with a smaller weight, the
    /// same end) and hands the weight it frees to the waiters in order, in one step; false
    /// when the permit had ended (nothing changed). The waiters of `local` (this Locker's
    /// notifier) it hands a permit are woken from its reply.
    pub async fn reweigh(
        &self,
        keys: &PermitKeys,
        member: &str,
        lighter: &str,
        local: Option<&Notifier>,
    ) -> Result<bool, LockError> {
        match self {
            Store::Server(server) => redis::reweigh(server, keys, member, lighter, local).await,
            Store::Memory(memory) => Ok(memory.reweigh(keys, member, lighter)),
        }
    }

    /// Stores `capacity` with the name and pins it (it wins over the capacity requests ask
    /// for) for at least `pin`, as long as the name is in use; the room it makes goes to
    /// the waiters in order at once, and those of `local` are woken from the reply.
    pub async fn set_capacity(
        &self,
        keys: &PermitKeys,
        capacity: u64,
        pin: Duration,
        local: Option<&Notifier>,
    ) -> Result<CapacitySet, LockError> {
        match self {
            Store::Server(server) => redis::set_capacity(server, keys, capacity, pin, local).await,
            Store::Memory(memory) => Ok(memory.set_capacity(keys, capacity, pin)),
        }
    }

    pub async fn extend(
        &self,
        keys: &PermitKeys,
        member: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        match self {
            Store::Server(server) => redis::extend(server, keys, member, ttl).await,
            Store::Memory(memory) => Ok(memory.extend(keys, member, ttl)),
        }
    }

    /// The live holders, how many requests wait, and the stored capacity.
    pub async fn holders(&self, keys: &PermitKeys) -> Result<RawHolders, LockError> {
        match self {
            Store::Server(server) => redis::holders(server, keys).await,
            Store::Memory(memory) => Ok(memory.holders(keys)),
        }
    }
}

/// A permit set's keys are its name's lock key and a suffix each, so that they share the
/// lock key's hash tag (key.rs's slot tests cover the lock keys and these suffixes).
#[cfg(test)]
#[test]
fn permit_keys_are_the_lock_key_and_a_suffix() {
    for (prefix, name) in [
        ("lock:", "jobs"),
        ("lock:", "}job"),
        ("app{}:", "\0"),
        ("{x}", "{}"),
    ] {
        let lock = crate::key::lock_key(prefix, name);
        for kind in ["sem", "rw"] {
            let keys = PermitKeys::new(prefix, name.to_owned(), kind).expect("a valid name");
            assert_eq!(keys.holders, format!("{lock}:{kind}"));
            assert_eq!(keys.queue, format!("{lock}:{kind}:q"));
        }
    }
}
