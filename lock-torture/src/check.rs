//! The checker: merges the logs of a run and verifies what the library promises.
//!
//! # What is checked
//!
//! Every rule below is judged from client stamps on the shared monotonic clock, using only
//! what each client was told at the time (the validity its lease reported, the answers it
//! got). Each broken rule is a [`Violation`]:
//!
//! - `overlap`: two acquisitions of one lock were both trusted at the same moment. An
//!   acquisition is trusted from the moment its lease was handed over until the first of:
//!   its end of validity (as the lease reported it at grant, or after a successful extension
//!   or renewal), the holder learning it was lost, or the release being sent.
//! - `permits`: more than N acquisitions of one semaphore's permits were trusted at the
//!   same moment; `write-overlap`: a read-write lock's write side was trusted at the same
//!   moment as another of its sides ([`permits`]).
//! - `capacity`: a semaphore request asking for another number of permits than a permit
//!   trusted at that moment was granted, or, asked over the whole trusted interval of such
//!   a permit, was refused other than with `CapacityMismatch` naming its number
//!   ([`capacity`]). Permits and read-write sides have no
//!   fencing tokens: `fence-order` and `stale-write` judge locks only, and their holders'
//!   `is_lost()` looks before their work ([`Event::Work`]) stand for the lock's writes.
//! - `fence-order`: fencing tokens do not follow real time: an acquisition that began after
//!   another was granted drew a token that is not larger, or two grants share a token.
//! - `stale-write`: the fenced store accepted a write although a write with a larger token
//!   had been accepted before it was sent, or the store's own order of accepted tokens is
//!   not strictly increasing, or a client and the store disagree about a write.
//! - `silent-release`: a release sent after the lease's validity ended returned `true`
//!   without the lease having reported itself lost (`is_lost()`), or a release returned
//!   `true` although another client had been granted the lock (or, for a read-write lock,
//!   a side that excludes this one) since this one got it.
//! - `silent-loss`: a holder wrote (or did its work) after its lease's validity ended
//!   while `is_lost()` still said false.
//! - `acquired-while-down`: a single server granted a lock while it was dead.
//! - `acquired-over-foreign-value`: a lock was granted while a foreign hash sat on its key.
//! - `validity-claim`: a lease reported more validity than the TTL it asked for, counted
//!   from the start of its successful attempt.
//! - `stamp-order`: a lease's successful attempt is stamped before its call began or after
//!   it was granted (the library's `acquired_at`, or the harness's clock, is wrong).
//! - `wait-overrun` / `late-grant`: a request returned an error, or a lease, later than its
//!   wait (or, for a request that does not wait, the command timeout) plus a scheduling
//!   allowance after it began ([`deadline`]).
//! - `revived-lease`: a holder that had been told its lease was lost was later told that it
//!   was valid after all: an extension or renewal succeeded, or `is_lost()` said false
//!   ([`revival`]).
//! - `nested-on-lost`: a nested `#[redis_locked]` call began after the enclosing lease's
//!   trust had ended, and its body ran anyway ([`nested`]).
//! - `spawned-beside-holder`: a sibling spawned from inside a `#[redis_locked]` body (a
//!   task of its own, which does not inherit the lease) ran its body while the enclosing
//!   lease was still trusted ([`nested`]).
//! - `leftover-after-error`: an acquire that failed with `WrongType` left its value on a
//!   node ([`leftover`]).
//! - `liveness`: a request was left waiting while what it waits for was free, longer than
//!   the claim window allows, or timed out while it was free for most of its wait
//!   ([`liveness`]).
//! - `starvation`: a client waiting for a lock without interruption was passed over by
//!   more grants to requests made after it began waiting than a fair queue allows
//!   ([`starvation::PASSED_OVER_PER_CLIENT`] per client of the run), and granted nothing
//!   meanwhile ([`starvation`]).
//! - `weight`, `revoked`, `weight-starved`: permits taken by weight while the capacity is
//!   changed in use: never more weight trusted than the capacity in force at a grant, no
//!   holder's permit taken by a lowering, no large request passed over more than a fair
//!   queue allows ([`weights`]).
//! - `downgrade`: a write lease stepped down to reader met no other writer, and no reader
//!   before the downgrade (`check/downgrade.rs`).
//! - `latch-once`, `latch-rearm`, `latch-early`, `latch-late`, `latch-expired`,
//!   `latch-wrong-round`: countdown latches' rounds open once, at their count, are not
//!   replaced while counting, and wake their own waiters, all of them, in time, or tell
//!   them they expired ([`latch`]).
//! - `ghost-grant`: after a request was cancelled, the lock's key carried its client's
//!   never-granted value while that client had no live request for it ([`ghost`]).
//! - `sibling-overlap`: two concurrent sibling calls of one key inside a `#[redis_locked]`
//!   body ran their bodies at once ([`nested`]).
//! - `unseen-grant`: on a replicated deployment, a lease that no server's `MONITOR` stream
//!   showed being granted: its origin is unknown, so the failover rules cannot judge it
//!   ([`failover`]).
//! - `leader-overlap`, `leader-term`, `term-order`, `leader-late-action`,
//!   `observer-order`: an election's leaderships, judged as locks whose fencing token is
//!   the term, and its observers (`check/election.rs`).
//! - `vacancy-unseen`: a leader alone in its election stopped renewing (a paused client)
//!   and its partner's observer was not told within the lease and an allowance
//!   ([`vacancy`]).
//! - `tick-once`, `tick-missed`: scheduled runs, one per tick, and no tick missed while
//!   nothing fails ([`schedule`]).
//! - `deadlock-real`, `deadlock-chain-real`, `deadlock-persists`: every reported deadlock
//!   was a cycle of waiters in the history, every chain refused as too long was longer
//!   than the library's limit, and no cycle of waiters, of any length, outlived the
//!   detection bound (`check/deadlock.rs`).
//! - `busy-delayed`: while a replica was stopped, a request that did not wait was answered
//!   busy later than [`replica_stall::BUSY_BOUND`], or failed with a connection error: an
//!   answer that needs no replica waited for one ([`replica_stall`]).
//! - `unexplained-error`: an acquire failed with a Redis error reply (or an error the
//!   harness cannot classify) while no fault was under way, nor had ended in the last
//!   five seconds ([`errors`]).
//! - `client-crashed`: a client process exited on its own with a failure (a panic in the
//!   harness or the library); its history ends early, so the run fails whatever the other
//!   rules made of it (judged in `run.rs`, from the processes' exit statuses).
//!
//! # What a restart is allowed to break
//!
//! A server killed and restarted empty forgets its locks and its fencing counters. If it
//! comes back while a holder still trusts its lease, a second client can take the same lock:
//! mutual exclusion is lost, and no client-side library can prevent it. Such overlaps (the
//! earlier holder's attempt began before the kill, the later one was granted after it, and
//! the server was back before the earlier holder's validity ended) are counted as
//! `expected_restart_overlaps`, not as violations. With the delayed-restart rule (stay down
//! for at least one TTL) no such overlap can happen, and none is excused: any overlap is a
//! violation. Tokens drawn after a restart start again from the server's clock, above the
//! ones drawn before it; a token that still went backward is counted in `fence_resets`, and
//! the fenced store would reject that holder's writes until the tokens pass its old value
//! (safe, but a loss of liveness).
//!
//! # Where
//!
//! This file holds the [`History`], the acquisitions it is merged into, and [`check`], which
//! runs every rule. The [`Report`] is in `check/report.rs`; multi-locks are split per name
//! in `check/multi.rs`; `overlap`, `silent-release` and the rules judged on each grant
//! alone are in `check/overlap.rs`, `check/releases.rs` and `check/grant.rs`; the paused
//! holders' counts in `check/paused.rs`; every other rule in the file named after it.

mod capacity;
mod deadline;
mod deadlock;
mod downgrade;
mod election;
mod errors;
mod failover;
mod fences;
mod ghost;
mod grant;
pub mod latch;
mod leftover;
pub mod liveness;
mod multi;
mod nested;
mod overlap;
mod paused;
mod permits;
mod releases;
mod replica_stall;
mod report;
mod requests;
mod revival;
pub mod schedule;
pub mod starvation;
pub mod steal;
mod vacancy;
pub mod weights;
mod writes;

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::clock::Nanos;
use crate::event::{Acquired, Event, FailKind, ReleaseOutcome, WriteOutcome};
use failover::Replication;
use fences::{check_fences, LOCK_FENCES};
use grant::check_grant;
use multi::expand_multi;
use overlap::check_overlaps;
use paused::count_paused_holders;
use releases::check_releases;
pub use report::{Report, Violation};
use writes::{check_writes, WriteRow};

/// Everything a run produced.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Events of every client log and of the orchestrator, in any order.
    pub events: Vec<Event>,
    /// Per lock name, the writes the fenced store accepted, in its order: `(token, writer)`.
    pub store: BTreeMap<String, Vec<(u64, String)>>,
}

/// One acquisition with everything that followed it.
#[derive(Debug, Clone)]
struct Acq {
    a: Acquired,
    /// Latest end of validity the holder was told (grant, extensions, renewals).
    claim_end: Nanos,
    lost_at: Option<Nanos>,
    release: Option<(Nanos, ReleaseOutcome, bool)>,
    /// When the holder logged that it was about to release (a killed client may have sent
    /// its release without living to log the answer).
    releasing: Option<Nanos>,
    /// `--mode steal`: when its key was taken, and by when its holder must be told.
    stolen: Option<steal::Stolen>,
    /// One part of a read-write lease that was downgraded: its write part, up to the
    /// downgrade, or its read part, after it (`check/downgrade.rs`).
    downgraded: bool,
}

impl Acq {
    /// When the holder stopped trusting its lease.
    fn trusted_until(&self) -> Nanos {
        let mut end = self.claim_end;
        if let Some(t) = self.lost_at {
            end = end.min(t);
        }
        if let Some((t, _, _)) = self.release {
            end = end.min(t);
        }
        if let Some(t) = self.releasing {
            end = end.min(t);
        }
        end
    }
}

/// A server outage: killed at `start`, answering again at `end`.
#[derive(Debug, Clone, Copy)]
struct Down {
    start: Nanos,
    end: Nanos,
}

/// Checks a history. `nodes` is the number of lock servers (1, or several for Redlock).
pub fn check(history: &History, nodes: usize) -> Report {
    let expanded = expand_multi(&history.events);
    let history = &History {
        events: expanded,
        store: history.store.clone(),
    };
    let mut report = Report::default();
    let mut acqs: Vec<Acq> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut downs = Vec::new();
    let mut foreign: Vec<(String, Nanos, Nanos)> = Vec::new();
    let mut last_fault_end: Option<Nanos> = None;
    let mut pauses: Vec<(u32, Nanos, Nanos)> = Vec::new();

    for event in &history.events {
        if let Event::Acquired(a) = event {
            index.insert(a.id.clone(), acqs.len());
            acqs.push(Acq {
                claim_end: a.valid_until,
                a: a.clone(),
                lost_at: None,
                release: None,
                releasing: None,
                stolen: None,
                downgraded: false,
            });
        }
    }
    let mut writes = Vec::new();
    let mut works = Vec::new();
    for event in &history.events {
        match event {
            Event::Extended {
                id,
                valid_until: Some(v),
                ..
            }
            | Event::Observed {
                id, valid_until: v, ..
            } => {
                if let Some(&i) = index.get(id) {
                    acqs[i].claim_end = acqs[i].claim_end.max(*v);
                }
            }
            Event::LostDetected { id, t, .. } => {
                if let Some(&i) = index.get(id) {
                    let at = acqs[i].lost_at.get_or_insert(*t);
                    *at = (*at).min(*t);
                }
            }
            Event::Releasing { id, t } => {
                if let Some(&i) = index.get(id) {
                    acqs[i].releasing = Some(*t);
                }
            }
            Event::Release {
                id,
                t_sent,
                outcome,
                lost_reported,
                ..
            } => {
                match outcome {
                    ReleaseOutcome::Released => report.released += 1,
                    ReleaseOutcome::NotHeld => report.release_not_held += 1,
                    ReleaseOutcome::Error => report.release_errors += 1,
                    ReleaseOutcome::Dropped => report.releases_dropped += 1,
                    ReleaseOutcome::Implicit => {}
                }
                if let Some(&i) = index.get(id) {
                    acqs[i].release = Some((*t_sent, *outcome, *lost_reported));
                }
            }
            Event::Work {
                id,
                name,
                t,
                lost_reported,
            } => works.push(WriteRow {
                id: id.clone(),
                name: name.clone(),
                fence: 0,
                sent: *t,
                reply: *t,
                outcome: WriteOutcome::Error,
                lost_reported: *lost_reported,
            }),
            Event::Write {
                id,
                name,
                fence,
                t_sent,
                t_reply,
                outcome,
                lost_reported,
            } => writes.push(WriteRow {
                id: id.clone(),
                name: name.clone(),
                fence: *fence,
                sent: *t_sent,
                reply: *t_reply,
                outcome: *outcome,
                lost_reported: *lost_reported,
            }),
            Event::AcquireFailed { kind, .. } => {
                if *kind == FailKind::Contention {
                    report.contention += 1;
                } else {
                    let key = serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| format!("{kind:?}"));
                    *report.acquire_errors.entry(key).or_default() += 1;
                }
            }
            Event::Fault {
                kind,
                target,
                t_start,
                t_end,
            } => {
                if let (true, Some(client)) = (
                    kind == "pause",
                    target
                        .strip_prefix("client")
                        .and_then(|c| c.parse::<u32>().ok()),
                ) {
                    pauses.push((client, *t_start, *t_end));
                }
                report.faults += 1;
                last_fault_end = Some(last_fault_end.map_or(*t_end, |t| t.max(*t_end)));
            }
            Event::Down { t_start, t_end, .. } => downs.push(Down {
                start: *t_start,
                end: *t_end,
            }),
            Event::Foreign {
                name,
                t_start,
                t_end,
            } => foreign.push((name.clone(), *t_start, *t_end)),
            Event::Start { .. }
            | Event::Acquired(_)
            | Event::Extended { .. }
            | Event::Nested { .. }
            | Event::Hiccup { .. }
            | Event::Probe { .. }
            | Event::Topology { .. }
            | Event::Failover(_)
            | Event::CancelProbe { .. }
            | Event::LeaderSeen { .. }
            | Event::RunStarted(_)
            | Event::TickDone(_)
            | Event::Waited(_)
            | Event::Granted { .. }
            | Event::Ungranted { .. }
            | Event::Steal { .. }
            | Event::CapacitySet(_)
            | Event::Downgraded(_)
            | Event::LatchArm(_)
            | Event::LatchCount(_)
            | Event::LatchWait(_) => {}
            Event::Cancelled { .. } => report.cancelled += 1,
            Event::ServerStall { .. } => report.server_stalls += 1,
        }
    }
    downs.sort_by_key(|d| d.start);
    steal::mark(&history.events, &mut acqs);
    report.acquisitions = acqs.len() as u64;
    report.lost_detected = acqs.iter().filter(|a| a.lost_at.is_some()).count() as u64;
    report.resumed = match last_fault_end {
        None => true,
        Some(end) => {
            acqs.iter().any(|a| a.a.acquired > end)
                || schedule::ran_after(&history.events, end)
                || latch::opened_after(&history.events, end)
        }
    };

    // A downgraded write lease is judged as its write part and its read part.
    let (split, pieces) = downgrade::split(&history.events, &acqs);
    report.downgrades = split.len() as u64;
    // A lock, a semaphore and a read-write lock of one name never meet.
    let mut by_name: BTreeMap<(&str, &str), Vec<&Acq>> = BTreeMap::new();
    for acq in acqs
        .iter()
        .filter(|a| !split.contains(a.a.id.as_str()))
        .chain(&pieces)
    {
        by_name
            .entry((acq.a.kind.family(), acq.a.name.as_str()))
            .or_default()
            .push(acq);
    }
    let mut reset = HashSet::new();
    let replication = Replication::new(&history.events);
    let capacities = weights::Capacities::new(&history.events);
    for ((family, name), list) in &mut by_name {
        list.sort_by_key(|a| a.a.acquired);
        match *family {
            "semaphore" if list.iter().any(|a| a.a.weight.is_some()) => {
                weights::check_weights(name, list, &capacities, &mut report);
            }
            "semaphore" => permits::check_permits(name, list, &downs, &replication, &mut report),
            "rwlock" => permits::check_rw(name, list, &downs, &replication, &mut report),
            _ => {
                // An election's leaderships are judged as locks, under its own rule names.
                let (overlap, fences) = if *family == "election" {
                    (election::OVERLAP, election::TERMS)
                } else {
                    ("overlap", LOCK_FENCES)
                };
                check_overlaps(overlap, name, list, &downs, &replication, &mut report);
                check_fences(
                    fences,
                    name,
                    list,
                    &downs,
                    &replication,
                    &mut reset,
                    &mut report,
                );
            }
        }
        // A downgraded lease's release ends its read part (its write part ended with the
        // downgrade, and the readers let in after it are no breach of it).
        list.retain(|a| !(a.downgraded && a.a.kind == crate::event::HoldKind::Write));
        check_releases(name, list, &replication, &mut report);
    }
    for acq in &acqs {
        check_grant(acq, nodes, &downs, &foreign, &mut report);
    }
    replication.check_seen(&acqs, &mut report);
    check_writes(&writes, &index, &acqs, &reset, history, &mut report);
    writes::check_work(&works, &index, &acqs, &mut report);
    count_paused_holders(&acqs, &pauses, &writes, &mut report);
    deadline::check(&history.events, &pauses, &mut report);
    revival::check(&history.events, &index, &acqs, &mut report);
    nested::check(&history.events, &index, &acqs, &downs, &mut report);
    leftover::check(&history.events, &mut report);
    nested::check_siblings(&history.events, &index, &acqs, &mut report);
    liveness::check(&history.events, &acqs, &mut report);
    starvation::check(&history.events, &mut report);
    capacity::check(&history.events, &acqs, &mut report);
    ghost::check(&history.events, &mut report);
    errors::check(&history.events, &mut report);
    election::check_observers(&history.events, &mut report);
    schedule::check(&history.events, &downs, &mut report);
    deadlock::check(&history.events, &mut report);
    replica_stall::check(&history.events, &mut report);
    vacancy::check(&history.events, &mut report);
    steal::check(&history.events, &index, &acqs, &mut report);
    weights::check(&history.events, &acqs, &mut report);
    latch::check(&history.events, &mut report);
    report
}

#[cfg(test)]
mod degraded_tests;
#[cfg(test)]
mod elect_tests;
#[cfg(test)]
mod issue43_tests;
#[cfg(test)]
mod prim_tests;
#[cfg(test)]
mod steal_tests;
#[cfg(test)]
mod tests;
