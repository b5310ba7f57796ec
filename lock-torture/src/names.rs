//! The lock names of a run and their Redis keys.
//!
//! Plain names are `torture:<i>`. With `--name-kind hostile` every name is built to break
//! key layouts: it begins with `}` (an empty Cluster hash tag under the old layout), or holds
//! `{`, `}`, `{}`, the derived keys' suffixes (`:q`, `:qe`, `:fence`, `:sem`, `:rw`),
//! spaces, non-ASCII text or NUL bytes, or is close to lock-core's longest name
//! ([`lock_core::MAX_NAME_LEN`]); each still ends in its index, so the names of a run are
//! distinct. Keys are computed with lock-core's own [`KeyLayout`], never by hand.

use std::sync::LazyLock;

use lock_core::KeyLayout;

/// The key prefix the clients use (lock-core's default).
pub const PREFIX: &str = "lock:";

static LAYOUT: LazyLock<KeyLayout> = LazyLock::new(|| KeyLayout::new(PREFIX));

/// Which names a run locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NameKind {
    /// `torture:<i>`.
    #[default]
    Plain,
    /// Names of braces, key suffixes, spaces, non-ASCII text, NUL bytes and up to 500
    /// bytes (see the module docs).
    Hostile,
}

impl NameKind {
    /// The name used on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            NameKind::Plain => "plain",
            NameKind::Hostile => "hostile",
        }
    }
}

/// The heads of hostile names, in turn.
const HOSTILE_HEADS: [&str; 12] = [
    "}",
    "}{",
    "{}",
    "}:q",
    "{",
    "}:qe",
    "} :fence",
    "\0",
    "}ünï 日本 🦀",
    "\0}",
    "a}b{c:sem",
    "}}:rw",
];

/// The `index`-th name of a run.
pub fn name(index: u32, kind: NameKind) -> String {
    match kind {
        NameKind::Plain => format!("torture:{index}"),
        // One name in seven is long: 480 bytes of braces and letters.
        NameKind::Hostile if index % 7 == 6 => {
            format!("}}{}{index}", "x{}".repeat(160))
        }
        NameKind::Hostile => {
            let head = HOSTILE_HEADS[index as usize % HOSTILE_HEADS.len()];
            format!("{head}t {index}")
        }
    }
}

/// The first `count` names of a run.
pub fn list(count: u32, kind: NameKind) -> Vec<String> {
    (0..count).map(|i| name(i, kind)).collect()
}

/// The key of lock `name`, as lock-core stores it.
pub fn lock_key(name: &str) -> String {
    LAYOUT.lock_key(name)
}

/// The name whose lock key `key` is (`None`: not a lock key of the clients' prefix).
pub fn name_of_key(key: &str) -> Option<&str> {
    LAYOUT.name_of(key)
}

/// The election only client `client` campaigns for (the election workload: a leader with
/// nobody to take over, whose lapse its partner client must see).
pub fn lonely_election(client: u32) -> String {
    format!("lonely-{client}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_unchanged() {
        assert_eq!(name(3, NameKind::Plain), "torture:3");
        assert_eq!(lock_key("torture:3"), "lock:{torture:3}");
    }

    #[test]
    fn hostile_names_are_distinct_valid_and_round_trip() {
        let names = list(64, NameKind::Hostile);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        assert!(names.iter().any(|n| n.starts_with('}')));
        assert!(names.iter().any(|n| n.contains('\0')));
        assert!(names.iter().any(|n| n.len() > 400));
        for name in &names {
            assert!(
                name.len() <= lock_core::MAX_NAME_LEN,
                "{} bytes",
                name.len()
            );
            assert_eq!(name_of_key(&lock_key(name)), Some(name.as_str()));
            assert!(!name.contains('#'), "waiter routes split at '#'");
        }
    }
}
