//! Redis Cluster: locks on names over all slots, no CROSSSLOT, mutual exclusion through a
//! slot migration and a failover.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::{RedisCluster, RedisServer};
use redis::AsyncCommands as _;

const SECOND: Duration = Duration::from_secs(1);

fn locker_on(cluster: &RedisCluster) -> Locker {
    Locker::builder()
        .cluster(cluster.urls())
        .app_name("lock-tests")
        .build()
        .expect("cluster locker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_names_all_over_the_slots() {
    let cluster = RedisCluster::start(3, 0);
    let locker = locker_on(&cluster);
    let other = locker_on(&cluster);
    let mut masters_used = [0usize; 3];
    for i in 0..150 {
        let name = format!("order:{i}");
        let lease = locker
            .lock(name.as_str())
            .ttl(10 * SECOND)
            .fencing()
            .await
            .expect("acquire");
        masters_used[cluster.master_of(lease.key())] += 1;
        assert!(
            lease.fencing_token().is_some(),
            "fencing counter in the lock's slot: no CROSSSLOT"
        );
        assert!(matches!(
            other.try_lock(name.as_str(), SECOND).await,
            Err(LockError::Busy { .. })
        ));
        lease.extend(10 * SECOND).await.expect("extend");
        let info = other.inspect(&name).await.expect("inspect").expect("held");
        assert_eq!(info.fencing_counter, lease.fencing_token());
        assert!(lease.release().await.expect("release"));
    }
    assert!(
        masters_used.iter().all(|&n| n > 0),
        "every master held some locks: {masters_used:?}"
    );
}

/// 8 tasks (4 lockers) on 10 names, each doing a non-atomic read-modify-write of a counter
/// per name in a separate store, while `disturb` runs against the cluster.
async fn counters_stay_exact_while(
    cluster: &RedisCluster,
    disturb: impl std::future::Future<Output = ()>,
) {
    let store = RedisServer::start();
    let client = redis::Client::open(store.url()).expect("client");
    let done = Arc::new(AtomicBool::new(false));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let locker = locker_on(cluster);
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let (done, acquisitions) = (done.clone(), acquisitions.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while !done.load(Ordering::SeqCst) {
                i += 1;
                let name = format!("counter:{}", i % 10);
                let lease = match locker
                    .lock(name.as_str())
                    .ttl(5 * SECOND)
                    .wait(10 * SECOND)
                    .await
                {
                    Ok(lease) => lease,
                    // During a failover the slot's master is briefly unreachable.
                    Err(LockError::Connection { .. } | LockError::Redis { .. }) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(other) => panic!("{other:?}"),
                };
                let seen: Option<u64> = conn.get(&name).await.expect("get");
                tokio::task::yield_now().await;
                let () = conn.set(&name, seen.unwrap_or(0) + 1).await.expect("set");
                acquisitions.fetch_add(1, Ordering::SeqCst);
                let _ = lease.release().await;
            }
        }));
    }
    tokio::time::sleep(SECOND).await;
    disturb.await;
    tokio::time::sleep(SECOND).await;
    done.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("join");
    }
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut total = 0u64;
    for i in 0..10 {
        let n: Option<u64> = conn.get(format!("counter:{i}")).await.expect("get");
        total += n.unwrap_or(0);
    }
    let acquired = acquisitions.load(Ordering::SeqCst);
    assert!(acquired > 20, "locking went on: {acquired}");
    assert_eq!(total, acquired, "no two holders of one name overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_keeps_mutual_exclusion() {
    let cluster = RedisCluster::start(3, 0);
    counters_stay_exact_while(&cluster, async {
        let cluster = &cluster;
        // Move a third of node 0's slots (with their lock keys) to node 1, mid-run.
        tokio::task::block_in_place(|| cluster.reshard(0, 1, 2000));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinated_failover_keeps_mutual_exclusion() {
    let cluster = RedisCluster::start(3, 1);
    counters_stay_exact_while(&cluster, async {
        // CLUSTER FAILOVER on a replica: it catches up with its master, then takes over.
        let replica = cluster
            .nodes
            .iter()
            .find(|node| node.command(&["ROLE"]).contains("slave"))
            .expect("a replica");
        assert!(replica.command(&["CLUSTER", "FAILOVER"]).starts_with("+OK"));
        let started = Instant::now();
        while !replica.command(&["ROLE"]).contains("master") {
            assert!(started.elapsed() < 10 * SECOND, "failover completed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_resumes_after_a_master_crash() {
    let mut cluster = RedisCluster::start(3, 1);
    let locker = locker_on(&cluster);
    let lease = locker
        .try_lock("crash", 10 * SECOND)
        .await
        .expect("acquire");
    let master = cluster.master_of(lease.key());
    drop(lease);
    cluster.nodes[master].kill();
    // The replica is promoted after the node timeout (1 s); locking on that slot resumes.
    let started = Instant::now();
    loop {
        match locker.try_lock("crash", 10 * SECOND).await {
            Ok(lease) => {
                let _ = lease.release().await;
                break;
            }
            Err(LockError::Busy { .. }) => break, // the replica kept the old lock: still live
            Err(_) => {
                assert!(
                    started.elapsed() < 30 * SECOND,
                    "locking resumed after the failover"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
