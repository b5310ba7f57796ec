//! The rules of issue 43's workloads on synthetic histories: countdown latches, weighted
//! permits with the capacity changed in use, and a writer's downgrade. Each rule is made
//! to fire by a history that breaks it, and to pass one that keeps it.

use super::prim_tests::grant;
use super::tests::{rules, run};
use super::*;
use crate::event::{
    CapacitySet, Downgraded, HoldKind, LatchArm, LatchCount, LatchWait, WaitOutcome,
};

const MS: u64 = 1_000_000;

fn arm(round: u64, at_ms: u64, count: u64) -> Event {
    Event::LatchArm(LatchArm {
        client: 0,
        name: "l".into(),
        t_sent: at_ms * MS,
        t_reply: (at_ms + 1) * MS,
        count,
        ttl_ms: 800,
        round: Some(round),
        outcome: "armed".into(),
    })
}

fn count(client: u32, at_ms: u64, left: u64) -> Event {
    Event::LatchCount(LatchCount {
        client,
        name: "l".into(),
        t_sent: at_ms * MS,
        t_reply: (at_ms + 1) * MS,
        round_seen: None,
        left: Some(left),
        outcome: "counted".into(),
    })
}

fn wait(client: u32, start_ms: u64, end_ms: u64, timeout_ms: u64, outcome: WaitOutcome) -> Event {
    Event::LatchWait(LatchWait {
        client,
        name: "l".into(),
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        timeout_ms,
        outcome,
    })
}

/// Round 1 armed at 0 ms with a count of 2, counted at 50 and 100 ms (opened at 101 ms);
/// round 2 armed at 300 ms with a count of 3, counted once (abandoned: expires at 1100 ms).
fn latch_history() -> Vec<Event> {
    vec![
        arm(1, 0, 2),
        count(1, 50, 1),
        count(2, 100, 0),
        arm(2, 300, 3),
        count(1, 350, 2),
    ]
}

#[test]
fn a_latch_that_opens_once_and_wakes_its_waiters_passes() {
    let mut events = latch_history();
    events.push(wait(3, 10, 110, 1000, WaitOutcome::Open));
    events.push(wait(3, 200, 201, 1000, WaitOutcome::Open)); // round 1 open: at once
    events.push(wait(4, 310, 1110, 2000, WaitOutcome::Expired));
    events.push(wait(4, 320, 520, 200, WaitOutcome::Timeout));
    let report = run(events, &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
    let stats = report.latch.expect("latch figures");
    assert_eq!((stats.rounds, stats.opened, stats.judged), (2, 1, 4));
}

#[test]
fn a_round_opened_twice_breaks_latch_once() {
    let mut events = latch_history();
    events.push(count(3, 120, 0));
    assert_eq!(rules(&run(events, &[])), vec!["latch-once", "latch-once"]);
}

#[test]
fn a_round_opened_before_its_count_breaks_latch_once() {
    let events = vec![arm(1, 0, 3), count(1, 50, 0), arm(2, 300, 2)];
    assert_eq!(rules(&run(events, &[])), vec!["latch-once"]);
}

#[test]
fn a_round_replaced_while_counting_breaks_latch_rearm() {
    let events = vec![arm(1, 0, 2), count(1, 50, 1), arm(2, 300, 2)];
    assert_eq!(rules(&run(events, &[])), vec!["latch-rearm"]);
    // Past its TTL it may be replaced.
    let events = vec![arm(1, 0, 2), count(1, 50, 1), arm(2, 900, 2)];
    assert_eq!(rules(&run(events, &[])), Vec::<&str>::new());
}

#[test]
fn a_waiter_let_through_before_the_opening_breaks_latch_early() {
    let mut events = latch_history();
    events.push(wait(3, 10, 60, 1000, WaitOutcome::Open));
    assert_eq!(rules(&run(events, &[])), vec!["latch-early"]);
}

#[test]
fn a_waiter_left_waiting_after_the_opening_breaks_latch_late() {
    let mut events = latch_history();
    // Opened at 101 ms: told by 251 ms at the latest.
    events.push(wait(3, 10, 400, 1000, WaitOutcome::Open));
    events.push(wait(4, 10, 1010, 1000, WaitOutcome::Timeout));
    assert_eq!(
        rules(&run(events.clone(), &[])),
        vec!["latch-late", "latch-late"]
    );
    // Its hiccups extend the allowance.
    events.truncate(events.len() - 1);
    events.push(Event::Hiccup {
        client: 3,
        t_start: 150 * MS,
        t_end: 350 * MS,
    });
    assert_eq!(rules(&run(events, &[])), Vec::<&str>::new());
}

#[test]
fn a_waiter_of_an_expired_round_must_be_told_so() {
    let mut events = latch_history();
    // Round 2 expires by 1101 ms: told by 1251 ms; a timeout after that is a hang.
    events.push(wait(4, 310, 2310, 2000, WaitOutcome::Timeout));
    events.push(wait(4, 310, 1500, 2000, WaitOutcome::Expired));
    events.push(wait(4, 310, 400, 2000, WaitOutcome::Expired));
    assert_eq!(
        rules(&run(events, &[])),
        vec!["latch-expired", "latch-expired", "latch-expired"]
    );
}

#[test]
fn a_waiter_woken_by_another_round_breaks_latch_wrong_round() {
    let mut events = latch_history();
    // Round 2 expires; round 3 is armed at 1200 ms and opens at 1251 ms: a waiter of
    // round 2 must be told it expired, not let through by round 3.
    events.push(arm(3, 1200, 1));
    events.push(count(2, 1250, 0));
    events.push(wait(4, 310, 1260, 2000, WaitOutcome::Open));
    assert_eq!(rules(&run(events, &[])), vec!["latch-wrong-round"]);
}

fn weighted(id: &str, start_ms: u64, valid_ms: u64, weight: u64) -> Acquired {
    let mut a = grant(id, "w", HoldKind::Permit, start_ms, valid_ms);
    a.permits = Some(5);
    a.weight = Some(weight);
    a
}

fn set_capacity(at_ms: u64, permits: u64, before: u64) -> Event {
    Event::CapacitySet(CapacitySet {
        client: 0,
        name: "w".into(),
        t_sent: at_ms * MS,
        t_reply: (at_ms + 1) * MS,
        permits,
        before: Some(before),
        outcome: "ok".into(),
    })
}

fn release(id: &str, at_ms: u64, outcome: ReleaseOutcome) -> Event {
    Event::Release {
        id: id.into(),
        t_sent: at_ms * MS,
        t_reply: at_ms * MS + 1,
        outcome,
        lost_reported: false,
    }
}

#[test]
fn weights_add_up_to_the_capacity_in_force() {
    // 3 + 2 of 5: fine.
    let ok = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        Event::Acquired(weighted("b", 10, 200, 2)),
    ];
    assert_eq!(rules(&run(ok, &[])), Vec::<&str>::new());
    // 3 + 3 of 5.
    let over = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        Event::Acquired(weighted("b", 10, 200, 3)),
    ];
    assert_eq!(rules(&run(over, &[])), vec!["weight"]);
    // Lowered to 3 at 5 ms: `a` keeps its 3, and nothing more may come in.
    let lowered = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        set_capacity(5, 3, 5),
        Event::Acquired(weighted("b", 10, 200, 1)),
    ];
    let report = run(lowered, &[]);
    assert_eq!(rules(&report), vec!["weight"]);
    assert_eq!(report.weights.map(|s| s.lowered_under_holders), Some(1));
    // A grant whose attempt overlaps the change may have come in under the old number.
    let during = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        set_capacity(10, 3, 5),
        Event::Acquired(weighted("b", 10, 200, 2)),
    ];
    assert_eq!(rules(&run(during, &[])), Vec::<&str>::new());
}

#[test]
fn lowering_the_capacity_revokes_nobody() {
    let kept = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        set_capacity(50, 3, 5),
        release("a", 100, ReleaseOutcome::Released),
    ];
    assert_eq!(rules(&run(kept, &[])), Vec::<&str>::new());
    let told = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        set_capacity(50, 3, 5),
        Event::LostDetected {
            id: "a".into(),
            t: 60 * MS,
            how: "signal".into(),
        },
    ];
    assert_eq!(rules(&run(told, &[])), vec!["revoked"]);
    let gone = vec![
        Event::Acquired(weighted("a", 0, 200, 3)),
        set_capacity(50, 3, 5),
        release("a", 100, ReleaseOutcome::NotHeld),
    ];
    assert_eq!(rules(&run(gone, &[])), vec!["revoked"]);
}

#[test]
fn a_large_request_passed_over_again_and_again_is_starved() {
    let start = |client: u32| Event::Start {
        client,
        pid: 1,
        t: 0,
        protocol: "scripts".into(),
        command_timeout_ms: 1000,
        clock_offset_ms: 0,
    };
    let history = |small: u64| {
        let mut events = vec![start(0), start(1)];
        let mut large = weighted("big", 0, 200, LARGE_WEIGHT);
        large.wait_ms = Some(2000);
        large.attempt_start = 999 * MS;
        large.acquired = 1000 * MS;
        large.valid_until = 1100 * MS;
        events.push(Event::Acquired(large));
        // Small requests made after it, back to back until it is granted.
        let spacing = 950 / small;
        for i in 0..small {
            let id = format!("s{i}");
            let mut a = weighted(&id, 10 + i * spacing, 200, 1);
            a.client = 1;
            events.push(Event::Acquired(a));
            events.push(release(
                &id,
                10 + i * spacing + spacing - 2,
                ReleaseOutcome::Released,
            ));
        }
        events
    };
    let report = run(history(5), &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
    assert_eq!(report.weights.map(|s| s.large_passed_max), Some(5));
    assert_eq!(rules(&run(history(20), &[])), vec!["weight-starved"]);
}

use crate::primitive::LARGE_WEIGHT;

fn downgraded(id: &str, at_ms: u64) -> Event {
    Event::Downgraded(Downgraded {
        id: id.into(),
        t_sent: at_ms * MS,
        t_reply: (at_ms + 1) * MS,
        outcome: "ok".into(),
    })
}

#[test]
fn a_downgraded_writer_lets_readers_in_after_it_and_no_writer() {
    let rw = |id: &str, kind, start| Event::Acquired(grant(id, "n", kind, start, 200));
    let readers_after = vec![
        rw("w", HoldKind::Write, 0),
        downgraded("w", 50),
        rw("r", HoldKind::Read, 60),
        release("w", 100, ReleaseOutcome::Released),
    ];
    let report = run(readers_after, &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
    assert_eq!(report.downgrades, 1);
    let reader_before = vec![
        rw("w", HoldKind::Write, 0),
        rw("r", HoldKind::Read, 20),
        downgraded("w", 50),
    ];
    assert_eq!(rules(&run(reader_before, &[])), vec!["downgrade"]);
    let writer_after = vec![
        rw("w", HoldKind::Write, 0),
        downgraded("w", 50),
        rw("x", HoldKind::Write, 60),
    ];
    assert_eq!(rules(&run(writer_after, &[])), vec!["downgrade"]);
}

#[test]
fn a_killed_counter_may_have_counted_without_logging_it() {
    // Count 3: two logged count-downs and an opener; client 3 was killed in between, after
    // its last logged count-down, so its unlogged one may be the missing third.
    let kill = |at_ms: u64| Event::Fault {
        kind: "kill-counter".into(),
        target: "client3".into(),
        t_start: at_ms * MS,
        t_end: (at_ms + 2) * MS,
    };
    let history = vec![
        arm(1, 0, 3),
        count(1, 50, 1),
        count(2, 100, 0),
        arm(2, 300, 2),
    ];
    assert_eq!(rules(&run(history.clone(), &[])), vec!["latch-once"]);
    let mut killed = history.clone();
    killed.push(kill(80));
    assert_eq!(rules(&run(killed, &[])), Vec::<&str>::new());
    // Killed more than a command timeout after the opening: no excuse.
    let mut late = history;
    late.push(kill(1200));
    assert_eq!(rules(&run(late, &[])), vec!["latch-once"]);
}
