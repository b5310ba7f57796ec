//! A semaphore's capacity changed while it is in use (`Semaphore::set_capacity`), on real
//! redis-server processes, a Cluster and in memory: raising it lets a queued waiter in at
//! once (woken, not polled), lowering it keeps every holder and grants nothing until fewer
//! are held, concurrent changes end with one of the numbers, and a request asking another
//! number is judged against the one set.

use std::future::IntoFuture as _;
use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

async fn waiting(locker: &Locker, name: &str, n: u64) {
    for _ in 0..1000 {
        let holders = locker.semaphore(name, 1).holders().await.expect("holders");
        if holders.waiting == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {n} waiting on `{name}`");
}

/// One permit held for 60s, one request waiting for 30s on another Locker: only the raise
/// can let it in before the holder's permit ends (nothing else wakes it), so it is granted
/// well within its wait and the holder keeps its permit.
async fn raising_lets_a_waiter_in_at_once(one: Locker, other: Locker) {
    let name = "raise";
    let semaphore = one.semaphore(name, 1);
    let held = semaphore.acquire().ttl(60 * SECOND).await.expect("1 of 1");
    let queued = tokio::spawn(
        other
            .semaphore(name, 1)
            .acquire()
            .ttl(60 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    waiting(&one, name, 1).await;
    assert_eq!(semaphore.set_capacity(2).await.expect("raise"), Some(1));
    let granted = tokio::time::timeout(10 * SECOND, queued)
        .await
        .expect("the waiter was let in by the raise, not left to its wait")
        .expect("join")
        .expect("the waiter's permit");
    let holders = semaphore.holders().await.expect("holders");
    assert_eq!(holders.holders.len(), 2);
    assert_eq!(holders.capacity, Some(2));
    assert!(!held.is_lost(), "the holder keeps its permit");
    // Full at the new number.
    assert!(matches!(
        semaphore.try_acquire(10 * SECOND).await,
        Err(LockError::LimitReached { .. })
    ));
    drop((held, granted));
}

/// Three holders, the capacity lowered to one: all three keep their permits; a waiter stays
/// queued while 2 and then 1 are held, and gets in once none is.
async fn lowering_revokes_nobody(locker: Locker) {
    let name = "lower";
    let semaphore = locker.semaphore(name, 3);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            semaphore
                .acquire()
                .ttl(60 * SECOND)
                .await
                .expect("a permit"),
        );
    }
    assert_eq!(semaphore.set_capacity(1).await.expect("lower"), Some(3));
    for permit in &held {
        assert!(!permit.is_lost());
        permit.extend(60 * SECOND).await.expect("still held");
    }
    assert_eq!(semaphore.holders().await.expect("holders").holders.len(), 3);
    let queued = tokio::spawn(
        semaphore
            .acquire()
            .ttl(60 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    waiting(&locker, name, 1).await;
    for left in [2, 1] {
        assert!(held
            .pop()
            .expect("a permit")
            .release()
            .await
            .expect("release"));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let holders = semaphore.holders().await.expect("holders");
        assert_eq!(holders.holders.len(), left, "nobody let in at {left} held");
        assert_eq!(holders.waiting, 1);
        assert!(!queued.is_finished());
    }
    assert!(held
        .pop()
        .expect("the last")
        .release()
        .await
        .expect("release"));
    let granted = tokio::time::timeout(10 * SECOND, queued)
        .await
        .expect("let in once fewer than 1 were held")
        .expect("join")
        .expect("the waiter's permit");
    assert_eq!(semaphore.holders().await.expect("holders").holders.len(), 1);
    drop(granted);
}

/// A request asking for another number is judged against the number set, not refused with
/// `CapacityMismatch`; more permits at once than the number set is refused.
async fn the_number_set_wins(locker: Locker) {
    let name = "pinned";
    let five = locker.semaphore(name, 5);
    assert_eq!(five.set_capacity(2).await.expect("set"), None, "was idle");
    assert_eq!(five.holders().await.expect("holders").capacity, Some(2));
    let a = five.try_acquire(10 * SECOND).await.expect("1 of 2");
    let b = locker
        .semaphore(name, 7)
        .try_acquire(10 * SECOND)
        .await
        .expect("2 of 2, asked as 7");
    // The limit the error names is the number set, not the handle's own (a try, and a
    // wait that runs out).
    match five.try_acquire(10 * SECOND).await {
        Err(err @ LockError::LimitReached { permits: 2, .. }) => {
            assert!(err.to_string().contains("2 permits"), "{err}");
        }
        other => panic!("expected the limit of 2 set, got {other:?}"),
    }
    match five
        .acquire()
        .ttl(10 * SECOND)
        .wait(Duration::from_millis(50))
        .await
    {
        Err(LockError::LimitReached {
            permits: 2,
            waited: Some(_),
            ..
        }) => {}
        other => panic!("expected the limit of 2 set after a wait, got {other:?}"),
    }
    assert!(matches!(
        five.acquire_many(3).wait(Duration::ZERO).await,
        Err(LockError::PermitsAboveCapacity {
            asked: 3,
            permits: 2,
            ..
        })
    ));
    assert!(matches!(
        five.set_capacity(0).await,
        Err(LockError::Config(_))
    ));
    drop((a, b));
}

/// Two changes at once end with one of the two numbers, and the semaphore admits exactly
/// that many.
async fn concurrent_changes_are_atomic(one: Locker, other: Locker) {
    for round in 0..5u64 {
        let name = format!("race{round}");
        let (x, y) = (
            one.semaphore(name.as_str(), 1),
            other.semaphore(name.as_str(), 1),
        );
        let (left, right) = tokio::join!(x.set_capacity(2 + round), y.set_capacity(10 + round));
        left.expect("set");
        right.expect("set");
        let stored = x
            .holders()
            .await
            .expect("holders")
            .capacity
            .expect("stored");
        assert!(stored == 2 + round || stored == 10 + round, "{stored}");
        let mut held = Vec::new();
        while let Ok(permit) = x.try_acquire(10 * SECOND).await {
            held.push(permit);
            assert!(held.len() <= 20, "no bound");
        }
        assert_eq!(held.len() as u64, stored);
    }
}

/// A number below what a waiting request asks for at once is refused (that request could
/// never be granted, and would hold back everyone behind it).
async fn below_a_waiters_weight_is_refused(locker: Locker) {
    let name = "heavy";
    let semaphore = locker.semaphore(name, 4);
    let held = semaphore.acquire().ttl(60 * SECOND).await.expect("1 of 4");
    let queued = tokio::spawn(
        semaphore
            .acquire_many(4)
            .ttl(60 * SECOND)
            .wait(30 * SECOND)
            .into_future(),
    );
    waiting(&locker, name, 1).await;
    let refused = semaphore.set_capacity(3).await;
    assert!(
        matches!(&refused, Err(LockError::Config(text)) if text.contains("4 permits")),
        "{refused:?}"
    );
    assert_eq!(
        semaphore.holders().await.expect("holders").capacity,
        Some(4)
    );
    held.release().await.expect("release");
    let granted = queued.await.expect("join").expect("4 of 4");
    drop(granted);
}

fn pair(server: &RedisServer) -> (Locker, Locker) {
    (
        Locker::from_url(&server.url()).expect("locker"),
        Locker::from_url(&server.url()).expect("locker"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_changes_on_redis() {
    let server = RedisServer::start();
    let (one, other) = pair(&server);
    raising_lets_a_waiter_in_at_once(one.clone(), other.clone()).await;
    lowering_revokes_nobody(one.clone()).await;
    the_number_set_wins(other.clone()).await;
    concurrent_changes_are_atomic(one.clone(), other).await;
    below_a_waiters_weight_is_refused(one).await;
    // The pin lives with the keys: at least a day on an idle semaphore.
    let ttl = server.command(&["PTTL", "lock:{pinned}:sem"]);
    let ttl = ttl
        .trim()
        .trim_start_matches(':')
        .parse::<i64>()
        .unwrap_or(-1);
    assert!(ttl > 23 * 3600 * 1000, "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_changes_in_memory() {
    let locker = Locker::memory();
    raising_lets_a_waiter_in_at_once(locker.clone(), locker.clone()).await;
    lowering_revokes_nobody(locker.clone()).await;
    the_number_set_wins(locker.clone()).await;
    concurrent_changes_are_atomic(locker.clone(), locker.clone()).await;
    below_a_waiters_weight_is_refused(locker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_changes_on_a_cluster() {
    let cluster = lock_tests::RedisCluster::start(3, 0);
    let on = || {
        Locker::builder()
            .cluster(cluster.urls())
            .build()
            .expect("cluster locker")
    };
    raising_lets_a_waiter_in_at_once(on(), on()).await;
    lowering_revokes_nobody(on()).await;
}
