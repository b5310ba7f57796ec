//! Rules `wait-overrun` and `late-grant`: `wait(d)` is a deadline.
//!
//! The library promises that a request returns within its wait plus the timer's granularity
//! (about a millisecond), also against a stalled or unreachable server: an attempt still in
//! flight at the deadline is abandoned, and nothing is granted after it. A request that does
//! not wait (`wait(0)`) makes its one attempt under the locker's command timeout instead.
//!
//! The clients stamp a request before they call it and as soon as it returns, on a
//! machine shared by several client processes, the servers and the orchestrator, so a
//! return may be seen late by however long the client was not scheduled. Two allowances:
//! the time the client's runtime is known not to have run during the request (its
//! [`Event::Hiccup`]s) is not counted, and [`SLACK`] covers the rest; an overrun beyond
//! both is a violation. A request of a client that was stopped (the `pause` fault) while it
//! was in flight is not judged.

use std::collections::HashMap;

use super::{Report, Violation};
use crate::clock::{ms, Nanos};
use crate::event::Event;

/// How late after its bound a request may be seen to return: the library's own timer slack
/// (about 1 ms) plus scheduling on a loaded two-core machine. Generous on purpose; a
/// request that rode out a stalled server instead of abandoning its attempt overruns by
/// the rest of the stall, tens to hundreds of milliseconds.
pub(super) const SLACK: Nanos = 50_000_000;

/// One request, as its client logged it.
struct Request<'a> {
    client: u32,
    name: &'a str,
    id: Option<&'a str>,
    start: Nanos,
    end: Nanos,
    wait: Nanos,
    granted: bool,
}

/// Checks every request that logged its wait; returns nothing, adds to `report`.
pub(super) fn check(events: &[Event], pauses: &[(u32, Nanos, Nanos)], report: &mut Report) {
    let mut command_timeout: HashMap<u32, Nanos> = HashMap::new();
    let mut hiccups: HashMap<u32, Vec<(Nanos, Nanos)>> = HashMap::new();
    let mut requests = Vec::new();
    for event in events {
        match event {
            Event::Hiccup {
                client,
                t_start,
                t_end,
            } => {
                report.client_hiccups += 1;
                hiccups.entry(*client).or_default().push((*t_start, *t_end));
            }
            Event::Start {
                client,
                command_timeout_ms,
                ..
            } if *command_timeout_ms > 0 => {
                command_timeout.insert(*client, command_timeout_ms * 1_000_000);
            }
            Event::Acquired(a) => {
                if let Some(wait) = a.wait_ms {
                    requests.push(Request {
                        client: a.client,
                        name: &a.name,
                        id: Some(&a.id),
                        start: a.call_start,
                        end: a.acquired,
                        wait: wait * 1_000_000,
                        granted: true,
                    });
                }
            }
            Event::AcquireFailed {
                client,
                name,
                t_start,
                t_end,
                wait_ms: Some(wait),
                ..
            } => requests.push(Request {
                client: *client,
                name,
                id: None,
                start: *t_start,
                end: *t_end,
                wait: wait * 1_000_000,
                granted: false,
            }),
            _ => {}
        }
    }
    // Sorted by start, so that each request looks only at the stretches that can meet it
    // (a million requests against thousands of hiccups).
    for list in hiccups.values_mut() {
        list.sort_unstable();
    }
    let longest: HashMap<u32, Nanos> = hiccups
        .iter()
        .map(|(&c, list)| (c, list.iter().map(|&(s, e)| e - s).max().unwrap_or(0)))
        .collect();
    for r in requests {
        let paused = pauses
            .iter()
            .any(|&(client, start, end)| client == r.client && start < r.end && r.start < end);
        if paused {
            continue;
        }
        let bound = if r.wait > 0 {
            r.wait
        } else if let Some(&timeout) = command_timeout.get(&r.client) {
            timeout
        } else {
            continue;
        };
        // Time the client's runtime did not run while the request was in flight.
        let stalled: Nanos = hiccups.get(&r.client).map_or(0, |list| {
            let reach = longest.get(&r.client).copied().unwrap_or(0);
            let from = list.partition_point(|&(start, _)| start + reach < r.start);
            list[from..]
                .iter()
                .take_while(|&&(start, _)| start < r.end)
                .map(|&(start, end)| end.min(r.end).saturating_sub(start.max(r.start)))
                .sum()
        });
        let took = r.end.saturating_sub(r.start);
        let over = took.saturating_sub(stalled).saturating_sub(bound);
        if r.wait > 0 {
            report.max_wait_overrun = report.max_wait_overrun.max(over);
        }
        if over <= SLACK {
            continue;
        }
        let mut what = if r.wait > 0 {
            format!("wait {}", ms(r.wait))
        } else {
            format!("no wait, command timeout {}", ms(bound))
        };
        if stalled > 0 {
            what.push_str(&format!(", client not running for {} of it", ms(stalled)));
        }
        let (rule, detail) = if r.granted {
            (
                "late-grant",
                format!(
                    "{} was granted {} after its request began ({what}): {} past its deadline",
                    r.id.unwrap_or("?"),
                    ms(took),
                    ms(over)
                ),
            )
        } else {
            (
                "wait-overrun",
                format!(
                    "client {}'s request made at {} failed {} later ({what}): {} past its deadline",
                    r.client,
                    r.start,
                    ms(took),
                    ms(over)
                ),
            )
        };
        report.violations.push(Violation {
            rule,
            name: r.name.to_owned(),
            detail,
        });
    }
}
