//! `ReplicaSync::Auto`'s decision per shard, and what a master says of its replicas.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use redis::aio::ConnectionLike;

use crate::slot::{cluster_slot, CLUSTER_SLOTS};

/// How often a shard's master is looked at again (`ReplicaSync::Auto`).
const PROBE_EVERY_MS: u64 = 5_000;

/// `ReplicaSync::Auto`'s decision, per shard: whether its master was seen with a connected
/// replica (from then on the check holds there: a replica that stops must not turn it off
/// when it matters most), and when a master seen without one was last asked.
///
/// On a Cluster a shard is a key slot: masters differ (one may have replicas, another
/// none), and a slot's data, and the decision with it, follows the slot through a failover
/// to the replica promoted in its master's place (which may have no replica of its own
/// yet). A slot moved to another master by resharding keeps the decision too. Elsewhere
/// (one Redis, Sentinel's master) every key is in the one shard, whichever server is the
/// master now.
pub(super) struct Shards {
    /// Keys are spread over a Cluster's slots.
    cluster: bool,
    /// One bit per shard: seen with a replica.
    seen: Box<[AtomicU64]>,
    /// One bit per shard: seen with a replica, then found with none connected (a promoted
    /// replica after a failover, a master whose replicas went away): `Auto` grants there
    /// without waiting, and asks again every few seconds.
    bare: Box<[AtomicU64]>,
    /// When each shard not seen with a replica was last asked (ms since `epoch`).
    probed: Probed,
    /// A shard was seen with replicas (logged once).
    pub(super) announced: AtomicBool,
    epoch: Instant,
}

impl Shards {
    pub(super) fn new(cluster: bool) -> Shards {
        let shards = if cluster {
            usize::from(CLUSTER_SLOTS)
        } else {
            1
        };
        Shards {
            cluster,
            seen: (0..shards.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            bare: (0..shards.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            probed: if cluster {
                Probed::Slots(Mutex::new(HashMap::new()))
            } else {
                Probed::One(AtomicU64::new(NEVER))
            },
            announced: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    pub(super) fn of(&self, key: &str) -> u16 {
        if self.cluster {
            cluster_slot(key.as_bytes())
        } else {
            0
        }
    }

    pub(super) fn is_seen(&self, shard: u16) -> bool {
        bit(&self.seen, shard)
    }

    pub(super) fn is_bare(&self, shard: u16) -> bool {
        bit(&self.bare, shard)
    }

    /// Seen with a connected replica: the check holds for the shard (again). True when it
    /// had been bare.
    pub(super) fn mark_seen(&self, shard: u16) -> bool {
        set_bit(&self.seen, shard, true);
        set_bit(&self.bare, shard, false)
    }

    /// Found with no connected replica after it had one: true when it was not bare yet.
    pub(super) fn mark_bare(&self, shard: u16) -> bool {
        let newly = !set_bit(&self.bare, shard, true);
        if newly {
            // Asked again only after the probe interval.
            let now = self.now_ms();
            match &self.probed {
                Probed::One(last) => last.store(now, Ordering::Relaxed),
                Probed::Slots(slots) => {
                    slots
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(shard, now);
                }
            }
        }
        newly
    }

    /// Whether `shard`'s master would be asked now: [`Shards::probe_due`] without
    /// recording anything.
    pub(super) fn probe_would_be_due(&self, shard: u16, now: Instant) -> bool {
        self.probe(shard, false, now)
    }

    /// Whether `shard`'s master is to be asked now (at most every few seconds), recording
    /// the time if so.
    pub(super) fn probe_due(&self, shard: u16) -> bool {
        self.probe(shard, true, Instant::now())
    }

    fn probe(&self, shard: u16, record: bool, now: Instant) -> bool {
        let now = self.ms_at(now);
        let due = |last: u64| last == NEVER || now.saturating_sub(last) >= PROBE_EVERY_MS;
        match &self.probed {
            // One shard (every grant of a lone Redis asks): an atomic, no lock, no hashing.
            // Of concurrent callers that find it due, only the one that records asks.
            Probed::One(probed) => {
                let last = probed.load(Ordering::Relaxed);
                if !due(last) {
                    return false;
                }
                !record
                    || probed
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
            }
            Probed::Slots(slots) => {
                let mut probed = slots.lock().unwrap_or_else(PoisonError::into_inner);
                let due = probed.get(&shard).is_none_or(|&last| due(last));
                if due && record {
                    probed.insert(shard, now);
                }
                due
            }
        }
    }

    /// Milliseconds since `epoch`.
    fn now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    /// Milliseconds from `epoch` to `at`.
    fn ms_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// When shards not seen with a replica were last asked (ms since `Shards::epoch`).
enum Probed {
    /// The one shard of a lone Redis or Sentinel's master: [`NEVER`] until first asked.
    One(AtomicU64),
    /// A Cluster's slots, those asked so far.
    Slots(Mutex<HashMap<u16, u64>>),
}

/// [`Probed::One`] before the shard was first asked.
const NEVER: u64 = u64::MAX;

/// Bit `shard` of `bits`.
fn bit(bits: &[AtomicU64], shard: u16) -> bool {
    let (word, bit) = (usize::from(shard / 64), shard % 64);
    bits.get(word)
        .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << bit) != 0)
}

/// Sets bit `shard` of `bits` to `on`; its previous value.
fn set_bit(bits: &[AtomicU64], shard: u16, on: bool) -> bool {
    let (word, bit) = (usize::from(shard / 64), shard % 64);
    let Some(w) = bits.get(word) else {
        return false;
    };
    let before = if on {
        w.fetch_or(1 << bit, Ordering::Relaxed)
    } else {
        w.fetch_and(!(1 << bit), Ordering::Relaxed)
    };
    before & (1 << bit) != 0
}

/// A master as `INFO` describes it.
#[derive(Debug)]
pub(super) struct Master {
    /// Its process's id (`run_id`): a restart or another server is another id.
    pub(super) run_id: String,
    /// Replicas connected and online.
    pub(super) online: u32,
}

/// The master of `key` (`INFO server replication`, behind a keyed command so that a
/// Cluster connection asks the key's master); `None` when it cannot say, or is not a
/// master (any more: a failover demoted it while `WAIT` blocked; its grant is lost in the
/// resync, whatever it has).
pub(super) async fn probe<C: ConnectionLike + Send>(conn: &mut C, key: &str) -> Option<Master> {
    let info = redis::pipe()
        .cmd("PTTL")
        .arg(key)
        .cmd("INFO")
        .arg("server")
        .arg("replication")
        .query_async::<(i64, String)>(conn)
        .await;
    match info {
        Ok((_, text)) => parse_master(&text),
        Err(err) => {
            tracing::debug!(%err, "cannot ask the master for its replicas");
            None
        }
    }
}

fn parse_master(info: &str) -> Option<Master> {
    let mut run_id = None;
    let mut master = false;
    let mut online = 0;
    for line in info.lines() {
        let Some((field, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        match field {
            "run_id" => run_id = Some(value.to_owned()),
            "role" => master = value == "master",
            _ if field.starts_with("slave") && value.contains("state=online") => online += 1,
            _ => {}
        }
    }
    master.then_some(())?;
    Some(Master {
        run_id: run_id?,
        online,
    })
}
