//! The checker on synthetic histories: one or more per rule.

use super::*;
use crate::clock;
use crate::event::{HoldKind, Look};

const MS: u64 = 1_000_000;

pub(super) fn acq(id: &str, name: &str, fence: u64, start_ms: u64, valid_ms: u64) -> Event {
    Event::Acquired(Acquired {
        id: id.into(),
        client: 0,
        task: 0,
        name: name.into(),
        token: format!("tok-{id}"),
        fence: Some(fence),
        call_start: start_ms * MS,
        attempt_start: start_ms * MS,
        acquired: (start_ms + 1) * MS,
        valid_until: (start_ms + valid_ms) * MS,
        ttl_ms: 200,
        auto_renew: false,
        wait_ms: None,
        annotated: false,
        kind: crate::event::HoldKind::Lock,
        permits: None,
        weight: None,
        set: None,
    })
}

fn release(id: &str, at_ms: u64, outcome: ReleaseOutcome, lost: bool) -> Event {
    Event::Release {
        id: id.into(),
        t_sent: at_ms * MS,
        t_reply: at_ms * MS + 1,
        outcome,
        lost_reported: lost,
    }
}

fn write(id: &str, name: &str, fence: u64, at_ms: u64, outcome: WriteOutcome) -> Event {
    Event::Write {
        id: id.into(),
        name: name.into(),
        fence,
        t_sent: at_ms * MS,
        t_reply: at_ms * MS + 10,
        outcome,
        lost_reported: true,
    }
}

pub(super) fn run(events: Vec<Event>, store: &[(&str, u64, &str)]) -> Report {
    let mut history = History {
        events,
        ..History::default()
    };
    for (name, token, id) in store {
        history
            .store
            .entry((*name).into())
            .or_default()
            .push((*token, (*id).into()));
    }
    check(&history, 1)
}

pub(super) fn rules(report: &Report) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.rule).collect()
}

/// The rules broken other than `liveness`: the deadline tests' requests wait for a name
/// that nobody holds, which the liveness rule rightly reports (its own tests are below).
pub(super) fn rules_but_liveness(report: &Report) -> Vec<&'static str> {
    report
        .violations
        .iter()
        .map(|v| v.rule)
        .filter(|r| *r != "liveness")
        .collect()
}

#[test]
fn a_clean_history_passes() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            write("a", "n", 1, 50, WriteOutcome::Accepted),
            release("a", 100, ReleaseOutcome::Released, false),
            acq("b", "n", 2, 101, 190),
            write("b", "n", 2, 150, WriteOutcome::Accepted),
            release("b", 400, ReleaseOutcome::NotHeld, true),
            acq("c", "n", 3, 400, 190),
        ],
        &[("n", 1, "a"), ("n", 2, "b")],
    );
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.acquisitions, 3);
    assert_eq!(report.writes_accepted, 2);
    assert_eq!(report.release_not_held, 1);
}

#[test]
fn overlapping_trust_is_a_violation() {
    let report = run(
        vec![acq("a", "n", 1, 0, 190), acq("b", "n", 2, 100, 190)],
        &[],
    );
    assert_eq!(rules(&report), ["overlap"]);
    // Different names never conflict.
    let report = run(
        vec![acq("a", "n", 1, 0, 190), acq("b", "m", 1, 100, 190)],
        &[],
    );
    assert!(report.passed());
}

#[test]
fn a_release_sent_by_a_client_killed_before_the_answer_ends_its_trust() {
    let releasing = Event::Releasing {
        id: "a".into(),
        t: 50 * MS,
    };
    // Killed after it logged the release it was sending: the lock was free for `b`.
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            releasing,
            acq("b", "n", 2, 100, 190),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
    // Killed before: its lock stayed until its TTL, and `b` overlaps it.
    let report = run(
        vec![acq("a", "n", 1, 0, 190), acq("b", "n", 2, 100, 190)],
        &[],
    );
    assert_eq!(rules(&report), ["overlap"]);
}

#[test]
fn an_early_restart_excuses_an_overlap_a_delayed_one_does_not() {
    let down = |start_ms: u64, end_ms: u64| Event::Down {
        node: 0,
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        empty: true,
    };
    let history = |d| vec![acq("a", "n", 5, 0, 190), d, acq("b", "n", 6, 100, 190)];
    let early = run(history(down(50, 60)), &[]);
    assert!(early.passed(), "{:?}", early.violations);
    assert_eq!(early.expected_restart_overlaps, 1);
    assert_eq!(early.fence_resets, 0);
    // A token that went backward across the restart (a counter restarted from 0).
    let reset = run(
        vec![
            acq("a", "n", 5, 0, 190),
            down(50, 60),
            acq("b", "n", 1, 100, 190),
        ],
        &[],
    );
    assert_eq!(rules(&reset), ["fence-order"]);
    assert_eq!(reset.fence_resets, 1);
    // Down past the first holder's validity: the later grant came after it.
    let delayed = run(
        vec![
            acq("a", "n", 5, 0, 190),
            down(50, 250),
            acq("b", "n", 6, 260, 190),
        ],
        &[],
    );
    assert!(delayed.passed());
    assert_eq!(delayed.expected_restart_overlaps, 0);
}

#[test]
fn tokens_must_follow_real_time() {
    let report = run(
        vec![
            acq("a", "n", 7, 0, 50),
            release("a", 40, ReleaseOutcome::Released, false),
            acq("b", "n", 6, 100, 50),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["fence-order"]);
    let report = run(
        vec![acq("a", "n", 7, 0, 50), acq("b", "n", 7, 100, 50)],
        &[],
    );
    assert_eq!(rules(&report), ["fence-order"]);
}

#[test]
fn a_stale_write_accepted_after_a_newer_one_is_a_violation() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 50),
            acq("b", "n", 2, 100, 50),
            write("b", "n", 2, 110, WriteOutcome::Accepted),
            write("a", "n", 1, 200, WriteOutcome::Accepted),
        ],
        &[("n", 2, "b"), ("n", 1, "a")],
    );
    assert!(rules(&report).iter().all(|r| *r == "stale-write"));
    assert_eq!(report.violations.len(), 2, "{:?}", report.violations);
    assert_eq!(report.late_writes, 1);
    // Rejected, as it should be: fine, and counted.
    let report = run(
        vec![
            acq("a", "n", 1, 0, 50),
            acq("b", "n", 2, 100, 50),
            write("b", "n", 2, 110, WriteOutcome::Accepted),
            write("a", "n", 1, 200, WriteOutcome::Rejected),
        ],
        &[("n", 2, "b")],
    );
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.stale_writes_rejected, 1);
}

#[test]
fn a_late_write_must_come_with_is_lost() {
    let mut late = write("a", "n", 1, 300, WriteOutcome::Accepted);
    if let Event::Write { lost_reported, .. } = &mut late {
        *lost_reported = false;
    }
    let report = run(vec![acq("a", "n", 1, 0, 190), late], &[("n", 1, "a")]);
    assert_eq!(rules(&report), ["silent-loss"]);
}

#[test]
fn paused_holders_are_counted() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            Event::Fault {
                kind: "pause".into(),
                target: "client0".into(),
                t_start: 50 * MS,
                t_end: 600 * MS,
            },
            Event::LostDetected {
                id: "a".into(),
                t: 601 * MS,
                how: "is_lost".into(),
            },
            acq("b", "n", 2, 300, 190),
            write("b", "n", 2, 310, WriteOutcome::Accepted),
            write("a", "n", 1, 601, WriteOutcome::Rejected),
            release("a", 602, ReleaseOutcome::NotHeld, true),
            acq("c", "n", 3, 700, 190),
        ],
        &[("n", 2, "b")],
    );
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(
        (
            report.paused_holders,
            report.paused_holders_told_lost,
            report.paused_writes_rejected
        ),
        (1, 1, 1)
    );
}

#[test]
fn a_release_past_validity_must_not_be_silent() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            release("a", 300, ReleaseOutcome::Released, false),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["silent-release"]);
    for (outcome, lost) in [
        (ReleaseOutcome::Released, true),
        (ReleaseOutcome::NotHeld, false),
    ] {
        let report = run(
            vec![acq("a", "n", 1, 0, 190), release("a", 300, outcome, lost)],
            &[],
        );
        assert!(report.passed(), "{outcome:?} {lost}");
    }
}

#[test]
fn releasing_a_lock_someone_else_took_is_a_violation() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 100),
            acq("b", "n", 2, 150, 100),
            release("b", 200, ReleaseOutcome::Released, false),
            release("a", 300, ReleaseOutcome::Released, true),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["silent-release"]);
}

#[test]
fn grants_while_down_or_over_a_foreign_value_are_violations() {
    let report = run(
        vec![
            Event::Down {
                node: 0,
                t_start: 0,
                t_end: 500 * MS,
                empty: true,
            },
            acq("a", "n", 1, 100, 190),
            Event::Foreign {
                name: "m".into(),
                t_start: 600 * MS,
                t_end: 900 * MS,
            },
            acq("b", "m", 1, 700, 190),
        ],
        &[],
    );
    assert_eq!(
        rules(&report),
        ["acquired-while-down", "acquired-over-foreign-value"]
    );
}

#[test]
fn validity_beyond_the_ttl_is_a_violation() {
    let report = run(vec![acq("a", "n", 1, 0, 250)], &[]);
    assert_eq!(rules(&report), ["validity-claim"]);
}

#[test]
fn an_attempt_stamped_before_its_call_is_a_violation() {
    // The soak's case: the attempt stamped 3.8 ms before the call, which made a lease
    // within its TTL look as if it claimed 0.8 ms too much.
    let mut early = acq("a", "n", 1, 10, 150);
    if let Event::Acquired(a) = &mut early {
        a.attempt_start -= 3 * MS + 800_000;
    }
    let report = run(vec![early], &[]);
    assert_eq!(rules(&report), ["stamp-order"]);
    // Stamps within the settling allowance of each other are fine.
    let mut close = acq("b", "n", 2, 10, 150);
    if let Event::Acquired(a) = &mut close {
        a.attempt_start -= clock::SETTLED;
    }
    assert!(run(vec![close], &[]).violations.is_empty());
}

#[test]
fn locking_must_resume_after_the_last_fault() {
    let fault = Event::Fault {
        kind: "kill".into(),
        target: "node0".into(),
        t_start: 10 * MS,
        t_end: 20 * MS,
    };
    let stalled = run(vec![acq("a", "n", 1, 0, 5), fault.clone()], &[]);
    assert!(!stalled.resumed && !stalled.passed());
    let resumed = run(
        vec![acq("a", "n", 1, 0, 5), fault, acq("b", "n", 2, 30, 5)],
        &[],
    );
    assert!(resumed.passed());
    assert!(resumed.summary().contains("faults=1 violations=0"));
}

fn with_wait(event: Event, call_start_ms: u64, wait_ms: u64) -> Event {
    let Event::Acquired(mut a) = event else {
        panic!("not an acquisition")
    };
    a.call_start = call_start_ms * MS;
    a.wait_ms = Some(wait_ms);
    Event::Acquired(a)
}

pub(super) fn failed(client: u32, start_ms: u64, end_ms: u64, wait_ms: u64) -> Event {
    Event::AcquireFailed {
        client,
        name: "n".into(),
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        kind: FailKind::Contention,
        message: String::new(),
        wait_ms: Some(wait_ms),
        hold: HoldKind::Lock,
        set: None,
        capacity: None,
    }
}

#[test]
fn a_request_must_return_by_its_deadline_plus_the_slack() {
    // Granted 1 ms after its attempt began at 100 ms, having asked at 0 ms.
    let on_time = run(vec![with_wait(acq("a", "n", 1, 100, 190), 0, 140)], &[]);
    assert!(on_time.passed(), "{:?}", on_time.violations);
    let late = run(vec![with_wait(acq("a", "n", 1, 100, 190), 0, 40)], &[]);
    assert_eq!(rules(&late), ["late-grant"]);
    let report = run(
        vec![
            failed(0, 0, 240, 200),
            failed(0, 300, 560, 200),
            // A try (no wait) is bounded by the command timeout instead.
            Event::Start {
                client: 0,
                pid: 1,
                t: 0,
                protocol: "scripts".into(),
                command_timeout_ms: 100,
                clock_offset_ms: 0,
            },
            failed(0, 600, 700, 0),
            failed(0, 800, 1000, 0),
        ],
        &[],
    );
    assert_eq!(
        rules_but_liveness(&report),
        ["wait-overrun", "wait-overrun"]
    );
    assert!(report.violations[0].detail.contains("wait 200"));
    assert!(report.violations[1].detail.contains("command timeout"));
    assert_eq!(report.max_wait_overrun, 60 * MS);
}

#[test]
fn time_the_client_did_not_run_is_not_counted_against_its_deadline() {
    let hiccup = Event::Hiccup {
        client: 0,
        t_start: 100 * MS,
        t_end: 180 * MS,
    };
    let report = run(vec![failed(0, 0, 300, 200), hiccup.clone()], &[]);
    assert!(
        rules_but_liveness(&report).is_empty(),
        "{:?}",
        report.violations
    );
    assert_eq!(report.client_hiccups, 1);
    // Another client's hiccup excuses nothing.
    let report = run(vec![failed(1, 0, 300, 200), hiccup], &[]);
    assert_eq!(rules_but_liveness(&report), ["wait-overrun"]);
    // Nor is a stopped client judged.
    let pause = Event::Fault {
        kind: "pause".into(),
        target: "client1".into(),
        t_start: 50 * MS,
        t_end: 250 * MS,
    };
    let report = run(
        vec![failed(1, 0, 300, 200), pause, acq("b", "m", 1, 400, 100)],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
}

fn lost(id: &str, at_ms: u64) -> Event {
    Event::LostDetected {
        id: id.into(),
        t: at_ms * MS,
        how: "signal".into(),
    }
}

#[test]
fn loss_is_final() {
    let extended = |sent_ms: u64, reply_ms: u64| Event::Extended {
        id: "a".into(),
        t_sent: sent_ms * MS,
        t_reply: reply_ms * MS,
        valid_until: Some((sent_ms + 190) * MS),
        outcome: "ok".into(),
    };
    // An extension answered before the loss: fine.
    let report = run(vec![acq("a", "n", 1, 0, 190), extended(100, 101)], &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Sent before the lease ran out, answered after the holder was told it was lost.
    let report = run(
        vec![acq("a", "n", 1, 0, 190), lost("a", 190), extended(150, 260)],
        &[],
    );
    assert_eq!(rules(&report), ["revived-lease"]);
    // A renewal that revived it, seen by a later look or by is_lost() at the release.
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            lost("a", 190),
            Event::Observed {
                id: "a".into(),
                t: 250 * MS,
                valid_until: 400 * MS,
            },
            release("a", 300, ReleaseOutcome::Released, false),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["revived-lease", "revived-lease"]);
}

fn nested(id: &str, call_ms: u64, ran: bool) -> Event {
    Event::Nested {
        id: id.into(),
        t_call: call_ms * MS,
        t_body: ran.then_some((call_ms + 1) * MS),
        t_return: (call_ms + 2) * MS,
        outcome: if ran { "ok" } else { "lost" }.into(),
        t_body_end: None,
        sibling: None,
    }
}

#[test]
fn a_nested_body_must_not_run_on_an_untrusted_lease() {
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            nested("a", 100, true),
            acq("b", "m", 1, 0, 190),
            nested("b", 250, false),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!((report.nested_ran, report.nested_refused), (1, 1));
    let report = run(vec![acq("a", "n", 1, 0, 190), nested("a", 250, true)], &[]);
    assert_eq!(rules(&report), ["nested-on-lost"]);
    // Told lost before the call (e.g. by the loss signal): the same.
    let report = run(
        vec![
            acq("a", "n", 1, 0, 190),
            lost("a", 50),
            nested("a", 100, true),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["nested-on-lost"]);
}

fn probe(values: [[Option<&str>; 2]; 2]) -> Event {
    let mut looks = Vec::new();
    for (round, row) in values.iter().enumerate() {
        for (node, value) in row.iter().enumerate() {
            looks.push(Look {
                t: (101 + 50 * round as u64) * MS,
                node: node as u32,
                value: value.map(str::to_owned),
            });
        }
    }
    Event::Probe {
        client: 0,
        name: "n".into(),
        t_error: 100 * MS,
        looks,
    }
}

#[test]
fn a_failed_acquire_must_not_leave_its_value_behind() {
    let ours = Some("t1:torture-c0@host:1");
    let theirs = Some("t2:torture-c1@host:2");
    let error = Event::AcquireFailed {
        client: 0,
        name: "n".into(),
        t_start: 90 * MS,
        t_end: 100 * MS,
        kind: FailKind::WrongType,
        message: String::new(),
        wait_ms: Some(0),
        hold: HoldKind::Lock,
        set: None,
        capacity: None,
    };
    let report = run(
        vec![error.clone(), probe([[ours, None], [ours, None]])],
        &[],
    );
    assert_eq!(rules(&report), ["leftover-after-error"]);
    assert_eq!(report.foreign_probes, 1);
    // Another client's value, or ours gone by the second look: fine.
    for looks in [
        [[theirs, None], [theirs, None]],
        [[ours, None], [None, None]],
    ] {
        let report = run(vec![error.clone(), probe(looks)], &[]);
        assert!(report.passed(), "{:?}", report.violations);
    }
    // A sibling request of the same client in flight meanwhile may own the value.
    let report = run(
        vec![
            error.clone(),
            failed(0, 95, 130, 100),
            probe([[ours, None], [ours, None]]),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
    // So may a lease that was granted with it.
    let granted = Some("tok-g:torture-c0@host:1");
    let report = run(
        vec![
            error,
            acq("g", "n", 1, 300, 190),
            probe([[granted, None], [granted, None]]),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
}

// The rules of issue 24: liveness, multi-locks, cancellation, sibling calls.

/// `acq` granted to `client` after waiting from `call_ms` with `wait_ms`.
fn waited(event: Event, client: u32, call_ms: u64, wait_ms: u64) -> Event {
    let Event::Acquired(mut a) = with_wait(event, call_ms, wait_ms) else {
        unreachable!()
    };
    a.client = client;
    Event::Acquired(a)
}

#[test]
fn a_waiter_must_not_wait_while_the_lock_is_free() {
    // `a` holds 0..100 and releases; `b`, waiting since 10 ms, is granted at 101: fine.
    let quick = vec![
        acq("a", "n", 1, 0, 190),
        release("a", 100, ReleaseOutcome::Released, false),
        waited(acq("b", "n", 2, 100, 190), 1, 10, 400),
    ];
    let report = run(quick.clone(), &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Granted only at 301: the lock was free for 200 ms while `b` waited.
    let slow = vec![
        acq("a", "n", 1, 0, 190),
        release("a", 100, ReleaseOutcome::Released, false),
        waited(acq("b", "n", 2, 300, 190), 1, 10, 400),
    ];
    let report = run(slow.clone(), &[]);
    assert_eq!(rules(&report), ["liveness"]);
    assert!(
        report.violations[0].detail.contains("201.000ms"),
        "{:?}",
        report.violations
    );
    // A fault in that time excuses it (a stopped client may hold up the queue).
    let mut faulted = slow;
    faulted.push(Event::Fault {
        kind: "pause-waiter".into(),
        target: "client2".into(),
        t_start: 120 * MS,
        t_end: 150 * MS,
    });
    assert!(run(faulted, &[]).passed());
}

#[test]
fn an_attempt_refused_for_its_replicas_held_the_name_until_its_undo() {
    // Client 2's attempt wrote the key at 0 and, its replicas silent, deleted it at 200;
    // `b`, waiting since 10 ms, is granted at 220: the name was free for 20 ms only.
    let mut refused = failed(2, 0, 200, 1000);
    if let Event::AcquireFailed { kind, .. } = &mut refused {
        *kind = FailKind::NotReplicated;
    }
    let events = vec![refused, waited(acq("b", "n", 1, 220, 190), 1, 10, 400)];
    let report = run(events.clone(), &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // The same wait beside a request that wrote nothing (busy, say) was left behind.
    let mut busy = events;
    busy[0] = failed(2, 0, 200, 1000);
    let report = run(busy, &[]);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == "liveness" && v.detail.starts_with("b (client 1")),
        "{:?}",
        report.violations
    );
}

#[test]
fn a_server_that_ran_nothing_held_everyone_up_unless_its_own_command_did() {
    // `a` releases at 100; `b`, waiting since 10 ms, is granted at 301: 200 ms free.
    let slow = vec![
        acq("a", "n", 1, 0, 190),
        release("a", 100, ReleaseOutcome::Released, false),
        waited(acq("b", "n", 2, 300, 190), 1, 10, 400),
    ];
    assert_eq!(rules(&run(slow.clone(), &[])), ["liveness"]);
    // The server ran no command from 90 to 290 ms (not scheduled): nothing could move.
    let stall = |slow_commands: Vec<(String, u64)>| Event::ServerStall {
        port: 7000,
        t_start: 90 * MS,
        t_end: 290 * MS,
        slow: slow_commands,
    };
    let mut stalled = slow.clone();
    stalled.push(stall(Vec::new()));
    let report = run(stalled, &[]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.server_stalls, 1);
    // A script of its own that ran 180 ms explains the stall: still a violation.
    let mut scripted = slow.clone();
    scripted.push(stall(vec![("EVALSHA 0123abcd".into(), 180_000)]));
    assert_eq!(rules(&run(scripted, &[])), ["liveness"]);
    // A short slow command does not.
    let mut short = slow;
    short.push(stall(vec![("ZADD lock:{n}:q".into(), 12_000)]));
    assert!(run(short, &[]).passed());
}

/// A server's `MONITOR` record of granting `token` on `n`'s lock key at `at_ms`, ending by
/// its clock at `until_ms`.
fn server_grant(token: &str, at_ms: u64, until_ms: u64) -> Event {
    Event::Granted {
        node: 7000,
        t: at_ms * MS,
        token: token.into(),
        key: Some("lock:{n}".into()),
        until: Some(until_ms * MS),
    }
}

fn cluster() -> Event {
    Event::Topology {
        topology: "cluster".into(),
        nodes: 1,
    }
}

#[test]
fn a_grant_no_client_took_held_the_name_until_the_server_removed_it() {
    // `a` holds 0..100. At 100 the server grants `x` (a request whose claim then waited for
    // its replicas past its deadline: no client reports it) and removes it at 290; `b`,
    // waiting since 10 ms, is granted at 300: the name was free for 10 ms only.
    let events = vec![
        cluster(),
        acq("a", "n", 1, 0, 100),
        server_grant("tok-a", 0, 200),
        server_grant("x", 100, 400),
        Event::Ungranted {
            node: 7000,
            t: 290 * MS,
            token: "x".into(),
        },
        waited(acq("b", "n", 2, 300, 190), 1, 10, 400),
        server_grant("tok-b", 300, 500),
    ];
    let report = run(events.clone(), &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Removed at 120 instead: free from 120 to 300 while `b` waited.
    let mut early = events.clone();
    early[4] = Event::Ungranted {
        node: 7000,
        t: 120 * MS,
        token: "x".into(),
    };
    assert_eq!(rules(&run(early, &[])), ["liveness"]);
    // Never removed: held until its end by the server's clock, 140 ms.
    let mut ran_out = events.clone();
    ran_out[3] = server_grant("x", 100, 140);
    ran_out.remove(4);
    assert_eq!(rules(&run(ran_out, &[])), ["liveness"]);
    // A removal by another server ends nothing of it.
    let mut elsewhere = events;
    elsewhere[4] = Event::Ungranted {
        node: 7001,
        t: 120 * MS,
        token: "x".into(),
    };
    assert!(run(elsewhere, &[]).passed());
}

#[test]
fn a_lease_holds_its_name_from_the_servers_grant() {
    // `b`'s grant was made at 100 and reported at 301, once its replicas acknowledged it;
    // `c`, waiting since 10 ms, is granted at 501, after `b`'s lease: never free meanwhile.
    let events = vec![
        cluster(),
        acq("a", "n", 1, 0, 100),
        server_grant("tok-a", 0, 200),
        waited(acq("b", "n", 2, 300, 200), 1, 10, 400),
        server_grant("tok-b", 100, 500),
        waited(acq("c", "n", 3, 500, 190), 2, 10, 600),
        server_grant("tok-c", 500, 700),
    ];
    let report = run(events.clone(), &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Without the server's record (and so on one server), `b` and `c` waited while `n`
    // looked free from 100 to 301.
    let unwatched: Vec<Event> = events
        .into_iter()
        .filter(|e| !matches!(e, Event::Granted { .. } | Event::Topology { .. }))
        .collect();
    assert_eq!(rules(&run(unwatched, &[])), ["liveness", "liveness"]);
}

#[test]
fn a_timeout_while_the_lock_was_mostly_free_is_a_violation() {
    // Held 0..100, 140..200, 240..300 (gaps of 40 ms), then free: the request waited
    // 0..400 and timed out; free 100+40+40 = 180 ms of 400, under half: fine...
    let mut events = vec![
        acq("a", "n", 1, 0, 100),
        acq("b", "n", 2, 139, 61),
        acq("c", "n", 3, 239, 61),
        failed(5, 0, 400, 400),
    ];
    let report = run(events.clone(), &[]);
    assert!(
        !rules(&report).contains(&"liveness"),
        "{:?}",
        report.violations
    );
    // ...but with its last holder gone at 240, free 100+40+160 > 200 of a 400 ms wait
    // (the longest stretch 160 ms also passes the threshold).
    events[2] = acq("c", "n", 3, 239, 1);
    let report = run(events, &[]);
    assert_eq!(rules(&report), ["liveness"]);
    // Fragmented: each gap under the threshold, 241 ms free in all of a 400 ms wait.
    let events = vec![
        acq("a", "n", 1, 0, 40),
        acq("b", "n", 2, 119, 41),
        acq("c", "n", 3, 239, 41),
        acq("d", "n", 4, 359, 41),
        failed(5, 0, 400, 400),
    ];
    let report = run(events, &[]);
    assert_eq!(rules(&report), ["liveness"]);
    assert!(
        report.violations[0].detail.contains("timed out"),
        "{:?}",
        report.violations
    );
}

/// A Cluster failover as the harness logs it (JSON, as in `faults.jsonl`): the master of
/// `n` paused at 200 ms, its replica promoted at 2.5 s, the old master a replica again at
/// 3 s, and the deployment whole again (the promoted master's replica resynced) at
/// `whole_ms`.
fn resynced_late(whole_ms: u64) -> Vec<Event> {
    let failover = format!(
        r#"{{"ev":"failover","kind":"pause","old":7000,"new":7001,"names":["n"],"t_start":{},"t_promoted":{},"t_end":{},"copies":[],"t_whole":{}}}"#,
        200 * MS,
        2500 * MS,
        3000 * MS,
        whole_ms * MS
    );
    vec![
        Event::Topology {
            topology: "cluster".into(),
            nodes: 1,
        },
        serde_json::from_str(&failover).expect("a failover line"),
    ]
}

#[test]
fn a_promoted_master_without_its_replica_yet_is_not_a_missed_wake_up() {
    // With the replica check on, the promoted master grants nothing until its replica has
    // resynced: Redis delays that full resync by `repl-diskless-sync-delay` (5 s by
    // default), past the 5 s the rule leaves after the old master's demotion. A request
    // waiting 8.1-8.4 s, before the resync ended at 8.5 s, was not left behind (issue 25:
    // 105 such flags in a 10-minute Cluster pause-master run).
    let mut events = resynced_late(8500);
    events.push(failed(1, 8100, 8400, 300));
    let report = run(events, &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Once the deployment is whole (and a claim window and two TTLs more), the rule judges
    // again.
    let mut events = resynced_late(8500);
    events.push(failed(1, 9100, 9400, 300));
    assert_eq!(rules(&run(events, &[])), ["liveness"]);
    // A history without the record (an older harness) keeps the 5 s after the demotion.
    let mut events = resynced_late(8500);
    if let Event::Failover(f) = &mut events[1] {
        f.t_whole = None;
    }
    events.push(failed(1, 8100, 8400, 300));
    assert_eq!(rules(&run(events, &[])), ["liveness"]);
}

#[test]
fn a_semaphore_waiter_is_free_to_go_while_a_permit_is() {
    let permit = |id: &str, start: u64, valid: u64| {
        let Event::Acquired(mut a) = acq(id, "s", 0, start, valid) else {
            unreachable!()
        };
        a.kind = HoldKind::Permit;
        a.fence = None;
        a.permits = Some(2);
        Event::Acquired(a)
    };
    let failed_permit = |start: u64, end: u64| {
        let Event::AcquireFailed {
            client,
            name,
            t_start,
            t_end,
            kind,
            message,
            wait_ms,
            ..
        } = failed(3, start, end, end - start)
        else {
            unreachable!()
        };
        Event::AcquireFailed {
            client,
            name: if name == "n" { "s".into() } else { name },
            t_start,
            t_end,
            kind,
            message,
            wait_ms,
            hold: HoldKind::Permit,
            set: None,
            capacity: None,
        }
    };
    // Both permits taken all along: waiting is right.
    let full = vec![
        permit("a", 0, 199),
        permit("b", 0, 199),
        failed_permit(10, 200),
    ];
    let report = run(full, &[]);
    assert!(
        !rules(&report).contains(&"liveness"),
        "{:?}",
        report.violations
    );
    // One permit free from 100 on: the waiter should have had it.
    let one_free = vec![
        permit("a", 0, 199),
        permit("b", 0, 40),
        failed_permit(10, 200),
    ];
    assert_eq!(rules(&run(one_free, &[])), ["liveness"]);
}

/// A multi-lock of `set`, logged once, as the client does.
fn multi(id: &str, set: &[&str], start_ms: u64, valid_ms: u64) -> Event {
    let Event::Acquired(mut a) = acq(id, &set.join("+"), 0, start_ms, valid_ms) else {
        unreachable!()
    };
    a.fence = None;
    a.set = Some(set.iter().map(|s| (*s).to_owned()).collect());
    Event::Acquired(a)
}

#[test]
fn a_multi_lock_is_judged_per_name() {
    // x+y held 0..100, then `x` alone 101..; no overlap, no token needed.
    let report = run(
        vec![
            multi("m", &["x", "y"], 0, 100),
            release("m", 100, ReleaseOutcome::Released, false),
            acq("a", "x", 1, 100, 100),
        ],
        &[],
    );
    assert!(report.passed(), "{:?}", report.violations);
    // `y` alone granted while the multi-lock held it: an overlap on `y`.
    let report = run(
        vec![multi("m", &["x", "y"], 0, 100), acq("b", "y", 1, 50, 100)],
        &[],
    );
    assert_eq!(rules(&report), ["overlap"]);
    assert_eq!(report.violations[0].name, "y");
    // A multi-lock waiter for x+y while each was free at a different time only: fine;
    // while both were free for 200 ms: a violation.
    let request = |end: u64| Event::AcquireFailed {
        client: 3,
        name: "x+y".into(),
        t_start: 0,
        t_end: end * MS,
        kind: FailKind::Contention,
        message: String::new(),
        wait_ms: Some(end),
        hold: HoldKind::Lock,
        set: Some(vec!["x".into(), "y".into()]),
        capacity: None,
    };
    let alternating = vec![
        acq("a", "x", 1, 0, 200),
        acq("b", "y", 1, 199, 201),
        request(400),
    ];
    let report = run(alternating, &[]);
    assert!(
        !rules(&report).contains(&"liveness"),
        "{:?}",
        report.violations
    );
    let both_free = vec![
        acq("a", "x", 1, 0, 100),
        acq("b", "y", 1, 0, 100),
        request(400),
    ];
    assert_eq!(rules(&run(both_free, &[])), ["liveness"]);
}

fn cancel_probe(client: u32, at_ms: u64, values: &[(u64, Option<&str>)]) -> Event {
    Event::CancelProbe {
        client,
        name: "n".into(),
        t_cancel: at_ms * MS,
        looks: values
            .iter()
            .map(|&(t, v)| Look {
                t: t * MS,
                node: 0,
                value: v.map(str::to_owned),
            })
            .collect(),
    }
}

fn cancelled(client: u32, start_ms: u64, end_ms: u64) -> Event {
    Event::Cancelled {
        client,
        name: "n".into(),
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        wait_ms: 300,
        how: "abort".into(),
    }
}

#[test]
fn a_release_must_not_hand_the_lock_to_a_dropped_request() {
    let ghost = Some("~t9:torture-c0@host:1");
    let other = Some("t2:torture-c1@host:2");
    // Dropped at 50; at 300 the key carries client 0's never-granted value: a ghost.
    let report = run(
        vec![
            cancelled(0, 0, 50),
            cancel_probe(0, 50, &[(60, other), (300, ghost), (310, ghost)]),
        ],
        &[],
    );
    assert_eq!(rules(&report), ["ghost-grant"]);
    assert_eq!((report.cancelled, report.cancel_probes), (1, 1));
    // Another client's value, or ours right after the drop (an attempt being undone), or
    // while another request of ours was live: no ghost.
    let report = run(
        vec![
            cancelled(0, 0, 50),
            Event::AcquireFailed {
                client: 0,
                name: "n".into(),
                t_start: 200 * MS,
                t_end: 400 * MS,
                kind: FailKind::Connection,
                message: String::new(),
                wait_ms: Some(0),
                hold: HoldKind::Lock,
                set: None,
                capacity: None,
            },
            cancel_probe(0, 50, &[(60, other), (80, ghost), (300, ghost)]),
        ],
        &[],
    );
    assert!(
        !rules(&report).contains(&"ghost-grant"),
        "{:?}",
        report.violations
    );
}

fn sibling(id: &str, body_ms: (u64, u64), how: &str) -> Event {
    Event::Nested {
        id: id.into(),
        t_call: 40 * MS,
        t_body: Some(body_ms.0 * MS),
        t_return: 90 * MS,
        outcome: "ok".into(),
        t_body_end: Some(body_ms.1 * MS),
        sibling: Some(how.into()),
    }
}

#[test]
fn two_sibling_bodies_of_one_key_must_not_run_at_once() {
    let base = || vec![acq("a", "n", 1, 0, 190)];
    // One after the other (the lease lent to one call at a time): fine.
    let mut events = base();
    events.extend([
        sibling("a", (41, 50), "join"),
        sibling("a", (50, 60), "join"),
    ]);
    let report = run(events, &[]);
    assert!(report.passed(), "{:?}", report.violations);
    // Both inside at once.
    let mut events = base();
    events.extend([
        sibling("a", (41, 55), "join"),
        sibling("a", (42, 56), "join"),
    ]);
    assert_eq!(rules(&run(events, &[])), ["sibling-overlap"]);
    // A sibling refused (Busy, its body never ran) overlaps nothing.
    let mut events = base();
    events.push(sibling("a", (41, 55), "select"));
    events.push(Event::Nested {
        id: "a".into(),
        t_call: 40 * MS,
        t_body: None,
        t_return: 41 * MS,
        outcome: "contention".into(),
        t_body_end: None,
        sibling: Some("select".into()),
    });
    assert!(run(events, &[]).passed());
}

#[test]
fn a_redis_error_outside_every_fault_is_a_violation() {
    let error = |kind: FailKind, start_ms: u64| Event::AcquireFailed {
        client: 0,
        name: "n".into(),
        t_start: start_ms * MS,
        t_end: (start_ms + 1) * MS,
        kind,
        message: "CROSSSLOT Keys in request don't hash to the same slot".into(),
        wait_ms: Some(0),
        hold: HoldKind::Lock,
        set: None,
        capacity: None,
    };
    let fault = Event::Fault {
        kind: "kill".into(),
        target: "node0".into(),
        t_start: 10_000 * MS,
        t_end: 11_000 * MS,
    };
    // With no fault at all, a Redis error is unexplained; a connection error is not.
    let unexplained = run(vec![error(FailKind::Redis, 100)], &[]);
    assert_eq!(rules_but_liveness(&unexplained), ["unexplained-error"]);
    let connection = run(vec![error(FailKind::Connection, 100)], &[]);
    assert!(
        rules_but_liveness(&connection).is_empty(),
        "{:?}",
        connection.violations
    );
    // During a fault, or while it settles, it is explained; long after, it is not.
    let during = run(vec![fault.clone(), error(FailKind::Redis, 10_500)], &[]);
    assert!(
        rules_but_liveness(&during).is_empty(),
        "{:?}",
        during.violations
    );
    let settling = run(vec![fault.clone(), error(FailKind::Other, 14_000)], &[]);
    assert!(
        rules_but_liveness(&settling).is_empty(),
        "{:?}",
        settling.violations
    );
    let after = run(vec![fault, error(FailKind::Redis, 20_000)], &[]);
    assert_eq!(rules_but_liveness(&after), ["unexplained-error"]);
}
