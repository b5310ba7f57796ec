//! Rule `liveness`: a waiter is not left waiting while what it waits for is free.
//!
//! A request that waits (a lock, a semaphore permit, a read-write lock's side, a multi-lock)
//! must be granted soon after the name becomes free: the library wakes queued waiters on
//! a release, reserves the lock for the head of the queue for at most its claim window
//! ([`CLAIM_WINDOW`]), and wakes the head at the end of a holder's lease should it never
//! release. So a request still waiting while the name has been free (no trusted holder;
//! for a semaphore, fewer trusted holders than permits; for a multi-lock, every name of
//! its set free at once) for longer than the claim window plus [`SLACK`] was left behind:
//! a release it missed, a ghost reservation for a request that no longer exists. A request
//! that timed out while the name was free for more than half of its wait (and longer than
//! that threshold) is one too.
//!
//! Nothing is judged while a fault is active or soon after (one claim window and two TTLs
//! after it healed); a Cluster's slot migration ([`RESHARD`]) only while it lasts: a stopped, killed or cut-off client or server legitimately holds up
//! the queue. On a Cluster or behind Sentinel the window lasts [`REPLICATED_SETTLE`] after
//! the old master's demotion, and at least until a claim window and two TTLs after the
//! deployment was seen whole again ([`Failover::t_whole`](crate::event::Failover::t_whole)):
//! while the replica check is on, a promoted master grants nothing before its replica has
//! resynced, and Redis delays a full resync by `repl-diskless-sync-delay` (5 s by default),
//! which can outlast the 5 s. Time in which the waiting client did not run
//! ([`Event::Hiccup`]) is not counted as free, nor the time of an attempt refused for too
//! few replica acknowledgements (`NotReplicated`): its key was in Redis until its undo, nor
//! the time a data server ran no command ([`Event::ServerStall`], on any server: a request
//! for a name another server holds is excused too), unless a slow command in the server's
//! `SLOWLOG` explains the stall.
//!
//! On a Cluster or behind Sentinel the servers' own record ([`Event::Granted`] and
//! [`Event::Ungranted`], from their `MONITOR` streams) says when a name was held: a lease
//! from the moment a server granted it (with the replica check on, its client is told only
//! once replicas acknowledged it), and a grant that no client reported taking (a waiter's
//! claim that waited for replicas past its deadline, then given back) from its grant to its
//! removal or its end by the server's clock.

use std::collections::HashMap;

use super::{Acq, Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::{lease_token, Event, FailKind, HoldKind};

/// How long lock-core keeps a lock reserved for the head of its queue (lock-core's
/// `CLAIM_WINDOW`).
pub const CLAIM_WINDOW: Nanos = 100_000_000;

/// Scheduling and round trips on a loaded machine, on top of the claim window.
pub const SLACK: Nanos = 50_000_000;

/// The fault that excuses a wait only while it lasts: a Cluster slot moved to another
/// master (Redis refuses the lock's scripts with TRYAGAIN while it migrates, and no
/// longer).
pub const RESHARD: &str = "reshard";

/// The longest a waiter may wait while what it waits for is free.
pub const THRESHOLD: Nanos = CLAIM_WINDOW + SLACK;

/// How long after a fault a replicated deployment (Cluster, Sentinel) is left to settle
/// before waits are judged: the failover, the old master's return as a replica, and its
/// resync, without which the replica check refuses every grant.
pub const REPLICATED_SETTLE: Nanos = 5_000_000_000;

/// Whether a server stall from `start` to `end` is explained by one of the `slow` commands
/// its `SLOWLOG` showed after it (one that ran for half the stall or more).
fn explained(start: Nanos, end: Nanos, slow: &[(String, u64)]) -> bool {
    let stall = end.saturating_sub(start);
    slow.iter()
        .any(|(_, micros)| micros.saturating_mul(2_000) >= stall)
}

/// One request that waited.
struct Request<'a> {
    client: u32,
    label: String,
    family: &'static str,
    names: Vec<&'a str>,
    start: Nanos,
    end: Nanos,
    wait: Nanos,
    timed_out: bool,
    /// A semaphore request: the permits it asked to share (the semaphore is full for it
    /// at that many trusted holders).
    permits: Option<u64>,
    /// A weighted request (`acquire_many`): judged free only while nobody holds a permit
    /// (a request that fits may rightly wait behind a larger one ahead of it in line).
    weighted: bool,
}

/// Checks every request of the history against the trusted intervals of `acqs`.
pub(super) fn check(events: &[Event], acqs: &[Acq], report: &mut Report) {
    let mut ttl: Nanos = 0;
    let mut permits: HashMap<&str, u64> = HashMap::new();
    // (family, name) -> trusted intervals.
    let mut held: HashMap<(&str, &str), Vec<(Nanos, Nanos)>> = HashMap::new();
    let servers = ServerGrants::new(events);
    for acq in acqs {
        ttl = ttl.max(acq.a.ttl_ms.saturating_mul(1_000_000));
        if let Some(n) = acq.a.permits {
            permits.insert(acq.a.name.as_str(), n);
        }
        let end = acq.trusted_until();
        // A leadership holds the election's lock from its attempt on: the campaign
        // announces it (a round trip, longer on a loaded machine) before handing it over.
        // On a replicated deployment, any lease holds its name from the moment a server
        // granted it (its `MONITOR` record): with the replica check on, the client is told
        // only once replicas acknowledged the grant.
        let start = match acq.a.kind {
            HoldKind::Leader => acq.a.attempt_start,
            _ => servers
                .first
                .get(acq.a.token.as_str())
                .map_or(acq.a.acquired, |&t| t.min(acq.a.acquired)),
        };
        if end > start {
            held.entry((acq.a.kind.family(), acq.a.name.as_str()))
                .or_default()
                .push((start, end));
        }
    }
    // An attempt refused for too few replica acknowledgements held the name in Redis from
    // its write until its undo: lock-core writes the key, waits for the replicas (within
    // the request's time), and deletes it when they do not answer. Others were refused
    // meanwhile by a key that was there, not left behind by a missed wake-up; the undo
    // hands the name on as a release does.
    for event in events {
        if let Event::AcquireFailed {
            name,
            t_start,
            t_end,
            kind: FailKind::NotReplicated,
            hold,
            set,
            ..
        } = event
        {
            let names: Vec<&str> = match set {
                Some(set) => set.iter().map(String::as_str).collect(),
                None => vec![name.as_str()],
            };
            for name in names {
                held.entry((hold.family(), name))
                    .or_default()
                    .push((*t_start, *t_end));
            }
        }
    }
    // A grant the servers made that no client reported taking held its name on the server
    // until it was removed (given back) or ran out: a waiter whose claim of a permit granted
    // to it waited for replica acknowledgements past its deadline (its attempt is given
    // back), an attempt refused for its replicas. Others were refused meanwhile by a grant
    // that was there, not left behind by a missed wake-up.
    let taken: std::collections::HashSet<&str> = acqs.iter().map(|a| a.a.token.as_str()).collect();
    for (family, name, start, end) in servers.unclaimed(&taken, ttl) {
        held.entry((family, name)).or_default().push((start, end));
    }
    // A replicated deployment takes seconds to settle after a fault: with lock-core's replica
    // acknowledgement check on (the default), a promoted master grants nothing until a
    // replica has resynced with it, and requests wait while no one holds the name. That is
    // the check's price in availability, not a missed wake-up.
    let replicated = events.iter().any(|e| {
        matches!(e, Event::Topology { topology, .. } if topology == "cluster" || topology == "sentinel")
    });
    let margin = if replicated {
        (CLAIM_WINDOW + 2 * ttl).max(REPLICATED_SETTLE)
    } else {
        CLAIM_WINDOW + 2 * ttl
    };
    let mut excluded: Vec<(Nanos, Nanos)> = Vec::new();
    let mut hiccups: HashMap<u32, Vec<(Nanos, Nanos)>> = HashMap::new();
    let mut requests = Vec::new();
    let mut seen_multi = std::collections::HashSet::new();
    for event in events {
        match event {
            // While a slot migrates, Redis refuses the lock's scripts (TRYAGAIN): that
            // time is not free, but requests must go on as soon as the migration ends.
            Event::Fault {
                kind,
                t_start,
                t_end,
                ..
            } if kind == RESHARD => excluded.push((*t_start, *t_end)),
            Event::Fault { t_start, t_end, .. } | Event::Down { t_start, t_end, .. } => {
                excluded.push((*t_start, t_end.saturating_add(margin)));
            }
            // Until the deployment was whole again, too: with the replica check on, the
            // promoted master grants nothing before its replica has resynced.
            Event::Failover(f) => {
                let demoted = f.t_end.saturating_add(margin);
                let whole = f
                    .t_whole
                    .map_or(0, |t| t.saturating_add(CLAIM_WINDOW + 2 * ttl));
                excluded.push((f.t_start, demoted.max(whole)));
            }
            Event::Foreign { t_start, t_end, .. } => {
                excluded.push((*t_start, t_end.saturating_add(margin)));
            }
            Event::Hiccup {
                client,
                t_start,
                t_end,
            } => hiccups.entry(*client).or_default().push((*t_start, *t_end)),
            // A server that ran no command kept everyone it serves waiting; unless a slow
            // command of its own explains the stall (a long script would be the library's).
            Event::ServerStall {
                t_start,
                t_end,
                slow,
                ..
            } if !explained(*t_start, *t_end, slow) => excluded.push((*t_start, *t_end)),
            Event::Acquired(a) => {
                let names = match &a.set {
                    // A multi-lock is logged once per name: one request.
                    Some(set) => {
                        let base = a.id.split_once('/').map_or(a.id.as_str(), |(b, _)| b);
                        if !seen_multi.insert(base) {
                            continue;
                        }
                        set.iter().map(String::as_str).collect()
                    }
                    None => vec![a.name.as_str()],
                };
                requests.push(Request {
                    client: a.client,
                    label: a
                        .id
                        .split_once('/')
                        .map_or(a.id.clone(), |(b, _)| b.to_owned()),
                    family: a.kind.family(),
                    names,
                    start: a.call_start,
                    end: a.acquired,
                    wait: a.wait_ms.unwrap_or(0).saturating_mul(1_000_000),
                    timed_out: false,
                    permits: a.permits,
                    weighted: a.weight.is_some(),
                });
            }
            Event::AcquireFailed {
                client,
                name,
                t_start,
                t_end,
                kind,
                wait_ms,
                hold,
                set,
                capacity,
                ..
            } => requests.push(Request {
                client: *client,
                label: format!("client {client}'s request"),
                family: hold.family(),
                names: match set {
                    Some(set) => set.iter().map(String::as_str).collect(),
                    None => vec![name.as_str()],
                },
                start: *t_start,
                end: *t_end,
                wait: wait_ms.unwrap_or(0).saturating_mul(1_000_000),
                timed_out: *kind == FailKind::Contention && wait_ms.unwrap_or(0) > 0,
                permits: capacity.map(|c| c.asked),
                weighted: capacity.is_some_and(|c| c.weight.is_some()),
            }),
            Event::Cancelled {
                client,
                name,
                t_start,
                t_end,
                wait_ms,
                ..
            } => requests.push(Request {
                client: *client,
                label: format!("client {client}'s cancelled request"),
                family: HoldKind::Lock.family(),
                names: vec![name.as_str()],
                start: *t_start,
                end: *t_end,
                wait: wait_ms.saturating_mul(1_000_000),
                timed_out: false,
                permits: None,
                weighted: false,
            }),
            _ => {}
        }
    }
    for r in &requests {
        if r.end <= r.start || r.end - r.start <= THRESHOLD {
            continue;
        }
        // What keeps this request out: any name of its set held (for a semaphore, all its
        // permits), a fault, or its own client not running.
        let mut blocked: Vec<(Nanos, Nanos)> = Vec::new();
        for name in &r.names {
            let Some(list) = held.get(&(r.family, *name)) else {
                continue;
            };
            match r.family {
                "semaphore" if r.weighted => blocked.extend(list.iter().copied()),
                "semaphore" => {
                    let n = r.permits.or_else(|| permits.get(name).copied());
                    blocked.extend(full(list, n.unwrap_or(1)));
                }
                _ => blocked.extend(list.iter().copied()),
            }
        }
        blocked.extend(excluded.iter().copied());
        if let Some(h) = hiccups.get(&r.client) {
            blocked.extend(h.iter().copied());
        }
        let free = free_stretches(r.start, r.end, blocked);
        let longest = free.iter().map(|(s, e)| e - s).max().unwrap_or(0);
        let total: Nanos = free.iter().map(|(s, e)| e - s).sum();
        let what = r.names.join("+");
        if longest > THRESHOLD {
            let (s, e) = free
                .iter()
                .copied()
                .max_by_key(|(s, e)| e - s)
                .unwrap_or((0, 0));
            report.violations.push(Violation {
                rule: "liveness",
                name: what,
                detail: format!(
                    "{} (client {}, {} from {} to {}) was still waiting while `{}` was free from {s} to {e} ({}; the claim window is {} and the allowance {})",
                    r.label,
                    r.client,
                    r.family,
                    r.start,
                    r.end,
                    r.names.join("+"),
                    ms(e - s),
                    ms(CLAIM_WINDOW),
                    ms(SLACK),
                ),
            });
        } else if r.timed_out && total > THRESHOLD && total * 2 > r.wait {
            report.violations.push(Violation {
                rule: "liveness",
                name: what,
                detail: format!(
                    "{} (client {}, {} from {} to {}) timed out after waiting {}, of which `{}` was free for {}",
                    r.label,
                    r.client,
                    r.family,
                    r.start,
                    r.end,
                    ms(r.end - r.start),
                    r.names.join("+"),
                    ms(total),
                ),
            });
        }
    }
}

/// One grant by a server: (node, when, its end by the server's clock if known).
type ServerGrant = (u16, Nanos, Option<Nanos>);

/// The servers' own record of grants on a replicated deployment ([`Event::Granted`],
/// [`Event::Ungranted`], from their `MONITOR` streams): empty elsewhere.
struct ServerGrants<'a> {
    /// Lease token -> when a server first granted it.
    first: HashMap<&'a str, Nanos>,
    /// Lease token -> its key, and every grant of it.
    grants: HashMap<&'a str, (&'a str, Vec<ServerGrant>)>,
    /// Lease token -> every (node, time) a server removed it.
    removals: HashMap<&'a str, Vec<(u16, Nanos)>>,
}

impl<'a> ServerGrants<'a> {
    fn new(events: &'a [Event]) -> ServerGrants<'a> {
        let mut servers = ServerGrants {
            first: HashMap::new(),
            grants: HashMap::new(),
            removals: HashMap::new(),
        };
        for event in events {
            match event {
                Event::Granted {
                    node,
                    t,
                    token,
                    key,
                    until,
                } => {
                    let token = lease_token(token);
                    let first = servers.first.entry(token).or_insert(*t);
                    *first = (*first).min(*t);
                    if let Some(key) = key {
                        servers
                            .grants
                            .entry(token)
                            .or_insert((key.as_str(), Vec::new()))
                            .1
                            .push((*node, *t, *until));
                    }
                }
                Event::Ungranted { node, t, token } => servers
                    .removals
                    .entry(lease_token(token))
                    .or_default()
                    .push((*node, *t)),
                _ => {}
            }
        }
        servers
    }

    /// The grants no client reported taking (their tokens are not in `taken`), as (family,
    /// name, from, to): from the server's first grant of the token to its removal by that
    /// server after its last grant there, or to its end by the server's clock (`ttl` after
    /// the grant when the command did not say).
    fn unclaimed(
        &self,
        taken: &std::collections::HashSet<&str>,
        ttl: Nanos,
    ) -> Vec<(&'static str, &'a str, Nanos, Nanos)> {
        let mut out = Vec::new();
        for (token, (key, grants)) in &self.grants {
            if taken.contains(token) {
                continue;
            }
            let Some((family, name)) = family_of_key(key) else {
                continue;
            };
            let start = grants.iter().map(|g| g.1).min().unwrap_or(0);
            let last = grants.iter().map(|g| g.1).max().unwrap_or(0);
            let until = grants
                .iter()
                .map(|&(_, t, until)| until.unwrap_or_else(|| t.saturating_add(ttl)))
                .max()
                .unwrap_or(last);
            let removed = self
                .removals
                .get(token)
                .into_iter()
                .flatten()
                .filter(|&&(node, t)| t >= last && grants.iter().any(|g| g.0 == node))
                .map(|&(_, t)| t)
                .min();
            let end = removed.map_or(until, |r| r.min(until));
            if end > start {
                out.push((family, name, start, end));
            }
        }
        out
    }
}

/// The family and name of a lock key or a permit set's holders key.
fn family_of_key(key: &str) -> Option<(&'static str, &str)> {
    let (family, lock) = if let Some(lock) = key.strip_suffix(":sem") {
        ("semaphore", lock)
    } else if let Some(lock) = key.strip_suffix(":rw") {
        ("rwlock", lock)
    } else {
        ("lock", key)
    };
    Some((family, crate::names::name_of_key(lock)?))
}

/// Where at least `permits` of the intervals overlap.
fn full(list: &[(Nanos, Nanos)], permits: u64) -> Vec<(Nanos, Nanos)> {
    let mut edges: Vec<(Nanos, i64)> = Vec::with_capacity(list.len() * 2);
    for &(s, e) in list {
        edges.push((s, 1));
        edges.push((e, -1));
    }
    // Ends before starts at one instant.
    edges.sort_unstable();
    let mut count: i64 = 0;
    let mut out = Vec::new();
    let mut since = None;
    let limit = i64::try_from(permits).unwrap_or(i64::MAX);
    for (t, d) in edges {
        count += d;
        match (count >= limit, since) {
            (true, None) => since = Some(t),
            (false, Some(s)) => {
                out.push((s, t));
                since = None;
            }
            _ => {}
        }
    }
    out
}

/// The stretches of `[start, end)` not covered by `blocked`.
fn free_stretches(
    start: Nanos,
    end: Nanos,
    mut blocked: Vec<(Nanos, Nanos)>,
) -> Vec<(Nanos, Nanos)> {
    blocked.retain(|&(s, e)| e > start && s < end);
    blocked.sort_unstable();
    let mut free = Vec::new();
    let mut at = start;
    for (s, e) in blocked {
        if s > at {
            free.push((at, s));
        }
        at = at.max(e);
        if at >= end {
            break;
        }
    }
    if at < end {
        free.push((at, end));
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn free_stretches_and_full_sweeps() {
        let free = free_stretches(0, 100, vec![(10, 20), (15, 30), (50, 60), (90, 200)]);
        assert_eq!(free, vec![(0, 10), (30, 50), (60, 90)]);
        assert_eq!(full(&[(0, 10), (5, 20), (8, 9)], 2), vec![(5, 10)]);
        assert_eq!(free_stretches(0, 10 * MS, vec![]), vec![(0, 10 * MS)]);
    }
}
