//! What semaphores and read-write locks cost Redis, counted exactly (INFO commandstats,
//! script bodies' own calls included): the uncontended cycle, a release behind a waiting
//! writer, a writer's release to a crowd of readers, and a hand-off inside one Locker and
//! across two.

use std::time::Duration;

use lock_core::{Locker, RwLease};
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// Calls per command the server executed so far (script bodies' calls included), INFO
/// and the test's own reads left out.
fn calls(server: &RedisServer) -> Vec<(String, u64)> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| !["info", "zcard", "zrangebyscore", "exists"].contains(&name.as_str()))
        .collect()
}

/// What the server executed between two readings of [`calls`], per command.
fn since(server: &RedisServer, before: &[(String, u64)]) -> Vec<(String, u64)> {
    calls(server)
        .into_iter()
        .map(|(name, after)| {
            let was = before
                .iter()
                .find(|(b, _)| *b == name)
                .map_or(0, |(_, n)| *n);
            (name, after - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn total(delta: &[(String, u64)]) -> u64 {
    delta.iter().map(|(_, n)| n).sum()
}

fn of(delta: &[(String, u64)], command: &str) -> u64 {
    delta
        .iter()
        .find(|(name, _)| name == command)
        .map_or(0, |(_, n)| *n)
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

fn queued(server: &RedisServer, queue: &str) -> usize {
    server
        .command(&["ZCARD", queue])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or(0)
}

/// An idle permit set leaves nothing that outlives it: no holder, no queue, and the
/// holders key (which keeps the name's state between uses instead of being deleted and
/// created again every cycle) expires by itself.
pub fn assert_idle(server: &RedisServer, holders: &str) {
    let live = server.command(&["ZRANGEBYSCORE", holders, "(0", "+inf"]);
    assert!(
        live.trim().starts_with("*0"),
        "{holders} still holds: {live}"
    );
    let queue = format!("{holders}:q");
    assert_eq!(queued(server, &queue), 0, "{queue}");
    let pttl: i64 = server
        .command(&["PTTL", holders])
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or(0);
    assert!(pttl == -2 || pttl > 0, "{holders} never expires ({pttl})");
}

/// An uncontended permit costs 7 Redis calls a cycle: the take is the clock, one read and
/// one write inside its script, the release one removal and one count update (no clock,
/// no delete of the idle name, so no expiry to re-arm each cycle). It was 9: TIME twice,
/// ZMSCORE twice, the whole state rewritten, a PEXPIREAT every cycle after the DEL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_permit_cycle_is_seven_redis_calls() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let semaphore = locker.semaphore("lean", 8);
    // Loads the scripts and stores the name's state.
    let permit = semaphore.try_acquire(10 * SECOND).await.expect("permit");
    assert!(permit.release().await.expect("release"));
    // The watch connection's set-up, started by the first acquisition, counted before.
    server.until_watching(1).await;
    let before = calls(&server);
    for _ in 0..10 {
        let permit = semaphore.try_acquire(10 * SECOND).await.expect("permit");
        assert!(permit.release().await.expect("release"));
    }
    let delta = since(&server, &before);
    assert!(total(&delta) <= 70, "10 cycles: {delta:?}");
    assert_eq!(of(&delta, "pexpireat"), 0, "{delta:?}");
    assert_eq!(of(&delta, "del"), 0, "{delta:?}");
}

/// Holds `n` read leases of `lock`.
async fn readers(lock: &lock_core::RwLock, n: usize) -> Vec<RwLease> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(lock.read().ttl(30 * SECOND).await.expect("read lease"));
    }
    held
}

/// Behind a waiting writer, a reader's release reads no queue entry: the head's weight
/// is kept with the state, so the release knows the writer does not fit yet. It read 17
/// entries (ZRANGE + HMGET) every time, however long the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_release_behind_a_waiting_writer_reads_no_queue() {
    let server = RedisServer::start();
    let holding = Locker::from_url(&server.url()).expect("locker");
    let writing = Locker::from_url(&server.url()).expect("locker");
    let queueing = Locker::from_url(&server.url()).expect("locker");
    let lock = holding.rwlock("catalog");
    let mut held = readers(&lock, 4).await;
    let writer_lock = writing.rwlock("catalog");
    let writer = tokio::spawn(async move {
        let lease = writer_lock.write().ttl(30 * SECOND).wait(30 * SECOND).await;
        lease
            .expect("write lease")
            .release()
            .await
            .expect("release")
    });
    let queue = "lock:{catalog}:rw:q";
    until("the writer to queue", || queued(&server, queue) == 1).await;
    let mut later = Vec::new();
    for _ in 0..20 {
        let lock = queueing.rwlock("catalog");
        later.push(tokio::spawn(async move {
            let lease = lock.read().ttl(30 * SECOND).wait(30 * SECOND).await;
            lease.expect("read lease").release().await.expect("release")
        }));
    }
    until("the readers to queue", || queued(&server, queue) == 21).await;
    // Three releases behind the writer (the one before the last).
    for _ in 0..3 {
        let before = calls(&server);
        let lease = held.pop().expect("a reader");
        assert!(lease.release().await.expect("release"));
        let delta = since(&server, &before);
        for read in ["zrange", "zpopmin", "hmget", "hget", "zrank"] {
            assert_eq!(of(&delta, read), 0, "{delta:?}");
        }
        assert!(total(&delta) <= 6, "{delta:?}");
    }
    // The last one lets the writer in, then the readers.
    held.pop()
        .expect("a reader")
        .release()
        .await
        .expect("release");
    assert!(writer.await.expect("writer"));
    for reader in later {
        assert!(reader.await.expect("reader"));
    }
}

/// A writer's release admits the readers queued behind it with one message per Locker
/// (not one per reader), and readers of the writer's own Locker with none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_tells_each_locker_once() {
    let server = RedisServer::start();
    let lockers: Vec<Locker> = (0..3)
        .map(|_| Locker::from_url(&server.url()).expect("locker"))
        .collect();
    let writer = lockers[0]
        .rwlock("report")
        .write()
        .ttl(30 * SECOND)
        .await
        .expect("write lease");
    let queue = "lock:{report}:rw:q";
    let mut waiting = Vec::new();
    for (i, locker) in lockers.iter().enumerate() {
        // Each Locker listens first (its first wait subscribes its channel).
        for _ in 0..6 {
            let lock = locker.rwlock("report");
            waiting.push(tokio::spawn(async move {
                let lease = lock.read().ttl(30 * SECOND).wait(30 * SECOND).await;
                lease.expect("read lease").release().await.expect("release")
            }));
        }
        until("the readers to queue", || {
            queued(&server, queue) == 6 * (i + 1)
        })
        .await;
    }
    let before = calls(&server);
    assert!(writer.release().await.expect("release"));
    for reader in waiting {
        assert!(reader.await.expect("reader"));
    }
    let delta = since(&server, &before);
    // Two other Lockers: two messages; the writer's own readers are told by its reply.
    assert_eq!(of(&delta, "publish"), 2, "{delta:?}");
}

/// Inside one Locker a released permit goes to the next waiter in the release itself:
/// no message, no claim; the waiter is woken from the release's reply. (Across Lockers:
/// one message and no claim, below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_inside_one_locker_needs_no_message_and_no_claim() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let semaphore = locker.semaphore("pool", 1);
    // Loads the scripts.
    let first = semaphore.try_acquire(30 * SECOND).await.expect("permit");
    assert!(first.release().await.expect("release"));
    let holder = semaphore.try_acquire(30 * SECOND).await.expect("permit");
    let queue = "lock:{pool}:sem:q";
    let mut waiters = Vec::new();
    for i in 0..4 {
        let semaphore = semaphore.clone();
        waiters.push(tokio::spawn(async move {
            let permit = semaphore
                .acquire()
                .ttl(30 * SECOND)
                .wait(30 * SECOND)
                .await
                .expect("permit");
            permit.release().await.expect("release")
        }));
        until("the waiter to queue", || queued(&server, queue) == i + 1).await;
    }
    let before = calls(&server);
    assert!(holder.release().await.expect("release"));
    for waiter in waiters {
        assert!(waiter.await.expect("waiter"));
    }
    let delta = since(&server, &before);
    assert_eq!(of(&delta, "publish"), 0, "{delta:?}");
    // Five releases (each hands over to the next; the last finds nobody), no claim.
    assert_eq!(of(&delta, "evalsha") + of(&delta, "eval"), 5, "{delta:?}");
    assert!(total(&delta) <= 5 * 8, "{delta:?}");
}

/// `locker` takes and gives back a permit of another name: it has asked the server whether
/// it has replicas (none: no acknowledgement to wait for), as it does every few seconds, so
/// a grant it hears of next needs no claim.
async fn warm_up(locker: &Locker) {
    let warm = locker
        .semaphore("warm", 1)
        .try_acquire(30 * SECOND)
        .await
        .expect("permit");
    assert!(warm.release().await.expect("release"));
}

/// Across Lockers a released permit is granted outright to the next waiter too: the
/// release tells the waiter's Locker once (with the server time of the grant), and the
/// waiter takes it without a claim. It counts the permit from the earliest instant the
/// grant can have happened on its own clock, so nearly the whole TTL is left to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_across_lockers_needs_one_message_and_no_claim() {
    let server = RedisServer::start();
    let releasing = Locker::from_url(&server.url()).expect("locker");
    let waiting = Locker::from_url(&server.url()).expect("locker");
    // Loads the scripts.
    let first = releasing
        .semaphore("pool", 1)
        .try_acquire(30 * SECOND)
        .await
        .expect("permit");
    assert!(first.release().await.expect("release"));
    let holder = releasing
        .semaphore("pool", 1)
        .try_acquire(30 * SECOND)
        .await
        .expect("permit");
    warm_up(&waiting).await;
    let semaphore = waiting.semaphore("pool", 1);
    let waiter =
        tokio::spawn(async move { semaphore.acquire().ttl(30 * SECOND).wait(30 * SECOND).await });
    until("the waiter to queue", || {
        queued(&server, "lock:{pool}:sem:q") == 1
    })
    .await;
    // A waiter of a third Locker behind it: it comes to the head of the line with the
    // release, and needs no message for that (nothing moved the first end sooner since it
    // queued: the timer it has looks in time).
    let behind = Locker::from_url(&server.url()).expect("locker");
    warm_up(&behind).await;
    let last = behind.semaphore("pool", 1);
    let next = tokio::spawn(async move { last.acquire().ttl(30 * SECOND).wait(30 * SECOND).await });
    until("the second waiter to queue", || {
        queued(&server, "lock:{pool}:sem:q") == 2
    })
    .await;
    // Long enough that a permit counted from the waiter's queued attempt, not from the
    // grant, would show it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = calls(&server);
    assert!(holder.release().await.expect("release"));
    let permit = waiter.await.expect("waiter").expect("permit");
    let delta = since(&server, &before);
    assert_eq!(of(&delta, "publish"), 1, "{delta:?}");
    // The release alone: no claim.
    assert_eq!(of(&delta, "evalsha") + of(&delta, "eval"), 1, "{delta:?}");
    assert!(
        permit.expires_in() > 29 * SECOND,
        "counted from the grant, less the drift allowance: {:?}",
        permit.expires_in()
    );
    // The next hand-off costs the same.
    let before = calls(&server);
    assert!(permit.release().await.expect("release"));
    let permit = next.await.expect("waiter").expect("permit");
    let delta = since(&server, &before);
    assert_eq!(of(&delta, "publish"), 1, "{delta:?}");
    assert_eq!(of(&delta, "evalsha") + of(&delta, "eval"), 1, "{delta:?}");
    assert!(permit.release().await.expect("release"));
    assert_idle(&server, "lock:{pool}:sem");
}

/// A request for several permits costs what a request for one does: the same calls per
/// uncontended take-and-give-back cycle (warm: the scripts loaded, the state key there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_at_once_cost_what_one_does() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let semaphore = locker.semaphore("gpus", 8);
    let warm = semaphore.acquire().ttl(10 * SECOND).await.expect("warm up");
    warm.release().await.expect("release");
    let mut costs = Vec::new();
    for n in [1, 6, 1, 8] {
        let before = calls(&server);
        let permit = semaphore
            .acquire_many(n)
            .ttl(10 * SECOND)
            .await
            .expect("permits");
        assert_eq!(permit.permits(), n);
        assert!(permit.release().await.expect("release"));
        costs.push((n, total(&since(&server, &before))));
    }
    let one = costs[0].1;
    assert!(
        costs.iter().all(|&(_, cost)| cost == one),
        "calls per cycle by weight: {costs:?}"
    );
}
