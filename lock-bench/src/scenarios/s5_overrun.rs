//! S5, overrun safety: 5 contenders (separate instances, as 5 processes) loop on one name
//! with a 100 ms TTL and hold it for a random 0–150 ms, so about a third of the holds
//! outlive the TTL. Counts the holds that overlapped another holder's, the overruns, and how
//! each library told the holder about them: during the hold (lock-core's `lost()`; rslock's
//! `using` cancels the body), at release (the release reply says the lock was no longer
//! ours), or never.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{interleaved, Failures, Settings};
use crate::contenders::{Any, Contender as _, Outcome, Released, Spec};
use crate::stats::{Samples, Spread};

pub const TTL: Duration = Duration::from_millis(100);
pub const MAX_HOLD: Duration = Duration::from_millis(150);
pub const CONTENDERS: usize = 5;
/// Redis stores expiry times in milliseconds and expires a key only once the clock has
/// passed that millisecond: a hold at most this much longer than the TTL may still find
/// its key in place at release.
const EXPIRY_GRANULARITY: Duration = Duration::from_millis(2);
const SPEC: Spec = Spec {
    ttl: TTL,
    wait: Duration::from_secs(30),
    watch_lost: true,
};

/// Five instances of one library racing for the name.
pub struct Group {
    pub label: String,
    pub renews: bool,
    pub members: Vec<Arc<Any>>,
}

#[derive(Debug, Clone, Copy)]
struct Record {
    entered: Instant,
    left: Instant,
    outcome: Outcome,
}

/// S5 figures of one run.
#[derive(Debug, Clone)]
pub struct Overruns {
    pub holds: u64,
    pub longer_than_ttl: u64,
    pub overruns: u64,
    pub overlapping: u64,
    pub told_during_hold: u64,
    pub told_at_release: u64,
    pub never_told: u64,
    /// How long after the lease's local validity end `lost()` fired (p50, max), ms.
    pub signal_late_p50_ms: f64,
    pub signal_late_max_ms: f64,
    pub failures: Failures,
}

pub async fn measure(group: &Group, run_for: Duration) -> Overruns {
    let mut failures = Failures::default();
    for member in &group.members {
        if let Err(err) = member.warm_up().await {
            failures.record(format!("warm-up: {err}"));
        }
    }
    let records = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for contender in &group.members {
        let contender = contender.clone();
        let records = records.clone();
        tasks.push(tokio::spawn(async move {
            let mut failures = Failures::default();
            while started.elapsed() < run_for {
                let hold = Duration::from_micros(fastrand::u64(0..=MAX_HOLD.as_micros() as u64));
                // The body notes when it ran; a body dropped mid-way (rslock's `using` on a
                // failed extension) has left when `locked` returned.
                let span = Arc::new(Mutex::new((None::<Instant>, None::<Instant>)));
                let inside = span.clone();
                let body = async move {
                    inside.lock().unwrap_or_else(PoisonError::into_inner).0 = Some(Instant::now());
                    tokio::time::sleep(hold).await;
                    inside.lock().unwrap_or_else(PoisonError::into_inner).1 = Some(Instant::now());
                };
                match contender.locked("s5", SPEC, body).await {
                    Ok(outcome) => {
                        let (entered, left) = *span.lock().unwrap_or_else(PoisonError::into_inner);
                        if let Some(entered) = entered {
                            records
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push(Record {
                                    entered,
                                    left: left.unwrap_or_else(Instant::now),
                                    outcome,
                                });
                        }
                    }
                    Err(err) => failures.record(err),
                }
            }
            failures
        }));
    }
    for task in tasks {
        match task.await {
            Ok(task_failures) => failures.merge(task_failures),
            Err(err) => failures.record(format!("task failed: {err}")),
        }
    }
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(PoisonError::into_inner));
    summarize(records, group.renews, failures)
}

fn summarize(mut records: Vec<Record>, renews: bool, failures: Failures) -> Overruns {
    records.sort_by_key(|r| r.entered);
    // A hold overlaps if it started before an earlier hold ended, or if a later one started
    // before it ended.
    let mut overlapping = vec![false; records.len()];
    let mut latest_end: Option<(Instant, usize)> = None;
    for (i, record) in records.iter().enumerate() {
        if let Some((end, owner)) = latest_end {
            if record.entered < end {
                overlapping[i] = true;
                overlapping[owner] = true;
            }
        }
        if latest_end.is_none_or(|(end, _)| record.left > end) {
            latest_end = Some((record.left, i));
        }
    }
    let mut figures = Overruns {
        holds: records.len() as u64,
        longer_than_ttl: 0,
        overruns: 0,
        overlapping: overlapping.iter().filter(|o| **o).count() as u64,
        told_during_hold: 0,
        told_at_release: 0,
        never_told: 0,
        signal_late_p50_ms: f64::NAN,
        signal_late_max_ms: f64::NAN,
        failures,
    };
    let mut late = Samples::default();
    for record in &records {
        let held = record.left - record.entered;
        let longer = held > TTL;
        let during = record.outcome.lost_signal_at.is_some();
        let at_release = !during && record.outcome.released == Released::Lost;
        // Without renewal, a body longer than the TTL (plus Redis's 1 ms expiry granularity)
        // outlived its lock: Redis expired the key TTL after the acquire, which came before
        // the body. With renewal, the lease lapsed only if the library says so.
        let overrun = if renews {
            during || at_release
        } else {
            held > TTL + EXPIRY_GRANULARITY
        };
        figures.longer_than_ttl += u64::from(longer);
        figures.overruns += u64::from(overrun);
        figures.told_during_hold += u64::from(during);
        figures.told_at_release += u64::from(at_release);
        figures.never_told += u64::from(overrun && !during && !at_release);
        if let (Some(at), Some(valid_until)) =
            (record.outcome.lost_signal_at, record.outcome.valid_until)
        {
            late.push(at.saturating_duration_since(valid_until).as_nanos() as u64);
        }
    }
    figures.signal_late_p50_ms = late.quantile_us(0.5) / 1000.0;
    figures.signal_late_max_ms = late.quantile_us(1.0) / 1000.0;
    figures
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub renews: bool,
    pub holds: Spread,
    pub longer_than_ttl: Spread,
    pub overruns: Spread,
    pub overlapping_holds: Spread,
    pub told_during_hold: Spread,
    pub told_at_release: Spread,
    pub overruns_never_told: Spread,
    pub lost_signal_after_validity_end_p50_ms: Spread,
    pub lost_signal_after_validity_end_max_ms: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub seconds_per_run: f64,
    pub rows: Vec<Row>,
}

pub async fn run(groups: &[Group], settings: &Settings) -> Table {
    let run_for = settings.overrun_for / settings.reps.max(1) as u32;
    let runs = interleaved(groups.len(), settings.reps, async |i| {
        measure(&groups[i], run_for).await
    })
    .await;
    let rows = groups
        .iter()
        .zip(&runs)
        .map(|(group, runs)| {
            let mut failures = Failures::default();
            for run in runs {
                failures.merge(run.failures.clone());
            }
            let count = |f: fn(&Overruns) -> u64| Spread::pick(runs, |r| f(r) as f64);
            Row {
                contender: group.label.clone(),
                renews: group.renews,
                holds: count(|r| r.holds),
                longer_than_ttl: count(|r| r.longer_than_ttl),
                overruns: count(|r| r.overruns),
                overlapping_holds: count(|r| r.overlapping),
                told_during_hold: count(|r| r.told_during_hold),
                told_at_release: count(|r| r.told_at_release),
                overruns_never_told: count(|r| r.never_told),
                lost_signal_after_validity_end_p50_ms: Spread::pick(runs, |r| r.signal_late_p50_ms),
                lost_signal_after_validity_end_max_ms: Spread::pick(runs, |r| r.signal_late_max_ms),
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect();
    Table {
        seconds_per_run: run_for.as_secs_f64(),
        rows,
    }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | renewal | holds | holds > TTL | overruns | overlapping holds | told during hold | told at release | overruns never told | `lost()` after validity end, p50 / max ms |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            let late = if row.lost_signal_after_validity_end_p50_ms.median.is_finite() {
                format!(
                    "{} / {}",
                    row.lost_signal_after_validity_end_p50_ms.show(1),
                    row.lost_signal_after_validity_end_max_ms.show(1)
                )
            } else {
                "–".into()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                if row.renews { "on" } else { "off" },
                row.holds.show(0),
                row.longer_than_ttl.show(0),
                row.overruns.show(0),
                row.overlapping_holds.show(0),
                row.told_during_hold.show(0),
                row.told_at_release.show(0),
                row.overruns_never_told.show(0),
                late,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(entered: Instant, ms: u64, released: Released, told: bool) -> Record {
        let left = entered + Duration::from_millis(ms);
        Record {
            entered,
            left,
            outcome: Outcome {
                released,
                lost_signal_at: told.then_some(left),
                valid_until: Some(entered + Duration::from_millis(97)),
            },
        }
    }

    #[test]
    fn overlaps_and_reports() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let records = vec![
            record(ms(0), 120, Released::Lost, true), // overran, told in time
            record(ms(101), 10, Released::Held, false), // overlaps the first
            record(ms(200), 130, Released::Unknown, false), // overran, never told
            record(ms(400), 50, Released::Lost, false), // told at release (not an overrun)
        ];
        let figures = summarize(records, false, Failures::default());
        assert_eq!(figures.holds, 4);
        assert_eq!(figures.overlapping, 2);
        assert_eq!(figures.overruns, 2);
        assert_eq!(figures.told_during_hold, 1);
        assert_eq!(figures.told_at_release, 1);
        assert_eq!(figures.never_told, 1);
        assert!((figures.signal_late_p50_ms - 23.0).abs() < 1e-6);
    }
}
