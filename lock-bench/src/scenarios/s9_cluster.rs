//! S9, Redis Cluster (run only when asked for: it starts up to 12 servers at once).
//!
//! - Hand-off: 8 Lockers (each its own connections, as 8 processes would be) loop on one
//!   hot name, holding it about 1 ms, on a cluster of 3 masters and on one of 6 (one
//!   replica each). Reported: acquisitions per second, and the messages the cluster's bus
//!   carried per acquisition, summed over every node from `CLUSTER INFO`:
//!   `cluster_stats_messages_publish_sent` (classic PUBLISH: copied to every other node)
//!   and `cluster_stats_messages_publishshard_sent` (SPUBLISH: to the shard's replicas
//!   only). A PUBLISH costs a bus message per other node, so its figure grows with the
//!   cluster; a sharded one does not.
//! - The same on a semaphore of 2 permits (its turns are told as a lock's are).
//! - Live resharding: 8 Lockers on 16 names (1 ms holds, 1 s wait), on 3 masters without
//!   replicas, first for a few seconds undisturbed, then while the slots of the names are
//!   moved to another master and back, one after the other (keys MIGRATEd ten at a time,
//!   SETSLOT on every master, as `redis-cli --cluster reshard` does). Reported per phase:
//!   acquisitions per second, requests that timed out, requests that failed otherwise (with
//!   the first error), the longest request, and the longest time with no acquisition at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, Permit};
use lock_tests::RedisCluster;
use serde::Serialize;

const LOCKERS: usize = 8;
const NAMES: usize = 16;
const HOLD: Duration = Duration::from_millis(1);
/// The semaphore's permits in the hand-off row of permits.
const PERMITS: u64 = 2;

/// What the Lockers of a loop take: a lock, or a permit of a semaphore of `PERMITS`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Lock,
    Permit,
}

impl Kind {
    fn label(self) -> String {
        match self {
            Kind::Lock => "lock".into(),
            Kind::Permit => format!("semaphore ({PERMITS} permits)"),
        }
    }
}

/// A lock's lease or a semaphore's permit, released alike.
enum Held {
    Lease(lock_core::Lease),
    Permit(Permit),
}

impl Held {
    async fn release(self) -> Result<bool, LockError> {
        match self {
            Held::Lease(lease) => lease.release().await,
            Held::Permit(permit) => permit.release().await,
        }
    }
}

/// S9's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub handoff: Vec<Handoff>,
    pub reshard: Vec<Phase>,
    pub problems: Vec<String>,
}

/// The hot-name hand-off on one cluster size.
#[derive(Debug, Clone, Serialize)]
pub struct Handoff {
    /// "lock", or "semaphore (2 permits)".
    pub primitive: String,
    pub masters: usize,
    pub acquisitions: u64,
    pub acquisitions_per_s: f64,
    /// Classic PUBLISH bus messages per acquisition.
    pub publish_per_acquisition: f64,
    /// Sharded (SPUBLISH) bus messages per acquisition.
    pub publishshard_per_acquisition: f64,
}

/// One phase of the resharding measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub phase: String,
    pub seconds: f64,
    pub acquisitions_per_s: f64,
    pub timeouts: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub longest_request_ms: f64,
    pub longest_gap_ms: f64,
    pub slot_moves: u64,
}

pub fn title() -> String {
    "S9: Redis Cluster, hand-off bus messages at 3 and 6 masters, and live resharding".into()
}

/// Runs both measurements: `run_for` of hand-off per cluster size, `reshard_for` of
/// resharding (after as long undisturbed, at most 5 s).
pub async fn run(run_for: Duration, reshard_for: Duration) -> Table {
    let mut table = Table {
        handoff: Vec::new(),
        reshard: Vec::new(),
        problems: Vec::new(),
    };
    for masters in [3, 6] {
        match start(masters, 1) {
            Ok(cluster) => {
                for kind in [Kind::Lock, Kind::Permit] {
                    match handoff(&cluster, masters, kind, run_for).await {
                        Ok(row) => table.handoff.push(row),
                        Err(err) => table.problems.push(format!(
                            "hand-off ({}), {masters} masters: {err}",
                            kind.label()
                        )),
                    }
                }
            }
            Err(err) => table.problems.push(err),
        }
    }
    match start(3, 0) {
        Ok(cluster) => {
            let cluster = Arc::new(cluster);
            match reshard(&cluster, reshard_for).await {
                Ok(phases) => table.reshard = phases,
                Err(err) => table.problems.push(format!("resharding: {err}")),
            }
        }
        Err(err) => table.problems.push(err),
    }
    table
}

fn start(masters: usize, replicas: usize) -> Result<RedisCluster, String> {
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(|| RedisCluster::start(masters, replicas));
    std::panic::set_hook(previous_hook);
    let cluster = started.map_err(|_| format!("cannot start a cluster of {masters} masters"))?;
    // Replicas online, so that the replica check is on from the first lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in cluster.nodes.iter().filter(|_| replicas > 0) {
        loop {
            let info = node.command(&["INFO", "replication"]);
            if !info.contains("role:master") || info.contains("state=online") {
                break;
            }
            if Instant::now() > deadline {
                return Err("the replicas did not come online".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(cluster)
}

fn lockers(cluster: &RedisCluster) -> Result<Vec<Locker>, String> {
    (0..LOCKERS)
        .map(|_| {
            Locker::builder()
                .cluster(cluster.urls())
                .app_name("lock-bench")
                .build()
                .map_err(|err| format!("cannot build a cluster locker: {err}"))
        })
        .collect()
}

async fn handoff(
    cluster: &RedisCluster,
    masters: usize,
    kind: Kind,
    run_for: Duration,
) -> Result<Handoff, String> {
    let lockers = lockers(cluster)?;
    let hot = ["bench:hot".to_owned()];
    // Warm up: connections, scripts, subscriptions.
    loop_on(
        &lockers,
        kind,
        &hot,
        Duration::from_millis(500),
        SECOND_WAIT,
    )
    .await;
    let publish = cluster.bus_counter("cluster_stats_messages_publish_sent");
    let shard = cluster.bus_counter("cluster_stats_messages_publishshard_sent");
    let started = Instant::now();
    let stats = loop_on(&lockers, kind, &hot, run_for, SECOND_WAIT * 10).await;
    let elapsed = started.elapsed().as_secs_f64();
    let publish = cluster.bus_counter("cluster_stats_messages_publish_sent") - publish;
    let shard = cluster.bus_counter("cluster_stats_messages_publishshard_sent") - shard;
    if stats.acquired == 0 {
        return Err(format!("nothing acquired ({:?})", stats.first_error));
    }
    let per = |n: u64| n as f64 / stats.acquired as f64;
    Ok(Handoff {
        primitive: kind.label(),
        masters,
        acquisitions: stats.acquired,
        acquisitions_per_s: stats.acquired as f64 / elapsed,
        publish_per_acquisition: per(publish),
        publishshard_per_acquisition: per(shard),
    })
}

const SECOND_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Stats {
    acquired: u64,
    timeouts: u64,
    errors: u64,
    first_error: Option<String>,
    longest_request: Duration,
    /// Every acquisition's moment, to find the longest gap.
    moments: Vec<Instant>,
}

/// Each locker loops for `run_for` over `names` (one after the other, from its own start),
/// taking what `kind` says.
async fn loop_on(
    lockers: &[Locker],
    kind: Kind,
    names: &[String],
    run_for: Duration,
    wait: Duration,
) -> Stats {
    let stats = Arc::new(Mutex::new(Stats::default()));
    let until = Instant::now() + run_for;
    let tasks: Vec<_> = lockers
        .iter()
        .enumerate()
        .map(|(i, locker)| {
            let (locker, names, stats) = (locker.clone(), names.to_vec(), Arc::clone(&stats));
            tokio::spawn(async move {
                let mut k = i * 7;
                while Instant::now() < until {
                    k += 1;
                    let name = &names[k % names.len()];
                    let asked = Instant::now();
                    let ttl = Duration::from_secs(5);
                    let result = match kind {
                        Kind::Lock => locker
                            .lock(name.as_str())
                            .ttl(ttl)
                            .wait(wait)
                            .await
                            .map(Held::Lease),
                        Kind::Permit => locker
                            .semaphore(name.as_str(), PERMITS)
                            .acquire()
                            .ttl(ttl)
                            .wait(wait)
                            .await
                            .map(Held::Permit),
                    };
                    let took = asked.elapsed();
                    let lease = {
                        let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
                        s.longest_request = s.longest_request.max(took);
                        match result {
                            Ok(lease) => {
                                s.acquired += 1;
                                s.moments.push(Instant::now());
                                Some(lease)
                            }
                            Err(LockError::Timeout { .. }) => {
                                s.timeouts += 1;
                                None
                            }
                            Err(err) => {
                                s.errors += 1;
                                s.first_error.get_or_insert_with(|| err.to_string());
                                None
                            }
                        }
                    };
                    if let Some(lease) = lease {
                        tokio::time::sleep(HOLD).await;
                        if let Err(err) = lease.release().await {
                            let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
                            s.errors += 1;
                            s.first_error
                                .get_or_insert_with(|| format!("release: {err}"));
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    Arc::try_unwrap(stats)
        .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        .unwrap_or_default()
}

fn phase(name: &str, stats: Stats, elapsed: Duration, slot_moves: u64) -> Phase {
    let mut moments = stats.moments;
    moments.sort_unstable();
    let longest_gap = moments
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    Phase {
        phase: name.to_owned(),
        seconds: elapsed.as_secs_f64(),
        acquisitions_per_s: stats.acquired as f64 / elapsed.as_secs_f64(),
        timeouts: stats.timeouts,
        errors: stats.errors,
        first_error: stats.first_error,
        longest_request_ms: stats.longest_request.as_secs_f64() * 1e3,
        longest_gap_ms: longest_gap.as_secs_f64() * 1e3,
        slot_moves,
    }
}

async fn reshard(cluster: &Arc<RedisCluster>, reshard_for: Duration) -> Result<Vec<Phase>, String> {
    let lockers = lockers(cluster)?;
    let names: Vec<String> = (0..NAMES).map(|i| format!("bench:reshard:{i}")).collect();
    loop_on(
        &lockers,
        Kind::Lock,
        &names,
        Duration::from_millis(500),
        SECOND_WAIT,
    )
    .await;
    let quiet_for = reshard_for.min(Duration::from_secs(5));
    let started = Instant::now();
    let quiet = loop_on(&lockers, Kind::Lock, &names, quiet_for, SECOND_WAIT).await;
    let quiet = phase("undisturbed", quiet, started.elapsed(), 0);

    let stop = Arc::new(AtomicBool::new(false));
    let mover = {
        let (cluster, stop) = (Arc::clone(cluster), Arc::clone(&stop));
        let keys: Vec<String> = names.iter().map(|n| format!("lock:{{{n}}}")).collect();
        tokio::task::spawn_blocking(move || {
            let mut moves = 0u64;
            let mut k = 0;
            // The test support panics when a step fails (a node's view of the slots not
            // settled yet): that move is skipped and the next one tried.
            let previous_hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            while !stop.load(Ordering::Relaxed) {
                let key = &keys[k % keys.len()];
                k += 1;
                let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let home = cluster.master_of(key);
                    cluster.move_slot(key, (home + 1) % 3);
                    std::thread::sleep(Duration::from_millis(20));
                    cluster.move_slot(key, home);
                }));
                if moved.is_ok() {
                    moves += 2;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::panic::set_hook(previous_hook);
            moves
        })
    };
    let started = Instant::now();
    let moving = loop_on(&lockers, Kind::Lock, &names, reshard_for, SECOND_WAIT).await;
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let moves = mover
        .await
        .map_err(|err| format!("the slot mover failed: {err}"))?;
    Ok(vec![quiet, phase("slots moving", moving, elapsed, moves)])
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "Hand-off on one hot name (8 Lockers, ~1 ms holds), one replica per master:\n\n\
             | primitive | masters | acquisitions/s | bus PUBLISH messages / acquisition | bus SPUBLISH messages / acquisition |\n\
             |---|---:|---:|---:|---:|\n",
        );
        for row in &self.handoff {
            out.push_str(&format!(
                "| {} | {} | {:.0} | {:.2} | {:.2} |\n",
                row.primitive,
                row.masters,
                row.acquisitions_per_s,
                row.publish_per_acquisition,
                row.publishshard_per_acquisition
            ));
        }
        let total = |r: &Handoff| r.publish_per_acquisition + r.publishshard_per_acquisition;
        for kind in [Kind::Lock, Kind::Permit] {
            let label = kind.label();
            let rows: Vec<&Handoff> = self
                .handoff
                .iter()
                .filter(|r| r.primitive == label)
                .collect();
            if let [three, six] = rows[..] {
                out.push_str(&format!(
                    "\nBus messages per acquisition ({label}), 6 masters / 3 masters: {:.2}\n",
                    total(six) / total(three).max(f64::MIN_POSITIVE)
                ));
            }
        }
        out.push_str(
            "\nLive resharding (8 Lockers on 16 names, ~1 ms holds, 1 s wait, 3 masters):\n\n\
             | phase | seconds | slot moves | acquisitions/s | timed out | other errors | longest request (ms) | longest gap (ms) |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in &self.reshard {
            out.push_str(&format!(
                "| {} | {:.1} | {} | {:.0} | {} | {} | {:.0} | {:.0} |\n",
                p.phase,
                p.seconds,
                p.slot_moves,
                p.acquisitions_per_s,
                p.timeouts,
                p.errors,
                p.longest_request_ms,
                p.longest_gap_ms
            ));
        }
        for p in &self.reshard {
            if let Some(err) = &p.first_error {
                out.push_str(&format!("\nFirst error ({}): {err}\n", p.phase));
            }
        }
        for problem in &self.problems {
            out.push_str(&format!("\nProblem: {problem}\n"));
        }
        out
    }
}
