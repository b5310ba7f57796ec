//! Issue 25: the replica acknowledgement check (`WAIT`) covers every write a holder relies
//! on, not only the plain lock's: a semaphore's permit, a read-write lock's lease, a
//! multi-lock and a lock on WATCH/MULTI (`Protocol::Transactions`) count only once a replica
//! acknowledged them. With the master's only replica stopped (SIGSTOP) each grant is
//! refused with `NotReplicated` (retried within the wait first) and nothing of it stays
//! held; with the check off, the old behaviour: the master grants what no replica has.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, Protocol, ReplicaSync};
use lock_tests::RedisServer;

use crate::failover::until_replica_online;

const SECOND: Duration = Duration::from_secs(1);
const SYNC_TIMEOUT: Duration = Duration::from_millis(100);
/// The wait of the grants a test needs before it stops the replica.
const WARM: Duration = Duration::from_secs(10);

/// A master and its replica, online.
struct Pair {
    master: RedisServer,
    replica: RedisServer,
}

impl Pair {
    fn start() -> Pair {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
        until_replica_online(&master);
        Pair { master, replica }
    }

    /// A locker on the master with `sync`, on Lua scripts or WATCH/MULTI.
    fn locker(&self, sync: ReplicaSync, protocol: Protocol) -> Locker {
        Locker::builder()
            .url(self.master.url())
            .protocol(protocol)
            .command_timeout(SECOND)
            .sync_timeout(SYNC_TIMEOUT)
            .replica_sync(sync)
            .build()
            .expect("locker on the master")
    }

    fn checked(&self) -> Locker {
        self.locker(ReplicaSync::default(), Protocol::Scripts)
    }

    fn unchecked(&self) -> Locker {
        self.locker(ReplicaSync::Off, Protocol::Scripts)
    }

    fn stop_replica(&self) {
        self.replica.signal("-STOP");
    }

    fn resume_replica(&self) {
        self.replica.signal("-CONT");
    }

    /// `WAIT` calls the master ran so far.
    fn waits(&self) -> u64 {
        self.master
            .command(&["INFO", "commandstats"])
            .lines()
            .find(|line| line.starts_with("cmdstat_wait:"))
            .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
}

/// The error a grant no replica acknowledged must end with.
fn assert_not_replicated<T: std::fmt::Debug>(what: &str, result: Result<T, LockError>) {
    match result {
        Err(LockError::NotReplicated {
            acknowledged: 0,
            required: 1,
            ..
        }) => {}
        other => panic!("{what}: a grant no replica acknowledged was given: {other:?}"),
    }
}

/// Polls `check` (what a failed grant gives back may go in the background) for up to 2 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < 2 * SECOND, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_permit_no_replica_has_is_not_given() {
    let pair = Pair::start();
    let (checked, unchecked) = (pair.checked(), pair.unchecked());
    // The check turns on once it saw the master with a replica. The grants it must give
    // wait (a loaded machine's replica may miss one 100 ms acknowledgement; a wait retries).
    let warm = checked
        .semaphore("s", 2)
        .acquire()
        .ttl(30 * SECOND)
        .wait(WARM)
        .await;
    assert!(warm.expect("a permit").release().await.expect("release"));
    let held = checked
        .semaphore("kept", 2)
        .acquire()
        .ttl(30 * SECOND)
        .wait(WARM)
        .await
        .expect("a permit the replica has");

    pair.stop_replica();
    assert_not_replicated(
        "try_acquire",
        checked.semaphore("s", 2).try_acquire(30 * SECOND).await,
    );
    let nothing_held = async || {
        let holders = unchecked
            .semaphore("s", 2)
            .holders()
            .await
            .expect("holders");
        holders.holders.is_empty() && holders.waiting == 0
    };
    assert!(nothing_held().await, "the refused permit was given back");
    // Within a wait, each failed attempt is retried; the last one's cause is the error.
    let waits = pair.waits();
    assert_not_replicated(
        "acquire with a wait",
        checked
            .semaphore("s", 2)
            .acquire()
            .ttl(30 * SECOND)
            .wait(SECOND)
            .await,
    );
    assert!(pair.waits() >= waits + 2, "retried within the wait");
    eventually("the refused permits were given back", nothing_held).await;
    // An extension no replica has is refused too.
    assert_not_replicated("extend", held.extend(30 * SECOND).await);

    // The old behaviour, with the check off: the master grants what no replica has.
    let unreplicated = unchecked.semaphore("s", 2).try_acquire(30 * SECOND).await;
    let _unreplicated = unreplicated.expect("without the check, the master grants the permit");
    pair.resume_replica();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lease_no_replica_has_is_not_given() {
    let pair = Pair::start();
    let (checked, unchecked) = (pair.checked(), pair.unchecked());
    let warm = checked
        .rwlock("rw")
        .write()
        .ttl(30 * SECOND)
        .wait(WARM)
        .await;
    assert!(warm.expect("write lease").release().await.expect("release"));

    pair.stop_replica();
    let rw = checked.rwlock("rw");
    assert_not_replicated(
        "write",
        rw.write().ttl(30 * SECOND).wait(Duration::ZERO).await,
    );
    assert_not_replicated(
        "read",
        rw.read().ttl(30 * SECOND).wait(3 * SYNC_TIMEOUT).await,
    );
    eventually("the refused leases were given back", async || {
        let holders = unchecked.rwlock("rw").holders().await.expect("holders");
        holders.holders.is_empty() && holders.waiting == 0
    })
    .await;

    let unreplicated = unchecked.rwlock("rw").write().ttl(30 * SECOND).await;
    let _unreplicated = unreplicated.expect("without the check, the master grants the write lease");
    pair.resume_replica();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_no_replica_has_is_not_given() {
    let pair = Pair::start();
    let (checked, unchecked) = (pair.checked(), pair.unchecked());
    let warm = checked
        .lock_all(["a", "b"])
        .ttl(30 * SECOND)
        .wait(WARM)
        .await;
    assert!(warm.expect("multi-lock").release().await.expect("release"));

    pair.stop_replica();
    assert_not_replicated(
        "lock_all",
        checked
            .lock_all(["a", "b", "c"])
            .ttl(30 * SECOND)
            .wait(Duration::ZERO)
            .await,
    );
    assert_not_replicated(
        "lock_all with a wait",
        checked
            .lock_all(["a", "b", "c"])
            .ttl(30 * SECOND)
            .wait(3 * SYNC_TIMEOUT)
            .await,
    );
    eventually("the refused locks were given back", async || {
        for name in ["a", "b", "c"] {
            if unchecked.inspect(name).await.expect("inspect").is_some() {
                return false;
            }
        }
        true
    })
    .await;

    let unreplicated = unchecked.lock_all(["a", "b", "c"]).ttl(30 * SECOND).await;
    let _unreplicated = unreplicated.expect("without the check, the master grants the locks");
    pair.resume_replica();
}

/// On WATCH/MULTI a multi-lock's names are set in one transaction and one `WAIT` covers
/// them all: refused, every one of them is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_multi_multi_lock_no_replica_has_is_not_given() {
    let pair = Pair::start();
    let checked = pair.locker(ReplicaSync::default(), Protocol::Transactions);
    let unchecked = pair.locker(ReplicaSync::Off, Protocol::Transactions);
    let warm = checked
        .lock_all(["a", "b"])
        .ttl(30 * SECOND)
        .wait(WARM)
        .await;
    assert!(warm.expect("multi-lock").release().await.expect("release"));

    pair.stop_replica();
    let waits = pair.waits();
    assert_not_replicated(
        "lock_all",
        checked
            .lock_all(["a", "b", "c"])
            .ttl(30 * SECOND)
            .wait(Duration::ZERO)
            .await,
    );
    assert_eq!(pair.waits() - waits, 1, "one WAIT for the three names");
    for name in ["a", "b", "c"] {
        assert!(
            unchecked.inspect(name).await.expect("inspect").is_none(),
            "{name}: given back before the refusal was reported"
        );
    }
    let unreplicated = unchecked.lock_all(["a", "b", "c"]).ttl(30 * SECOND).await;
    let _unreplicated = unreplicated.expect("without the check, the master grants the locks");
    pair.resume_replica();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_multi_grant_no_replica_has_is_not_given() {
    let pair = Pair::start();
    let checked = pair.locker(ReplicaSync::default(), Protocol::Transactions);
    let unchecked = pair.locker(ReplicaSync::Off, Protocol::Transactions);
    let warm = checked.lock("t").ttl(30 * SECOND).wait(WARM).await;
    assert!(warm.expect("lock").release().await.expect("release"));
    let held = checked
        .lock("kept")
        .ttl(30 * SECOND)
        .wait(WARM)
        .await
        .expect("a lock the replica has");

    pair.stop_replica();
    assert_not_replicated("try_lock", checked.try_lock("t", 30 * SECOND).await);
    assert!(
        unchecked.inspect("t").await.expect("inspect").is_none(),
        "the refused lock was deleted again"
    );
    assert_not_replicated(
        "lock with a wait",
        checked
            .lock("t")
            .ttl(30 * SECOND)
            .wait(3 * SYNC_TIMEOUT)
            .await,
    );
    // The last attempt may be cut off by the wait's end: its undo then runs behind it.
    eventually("the refused lock was deleted again", async || {
        unchecked.inspect("t").await.expect("inspect").is_none()
    })
    .await;
    assert_not_replicated("extend", held.extend(30 * SECOND).await);

    let unreplicated = unchecked.try_lock("t", 30 * SECOND).await;
    let _unreplicated = unreplicated.expect("without the check, the master grants the lock");
    pair.resume_replica();
}
