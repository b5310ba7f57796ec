//! `lockctl doctor --redlock`: every master checked and labelled, then the findings across
//! the masters (their number, that they are distinct masters, their clocks, how many
//! answer), each shown on masters set up wrong on purpose.

use lock_tests::RedisServer;
use serde_json::Value;

use crate::support::{lockctl_at, wait_until, Ran};

/// A server that doctor finds nothing wrong with (on this host, without TLS).
const GOOD: [&str; 2] = ["appendonly yes", "appendfsync always"];

fn good_masters(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start_with(&GOOD)).collect()
}

/// A URL nothing listens on: a server started, then killed.
fn dead_url() -> String {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    url
}

/// `lockctl doctor --redlock URL,... [extra]`, with REDIS_URL set to a URL nothing listens
/// on (it must not be used).
fn doctor(urls: &[String], extra: &[&str]) -> Ran {
    lockctl_at("redis://127.0.0.1:1/")
        .args(["doctor", "--timeout", "1s", "--redlock", &urls.join(",")])
        .args(extra)
        .output()
        .expect("run lockctl")
        .into()
}

fn doctor_json(urls: &[String]) -> (Option<i32>, Value, Ran) {
    let ran = doctor(urls, &["--json"]);
    let value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {ran:#?}"));
    (ran.code, value, ran)
}

/// The finding of `check` across the masters: (level, found).
fn across(report: &Value, check: &str) -> (String, String) {
    let row = report["findings"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|row| row["check"] == check && row["server"].is_null())
        })
        .unwrap_or_else(|| panic!("no {check} finding: {report:#}"));
    let text = |field: &str| row[field].as_str().unwrap_or_default().to_owned();
    (text("level"), text("found"))
}

/// The levels of every finding about `url`.
fn of_server<'r>(report: &'r Value, url: &str) -> Vec<&'r Value> {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|row| row["server"] == url)
        .collect()
}

#[test]
fn three_healthy_masters_are_fine_and_each_is_checked() {
    let mut masters = good_masters(2);
    masters.push(RedisServer::start_with(&[
        GOOD[0],
        GOOD[1],
        "requirepass s3cret",
    ]));
    let mut urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    urls[2] = format!("redis://:s3cret@127.0.0.1:{}/", masters[2].port());
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(0), "{ran:#?}");
    assert_eq!(report["verdict"], "fine");
    assert!(!ran.stdout.contains("s3cret"), "{ran:#?}");
    // Each master's findings are labelled with its URL, the password redacted.
    let shown = [
        urls[0].clone(),
        urls[1].clone(),
        format!("redis://***@127.0.0.1:{}/", masters[2].port()),
    ];
    for url in &shown {
        let rows = of_server(&report, url);
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
            let row = rows
                .iter()
                .find(|row| row["check"] == check)
                .unwrap_or_else(|| panic!("no {check} of {url}: {report:#}"));
            assert_eq!(row["level"], "ok", "{row:#}");
        }
    }
    for check in [
        "redlock-masters",
        "redlock-reachable",
        "redlock-independent",
        "redlock-clocks",
    ] {
        assert_eq!(across(&report, check).0, "ok", "{check}: {report:#}");
    }
    assert!(
        across(&report, "redlock-masters")
            .1
            .contains("a lock needs 2"),
        "{report:#}"
    );
    let listed = report["masters"].as_array().expect("masters");
    assert_eq!(listed.len(), 3);
    for master in listed {
        assert_eq!(master["reachable"], true);
        assert_eq!(master["role"], "master");
        assert!(master["clock_offset_ms"].is_number(), "{master:#}");
    }
    // The text form labels each master's findings.
    let text = doctor(&urls, &[]);
    assert_eq!(text.code, Some(0), "{text:#?}");
    assert!(!text.stdout.contains("s3cret"), "{text:#?}");
    for (i, url) in shown.iter().enumerate() {
        assert!(
            text.stdout
                .contains(&format!("master {} of 3: {url}", i + 1)),
            "{text:#?}"
        );
    }
    assert!(
        text.stdout.contains("[ok] redlock-independent: "),
        "{text:#?}"
    );
}

#[test]
fn two_masters_are_a_warning() {
    let masters = good_masters(2);
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(1), "{ran:#?}");
    let (level, found) = across(&report, "redlock-masters");
    assert_eq!(level, "warning");
    assert!(found.contains("a lock needs 2"), "{found}");
    assert!(found.contains("survives 0 failed masters"), "{found}");
    assert!(
        found.contains("one master down stops every lock"),
        "{found}"
    );
}

#[test]
fn the_same_server_twice_is_unsafe() {
    let masters = good_masters(2);
    let urls = vec![
        masters[0].url(),
        masters[1].url(),
        // The first master again, under another name.
        format!("redis://localhost:{}/", masters[0].port()),
    ];
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(2), "{ran:#?}");
    let (level, found) = across(&report, "redlock-independent");
    assert_eq!(level, "unsafe");
    assert!(
        found.contains("master 3") && found.contains("same server as master 1"),
        "{found}"
    );
}

#[test]
fn a_replica_given_as_a_master_is_unsafe() {
    let masters = good_masters(2);
    let port = masters[0].port().to_string();
    let replica =
        RedisServer::start_with(&[GOOD[0], GOOD[1], &format!("replicaof 127.0.0.1 {port}")]);
    wait_until("the replica is online", || {
        masters[0]
            .command(&["INFO", "replication"])
            .contains("state=online")
    });
    let urls = vec![masters[0].url(), masters[1].url(), replica.url()];
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(2), "{ran:#?}");
    let (level, found) = across(&report, "redlock-independent");
    assert_eq!(level, "unsafe");
    assert!(
        found.contains("master 3") && found.contains("is a replica of master 1"),
        "{found}"
    );
}

#[test]
fn one_master_of_three_unreachable_is_a_warning() {
    let masters = good_masters(2);
    let urls = vec![masters[0].url(), dead_url(), masters[1].url()];
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(1), "{ran:#?}");
    assert_eq!(report["verdict"], "warnings");
    let (level, found) = across(&report, "redlock-reachable");
    assert_eq!(level, "warning");
    assert!(found.contains(&urls[1]), "{found}");
    assert!(found.contains("survive 0 more"), "{found}");
    assert_eq!(report["masters"][1]["reachable"], false);
    assert!(report["masters"][1]["error"].is_string(), "{report:#}");
    // The two that answer were checked.
    assert!(!of_server(&report, &urls[0]).is_empty(), "{report:#}");
    assert!(!of_server(&report, &urls[2]).is_empty(), "{report:#}");
}

#[test]
fn two_masters_of_three_unreachable_exit_69() {
    let master = RedisServer::start_with(&GOOD);
    let urls = vec![dead_url(), master.url(), dead_url()];
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(69), "{ran:#?}");
    assert_eq!(report["verdict"], "unreachable");
    let (level, found) = across(&report, "redlock-reachable");
    assert_eq!(level, "unsafe");
    assert!(found.contains("no lock can be taken"), "{found}");
    // One line on stderr says why, as for one server that cannot be reached.
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{ran:#?}");
    assert!(
        lines[0].starts_with("lockctl: 2 of the 3 Redlock masters"),
        "{ran:#?}"
    );
    // The text form too.
    let text = doctor(&urls, &[]);
    assert_eq!(text.code, Some(69), "{text:#?}");
    assert!(text.stdout.contains("verdict: unreachable"), "{text:#?}");
}

#[test]
fn a_majority_refusing_the_password_exits_78() {
    let masters: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with(&[GOOD[0], GOOD[1], "requirepass s3cret"]))
        .collect();
    let urls: Vec<String> = masters
        .iter()
        .enumerate()
        .map(|(i, master)| {
            let password = if i == 0 { "s3cret" } else { "n0tit" };
            format!("redis://:{password}@127.0.0.1:{}/", master.port())
        })
        .collect();
    let (code, report, ran) = doctor_json(&urls);
    assert_eq!(code, Some(78), "{ran:#?}");
    assert_eq!(report["verdict"], "unreachable");
    assert_eq!(across(&report, "redlock-reachable").0, "unsafe");
    assert!(
        !ran.stdout.contains("s3cret") && !ran.stderr.contains("n0tit"),
        "{ran:#?}"
    );
}
