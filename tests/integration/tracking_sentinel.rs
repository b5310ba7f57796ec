//! Key tracking behind Sentinel: the watch connection is on the master the Sentinels name,
//! so a foreign change of a held key there is told at once; after a failover every held
//! lease looks again on the new master, and the eviction check reads the new master.

use std::time::{Duration, Instant};

use lock_core::{EvictionCheck, LockError, Locker};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// Long enough that renewal-time detection (or the end of validity) cannot be what fires
/// `lost()` within the test's bounds.
const LONG_TTL: Duration = Duration::from_secs(60);

/// How long a test waits for a push (or a re-check) to be acted on: generous for a loaded
/// machine, far below what renewal-time detection could reach with [`LONG_TTL`].
const TOLD_WITHIN: Duration = Duration::from_secs(5);

fn locker(sentinel: &RedisServer, check: EvictionCheck) -> Locker {
    Locker::builder()
        .sentinel([sentinel.url()], "locks")
        .command_timeout(SECOND)
        .eviction_check(check)
        .build()
        .expect("sentinel locker")
}

/// How many keys `server` tracks for its clients.
fn tracked_keys(server: &RedisServer) -> u64 {
    server
        .command(&["INFO", "stats"])
        .lines()
        .find_map(|line| line.strip_prefix("tracking_total_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Holds `name` and waits until `master` tracks its key.
async fn held(locker: &Locker, master: &RedisServer, name: &str) -> lock_core::Lease {
    let before = tracked_keys(master);
    let lease = locker.lock(name).ttl(LONG_TTL).await.expect("acquire");
    let deadline = Instant::now() + TOLD_WITHIN;
    while tracked_keys(master) <= before {
        assert!(
            Instant::now() < deadline,
            "{name} was never read for tracking"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    lease
}

async fn told(lease: &lock_core::Lease, what: &str) {
    tokio::time::timeout(TOLD_WITHIN, lease.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() did not fire after {what}"));
    assert!(lease.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_delete_or_overwrite_on_the_named_master_fires_lost_at_once() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let locker = locker(&sentinel, EvictionCheck::Warn);
    let deleted = held(&locker, &master, "deleted").await;
    let overwritten = held(&locker, &master, "overwritten").await;
    let untouched = held(&locker, &master, "untouched").await;
    assert!(master.command(&["DEL", deleted.key()]).starts_with(":1"));
    told(&deleted, "a DEL on the master").await;
    assert!(master
        .command(&["SET", overwritten.key(), "someone-else"])
        .starts_with("+OK"));
    told(&overwritten, "a foreign SET on the master").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!untouched.is_lost(), "an untouched lease is not told");
    assert!(untouched.release().await.expect("release"));
}

/// The master stalls (SIGSTOP: no connection is closed, nothing is pushed) and the
/// Sentinel promotes its replica, on which one held key is missing (a write the failover
/// lost: here deleted on the writable replica behind the master's back). Every held lease
/// looks again on the new master: the missing one is told, the other is not; and the new
/// master's eviction policy, unsafe for locks, is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_makes_every_held_lease_look_again_on_the_new_master() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[
        &format!("replicaof 127.0.0.1 {}", master.port()),
        "replica-read-only no",
        "maxmemory 64mb",
        "maxmemory-policy volatile-lru",
    ]);
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    sentinel.until_sentinel_lists_replica("locks", replica.port());
    crate::failover::until_replica_online(&master);
    let locker = locker(&sentinel, EvictionCheck::Refuse);
    let gone = held(&locker, &master, "gone").await;
    let kept = held(&locker, &master, "kept").await;
    let started = Instant::now();
    while replica.command(&["EXISTS", gone.key(), kept.key()]).trim() != ":2" {
        assert!(started.elapsed() < 10 * SECOND, "the replica got both keys");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(replica.command(&["DEL", gone.key()]).starts_with(":1"));

    master.signal("-STOP");
    let started = Instant::now();
    while !sentinel
        .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "locks"])
        .contains(&replica.port().to_string())
    {
        assert!(
            started.elapsed() < 30 * SECOND,
            "the Sentinel promoted the replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    told(&gone, "a failover to a master without the key").await;
    assert!(!kept.is_lost(), "the key the new master has is still ours");
    assert!(
        tracked_keys(&replica) >= 1,
        "the leases are tracked on the new master"
    );
    // A DEL on the new master is pushed as on the old one.
    assert!(replica.command(&["DEL", kept.key()]).starts_with(":1"));
    told(&kept, "a DEL on the new master").await;
    match locker.lock("after").ttl(LONG_TTL).await {
        Err(LockError::Misconfigured { reason, .. }) => {
            assert!(reason.contains("volatile-lru"), "{reason}")
        }
        other => panic!("the new master's eviction policy was not checked: {other:?}"),
    }
    master.signal("-CONT");
}

/// Every command `server` ran so far, with its call count.
fn calls(server: &RedisServer) -> std::collections::BTreeMap<String, u64> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_costs_the_master_at_most_one_read_and_a_release_none() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let locker = locker(&sentinel, EvictionCheck::Warn);
    let warm = held(&locker, &master, "warm").await;
    assert!(warm.release().await.expect("release"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(master.command(&["CONFIG", "RESETSTAT"]).starts_with("+OK"));
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
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reads = calls(&master).get("mget").copied().unwrap_or(0);
    assert!(
        (1..=cycles).contains(&reads),
        "{reads} registering reads for {cycles} acquisitions"
    );
    for lease in leases {
        assert!(lease.release().await.expect("release"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let used = calls(&master);
    assert_eq!(
        used.get("mget").copied().unwrap_or(0),
        reads,
        "the releases' own changes of the keys cost no read: {used:?}"
    );
}
