//! What a lock key's value says: the lease token in a stored value, and one read of a lock
//! key on one node ([`Look`]).

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// The lease token in a stored lock value: `<token>:<holder label>`, with lock-core's
/// hand-over mark `~` in front while someone is queued for (or listens to) the lock. A token
/// alone (hex, no label, no mark) is returned as it is, so that tokens read by older
/// versions of the harness, which kept the mark, are normalised too.
pub fn lease_token(value: &str) -> &str {
    let value = value.strip_prefix('~').unwrap_or(value);
    value.split_once(':').map_or(value, |(token, _)| token)
}

/// One read of a lock key on one node, by a [`Event::Probe`](super::Event::Probe).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Look {
    /// When the answer came.
    pub t: Nanos,
    /// Node number.
    pub node: u32,
    /// The string value (`<token>:<holder label>`); absent when there was no string there
    /// (no key, the foreign hash, or no answer).
    pub value: Option<String>,
}
