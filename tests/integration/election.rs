//! Leader election on real Redis, each candidate with its own Locker (its own connections,
//! as separate processes have): FIFO campaigns, terms that only grow, resignation handing on
//! at once, observers that see every change once and in order, a crashed leader replaced
//! within its lease (on one server, a Redis Cluster and behind Sentinel), and a paused
//! leader that knows it lost before acting and whose stale term a fenced store refuses.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LeaderChange, LockError, Locker};
use lock_tests::{RedisCluster, RedisServer};

use crate::harness::Harness;

fn candidate(server: &RedisServer, name: &str) -> Locker {
    Locker::builder()
        .url(server.url())
        .app_name(name)
        .build()
        .expect("locker")
}

/// A store that refuses writes from a term older than the newest it has seen (what the
/// leader's term is for).
#[derive(Default)]
struct FencedStore {
    newest: Mutex<u64>,
    writes: Mutex<Vec<(u64, &'static str)>>,
}

impl FencedStore {
    fn write(&self, term: u64, what: &'static str) -> bool {
        let mut newest = self.newest.lock().expect("store");
        if term < *newest {
            return false;
        }
        *newest = term;
        self.writes.lock().expect("store").push((term, what));
        true
    }
}

/// Waits until `n` Lockers stand in the election lock's waiter queue.
async fn queued(server: &RedisServer, election: &str, n: usize) {
    let key = format!("lock:{{{election}}}:q");
    for _ in 0..500 {
        if server.command(&["ZCARD", &key]).trim() == format!(":{n}") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} candidates never queued for {election}");
}

fn label_of(change: &LeaderChange) -> String {
    match change {
        LeaderChange::Elected(leader) => format!("elected {} {:?}", leader.term, leader.label),
        LeaderChange::Resigned { term, label, .. } => format!("resigned {term} {label:?}"),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaigns_are_served_in_order_and_observers_see_each_change_once() {
    let server = RedisServer::start();
    let (a, b, c) = (
        candidate(&server, "cand-a"),
        candidate(&server, "cand-b"),
        candidate(&server, "cand-c"),
    );
    let watcher = candidate(&server, "watcher");
    let mut observer = watcher.election("orders").observe().await.expect("observe");
    assert!(observer.current().is_none(), "nobody leads yet");

    let first = a.election("orders").campaign().await.expect("a leads");
    let b_campaign = tokio::spawn({
        let b = b.clone();
        async move { b.election("orders").campaign().await }
    });
    queued(&server, "orders", 1).await;
    let c_campaign = tokio::spawn({
        let c = c.clone();
        async move { c.election("orders").campaign().await }
    });
    queued(&server, "orders", 2).await;

    let leader = watcher.election("orders").leader().await.expect("leader");
    let leader = leader.expect("a leads");
    assert_eq!(leader.term, first.term());
    assert!(
        leader
            .label
            .as_deref()
            .is_some_and(|l| l.starts_with("cand-a@")),
        "{leader:?}"
    );
    assert!(leader.since.is_some());

    let t1 = first.term();
    assert!(first.resign().await.expect("resign"));
    let second = b_campaign.await.expect("task").expect("b leads next");
    let t2 = second.term();
    assert!(t2 > t1, "terms only grow");
    assert!(second.resign().await.expect("resign"));
    let third = c_campaign.await.expect("task").expect("c leads last");
    let t3 = third.term();
    assert!(t3 > t2);

    let mut seen = Vec::new();
    for _ in 0..5 {
        let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
            .await
            .expect("a change is announced")
            .expect("observe");
        seen.push(label_of(&change));
    }
    let expected = [
        format!(
            "elected {t1} Some(\"{}\")",
            leader.label.clone().unwrap_or_default()
        ),
        format!(
            "resigned {t1} Some(\"{}\")",
            leader.label.clone().unwrap_or_default()
        ),
    ];
    assert_eq!(seen[..2], expected[..], "{seen:#?}");
    assert!(
        seen[2].starts_with(&format!("elected {t2} Some(\"cand-b@")),
        "{seen:#?}"
    );
    assert!(seen[3].starts_with(&format!("resigned {t2} ")), "{seen:#?}");
    assert!(
        seen[4].starts_with(&format!("elected {t3} Some(\"cand-c@")),
        "{seen:#?}"
    );
    assert_eq!(
        observer.current().map(|l| l.term),
        Some(t3),
        "the observer's view follows"
    );
    // Nothing more: each change was delivered once.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), observer.next())
            .await
            .is_err(),
        "no change delivered twice"
    );
    drop(third);
}

/// Runs `body` on a runtime of its own in a thread of its own: a "process" that can be
/// frozen whole (a blocking sleep stops its timers and its renewal, as SIGSTOP does) or
/// killed (dropping the runtime stops every task without releasing anything, as SIGKILL
/// does).
fn process<F, T>(body: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let out = runtime.block_on(body());
        // Dropped here without waiting for background work: whatever was held stays until
        // its TTL, as after a crash.
        runtime.shutdown_background();
        out
    })
}

/// Lockers of one deployment, each labelled `app` (its own connections: a "process").
type Deployment = Arc<dyn Fn(&str) -> Locker + Send + Sync>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_its_lease_and_observers_see_the_new_term() {
    let server = Arc::new(RedisServer::start());
    let on = Arc::clone(&server);
    killed_leader_is_replaced(Arc::new(move |app| candidate(&on, app))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_killed_leader_is_replaced_within_its_lease() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let on = Arc::clone(&cluster);
    killed_leader_is_replaced(Arc::new(move |app| {
        Locker::builder()
            .cluster(on.urls())
            .app_name(app)
            .build()
            .expect("cluster locker")
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_a_killed_leader_is_replaced_within_its_lease() {
    let master = RedisServer::start();
    let sentinel = Arc::new(RedisServer::start_sentinel("locks", master.port()));
    let on = Arc::clone(&sentinel);
    killed_leader_is_replaced(Arc::new(move |app| {
        Locker::builder()
            .sentinel([on.url()], "locks")
            .app_name(app)
            .build()
            .expect("sentinel locker")
    }))
    .await;
}

/// A leader "process" killed while leading (its runtime dropped: never released, never
/// resigned) is replaced by a follower within its lease, and an observer sees the new term
/// as the next change (a crash is not announced as a resignation).
async fn killed_leader_is_replaced(deployment: Deployment) {
    let lease = Duration::from_secs(1);
    let watcher = deployment("watcher");
    let mut observer = watcher.election("jobs").observe().await.expect("observe");
    let (elected_tx, elected_rx) = std::sync::mpsc::channel();
    let doomed = Arc::clone(&deployment);
    let leader = process(move || async move {
        let locker = doomed("doomed");
        let leadership = locker
            .election("jobs")
            .lease(lease)
            .campaign()
            .await
            .expect("leads");
        elected_tx.send(leadership.term()).expect("tell");
        // Killed while leading: never released, never resigned.
        std::mem::forget(leadership);
    });
    let term = tokio::task::spawn_blocking(move || elected_rx.recv().expect("elected"))
        .await
        .expect("join");
    leader.join().expect("leader process");

    let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("announced")
        .expect("observe");
    assert!(
        matches!(change, LeaderChange::Elected(ref l) if l.term == term),
        "{change:?}"
    );

    let follower = deployment("follower");
    let started = std::time::Instant::now();
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        follower.election("jobs").lease(lease).campaign(),
    )
    .await
    .expect("taken over after the lease, not never")
    .expect("follower leads");
    // Within the dead leader's lease (and a second for a loaded machine), not later.
    assert!(started.elapsed() < lease * 2, "{:?}", started.elapsed());
    assert!(next.term() > term);
    let mut change = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("announced")
        .expect("observe");
    // The dead leader's lease may be seen running out a moment before the follower's
    // claim lands: the vacancy, then the new leader.
    if matches!(change, LeaderChange::Expired { term: t, .. } if t == term) {
        change = tokio::time::timeout(Duration::from_secs(10), observer.next())
            .await
            .expect("announced")
            .expect("observe");
    }
    match change {
        LeaderChange::Elected(leader) => {
            assert_eq!(leader.term, next.term());
            assert!(leader
                .label
                .as_deref()
                .is_some_and(|l| l.starts_with("follower@")));
        }
        other => panic!("a crash is not a resignation: {other:?}"),
    }
    assert!(next.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_knows_it_lost_before_acting_and_its_term_is_refused() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let store = Arc::new(FencedStore::default());
    let url = server.url();
    let (elected_tx, elected_rx) = std::sync::mpsc::channel();
    let (wrote_tx, wrote_rx) = std::sync::mpsc::channel::<()>();
    let old_store = Arc::clone(&store);
    let old_leader = process(move || async move {
        let locker = Locker::builder()
            .url(url)
            .app_name("paused")
            .build()
            .expect("locker");
        let leadership = locker
            .election("billing")
            .lease(lease)
            .campaign()
            .await
            .expect("leads");
        assert!(old_store.write(leadership.term(), "old leader, before the pause"));
        elected_tx.send(leadership.term()).expect("tell");
        // Frozen: no timer, no renewal runs on this runtime for three leases.
        std::thread::sleep(3 * lease);
        // Resumed: before acting, it asks whether it still leads.
        let still_leader = leadership.is_leader();
        wrote_rx.recv().expect("the new leader wrote");
        let accepted = old_store.write(leadership.term(), "old leader, after the pause");
        (still_leader, accepted, leadership.term())
    });
    let old_term = tokio::task::spawn_blocking(move || elected_rx.recv().expect("elected"))
        .await
        .expect("join");

    let follower = candidate(&server, "follower");
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        follower.election("billing").lease(lease).campaign(),
    )
    .await
    .expect("taken over while the leader is paused")
    .expect("follower leads");
    assert!(next.term() > old_term);
    assert!(store.write(next.term(), "new leader"));
    wrote_tx.send(()).expect("tell");

    let (still_leader, accepted, term) = tokio::task::spawn_blocking(move || old_leader.join())
        .await
        .expect("join")
        .expect("old leader process");
    assert_eq!(term, old_term);
    assert!(
        !still_leader,
        "a leader resumed after its lease knows it lost, before acting"
    );
    assert!(!accepted, "the fenced store refuses the stale term");
    assert_eq!(
        store
            .writes
            .lock()
            .expect("store")
            .iter()
            .map(|w| w.1)
            .collect::<Vec<_>>(),
        ["old leader, before the pause", "new leader"]
    );
    assert!(next.is_leader());
    assert!(next.resign().await.expect("resign"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_on_memory_and_refused_where_there_is_no_ordered_record() {
    // Memory: the same API in process.
    let locker = Locker::memory();
    let mut observer = locker.election("e").observe().await.expect("observe");
    let first = locker.election("e").campaign().await.expect("leads");
    let first_term = first.term();
    let change = observer.next().await.expect("change");
    assert!(
        matches!(change, LeaderChange::Elected(ref l) if l.term == first_term),
        "{change:?}"
    );
    assert!(first.resign().await.expect("resign"));
    let change = observer.next().await.expect("change");
    assert!(
        matches!(change, LeaderChange::Resigned { term, .. } if term == first_term),
        "{change:?}"
    );

    // Redlock: a clear refusal, not a half-working election.
    let h = Harness::redlock();
    let err = h
        .locker
        .election("e")
        .campaign()
        .await
        .expect_err("refused");
    assert!(
        matches!(err, LockError::Config(ref m) if m.contains("Redlock")),
        "{err}"
    );
}

/// The public types can cross threads: leadership and views are `Send + Sync`, an observer
/// is `Send` (one task reads it), and a campaign can be spawned.
#[test]
fn election_and_schedule_types_cross_threads() {
    fn shared<T: Send + Sync>() {}
    fn sent<T: Send>() {}
    shared::<lock_core::Election>();
    shared::<lock_core::Leadership>();
    shared::<lock_core::Leader>();
    shared::<LeaderChange>();
    shared::<lock_core::Tick<String>>();
    sent::<lock_core::Observer>();
    fn spawnable<F: std::future::Future + Send + 'static>(_: F) {}
    let locker = Locker::memory();
    let election = locker.election("x");
    spawnable(async move { election.campaign().await.map(|l| l.term()) });
    spawnable(async move { locker.election("x").observe().await.map(|_| ()) });
}

/// Regression: a leader that crashed while no other candidate campaigned stayed the
/// observers' `current()` forever (its record has no expiry, and nothing was announced).
/// Observers now see `Expired` within the lease (plus a small slack) of its last renewal,
/// and `leader()` names nobody once the lease has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_with_no_successor_is_seen_to_expire() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let watcher = candidate(&server, "watcher");
    let election = watcher.election("lonely");
    let mut observer = election.observe().await.expect("observe");
    let (elected_tx, elected_rx) = std::sync::mpsc::channel();
    let url = server.url();
    let leader = process(move || async move {
        let locker = Locker::builder()
            .url(url)
            .app_name("doomed")
            .build()
            .expect("locker");
        let leadership = locker
            .election("lonely")
            .lease(lease)
            .campaign()
            .await
            .expect("leads");
        elected_tx.send(leadership.term()).expect("tell");
        // Killed while leading: never released, never resigned.
        std::mem::forget(leadership);
    });
    let term = tokio::task::spawn_blocking(move || elected_rx.recv().expect("elected"))
        .await
        .expect("join");
    leader.join().expect("leader process");
    let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("announced")
        .expect("observe");
    assert!(
        matches!(change, LeaderChange::Elected(ref l) if l.term == term),
        "{change:?}"
    );
    // The lease ends a second after the last renewal; ten seconds is "not never" on a
    // loaded machine.
    let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("the vacancy is seen, not never")
        .expect("observe");
    match change {
        LeaderChange::Expired { term: t, label } => {
            assert_eq!(t, term);
            assert!(label.as_deref().is_some_and(|l| l.starts_with("doomed@")));
        }
        other => panic!("a crash with nobody to take over: {other:?}"),
    }
    assert!(observer.current().is_none());
    assert!(election.leader().await.expect("leader").is_none());
    // A new leader is still announced after the vacancy.
    let next = election.lease(lease).campaign().await.expect("leads");
    let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("announced")
        .expect("observe");
    assert!(
        matches!(change, LeaderChange::Elected(ref l) if l.term == next.term()),
        "{change:?}"
    );
    assert!(next.resign().await.expect("resign"));
}

/// An observer in the resigning process (the same Locker) is told `Resigned`, never
/// `Expired`: its look at the lease's end, due just after an election, may find the lock
/// already free before the resignation's announcement arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_in_the_resigning_process_is_told_resigned() {
    let server = RedisServer::start();
    let locker = candidate(&server, "same-process");
    let election = locker.election("same-process");
    let mut observer = election.observe().await.expect("observe");
    let mut wrong = Vec::new();
    for round in 0..40 {
        let leadership = election.campaign().await.expect("campaign");
        let term = leadership.term();
        loop {
            match observer.next().await.expect("next") {
                LeaderChange::Elected(leader) if leader.term == term => break,
                LeaderChange::Elected(_) => {}
                other => panic!("round {round}: before the election of {term}: {other:?}"),
            }
        }
        assert!(leadership.resign().await.expect("resign"));
        match observer.next().await.expect("next") {
            LeaderChange::Resigned { term: told, .. } if told == term => {}
            other => wrong.push((round, label_of(&other))),
        }
    }
    assert!(wrong.is_empty(), "resignations told otherwise: {wrong:?}");
}
