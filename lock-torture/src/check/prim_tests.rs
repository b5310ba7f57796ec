//! The semaphore's and the read-write lock's rules on synthetic histories.

use super::*;
use crate::event::HoldKind;

const MS: u64 = 1_000_000;

/// An acquisition of `kind` on `name`, attempted at `start_ms`, granted a millisecond later,
/// valid for `valid_ms` from the attempt (semaphore permits share 2 unless `permits`
/// says otherwise).
pub(super) fn grant(
    id: &str,
    name: &str,
    kind: HoldKind,
    start_ms: u64,
    valid_ms: u64,
) -> Acquired {
    Acquired {
        id: id.into(),
        client: 0,
        task: 0,
        name: name.into(),
        token: format!("tok-{id}"),
        fence: None,
        call_start: start_ms * MS,
        attempt_start: start_ms * MS,
        acquired: (start_ms + 1) * MS,
        valid_until: (start_ms + valid_ms) * MS,
        ttl_ms: 200,
        auto_renew: false,
        wait_ms: None,
        annotated: false,
        kind,
        permits: (kind == HoldKind::Permit).then_some(2),
        weight: None,
        set: None,
    }
}

fn permit(id: &str, start_ms: u64, valid_ms: u64) -> Event {
    Event::Acquired(grant(id, "n", HoldKind::Permit, start_ms, valid_ms))
}

fn read(id: &str, start_ms: u64, valid_ms: u64) -> Event {
    Event::Acquired(grant(id, "n", HoldKind::Read, start_ms, valid_ms))
}

fn write(id: &str, start_ms: u64, valid_ms: u64) -> Event {
    Event::Acquired(grant(id, "n", HoldKind::Write, start_ms, valid_ms))
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

fn lost(id: &str, at_ms: u64) -> Event {
    Event::LostDetected {
        id: id.into(),
        t: at_ms * MS,
        how: "signal".into(),
    }
}

fn work(id: &str, at_ms: u64, lost_reported: bool) -> Event {
    Event::Work {
        id: id.into(),
        name: "n".into(),
        t: at_ms * MS,
        lost_reported,
    }
}

fn down(start_ms: u64, end_ms: u64) -> Event {
    Event::Down {
        node: 0,
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        empty: true,
    }
}

pub(super) fn run(events: Vec<Event>) -> Report {
    check(
        &History {
            events,
            ..History::default()
        },
        1,
    )
}

fn rules(report: &Report) -> Vec<&'static str> {
    report.violations.iter().map(|v| v.rule).collect()
}

#[test]
fn up_to_n_permits_may_be_trusted_at_once() {
    // Two permits of two, then a third once the first was released.
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 10, 190),
        release("a", 50, ReleaseOutcome::Released),
        permit("c", 60, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.peak_permits, Some(2));
    // Nor do permits need fencing tokens: no `fence-order` for them.
    assert_eq!(report.fence_resets, 0);
}

#[test]
fn a_permit_beyond_n_is_a_violation() {
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 10, 190),
        permit("c", 60, 190),
    ]);
    assert_eq!(rules(&report), ["permits"]);
    assert!(report.violations[0].detail.contains("c was granted"));
    assert_eq!(report.peak_permits, Some(3));
    // The third's trust starts where the first one's ended (half-open intervals): fine.
    let report = run(vec![
        permit("a", 0, 61),
        permit("b", 10, 190),
        permit("c", 60, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    // A larger limit, asked by every request, admits the third.
    let mut events = Vec::new();
    for (id, start) in [("a", 0), ("b", 10), ("c", 60)] {
        let mut a = grant(id, "n", HoldKind::Permit, start, 190);
        a.permits = Some(3);
        events.push(Event::Acquired(a));
    }
    assert!(run(events).passed());
}

#[test]
fn a_permit_ends_its_trust_when_lost_or_released() {
    // The first holder was told its permit was lost before the third was granted.
    let report = run(vec![
        permit("a", 0, 190),
        lost("a", 40),
        permit("b", 10, 190),
        permit("c", 60, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    // ... or logged that it was releasing (a client killed before the answer).
    let report = run(vec![
        permit("a", 0, 190),
        Event::Releasing {
            id: "a".into(),
            t: 40 * MS,
        },
        permit("b", 10, 190),
        permit("c", 60, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn permits_of_other_names_and_other_primitives_do_not_count() {
    let mut other = grant("c", "m", HoldKind::Permit, 60, 190);
    other.permits = Some(2);
    let mut lock = grant("d", "n", HoldKind::Lock, 60, 190);
    lock.fence = Some(1);
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 10, 190),
        Event::Acquired(other),
        Event::Acquired(lock),
        read("e", 70, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn a_permit_without_its_limit_is_reported() {
    let mut a = grant("a", "n", HoldKind::Permit, 0, 190);
    a.permits = None;
    assert_eq!(rules(&run(vec![Event::Acquired(a)])), ["permits"]);
}

#[test]
fn a_restart_forgets_the_permits_granted_before_it() {
    // Two permits, the server restarted empty while both were trusted, a third granted
    // by the new server: expected.
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 10, 190),
        down(50, 60),
        permit("c", 100, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.expected.get("permits/restart"), Some(&1));
    assert_eq!(report.expected_restart_overlaps, 1);
    // The new server granted two already: a fourth is one too many whatever it forgot.
    let report = run(vec![
        permit("a", 0, 190),
        down(50, 60),
        permit("b", 100, 190),
        permit("c", 110, 190),
        permit("d", 120, 190),
    ]);
    assert_eq!(rules(&report), ["permits"]);
    assert!(report.violations[0].detail.contains("d was granted"));
    // Granted while the server was down (its outage outlasted the first holders' trust):
    // no restart forgot them, nothing is excused.
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 10, 190),
        down(50, 250),
        permit("c", 150, 190),
    ]);
    assert_eq!(rules(&report), ["permits", "acquired-while-down"]);
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let report = run(vec![
        read("a", 0, 190),
        read("b", 10, 190),
        read("c", 20, 190),
        release("a", 100, ReleaseOutcome::Released),
        release("b", 100, ReleaseOutcome::Released),
        release("c", 100, ReleaseOutcome::Released),
        write("w", 110, 190),
        release("w", 200, ReleaseOutcome::Released),
        read("d", 210, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.peak_readers, Some((3, 1)));
}

#[test]
fn a_writer_overlapping_anyone_is_a_violation() {
    // A writer granted over a reader.
    let report = run(vec![read("a", 0, 190), write("w", 50, 190)]);
    assert_eq!(rules(&report), ["write-overlap"]);
    // A reader granted over a writer.
    let report = run(vec![write("w", 0, 190), read("a", 50, 190)]);
    assert_eq!(rules(&report), ["write-overlap"]);
    // Two writers.
    let report = run(vec![write("w", 0, 190), write("x", 50, 190)]);
    assert_eq!(rules(&report), ["write-overlap"]);
    // A writer over two readers: both overlaps are reported.
    let report = run(vec![
        read("a", 0, 190),
        read("b", 5, 190),
        write("w", 50, 190),
    ]);
    assert_eq!(rules(&report), ["write-overlap", "write-overlap"]);
    // The writer's trust ended (it learnt it lost the lease) before the reader came.
    let report = run(vec![write("w", 0, 190), lost("w", 40), read("a", 50, 190)]);
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn a_restart_excuses_a_writer_over_readers_it_forgot() {
    let report = run(vec![read("a", 0, 190), down(20, 30), write("w", 50, 190)]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.expected.get("write-overlap/restart"), Some(&1));
    // A reader granted after the restart is remembered.
    let report = run(vec![
        read("a", 0, 190),
        down(20, 30),
        read("b", 40, 190),
        write("w", 50, 190),
    ]);
    assert_eq!(rules(&report), ["write-overlap"]);
    assert!(report.violations[0].detail.starts_with("b (read)"));
}

#[test]
fn a_release_over_an_excluding_grant_must_not_succeed() {
    // A reader whose lease ran out was followed by a writer, yet its release said true.
    let report = run(vec![
        read("a", 0, 50),
        write("w", 60, 190),
        release("a", 100, ReleaseOutcome::Released),
    ]);
    assert_eq!(rules(&report), ["silent-release", "silent-release"]);
    // Another reader meanwhile is no conflict (only the late release itself is).
    let report = run(vec![
        read("a", 0, 190),
        read("b", 60, 190),
        release("a", 100, ReleaseOutcome::Released),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    // Nor are other permits.
    let report = run(vec![
        permit("a", 0, 190),
        permit("b", 60, 190),
        release("a", 100, ReleaseOutcome::Released),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
}

#[test]
fn work_after_the_validity_needs_is_lost_and_loss_is_final() {
    // Worked past its validity (190 ms) without being told.
    let report = run(vec![permit("a", 0, 190), work("a", 250, false)]);
    assert_eq!(rules(&report), ["silent-loss"]);
    assert_eq!(report.late_writes, 1);
    // Told: fine, and counted.
    let report = run(vec![permit("a", 0, 190), work("a", 250, true)]);
    assert!(report.passed(), "{:?}", report.violations);
    assert_eq!(report.late_writes, 1);
    // Told it was lost, then told it was not.
    let report = run(vec![read("a", 0, 190), lost("a", 50), work("a", 60, false)]);
    assert_eq!(rules(&report), ["revived-lease"]);
}

/// A permit of `name` asking for `permits`.
fn permit_of(id: &str, permits: u64, start_ms: u64, valid_ms: u64) -> Event {
    let mut a = grant(id, "n", HoldKind::Permit, start_ms, valid_ms);
    a.permits = Some(permits);
    Event::Acquired(a)
}

/// A refused semaphore request of `n` asking for `asked`, from `start_ms` to `end_ms`.
fn refused(kind: FailKind, asked: u64, stored: Option<u64>, start_ms: u64, end_ms: u64) -> Event {
    Event::AcquireFailed {
        client: 3,
        name: "n".into(),
        t_start: start_ms * MS,
        t_end: end_ms * MS,
        kind,
        message: String::new(),
        wait_ms: Some(100),
        hold: HoldKind::Permit,
        set: None,
        capacity: Some(crate::event::Capacity {
            asked,
            stored,
            weight: None,
        }),
    }
}

#[test]
fn a_grant_beside_a_permit_of_another_number_is_a_capacity_violation() {
    // Stored with 2 while `a` is trusted: `b` asking for 3 must not get in, even below
    // either number.
    let report = run(vec![permit_of("a", 2, 0, 190), permit_of("b", 3, 10, 190)]);
    assert_eq!(rules(&report), ["capacity"]);
    assert!(report.violations[0].detail.contains("b asking for 3"));
    // Once `a` is released the semaphore is idle: the next number is stored.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        release("a", 50, ReleaseOutcome::Released),
        permit_of("b", 3, 60, 190),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    // Counted against the grant's own number (the stored one): three of three are fine,
    // a third of two is not.
    let three: Vec<Event> = [("a", 0), ("b", 10), ("c", 20)]
        .into_iter()
        .map(|(id, start)| permit_of(id, 3, start, 190))
        .collect();
    assert!(run(three).passed());
}

#[test]
fn a_request_under_a_permit_of_another_number_must_be_refused_as_a_mismatch() {
    // Refused as a mismatch naming the stored number: fine.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        refused(FailKind::Mismatch, 3, Some(2), 20, 22),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
    // Refused as busy or full instead (answered before its deadline): a violation.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        refused(FailKind::Contention, 3, None, 20, 22),
    ]);
    assert_eq!(rules(&report), ["capacity"]);
    // A mismatch naming another number than the trusted permit's, or its own.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        refused(FailKind::Mismatch, 3, Some(3), 20, 22),
    ]);
    assert_eq!(rules(&report), ["capacity", "capacity"]);
    // Timed out at its deadline (100 ms): the answer may never have come; not judged.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        refused(FailKind::Contention, 3, None, 20, 120),
    ]);
    assert!(
        !rules(&report).contains(&"capacity"),
        "{:?}",
        report.violations
    );
    // Not under the trusted permit the whole time (it was released): not judged.
    let report = run(vec![
        permit_of("a", 2, 0, 190),
        release("a", 21, ReleaseOutcome::Released),
        refused(FailKind::Contention, 3, None, 20, 22),
    ]);
    assert!(report.passed(), "{:?}", report.violations);
}
