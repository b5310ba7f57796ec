//! `lockctl doctor` against servers set up wrong on purpose: each shows its one finding,
//! with the exit code it deserves; a well set-up server is fine.

use lock_tests::RedisServer;
use serde_json::Value;

use crate::support::{assert_clean_failure, lockctl_at, run, Ran};

/// A server that doctor finds nothing wrong with (on this host, without TLS).
const GOOD: [&str; 2] = ["appendonly yes", "appendfsync always"];

fn doctor_json(server: &RedisServer) -> (Option<i32>, Value) {
    let ran = run(server, &["doctor", "--json"]);
    let value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {ran:#?}"));
    (ran.code, value)
}

/// The finding of `check`: (level, found, why, fix).
fn finding(report: &Value, check: &str) -> (String, String, String, String) {
    let row = report["findings"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["check"] == check))
        .unwrap_or_else(|| panic!("no {check} finding: {report:#}"));
    let text = |field: &str| row[field].as_str().unwrap_or_default().to_owned();
    (text("level"), text("found"), text("why"), text("fix"))
}

/// Every finding but `check` is ok.
fn only(report: &Value, check: &str) {
    for row in report["findings"].as_array().into_iter().flatten() {
        if row["check"] != check {
            assert_eq!(row["level"], "ok", "{report:#}");
        }
        assert!(
            !row["why"].as_str().unwrap_or_default().is_empty(),
            "{row:#}"
        );
    }
}

#[test]
fn a_well_set_up_server_is_fine() {
    let server = RedisServer::start_with(&GOOD);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["verdict"], "fine");
    only(&report, "");
    let text = run(&server, &["doctor"]);
    assert_eq!(text.code, Some(0), "{text:#?}");
    for check in [
        "eviction",
        "persistence",
        "replicas",
        "clock",
        "acl",
        "version",
        "tls",
        "topology",
    ] {
        assert!(
            text.stdout.contains(&format!("[ok] {check}: ")),
            "{check}: {text:#?}"
        );
    }
}

#[test]
fn an_evicting_policy_is_unsafe() {
    let server = RedisServer::start_with(&[
        GOOD[0],
        GOOD[1],
        "maxmemory 64mb",
        "maxmemory-policy volatile-lru",
    ]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(2), "{report:#}");
    assert_eq!(report["verdict"], "unsafe");
    let (level, found, _, fix) = finding(&report, "eviction");
    assert_eq!(level, "unsafe");
    assert!(found.contains("volatile-lru"), "{found}");
    assert!(fix.contains("noeviction"), "{fix}");
    only(&report, "eviction");
    // The text form says why and what to change.
    let text = run(&server, &["doctor"]);
    assert_eq!(text.code, Some(2));
    assert!(text.stdout.contains("[UNSAFE] eviction"), "{text:#?}");
    assert!(text.stdout.contains("fix: "), "{text:#?}");
}

#[test]
fn no_persistence_is_a_warning() {
    // The test servers' default: no RDB, no AOF.
    let server = RedisServer::start();
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(1), "{report:#}");
    let (level, found, why, fix) = finding(&report, "persistence");
    assert_eq!(level, "warning");
    assert!(found.contains("AOF no"), "{found}");
    assert!(why.contains("restart"), "{why}");
    assert!(fix.contains("appendonly yes"), "{fix}");
    only(&report, "persistence");
}

#[test]
fn an_aof_without_fsync_is_a_warning() {
    let server = RedisServer::start_with(&["appendonly yes", "appendfsync no"]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(finding(&report, "persistence").0, "warning");
    only(&report, "persistence");
}

#[test]
fn a_replica_is_unsafe_to_lock_on_and_its_master_lists_it() {
    let master = RedisServer::start_with(&GOOD);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_with(&[GOOD[0], GOOD[1], &format!("replicaof 127.0.0.1 {port}")]);
    crate::support::wait_until("the replica is online", || {
        master
            .command(&["INFO", "replication"])
            .contains("state=online")
    });
    let (code, report) = doctor_json(&replica);
    assert_eq!(code, Some(2), "{report:#}");
    let (level, found, _, fix) = finding(&report, "topology");
    assert_eq!(level, "unsafe");
    assert!(found.contains("replica of 127.0.0.1"), "{found}");
    assert!(fix.contains("master"), "{fix}");
    let (code, report) = doctor_json(&master);
    assert_eq!(code, Some(0), "{report:#}");
    let (_, found, _, _) = finding(&report, "replicas");
    assert!(found.contains("1 connected"), "{found}");
    assert!(found.contains("online"), "{found}");
}

#[test]
fn a_user_without_scripts_is_unsafe_and_one_without_tracking_a_warning() {
    let server = RedisServer::start_with(&[
        GOOD[0],
        GOOD[1],
        "user default on nopass ~* &* +@all -evalsha -eval",
    ]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(2), "{report:#}");
    let (level, found, _, _) = finding(&report, "acl");
    assert_eq!(level, "unsafe");
    assert!(
        found.contains("EVALSHA") && found.contains("EVAL"),
        "{found}"
    );
    only(&report, "acl");

    let server = RedisServer::start_with(&[
        GOOD[0],
        GOOD[1],
        "user default on nopass ~* &* +@all -client|tracking",
    ]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(1), "{report:#}");
    let (level, found, _, _) = finding(&report, "acl");
    assert_eq!(level, "warning");
    assert!(found.contains("CLIENT TRACKING"), "{found}");
    only(&report, "acl");
}

#[test]
fn checks_the_server_refuses_are_could_not_check_never_fine() {
    let server = RedisServer::start_with(&[
        GOOD[0],
        GOOD[1],
        "user default on nopass ~* &* +@all -config",
    ]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["verdict"], "warnings");
    let (level, found, _, _) = finding(&report, "persistence");
    assert_eq!(level, "unchecked", "{report:#}");
    assert!(
        found.starts_with("could not check: CONFIG GET refused"),
        "{found}"
    );
    only(&report, "persistence");
    let text = run(&server, &["doctor"]);
    assert!(
        text.stdout.contains("[could not check] persistence"),
        "{text:#?}"
    );

    let server =
        RedisServer::start_with(&[GOOD[0], GOOD[1], "user default on nopass ~* &* +@all -info"]);
    let (code, report) = doctor_json(&server);
    assert_eq!(code, Some(1), "{report:#}");
    for check in ["eviction", "version", "topology", "replicas"] {
        let (level, found, _, _) = finding(&report, check);
        assert_eq!(level, "unchecked", "{check}: {report:#}");
        assert!(
            found.starts_with("could not check: INFO refused"),
            "{found}"
        );
    }
}

#[test]
fn an_unreachable_server_exits_69() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let ran: Ran = lockctl_at(&url)
        .args(["doctor", "--timeout", "1s"])
        .output()
        .expect("run lockctl")
        .into();
    assert_clean_failure(&ran, 69);
}
