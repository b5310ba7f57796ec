//! Multi-locks (`lock_all`) on real redis-server processes, a Cluster, Redlock and memory:
//! all-or-nothing, one round trip on one Redis, no deadlock between opposite orders, and a
//! holder that crashes half-way leaves no lock without its TTL.

use std::future::IntoFuture as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockError, Locker, Protocol};
use lock_tests::{RedisCluster, RedisServer};

use crate::harness::Harness;
use crate::stopped;

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn int_reply(reply: &str) -> i64 {
    reply.trim().trim_start_matches(':').parse().unwrap_or(-99)
}

fn calls(server: &RedisServer, command: &str) -> u64 {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// All of them or none, and a multi-lock and plain locks of the same names exclude each
/// other.
async fn all_or_nothing(locker: &Locker, other: &Locker) {
    let b = other.try_lock("b", 10 * SECOND).await.expect("b");
    let err = locker
        .lock_all(["a", "b", "c"])
        .wait(Duration::ZERO)
        .await
        .expect_err("b is held");
    assert!(
        matches!(&err, LockError::Busy { name, .. } if name == "b"),
        "{err:?}"
    );
    for name in ["a", "c"] {
        assert!(
            locker.inspect(name).await.expect("inspect").is_none(),
            "{name} was not left held"
        );
    }
    let waiting = tokio::spawn(
        locker
            .lock_all(["c", "a", "b", "a"])
            .ttl(10 * SECOND)
            .wait(10 * SECOND)
            .into_future(),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(b.release().await.expect("release"));
    let all = waiting
        .await
        .expect("join")
        .expect("all three once b is free");
    assert_eq!(all.names(), ["a", "b", "c"]);
    for name in ["a", "b", "c"] {
        assert!(matches!(
            other.try_lock(name, SECOND).await,
            Err(LockError::Busy { .. })
        ));
    }
    assert!(all.is_held().await.expect("held"));
    all.extend(20 * SECOND).await.expect("extend");
    assert!(all.release().await.expect("release"));
    for name in ["a", "b", "c"] {
        assert!(locker.inspect(name).await.expect("inspect").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_on_one_redis_in_one_round_trip() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let other = Locker::from_url(&server.url()).expect("locker");
    all_or_nothing(&locker, &other).await;
    // One script call takes them all; nothing else touches Redis.
    let (scripts, sets) = (calls(&server, "evalsha"), calls(&server, "set"));
    let lease = locker
        .lock_all(["x", "y", "z"])
        .await
        .expect("three free locks");
    assert_eq!(calls(&server, "evalsha") - scripts, 1, "one script");
    assert_eq!(calls(&server, "set") - sets, 3, "its three SETs");
    drop(lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_on_every_backend() {
    for harness in [
        Harness::memory(),
        Harness::redlock(),
        Harness::transactions(),
    ] {
        let other = harness.second_locker();
        all_or_nothing(&harness.locker, &other).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_on_a_cluster_across_slots() {
    let cluster = RedisCluster::start(3, 0);
    let locker_on = || {
        Locker::builder()
            .cluster(cluster.urls())
            .build()
            .expect("cluster locker")
    };
    let (locker, other) = (locker_on(), locker_on());
    let masters: std::collections::HashSet<_> = ["a", "b", "c"]
        .iter()
        .map(|n| cluster.master_of(&format!("lock:{{{n}}}")))
        .collect();
    assert!(masters.len() > 1, "the names live on different masters");
    all_or_nothing(&locker, &other).await;
}

/// Two tasks take the same names in opposite orders, many times, while a third takes one
/// of them alone; a counter behind every lock, read and written back in two steps, stays
/// exact, and nobody deadlocks.
async fn opposite_orders_never_deadlock(locker: Locker, other: Locker) {
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (i, names) in [["left", "right"], ["right", "left"], ["right", "right"]]
        .into_iter()
        .enumerate()
    {
        let locker = if i == 1 {
            other.clone()
        } else {
            locker.clone()
        };
        let counter = Arc::clone(&counter);
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let lease = locker
                    .lock_all(names)
                    .ttl(10 * SECOND)
                    .wait(30 * SECOND)
                    .await
                    .expect("no deadlock");
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                lease.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 45);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_on_one_redis_and_redlock() {
    let server = RedisServer::start();
    let one = || Locker::from_url(&server.url()).expect("locker");
    opposite_orders_never_deadlock(one(), one()).await;
    let redlock = Harness::redlock();
    opposite_orders_never_deadlock(redlock.locker.clone(), redlock.second_locker()).await;
}

/// Takes `names` on a locker living in a runtime of its own, and drops that runtime (tasks,
/// connections and all) after `cut`: as far as Redis can tell, a crash.
fn crash_while_acquiring(make: impl FnOnce() -> Locker + Send + 'static, cut: Duration) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let locker = make();
            let acquire = locker
                .lock_all(["crash:1", "crash:2", "crash:3", "crash:4"])
                .ttl(SECOND)
                .wait(Duration::ZERO);
            if let Ok(Ok(lease)) = tokio::time::timeout(cut, acquire.into_future()).await {
                std::mem::forget(lease); // the holder dies holding them
            }
        });
        drop(runtime);
    })
    .join()
    .expect("crashing thread");
}

/// The TTL of every `crash:N` key on `server`: `None` when absent.
fn crash_keys(server: &RedisServer) -> Vec<Option<i64>> {
    (1..=4)
        .map(|i| {
            let pttl = int_reply(&server.command(&["PTTL", &format!("lock:{{crash:{i}}}")]));
            (pttl != -2).then_some(pttl)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_crashing_half_way_leaves_all_or_nothing_with_a_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    let mut seen_all = false;
    for round in 0..20u64 {
        let url = url.clone();
        let cut = Duration::from_micros(round * 150);
        crash_while_acquiring(move || Locker::from_url(&url).expect("locker"), cut);
        tokio::time::sleep(Duration::from_millis(20)).await; // a script in flight lands
        let keys = crash_keys(&server);
        let held = keys.iter().flatten().count();
        assert!(held == 0 || held == 4, "all or nothing: {keys:?}");
        assert!(
            keys.iter().flatten().all(|&pttl| pttl > 0 && pttl <= 1000),
            "every key expires: {keys:?}"
        );
        seen_all |= held == 4;
        for i in 1..=4 {
            server.command(&["DEL", &format!("lock:{{crash:{i}}}")]);
        }
    }
    assert!(seen_all, "some rounds crashed holding the locks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_crashing_half_way_on_redlock_leaves_only_locks_with_a_ttl() {
    let harness = Harness::redlock();
    let urls: Vec<String> = harness.nodes.iter().map(RedisServer::url).collect();
    let mut seen_partial = false;
    for round in 0..20u64 {
        let urls = urls.clone();
        let cut = Duration::from_micros(200 + round * 300);
        crash_while_acquiring(
            move || {
                Locker::builder()
                    .redlock(urls)
                    .node_timeout(Duration::from_millis(500))
                    .build()
                    .expect("redlock locker")
            },
            cut,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        for node in &harness.nodes {
            let keys = crash_keys(node);
            assert!(
                keys.iter().flatten().all(|&pttl| pttl > 0 && pttl <= 1000),
                "every key expires: {keys:?}"
            );
            let held = keys.iter().flatten().count();
            seen_partial |= held > 0 && held < 4;
            for i in 1..=4 {
                node.command(&["DEL", &format!("lock:{{crash:{i}}}")]);
            }
        }
    }
    // Not asserted (timing decides), but reported: the one-by-one path was cut mid-way.
    eprintln!("a crash left part of the locks taken on some node: {seen_partial}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_multi_lock_lives_on_and_reports_the_loss_of_any_lock() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let lease = locker
        .lock_all(["r:1", "r:2"])
        .ttl(Duration::from_millis(300))
        .auto_renew()
        .await
        .expect("locks");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!lease.is_lost());
    assert!(lease.is_held().await.expect("held"));
    server.command(&["DEL", "lock:{r:2}"]);
    tokio::time::timeout(5 * SECOND, lease.lost())
        .await
        .expect("the renewal saw r:2 gone");
    // The release still frees the other one, and says not everything was ours.
    assert!(!lease.release().await.expect("release"));
    assert!(locker.inspect("r:1").await.expect("inspect").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_multi_lock_hears_the_release_of_the_busy_lock() {
    let server = RedisServer::start();
    let holder = Locker::from_url(&server.url()).expect("locker");
    let waiter = Locker::from_url(&server.url()).expect("locker");
    let held = holder.lock("w:2").ttl(20 * SECOND).await.expect("held");
    let waiting = tokio::spawn(
        waiter
            .lock_all(["w:1", "w:2"])
            .wait(15 * SECOND)
            .into_future(),
    );
    // The waiter marked the holder's value as listened for (its release is announced).
    for _ in 0..500 {
        if server.command(&["GET", "lock:{w:2}"]).contains("~") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(server.command(&["GET", "lock:{w:2}"]).contains("~"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = std::time::Instant::now();
    assert!(held.release().await.expect("release"), "marked, still ours");
    let lease = waiting.await.expect("join").expect("both locks");
    eprintln!(
        "multi-lock hand-off after a release: {:?}",
        released.elapsed()
    );
    assert!(lease.is_held().await.expect("held"));
}

/// Two Lockers (as two processes would have) loop on the same two names in opposite orders
/// for `run`, each request waiting up to `wait`: the lock changes hands hundreds of times,
/// and each waiting side must hear every release while it waits. Returns, per side, how
/// often it got in and how often it timed out.
async fn opposite_loops(
    lockers: [Locker; 2],
    [x, y]: [&str; 2],
    run: Duration,
    wait: Duration,
) -> [(u64, u64); 2] {
    let stop = std::time::Instant::now() + run;
    let mut sides = Vec::new();
    for (locker, names) in lockers.into_iter().zip([[x, y], [y, x]]) {
        let names = names.map(str::to_owned);
        sides.push(tokio::spawn(async move {
            let (mut got, mut timed_out) = (0u64, 0u64);
            while std::time::Instant::now() < stop {
                match locker
                    .lock_all(names.clone())
                    .ttl(10 * SECOND)
                    .wait(wait)
                    .await
                {
                    Ok(lease) => {
                        got += 1;
                        lease.release().await.expect("release");
                    }
                    Err(LockError::Timeout { .. }) => timed_out += 1,
                    Err(err) => panic!("unexpected error: {err}"),
                }
            }
            (got, timed_out)
        }));
    }
    let mut counts = [(0, 0); 2];
    for (count, side) in counts.iter_mut().zip(sides) {
        *count = side.await.expect("side");
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_multi_lock_loops_both_get_in_while_the_lock_changes_hands() {
    let server = RedisServer::start();
    let one = || Locker::from_url(&server.url()).expect("locker");
    let mut timeouts = 0;
    let mut report = Vec::new();
    for _ in 0..4 {
        let counts = opposite_loops([one(), one()], ["x", "y"], 2500 * MS, 2 * SECOND).await;
        timeouts += counts[0].1 + counts[1].1;
        report.push(counts);
    }
    eprintln!("(acquisitions, timeouts) per side and round: {report:?}");
    assert_eq!(
        timeouts, 0,
        "a waiting side timed out while the other kept getting in: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_multi_lock_loops_both_get_in_on_a_cluster_across_slots() {
    let cluster = RedisCluster::start(3, 0);
    // Two names on different masters: the locks are taken one by one.
    let x_master = cluster.master_of("lock:{x}");
    let y = (0..1000)
        .map(|i| format!("y{i}"))
        .find(|y| cluster.master_of(&format!("lock:{{{y}}}")) != x_master)
        .expect("a name on another master");
    let one = || {
        Locker::builder()
            .cluster(cluster.urls())
            .build()
            .expect("cluster locker")
    };
    let mut timeouts = 0;
    let mut report = Vec::new();
    for _ in 0..3 {
        let counts = opposite_loops([one(), one()], ["x", &y], 2500 * MS, 2 * SECOND).await;
        timeouts += counts[0].1 + counts[1].1;
        report.push(counts);
    }
    eprintln!("(acquisitions, timeouts) per side and round: {report:?}");
    assert_eq!(
        timeouts, 0,
        "a waiting side timed out while the other kept getting in: {report:?}"
    );
}

/// Issue 24, first suspect. A multi-lock attempt in flight on a server that stops answering
/// (SIGSTOP: a stalled process, a paused VM) times out; the response timeout retires the
/// shared connection. The attempt's give-back must follow its acquire on the socket the
/// acquire went out on, or it cannot reach the server before the acquire runs: sent on a new
/// connection it either fails (the server does not answer the new connection's set-up
/// within the timeout) or may overtake the acquire when the server resumes. Either way the
/// locks would be held by nobody until their TTL. The server is resumed at several points:
/// before the give-back's new connection gives up, after it, after the request ended.
/// Failed on the old code in round 1 (resumed after 500 ms): one key left with TTL 29.2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_attempt_stalled_past_its_timeout_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let locker = || stopped::short_timeout_locker(&server);
    stalled_attempts_leave_no_lock_behind(&server, locker).await;
}

/// The same on a Cluster, where the locks are taken one by one: the acquire left without an
/// answer is undone by the backend on its own connection; the others were answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_attempt_stalled_on_a_cluster_leaves_no_lock_behind() {
    let cluster = RedisCluster::start_one_node();
    let locker = || {
        Locker::builder()
            .cluster(cluster.urls())
            .command_timeout(Duration::from_millis(200))
            .build()
            .expect("cluster locker")
    };
    stalled_attempts_leave_no_lock_behind(&cluster.nodes[0], locker).await;
}

/// Locks `gb:a<round>` and `gb:b<round>` together (see [`stopped`]).
async fn stalled_attempts_leave_no_lock_behind(
    server: &RedisServer,
    locker_of: impl Fn() -> Locker,
) {
    let names = |name: &str| [format!("{name}:a"), format!("{name}:b")];
    stopped::stalled_requests_leave_nothing_behind(
        server,
        locker_of,
        "gb",
        |locker, name, wait| async move {
            let all = locker
                .lock_all(names(&name))
                .ttl(30 * SECOND)
                .wait(wait)
                .await?;
            assert!(all.release().await?, "{name}: released");
            Ok(())
        },
        |_, name| async move {
            names(&name)
                .iter()
                .map(|name| format!("lock:{{{name}}}"))
                .filter(|key| server.command(&["EXISTS", key]) != ":0\r\n")
                .map(|key| format!("{key} (PTTL {})", server.command(&["PTTL", &key]).trim()))
                .collect()
        },
    )
    .await;
}

/// The same on WATCH/MULTI, where the names are taken in one transaction: an attempt left
/// without an answer is undone by the backend's own task once its transaction answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_attempt_stalled_on_watch_multi_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let locker = || {
        Locker::builder()
            .url(server.url())
            .protocol(Protocol::Transactions)
            .command_timeout(Duration::from_millis(200))
            .build()
            .expect("locker")
    };
    stalled_attempts_leave_no_lock_behind(&server, locker).await;
}

/// On WATCH/MULTI a multi-lock takes its names in one transaction: while one of them is
/// held, its attempts write none of the others, not even for a moment (taken one by one,
/// each attempt set the free names before it met the held one and gave them back, and a
/// waiter for those names that looked in between found them held by nobody who would keep
/// them: lock-torture's liveness rule flagged such waits). Failing first: 20 attempts, 20
/// `SET`s of the first name (and their give-backs) beside the mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_multi_multi_lock_writes_no_name_while_another_is_held() {
    let harness = Harness::transactions();
    let server = harness.server.as_ref().expect("a server");
    let other = harness.second_locker();
    let held = other.try_lock("part:b", 30 * SECOND).await.expect("b");
    server.command(&["CONFIG", "RESETSTAT"]);
    for _ in 0..20 {
        let err = harness
            .locker
            .lock_all(["part:a", "part:b", "part:c"])
            .ttl(10 * SECOND)
            .wait(Duration::ZERO)
            .await
            .expect_err("b is held");
        assert!(
            matches!(&err, LockError::Busy { name, .. } if name == "part:b"),
            "busy on the held name: {err:?}"
        );
    }
    // One SET: the first attempt's mark on b's value (so that b's release is announced).
    assert_eq!(calls(server, "set"), 1, "only the mark was written");
    assert_eq!(calls(server, "del"), 0, "nothing was given back");
    for name in ["part:a", "part:c"] {
        assert!(harness
            .locker
            .inspect(name)
            .await
            .expect("inspect")
            .is_none());
    }
    // A waiting request hears b's release and takes all three, with one value.
    let waiting = tokio::spawn(
        harness
            .locker
            .lock_all(["part:a", "part:b", "part:c"])
            .ttl(10 * SECOND)
            .wait(20 * SECOND)
            .into_future(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held.release().await.expect("release"), "b was still ours");
    let lease = waiting
        .await
        .expect("join")
        .expect("all three, once b is free");
    let values: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| server.command(&["GET", &format!("lock:{{part:{n}}}")]))
        .collect();
    assert!(
        values.iter().all(|v| *v == values[0] && v.contains(':')),
        "{values:?}"
    );
    assert!(lease.release().await.expect("release"));
    for name in ["part:a", "part:b", "part:c"] {
        assert!(harness
            .locker
            .inspect(name)
            .await
            .expect("inspect")
            .is_none());
    }
}

/// A multi-lock request on WATCH/MULTI dropped at every point of its attempt (a caller's
/// `timeout` of 0 to 7 ms, which lands before, inside and after the transaction) leaves no
/// name held: what a transaction granted after its caller left is given back by the
/// backend's task, long before the 60 s TTL would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_multi_multi_lock_dropped_anywhere_leaves_no_name_held() {
    let harness = Harness::transactions();
    let server = harness.server.as_ref().expect("a server");
    let names = ["drop:a", "drop:b", "drop:c"];
    let mut granted = 0;
    for round in 0..120u64 {
        let request = harness
            .locker
            .lock_all(names)
            .ttl(60 * SECOND)
            .into_future();
        let cut = Duration::from_micros(round * 60);
        if let Ok(lease) = tokio::time::timeout(cut, request).await {
            granted += 1;
            assert!(lease.expect("free names").release().await.expect("release"));
        }
    }
    eprintln!("{granted} of 120 requests ended before their caller's timeout");
    let mut left = Vec::new();
    for _ in 0..100 {
        left = names
            .iter()
            .map(|n| format!("lock:{{{n}}}"))
            .filter(|key| server.command(&["EXISTS", key]) != ":0\r\n")
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(left.is_empty(), "left held: {left:?}");
    let lease = harness
        .locker
        .lock_all(names)
        .ttl(10 * SECOND)
        .wait(Duration::ZERO)
        .await
        .expect("every name free again");
    assert!(lease.release().await.expect("release"));
}

/// A foreign value on one of a multi-lock's keys is named in the error, on one Redis and on
/// WATCH/MULTI alike (where one look reads every key: the error is traced to its key), and
/// nothing of the request stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_on_one_name_is_the_error_that_names_it() {
    let server = RedisServer::start();
    server.command(&["HSET", "lock:{wt:b}", "field", "value"]);
    for protocol in [Protocol::Scripts, Protocol::Transactions] {
        let locker = Harness::locker_for(&server, protocol);
        let err = locker
            .lock_all(["wt:a", "wt:b", "wt:c"])
            .ttl(10 * SECOND)
            .wait(Duration::ZERO)
            .await
            .expect_err("a hash on b");
        assert!(
            matches!(&err, LockError::WrongType { name, key } if name == "wt:b" && key == "lock:{wt:b}"),
            "{protocol:?}: {err:?}"
        );
        for name in ["wt:a", "wt:c"] {
            assert_eq!(
                server.command(&["EXISTS", &format!("lock:{{{name}}}")]),
                ":0\r\n",
                "{protocol:?}: {name} left held"
            );
        }
    }
}
