//! A thread keeps the clones of a Locker's shared connection that its lock operations gave
//! back, for its next operations: a retired connection's clones are never lent again, and
//! a dropped Locker's go with it.

use std::time::{Duration, Instant};

use lock_core::{LockError, Locker};
use lock_tests::RedisServer;

const TTL: Duration = Duration::from_secs(10);

/// `tasks` tasks at once, each trying and releasing names of its own `rounds` times: the
/// errors they met.
async fn cycles(locker: &Locker, tasks: usize, rounds: usize) -> Vec<LockError> {
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let mut errors = Vec::new();
                for round in 0..rounds {
                    match locker.try_lock(format!("kept:{task}:{round}"), TTL).await {
                        Ok(lease) => {
                            if let Err(err) = lease.release().await {
                                errors.push(err);
                            }
                        }
                        Err(err) => errors.push(err),
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = Vec::new();
    for handle in handles {
        errors.extend(handle.await.expect("a cycling task"));
    }
    errors
}

/// The connections the server has open, this query's own left out.
fn connections(server: &RedisServer) -> usize {
    server
        .command(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| line.contains("addr="))
        .count()
        .saturating_sub(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_connections_kept_clones_are_never_lent_again() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    // Both worker threads keep clones of the connection.
    let errors = cycles(&locker, 16, 20).await;
    assert!(errors.is_empty(), "{errors:?}");

    server.command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    // The first operation on the killed connection may fail, and retires it.
    let mut failed = Vec::new();
    loop {
        match locker.try_lock("kept:probe", TTL).await {
            Ok(lease) => {
                assert!(lease.release().await.expect("release"));
                break;
            }
            Err(err) => failed.push(err),
        }
        assert!(failed.len() <= 2, "{failed:?}");
    }
    // Every later operation goes out on the new connection: none meets a clone of the
    // killed one that a thread kept.
    let errors = cycles(&locker, 16, 20).await;
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_locker_leaves_no_connection_open() {
    let server = RedisServer::start();
    let before = connections(&server);
    let locker = Locker::from_url(&server.url()).expect("locker");
    let errors = cycles(&locker, 16, 20).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(connections(&server) > before);

    drop(locker);
    let deadline = Instant::now() + Duration::from_secs(5);
    while connections(&server) > before {
        assert!(
            Instant::now() < deadline,
            "connections still open 5 s after the Locker was dropped: {}",
            server.command(&["CLIENT", "LIST"])
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
