//! A cycle of waiters, as [`LockError::Deadlock`](crate::LockError::Deadlock) reports it.

use std::fmt;

/// One lock of a deadlock cycle and who held it when the cycle was found.
///
/// A [`LockError::Deadlock`](crate::LockError::Deadlock) lists the cycle from the lock
/// the refused request waited for: each link's holder waits for the next link's lock, and
/// the last link's lock is held by the refused request's own task (which waited for the
/// first).
///
/// ```
/// use lock_core::DeadlockLink;
///
/// let link = DeadlockLink::new("orders:7", Some("billing@host-b:41".to_owned()));
/// assert_eq!(link.name(), "orders:7");
/// assert_eq!(link.holder(), Some("billing@host-b:41"));
/// assert_eq!(link.to_string(), "`orders:7` (held by billing@host-b:41)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlockLink {
    name: String,
    holder: Option<String>,
}

impl DeadlockLink {
    /// A link: the lock `name`, held by `holder` (its holder label, when it stored one).
    pub fn new(name: impl Into<String>, holder: Option<String>) -> DeadlockLink {
        DeadlockLink {
            name: name.into(),
            holder,
        }
    }

    /// The lock's name (or its Redis key, for a lock of another key prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder's label (`app@host:pid` by default), when its value carried one.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }
}

impl fmt::Display for DeadlockLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.holder {
            Some(holder) => write!(f, "`{}` (held by {holder})", self.name),
            None => write!(f, "`{}`", self.name),
        }
    }
}

/// `a` → `b` → ... → back to the first, for the error message.
pub(crate) fn cycle_text(cycle: &[DeadlockLink]) -> String {
    let mut text = String::new();
    for (i, link) in cycle.iter().enumerate() {
        if i > 0 {
            text.push_str(", which waits for ");
        }
        text.push_str(&link.to_string());
    }
    if let Some(first) = cycle.first() {
        text.push_str(&format!(", which waits for `{}`", first.name));
    }
    text
}
