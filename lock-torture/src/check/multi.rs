//! Multi-locks, judged per name: one acquisition of a set becomes one per name before any
//! rule looks at the history.

use std::collections::HashMap;

use crate::event::Event;

/// A multi-lock is logged as one acquisition with every name of its set; the rules judge
/// each name: one acquisition per name (`<id>/<name>`), and every event about the lease
/// once for each of them.
pub(super) fn expand_multi(events: &[Event]) -> Vec<Event> {
    let sets: HashMap<&str, &[String]> = events
        .iter()
        .filter_map(|e| match e {
            Event::Acquired(a) => a.set.as_deref().map(|set| (a.id.as_str(), set)),
            _ => None,
        })
        .collect();
    if sets.is_empty() {
        return events.to_vec();
    }
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        let id = match event {
            Event::Acquired(a) => Some(&a.id),
            Event::Extended { id, .. }
            | Event::Observed { id, .. }
            | Event::LostDetected { id, .. }
            | Event::Work { id, .. }
            | Event::Write { id, .. }
            | Event::Releasing { id, .. }
            | Event::Release { id, .. } => Some(id),
            _ => None,
        };
        let Some(set) = id.and_then(|id| sets.get(id.as_str())) else {
            out.push(event.clone());
            continue;
        };
        for name in *set {
            let mut one = event.clone();
            match &mut one {
                Event::Acquired(a) => {
                    a.id = format!("{}/{name}", a.id);
                    a.name = name.clone();
                }
                Event::Work { id, name: n, .. } | Event::Write { id, name: n, .. } => {
                    *id = format!("{id}/{name}");
                    *n = name.clone();
                }
                Event::Extended { id, .. }
                | Event::Observed { id, .. }
                | Event::LostDetected { id, .. }
                | Event::Releasing { id, .. }
                | Event::Release { id, .. } => *id = format!("{id}/{name}"),
                _ => {}
            }
            out.push(one);
        }
    }
    out
}
