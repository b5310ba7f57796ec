//! Several permits of a semaphore at once (`Semaphore::acquire_many`): the holders' total
//! never exceeds the capacity, a large request is not starved by a stream of small ones,
//! holders are listed with their weights, and a request above the capacity is refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::{RedisCluster, RedisServer};

const SECOND: Duration = Duration::from_secs(1);

/// Requests of 1, 2, 3 and 5 permits of 8, from several lockers: the weight inside never
/// exceeds 8, and every request gets through.
async fn weights_never_exceed_the_capacity(lockers: Vec<Locker>) {
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (i, n) in [1u64, 2, 3, 5, 1, 2, 3, 5].into_iter().enumerate() {
        let semaphore = lockers[i % lockers.len()].semaphore("pool", 8);
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let permit = semaphore
                    .acquire_many(n)
                    .ttl(10 * SECOND)
                    .wait(60 * SECOND)
                    .await
                    .expect("permits within the wait");
                let now = inside.fetch_add(n, Ordering::SeqCst) + n;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(n, Ordering::SeqCst);
                assert!(permit.release().await.expect("release"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 8, "{most} permits held at once of 8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_never_exceed_the_capacity_on_one_redis() {
    let server = RedisServer::start();
    let lockers = (0..3)
        .map(|_| Locker::from_url(&server.url()).expect("locker"))
        .collect();
    weights_never_exceed_the_capacity(lockers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_never_exceed_the_capacity_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let lockers = (0..3)
        .map(|_| {
            Locker::builder()
                .cluster(cluster.urls())
                .build()
                .expect("cluster locker")
        })
        .collect();
    weights_never_exceed_the_capacity(lockers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weights_never_exceed_the_capacity_in_memory() {
    weights_never_exceed_the_capacity(vec![Locker::memory()]).await;
}

/// A steady stream of one-permit requests (six workers that each take one permit, hold it
/// for `HOLD` and ask again at once) keeps the semaphore of 8 busy; a request for 6
/// arriving in the middle gets in once the holds ahead of it end (FIFO: the small ones
/// behind it wait), within a few hold times, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_is_not_starved_by_small_ones() {
    const HOLD: Duration = Duration::from_millis(50);
    let server = RedisServer::start();
    let lockers: Vec<Locker> = (0..2)
        .map(|_| Locker::from_url(&server.url()).expect("locker"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let small = Arc::new(AtomicU64::new(0));
    let mut stream = Vec::new();
    for i in 0..6 {
        let semaphore = lockers[i % 2].semaphore("gpus", 8);
        let (stop, small) = (Arc::clone(&stop), Arc::clone(&small));
        stream.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let permit = semaphore
                    .acquire()
                    .ttl(10 * SECOND)
                    .wait(60 * SECOND)
                    .await
                    .expect("a permit");
                small.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(HOLD).await;
                drop(permit);
            }
        }));
    }
    tokio::time::sleep(10 * HOLD).await;
    let mut longest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let large = lockers[0]
            .semaphore("gpus", 8)
            .acquire_many(6)
            .ttl(10 * SECOND)
            .wait(30 * SECOND)
            .await
            .expect("the large request gets in under the stream of small ones");
        longest = longest.max(started.elapsed());
        tokio::time::sleep(HOLD).await;
        assert!(large.release().await.expect("release"));
        tokio::time::sleep(4 * HOLD).await;
    }
    stop.store(true, Ordering::SeqCst);
    for task in stream {
        task.await.expect("stream task");
    }
    assert!(small.load(Ordering::SeqCst) > 20, "the stream kept going");
    println!(
        "longest wait of a 6-permit request under a stream of 1-permit holds of {HOLD:?}: {longest:?} ({:.1} hold times)",
        longest.as_secs_f64() / HOLD.as_secs_f64()
    );
}

/// Holders are listed with their weights; a request for more than the semaphore has is
/// refused at once with what to change; a refusal names what was asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_show_weights_and_misuse_is_named() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let gpus = locker.semaphore("gpus", 8);
    let six = gpus.acquire_many(6).await.expect("six");
    let one = gpus.acquire().await.expect("one");
    let mut weights: Vec<u64> = gpus
        .holders()
        .await
        .expect("holders")
        .holders
        .iter()
        .map(|h| h.weight)
        .collect();
    weights.sort_unstable();
    assert_eq!(weights, [1, 6]);

    let refused = gpus
        .acquire_many(2)
        .wait(Duration::ZERO)
        .await
        .expect_err("only 1 free");
    assert!(
        matches!(
            refused,
            LockError::LimitReached {
                permits: 8,
                asked: 2,
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .starts_with("2 of the 8 permits of `gpus` are not free"),
        "{refused}"
    );

    let above = gpus.acquire_many(9).await.expect_err("above the capacity");
    assert!(
        matches!(
            above,
            LockError::PermitsAboveCapacity {
                asked: 9,
                permits: 8,
                ..
            }
        ),
        "{above:?}"
    );
    assert!(above.to_string().contains("ask for at most 8"), "{above}");
    assert!(matches!(
        gpus.acquire_many(0).await,
        Err(LockError::Config(_))
    ));
    drop((six, one));
}
