//! A read-write lock's writer stepping down to a reader (`RwLease::downgrade`): atomic (no
//! writer in between), the readers queued behind it let in, the writer queued behind them
//! kept waiting; and a reader's upgrade refused. On one Redis (scripts and Functions), a
//! Cluster and in memory.

use std::future::IntoFuture as _;
use std::time::{Duration, Instant};

use lock_core::{HoldMode, LockError, Locker, RwLock, ScriptMode};
use lock_tests::{RedisCluster, RedisServer};

const SECOND: Duration = Duration::from_secs(1);

/// Polls `holders()` until `waiting` requests wait (the test's way of ordering arrivals).
async fn until_waiting(lock: &RwLock, waiting: u64) {
    let deadline = Instant::now() + 10 * SECOND;
    while lock.holders().await.expect("holders").waiting < waiting {
        assert!(Instant::now() < deadline, "{waiting} requests never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `a` writes; `b` queues a reader, then a writer behind it. `a` steps down: the reader gets
/// in beside it at once (not at the writer's 30 s TTL, when it would look again by
/// itself); the writer waits, and so does a reader arriving after it (FIFO). The writer
/// gets in once both readers leave.
async fn downgrade_lets_the_readers_ahead_in(a: Locker, b: Locker) {
    let lock = a.rwlock("catalog");
    let mut writer = lock.write().ttl(30 * SECOND).await.expect("write lease");
    let token = writer.token().to_owned();
    let theirs = b.rwlock("catalog");
    let reader = tokio::spawn(
        theirs
            .read()
            .ttl(30 * SECOND)
            .wait(20 * SECOND)
            .into_future(),
    );
    until_waiting(&lock, 1).await;
    let next_writer = tokio::spawn(
        theirs
            .write()
            .ttl(30 * SECOND)
            .wait(20 * SECOND)
            .into_future(),
    );
    until_waiting(&lock, 2).await;

    writer.downgrade().await.expect("downgrade");
    assert_eq!(writer.mode(), HoldMode::Read);
    assert_eq!(writer.token(), token, "the same lease");
    let reader = tokio::time::timeout(10 * SECOND, reader)
        .await
        .expect("the reader queued behind the writer is let in at once")
        .expect("join")
        .expect("read lease");
    assert_eq!(reader.mode(), HoldMode::Read);
    let now = lock.holders().await.expect("holders");
    assert_eq!(now.holders.len(), 2, "two readers: {now:?}");
    assert!(now.holders.iter().all(|h| h.mode == HoldMode::Read));
    assert_eq!(now.waiting, 1, "the writer waits");
    assert!(!next_writer.is_finished());
    // No writer barges in either.
    assert!(matches!(
        b.rwlock("catalog").write().wait(Duration::ZERO).await,
        Err(LockError::Busy { .. })
    ));
    // A reader arriving now queues behind the waiting writer (FIFO): refused at once.
    assert!(b
        .rwlock("catalog")
        .read()
        .wait(Duration::ZERO)
        .await
        .is_err());

    writer
        .extend(30 * SECOND)
        .await
        .expect("extended as a reader");
    assert!(writer.is_held().await.expect("is_held"));
    assert!(
        writer.release().await.expect("release"),
        "still ours as a reader"
    );
    assert!(!next_writer.is_finished(), "one reader is still inside");
    assert!(reader.release().await.expect("release"));
    let next_writer = tokio::time::timeout(10 * SECOND, next_writer)
        .await
        .expect("the writer gets in once the readers left")
        .expect("join")
        .expect("write lease");
    assert_eq!(next_writer.mode(), HoldMode::Write);
    assert!(next_writer.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_on_one_redis() {
    let server = RedisServer::start();
    let on = || Locker::from_url(&server.url()).expect("locker");
    downgrade_lets_the_readers_ahead_in(on(), on()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_on_one_redis_with_functions() {
    let server = RedisServer::start();
    let on = || {
        Locker::builder()
            .url(server.url())
            .script_mode(ScriptMode::Functions)
            .build()
            .expect("locker")
    };
    downgrade_lets_the_readers_ahead_in(on(), on()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let on = || {
        Locker::builder()
            .cluster(cluster.urls())
            .build()
            .expect("cluster locker")
    };
    downgrade_lets_the_readers_ahead_in(on(), on()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_in_memory() {
    let locker = Locker::memory();
    downgrade_lets_the_readers_ahead_in(locker.clone(), locker).await;
}

/// Both sides in one Locker: its own waiting readers are granted from the script's reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downgrade_within_one_locker() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    downgrade_lets_the_readers_ahead_in(locker.clone(), locker).await;
}

/// Auto-renewal goes on across the step down (the renewal crossing it renews the reader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_writer_stays_renewed_as_a_reader() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lock = locker.rwlock("feed");
    let mut lease = lock
        .write()
        .ttl(Duration::from_millis(300))
        .auto_renew()
        .await
        .expect("write lease");
    tokio::time::sleep(Duration::from_millis(150)).await;
    lease.downgrade().await.expect("downgrade");
    tokio::time::sleep(SECOND).await;
    assert!(!lease.is_lost(), "renewed as a reader");
    assert!(lease.is_held().await.expect("is_held"));
    let holders = lock.holders().await.expect("holders");
    assert_eq!(holders.holders.len(), 1);
    assert_eq!(holders.holders[0].mode, HoldMode::Read);
    assert!(lease.release().await.expect("release"));
}

/// A writer whose lease ran out cannot step down: `Lost`, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_writer_cannot_step_down() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lock = locker.rwlock("gone");
    let mut lease = lock
        .write()
        .ttl(Duration::from_millis(100))
        .await
        .expect("write lease");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        lease.downgrade().await,
        Err(LockError::Lost { .. })
    ));
    assert!(lock.holders().await.expect("holders").holders.is_empty());
}

/// A reader's upgrade is refused with the reason, and the read lease is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_upgrade_is_refused_with_the_reason() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let mut reader = locker.rwlock("doc").read().await.expect("read lease");
    let refused = reader.upgrade().expect_err("refused");
    assert!(
        matches!(&refused, LockError::UpgradeRefused { name } if name == "doc"),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("would each wait for the other"),
        "{message}"
    );
    assert!(message.contains("downgrade()"), "{message}");
    assert!(
        reader.is_held().await.expect("is_held"),
        "the read lease is kept"
    );
    assert_eq!(reader.mode(), HoldMode::Read);
    let mut writer = {
        reader.release().await.expect("release");
        locker.rwlock("doc").write().await.expect("write lease")
    };
    writer.upgrade().expect("a writer is left as it is");
}

/// The blocking API steps down the same way.
#[test]
fn a_blocking_writer_steps_down() {
    let server = RedisServer::start();
    let locker = lock_core::blocking::Locker::from_url(&server.url()).expect("locker");
    let lock = locker.rwlock("blocking");
    let mut lease = lock.write().acquire().expect("write lease");
    lease.downgrade().expect("downgrade");
    assert_eq!(lease.mode(), HoldMode::Read);
    let _other = lock
        .read()
        .wait(Duration::ZERO)
        .acquire()
        .expect("a reader beside it");
    assert!(matches!(
        lease.upgrade(),
        Err(LockError::UpgradeRefused { .. })
    ));
}
