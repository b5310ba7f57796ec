//! What the probe rules (`ghost-grant`, `leftover-after-error`) read from a run's events
//! before judging a probe: the tokens that were ever granted, and when each client had a
//! request for each lock.

use std::collections::{HashMap, HashSet};

use crate::clock::Nanos;
use crate::event::Event;

/// Every token a lease was granted with.
pub(super) fn granted_tokens(events: &[Event]) -> HashSet<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Acquired(a) => Some(a.token.as_str()),
            _ => None,
        })
        .collect()
}

/// Each client's requests per lock name, as (start, end): the granted ones and the failed
/// ones, and with `with_cancelled` also the ones whose future was dropped.
pub(super) fn per_client(
    events: &[Event],
    with_cancelled: bool,
) -> HashMap<(u32, &str), Vec<(Nanos, Nanos)>> {
    let mut requests: HashMap<(u32, &str), Vec<(Nanos, Nanos)>> = HashMap::new();
    for event in events {
        let (client, name, start, end) = match event {
            Event::Acquired(a) => (a.client, a.name.as_str(), a.call_start, a.acquired),
            Event::AcquireFailed {
                client,
                name,
                t_start,
                t_end,
                ..
            } => (*client, name.as_str(), *t_start, *t_end),
            Event::Cancelled {
                client,
                name,
                t_start,
                t_end,
                ..
            } if with_cancelled => (*client, name.as_str(), *t_start, *t_end),
            _ => continue,
        };
        requests
            .entry((client, name))
            .or_default()
            .push((start, end));
    }
    requests
}
