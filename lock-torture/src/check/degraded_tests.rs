//! The rules for degraded conditions on synthetic histories: a sibling spawned inside a
//! locked body, and busy answers while the replicas are stopped.

use super::tests::{acq, failed, rules, run};
use super::*;

const MS: u64 = 1_000_000;

fn spawned_sibling(id: &str, call_ms: u64, body_ms: Option<u64>) -> Event {
    Event::Nested {
        id: id.into(),
        t_call: call_ms * MS,
        t_body: body_ms.map(|ms| ms * MS),
        t_return: (call_ms + 30) * MS,
        outcome: if body_ms.is_some() { "ok" } else { "busy" }.into(),
        t_body_end: body_ms.map(|ms| (ms + 10) * MS),
        sibling: Some("spawned".into()),
    }
}

/// A sibling spawned inside a locked body is a task of its own: once the enclosing lease
/// has ended it may take the lock anew and run (a throughput run flagged exactly that as
/// `nested-on-lost`, once per 120 s run), and while the lease is trusted it must not.
#[test]
fn a_spawned_sibling_is_judged_as_a_request_of_its_own() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            spawned_sibling("a", 250, Some(260)),
            acq("b", "m", 1, 0, 190),
            spawned_sibling("b", 100, None),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            spawned_sibling("a", 100, Some(110)),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["spawned-beside-holder"]);
}

/// A server restarted empty after the enclosing grant forgot that lease: a sibling spawned
/// in the body that took the lock on the restarted server is the restart's overlap
/// (expected, as `overlap` counts it), not a breach; a restart before the enclosing grant
/// excuses nothing. Seen in a single-server `kill` smoke: the server was killed 1.3 ms
/// after a grant, and a sibling spawned 22 ms later ran its body on a fresh lease.
#[test]
fn a_spawned_sibling_beside_a_lease_a_restart_forgot_is_expected() {
    let down = |start_ms: u64, end_ms: u64| Event::Down {
        node: 0,
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        empty: true,
    };
    let history = |d| {
        vec![
            d,
            acq("a", "n", 1, 10, 190),
            spawned_sibling("a", 100, Some(110)),
        ]
    };
    let report = run(history(down(20, 25)), &[]);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(
        report.expected.get("spawned-beside-holder/restart"),
        Some(&1)
    );
    let report = run(history(down(0, 5)), &[]);
    assert_eq!(rules(&report), ["spawned-beside-holder"]);
}

/// While a replica is stopped, a busy answer (a try of a held name) needs no replica: one
/// that took 400 ms (it queued behind a grant's WAIT, what lock-core did before) breaks
/// `busy-delayed`, one of 2 ms does not; a try outside the stall is not judged.
#[test]
fn a_busy_answer_during_a_replica_stall_is_not_delayed() {
    let stall = Event::Fault {
        kind: "pause-replica".into(),
        target: "replica 7001".into(),
        t_start: 100 * MS,
        t_end: 2_000 * MS,
    };
    let report = run(
        vec![
            stall.clone(),
            failed(0, 200, 202, 0),
            failed(1, 1_900, 2_010, 0),
        ],
        &[],
    );
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let report = run(vec![stall, failed(0, 200, 600, 0)], &[]);
    assert_eq!(rules(&report), ["busy-delayed"]);
}

fn told(client: u32, t_ms: u64, term: u64, elected: bool) -> Event {
    Event::LeaderSeen {
        client,
        observer: 1,
        name: crate::names::lonely_election(1),
        t: t_ms * MS,
        term,
        elected,
        expired: !elected,
    }
}

/// Client 1 leads its own election and is stopped for 500 ms (its 200 ms lease runs out):
/// its partner's observer, told of the election before, must be told of the vacancy within
/// the lease and the allowance (before, lock-core never told it).
#[test]
fn a_lapse_with_nobody_to_take_over_is_seen() {
    let pause = Event::Fault {
        kind: "pause".into(),
        target: "client1".into(),
        t_start: 1_000 * MS,
        t_end: 1_500 * MS,
    };
    let seen = run(
        vec![
            pause.clone(),
            told(0, 500, 3, true),
            told(0, 1_300, 3, false),
        ],
        &[],
    );
    assert!(seen.violations.is_empty(), "{:?}", seen.violations);
    let unseen = run(vec![pause, told(0, 500, 3, true)], &[]);
    assert_eq!(rules(&unseen), ["vacancy-unseen"]);
}
