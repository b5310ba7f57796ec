//! `lockctl elect` and `lockctl leader` with real processes: a SIGKILLed leader is replaced
//! within its lease, a SIGSTOPped one is replaced too and, resumed, stops its command before
//! it can act again; `leader --watch` sees every change once, in order.

use std::path::Path;
use std::process::{Child, Stdio};

use lock_tests::RedisServer;
use rustix::process::Signal;

use crate::support::{lockctl, read, run, signal, wait_for, wait_until};

/// `lockctl elect` of a command that logs `<who> <term> <pid>` once elected, then sleeps.
fn candidate(server: &RedisServer, who: &str, log: &Path) -> Child {
    lockctl(server)
        .args([
            "elect",
            "--name",
            "scheduler",
            "--lease",
            "1s",
            "--kill-after",
            "1s",
        ])
        .args(["--app-name", who, "--", "sh", "-c"])
        .arg(format!(
            "echo \"{who} $LOCKCTL_TERM $$\" >> \"{}\"; exec sleep 30",
            log.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockctl elect")
}

/// The log's lines as (who, term, pid).
fn elected(log: &Path) -> Vec<(String, u64, i32)> {
    read(log)
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let who = parts.next().unwrap_or_default().to_owned();
            let term = parts.next().and_then(|t| t.parse().ok()).expect("term");
            let pid = parts.next().and_then(|p| p.parse().ok()).expect("pid");
            (who, term, pid)
        })
        .collect()
}

fn kill_pid(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

#[test]
fn a_killed_leader_is_replaced_and_watchers_see_each_term_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut watcher = lockctl(&server)
        .args(["leader", "scheduler", "--watch", "--count", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The watcher is subscribed once it printed the current state.
    std::thread::sleep(std::time::Duration::from_millis(300));

    let mut first = candidate(&server, "first", &log);
    wait_until("the first leader", || elected(&log).len() == 1);
    let mut second = candidate(&server, "second", &log);
    wait_until("the second candidate in line", || {
        server.command(&["ZCARD", "lock:{scheduler}:q"]).trim() == ":1"
    });
    signal(&first, Signal::KILL);
    let _ = first.wait();
    kill_pid(elected(&log)[0].2); // its orphaned command

    wait_until("the follower to take over", || elected(&log).len() == 2);
    let terms = elected(&log);
    assert_eq!(terms[1].0, "second");
    assert!(terms[1].1 > terms[0].1, "terms only grow: {terms:?}");

    let now = run(&server, &["leader", "scheduler"]);
    assert!(
        now.stdout.contains("leader second@")
            && now.stdout.contains(&format!("term {}", terms[1].1)),
        "{now:?}"
    );
    assert_eq!(wait_for(&mut watcher, "leader --watch"), Some(0));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut watcher.stdout.take().unwrap(), &mut out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].ends_with("no leader"), "{out}");
    assert!(lines[1].contains("elected   leader first@"), "{out}");
    assert!(lines[1].contains(&format!("term {}", terms[0].1)), "{out}");
    assert!(lines[2].contains("elected   leader second@"), "{out}");
    assert!(lines[2].contains(&format!("term {}", terms[1].1)), "{out}");

    signal(&second, Signal::TERM);
    let _ = wait_for(&mut second, "second leader");
    kill_pid(terms[1].2);
}

#[test]
fn a_paused_leader_is_replaced_and_stops_its_command_when_resumed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut first = candidate(&server, "first", &log);
    wait_until("the first leader", || elected(&log).len() == 1);
    let mut second = candidate(&server, "second", &log);
    wait_until("the second candidate in line", || {
        server.command(&["ZCARD", "lock:{scheduler}:q"]).trim() == ":1"
    });
    signal(&first, Signal::STOP);
    wait_until("the follower to take over", || elected(&log).len() == 2);
    let terms = elected(&log);
    assert!(terms[1].1 > terms[0].1, "{terms:?}");
    signal(&first, Signal::CONT);
    // Resumed past its lease: lockctl knows it lost, stops its command and says so.
    assert_eq!(wait_for(&mut first, "the resumed old leader"), Some(79));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lost lock `scheduler`"), "{stderr}");
    assert!(
        rustix::process::test_kill_process(rustix::process::Pid::from_raw(terms[0].2).unwrap())
            .is_err(),
        "the old leader's command was stopped"
    );
    let now = run(&server, &["leader", "scheduler"]);
    assert!(now.stdout.contains("leader second@"), "{now:?}");

    signal(&second, Signal::TERM);
    let _ = wait_for(&mut second, "second leader");
    kill_pid(terms[1].2);
}
