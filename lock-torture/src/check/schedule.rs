//! The scheduled runs' rules (`--primitive schedule`; the schedule is in
//! [`crate::cadence`]):
//!
//! - `tick-once`: two replicas ran one job for the same tick, the later one's job
//!   beginning before the earlier one's minimum hold ended (counted from the start of the
//!   attempt that took the lock, by the harness's clock). The hold is the library's whole
//!   promise: a second run of the tick after it ended means that replica fired later than
//!   the hold allows for (it was stopped, or not scheduled), which the schedule's
//!   configuration, not the library, must cover: counted as `late_fires`, not judged. Two
//!   runs across a lock server's restart (it forgot the key) are expected
//!   (`tick-once/restart`).
//! - `tick-missed` (liveness): a tick for which some replica fired and tried, and none
//!   ran, while no fault was active from one interval before the tick to the next tick (the
//!   hold ends before the next tick by construction, so the first try of each tick finds
//!   the lock free). A tick at which every replica fired too late to try is counted as
//!   unfired, and one where a try failed for want of a server (a connection error, a
//!   command deadline, no quorum: load explains them on a busy machine) is not judged.

use std::collections::BTreeMap;

use super::{Down, Report, Violation};
use crate::clock::{ms, Nanos, SETTLED};
use crate::event::{Event, RunStarted, TickDone};

/// What the scheduled runs of a run came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleStats {
    /// Ticks of a job at which some replica tried.
    pub ticks: u64,
    /// Jobs that began.
    pub runs: u64,
    /// Fires that found the tick taken.
    pub skipped: u64,
    /// Fires that ended in an error.
    pub errors: u64,
    /// Second runs of a tick after the first one's hold had ended (a replica that fired
    /// late; see the module docs).
    pub late_fires: u64,
    /// Ticks at which every replica fired too late to try.
    pub unfired: u64,
    /// Ticks judged by `tick-missed` (no fault around them).
    pub judged: u64,
}

/// Whether some scheduled run began after `t`.
pub(super) fn ran_after(events: &[Event], t: Nanos) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::RunStarted(run) if run.t > t))
}

/// Rules `tick-once` and `tick-missed`.
pub(super) fn check(events: &[Event], downs: &[Down], report: &mut Report) {
    let mut runs: BTreeMap<(&str, u64), Vec<&RunStarted>> = BTreeMap::new();
    let mut fires: BTreeMap<(&str, u64), Vec<&TickDone>> = BTreeMap::new();
    let mut faults: Vec<(Nanos, Nanos)> = downs.iter().map(|d| (d.start, d.end)).collect();
    for event in events {
        match event {
            Event::RunStarted(run) => runs.entry((&run.job, run.tick)).or_default().push(run),
            Event::TickDone(fire) => fires.entry((&fire.job, fire.tick)).or_default().push(fire),
            Event::Fault { t_start, t_end, .. } | Event::Foreign { t_start, t_end, .. } => {
                faults.push((*t_start, *t_end));
            }
            Event::Failover(f) => faults.push((f.t_start, f.t_end)),
            _ => {}
        }
    }
    let Some((interval, hold)) = fires
        .values()
        .flatten()
        .next()
        .map(|f| (f.interval_ms * 1_000_000, f.hold_ms * 1_000_000))
    else {
        if !runs.is_empty() {
            report.schedule = Some(ScheduleStats::default());
        }
        return;
    };
    let mut stats = ScheduleStats::default();
    for ((job, tick), list) in &mut runs {
        stats.runs += list.len() as u64;
        list.sort_by_key(|r| r.attempt_start);
        let first = list[0];
        for later in &list[1..] {
            let hold_end = first.attempt_start + hold;
            if downs
                .iter()
                .any(|d| first.attempt_start <= d.start && d.start <= later.t)
            {
                report.expect("tick-once", "restart");
            } else if later.t + SETTLED >= hold_end {
                stats.late_fires += 1;
            } else {
                report.violations.push(Violation {
                    rule: "tick-once",
                    name: (*job).to_owned(),
                    detail: format!(
                        "tick {tick} ran twice: client {} from {} (attempt at {}), and client {} from {}, {} before the first run's minimum hold ended",
                        first.client,
                        first.t,
                        first.attempt_start,
                        later.client,
                        later.t,
                        ms(hold_end - later.t)
                    ),
                });
            }
        }
    }
    for ((job, tick), list) in &fires {
        stats.skipped += list.iter().filter(|f| f.outcome == "skipped").count() as u64;
        let tried: Vec<&&TickDone> = list.iter().filter(|f| f.outcome != "late").collect();
        stats.errors += tried
            .iter()
            .filter(|f| f.outcome != "ran" && f.outcome != "skipped")
            .count() as u64;
        if tried.is_empty() {
            stats.unfired += 1;
            continue;
        }
        stats.ticks += 1;
        // Judged only inside the schedule (tries before and after it), far from faults,
        // and where no try failed for want of a server: a connection error, a command
        // deadline or a missing quorum, which load explains (as for rule
        // `unexplained-error`).
        let tried_at = |k: u64| {
            fires
                .get(&(*job, k))
                .is_some_and(|l| l.iter().any(|f| f.outcome != "late"))
        };
        let around = tried_at(tick.wrapping_sub(1)) && tried_at(tick + 1);
        let from = (tick.saturating_sub(1)).saturating_mul(interval);
        let to = (tick + 1).saturating_mul(interval);
        let unreachable = tried.iter().any(|f| {
            matches!(
                f.outcome.as_str(),
                "connection" | "noquorum" | "notreplicated"
            )
        });
        if !around || unreachable || faults.iter().any(|&(s, e)| s <= to && e >= from) {
            continue;
        }
        stats.judged += 1;
        if runs.contains_key(&(*job, *tick)) {
            continue;
        }
        let outcomes: Vec<String> = tried
            .iter()
            .map(|f| format!("client {} at {}: {}", f.client, f.t_call, f.outcome))
            .collect();
        report.violations.push(Violation {
            rule: "tick-missed",
            name: (*job).to_owned(),
            detail: format!(
                "tick {tick} (from {}) ran nowhere while no fault was active: {}",
                tick.saturating_mul(interval),
                outcomes.join("; ")
            ),
        });
    }
    report.schedule = Some(stats);
}
