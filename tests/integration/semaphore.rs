//! Counting semaphores on real redis-server processes (and in memory): never more than N
//! holders across separate Lockers, a crashed holder's permit back at its TTL, cancellation
//! that leaves nothing held, FIFO hand-off without a herd, and runtime changes of N.

use std::future::IntoFuture as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;

use crate::harness::Harness;
use crate::permit_costs::assert_idle;
use crate::stopped;

const SECOND: Duration = Duration::from_secs(1);

fn lockers(server: &RedisServer, n: usize) -> Vec<Locker> {
    (0..n)
        .map(|_| Locker::from_url(&server.url()).expect("locker"))
        .collect()
}

fn int_reply(reply: &str) -> i64 {
    reply.trim().trim_start_matches(':').parse().unwrap_or(-1)
}

/// EVALSHA calls the server executed so far.
fn script_calls(server: &RedisServer) -> u64 {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Many tasks on several Lockers share `permits` permits; a counter of the tasks inside,
/// read and written back in two steps with a pause between (not atomic), must never pass
/// N, and N must actually be reached (the permits are shared, not serialised).
async fn at_most_n_inside(lockers: Vec<Locker>, permits: u64, tasks: usize) {
    let inside = Arc::new(Mutex::new(0u64));
    let most = Arc::new(AtomicUsize::new(0));
    let mut running = Vec::new();
    for i in 0..tasks {
        let semaphore = lockers[i % lockers.len()].semaphore("exports", permits);
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        running.push(tokio::spawn(async move {
            let permit = semaphore
                .acquire()
                .ttl(10 * SECOND)
                .wait(30 * SECOND)
                .await
                .expect("permit");
            let now = {
                let mut count = inside.lock().unwrap();
                *count += 1;
                *count
            };
            assert!(now <= permits, "{now} holders of {permits} permits");
            most.fetch_max(now as usize, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(fastrand::u64(1..6))).await;
            *inside.lock().unwrap() -= 1;
            assert!(permit.release().await.expect("release"), "still held");
        }));
    }
    for task in running {
        task.await.expect("task");
    }
    assert_eq!(
        most.load(Ordering::SeqCst) as u64,
        permits,
        "all permits were used"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_across_lockers() {
    let server = RedisServer::start();
    at_most_n_inside(lockers(&server, 4), 3, 48).await;
    assert_idle(&server, "lock:{exports}:sem");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_in_memory() {
    at_most_n_inside(vec![Locker::memory()], 3, 48).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permit_returns_at_its_ttl_by_the_servers_clock() {
    let server = RedisServer::start();
    let all = lockers(&server, 2);
    let crashed = all[0]
        .semaphore("jobs", 1)
        .acquire()
        .ttl(Duration::from_millis(400))
        .await
        .expect("permit");
    // The permit's end is the server's TIME plus the TTL.
    let time = server.command(&["TIME"]);
    let seconds: i64 = time
        .lines()
        .nth(2)
        .and_then(|l| l.parse().ok())
        .expect("TIME");
    // (The set's state members have scores <= 0; holders' scores are their ends.)
    let score = server.command(&[
        "ZRANGEBYSCORE",
        "lock:{jobs}:sem",
        "(0",
        "+inf",
        "WITHSCORES",
        "LIMIT",
        "0",
        "1",
    ]);
    let end: i64 = score
        .lines()
        .nth(4)
        .and_then(|l| l.parse().ok())
        .expect("score");
    assert!(
        (end - seconds * 1000 - 400).abs() < 1000,
        "{end} vs {seconds}s"
    );
    std::mem::forget(crashed); // no release, no drop: a crash

    let other = all[1].semaphore("jobs", 1);
    assert!(matches!(
        other.try_acquire(SECOND).await,
        Err(LockError::LimitReached { .. })
    ));
    let permit = other
        .acquire()
        .wait(5 * SECOND)
        .await
        .expect("the crashed holder's permit came back");
    assert!(permit.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_with_few_calls() {
    let server = RedisServer::start();
    let all = lockers(&server, 9);
    let holder = all[0]
        .semaphore("fifo", 1)
        .acquire()
        .ttl(10 * SECOND)
        .await
        .expect("holder");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    let before = script_calls(&server);
    for (i, locker) in all.iter().enumerate().skip(1) {
        let semaphore = locker.semaphore("fifo", 1);
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let permit = semaphore.acquire().wait(20 * SECOND).await.expect("permit");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            permit.release().await.expect("release");
        }));
        // Queued before the next one starts.
        until("the waiter to queue", || {
            int_reply(&server.command(&["ZCARD", "lock:{fifo}:sem:q"])) == i as i64
        })
        .await;
    }
    holder.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().unwrap(), (1..=8).collect::<Vec<_>>());
    // Each waiter: a plain try, a queued attempt, the claim, the release (plus the odd
    // safety-net look); a herd would wake every waiter at every release.
    let calls = script_calls(&server) - before;
    assert!(calls <= 8 * 5 + 2, "{calls} script calls for 8 waiters");
}

/// Every command the server executed so far (script bodies' calls included), but INFO.
fn all_calls(server: &RedisServer) -> u64 {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Redis calls of one try + release of a permit of `semaphore` (nobody waits).
async fn cycle_calls(server: &RedisServer, semaphore: &lock_core::Semaphore) -> u64 {
    let before = all_calls(server);
    let permit = semaphore.try_acquire(10 * SECOND).await.expect("permit");
    assert!(permit.release().await.expect("release"));
    all_calls(server) - before
}

/// Issue 26: a permit costs a fixed number of Redis calls (scripts' own calls counted),
/// however many others hold permits: nothing sums or walks the holders, and the
/// uncontended cycle is at most 10 calls (it was 17: TIME twice, a sweep, a ZRANGE of every
/// holder, queue look-ups, expiry re-arming).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_costs_the_same_calls_with_one_or_many_holders() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let alone = locker.semaphore("alone", 10_000);
    cycle_calls(&server, &alone).await; // loads the scripts (NOSCRIPT, EVAL)
    server.until_watching(1).await; // the watch connection's set-up, counted before
    let idle = cycle_calls(&server, &alone).await;
    assert!(idle <= 10, "{idle} Redis calls for an uncontended permit");
    let crowded = locker.semaphore("crowded", 10_000);
    let mut held = Vec::new();
    for _ in 0..1_000 {
        held.push(crowded.try_acquire(60 * SECOND).await.expect("permit"));
    }
    let busy = cycle_calls(&server, &crowded).await;
    assert!(
        busy <= idle,
        "{busy} Redis calls with 1,000 holders, {idle} with none"
    );
    drop(held);
}

/// Drops acquires at random points (before, during and after the hand-off of a permit
/// being released at random times); afterwards nothing is held and nobody is queued.
async fn cancellation_leaves_nothing(locker: Locker, server: Option<&RedisServer>) {
    let semaphore = locker.semaphore("cancel", 2);
    for round in 0..30u64 {
        let held = [
            semaphore.acquire().ttl(10 * SECOND).await.expect("held"),
            semaphore.acquire().ttl(10 * SECOND).await.expect("held"),
        ];
        let acquire = semaphore
            .acquire()
            .ttl(10 * SECOND)
            .wait(5 * SECOND)
            .into_future();
        let cut = Duration::from_micros(fastrand::u64(0..3000 + round * 200));
        let releasing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(fastrand::u64(0..3000))).await;
            let [a, b] = held;
            a.release().await.expect("release");
            b
        });
        let _ = tokio::time::timeout(cut, acquire).await; // dropped here, or granted and dropped
        let b = releasing.await.expect("release task");
        b.release().await.expect("release");
    }
    assert!(
        locker.shutdown(5 * SECOND).await,
        "background undo finished"
    );
    let state = semaphore.holders().await.expect("holders");
    assert!(state.holders.is_empty(), "{state:?}");
    assert_eq!(state.waiting, 0);
    if let Some(server) = server {
        assert_idle(server, "lock:{cancel}:sem");
    }
    let again = [
        semaphore
            .try_acquire(SECOND)
            .await
            .expect("first permit free"),
        semaphore
            .try_acquire(SECOND)
            .await
            .expect("second permit free"),
    ];
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_held() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    cancellation_leaves_nothing(locker, Some(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_held_in_memory() {
    cancellation_leaves_nothing(Locker::memory(), None).await;
}

/// Issue 24 defect 5: the capacity is stored with the semaphore, so a request from another
/// process that asks for a different N is refused (typed error naming both) instead of
/// being judged by its own N: never two holders of a one-permit semaphore.
async fn a_disagreeing_capacity_is_refused(one: Locker, other: Locker) {
    let small = one.semaphore("export", 1);
    let big = other.semaphore("export", 2);
    let held = small.try_acquire(10 * SECOND).await.expect("1 of 1");
    let refused = big.try_acquire(10 * SECOND).await;
    let holders = small.holders().await.expect("holders");
    assert_eq!(
        holders.holders.len(),
        1,
        "two holders of a one-permit semaphore"
    );
    let err = refused.expect_err("a request for 2 permits of a semaphore stored with 1");
    assert!(
        matches!(
            err,
            LockError::CapacityMismatch {
                stored: 1,
                asked: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("1 permits stored") && text.contains("asked for 2"),
        "{text}"
    );
    assert_eq!(holders.capacity, Some(1));
    // A waiting request is refused at once too, not after its wait.
    let begun = std::time::Instant::now();
    let waited = big.acquire().ttl(10 * SECOND).wait(5 * SECOND).await;
    assert!(
        matches!(waited, Err(LockError::CapacityMismatch { .. })),
        "{waited:?}"
    );
    assert!(begun.elapsed() < 4 * SECOND, "refused, not timed out");
    held.release().await.expect("release");
    // Idle: the next request's capacity is stored.
    let a = big
        .try_acquire(10 * SECOND)
        .await
        .expect("1 of 2 once idle");
    let b = big.try_acquire(10 * SECOND).await.expect("2 of 2");
    assert!(
        small.try_acquire(10 * SECOND).await.is_err(),
        "now stored with 2"
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreeing_capacity_is_refused_across_lockers() {
    let server = RedisServer::start();
    let mut both = lockers(&server, 2);
    let other = both.pop().expect("two lockers");
    let one = both.pop().expect("two lockers");
    a_disagreeing_capacity_is_refused(one, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disagreeing_capacity_is_refused_in_memory() {
    let locker = Locker::memory();
    a_disagreeing_capacity_is_refused(locker.clone(), locker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_stored_and_changes_once_idle() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let two = locker.semaphore("pool", 2);
    let three = locker.semaphore("pool", 3);
    assert_eq!(two.holders().await.expect("holders").capacity, None, "idle");
    let a = two.try_acquire(10 * SECOND).await.expect("1 of 2");
    let b = two.try_acquire(10 * SECOND).await.expect("2 of 2");
    assert_eq!(three.holders().await.expect("holders").capacity, Some(2));
    assert!(two.try_acquire(10 * SECOND).await.is_err(), "2 of 2 held");
    // Raising it while in use is refused, with both numbers.
    match three.try_acquire(10 * SECOND).await {
        Err(LockError::CapacityMismatch {
            stored: 2,
            asked: 3,
            ..
        }) => {}
        other => panic!("expected CapacityMismatch, got {other:?}"),
    }
    a.release().await.expect("release");
    assert!(
        matches!(
            three.try_acquire(10 * SECOND).await,
            Err(LockError::CapacityMismatch { .. })
        ),
        "still in use by one holder"
    );
    b.release().await.expect("release");
    // Idle: the stored number went with the last holder; 3 now.
    let c = three.try_acquire(10 * SECOND).await.expect("1 of 3");
    assert_eq!(two.holders().await.expect("holders").capacity, Some(3));
    drop(c);
    assert!(matches!(
        locker.semaphore("pool", 0).try_acquire(SECOND).await,
        Err(LockError::Config(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_leases_lost_when_they_end_and_kept_when_renewed() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let semaphore = locker.semaphore("leases", 2);
    let short = semaphore
        .acquire()
        .ttl(Duration::from_millis(200))
        .await
        .expect("permit");
    let renewed = semaphore
        .acquire()
        .ttl(Duration::from_millis(300))
        .auto_renew()
        .await
        .expect("permit");
    tokio::time::timeout(5 * SECOND, short.lost())
        .await
        .expect("lost at the end of its TTL");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!renewed.is_lost(), "renewed past three TTLs");
    assert!(renewed.is_held().await.expect("held"));
    assert!(!short.release().await.expect("release"), "it had ended");
    // Someone deletes the semaphore: the renewal finds out and says so.
    server.command(&["DEL", "lock:{leases}:sem"]);
    tokio::time::timeout(5 * SECOND, renewed.lost())
        .await
        .expect("loss reported by the renewal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_and_transactions_refuse_with_a_clear_error() {
    for harness in [Harness::redlock(), Harness::transactions()] {
        let err = harness
            .locker
            .semaphore("x", 2)
            .try_acquire(SECOND)
            .await
            .expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("not available"), "{err}");
        let rw = harness.locker.rwlock("x").read().wait(Duration::ZERO).await;
        assert!(matches!(rw, Err(LockError::Config(_))));
        let set = harness.locker.semaphore("x", 2).set_capacity(3).await;
        assert!(
            matches!(&set, Err(LockError::Config(text)) if text.contains("not available")),
            "{set:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rwlocks_on_a_cluster() {
    let cluster = lock_tests::RedisCluster::start(3, 0);
    let on = || {
        Locker::builder()
            .cluster(cluster.urls())
            .build()
            .expect("cluster locker")
    };
    at_most_n_inside(vec![on(), on()], 2, 16).await;
    let (a, b) = (on(), on());
    let read = a.rwlock("shelf").read().await.expect("read");
    assert!(b
        .rwlock("shelf")
        .write()
        .wait(Duration::ZERO)
        .await
        .is_err());
    let writing = tokio::spawn(b.rwlock("shelf").write().wait(10 * SECOND).into_future());
    tokio::time::sleep(Duration::from_millis(50)).await;
    read.release().await.expect("release");
    let write = writing.await.expect("join").expect("the writer's turn");
    assert!(write.release().await.expect("release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_run_as_redis_functions_too() {
    let harness = Harness::functions();
    let server = harness.server.as_ref().expect("server");
    let semaphore = harness.locker.semaphore("functions", 1);
    let permit = semaphore.try_acquire(10 * SECOND).await.expect("permit");
    assert!(semaphore.try_acquire(SECOND).await.is_err());
    assert!(permit.release().await.expect("release"));
    // A server that lost the library (FUNCTION FLUSH) gets it again.
    server.command(&["FUNCTION", "FLUSH"]);
    let permit = semaphore.try_acquire(10 * SECOND).await.expect("reloaded");
    assert!(permit.release().await.expect("release"));
    assert!(server
        .command(&["FUNCTION", "LIST"])
        .contains("lockcore_prims_v14"));
}

#[lock_core::redis_locked(key = "exports", permits = 2, wait = "0s", locker = locker)]
async fn export_job(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

/// A full semaphore is one error whatever the entry point: `LimitReached`, "all 2 permits of
/// `exports` are taken", with `waited` saying whether the request waited; never `Busy` or
/// `Timeout` ("lock ... is busy"), which stay the errors of locks (LockError's rule).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_semaphore_is_limit_reached_from_every_entry_point() {
    let server = RedisServer::start();
    for locker in [
        Locker::from_url(&server.url()).expect("locker"),
        Locker::memory(),
    ] {
        let exports = locker.semaphore("exports", 2);
        let held = [
            exports.try_acquire(10 * SECOND).await.expect("1 of 2"),
            exports.try_acquire(10 * SECOND).await.expect("2 of 2"),
        ];
        let at_once = exports.try_acquire(SECOND).await.unwrap_err();
        assert!(
            matches!(
                at_once,
                LockError::LimitReached {
                    permits: 2,
                    waited: None,
                    ..
                }
            ),
            "{at_once:?}"
        );
        let text = at_once.to_string();
        assert!(
            text.starts_with("all 2 permits of `exports` are taken"),
            "{text}"
        );
        assert!(!text.contains("busy"), "{text}");
        assert!(at_once.is_contention());
        assert!(at_once.retry_after().is_some(), "{at_once:?}");

        let waited = exports
            .acquire()
            .wait(Duration::from_millis(150))
            .await
            .unwrap_err();
        assert!(
            matches!(
                waited,
                LockError::LimitReached {
                    permits: 2,
                    waited: Some(_),
                    ..
                }
            ),
            "{waited:?}"
        );
        assert!(
            waited
                .to_string()
                .starts_with("all 2 permits of `exports` are still taken after waiting"),
            "{waited}"
        );

        let attributed = export_job(&locker).await.unwrap_err();
        assert!(
            matches!(attributed, LockError::LimitReached { permits: 2, .. }),
            "{attributed:?}"
        );

        // A read-write lock is a lock: its refusal stays `Busy`.
        let _writer = locker.rwlock("exports").write().await.expect("writer");
        assert!(matches!(
            locker.rwlock("exports").read().wait(Duration::ZERO).await,
            Err(LockError::Busy { .. })
        ));
        for permit in held {
            assert!(permit.release().await.expect("release"));
        }
    }
}

/// Issue 24: a permit attempt in flight on a server that stops answering times out and the
/// shared connection is replaced; the request's give-back must follow the attempt on the
/// socket it went out on, or the permit is left held by nobody until its TTL (see
/// [`stopped`]). Failed on the old code in 5 runs of 5, in the round resumed after 1500 ms
/// (the give-back, sent at the end of the wait on a new connection, gave up on its set-up):
/// the permit left with 29.7 s of TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_attempt_stalled_past_its_timeout_leaves_no_permit_behind() {
    let server = RedisServer::start();
    stopped::stalled_requests_leave_nothing_behind(
        &server,
        || stopped::short_timeout_locker(&server),
        "gb:sem",
        |locker, name, wait| async move {
            let semaphore = locker.semaphore(name.as_str(), 1);
            let permit = semaphore.acquire().ttl(30 * SECOND).wait(wait).await?;
            assert!(permit.release().await?, "{name}: released");
            Ok(())
        },
        |locker, name| async move { stopped::permits_left(locker.semaphore(name, 1).holders().await) },
    )
    .await;
}

/// A refused request for another number of permits dropped the permits that had ended (by
/// the server's clock) from the holders without writing down their weight: the stored
/// total kept counting them, and the semaphore stayed that much fuller than it was, until
/// it fell idle (found by lock-torture's rule `liveness` once one client in four asked for
/// another number: requests waited while permits were free, issue 24).
async fn a_refused_mismatch_leaves_the_count_right(one: Locker, other: Locker) {
    let two = one.semaphore("count", 2);
    let three = other.semaphore("count", 3);
    let live = two.try_acquire(60 * SECOND).await.expect("1 of 2");
    let ended = two
        .try_acquire(Duration::from_millis(200))
        .await
        .expect("2 of 2");
    // Let the second permit end without a release: its holder is still a member until a
    // script drops it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        matches!(
            three.try_acquire(60 * SECOND).await,
            Err(LockError::CapacityMismatch {
                stored: 2,
                asked: 3,
                ..
            })
        ),
        "in use with 2 stored"
    );
    let freed = two
        .try_acquire(60 * SECOND)
        .await
        .expect("the ended permit's place is free: 2 of 2 again");
    assert_eq!(two.holders().await.expect("holders").holders.len(), 2);
    drop((live, ended, freed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_mismatch_leaves_the_count_right_across_lockers() {
    let server = RedisServer::start();
    let mut both = lockers(&server, 2);
    let other = both.pop().expect("two lockers");
    let one = both.pop().expect("two lockers");
    a_refused_mismatch_leaves_the_count_right(one, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_mismatch_leaves_the_count_right_in_memory() {
    let locker = Locker::memory();
    a_refused_mismatch_leaves_the_count_right(locker.clone(), locker).await;
}

/// A training job on `pool`, taking `gpus` of its 8 permits; answers the weights held on
/// the pool while it runs.
#[lock_core::redis_locked(key = "gpus:{pool}", permits = 8, weight = gpus, wait = "0s", locker = locker)]
async fn train(locker: &Locker, pool: &str, gpus: u64) -> Result<Vec<u64>, LockError> {
    let mut weights: Vec<u64> = locker
        .semaphore(format!("gpus:{pool}"), 8)
        .holders()
        .await?
        .holders
        .iter()
        .map(|holder| holder.weight)
        .collect();
    weights.sort_unstable();
    Ok(weights)
}

/// `#[redis_locked(permits = 8, weight = ..)]` on one Redis: each call holds its weight
/// while the body runs; one that does not fit is `LimitReached` naming its weight; one
/// above the capacity or of 0 permits is refused with the error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_takes_its_weight_of_permits() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    assert_eq!(train(&locker, "a", 6).await.expect("6 of 8"), [6]);
    assert_eq!(train(&locker, "a", 8).await.expect("all 8"), [8]);

    let held = locker
        .semaphore("gpus:a", 8)
        .acquire_many(3)
        .ttl(Duration::from_secs(30))
        .await
        .expect("3 of 8");
    assert_eq!(train(&locker, "a", 5).await.expect("the other 5"), [3, 5]);
    match train(&locker, "a", 6).await {
        Err(LockError::LimitReached {
            name,
            permits: 8,
            asked: 6,
            ..
        }) => assert_eq!(name, "gpus:a"),
        other => panic!("expected LimitReached for 6 of 8 with 3 held, got {other:?}"),
    }
    assert!(matches!(
        train(&locker, "a", 9).await,
        Err(LockError::PermitsAboveCapacity {
            asked: 9,
            permits: 8,
            ..
        })
    ));
    assert!(matches!(
        train(&locker, "a", 0).await,
        Err(LockError::Config(_))
    ));
    held.release().await.expect("release");
    assert_eq!(train(&locker, "a", 6).await.expect("6 of 8"), [6]);
    let left = locker
        .semaphore("gpus:a", 8)
        .holders()
        .await
        .expect("holders");
    assert!(left.holders.is_empty(), "{left:?}");
}
