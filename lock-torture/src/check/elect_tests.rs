//! The election's and the scheduled runs' rules on synthetic histories.

use super::prim_tests::{grant, run};
use super::tests::rules_but_liveness;
use super::*;
use crate::event::{HoldKind, RunStarted, TickDone};

const MS: u64 = 1_000_000;

/// A leadership of term `term` on election `n`, attempted at `start_ms`, granted a
/// millisecond later, valid for `valid_ms` from the attempt.
fn leader(id: &str, term: u64, start_ms: u64, valid_ms: u64) -> Event {
    let mut a = grant(id, "n", HoldKind::Leader, start_ms, valid_ms);
    a.fence = Some(term);
    a.auto_renew = true;
    Event::Acquired(a)
}

fn resign(id: &str, at_ms: u64) -> Event {
    Event::Releasing {
        id: id.into(),
        t: at_ms * MS,
    }
}

fn act(id: &str, token: u64, at_ms: u64, is_leader: bool) -> Event {
    Event::Write {
        id: id.into(),
        name: "n".into(),
        fence: token,
        t_sent: at_ms * MS,
        t_reply: at_ms * MS + 1,
        outcome: WriteOutcome::Rejected,
        lost_reported: !is_leader,
    }
}

fn seen(observer: u32, at_ms: u64, term: u64, elected: bool) -> Event {
    Event::LeaderSeen {
        client: 0,
        observer,
        name: "n".into(),
        t: at_ms * MS,
        term,
        elected,
        expired: false,
    }
}

#[test]
fn successive_leaders_with_growing_terms_pass() {
    let report = run(vec![
        leader("a", 1, 0, 190),
        act("a", 1, 50, true),
        resign("a", 100),
        leader("b", 2, 110, 190),
        act("b", 2, 150, true),
        seen(1, 5, 1, true),
        seen(1, 100, 1, false),
        seen(1, 112, 2, true),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.leader_changes_seen, Some(3));
}

#[test]
fn one_term_twice_and_a_term_out_of_order_are_violations() {
    let twice = run(vec![
        leader("a", 1, 0, 190),
        resign("a", 100),
        leader("b", 1, 110, 190),
    ]);
    assert_eq!(rules_but_liveness(&twice), ["leader-term"]);
    assert!(
        twice.violations[0].detail.contains("term 1"),
        "{:?}",
        twice.violations
    );
    let backwards = run(vec![
        leader("a", 5, 0, 190),
        resign("a", 100),
        leader("b", 4, 110, 190),
    ]);
    assert_eq!(rules_but_liveness(&backwards), ["term-order"]);
}

#[test]
fn two_leaders_trusted_at_once_are_a_leader_overlap() {
    let report = run(vec![leader("a", 1, 0, 190), leader("b", 2, 100, 190)]);
    assert_eq!(rules_but_liveness(&report), ["leader-overlap"]);
}

#[test]
fn acting_after_the_lease_ended_needs_is_leader_false() {
    // Valid until 190 ms; an action at 250 ms while is_leader() said true.
    let late = run(vec![leader("a", 1, 0, 190), act("a", 1, 250, true)]);
    assert_eq!(rules_but_liveness(&late), ["leader-late-action"]);
    // Told it no longer leads: the action (refused by the store) is no violation.
    let told = run(vec![leader("a", 1, 0, 190), act("a", 1, 250, false)]);
    assert!(told.passed(), "{:?}", told.violations);
    assert_eq!(told.late_writes, 1);
}

#[test]
fn observers_must_see_changes_once_and_in_order() {
    let report = run(vec![
        seen(1, 10, 1, true),
        seen(1, 20, 1, true), // twice
        seen(1, 30, 2, true),
        seen(1, 40, 1, false), // an older term's resignation after a newer election
        seen(2, 50, 1, true),  // another observer starts afresh
    ]);
    assert_eq!(
        rules_but_liveness(&report),
        ["observer-order", "observer-order"]
    );
    assert_eq!(report.leader_changes_seen, Some(5));
}

// Scheduled runs: interval 1000 ms, hold 400 ms, fires up to 300 ms late.

fn fire(client: u32, tick: u64, late_ms: u64, outcome: &str) -> Event {
    let t = (tick * 1000 + late_ms) * MS;
    Event::TickDone(TickDone {
        client,
        job: "j".into(),
        tick,
        t_call: t,
        t_return: t + MS,
        outcome: outcome.into(),
        interval_ms: 1000,
        max_offset_ms: 300,
        hold_ms: 400,
    })
}

fn ran(client: u32, tick: u64, late_ms: u64) -> Event {
    let t = (tick * 1000 + late_ms) * MS;
    Event::RunStarted(RunStarted {
        client,
        job: "j".into(),
        tick,
        attempt_start: t,
        t: t + MS,
        token: format!("tok-{client}-{tick}"),
    })
}

/// Ticks 1 to 3, each run by client 0 and skipped by client 1; plus `more`.
fn schedule(more: Vec<Event>) -> Report {
    let mut events = Vec::new();
    for tick in 1..=3 {
        events.extend([
            ran(0, tick, 0),
            fire(0, tick, 0, "ran"),
            fire(1, tick, 200, "skipped"),
        ]);
    }
    events.extend(more);
    run(events)
}

#[test]
fn one_run_per_tick_passes() {
    let report = schedule(vec![]);
    assert!(report.passed(), "{:?}", report.violations);
    let stats = report.schedule.expect("schedule stats");
    assert_eq!((stats.ticks, stats.runs, stats.skipped), (3, 3, 3));
    assert_eq!(stats.judged, 1); // tick 2: fires before and after it
}

#[test]
fn a_second_run_within_the_hold_is_a_violation() {
    let report = schedule(vec![ran(2, 2, 250)]);
    assert_eq!(rules_but_liveness(&report), ["tick-once"]);
    // Past the hold (a replica that fired 600 ms late): counted, not judged.
    let late = schedule(vec![ran(2, 2, 600)]);
    assert!(late.passed(), "{:?}", late.violations);
    assert_eq!(late.schedule.map(|s| s.late_fires), Some(1));
    // Across a restart of the server (it forgot the key): expected.
    let restart = schedule(vec![
        Event::Down {
            node: 0,
            t_start: 2100 * MS,
            t_end: 2120 * MS,
            empty: true,
        },
        ran(2, 2, 250),
    ]);
    assert!(restart.violations.is_empty(), "{:?}", restart.violations);
    assert_eq!(restart.expected.get("tick-once/restart"), Some(&1));
}

#[test]
fn a_tick_tried_and_run_nowhere_without_faults_is_missed() {
    let mut events = vec![
        fire(0, 1, 0, "ran"),
        ran(0, 1, 0),
        fire(0, 2, 0, "skipped"),
        fire(1, 2, 100, "skipped"),
        fire(0, 3, 0, "ran"),
        ran(0, 3, 0),
    ];
    let missed = run(events.clone());
    assert_eq!(rules_but_liveness(&missed), ["tick-missed"]);
    // With a fault around it, not judged.
    events.push(Event::Fault {
        kind: "pause".into(),
        target: "client3".into(),
        t_start: 1500 * MS,
        t_end: 1600 * MS,
    });
    assert!(run(events).violations.is_empty());
    // A try that could not reach the server: not judged.
    let unreachable = run(vec![
        fire(0, 1, 0, "ran"),
        ran(0, 1, 0),
        fire(0, 2, 0, "connection"),
        fire(1, 2, 100, "skipped"),
        fire(0, 3, 0, "ran"),
        ran(0, 3, 0),
    ]);
    assert!(unreachable.passed(), "{:?}", unreachable.violations);
    // Every replica too late to try: unfired, not judged.
    let unfired = run(vec![
        fire(0, 1, 0, "ran"),
        ran(0, 1, 0),
        fire(0, 2, 900, "late"),
        fire(0, 3, 0, "ran"),
        ran(0, 3, 0),
    ]);
    assert!(unfired.passed(), "{:?}", unfired.violations);
    assert_eq!(unfired.schedule.map(|s| s.unfired), Some(1));
}
