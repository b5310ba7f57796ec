//! A release that meets a blip (a partition, a dropped connection, a Cluster slot without a
//! master) keeps trying until Redis answers, within the locker's unreachable timeout and
//! the lease's validity: the lock, the permit, the read-write lease or the multi-lock is
//! freed when Redis is back, not left to its TTL. A release dropped while it retries is
//! finished in the background the same way. What is held is `shard_failovers`'s (a 60 s
//! TTL, far longer than a test: a lock left behind by a failed release outlives it).
//!
//! The blip: the proxy between the locker and Redis swallows everything for a while, then
//! drops the connections it swallowed into (so that no command sent during the blip ever
//! reaches Redis) and lets new ones through.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locker;
use lock_tests::proxy::Proxy;
use lock_tests::{RedisCluster, RedisServer};

use crate::shard_failovers::{hold, holder_on, Kind};

const SECOND: Duration = Duration::from_secs(1);
/// The multi-lock's TTL, as long as `shard_failovers::hold`'s.
const TTL: Duration = Duration::from_secs(60);
/// How long the proxy swallows everything.
const BLIP: Duration = Duration::from_millis(1200);

/// A locker through `proxy`, whose commands time out well within [`BLIP`] and which keeps
/// trying for well over it.
fn through(proxy: &Proxy) -> Locker {
    Locker::builder()
        .url(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .unreachable_timeout(10 * SECOND)
        .build()
        .expect("locker")
}

/// Swallows everything for [`BLIP`] (on a thread of its own: the test's runtime goes on),
/// then drops the connections and lets new ones through.
fn blip(proxy: &Arc<Proxy>) -> std::thread::JoinHandle<()> {
    proxy.set_blackhole(true);
    let proxy = Arc::clone(proxy);
    std::thread::spawn(move || {
        std::thread::sleep(BLIP);
        proxy.drop_connections();
        // What a connection read before the blip stays unsent: it is closed before the
        // blackhole lifts (its task sees the drop at once; the margin is for a busy host).
        std::thread::sleep(Duration::from_millis(100));
        proxy.set_blackhole(false);
    })
}

/// Waits (off the runtime's workers) for the blip's end.
async fn ended(blip: std::thread::JoinHandle<()>) {
    tokio::task::spawn_blocking(move || blip.join())
        .await
        .expect("join")
        .expect("blip");
}

/// A server, a proxy before it, a locker through the proxy and one straight to the server.
fn rig() -> (RedisServer, Arc<Proxy>, Locker, Locker) {
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::start(server.addr()).expect("proxy"));
    let (locker, other) = (
        through(&proxy),
        Locker::from_url(&server.url()).expect("locker"),
    );
    (server, proxy, locker, other)
}

/// Whether `other` takes `name` (`kind`) at once, without waiting.
async fn free(other: &Locker, kind: Kind, name: &str) -> bool {
    let now = Duration::ZERO;
    match kind {
        Kind::Lock => other.lock(name).wait(now).await.is_ok(),
        Kind::Permit => other.semaphore(name, 1).acquire().wait(now).await.is_ok(),
        // The holder of a `Read` run holds the write lease.
        Kind::Read => other.rwlock(name).write().wait(now).await.is_ok(),
    }
}

/// A release sent into a partition is answered once Redis is reachable again: `true`,
/// and the name is free for every Locker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_blip_frees_the_name_when_redis_is_back() {
    let (_server, proxy, locker, other) = rig();
    for kind in [Kind::Lock, Kind::Permit, Kind::Read] {
        let name = format!("blip-{kind:?}");
        let held = hold(&locker, kind, &name).await;
        assert!(!free(&other, kind, &name).await, "{kind:?}: held");
        let blip = blip(&proxy);
        let begun = std::time::Instant::now();
        let released = held.release().await;
        eprintln!(
            "{kind:?}: released through the blip in {:?}",
            begun.elapsed()
        );
        ended(blip).await;
        assert!(
            matches!(released, Ok(true)),
            "{kind:?}: a release through a {BLIP:?} blip answered {released:?}"
        );
        assert!(
            free(&other, kind, &name).await,
            "{kind:?}: still held after its release"
        );
    }
}

/// A release dropped while it retries (the caller's `timeout` ran out first) is finished
/// in the background: the name is free within a moment of Redis being back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_during_a_blip_frees_the_name_when_redis_is_back() {
    let (_server, proxy, locker, other) = rig();
    for kind in [Kind::Lock, Kind::Permit, Kind::Read] {
        let name = format!("dropped-{kind:?}");
        let held = hold(&locker, kind, &name).await;
        let blip = blip(&proxy);
        let cut = tokio::time::timeout(Duration::from_millis(500), held.release()).await;
        assert!(cut.is_err(), "{kind:?}: answered within a blip: {cut:?}");
        ended(blip).await;
        let mut freed = false;
        for _ in 0..100 {
            if free(&other, kind, &name).await {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(freed, "{kind:?}: still held 5 s after the blip");
    }
}

/// On a Redis Cluster, a release sent while its slot has no master (the master killed,
/// its replica not yet elected: connections refused, then `CLUSTERDOWN`) is answered once
/// the replica took over, where the lease lives on (the grant waited for the replica):
/// `true`, and the name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_a_cluster_slot_has_no_master_frees_the_name_on_its_successor() {
    let mut cluster = RedisCluster::start(3, 1);
    let (holder, other) = (holder_on(&cluster), holder_on(&cluster));
    // A name per kind, each in a shard of its own, looked up while every node answers.
    let mut runs: Vec<(Kind, String, usize)> = Vec::new();
    for (kind, n) in [Kind::Lock, Kind::Permit, Kind::Read].into_iter().zip(0..) {
        let (name, master) = (0..)
            .map(|i| format!("headless{n}-{i}"))
            .map(|name| {
                let master = cluster.master_of(&kind.key(&name));
                (name, master)
            })
            .find(|(_, master)| runs.iter().all(|run| run.2 != *master))
            .expect("a name in a shard of its own");
        runs.push((kind, name, master));
    }
    for (kind, name, master) in &runs {
        tokio::task::block_in_place(|| {
            crate::failover::until_replica_online(&cluster.nodes[*master]);
        });
        let held = hold(&holder, *kind, name).await;
        cluster.nodes[*master].kill();
        let begun = std::time::Instant::now();
        let released = held.release().await;
        eprintln!(
            "{kind:?}: released {:?} after its master was killed",
            begun.elapsed()
        );
        assert!(
            matches!(released, Ok(true)),
            "{kind:?}: a release sent to a slot without a master answered {released:?}"
        );
        assert!(
            free(&other, *kind, name).await,
            "{kind:?}: still held after its release"
        );
    }
}

/// A multi-lock over two names in different shards of `cluster`, the first name's master
/// killed right after it was taken: the names, the lease, its Locker and another one.
async fn multi_with_a_headless_shard(
    cluster: &mut RedisCluster,
) -> ([String; 2], lock_core::MultiLease, Locker, Locker) {
    let (holder, other) = (holder_on(cluster), holder_on(cluster));
    let first = "multi-a".to_owned();
    let first_master = cluster.master_of(&Kind::Lock.key(&first));
    let second = (0..)
        .map(|i| format!("multi-b{i}"))
        .find(|name| cluster.master_of(&Kind::Lock.key(name)) != first_master)
        .expect("a name in another shard");
    tokio::task::block_in_place(|| {
        crate::failover::until_replica_online(&cluster.nodes[first_master]);
    });
    let held = holder
        .lock_all([first.as_str(), second.as_str()])
        .ttl(TTL)
        .await
        .expect("both locks");
    cluster.nodes[first_master].kill();
    ([first, second], held, holder, other)
}

/// A multi-lock across two shards of a Cluster, released while one shard has no master:
/// the other shard's lock is given back at once, the headless one once its replica took
/// over, and the release says `true` (a retry of every lock would find the first one gone
/// and could not say so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_released_while_one_shard_has_no_master_frees_every_name() {
    let mut cluster = RedisCluster::start(3, 1);
    let (names, held, _holder, other) = multi_with_a_headless_shard(&mut cluster).await;
    let begun = std::time::Instant::now();
    let released = held.release().await;
    eprintln!("released {:?} after a master was killed", begun.elapsed());
    assert!(
        matches!(released, Ok(true)),
        "a multi-lock release with one shard headless answered {released:?}"
    );
    for name in &names {
        assert!(
            free(&other, Kind::Lock, name).await,
            "{name}: still held after its release"
        );
    }
}

/// The same release dropped while it retries (the caller's `timeout` ran out before the
/// replica took over) is finished in the background: both names are free once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_release_dropped_while_one_shard_has_no_master_frees_every_name() {
    let mut cluster = RedisCluster::start(3, 1);
    let (names, held, _holder, other) = multi_with_a_headless_shard(&mut cluster).await;
    let cut = tokio::time::timeout(Duration::from_millis(300), held.release()).await;
    assert!(cut.is_err(), "answered with a shard headless: {cut:?}");
    let begun = std::time::Instant::now();
    for name in &names {
        while !free(&other, Kind::Lock, name).await {
            assert!(
                begun.elapsed() < 20 * SECOND,
                "{name}: still held 20 s after its release was dropped"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!("both names free {:?} after the drop", begun.elapsed());
}
