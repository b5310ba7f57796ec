//! `--mode steal`: rules `steal-untold` and `false-loss`, and the steal's excuse in
//! `overlap`.
//!
//! The orchestrator takes a held lock's key (a `DEL`, or a `SET` to a foreign value) and
//! logs the token it took ([`Event::Steal`]). With key tracking, lock-core promises to tell
//! the holder within 50 ms (`lost()` fires).
//!
//! - `steal-untold`: a lease whose key was taken while its holder trusted it (the steal's
//!   answer came before the lease's validity ended and before its release was sent) was
//!   not told it was lost by [`deadline`]: the steal's answer (or the hand-over, if the key
//!   was taken before the lease reached its holder) plus [`TOLD_BOUND`], plus the time the
//!   holder's process was seen not running in between (its hiccups). A holder whose trust
//!   ended by itself (validity, release) before the deadline is safe and not judged further.
//! - `false-loss`: a holder was told by push (`lost()`, or `is_lost()`) that its lease was
//!   lost while its validity had not ended ([`EARLY_MARGIN`] before the end it was told)
//!   and no steal of its token had begun. Judged only in histories whose faults are all
//!   steals: a restart, a flush or a dropped connection also legitimately end a lease early.
//!
//! The next holder granted after a steal while the robbed holder still trusts its lease is
//! an `overlap` the steal explains (`overlap/steal`), as long as the robbed holder stopped
//! trusting by its deadline; past it, the overlap is a violation too.

use std::collections::HashMap;

use super::{Acq, Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{Event, HoldKind};

/// The library's promise (50 ms) and an allowance of 50 ms for scheduling on a loaded
/// two-core machine running debug builds (the orchestrator's stamp of the steal's answer,
/// the push read by the Locker's tracking task, the holder's task woken and its log line
/// stamped); a client's own hiccups are added on top.
pub const TOLD_BOUND: Nanos = 100_000_000;

/// `false-loss`: how far before the end of validity a holder was told (the lease's own
/// timer rounds; the harness stamps its validity a little early, never late).
pub const EARLY_MARGIN: Nanos = 1_000_000;

/// When a lease's key was taken: the steal script's send and answer, and by when its
/// holder must be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stolen {
    pub(super) sent: Nanos,
    pub(super) reply: Nanos,
    pub(super) deadline: Nanos,
}

/// Figures of a steal run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StealStats {
    /// Keys taken.
    pub steals: u64,
    /// Of those, the keys of leases trusted at the time (judged by `steal-untold`).
    pub judged: u64,
    /// Of those, the holders told by their deadline.
    pub told: u64,
    /// Of those judged, the holders whose trust ended by itself (validity, release) before
    /// the deadline, untold.
    pub ended: u64,
    /// Detection delays of the holders told in time (from the steal's answer), in ms: the
    /// median and the largest.
    pub p50_ms: f64,
    /// The largest.
    pub max_ms: f64,
}

/// The steals of a history, by lease token: (name, sent, answered).
fn steals(events: &[Event]) -> HashMap<&str, (&str, Nanos, Nanos)> {
    let mut out = HashMap::new();
    for e in events {
        if let Event::Steal {
            name,
            token,
            t_sent,
            t_reply,
            ..
        } = e
        {
            out.entry(token.as_str())
                .or_insert((name.as_str(), *t_sent, *t_reply));
        }
    }
    out
}

/// By when the holder of a lease handed over at `acquired` on `client` must be told of a
/// steal answered at `reply`: the bound from the later of the two, extended by the
/// client's hiccups in that window.
pub(super) fn deadline(
    client: u32,
    acquired: Nanos,
    reply: Nanos,
    hiccups: &[(u32, Nanos, Nanos)],
) -> Nanos {
    let start = reply.max(acquired);
    let end = start + TOLD_BOUND;
    let stalled: Nanos = hiccups
        .iter()
        .filter(|(c, _, _)| *c == client)
        .map(|&(_, s, e)| e.min(end).saturating_sub(s.max(start)))
        .sum();
    end + stalled
}

/// Marks each plain lock's acquisition whose key a steal took.
pub(super) fn mark(events: &[Event], acqs: &mut [Acq]) {
    let steals = steals(events);
    if steals.is_empty() {
        return;
    }
    let hiccups: Vec<(u32, Nanos, Nanos)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Hiccup {
                client,
                t_start,
                t_end,
            } => Some((*client, *t_start, *t_end)),
            _ => None,
        })
        .collect();
    for acq in acqs.iter_mut() {
        if acq.a.kind != HoldKind::Lock || acq.a.set.is_some() {
            continue;
        }
        if let Some(&(name, sent, reply)) = steals.get(acq.a.token.as_str()) {
            if name == acq.a.name {
                acq.stolen = Some(Stolen {
                    sent,
                    reply,
                    deadline: deadline(acq.a.client, acq.a.acquired, reply, &hiccups),
                });
            }
        }
    }
}

/// When a lease's trust ended other than by being told it was lost.
fn trust_end_untold(acq: &Acq) -> Nanos {
    let mut end = acq.claim_end;
    if let Some((t, _, _)) = acq.release {
        end = end.min(t);
    }
    if let Some(t) = acq.releasing {
        end = end.min(t);
    }
    end
}

/// Rules `steal-untold` and `false-loss`, and the run's steal figures.
pub(super) fn check(
    events: &[Event],
    index: &HashMap<String, usize>,
    acqs: &[Acq],
    report: &mut Report,
) {
    let count = events
        .iter()
        .filter(|e| matches!(e, Event::Steal { .. }))
        .count() as u64;
    if count == 0 {
        return;
    }
    let mut stats = StealStats {
        steals: count,
        ..StealStats::default()
    };
    let mut delays: Vec<Nanos> = Vec::new();
    for acq in acqs {
        let Some(st) = acq.stolen else { continue };
        let untold_end = trust_end_untold(acq);
        if st.reply >= untold_end {
            continue; // taken after (or maybe after) its trust ended by itself
        }
        stats.judged += 1;
        match acq.lost_at {
            Some(t) if t <= st.deadline => {
                stats.told += 1;
                delays.push(t.saturating_sub(st.reply.max(acq.a.acquired)));
            }
            _ if untold_end <= st.deadline => stats.ended += 1,
            told => report.violations.push(Violation {
                rule: "steal-untold",
                name: acq.a.name.clone(),
                detail: format!(
                    "{}'s key was taken at {} (answer at {}); told {} ({} after), trusted until {}, deadline {}",
                    acq.a.id,
                    st.sent,
                    st.reply,
                    told.map_or_else(|| "never".to_owned(), |t| t.to_string()),
                    told.map_or_else(|| "-".to_owned(), |t| ms(t.saturating_sub(st.reply))),
                    acq.trusted_until(),
                    st.deadline,
                ),
            }),
        }
    }
    delays.sort_unstable();
    if let (Some(mid), Some(max)) = (delays.get(delays.len() / 2), delays.last()) {
        stats.p50_ms = *mid as f64 / 1e6;
        stats.max_ms = *max as f64 / 1e6;
    }
    report.steal = Some(stats);

    // false-loss: only where every fault is a steal.
    let other_faults = events
        .iter()
        .any(|e| matches!(e, Event::Fault { kind, .. } if kind != "steal"));
    if other_faults {
        return;
    }
    for e in events {
        let Event::LostDetected { id, t, how } = e else {
            continue;
        };
        if how != "signal" && how != "is_lost" {
            continue;
        }
        let Some(acq) = index.get(id).and_then(|&i| acqs.get(i)) else {
            continue;
        };
        if acq.a.kind != HoldKind::Lock || acq.a.set.is_some() {
            continue;
        }
        let stolen_before = acq.stolen.is_some_and(|st| st.sent <= *t);
        if !stolen_before && *t + EARLY_MARGIN < acq.claim_end {
            report.violations.push(Violation {
                rule: "false-loss",
                name: acq.a.name.clone(),
                detail: format!(
                    "{} was told its lease was lost ({how}) at {t}, {} before its validity ended at {}, and no steal of its key had begun",
                    acq.a.id,
                    ms(acq.claim_end - *t),
                    acq.claim_end,
                ),
            });
        }
    }
}
