//! Issue 25: locks across a failover. A Sentinel locker follows the master the Sentinels
//! name even when a connect spans a stall of the old master and when its connection was
//! idle through the switch; the replica acknowledgement check (`WAIT`) refuses grants that
//! no replica has, so a crashed master's last grant and a deposed master's grants are never
//! given.

use std::time::{Duration, Instant};

use lock_core::Locker;
use lock_tests::RedisServer;

const SECOND: Duration = Duration::from_secs(1);

/// A master, one replica and one Sentinel that knows both.
struct Sentinelled {
    master: RedisServer,
    replica: RedisServer,
    sentinel: RedisServer,
}

impl Sentinelled {
    fn start() -> Sentinelled {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(&[&format!("replicaof 127.0.0.1 {}", master.port())]);
        let sentinel = RedisServer::start_sentinel("locks", master.port());
        let started = Instant::now();
        while !sentinel
            .command(&["SENTINEL", "REPLICAS", "locks"])
            .contains(&replica.port().to_string())
        {
            assert!(
                started.elapsed() < 30 * SECOND,
                "the sentinel found the replica"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Sentinelled {
            master,
            replica,
            sentinel,
        }
    }

    fn builder(&self) -> lock_core::LockerBuilder {
        Locker::builder().sentinel([self.sentinel.url()], "locks")
    }

    /// Sends `sig` (`-STOP`, `-CONT`) to the master.
    fn signal_master(&self, sig: &str) {
        signal(&self.master, sig);
    }

    async fn until_the_replica_is_named(&self) {
        let started = Instant::now();
        while !self
            .sentinel
            .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "locks"])
            .contains(&self.replica.port().to_string())
        {
            assert!(
                started.elapsed() < 30 * SECOND,
                "the Sentinel promoted the replica"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Asserts that `key`'s value lives on the new master (the promoted replica), and says
    /// what the deposed one holds otherwise.
    fn assert_granted_by_the_new_master(&self, key: &str) {
        let on_new_master = self.replica.command(&["GET", key]);
        let on_old_master = self.master.command(&["GET", key]);
        assert!(
            !on_new_master.starts_with("$-1"),
            "the lease was granted by the deposed master (it holds {on_old_master:?}), not by \
             the one the Sentinel names ({on_new_master:?})"
        );
    }
}

fn signal(server: &RedisServer, sig: &str) {
    let pid = server.pid().expect("server pid").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Issue 25, part 2 (found by `lock-torture run --topology sentinel --mode pause-master`):
/// a request reconnects while the master is stopped; the Sentinels still name it, and the
/// check of its role hangs on the stopped process. The Sentinels promote the replica
/// meanwhile; when the old master resumes it answers the check as a master (it is demoted
/// seconds later), and the locker used to take its locks there while every other client
/// locked on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_across_a_pause_does_not_lock_on_the_deposed_master() {
    let setup = Sentinelled::start();
    // A connect budget long enough to span the whole failover.
    let locker = setup
        .builder()
        .command_timeout(20 * SECOND)
        .build()
        .expect("sentinel locker");
    let lease = locker.try_lock("a", 30 * SECOND).await.expect("acquire");
    assert!(lease.release().await.expect("release"));

    // The Sentinel does not see the stop (down after a minute): the failover below is
    // asked for, so that it happens while the master is stopped and still named.
    let set = setup.sentinel.command(&[
        "SENTINEL",
        "SET",
        "locks",
        "down-after-milliseconds",
        "60000",
    ]);
    assert!(set.starts_with("+OK"), "{set}");
    setup.signal_master("-STOP");
    // A request whose wait runs out on the stopped master: its connection is retired, so
    // the next request reconnects.
    let waited = locker
        .lock("b")
        .ttl(30 * SECOND)
        .wait(Duration::from_millis(200))
        .await;
    assert!(waited.is_err(), "the stopped master does not answer");
    // Reconnects, one after another: the Sentinel names the stopped master until it
    // promotes the replica, and each check of the stopped master's role hangs until
    // redis-rs gives up on it (500 ms). The master resumes as soon as the Sentinel names
    // the replica, while a check is in flight: it answers as the master it still believes
    // it is.
    let reconnecting = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            loop {
                match locker.try_lock("c", 30 * SECOND).await {
                    Ok(lease) => return lease,
                    Err(err) => assert!(
                        started.elapsed() < 60 * SECOND,
                        "the locker found a master after the failover (last error: {err})"
                    ),
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failover = setup.sentinel.command(&["SENTINEL", "FAILOVER", "locks"]);
    assert!(failover.starts_with("+OK"), "{failover}");
    setup.until_the_replica_is_named().await;
    setup.signal_master("-CONT");
    let lease = reconnecting.await.expect("the request's task");
    setup.assert_granted_by_the_new_master(lease.key());
}

/// Issue 25, part 2: a connection that was idle through the failover (no command failed on
/// it) must not stay on the deposed master: the Sentinels' `+switch-master` retires it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_retired_at_the_switch() {
    let setup = Sentinelled::start();
    let locker = setup
        .builder()
        .command_timeout(SECOND)
        .build()
        .expect("sentinel locker");
    let lease = locker.try_lock("a", 30 * SECOND).await.expect("acquire");
    assert!(lease.release().await.expect("release"));

    setup.signal_master("-STOP");
    setup.until_the_replica_is_named().await;
    // The Sentinel's announcement reaches the locker's subscription.
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.signal_master("-CONT");
    // The old master still believes it is the master for a few seconds.
    let lease = locker
        .try_lock("c", 30 * SECOND)
        .await
        .expect("acquire after the failover");
    setup.assert_granted_by_the_new_master(lease.key());
}
