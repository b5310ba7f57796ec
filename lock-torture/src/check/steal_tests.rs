//! Rules `steal-untold` and `false-loss`, and the steal's excuse in `overlap`, on
//! synthetic histories.

use super::tests::{acq, rules, run};
use super::*;

const MS: u64 = 1_000_000;

fn told(id: &str, at_ms: u64, how: &str) -> Event {
    Event::LostDetected {
        id: id.into(),
        t: at_ms * MS,
        how: how.into(),
    }
}

/// The key of `id` (whose token the test helper makes `tok-<id>`) taken, sent at `at_ms`
/// and answered a millisecond later, with its fault.
fn steal(id: &str, name: &str, at_ms: u64) -> Vec<Event> {
    vec![
        Event::Steal {
            name: name.into(),
            token: format!("tok-{id}"),
            how: "del".into(),
            t_sent: at_ms * MS,
            t_reply: (at_ms + 1) * MS,
            server_us: 0,
        },
        Event::Fault {
            kind: "steal".into(),
            target: format!("{name}:del"),
            t_start: at_ms * MS,
            t_end: (at_ms + 1) * MS,
        },
    ]
}

/// `a` holds `n` from 1 ms to 200 ms; its key is taken at 50 ms (answered at 51: told by
/// 151 ms at the latest); `b` is granted at 56 ms.
fn robbed(told_at_ms: Option<u64>) -> Vec<Event> {
    let mut events = vec![acq("a", "n", 1, 0, 200)];
    events.extend(steal("a", "n", 50));
    events.push(acq("b", "n", 2, 55, 200));
    if let Some(t) = told_at_ms {
        events.push(told("a", t, "signal"));
    }
    events
}

#[test]
fn a_robbed_holder_told_in_time_passes_and_excuses_the_next_grant() {
    let report = run(robbed(Some(60)), &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
    assert_eq!(report.expected.get("overlap/steal"), Some(&1));
    let stats = report.steal.expect("steal figures");
    assert_eq!((stats.steals, stats.judged, stats.told), (1, 1, 1));
    assert!((stats.max_ms - 9.0).abs() < 1e-9, "{stats:?}");
}

#[test]
fn a_robbed_holder_told_late_or_never_is_a_violation_and_so_is_its_overlap() {
    for told_at in [Some(170), None] {
        let report = run(robbed(told_at), &[]);
        assert_eq!(
            rules(&report),
            ["overlap", "steal-untold"],
            "told at {told_at:?}: {:?}",
            report.violations
        );
    }
}

#[test]
fn time_the_robbed_client_did_not_run_extends_its_deadline() {
    // Told at 170 ms, but its process did not run from 60 to 90 ms: deadline 181 ms.
    let mut events = robbed(Some(170));
    events.push(Event::Hiccup {
        client: 0,
        t_start: 60 * MS,
        t_end: 90 * MS,
    });
    let report = run(events, &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
}

#[test]
fn a_lease_whose_validity_ends_before_the_deadline_needs_no_telling() {
    // Valid until 120 ms, key taken at 50 ms, never told, nobody else granted.
    let mut events = vec![acq("a", "n", 1, 0, 120)];
    events.extend(steal("a", "n", 50));
    events.push(acq("c", "n", 2, 130, 200));
    let report = run(events, &[]);
    assert_eq!(
        rules(&report),
        Vec::<&str>::new(),
        "{:?}",
        report.violations
    );
    let stats = report.steal.expect("steal figures");
    assert_eq!((stats.judged, stats.told, stats.ended), (1, 0, 1));
}

#[test]
fn a_holder_told_while_its_key_was_untouched_is_a_false_loss() {
    // `b`'s key was never taken, yet it is told at 100 ms, long before its validity ends.
    let mut events = robbed(Some(60));
    events.push(told("b", 100, "signal"));
    let report = run(events.clone(), &[]);
    assert_eq!(rules(&report), ["false-loss"], "{:?}", report.violations);
    // Told at the end of its validity (256 ms): no false loss.
    let mut at_end = robbed(Some(60));
    at_end.push(told("b", 256, "is_lost"));
    assert_eq!(rules(&run(at_end, &[])), Vec::<&str>::new());
    // Another fault in the run could have ended it: not judged.
    events.push(Event::Fault {
        kind: "client-kill".into(),
        target: "node0".into(),
        t_start: 90 * MS,
        t_end: 90 * MS,
    });
    assert_eq!(rules(&run(events, &[])), Vec::<&str>::new());
}
