//! Degraded replication: a stalled replica, a replication outage, and a failover that
//! leaves the new master without a replica. With the replica acknowledgement check
//! (`ReplicaSync`), only a grant waits for replicas; a request that replication kept from
//! the lock says so (`NotReplicated`, with what the master has connected); and `Auto`
//! keeps granting on a promoted replica that has no replica of its own.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker, ReplicaSync};
use lock_tests::RedisServer;

use crate::failover::until_replica_online;

const SECOND: Duration = Duration::from_secs(1);

/// A master and one online replica.
fn replicated() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
    until_replica_online(&master);
    (master, replica)
}

/// Regression: every acquisition attempt went out on the connections that carry the
/// replica check's `WAIT`s, so with the replica stopped a try of a held name (a busy
/// answer, which needs no replica) queued behind another task's `WAIT` for up to the sync
/// timeout, or ran into the command timeout (`Connection { reason: "timed out" }`). Here
/// four grants wait 4 s each for the stopped replica; busy answers asked meanwhile must
/// all come back before any of those grants does (before: each waited behind a `WAIT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_answer_does_not_wait_behind_a_stalled_replica() {
    let (_master, replica) = replicated();
    let locker = Locker::builder()
        .url(_master.url())
        .command_timeout(10 * SECOND)
        .sync_timeout(4 * SECOND)
        .build()
        .expect("locker");
    let held = locker.try_lock("held", 60 * SECOND).await.expect("acquire");

    replica.signal("-STOP");
    let grants: Vec<_> = (0..4)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let result = locker.try_lock(format!("free:{i}"), 60 * SECOND).await;
                (Instant::now(), result.map(drop))
            })
        })
        .collect();
    // Let the grants reach their WAITs.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut answered = Vec::new();
    for _ in 0..8 {
        let busy = locker.try_lock("held", 60 * SECOND).await;
        answered.push((Instant::now(), busy));
    }
    let mut first_grant_back = None::<Instant>;
    for grant in grants {
        let (at, result) = grant.await.expect("grant task");
        assert!(
            matches!(result, Err(LockError::NotReplicated { .. })),
            "a grant the stopped replica never acknowledged: {result:?}"
        );
        first_grant_back = Some(first_grant_back.map_or(at, |first| first.min(at)));
    }
    replica.signal("-CONT");
    let first_grant_back = first_grant_back.expect("four grants");
    for (at, busy) in &answered {
        assert!(
            matches!(busy, Err(LockError::Busy { .. })),
            "a try of a held name: {busy:?}"
        );
        assert!(
            *at < first_grant_back,
            "a busy answer waited behind a grant's WAIT for the stopped replica"
        );
    }
    assert!(held.release().await.expect("release"));
}

/// Regression: a replication outage read as contention. With the replica stopped and
/// `wait` no longer than the sync timeout, the one attempt's grant was still waiting for
/// the replica when the wait ran out, and the request ended with `Timeout` ("the lock
/// stayed busy"); with a longer wait, the busy answer of a later attempt (which met an
/// earlier attempt's refused grant, not yet undone) cleared the not-replicated state,
/// and the request ended with `Timeout` naming a holder though nobody held the lock.
/// Both must say `NotReplicated`, with what the master has connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replication_outage_is_reported_as_such() {
    let (master, replica) = replicated();
    let locker = Locker::builder()
        .url(master.url())
        .command_timeout(2 * SECOND)
        .sync_timeout(Duration::from_millis(500))
        .build()
        .expect("locker");
    let warm = locker.try_lock("warm", 60 * SECOND).await.expect("acquire");
    assert!(warm.release().await.expect("release"));

    replica.signal("-STOP");
    let short = locker
        .lock("free:short")
        .ttl(60 * SECOND)
        .wait(Duration::from_millis(500))
        .await;
    let long = locker
        .lock("free:long")
        .ttl(60 * SECOND)
        .wait(Duration::from_millis(1_700))
        .await;
    let refused = locker.try_lock("free:try", 60 * SECOND).await;
    replica.signal("-CONT");
    for (what, result) in [("wait = sync timeout", short), ("longer wait", long)] {
        match result {
            Err(LockError::NotReplicated { .. }) => {}
            other => panic!("{what}: nobody holds the lock, replication failed: {other:?}"),
        }
    }
    // The master still has its stopped replica connected: the error says so.
    match refused {
        Err(
            err @ LockError::NotReplicated {
                connected: Some(1), ..
            },
        ) => assert!(
            err.to_string()
                .contains("connected but did not acknowledge"),
            "{err}"
        ),
        other => panic!("a stalled replica: {other:?}"),
    }
}

/// A master, one replica and a Sentinel: the common deployment.
struct Pair {
    master: RedisServer,
    replica: RedisServer,
    sentinel: RedisServer,
}

impl Pair {
    fn start() -> Pair {
        let (master, replica) = replicated();
        let sentinel = RedisServer::start_sentinel("locks", master.port());
        sentinel.until_sentinel_lists_replica("locks", replica.port());
        Pair {
            master,
            replica,
            sentinel,
        }
    }

    fn locker(&self, sync: ReplicaSync) -> Locker {
        Locker::builder()
            .sentinel([self.sentinel.url()], "locks")
            .command_timeout(SECOND)
            .replica_sync(sync)
            .build()
            .expect("sentinel locker")
    }

    /// Kills the master for good and waits until the Sentinel names the replica.
    async fn fail_over(&mut self) {
        self.master.kill();
        let started = Instant::now();
        while !self
            .sentinel
            .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "locks"])
            .contains(&self.replica.port().to_string())
        {
            assert!(started.elapsed() < 30 * SECOND, "the replica was promoted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(self.replica.command(&["ROLE"]).contains("master"));
    }
}

/// Regression: master and one replica behind Sentinel, the master dies and never comes
/// back: the promoted replica has no replica of its own, and `ReplicaSync::Auto`, which
/// had seen replicas, granted nothing from then on (every grant `NotReplicated`) until an
/// operator attached one. Now `Auto` grants there (nothing could be promoted with the
/// grant); `Required` is the strict mode and keeps refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_grants_again_after_a_failover_to_a_replica_without_replicas() {
    let mut pair = Pair::start();
    let auto = pair.locker(ReplicaSync::default());
    let strict = pair.locker(ReplicaSync::Required { replicas: 1 });
    for locker in [&auto, &strict] {
        let warm = locker.try_lock("warm", 10 * SECOND).await.expect("acquire");
        assert!(warm.release().await.expect("release"));
    }
    pair.fail_over().await;

    let granted = auto.lock("after").ttl(10 * SECOND).wait(20 * SECOND).await;
    let lease = granted.expect("Auto grants on the promoted replica, which has no replica");
    assert!(
        !pair
            .replica
            .command(&["GET", lease.key()])
            .starts_with("$-1"),
        "granted by the promoted replica"
    );
    // Later grants too, without waiting for a replica that is not there.
    assert!(lease.release().await.expect("release"));
    let again = auto.try_lock("after", 10 * SECOND).await.expect("again");
    assert!(again.release().await.expect("release"));

    match strict
        .lock("strict")
        .ttl(10 * SECOND)
        .wait(2 * SECOND)
        .await
    {
        Err(LockError::NotReplicated {
            connected: Some(0), ..
        }) => {}
        other => panic!("Required grants only what a replica has: {other:?}"),
    }

    // A replica attaches: Auto waits for it again (stopped, it refuses the grant).
    let fresh = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", pair.replica.port())]);
    until_replica_online(&pair.replica);
    // The master is looked at again within a few seconds.
    tokio::time::sleep(6 * SECOND).await;
    let ok = auto
        .try_lock("back", 10 * SECOND)
        .await
        .expect("acknowledged");
    assert!(ok.release().await.expect("release"));
    fresh.signal("-STOP");
    let refused = auto.try_lock("back:2", 10 * SECOND).await;
    fresh.signal("-CONT");
    assert!(
        matches!(refused, Err(LockError::NotReplicated { .. })),
        "with a replica connected again, Auto waits for it: {refused:?}"
    );
}
