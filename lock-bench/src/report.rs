//! Everything one run measured: Markdown tables (printed as each scenario ends, and all of
//! them with `--markdown`), JSON for tooling (`--json`), and the targets checked
//! against the figures.

use std::path::Path;

use serde::Serialize;

use crate::lineup::{
    CORE, CORE_RENEW, HOT_CORE_SEPARATE, HOT_CORE_SHARED, HOT_NAIVE, HOT_RSLOCK, MACRO_PLAIN,
    MACRO_RENEW, PERMITS_FEW_WAITING, PERMITS_FLOOR, PERMITS_MANY_WAITING, PERMITS_SEPARATE,
    PERMITS_SHARDED, PERMITS_SHARED, RSLOCK, RW_FLOOD, SEMAPHORE,
};
use crate::machine::Machine;
use crate::scenarios::{
    loss, renewal, s10_fenced, s1_latency, s2_throughput, s3_hot, s4_redlock, s5_overrun,
    s6_holders, s6_permits, s7_hold, s7_rwlock, s8_multi, s9_cluster,
};
use crate::stats::{ratio, show_ratio, Spread};

#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    pub seconds_per_run: f64,
    pub repetitions: usize,
    pub smoke: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub settings: RunSettings,
    pub s1: Option<s1_latency::Table>,
    pub s2: Option<s2_throughput::Table>,
    pub s3: Option<s3_hot::Table>,
    pub s4: Option<s4_redlock::Table>,
    pub s5: Option<s5_overrun::Table>,
    pub s6: Option<s6_permits::Table>,
    pub s6_holders: Option<s6_holders::Table>,
    pub s7: Option<s7_rwlock::Table>,
    pub s8: Option<s8_multi::Table>,
    pub s9: Option<s9_cluster::Table>,
    pub s10: Option<s10_fenced::Table>,
    pub renewal: Option<renewal::Table>,
    pub loss: Option<loss::Table>,
    pub targets: Vec<Target>,
    /// Runs that measured nothing, or failed operations.
    pub problems: Vec<String>,
}

/// One of the targets, and whether this run met it (`None`: not measured).
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub scenario: &'static str,
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

impl Report {
    pub fn new(machine: Machine, settings: RunSettings) -> Report {
        Report {
            machine,
            settings,
            s1: None,
            s2: None,
            s3: None,
            s4: None,
            s5: None,
            s6: None,
            s6_holders: None,
            s7: None,
            s8: None,
            s9: None,
            s10: None,
            renewal: None,
            loss: None,
            targets: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Notes failed operations and contenders that measured nothing.
    pub fn check(
        &mut self,
        scenario: &str,
        rows: impl IntoIterator<Item = (String, u64, Option<String>, bool)>,
    ) {
        for (contender, failures, first_error, measured) in rows {
            if !measured {
                self.problems.push(format!(
                    "{scenario}: {contender} measured nothing{}",
                    first_error
                        .as_ref()
                        .map(|e| format!(" (first error: {e})"))
                        .unwrap_or_default()
                ));
            } else if failures > 0 {
                self.problems.push(format!(
                    "{scenario}: {contender}: {failures} failed operations (first: {})",
                    first_error.unwrap_or_default()
                ));
            }
        }
    }

    /// Whether some contender measured nothing (the run is broken, not just noisy).
    pub fn broken(&self) -> bool {
        self.problems.iter().any(|p| p.contains("measured nothing"))
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&self.machine.markdown());
        out.push_str(&format!(
            "- {} s per contender per run, {} repetitions; cells are `median (min–max)` over the repetitions\n",
            self.settings.seconds_per_run, self.settings.repetitions
        ));
        for (title, table) in self.sections() {
            out.push_str(&format!("\n### {title}\n\n{table}"));
        }
        if !self.targets.is_empty() {
            out.push_str(&format!(
                "\n### Targets\n\n{}",
                targets_markdown(&self.targets)
            ));
        }
        if !self.problems.is_empty() {
            out.push_str("\n### Problems\n\n");
            for problem in &self.problems {
                out.push_str(&format!("- {problem}\n"));
            }
        }
        out
    }

    /// Each measured scenario's heading and table.
    pub fn sections(&self) -> Vec<(String, String)> {
        let mut sections = Vec::new();
        if let Some(t) = &self.s1 {
            sections.push((s1_title(), t.markdown()));
        }
        if let Some(t) = &self.s2 {
            sections.push((s2_title(t), t.markdown()));
        }
        if let Some(t) = &self.s3 {
            sections.push((s3_title(), t.markdown()));
        }
        if let Some(t) = &self.s4 {
            sections.push((s4_title(), t.markdown()));
        }
        if let Some(t) = &self.s5 {
            sections.push((s5_title(t), t.markdown()));
        }
        if let Some(t) = &self.s6 {
            sections.push((s6_title(), t.markdown()));
        }
        if let Some(t) = &self.s6_holders {
            sections.push((s6_holders_title(), t.markdown()));
        }
        if let Some(t) = &self.s7 {
            sections.push((s7_title(), t.markdown()));
        }
        if let Some(t) = &self.s8 {
            sections.push((s8_title(), t.markdown()));
        }
        if let Some(t) = &self.s9 {
            sections.push((s9_cluster::title(), t.markdown()));
        }
        if let Some(t) = &self.s10 {
            sections.push((s10_fenced::title(), t.markdown()));
        }
        if let Some(t) = &self.renewal {
            sections.push((renewal_title(t), t.markdown()));
        }
        if let Some(t) = &self.loss {
            sections.push((loss::title(t), t.markdown()));
        }
        sections
    }

    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|err| format!("cannot encode the report: {err}"))?;
        write(path, &text)
    }

    pub fn write_markdown(&self, path: &Path) -> Result<(), String> {
        write(path, &self.markdown())
    }

    /// Compares the figures with the targets.
    pub fn evaluate_targets(&mut self) {
        let mut targets = Vec::new();
        if let Some(s1) = &self.s1 {
            let row = |label: &str| s1.rows.iter().find(|r| r.contender == label);
            let vs_raw = |label: &str| row(label).map_or(Spread::of([]), |r| r.p50_vs_raw);
            let (core, rslock) = (vs_raw(CORE), vs_raw(RSLOCK));
            targets.push(target(
                "S1",
                "lock-core p50 within 1.05x of raw",
                core.show_ratio(),
                core.median.is_finite().then_some(core.median <= 1.05),
            ));
            targets.push(target(
                "S1",
                "lock-core p50 at most rslock's",
                format!(
                    "{} vs {} of raw",
                    show_ratio(core.median),
                    show_ratio(rslock.median)
                ),
                (core.median.is_finite() && rslock.median.is_finite())
                    .then_some(core.median <= rslock.median),
            ));
            let semaphore = ratio(vs_raw(SEMAPHORE).median, vs_raw(CORE).median);
            targets.push(target(
                "S1",
                &format!("{SEMAPHORE} p50 ≤ 1.10x {CORE}'s"),
                show_ratio(semaphore),
                semaphore.is_finite().then_some(semaphore <= 1.10),
            ));
            for (macro_label, by_hand) in [(MACRO_RENEW, CORE_RENEW), (MACRO_PLAIN, CORE)] {
                let r = ratio(vs_raw(macro_label).median, vs_raw(by_hand).median);
                targets.push(target(
                    "S1",
                    &format!("{macro_label} p50 vs {by_hand} (no measurable difference)"),
                    show_ratio(r),
                    None,
                ));
            }
        }
        if let Some(s2) = &self.s2 {
            let vs_raw = |label: &str| {
                s2.rows
                    .iter()
                    .find(|r| r.contender == label)
                    .map_or(Spread::of([]), |r| r.vs_raw)
            };
            let core = vs_raw(CORE);
            targets.push(target(
                "S2",
                "lock-core at least 0.9x of raw",
                format!(
                    "{} (rslock {})",
                    core.show_ratio(),
                    vs_raw(RSLOCK).show_ratio()
                ),
                core.median.is_finite().then_some(core.median >= 0.9),
            ));
            let s2_row = |label: &str| s2.rows.iter().find(|r| r.contender == label);
            if let (Some(sem), Some(lock)) = (s2_row(SEMAPHORE), s2_row(CORE)) {
                let v = sem.vs_raw.median;
                targets.push(target(
                    "S2",
                    &format!("{SEMAPHORE} at least 0.85x of raw"),
                    sem.vs_raw.show_ratio(),
                    v.is_finite().then_some(v >= 0.85),
                ));
                let calls = sem.redis_calls_per_cycle.median;
                targets.push(target(
                    "S2",
                    &format!(
                        "{SEMAPHORE}: uncontended cycle ≤ 6 Redis calls (scripts' calls included)"
                    ),
                    format!(
                        "{calls:.2} (lock: {:.2})",
                        lock.redis_calls_per_cycle.median
                    ),
                    calls.is_finite().then_some(calls <= 6.0),
                ));
                let cpu = ratio(
                    sem.redis_cpu_us_per_cycle.median,
                    lock.redis_cpu_us_per_cycle.median,
                );
                targets.push(target(
                    "S2",
                    &format!("{SEMAPHORE}: Redis CPU per cycle ≤ 1.5x the lock's"),
                    format!(
                        "{} ({:.1} vs {:.1} µs)",
                        show_ratio(cpu),
                        sem.redis_cpu_us_per_cycle.median,
                        lock.redis_cpu_us_per_cycle.median
                    ),
                    cpu.is_finite().then_some(cpu <= 1.5),
                ));
            }
            for (macro_label, by_hand) in [(MACRO_RENEW, CORE_RENEW), (MACRO_PLAIN, CORE)] {
                let r = ratio(vs_raw(macro_label).median, vs_raw(by_hand).median);
                targets.push(target(
                    "S2",
                    &format!("{macro_label} cycles/s vs {by_hand} (no measurable difference)"),
                    show_ratio(r),
                    None,
                ));
            }
        }
        if let Some(s3) = &self.s3 {
            for label in [HOT_CORE_SHARED, HOT_CORE_SEPARATE] {
                let rows: Vec<_> = s3.rows.iter().filter(|r| r.contender == label).collect();
                if rows.is_empty() {
                    continue;
                }
                let each = |f: &dyn Fn(&s3_hot::Row) -> f64, digits: usize| {
                    rows.iter()
                        .map(|r| format!("N={}: {:.digits$}", r.contenders, f(r)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let all = |f: &dyn Fn(&s3_hot::Row) -> f64, ok: &dyn Fn(f64) -> bool| {
                    let values: Vec<f64> = rows.iter().map(|r| f(r)).collect();
                    values
                        .iter()
                        .all(|v| v.is_finite())
                        .then(|| values.iter().all(|v| ok(*v)))
                };
                let gap = |r: &s3_hot::Row| r.handoff_p50_us.median;
                let fair = |r: &s3_hot::Row| r.jain.median;
                let calls = |r: &s3_hot::Row| r.redis_calls_per_acquisition.median;
                targets.push(target(
                    "S3",
                    &format!("{label}: hand-off gap p50 ≤ 250 µs"),
                    each(&gap, 0),
                    all(&gap, &|v| v <= 250.0),
                ));
                targets.push(target(
                    "S3",
                    &format!("{label}: Jain fairness ≥ 0.95"),
                    each(&fair, 3),
                    all(&fair, &|v| v >= 0.95),
                ));
                targets.push(target(
                    "S3",
                    &format!("{label}: Redis calls per acquisition ≤ 5, flat from 2 to 64"),
                    each(&calls, 2),
                    all(&calls, &|v| v <= 5.0),
                ));
            }
            for label in [HOT_NAIVE, HOT_RSLOCK] {
                let shares: Vec<String> = s3
                    .rows
                    .iter()
                    .filter(|r| r.contender == label)
                    .map(|r| format!("N={}: {:.2}", r.contenders, r.self_reacquire.median))
                    .collect();
                if !shares.is_empty() {
                    targets.push(target(
                        "S3",
                        &format!("{label}: barging share (shown beside)"),
                        shares.join(", "),
                        None,
                    ));
                }
            }
        }
        if let Some(s4) = &self.s4 {
            targets.extend(s4_targets(s4));
        }
        if let Some(s5) = &self.s5 {
            for row in &s5.rows {
                if row.contender == CORE_RENEW || row.contender == CORE {
                    let (goal, met) = if row.renews {
                        (
                            "with auto-renewal no two holders overlap",
                            row.overlapping_holds.max == 0.0,
                        )
                    } else {
                        (
                            "without renewal every overrun is told",
                            row.overruns_never_told.max == 0.0,
                        )
                    };
                    targets.push(target(
                        "S5",
                        &format!("{}: {goal}", row.contender),
                        format!(
                            "{} overlapping holds, {} overruns never told",
                            row.overlapping_holds.show(0),
                            row.overruns_never_told.show(0)
                        ),
                        Some(met),
                    ));
                }
            }
        }
        if let Some(s6) = &self.s6 {
            for row in s6
                .rows
                .iter()
                .filter(|r| r.contender == PERMITS_SHARED || r.contender == PERMITS_SEPARATE)
            {
                targets.push(target(
                    "S6",
                    &format!(
                        "{}: never more holders than its {} permits",
                        row.contender, row.capacity
                    ),
                    format!("peak {}", row.peak_holders.show(0)),
                    row.peak_holders
                        .max
                        .is_finite()
                        .then_some(row.peak_holders.max <= row.capacity as f64),
                ));
            }
        }
        if let Some(s6) = &self.s6 {
            let row = |label: &str| s6.rows.iter().find(|r| r.contender == label);
            for label in [PERMITS_SHARED, PERMITS_SEPARATE] {
                let Some(found) = row(label) else { continue };
                let occupancy = found.occupancy.median;
                targets.push(target(
                    "S6",
                    &format!("{label}: occupancy ≥ 0.70"),
                    format!(
                        "{:.2} ({PERMITS_SHARDED}: {}; {PERMITS_FLOOR}: {})",
                        occupancy,
                        row(PERMITS_SHARDED).map_or("–".into(), |r| r.occupancy.show(2)),
                        row(PERMITS_FLOOR).map_or("–".into(), |r| r.occupancy.show(2))
                    ),
                    occupancy.is_finite().then_some(occupancy >= 0.70),
                ));
                let gap = found.handoff_p50_us.median;
                targets.push(target(
                    "S6",
                    &format!("{label}: hand-off p50 ≤ 600 µs"),
                    format!("{gap:.0}"),
                    gap.is_finite().then_some(gap <= 600.0),
                ));
            }
            let calls: Vec<(usize, f64)> =
                [PERMITS_FEW_WAITING, PERMITS_SHARED, PERMITS_MANY_WAITING]
                    .iter()
                    .filter_map(|label| row(label))
                    .map(|r| (r.tasks - r.capacity, r.redis_calls_per_acquisition.median))
                    .collect();
            if !calls.is_empty() {
                let all_finite = calls.iter().all(|(_, c)| c.is_finite());
                targets.push(target(
                    "S6",
                    "semaphore, 1 locker: ≤ 10 Redis calls per acquisition, 8 to 64 waiting",
                    calls
                        .iter()
                        .map(|(w, c)| format!("{w} waiting: {c:.1}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    all_finite.then(|| calls.iter().all(|(_, c)| *c <= 10.0)),
                ));
            }
        }
        if let Some(t) = &self.s6_holders {
            for (what, spread) in [
                ("p50", t.spread_of(|r| r.p50_us.median)),
                (
                    "Redis CPU per cycle",
                    t.spread_of(|r| r.redis_cpu_us_per_cycle.median),
                ),
                (
                    "Redis calls per cycle",
                    t.spread_of(|r| r.redis_calls_per_cycle.median),
                ),
            ] {
                targets.push(target(
                    "S6",
                    &format!("semaphore try + release with 1, 100, 10,000 holders: {what} flat within 1.5x"),
                    format!("largest / smallest {}", show_ratio(spread)),
                    spread.is_finite().then_some(spread <= 1.5),
                ));
            }
        }
        if let Some(s7) = &self.s7 {
            targets.extend(s7_targets(s7));
        }
        if let Some(s8) = &self.s8 {
            targets.extend(s8_targets(s8));
        }
        self.targets = targets;
    }
}

/// S7's targets: the semaphore's S6 targets (hand-off, calls per acquisition) for the
/// read-write lock, and its exclusion.
fn s7_targets(s7: &s7_rwlock::Table) -> Vec<Target> {
    let mut targets = Vec::new();
    for row in &s7.rows {
        if row.writer {
            targets.push(target(
                "S7",
                &format!("{}: no reader holds while the writer does", row.contender),
                format!("{} overlapping read holds", row.overlaps),
                Some(row.overlaps == 0),
            ));
            let gap = row.writer_handoff_p50_us.median;
            targets.push(target(
                "S7",
                &format!(
                    "{}: writer hand-off p50 ≤ 600 µs (S6's target)",
                    row.contender
                ),
                format!(
                    "{gap:.0} (readers back after it: {:.0})",
                    row.readers_back_p50_us.median
                ),
                gap.is_finite().then_some(gap <= 600.0),
            ));
        }
        let calls = row.redis_calls_per_acquisition.median;
        targets.push(target(
            "S7",
            &format!(
                "{}: ≤ 10 Redis calls per acquisition (S6's target)",
                row.contender
            ),
            format!("{calls:.1}"),
            calls.is_finite().then_some(calls <= 10.0),
        ));
    }
    if let Some(flood) = s7.rows.iter().find(|r| r.contender == RW_FLOOD) {
        targets.push(target(
            "S7",
            &format!("{RW_FLOOD}: read wait p50 (shown)"),
            format!("{:.0} µs", flood.read_wait_p50_us.median),
            None,
        ));
    }
    targets
}

/// S8's targets: `lock_all` of N names costs at most N plain locks taken in order, in
/// latency and in Redis calls.
fn s8_targets(s8: &s8_multi::Table) -> Vec<Target> {
    let mut targets = Vec::new();
    for n in s8_multi::SIZES {
        let (Some(all), Some(plain)) = (
            s8.row(s8_multi::Way::Together, n),
            s8.row(s8_multi::Way::InOrder, n),
        ) else {
            continue;
        };
        let vs = all.p50_vs_in_order.median;
        targets.push(target(
            "S8",
            &format!("lock_all({n} names): cycle p50 ≤ {n} plain locks in key order"),
            format!(
                "{} ({:.1} vs {:.1} µs; per name {:.1} vs {:.1})",
                all.p50_vs_in_order.show_ratio(),
                all.p50_us.median,
                plain.p50_us.median,
                all.p50_us_per_name.median,
                plain.p50_us_per_name.median
            ),
            vs.is_finite().then_some(vs <= 1.0),
        ));
        let (a, p) = (
            all.redis_calls_per_cycle.median,
            plain.redis_calls_per_cycle.median,
        );
        targets.push(target(
            "S8",
            &format!("lock_all({n} names): Redis calls per cycle ≤ {n} plain locks'"),
            format!(
                "{a:.2} vs {p:.2} ({:.2} vs {:.2} per name)",
                all.redis_calls_per_name.median, plain.redis_calls_per_name.median
            ),
            (a.is_finite() && p.is_finite()).then_some(a <= p),
        ));
        let per_name = all.redis_calls_per_name.median;
        targets.push(target(
            "S8",
            &format!("lock_all({n} names): at most 4 Redis calls per name"),
            format!(
                "{per_name:.2} per name ({a:.2} per cycle; Redis exec {:.1} µs per cycle)",
                all.redis_exec_us_per_cycle.median
            ),
            per_name.is_finite().then_some(per_name <= 4.0),
        ));
    }
    targets
}

/// S4's targets: lock-core's Redlock rows within 1.5x of its 1-Redis p50. Only Redlock
/// rows: a Cluster's or a Sentinel's `nodes` count servers that do not vote, and their
/// rows are measured, not held to the Redlock target.
fn s4_targets(s4: &s4_redlock::Table) -> Vec<Target> {
    s4.rows
        .iter()
        .filter(|r| r.redlock && r.contender.starts_with(CORE))
        .map(|row| {
            target(
                "S4",
                &format!("lock-core Redlock-{} p50 within 1.5x of 1 Redis", row.nodes),
                row.p50_vs_single.show_ratio(),
                row.p50_vs_single
                    .median
                    .is_finite()
                    .then_some(row.p50_vs_single.median <= 1.5),
            )
        })
        .collect()
}

fn target(scenario: &'static str, goal: &str, measured: String, met: Option<bool>) -> Target {
    Target {
        scenario,
        target: goal.to_owned(),
        measured,
        met,
    }
}

pub fn targets_markdown(targets: &[Target]) -> String {
    let mut out = String::from("| scenario | target | measured | met |\n|---|---|---|---|\n");
    for t in targets {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {met} |\n",
            t.scenario, t.target, t.measured
        ));
    }
    out
}

pub fn s1_title() -> String {
    "S1: uncontended latency (one task, lock + release, empty critical section)".into()
}

pub fn s2_title(t: &s2_throughput::Table) -> String {
    format!(
        "S2: uncontended throughput ({} tasks of one process, distinct names)",
        t.tasks
    )
}

pub fn s3_title() -> String {
    "S3: hot name (N contenders on one name, each holding it ~1 ms)".into()
}

pub fn s4_title() -> String {
    "S4: Redlock (S1 and S2 on 1 Redis, and on 3 and 5 local masters)".into()
}

pub fn s5_title(t: &s5_overrun::Table) -> String {
    format!(
        "S5: overrun safety (5 contenders, TTL 100 ms, holds 0–150 ms, {:.1} s per run)",
        t.seconds_per_run
    )
}

pub fn s6_title() -> String {
    format!(
        "S6: semaphore hand-off ({} tasks on {} permits of one name, each holding ~1 ms)",
        s6_permits::TASKS,
        s6_permits::PERMITS
    )
}

pub fn s6_holders_title() -> String {
    "S6, cost with many holders (one task: try + release of one permit while 0, 99 and 9,999 others are held)".into()
}

pub fn s7_title() -> String {
    format!(
        "S7: read-write lock ({} readers on one name, each holding ~1 ms; alone, and with a writer asking every {} ms)",
        s7_rwlock::READERS,
        s7_hold::WRITER_EVERY.as_millis()
    )
}

pub fn s8_title() -> String {
    "S8: multi-lock cost per name (one task: lock_all of N free names + release, against N plain locks taken in key order + release)".into()
}

pub fn renewal_title(t: &renewal::Table) -> String {
    format!(
        "Renewal cost ({} leases, TTL {} ms, held {:.1} s; a tick is TTL/3)",
        t.leases, t.ttl_ms, t.hold_s
    )
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s4_row(contender: &str, nodes: usize, redlock: bool, vs_single: f64) -> s4_redlock::Row {
        let one = Spread::of([1.0]);
        s4_redlock::Row {
            contender: contender.to_owned(),
            nodes,
            redlock,
            s1_p50_us: one,
            s1_p99_us: one,
            s1_cycles_per_s: one,
            s2_cycles_per_s: one,
            p50_vs_single: Spread::of([vs_single]),
            s2_vs_single: one,
            failures: 0,
            first_error: None,
        }
    }

    #[test]
    fn s4_redlock_target_is_for_redlock_rows_only() {
        let table = s4_redlock::Table {
            tasks: 64,
            rows: vec![
                s4_row(&format!("{CORE}, 1 Redis"), 1, false, 1.0),
                s4_row(&format!("{CORE}, Redlock-3"), 3, true, 1.4),
                s4_row(&format!("{CORE}, Redlock-5"), 5, true, 1.8),
                s4_row(
                    &format!("{CORE}, cluster-3+1, replica check"),
                    6,
                    false,
                    2.0,
                ),
                s4_row(&format!("{CORE}, sentinel 1+1, check off"), 2, false, 1.1),
                s4_row(&format!("{RSLOCK}, Redlock-3"), 3, true, 1.3),
            ],
        };
        let targets = s4_targets(&table);
        let goals: Vec<(&str, Option<bool>)> =
            targets.iter().map(|t| (t.target.as_str(), t.met)).collect();
        assert_eq!(
            goals,
            vec![
                ("lock-core Redlock-3 p50 within 1.5x of 1 Redis", Some(true)),
                (
                    "lock-core Redlock-5 p50 within 1.5x of 1 Redis",
                    Some(false)
                ),
            ]
        );
    }
}
