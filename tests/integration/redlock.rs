//! Redlock across independent masters: quorum, node failures, fencing across majorities,
//! and the delayed-restart rule.

use std::time::{Duration, Instant};

use lock_core::LockError;

use crate::behaviour::fencing_grows;
use crate::harness::Harness;
use crate::queue::{queued, until};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_is_tolerated_a_majority_down_fails_cleanly() {
    let mut h = Harness::redlock_of(5);
    let lease = h
        .locker
        .try_lock("q", 10 * SECOND)
        .await
        .expect("all nodes up");
    assert!(lease.release().await.expect("release"));

    h.nodes[0].kill();
    h.nodes[1].kill();
    let lease = h
        .locker
        .try_lock("q", 10 * SECOND)
        .await
        .expect("3 of 5 is a majority");
    let other = h.second_locker();
    assert!(matches!(
        other.try_lock("q", SECOND).await,
        Err(LockError::Busy { .. })
    ));
    lease
        .extend(10 * SECOND)
        .await
        .expect("extend with a majority");
    assert!(lease.release().await.expect("release with a majority"));

    h.nodes[2].kill();
    let started = Instant::now();
    match h.locker.lock("q").ttl(SECOND).wait(2 * SECOND).await {
        Err(LockError::NoQuorum {
            agreed,
            needed,
            nodes,
            ..
        }) => {
            assert_eq!(
                (agreed, needed, nodes),
                (2, 3, 5),
                "the two live nodes granted, three were needed"
            );
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(
        started.elapsed() < 10 * SECOND,
        "fails within its deadline, no hang"
    );
}

/// A wait that ends while an attempt is still unanswered names what the attempts before it
/// found (no majority within reach), not a plain timeout with nobody holding. One master
/// is down and another asleep: every attempt waits out the sleeping one's 500 ms node
/// deadline and fails short of a majority, and the 1.8 s wait (well inside the 10 s
/// unreachable timeout, which would end it otherwise) ends in the middle of one. (Under
/// load, `a_minority_down_is_tolerated_a_majority_down_fails_cleanly` met this ending.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_ends_mid_attempt_names_the_missing_majority() {
    let mut h = Harness::redlock_debuggable(3);
    let locker = lock_core::Locker::builder()
        .redlock(h.nodes.iter().map(lock_tests::RedisServer::url))
        .node_timeout(Duration::from_millis(500))
        .command_timeout(Duration::from_millis(600))
        .unreachable_timeout(10 * SECOND)
        .build()
        .expect("redlock locker");
    let warm = locker.try_lock("out", SECOND).await.expect("acquire");
    warm.release().await.expect("release");
    h.nodes[1].kill();
    let sleeper = h.nodes[2].stall(4 * SECOND);
    let got = locker
        .lock("out")
        .ttl(10 * SECOND)
        .wait(Duration::from_millis(1800))
        .await;
    assert!(
        matches!(
            got,
            Err(LockError::NoQuorum {
                needed: 2,
                nodes: 3,
                ..
            })
        ),
        "expected NoQuorum, got {got:?}"
    );
    sleeper.join().expect("the master slept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_different_majorities() {
    let mut h = Harness::redlock_of(3);
    let mut last = 0;
    // Take the lock on {0,1,2}, then with node 2 down ({0,1}), then with node 0 down
    // ({1,2}): every majority overlaps the previous one, and the token keeps growing.
    for step in 0..3 {
        match step {
            1 => h.nodes[2].kill(),
            2 => {
                h.nodes[2].restart();
                h.nodes[0].kill();
            }
            _ => {}
        }
        fencing_grows(&h.locker, &mut last, 3).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delayed_restart_rule_keeps_mutual_exclusion() {
    // Node 2 is down while A takes the lock, so A holds it on nodes 0 and 1 only.
    let mut h = Harness::redlock_of(3);
    h.nodes[2].kill();
    let ttl = SECOND;
    let a = h
        .locker
        .try_lock("d", ttl)
        .await
        .expect("A acquires on a majority");
    let a_valid_until = Instant::now() + a.expires_in();
    // Node 0 crashes and loses A's key. Restarted at once and empty, it would let B take
    // {0, 2}: two holders. The rule: a crashed node stays out for at least the longest TTL.
    h.nodes[0].kill();
    h.nodes[2].restart();
    tokio::time::sleep(ttl).await; // the delayed restart
    h.nodes[0].restart();
    let b = h.second_locker();
    let lease = b
        .lock("d")
        .ttl(ttl)
        .wait(5 * SECOND)
        .await
        .expect("B acquires");
    assert!(
        Instant::now() >= a_valid_until,
        "B got the lock only after A's lease had run out"
    );
    assert!(a.is_lost());
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_costs_at_most_the_node_timeout() {
    let h = Harness::redlock_debuggable(3);
    // Connect to every node first, then stall one (DEBUG SLEEP blocks it; `stall` fails the
    // test if the server refuses it) and lock on the others: the operation waits for the
    // fastest majority, at most the node deadline for the sleeping node, never for the
    // sleep itself.
    let warm = h.locker.try_lock("slow", SECOND).await.expect("acquire");
    warm.release().await.expect("release");
    let sleeper = h.nodes[0].stall(3 * SECOND);
    let started = Instant::now();
    let lease = h
        .locker
        .try_lock("slow", 10 * SECOND)
        .await
        .expect("a majority answers");
    assert!(
        started.elapsed() < 2 * SECOND,
        "did not wait out the 3 s sleep (node deadline 500 ms)"
    );
    lease.release().await.expect("release");
    sleeper.join().expect("the node slept");
}

/// A failed attempt pays a slow node's deadline once too: the attempt waits for the
/// sleeping node (500 ms), and its give-back does not wait for it a second time (the node's
/// own undo follows the attempt on its connection). Before, a busy answer with one node
/// asleep came after two deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_costs_a_failed_attempt_the_node_timeout_once() {
    let h = Harness::redlock_debuggable(3);
    let other = Harness::redlock_locker(&h.nodes);
    // Both lockers connected to every node before the stall.
    let warm = other.try_lock("warm", SECOND).await.expect("acquire");
    warm.release().await.expect("release");
    let held = h
        .locker
        .try_lock("busy", 30 * SECOND)
        .await
        .expect("acquire");
    let sleeper = h.nodes[0].stall(3 * SECOND);
    let started = Instant::now();
    let busy = other.try_lock("busy", 10 * SECOND).await;
    let took = started.elapsed();
    assert!(
        matches!(busy, Err(LockError::Busy { .. })),
        "the two awake nodes hold it: {busy:?}"
    );
    assert!(
        took < Duration::from_millis(900),
        "a busy answer took {took:?}: the sleeping node's 500 ms deadline was paid twice"
    );
    // Its value was never set on the awake nodes (busy there); the sleeping node's undo
    // follows its attempt once it wakes: the holder still holds, and gives back.
    assert!(held.release().await.expect("release"));
    sleeper.join().expect("the node slept");
    // Nothing of the failed attempt is left once the node is awake: the lock is free.
    let lease = other
        .lock("busy")
        .ttl(10 * SECOND)
        .wait(2 * SECOND)
        .await
        .expect("nothing left behind");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_on_one_node_fails_the_attempt_and_leaves_nothing_behind() {
    // Regression (issue 13): the WRONGTYPE answer of one node was returned before the
    // clean-up, so the other nodes kept this attempt's value for the whole TTL and every
    // later acquire was "busy, held by" this very process.
    let h = Harness::redlock_of(3);
    assert!(h.nodes[2]
        .command(&["HSET", "lock:{job}", "field", "value"])
        .starts_with(':'));
    for wait in [Duration::ZERO, Duration::from_millis(300)] {
        match h.locker.lock("job").ttl(60 * SECOND).wait(wait).await {
            Err(LockError::WrongType { name, .. }) => assert_eq!(name, "job"),
            other => panic!("wait {wait:?}: expected WrongType, got {other:?}"),
        }
        for (i, node) in h.nodes[..2].iter().enumerate() {
            assert_eq!(
                node.command(&["EXISTS", "lock:{job}"]),
                ":0\r\n",
                "wait {wait:?}: node {i} kept the failed attempt's value"
            );
        }
    }
    assert!(h.nodes[2].command(&["TYPE", "lock:{job}"]).contains("hash"));
    assert!(h.nodes[2].command(&["DEL", "lock:{job}"]).starts_with(":1"));
    let lease = h
        .second_locker()
        .try_lock("job", SECOND)
        .await
        .expect("free once the foreign value is gone");
    lease.release().await.expect("release");
}

// Waiting on Redlock (issue 26): a waiter queue on every master, ordered by the waiters'
// tickets, so that a release hands the lock to the same head on each.

/// Whether every live master's queue for `name` holds `n` waiters.
fn queued_everywhere(h: &Harness, name: &str, n: usize) -> bool {
    h.nodes.iter().all(|node| queued(node, name) == n)
}

/// Lock `name` for `ttl` with the harness's first locker.
async fn hold(h: &Harness, name: &str, ttl: Duration) -> lock_core::Lease {
    h.locker.lock(name).ttl(ttl).await.expect("holder")
}

/// [`hold`], on every master: on a loaded machine one master can still hold the previous
/// waiter's reservation (its claim there was late; the reservation lasts a claim window),
/// or miss its deadline, and the lock is granted by the others (a majority is all Redlock
/// needs). A waiter then finds that master's lock free once the reservation ends, takes it
/// with its attempt, gives it back, and is in line on the majority only, as it should be;
/// the tests that count waiters on every master want the lock busy everywhere, so such a
/// grant is given back and taken again.
async fn hold_everywhere(h: &Harness, name: &str, ttl: Duration) -> lock_core::Lease {
    let key = format!("lock:{{{name}}}");
    for _ in 0..20 {
        let lease = hold(h, name, ttl).await;
        if h.nodes
            .iter()
            .all(|node| node.command(&["GET", &key]).contains(lease.token()))
        {
            return lease;
        }
        assert!(lease.release().await.expect("release"));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("the holder of `{name}` was never on every master in 20 grants");
}

/// A request of `locker` for `name` (waiting up to 20 s) in a task of its own: when it got
/// the lock (released again at once).
pub(crate) fn waiter(
    locker: lock_core::Locker,
    name: &'static str,
) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let lease = locker
            .lock(name)
            .ttl(10 * SECOND)
            .wait(20 * SECOND)
            .await
            .expect("waiter");
        let got = Instant::now();
        assert!(lease.release().await.expect("release"));
        got
    })
}

/// Releases `holder`; how long after the release `waiting` got the lock.
async fn handed_over_after(
    holder: lock_core::Lease,
    waiting: tokio::task::JoinHandle<Instant>,
) -> Duration {
    let released = Instant::now();
    assert!(holder.release().await.expect("release"));
    waiting
        .await
        .expect("join")
        .saturating_duration_since(released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_lockers_are_served_in_arrival_order_on_redlock() {
    let h = Harness::redlock();
    let holder = hold_everywhere(&h, "fifo", 10 * SECOND).await;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 1..=5 {
        let locker = h.second_locker();
        let order = std::sync::Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let lease = locker
                .lock("fifo")
                .ttl(10 * SECOND)
                .wait(20 * SECOND)
                .await
                .expect("waiter");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(lease.release().await.expect("release"));
        }));
        until("the waiter to queue on every master", || {
            queued_everywhere(&h, "fifo", i)
        })
        .await;
    }
    assert!(holder.release().await.expect("release"));
    for waiter in waiters {
        waiter.await.expect("join");
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5]);
    assert!(
        queued_everywhere(&h, "fifo", 0),
        "the queues are gone with their waiters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiter_is_woken_promptly_on_release() {
    let h = Harness::redlock();
    for round in 0..5 {
        let holder = hold_everywhere(&h, "prompt", 30 * SECOND).await;
        let waiting = waiter(h.second_locker(), "prompt");
        until("the waiter to queue", || queued_everywhere(&h, "prompt", 1)).await;
        let took = handed_over_after(holder, waiting).await;
        // Woken by its turn, not by a timer (the holder had 30 s left; the safety net
        // fires after 0.5 s at the earliest).
        assert!(
            took < Duration::from_millis(400),
            "round {round}: the waiter took {took:?} after the release"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_down_does_not_block_redlock_waiters() {
    // Turn messages come from every master; any one may be down.
    for down in [0usize, 2] {
        let mut h = Harness::redlock();
        h.nodes[down].kill();
        let holder = hold(&h, "down", 30 * SECOND).await;
        let waiting = waiter(h.second_locker(), "down");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let took = handed_over_after(holder, waiting).await;
        assert!(
            took < 2 * SECOND,
            "node {down} down: the waiter took {took:?} after the release (the holder had 30 s left)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_redlock_waiter_leaves_every_masters_queue() {
    let h = Harness::redlock();
    let holder = hold_everywhere(&h, "leave", 30 * SECOND).await;
    let waiting = waiter(h.second_locker(), "leave");
    until("the waiter to queue on every master", || {
        queued_everywhere(&h, "leave", 1)
    })
    .await;
    waiting.abort();
    until("the cancelled waiter to leave every master's queue", || {
        queued_everywhere(&h, "leave", 0)
    })
    .await;
    // And the next waiter is not held up by a place left behind.
    let next = waiter(h.second_locker(), "leave");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let took = handed_over_after(holder, next).await;
    assert!(took < 2 * SECOND, "the next waiter took {took:?}");
}

/// Three lockers on three masters, the third with its clock `skew_ms` off where it takes
/// its tickets, each looping (wait 2 s, hold 10 ms) for `run_for`: the grants of each.
async fn grants_with_one_skewed_clock(skew_ms: i64, run_for: Duration) -> [u64; 3] {
    let h = Harness::redlock_of(3);
    let skewed = lock_core::Locker::builder()
        .redlock(h.nodes.iter().map(lock_tests::RedisServer::url))
        .node_timeout(Duration::from_millis(500))
        .app_name("lock-tests-skewed")
        .ticket_clock_skew_ms(skew_ms)
        .build()
        .expect("redlock locker");
    let lockers = [h.locker.clone(), h.second_locker(), skewed];
    let started = Instant::now();
    let tasks: Vec<_> = lockers
        .into_iter()
        .map(|locker| {
            tokio::spawn(async move {
                let mut grants = 0u64;
                while started.elapsed() < run_for {
                    match locker.lock("skew").ttl(SECOND).wait(2 * SECOND).await {
                        Ok(lease) => {
                            grants += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            let _ = lease.release().await;
                        }
                        Err(LockError::Timeout { .. }) => {}
                        Err(err) => panic!("{err}"),
                    }
                }
                grants
            })
        })
        .collect();
    let mut grants = [0u64; 3];
    for (slot, task) in grants.iter_mut().zip(tasks) {
        *slot = task.await.expect("join");
    }
    grants
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_whose_clock_is_ahead_is_not_starved() {
    // Tickets on the client's own clock put a client 5 s ahead behind every other waiter,
    // always: it got no grant at all while the two others shared the lock.
    let grants = grants_with_one_skewed_clock(5_000, 3 * SECOND).await;
    let total: u64 = grants.iter().sum();
    eprintln!("grants with one clock 5 s ahead: {grants:?}");
    assert!(total > 30, "the lock kept changing hands: {grants:?}");
    assert!(
        grants[2] * 5 >= total,
        "the client whose clock is ahead got its share (at least a fifth): {grants:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_client_whose_clock_is_behind_is_not_favoured() {
    // Tickets on the client's own clock put a client 5 s behind ahead of every other
    // waiter, always: it took every other turn (half the grants), the two others shared
    // the rest, and a newcomer ahead of a reserved head cost claim windows.
    let grants = grants_with_one_skewed_clock(-5_000, 3 * SECOND).await;
    let total: u64 = grants.iter().sum();
    eprintln!("grants with one clock 5 s behind: {grants:?}");
    assert!(total > 30, "the lock kept changing hands: {grants:?}");
    for (i, &n) in grants.iter().enumerate() {
        assert!(
            n * 5 >= total && n * 5 <= total * 2,
            "client {i} got between a fifth and two fifths of the grants: {grants:?}"
        );
    }
}

/// Found by lock-torture's Redlock smoke (a request cut by its deadline in `partition`):
/// an attempt dropped while one master is still answering used to leave its value on the
/// masters that had already granted (each had answered, so none kept an undo of its own),
/// and with a majority of them the lock was held by nobody for the whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_attempt_dropped_while_a_master_is_slow_leaves_no_lock_behind() {
    let h = Harness::redlock_debuggable(3);
    let warm = h.locker.try_lock("dropped", SECOND).await.expect("acquire");
    warm.release().await.expect("release");
    let sleeper = h.nodes[0].stall(2 * SECOND);
    // The two other masters grant at once; the attempt waits for the sleeping one (up to
    // the 500 ms per-master deadline) and is dropped meanwhile.
    let cut = tokio::time::timeout(
        Duration::from_millis(150),
        h.locker.try_lock("dropped", 30 * SECOND),
    )
    .await;
    assert!(
        cut.is_err(),
        "the attempt was still waiting for the sleeping master"
    );
    // What it set is taken back: another locker gets the lock from the two masters that
    // answer, now, not after the dropped attempt's 30 s TTL. Within a few seconds, not
    // one: the undo runs in a task of its own, and when the other locker's first attempt
    // reaches the two masters before it does (a loaded machine), that attempt and the
    // waiter's ticket each wait the 500 ms per-node deadline for the sleeping master.
    let other = Harness::redlock_locker(&h.nodes);
    let lease = other
        .lock("dropped")
        .ttl(10 * SECOND)
        .wait(5 * SECOND)
        .await
        .expect("the dropped attempt left nothing held");
    lease.release().await.expect("release");
    sleeper.join().expect("the master slept");
}
