//! Lock-order deadlocks across Lockers (as separate processes would be): a request that
//! would close a cycle of waiters fails at once with `LockError::Deadlock`, the others get
//! through; the same requests in one order never are told; a chain without a cycle waits.
//! Nesting counts the same through `using` (the task's call stack) and through plain
//! `lock()` with the lease kept in a variable; rings of any length up to `MAX_WAIT_CHAIN`
//! are told, longer ones refused with `WaitChainTooLong`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, MAX_WAIT_CHAIN};
use lock_tests::RedisServer;
use tokio::sync::Barrier;

/// Long enough that a wait running out is never mistaken for a detection.
const WAIT: Duration = Duration::from_secs(5);

/// What one nesting task came to: the inner request's result and how long it took.
type Outcome = (Result<(), LockError>, Duration);

/// How a task nests its two requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `using` inside `using`, as `#[redis_locked]` functions nest.
    Using,
    /// `let first = locker.lock(..).await?;` then `locker.lock(..).await`, nothing named.
    Plain,
}

/// Holds `first`, waits at `barrier` until every task holds its first lock, then takes
/// `second` inside it.
async fn nest(
    locker: Locker,
    first: String,
    second: String,
    barrier: Arc<Barrier>,
    style: Style,
) -> Outcome {
    match style {
        Style::Using => nest_using(locker, first, second, barrier).await,
        Style::Plain => nest_plain(locker, first, second, barrier).await,
    }
}

async fn nest_using(
    locker: Locker,
    first: String,
    second: String,
    barrier: Arc<Barrier>,
) -> Outcome {
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

async fn nest_plain(
    locker: Locker,
    first: String,
    second: String,
    barrier: Arc<Barrier>,
) -> Outcome {
    let outer = locker
        .lock(first)
        .wait(WAIT)
        .await
        .expect("the outer lock is free");
    barrier.wait().await;
    let started = Instant::now();
    let result = match locker.lock(second).wait(WAIT).await {
        Ok(inner) => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            inner.release().await.map(drop)
        }
        Err(err) => Err(err),
    };
    let took = started.elapsed();
    outer.release().await.expect("release the outer lock");
    (result, took)
}

/// Runs one task per (first, second) pair, each on a Locker of its own.
async fn round(lockers: &[Locker], pairs: &[(String, String)], style: Style) -> Vec<Outcome> {
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
                style,
            ))
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    outcomes
}

/// The pairs of a ring of `n` names: task i holds name i and wants name i + 1.
fn ring(n: usize, tag: &str) -> (Vec<String>, Vec<(String, String)>) {
    let names: Vec<String> = (0..n).map(|i| format!("dl:{tag}:{i}")).collect();
    let pairs = (0..n)
        .map(|i| (names[i].clone(), names[(i + 1) % n].clone()))
        .collect();
    (names, pairs)
}

/// A ring of `n` names taken in a ring: exactly one task is told, within 1 s, with the
/// whole cycle, and every other one gets through.
async fn ring_is_broken(lockers: &[Locker], n: usize, tag: &str) {
    ring_is_broken_by(lockers, n, tag, Style::Using).await;
}

async fn ring_is_broken_by(lockers: &[Locker], n: usize, tag: &str, style: Style) {
    let (names, pairs) = ring(n, tag);
    let outcomes = round(&lockers[..n], &pairs, style).await;
    let mut told = 0;
    for (i, (result, took)) in outcomes.iter().enumerate() {
        match result {
            Ok(()) => {}
            Err(LockError::Deadlock { name, cycle }) => {
                told += 1;
                // Told, not timed out (a wait running out takes WAIT).
                assert!(*took < WAIT / 2, "told after {took:?}");
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
    assert_eq!(told, 1, "{style:?}, exactly one victim: {outcomes:?}");
}

/// A ring longer than `MAX_WAIT_CHAIN`: it never stands (no task waits its wait out):
/// a task whose chain would pass the limit is refused with `WaitChainTooLong`, none is
/// told `Deadlock` (none saw a cycle), the others get through.
async fn ring_past_the_limit_is_refused(lockers: &[Locker], tag: &str, style: Style) {
    let n = MAX_WAIT_CHAIN + 1;
    let (_, pairs) = ring(n, tag);
    let outcomes = round(&lockers[..n], &pairs, style).await;
    let mut refused = 0;
    for (i, (result, took)) in outcomes.iter().enumerate() {
        assert!(*took < WAIT / 2, "task {i} waited {took:?}: {result:?}");
        match result {
            Ok(()) => {}
            Err(LockError::WaitChainTooLong { name, limit }) => {
                refused += 1;
                assert_eq!(*name, pairs[i].1);
                assert_eq!(*limit, MAX_WAIT_CHAIN);
                let text = result.as_ref().unwrap_err().to_string();
                assert!(
                    text.contains("longer than deadlock detection follows"),
                    "{text}"
                );
                assert!(result.as_ref().unwrap_err().is_contention());
            }
            Err(other) => panic!("task {i}: expected a grant or WaitChainTooLong, got {other}"),
        }
    }
    assert!(refused >= 1, "{style:?}: nobody refused: {outcomes:?}");
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
    let lockers = vec![locker; MAX_WAIT_CHAIN + 1];
    for round in 0..5 {
        ring_is_broken(&lockers, 2, &format!("two{round}")).await;
        ring_is_broken(&lockers, 3, &format!("three{round}")).await;
        ring_is_broken_by(&lockers, 2, &format!("ptwo{round}"), Style::Plain).await;
        ring_is_broken_by(&lockers, 3, &format!("pthree{round}"), Style::Plain).await;
    }
    for n in [8, 16, MAX_WAIT_CHAIN] {
        ring_is_broken_by(&lockers, n, &format!("long{n}"), Style::Plain).await;
    }
    ring_past_the_limit_is_refused(&lockers, "past", Style::Plain).await;
}

/// Rings of 8, 10 and 16 locks: told at once to exactly one task, nested through `using`
/// and through plain `lock()`. (A check once stopped after six round trips, one lock
/// each, and these rings stood until the first wait ran out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_rings_are_told() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 16);
    for n in [8, 10, 16] {
        ring_is_broken_by(&lockers, n, &format!("long{n}u"), Style::Using).await;
        ring_is_broken_by(&lockers, n, &format!("long{n}p"), Style::Plain).await;
    }
}

/// A ring of `MAX_WAIT_CHAIN` locks is told; one of a lock more is refused with
/// `WaitChainTooLong` and never stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_ring_is_told_and_a_longer_one_refused() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), MAX_WAIT_CHAIN + 1);
    ring_is_broken_by(&lockers, MAX_WAIT_CHAIN, "limit", Style::Plain).await;
    ring_past_the_limit_is_refused(&lockers, "pastp", Style::Plain).await;
    ring_past_the_limit_is_refused(&lockers, "pastu", Style::Using).await;
}

/// The imperative form most code uses: `let a = locker.lock(x).await?;` then
/// `locker.lock(y).await`, in opposite orders on two and on three Lockers: exactly one is
/// told `Deadlock` at once, the others complete. Nothing is named with `holding`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_nesting_in_opposite_orders_is_told() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 3);
    for round in 0..5 {
        ring_is_broken_by(&lockers, 2, &format!("plain2-{round}"), Style::Plain).await;
        ring_is_broken_by(&lockers, 3, &format!("plain3-{round}"), Style::Plain).await;
    }
}

/// A lease moved to another task: the task that took it locks the name again and waits
/// for the other task's release: no `HeldByThisTask`, no `Deadlock`, whether or not it
/// holds another lock while it waits (then its wait is watched, and still not told).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_moved_to_another_task_is_waited_for() {
    let server = RedisServer::start();
    let locker = lockers(&server.url(), 1).remove(0);
    for holding_another in [false, true] {
        let other = match holding_another {
            true => Some(locker.lock("moved:other").await.expect("other")),
            false => None,
        };
        let lease = locker.lock("moved:x").await.expect("x");
        let worker = tokio::spawn(async move {
            // Never touched here but by its release: the move is invisible.
            tokio::time::sleep(Duration::from_millis(300)).await;
            lease.release().await
        });
        let started = Instant::now();
        let again = locker.lock("moved:x").wait(WAIT).await;
        let again = again.unwrap_or_else(|err| {
            panic!("holding another: {holding_another}: expected a grant, got {err}")
        });
        assert!(started.elapsed() < WAIT / 2);
        assert!(worker.await.expect("worker").expect("release"));
        assert!(again.release().await.expect("release"));
        if let Some(other) = other {
            assert!(other.release().await.expect("release"));
        }
    }
}

/// A lease moved to another task and used there counts for that task, no longer for the
/// one that took it: that task waiting for a lock whose holder waits for the moved lease
/// is no cycle (the new owner lets go), and nobody is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_used_where_it_moved_no_longer_counts_for_its_first_task() {
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    for round in 0..3 {
        let (x, y) = (format!("handed:{round}:x"), format!("handed:{round}:y"));
        let lease = lockers[0].lock(x.clone()).await.expect("x");
        let (used, is_used) = tokio::sync::oneshot::channel();
        let worker = tokio::spawn(async move {
            let _ = used.send(lease.fencing_token());
            tokio::time::sleep(Duration::from_millis(600)).await;
            lease.release().await
        });
        is_used.await.expect("used");
        // The other Locker's task holds y and waits for x (held by the worker).
        let (x2, y2, q) = (x.clone(), y.clone(), lockers[1].clone());
        let other = tokio::spawn(async move {
            let held = q.lock(y2).await.expect("y");
            let got = q.lock(x2).wait(WAIT).await;
            drop(held);
            got.map(drop)
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The first task, holding nothing now, waits for y.
        let got = lockers[0].lock(y).wait(WAIT).await;
        assert!(got.is_ok(), "round {round}: {got:?}");
        let theirs = other.await.expect("task");
        assert!(theirs.is_ok(), "round {round}: {theirs:?}");
        assert!(worker.await.expect("worker").expect("release"));
    }
}

/// Futures of one task that each take one lock are not each other's holders: polled
/// with wakers of their own (`FuturesUnordered`, as `buffer_unordered` and
/// `for_each_concurrent` do), or started together (`join`, one waker, one granted after
/// the other began). Lockers running them over the same two names in opposite orders
/// only wait for each other's holders; nobody is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sibling_futures_do_not_hold_each_others_leases() {
    use futures_util::stream::{FuturesUnordered, StreamExt as _};
    let server = RedisServer::start();
    let lockers = lockers(&server.url(), 2);
    /// Takes `name` after `after` (at its first poll when zero), and holds it for 300 ms
    /// (or waits for it).
    async fn one(locker: Locker, name: String, after: Duration) -> Result<(), LockError> {
        // Not even a zero sleep when zero: a timer rounds its deadline up to the next
        // millisecond tick, so two zero sleeps started on either side of a tick end one
        // tick apart, and a `join`'s first request could then be granted before the second
        // began: the documented false cycle (docs/guide/deadlocks.md), not what is tested.
        if !after.is_zero() {
            tokio::time::sleep(after).await;
        }
        let lease = locker.lock(name).wait(WAIT).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        lease.release().await.map(drop)
    }
    for round in 0..3 {
        let (a, b) = (format!("sib:{round}:a"), format!("sib:{round}:b"));
        // Each side's first future holds its name while its second waits for the other's.
        let side = |locker: &Locker, first: &str, second: &str| {
            let futures: FuturesUnordered<_> = [
                Box::pin(one(locker.clone(), first.to_owned(), Duration::ZERO)),
                Box::pin(one(
                    locker.clone(),
                    second.to_owned(),
                    Duration::from_millis(100),
                )),
            ]
            .into_iter()
            .collect();
            tokio::spawn(futures.collect::<Vec<_>>())
        };
        let (p, q) = (side(&lockers[0], &a, &b), side(&lockers[1], &b, &a));
        for results in [p.await.expect("task"), q.await.expect("task")] {
            for result in results {
                assert!(result.is_ok(), "unordered, round {round}: {result:?}");
            }
        }
        // Started together in one future (one waker, both requests begun in its first
        // poll): the first is granted after the second began waiting, so it is not the
        // second's. The second waits for b, held
        // by the other Locker's task, which then waits for a: no cycle (a's holder does
        // not wait), and nobody is told.
        let (a, b) = (format!("sibj:{round}:a"), format!("sibj:{round}:b"));
        let held = lockers[1].lock(b.clone()).await.expect("b");
        let side = {
            let (locker, a, b) = (lockers[0].clone(), a.clone(), b.clone());
            tokio::spawn(async move {
                let (one, two) = futures_util::future::join(
                    one(locker.clone(), a, Duration::ZERO),
                    one(locker.clone(), b, Duration::ZERO),
                )
                .await;
                [one, two]
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let got = lockers[1].lock(a).wait(WAIT).await;
        assert!(got.is_ok(), "join, round {round}: {got:?}");
        drop((got, held));
        for result in side.await.expect("task") {
            assert!(result.is_ok(), "join, round {round}: {result:?}");
        }
    }
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
        Style::Using,
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
