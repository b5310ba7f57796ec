//! Key tracking on a Redis Cluster: one watch connection per master, each key read (and
//! tracked) on its slot's master. A foreign change of a held key is told at once; a slot
//! that moves, or a master that fails over, makes the leases concerned look again where
//! their keys are now; an acquisition costs at most one read and a release none.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lock_core::{EvictionCheck, LockError, Locker};
use lock_tests::RedisCluster;

use crate::failover::{replica_of, until_replica_online};

const SECOND: Duration = Duration::from_secs(1);

/// Long enough that renewal-time detection (or the end of validity) cannot be what fires
/// `lost()` within the test's bounds.
const LONG_TTL: Duration = Duration::from_secs(60);

/// How long a test waits for a push (or a re-check) to be acted on: generous for a loaded
/// machine, far below what renewal-time detection could reach with [`LONG_TTL`].
const TOLD_WITHIN: Duration = Duration::from_secs(5);

fn locker(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .command_timeout(SECOND)
        .build()
        .expect("cluster locker")
}

/// How many keys node `index` tracks for its clients.
fn tracked_on(cluster: &RedisCluster, index: usize) -> u64 {
    cluster.nodes[index]
        .command(&["INFO", "stats"])
        .lines()
        .find_map(|line| line.strip_prefix("tracking_total_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Holds `name` and waits until the master of its key tracks it.
async fn held(locker: &Locker, cluster: &RedisCluster, name: &str) -> lock_core::Lease {
    let lease = locker.lock(name).ttl(LONG_TTL).await.expect("acquire");
    let master = cluster.master_of(lease.key());
    until_tracked(cluster, master, 1).await;
    lease
}

async fn until_tracked(cluster: &RedisCluster, index: usize, at_least: u64) {
    let deadline = Instant::now() + TOLD_WITHIN;
    while tracked_on(cluster, index) < at_least {
        assert!(
            Instant::now() < deadline,
            "node {index} never tracked {at_least} keys"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every command the masters ran so far, with its call count, summed.
fn calls(cluster: &RedisCluster, masters: usize) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for node in &cluster.nodes[..masters] {
        for line in node.command(&["INFO", "commandstats"]).lines() {
            let Some(line) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, rest)) = line.split_once(":calls=") else {
                continue;
            };
            let count: u64 = rest
                .split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            *sum.entry(name.to_owned()).or_insert(0) += count;
        }
    }
    sum
}

async fn told(lease: &lock_core::Lease, what: &str) {
    tokio::time::timeout(TOLD_WITHIN, lease.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() did not fire after {what}"));
    assert!(lease.is_lost());
}

/// Names whose keys are on three different masters.
async fn spread(
    locker: &Locker,
    cluster: &RedisCluster,
    prefix: &str,
) -> Vec<(usize, lock_core::Lease)> {
    let mut found: Vec<(usize, lock_core::Lease)> = Vec::new();
    for i in 0.. {
        let lease = held(locker, cluster, &format!("{prefix}:{i}")).await;
        let master = cluster.master_of(lease.key());
        if found.iter().any(|(m, _)| *m == master) {
            assert!(lease.release().await.expect("release"));
            continue;
        }
        found.push((master, lease));
        if found.len() == 3 {
            break;
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_delete_or_overwrite_on_any_master_fires_lost_at_once() {
    let cluster = RedisCluster::start(3, 0);
    let locker = locker(&cluster);
    let mut leases = spread(&locker, &cluster, "job").await;
    let (untouched_on, untouched) = leases.pop().expect("three");
    let (overwritten_on, overwritten) = leases.pop().expect("three");
    let (deleted_on, deleted) = leases.pop().expect("three");
    assert!(cluster.nodes[deleted_on]
        .command(&["DEL", deleted.key()])
        .starts_with(":1"));
    told(&deleted, "a DEL on its master").await;
    assert!(cluster.nodes[overwritten_on]
        .command(&["SET", overwritten.key(), "someone-else"])
        .starts_with("+OK"));
    told(&overwritten, "a foreign SET on its master").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!untouched.is_lost(), "an untouched lease is not told");
    assert!(tracked_on(&cluster, untouched_on) >= 1);
    assert!(untouched.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_costs_at_most_one_read_and_a_release_none() {
    let cluster = RedisCluster::start(3, 0);
    let locker = locker(&cluster);
    // The slot map read, the watch connections opened.
    for (_, lease) in spread(&locker, &cluster, "warm").await {
        assert!(lease.release().await.expect("release"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for node in &cluster.nodes {
        assert!(node.command(&["CONFIG", "RESETSTAT"]).starts_with("+OK"));
    }
    let cycles = 40u64;
    let mut leases = Vec::new();
    for i in 0..cycles {
        leases.push(
            locker
                .lock(format!("cycle:{i}"))
                .ttl(LONG_TTL)
                .await
                .expect("acquire"),
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reads = calls(&cluster, 3).get("mget").copied().unwrap_or(0);
    assert!(
        (1..=cycles).contains(&reads),
        "{reads} registering reads for {cycles} acquisitions"
    );
    for lease in leases {
        assert!(lease.release().await.expect("release"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let used = calls(&cluster, 3);
    assert_eq!(
        used.get("mget").copied().unwrap_or(0),
        reads,
        "the releases' own changes of the keys cost no read: {used:?}"
    );
    assert_eq!(
        used.get("cluster|slots").copied().unwrap_or(0),
        0,
        "the slot map is read once, not per acquisition: {used:?}"
    );
}

/// A held key's slot moves to another master (its key MIGRATEd, deleted on the old one):
/// the lease looks again, is found still ours on the new master (not told falsely), and is
/// tracked there: a DEL on the new master is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_follows_its_key_to_the_slot_s_new_master() {
    let cluster = RedisCluster::start(3, 0);
    let locker = locker(&cluster);
    let lease = held(&locker, &cluster, "moving").await;
    let from = cluster.master_of(lease.key());
    let to = (from + 1) % 3;
    let before = tracked_on(&cluster, to);
    cluster.move_slot(lease.key(), to);
    until_tracked(&cluster, to, before + 1).await;
    assert!(!lease.is_lost(), "a key moved with its value is still ours");
    assert!(cluster.nodes[to]
        .command(&["DEL", lease.key()])
        .starts_with(":1"));
    told(&lease, "a DEL on the slot's new master").await;
}

/// The master of a held key stalls (SIGSTOP: no connection closes, nothing is pushed) and
/// its replica is elected in its place. The leases on it look again on the new master
/// (tracked there: a DEL there is told); a lease on another master is not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_makes_the_leases_look_again_on_the_new_master() {
    let cluster = RedisCluster::start(3, 1);
    let locker = locker(&cluster);
    let mut leases = spread(&locker, &cluster, "fo").await;
    let (other_on, other) = leases.pop().expect("three");
    let (master, lease) = leases.pop().expect("three");
    assert_ne!(other_on, master);
    until_replica_online(&cluster.nodes[master]);
    let replica = replica_of(&cluster, master);
    // The replica has the key before its master stalls.
    assert_eq!(
        cluster.nodes[master].command(&["WAIT", "1", "5000"]).trim(),
        ":1"
    );

    cluster.nodes[master].signal("-STOP");
    let started = Instant::now();
    while !cluster.nodes[replica].command(&["ROLE"]).contains("master") {
        assert!(
            started.elapsed() < 30 * SECOND,
            "the replica was elected master"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_tracked(&cluster, replica, 1).await;
    assert!(!lease.is_lost(), "the new master has the key: still ours");
    assert!(cluster.nodes[replica]
        .command(&["DEL", lease.key()])
        .starts_with(":1"));
    told(&lease, "a DEL on the new master").await;
    assert!(!other.is_lost(), "a lease on another master is untouched");
    cluster.nodes[master].signal("-CONT");
}

/// The eviction check reads every master: one that may evict locks is enough for
/// `EvictionCheck::Refuse` to refuse, whichever master the lock would live on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_that_may_evict_locks_is_refused_under_the_strict_check() {
    let cluster = RedisCluster::start(3, 0);
    let strict = || {
        Locker::builder()
            .cluster(cluster.urls())
            .command_timeout(SECOND)
            .eviction_check(EvictionCheck::Refuse)
            .build()
            .expect("cluster locker")
    };
    let lease = strict()
        .lock("before")
        .ttl(LONG_TTL)
        .await
        .expect("every master is safe");
    assert!(lease.release().await.expect("release"));
    for setting in [["maxmemory", "64mb"], ["maxmemory-policy", "allkeys-lru"]] {
        let reply = cluster.nodes[1].command(&["CONFIG", "SET", setting[0], setting[1]]);
        assert!(reply.starts_with("+OK"), "{reply}");
    }
    for name in ["a", "b", "c", "d"] {
        match strict().lock(name).ttl(LONG_TTL).await {
            Err(LockError::Misconfigured { reason, .. }) => {
                assert!(reason.contains("allkeys-lru"), "{reason}")
            }
            other => panic!("{name}: expected Misconfigured, got {other:?}"),
        }
    }
}

/// A master stalls (SIGSTOP) and stays in the slot map (no replica to elect): its watch
/// connection misses the heartbeat, and its keys cannot be read until it answers. Reading
/// them must not hold up the other masters' leases: a `DEL` on another master is told
/// while the stalled one's reads would still be waiting out the command timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_master_does_not_hold_up_the_others() {
    let cluster = RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        // The other masters keep serving their slots while one is down.
        let reply = node.command(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
        assert!(reply.starts_with("+OK"), "{reply}");
    }
    let timeout = 8 * SECOND;
    let locker = Locker::builder()
        .cluster(cluster.urls())
        .command_timeout(timeout)
        .build()
        .expect("cluster locker");
    let mut leases = spread(&locker, &cluster, "stall").await;
    let (_, _third) = leases.pop().expect("three");
    let (healthy, lease) = leases.pop().expect("three");
    let (stalled, _stuck) = leases.pop().expect("three");
    cluster.nodes[stalled].signal("-STOP");
    // The heartbeat (every second, answered within the command timeout) has missed by now,
    // and every lease looks again: the stalled master's keys cannot be read.
    tokio::time::sleep(timeout + 3 * SECOND).await;
    assert!(cluster.nodes[healthy]
        .command(&["DEL", lease.key()])
        .starts_with(":1"));
    let told = tokio::time::timeout(timeout / 2, lease.lost()).await;
    cluster.nodes[stalled].signal("-CONT");
    assert!(
        told.is_ok(),
        "a DEL on a healthy master waited behind the stalled master's reads"
    );
}
