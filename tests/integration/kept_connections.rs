//! A thread keeps the clones of a Locker's shared connection that its lock operations gave
//! back, for its next operations: a retired connection's clones are never lent again, and
//! a dropped Locker's go with it. A Locker given a URL sends its lock commands over four
//! sockets, each task's on its own, and the commands of tasks that run together go out,
//! and are read by the server, in batches; a socket that fails is replaced with the
//! others, and nothing is left open.

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
    clients(server).len()
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

/// The server's clients (`CLIENT LIST` lines), this query's own left out.
fn clients(server: &RedisServer) -> Vec<String> {
    server
        .command(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| line.contains("addr=") && !line.contains("cmd=client|list"))
        .map(str::to_owned)
        .collect()
}

/// The clients whose last command was a lock's or a release's.
fn lock_lanes(server: &RedisServer) -> Vec<String> {
    clients(server)
        .into_iter()
        .filter(|line| line.contains("cmd=set ") || line.contains("cmd=evalsha "))
        .collect()
}

/// One `INFO` field of the server, as a number.
fn info_number(server: &RedisServer, section: &str, field: &str) -> u64 {
    let info = server.command(&["INFO", section]);
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}: {info}"))
}

/// The calls of one command so far (`INFO commandstats`).
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.command(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockers_commands_go_out_over_four_sockets() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    let errors = cycles(&locker, 16, 10).await;
    assert!(errors.is_empty(), "{errors:?}");
    let lanes = lock_lanes(&server);
    assert_eq!(lanes.len(), 4, "{lanes:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_of_tasks_running_together_are_read_in_batches() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    // Connections open and scripts loaded before counting.
    let errors = cycles(&locker, 64, 2).await;
    assert!(errors.is_empty(), "{errors:?}");
    let reads = info_number(&server, "stats", "total_reads_processed");
    let (sets, scripts) = (
        command_calls(&server, "set"),
        command_calls(&server, "evalsha"),
    );

    let errors = cycles(&locker, 64, 50).await;
    assert!(errors.is_empty(), "{errors:?}");

    let reads = info_number(&server, "stats", "total_reads_processed") - reads;
    let commands =
        command_calls(&server, "set") - sets + command_calls(&server, "evalsha") - scripts;
    assert!(commands >= 2 * 64 * 50, "{commands} commands");
    eprintln!("{reads} reads of the server's for {commands} commands");
    // Without the gathering, about one read per four commands here (the kernel joins some
    // writes); with it, about one per 12 (64 tasks on 4 sockets; a batch is what the tasks
    // queued together sent, so a loaded machine makes them larger, not smaller).
    assert!(
        reads * 8 < commands,
        "{reads} reads of the server's for {commands} commands: not batched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_lane_is_replaced_and_the_old_lanes_are_closed() {
    let server = RedisServer::start();
    let locker = Locker::from_url(&server.url()).expect("locker");
    // Deep stacks of kept clones on both threads (64 operations at once).
    let errors = cycles(&locker, 64, 10).await;
    assert!(errors.is_empty(), "{errors:?}");
    let open = clients(&server).len();
    let lanes = lock_lanes(&server);
    let id = lanes[0]
        .split(' ')
        .find_map(|field| field.strip_prefix("id="))
        .expect("a client id");
    server.command(&["CLIENT", "KILL", "ID", id]);

    // The tasks on the killed lane may fail once each (its connection is then retired,
    // with its other lanes, and all four are opened again); nobody fails twice.
    let errors = cycles(&locker, 16, 1).await;
    assert!(errors.len() <= 16, "{errors:?}");
    let errors = cycles(&locker, 16, 10).await;
    assert!(errors.is_empty(), "{errors:?}");

    // The three lanes left of the retired connection close once the clones the threads
    // kept of it are dropped, as newer ones are given back (a thread that never locks
    // again keeps its clones until the Locker is dropped).
    let deadline = Instant::now() + Duration::from_secs(5);
    while clients(&server).len() > open {
        assert!(
            Instant::now() < deadline,
            "{} clients open 5 s after the lane was replaced, {open} before: {:#?}",
            clients(&server).len(),
            clients(&server)
        );
        let errors = cycles(&locker, 64, 1).await;
        assert!(errors.is_empty(), "{errors:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lock_lanes(&server).len(), 4, "{:#?}", clients(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_near_its_client_limit_gets_the_sockets_it_can_take() {
    let server = RedisServer::start_with(&["maxclients 2"]);
    let locker = Locker::builder()
        .url(server.url())
        .track_keys(false)
        .build()
        .expect("locker");
    // Of the four sockets, the server takes two; the Locker locks on those.
    let errors = cycles(&locker, 16, 10).await;
    assert!(errors.is_empty(), "{errors:?}");
    // The server is full: the Locker holds both of its places.
    let reply = server.command(&["PING"]);
    assert!(reply.contains("max number of clients"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opening_given_up_on_a_stalled_server_leaves_no_socket_behind() {
    let server = RedisServer::start();
    let before = connections(&server);
    let locker = Locker::builder()
        .url(server.url())
        .command_timeout(Duration::from_millis(300))
        .build()
        .expect("locker");
    // The sockets connect (the kernel accepts them) but their set-up is never answered:
    // the opening is given up at the command timeout, its sockets dropped half-open.
    server.signal("-STOP");
    let refused = locker.try_lock("kept:stalled", TTL).await;
    server.signal("-CONT");
    assert!(refused.is_err(), "{refused:?}");
    // Nothing of that opening outlives the Locker.
    drop(locker);
    let deadline = Instant::now() + Duration::from_secs(5);
    while connections(&server) > before {
        assert!(
            Instant::now() < deadline,
            "connections still open 5 s after the Locker was dropped: {:#?}",
            clients(&server)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
