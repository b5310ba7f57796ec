//! The deadlock workload's record of one wait ([`crate::event::Event::Waited`]): written by
//! `client/deadlock.rs`, judged by `check/deadlock.rs`.

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// One nested request of the deadlock workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waited {
    /// Client number. A holder label names the client; a client's waits at one time
    /// (its nesting task's, its ring tasks') hold and want distinct names.
    pub client: u32,
    /// The names its task held (enclosing `using` closures) for the whole wait.
    pub holding: Vec<String>,
    /// The name it asked for.
    pub wants: String,
    /// Before the request was made.
    pub t_start: Nanos,
    /// When it ended: the grant (first thing in the body), the error, or the drop.
    pub t_end: Nanos,
    /// `granted`, `deadlock`, `timeout`, `cancelled` or `error`.
    pub outcome: String,
    /// For `deadlock`: the cycle the library reported, (name, holder label) from `wants`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<(String, Option<String>)>,
}

/// The client number in a holder label of the torture (`torture-c<N>@host:pid`).
pub fn client_of(label: &str) -> Option<u32> {
    label
        .strip_prefix("torture-c")?
        .split(['@', 'r'])
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn labels_name_their_client() {
        assert_eq!(super::client_of("torture-c12@host:99"), Some(12));
        assert_eq!(super::client_of("other"), None);
    }
}
