//! Countdown latches (`Locker::latch`): counted down by several processes, waited on by
//! many, all woken by the one opening; a round that expires tells its waiters; re-arming
//! neither wakes an old round's waiter nor loses a new one's; misuse is an error. On one
//! Redis, a Cluster, Sentinel and in memory.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::{RedisCluster, RedisServer};

const SECOND: Duration = Duration::from_secs(1);

/// Four processes (lockers) count down; six waiters over three lockers all return once,
/// after the last count-down and not before.
async fn counted_down_by_many_and_waited_on_by_many(lockers: Vec<Locker>) {
    let latch = lockers[0].latch("deploy:42");
    latch.arm(4, 60 * SECOND).await.expect("arm");
    let mut waiters = Vec::new();
    for i in 0..6 {
        let latch = lockers[i % 3].latch("deploy:42");
        waiters.push(tokio::spawn(async move {
            latch.wait(30 * SECOND).await.map(|()| Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut last = None;
    for (i, locker) in lockers.iter().cycle().take(4).enumerate() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "a waiter proceeded before the latch opened"
        );
        // The opening happens inside the last call: no waiter may return before it began.
        last = Some(Instant::now());
        let left = locker
            .latch("deploy:42")
            .count_down()
            .await
            .expect("count down");
        assert_eq!(left, 3 - i as u64);
    }
    let opened_at = last.expect("counted");
    for waiter in waiters {
        let woke = tokio::time::timeout(10 * SECOND, waiter)
            .await
            .expect("every waiter is woken by the opening")
            .expect("join")
            .expect("opened");
        assert!(woke >= opened_at, "woke before the last count-down");
    }
    // A waiter arriving after the opening returns at once.
    latch.wait(Duration::ZERO).await.expect("already open");
    let state = latch.state().await.expect("state").expect("a latch");
    assert_eq!((state.remaining, state.count), (0, 4));
}

fn lockers_on(url: &str, n: usize) -> Vec<Locker> {
    (0..n)
        .map(|_| Locker::from_url(url).expect("locker"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_for_every_waiter_on_one_redis() {
    let server = RedisServer::start();
    counted_down_by_many_and_waited_on_by_many(lockers_on(&server.url(), 4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_for_every_waiter_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let lockers = (0..4)
        .map(|_| {
            Locker::builder()
                .cluster(cluster.urls())
                .build()
                .expect("cluster locker")
        })
        .collect();
    counted_down_by_many_and_waited_on_by_many(lockers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_for_every_waiter_behind_sentinel() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let lockers = (0..4)
        .map(|_| {
            Locker::builder()
                .sentinel([sentinel.url()], "locks")
                .build()
                .expect("sentinel locker")
        })
        .collect();
    counted_down_by_many_and_waited_on_by_many(lockers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opens_for_every_waiter_in_memory() {
    let locker = Locker::memory();
    counted_down_by_many_and_waited_on_by_many(vec![locker; 4]).await;
}

/// The waiters are woken by the message, not by a timer: with the round's TTL and the
/// waits far away, each waiter returns well before either (a poll or a TTL-driven look
/// would take 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_the_opening_message() {
    let server = RedisServer::start();
    let lockers = lockers_on(&server.url(), 2);
    let latch = lockers[0].latch("batch");
    latch.arm(1, 60 * SECOND).await.expect("arm");
    let waiter = {
        let latch = lockers[1].latch("batch");
        tokio::spawn(async move { latch.wait(60 * SECOND).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    latch.count_down().await.expect("count down");
    tokio::time::timeout(20 * SECOND, waiter)
        .await
        .expect("woken by the opening, not at the TTL or the wait")
        .expect("join")
        .expect("opened");
}

/// A round whose counting process died expires at its TTL, and its waiters are told so
/// instead of waiting out their own (much longer) wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_nobody_finishes_expires_and_its_waiters_are_told() {
    let server = RedisServer::start();
    let lockers = lockers_on(&server.url(), 2);
    let latch = lockers[0].latch("import");
    latch.arm(2, Duration::from_millis(500)).await.expect("arm");
    latch.count_down().await.expect("one of two");
    let started = Instant::now();
    let waited = lockers[1].latch("import").wait(30 * SECOND).await;
    assert!(
        matches!(&waited, Err(LockError::LatchExpired { name }) if name == "import"),
        "{waited:?}"
    );
    assert!(
        started.elapsed() < 20 * SECOND,
        "told at the TTL, not at the wait's end"
    );
    let message = waited.unwrap_err().to_string();
    assert!(message.contains("expired before it opened"), "{message}");
    // Gone: counting down or waiting now says so.
    assert!(matches!(
        latch.count_down().await,
        Err(LockError::LatchNotFound { .. })
    ));
}

/// Re-arming: a waiter of the old round returns (its round opened), a waiter that arrives
/// after the re-arm waits for the new round, and the new round's opening ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_do_not_mix() {
    let server = RedisServer::start();
    let lockers = lockers_on(&server.url(), 2);
    let latch = lockers[0].latch("nightly");
    let first = latch.arm(1, 60 * SECOND).await.expect("arm");
    // Re-arming while the round counts is refused: its waiters would never see it open.
    match latch.arm(1, 60 * SECOND).await {
        Err(LockError::LatchStillCounting { remaining: 1, .. }) => {}
        other => panic!("expected LatchStillCounting, got {other:?}"),
    }
    latch.count_down().await.expect("open the first round");
    let second = latch.arm(2, 60 * SECOND).await.expect("re-arm");
    assert_ne!(first, second, "a round id of its own");
    // A waiter of the new round is not released by the first round's opening.
    let new_waiter = {
        let latch = lockers[1].latch("nightly");
        tokio::spawn(async move { latch.wait(30 * SECOND).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!new_waiter.is_finished(), "the new round has not opened");
    latch.count_down().await.expect("1 of 2");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!new_waiter.is_finished(), "the new round has not opened");
    latch.count_down().await.expect("2 of 2");
    tokio::time::timeout(10 * SECOND, new_waiter)
        .await
        .expect("woken by the new round's opening")
        .expect("join")
        .expect("opened");
}

/// A waiter on a latch never armed, a count-down below zero, a wait that runs out: each an
/// error that names the problem, and nothing is changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_is_an_error_that_names_the_fix() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let never = locker.latch("never");
    let waited = never.wait(SECOND).await.expect_err("no latch");
    assert!(
        matches!(waited, LockError::LatchNotFound { .. }),
        "{waited:?}"
    );
    assert!(waited.to_string().contains("Latch::arm"), "{waited}");
    assert!(matches!(
        never.count_down().await,
        Err(LockError::LatchNotFound { .. })
    ));

    let latch = locker.latch("twice");
    latch.arm(2, 60 * SECOND).await.expect("arm");
    let below = latch.count_down_by(3).await.expect_err("below zero");
    assert!(
        matches!(
            below,
            LockError::LatchCountBelowZero {
                remaining: 2,
                asked: 3,
                ..
            }
        ),
        "{below:?}"
    );
    assert!(
        below.to_string().contains("only 2 count-downs are left"),
        "{below}"
    );
    assert_eq!(
        latch
            .state()
            .await
            .expect("state")
            .expect("a latch")
            .remaining,
        2,
        "unchanged"
    );

    let waited = latch
        .wait(Duration::from_millis(200))
        .await
        .expect_err("times out");
    assert!(
        matches!(waited, LockError::LatchTimeout { remaining: 2, .. }),
        "{waited:?}"
    );
    assert!(matches!(
        latch.arm(0, SECOND).await,
        Err(LockError::Config(_))
    ));
}

/// Where latches are not available, the error says why and what to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_latches_with_the_reason() {
    let nodes: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let locker = Locker::builder()
        .redlock(nodes.iter().map(RedisServer::url))
        .build()
        .expect("redlock");
    match locker.latch("x").arm(1, SECOND).await {
        Err(LockError::Config(message)) => assert!(message.contains("Redlock"), "{message}"),
        other => panic!("expected Config, got {other:?}"),
    }
}
