//! Lock-order deadlocks across Lockers (as separate processes would be): a request that
//! would close a cycle of waiters fails at once with `LockError::Deadlock`, the others get
//! through; the same requests in one order never are told; a chain without a cycle waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;
use tokio::sync::Barrier;

/// Long enough that a wait running out is never mistaken for a detection.
const WAIT: Duration = Duration::from_secs(5);

/// What one nesting task came to: the inner request's result and how long it took.
type Outcome = (Result<(), LockError>, Duration);

/// Holds `first`, waits at `barrier` until every task holds its first lock, then takes
/// `second` inside it (nested `using`, as `#[redis_locked]` functions nest).
async fn nest(locker: Locker, first: String, second: String, barrier: Arc<Barrier>) -> Outcome {
    let inner = locker.clone();
    locker
        .lock(first)
        .wait(WAIT)
        .using(|_| async move {
            barrier.wait().await;
            let started = Instant::now();
            let result = inner
                .lock(second)
                .wait(WAIT)
                .using(|_| async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok::<_, LockError>(())
                })
                .await;
            Ok::<_, LockError>((result, started.elapsed()))
        })
        .await
        .expect("the outer lock is free")
}

/// Runs one task per (first, second) pair, each on a Locker of its own.
async fn round(lockers: &[Locker], pairs: &[(String, String)]) -> Vec<Outcome> {
    let barrier = Arc::new(Barrier::new(pairs.len()));
    let tasks: Vec<_> = pairs
        .iter()
        .zip(lockers)
        .map(|((first, second), locker)| {
            tokio::spawn(nest(
                locker.clone(),
                first.clone(),
                second.clone(),
                Arc::clone(&barrier),
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    outcomes
}

/// A ring of `n` names taken in a ring: exactly one task is told, within 1 s, with the
/// whole cycle, and every other one gets through.
async fn ring_is_broken(lockers: &[Locker], n: usize, tag: &str) {
    let names: Vec<String> = (0..n).map(|i| format!("dl:{tag}:{i}")).collect();
    let pairs: Vec<(String, String)> = (0..n)
        .map(|i| (names[i].clone(), names[(i + 1) % n].clone()))
        .collect();
    let outcomes = round(&lockers[..n], &pairs).await;
    let mut told = 0;
    for (i, (result, took)) in outcomes.iter().enumerate() {
        match result {
            Ok(()) => {}
            Err(LockError::Deadlock { name, cycle }) => {
                told += 1;
                assert!(*took < Duration::from_secs(1), "told after {took:?}");
                assert_eq!(*name, pairs[i].1);
                assert_eq!(cycle.len(), n, "{cycle:?}");
                assert_eq!(cycle[0].name(), pairs[i].1);
                assert_eq!(cycle[n - 1].name(), pairs[i].0, "ends at what it holds");
                let mut seen: Vec<&str> = cycle.iter().map(|link| link.name()).collect();
                seen.sort_unstable();
                let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
                all.sort_unstable();
                assert_eq!(seen, all);
                assert!(cycle.iter().all(|link| link.holder().is_some()));
                let text = result.as_ref().unwrap_err().to_string();
                assert!(text.contains("would deadlock"), "{text}");
            }
            Err(other) => panic!("task {i}: expected a grant or Deadlock, got {other}"),
        }
    }
    assert_eq!(told, 1, "exactly one victim: {outcomes:?}");
}

fn lockers(url: &str, n: usize) -> Vec<Locker> {
    (0..n)
        .map(|i| {
            Locker::builder()
                .url(url)
                .holder_label(format!("proc-{i}"))
                .build()
                .expect("locker")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_and_three_lockers_in_a_cycle_are_told_and_one_completes() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 3);
    for round in 0..5 {
        ring_is_broken(&lockers, 2, &format!("two{round}")).await;
        ring_is_broken(&lockers, 3, &format!("three{round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_the_same() {
    let locker = Locker::memory();
    let lockers = vec![locker.clone(), locker.clone(), locker];
    for round in 0..5 {
        ring_is_broken(&lockers, 2, &format!("two{round}")).await;
        ring_is_broken(&lockers, 3, &format!("three{round}")).await;
    }
}

/// The same tasks taking the names in one order never form a cycle: never told, all get
/// through, over hundreds of rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_is_never_told() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 3);
    for round in 0..200 {
        let a = format!("order:{}:a", round % 7);
        let b = format!("order:{}:b", round % 7);
        let c = format!("order:{}:c", round % 7);
        let pairs = [(a.clone(), b.clone()), (a.clone(), b), (b_of(&a), c)];
        let outcomes = round_of(&lockers, &pairs).await;
        for (i, (result, _)) in outcomes.iter().enumerate() {
            assert!(result.is_ok(), "round {round}, task {i}: {result:?}");
        }
    }
}

fn b_of(a: &str) -> String {
    a.replace(":a", ":b")
}

/// Like `round`, without the barrier (tasks that take the same first name cannot all hold
/// it at once).
async fn round_of(lockers: &[Locker], pairs: &[(String, String)]) -> Vec<Outcome> {
    let tasks: Vec<_> = pairs
        .iter()
        .zip(lockers)
        .map(|((first, second), locker)| {
            tokio::spawn(nest(
                locker.clone(),
                first.clone(),
                second.clone(),
                Arc::new(Barrier::new(1)),
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    outcomes
}

/// A chain without a cycle (1 holds A, waits for B; 2 holds B, waits for C; 3 holds C for
/// a while): everyone waits, and everyone completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_without_a_cycle_waits_and_completes() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 3);
    let holder = lockers[2]
        .lock("chain:c")
        .ttl(Duration::from_secs(10))
        .await
        .expect("c");
    let barrier = Arc::new(Barrier::new(3));
    let one = tokio::spawn(nest(
        lockers[0].clone(),
        "chain:a".into(),
        "chain:b".into(),
        Arc::clone(&barrier),
    ));
    let two = tokio::spawn(nest(
        lockers[1].clone(),
        "chain:b".into(),
        "chain:c".into(),
        Arc::clone(&barrier),
    ));
    barrier.wait().await;
    tokio::time::sleep(Duration::from_millis(600)).await; // several rechecks
    assert!(holder.release().await.expect("release"));
    for task in [one, two] {
        let (result, took) = task.await.expect("task");
        assert!(result.is_ok(), "{result:?}");
        assert!(took < WAIT);
    }
}

/// No cost where nothing can deadlock: a task that holds nothing and waits never runs the
/// deadlock check nor its clean-up (the check's script is unknown to the server after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_holding_nothing_makes_no_deadlock_call() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    let held = lockers[0].lock("free:x").await.expect("x");
    let waiter = {
        let locker = lockers[1].clone();
        tokio::spawn(async move { locker.lock("free:x").wait(WAIT).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.release().await.expect("release"));
    let lease = waiter.await.expect("task").expect("granted");
    drop(lease);
    // Nested, uncontended: the inner request takes the fast path, no check either.
    lockers[0]
        .using("free:outer", |_| async {
            lockers[0].lock("free:inner").await.map(drop)
        })
        .await
        .expect("nested");
    let sha = redis::Script::new(include_str!("../../lock-core/src/scripts/waits_for.lua"))
        .get_hash()
        .to_owned();
    assert_eq!(server.command(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
    // The check reads records with HGETALL (counted inside scripts too); nothing else does.
    let stats = server.command(&["INFO", "commandstats"]);
    assert!(!stats.contains("cmdstat_hgetall"), "{stats}");
}

#[lock_core::redis_locked(key = "attr:{first}", wait = "5s", locker = locker)]
async fn outer_annotated(
    locker: &Locker,
    first: &str,
    second: &str,
    barrier: &Barrier,
) -> Result<(), LockError> {
    barrier.wait().await;
    inner_annotated(locker, second).await
}

#[lock_core::redis_locked(key = "attr:{second}", wait = "5s", locker = locker)]
async fn inner_annotated(locker: &Locker, second: &str) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

/// Nested `#[redis_locked]` calls in opposite orders: one of them gets `Deadlock` at once,
/// the other completes; a web handler answers that error 409 Conflict with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_annotated_calls_in_opposite_orders() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    for _ in 0..5 {
        let barrier = Arc::new(Barrier::new(2));
        let started = Instant::now();
        let (one, two) = tokio::join!(
            outer_annotated(&lockers[0], "x", "y", &barrier),
            outer_annotated(&lockers[1], "y", "x", &barrier)
        );
        let (told, through) = match (one, two) {
            (Err(err), Ok(())) | (Ok(()), Err(err)) => (err, true),
            other => panic!("expected one Deadlock and one success, got {other:?}"),
        };
        assert!(through);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(told, LockError::Deadlock { .. }), "{told}");
        assert!(told.is_contention());
        let problem = lock_core::web::ErrorResponses::new().problem(&told);
        assert_eq!(problem.status().as_u16(), 409);
        assert_eq!(problem.retry_after_secs(), Some(1));
    }
}

/// Leases taken with plain `lock()` count once named with `holding`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_named_with_holding_are_checked() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    let a = lockers[0].lock("imp:a").await.expect("a");
    let b = lockers[1].lock("imp:b").await.expect("b");
    let (one, two) = tokio::join!(
        async {
            let got = lockers[0].lock("imp:b").wait(WAIT).holding(&a).await;
            drop(a);
            got
        },
        async {
            let got = lockers[1].lock("imp:a").wait(WAIT).holding(&b).await;
            drop(b);
            got
        }
    );
    match (one, two) {
        (Err(LockError::Deadlock { .. }), Ok(_)) | (Ok(_), Err(LockError::Deadlock { .. })) => {}
        other => panic!("expected one Deadlock and one grant, got {other:?}"),
    }
}

/// `waits_for` shows who waits for a lock while holding what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_of_a_name_are_listed() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    let held = lockers[1].lock("show:b").await.expect("b");
    let waiter = {
        let locker = lockers[0].clone();
        tokio::spawn(async move {
            let inner = locker.clone();
            locker
                .using("show:a", |_| async move {
                    inner.lock("show:b").wait(WAIT).await.map(drop)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waits = lockers[1].waits_for("show:b").await.expect("waits");
    assert!(waits.held);
    assert_eq!(waits.holder.as_deref(), Some("proc-1"));
    assert_eq!(waits.waiters.len(), 1, "{waits:?}");
    assert_eq!(waits.waiters[0].holding, vec!["show:a".to_owned()]);
    assert_eq!(waits.waiters[0].label.as_deref(), Some("proc-0"));
    let of_a = lockers[1].waits_for("show:a").await.expect("waits");
    assert_eq!(of_a.holder_waits_for, vec!["show:b".to_owned()]);
    assert!(held.release().await.expect("release"));
    waiter.await.expect("task").expect("granted");
    // The wait ended: its records are gone (deleted in the background).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = lockers[1].waits_for("show:a").await.expect("waits");
    assert!(after.holder_waits_for.is_empty(), "{after:?}");
    let left = server.command(&["EXISTS", "lock:{show:a}:wf", "lock:{show:b}:wf"]);
    assert_eq!(left, ":0\r\n", "records left behind");
}

/// On a Cluster a check declares only keys of one slot: locks under one hash tag (here the
/// prefix's) are checked as on one Redis; locks in different slots are not, and their
/// cycle is never reported (they wait, as without detection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_one_slot_is_checked_and_others_never_told() {
    let cluster = lock_tests::RedisCluster::start(3, 0);
    let build = |prefix: &str, i: usize| {
        Locker::builder()
            .cluster(cluster.urls())
            .prefix(prefix)
            .holder_label(format!("proc-{i}"))
            .build()
            .expect("cluster locker")
    };
    let tagged: Vec<Locker> = (0..3).map(|i| build("{dl}:", i)).collect();
    ring_is_broken(&tagged, 2, "c2").await;
    ring_is_broken(&tagged, 3, "c3").await;
    // Two names on different masters.
    let layout = lock_core::KeyLayout::new("lock:");
    let first = "spread:0".to_owned();
    let second = (1..100)
        .map(|i| format!("spread:{i}"))
        .find(|name| {
            cluster.master_of(&layout.lock_key(name)) != cluster.master_of(&layout.lock_key(&first))
        })
        .expect("a name on another master");
    let plain: Vec<Locker> = (0..2).map(|i| build("lock:", i)).collect();
    let outcomes = round(
        &plain,
        &[
            (first.clone(), second.clone()),
            (second.clone(), first.clone()),
        ],
    )
    .await;
    for (result, _) in &outcomes {
        assert!(
            !matches!(result, Err(LockError::Deadlock { .. })),
            "no check across slots: {outcomes:?}"
        );
    }
}

/// Behind Sentinel, on the master it names: the same detection as on one Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_same() {
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("locks", master.port());
    let lockers: Vec<Locker> = (0..3)
        .map(|i| {
            Locker::builder()
                .sentinel([sentinel.url()], "locks")
                .holder_label(format!("proc-{i}"))
                .build()
                .expect("sentinel locker")
        })
        .collect();
    ring_is_broken(&lockers, 2, "s2").await;
    ring_is_broken(&lockers, 3, "s3").await;
}
