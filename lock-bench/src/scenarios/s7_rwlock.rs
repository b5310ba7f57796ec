//! S7, read-write lock: a reader flood (64 tasks of one locker loop on read leases of ONE
//! name, each holding ~1 ms), alone, and with a writer (a process of its own, as another
//! service's writer would be: see [`s7_writer`](super::s7_writer)) asking for the write
//! lease every 10 ms during the flood. Beside S6's semaphore
//! rows: how long a read takes to get in, the writer's turn (its wait, and the hand-off
//! from the last reader leaving to the writer entering), how many readers the waiting
//! writer held back and how long until readers are back in, whether a reader ever held
//! while the writer did (never: a target), and Redis calls and round trips per acquisition
//! (INFO deltas, as in S3 and S6).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::Locker;
use serde::Serialize;

use super::s7_hold::{hold_loop, Hold, TTL};
use super::s7_writer::Writer;
use super::{interleaved, Failures, Settings};
use crate::probe::Probe;
use crate::stats::{most_at_once, Samples, Spread};

/// Reading tasks in the flood.
pub const READERS: usize = 64;

/// One flood: the readers share `readers`; `writer`, when present, joins it.
pub struct Group {
    pub label: String,
    pub name: String,
    pub readers: Locker,
    pub writer: Option<WriterAt>,
}

/// The writer: a process of its own on Redis `url`, with key prefix `prefix`.
pub struct WriterAt {
    pub url: String,
    pub prefix: String,
}

/// S7 figures of one run.
#[derive(Debug, Clone, Default)]
struct Run {
    reads_per_s: f64,
    read_wait_p50_us: f64,
    read_wait_p99_us: f64,
    writes_per_s: f64,
    writer_wait_p50_us: f64,
    writer_wait_max_us: f64,
    /// From the last reader starting its release to the writer entering.
    writer_handoff_p50_us: f64,
    /// From the writer starting its release to the first reader entering.
    readers_back_p50_us: f64,
    /// Reads asked while a writer waited or held, and admitted after it left: per turn.
    readers_held_back_per_turn: f64,
    /// Read holds that overlapped a write hold (must be 0).
    overlaps: u64,
    peak_readers: usize,
    redis_calls_per_acquisition: f64,
    round_trips_per_acquisition: f64,
    redis_exec_us_per_acquisition: f64,
    failures: Failures,
}

async fn measure(group: &Group, run_for: Duration, probe: &Probe) -> Run {
    let mut failures = Failures::default();
    let warm = group.readers.rwlock(format!("{}-warm-up", group.name));
    match warm.read().ttl(TTL).await {
        Ok(lease) => {
            let _ = lease.release().await;
        }
        Err(err) => failures.record(format!("warm-up: {err}")),
    }
    let mut process = match &group.writer {
        Some(WriterAt { url, prefix }) => {
            match tokio::task::block_in_place(|| Writer::start(url, prefix, &group.name)) {
                Ok(writer) => Some(writer),
                Err(err) => {
                    failures.record(err);
                    None
                }
            }
        }
        None => None,
    };
    let holds = Arc::new(Mutex::new(Vec::with_capacity(100_000)));
    let before = probe.snapshot().await.ok();
    let started = Instant::now();
    if let Some(writer) = &mut process {
        if let Err(err) = writer.go(run_for) {
            failures.record(err);
        }
    }
    let mut tasks = Vec::with_capacity(READERS);
    for _ in 0..READERS {
        tasks.push(tokio::spawn(hold_loop(
            group.readers.clone(),
            group.name.clone(),
            false,
            started,
            run_for,
            holds.clone(),
        )));
    }
    super::join_all(tasks, &mut failures).await;
    if let Some(writer) = process {
        let (writes, writer_failures) = tokio::task::block_in_place(|| writer.finish());
        holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(writes);
        failures.merge(writer_failures);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let delta = super::calls_since(probe, before, &group.label).await;
    // The probe's own INFO request is one read of the window.
    let counts = delta.map(|d| Counts {
        calls: d.calls,
        reads: d.reads.saturating_sub(1),
        exec_us: d.exec_us,
    });
    let log = std::mem::take(&mut *holds.lock().unwrap_or_else(PoisonError::into_inner));
    summarize(&log, elapsed, counts, failures)
}

/// What the server counted over a measurement window.
#[derive(Debug, Clone, Copy)]
struct Counts {
    calls: u64,
    reads: u64,
    exec_us: f64,
}

fn summarize(log: &[Hold], elapsed: f64, counts: Option<Counts>, failures: Failures) -> Run {
    let (writes, reads): (Vec<Hold>, Vec<Hold>) = log.iter().partition(|h| h.write);
    let wait = |h: &Hold| h.entered.saturating_duration_since(h.asked).as_nanos() as u64;
    let mut read_waits = Samples::with_capacity(reads.len());
    for read in &reads {
        read_waits.push(wait(read));
    }
    let mut writer_waits = Samples::with_capacity(writes.len());
    let mut handoffs = Samples::with_capacity(writes.len());
    let mut back = Samples::with_capacity(writes.len());
    let mut held_back = 0u64;
    let mut overlaps = 0u64;
    for w in &writes {
        writer_waits.push(wait(w));
        // The last reader out before the writer came in.
        if let Some(last) = reads
            .iter()
            .map(|r| r.leaving)
            .filter(|&leaving| leaving <= w.entered && leaving >= w.asked)
            .max()
        {
            handoffs.push(w.entered.saturating_duration_since(last).as_nanos() as u64);
        }
        // The first reader in after the writer left.
        if let Some(first) = reads
            .iter()
            .map(|r| r.entered)
            .filter(|&entered| entered >= w.leaving)
            .min()
        {
            back.push(first.saturating_duration_since(w.leaving).as_nanos() as u64);
        }
        held_back += reads
            .iter()
            .filter(|r| r.asked >= w.asked && r.asked < w.leaving && r.entered >= w.leaving)
            .count() as u64;
        overlaps += reads
            .iter()
            .filter(|r| r.entered < w.leaving && w.entered < r.leaving)
            .count() as u64;
    }
    let max_wait = writes.iter().map(wait).max();
    let acquisitions = log.len().max(1) as f64;
    Run {
        reads_per_s: reads.len() as f64 / elapsed,
        read_wait_p50_us: read_waits.quantile_us(0.50),
        read_wait_p99_us: read_waits.quantile_us(0.99),
        writes_per_s: writes.len() as f64 / elapsed,
        writer_wait_p50_us: writer_waits.quantile_us(0.50),
        writer_wait_max_us: max_wait.map_or(f64::NAN, |ns| ns as f64 / 1000.0),
        writer_handoff_p50_us: handoffs.quantile_us(0.50),
        readers_back_p50_us: back.quantile_us(0.50),
        readers_held_back_per_turn: if writes.is_empty() {
            f64::NAN
        } else {
            held_back as f64 / writes.len() as f64
        },
        overlaps,
        peak_readers: peak(&reads),
        redis_calls_per_acquisition: counts.map_or(f64::NAN, |c| c.calls as f64 / acquisitions),
        round_trips_per_acquisition: counts.map_or(f64::NAN, |c| c.reads as f64 / acquisitions),
        redis_exec_us_per_acquisition: counts.map_or(f64::NAN, |c| c.exec_us / acquisitions),
        failures,
    }
}

/// The most holds in progress at once.
fn peak(holds: &[Hold]) -> usize {
    let mut entries: Vec<Instant> = holds.iter().map(|h| h.entered).collect();
    let mut leavings: Vec<Instant> = holds.iter().map(|h| h.leaving).collect();
    entries.sort_unstable();
    leavings.sort_unstable();
    most_at_once(&entries, &leavings)
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: String,
    pub readers: usize,
    pub writer: bool,
    pub reads_per_s: Spread,
    pub read_wait_p50_us: Spread,
    pub read_wait_p99_us: Spread,
    pub writes_per_s: Spread,
    pub writer_wait_p50_us: Spread,
    pub writer_wait_max_us: Spread,
    pub writer_handoff_p50_us: Spread,
    pub readers_back_p50_us: Spread,
    pub readers_held_back_per_turn: Spread,
    /// Over all repetitions.
    pub overlaps: u64,
    pub peak_readers: Spread,
    pub redis_calls_per_acquisition: Spread,
    pub round_trips_per_acquisition: Spread,
    pub redis_exec_us_per_acquisition: Spread,
    pub failures: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub rows: Vec<Row>,
}

/// S7 over `groups`, interleaved repetitions.
pub async fn run(groups: &[Group], settings: &Settings, probe: &Probe) -> Table {
    let runs = interleaved(groups.len(), settings.reps, async |i| {
        measure(&groups[i], settings.run_for, probe).await
    })
    .await;
    let rows = groups
        .iter()
        .zip(&runs)
        .map(|(group, runs)| {
            let failures = Failures::of_runs(runs.iter().map(|r| &r.failures));
            Row {
                contender: group.label.clone(),
                readers: READERS,
                writer: group.writer.is_some(),
                reads_per_s: Spread::pick(runs, |r| r.reads_per_s),
                read_wait_p50_us: Spread::pick(runs, |r| r.read_wait_p50_us),
                read_wait_p99_us: Spread::pick(runs, |r| r.read_wait_p99_us),
                writes_per_s: Spread::pick(runs, |r| r.writes_per_s),
                writer_wait_p50_us: Spread::pick(runs, |r| r.writer_wait_p50_us),
                writer_wait_max_us: Spread::pick(runs, |r| r.writer_wait_max_us),
                writer_handoff_p50_us: Spread::pick(runs, |r| r.writer_handoff_p50_us),
                readers_back_p50_us: Spread::pick(runs, |r| r.readers_back_p50_us),
                readers_held_back_per_turn: Spread::pick(runs, |r| r.readers_held_back_per_turn),
                overlaps: runs.iter().map(|r| r.overlaps).sum(),
                peak_readers: Spread::pick(runs, |r| r.peak_readers as f64),
                redis_calls_per_acquisition: Spread::pick(runs, |r| r.redis_calls_per_acquisition),
                round_trips_per_acquisition: Spread::pick(runs, |r| r.round_trips_per_acquisition),
                redis_exec_us_per_acquisition: Spread::pick(runs, |r| {
                    r.redis_exec_us_per_acquisition
                }),
                failures: failures.count,
                first_error: failures.first,
            }
        })
        .collect();
    Table { rows }
}

impl Table {
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| contender | readers | reads/s | read wait p50 µs | read wait p99 µs | peak readers | writes/s | writer wait p50 µs | writer wait max µs | writer hand-off p50 µs | readers back p50 µs | readers held back per turn | reader–writer overlaps | Redis calls/acq | round trips/acq | Redis exec µs/acq |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                row.contender,
                row.readers,
                row.reads_per_s.show(0),
                row.read_wait_p50_us.show(0),
                row.read_wait_p99_us.show(0),
                row.peak_readers.show(0),
                row.writes_per_s.show(0),
                row.writer_wait_p50_us.show(0),
                row.writer_wait_max_us.show(0),
                row.writer_handoff_p50_us.show(0),
                row.readers_back_p50_us.show(0),
                row.readers_held_back_per_turn.show(1),
                row.overlaps,
                row.redis_calls_per_acquisition.show(1),
                row.round_trips_per_acquisition.show(1),
                row.redis_exec_us_per_acquisition.show(1),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writers_turn_is_measured_from_the_last_reader_out_to_the_first_reader_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let hold = |write, asked, entered, leaving| Hold {
            write,
            asked: at(asked),
            entered: at(entered),
            leaving: at(leaving),
        };
        // Readers 0-4 and 1-5; the writer asks at 2, the last reader leaves at 5, the
        // writer holds 6-8; a reader asked at 3 (held back) enters at 9, one asked at 9
        // enters at 10.
        let log = [
            hold(false, 0, 0, 4),
            hold(false, 1, 1, 5),
            hold(true, 2, 6, 8),
            hold(false, 3, 9, 11),
            hold(false, 9, 10, 12),
        ];
        let counts = Counts {
            calls: 50,
            reads: 10,
            exec_us: 25.0,
        };
        let run = summarize(&log, 0.01, Some(counts), Failures::default());
        assert_eq!(run.reads_per_s, 400.0);
        assert_eq!(run.writes_per_s, 100.0);
        assert_eq!(run.writer_wait_p50_us, 4000.0);
        assert_eq!(run.writer_wait_max_us, 4000.0);
        assert_eq!(run.writer_handoff_p50_us, 1000.0);
        assert_eq!(run.readers_back_p50_us, 1000.0);
        assert_eq!(run.readers_held_back_per_turn, 1.0);
        assert_eq!(run.overlaps, 0);
        assert_eq!(run.peak_readers, 2);
        assert_eq!(run.redis_calls_per_acquisition, 10.0);
        assert_eq!(run.round_trips_per_acquisition, 2.0);
        assert_eq!(run.redis_exec_us_per_acquisition, 5.0);
        // A reader inside the writer's hold is an overlap.
        let bad = [hold(true, 0, 1, 5), hold(false, 0, 4, 6)];
        assert_eq!(summarize(&bad, 0.01, None, Failures::default()).overlaps, 1);
    }
}
