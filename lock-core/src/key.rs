//! Lock names and the Redis keys they map to (the limits on names and durations are in
//! `limits.rs`, Redis Cluster's slot rule in `slot.rs`).

use crate::error::LockError;
use crate::limits::validate_name;

/// The byte put in front of a lock name whose key would otherwise have an empty hash tag
/// (a name that begins with `}`), and in front of a name that begins with it itself, so
/// that no two names share a key. See [`KeyLayout`].
pub const NAME_ESCAPE: char = '\0';

/// How lock names map to Redis keys under one prefix: the layout lock-core uses on every
/// deployment, public so that tools (lockctl, scripts, monitoring) compute the same keys.
///
/// A lock named `N` lives at `<prefix>{N}`; every other key of the lock, and of the
/// semaphore and read-write lock of that name, is that key with a suffix (`:fence`, `:q`,
/// `:sem`, `:sem:q`, `:sem:qe`, `:rw`, `:rw:q`, `:rw:qe`). The braces are a Redis
/// Cluster hash tag, so that all of them live in one slot and one script may touch them
/// together. Redis hashes what lies between the key's first `{` and the first `}` after
/// it, unless that is empty: then the whole key is hashed, and a lock's keys would land in
/// different slots. Two rules keep the tag non-empty whatever bytes a name or the prefix
/// hold:
///
/// - A name that begins with `}`, or with [`NAME_ESCAPE`] (a NUL byte), or is empty, is
///   stored with a NUL byte in front: `}job` lives at `lock:{\0}job}` (hash tag `\0`; all
///   such names of one prefix share that slot). Every other name is stored as it is, so
///   names without a leading `}` or NUL keep the keys they had before this rule.
/// - A prefix whose first `{` is directly followed by `}` (`app{}:`) gets a NUL byte
///   between them (`app{\0}:`): Redis would otherwise hash every key whole. Any other
///   prefix is used as it is; a prefix with a complete hash tag (`{locks}:`) puts every lock
///   of that prefix in one slot.
///
/// No two names map to the same key, and no key of one name is a derived key of another:
/// [`KeyLayout::name_of`] recovers the name from a lock key.
///
/// ```
/// use lock_core::KeyLayout;
///
/// let layout = KeyLayout::new("lock:");
/// assert_eq!(layout.lock_key("orders:7"), "lock:{orders:7}");
/// assert_eq!(layout.lock_key("}job"), "lock:{\0}job}");
/// assert_eq!(layout.name_of("lock:{\0}job}"), Some("}job"));
/// assert_eq!(KeyLayout::new("app{}:").lock_key("job"), "app{\0}:{job}");
/// // The fencing counter, the queue and a semaphore's holders: the lock key and a suffix.
/// let fence = format!("{}:fence", layout.lock_key("}job"));
/// assert_eq!(fence, "lock:{\0}job}:fence");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    /// The prefix (with its empty hash tag filled, if it had one) and the `{`.
    lead: String,
}

impl KeyLayout {
    /// The layout under `prefix` (lock-core's default prefix is `lock:`).
    pub fn new(prefix: &str) -> KeyLayout {
        let mut lead = String::with_capacity(prefix.len() + 2);
        push_prefix(&mut lead, prefix);
        lead.push('{');
        KeyLayout { lead }
    }

    /// What every lock key of this layout begins with: the prefix as stored, and `{`.
    pub fn lead(&self) -> &str {
        &self.lead
    }

    /// The key of the lock named `name` (the name is not checked: see
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) for what lock-core accepts).
    pub fn lock_key(&self, name: &str) -> String {
        let mut key = String::with_capacity(self.lead.len() + name.len() + 2);
        key.push_str(&self.lead);
        push_tagged_name(&mut key, name);
        key
    }

    /// The name whose lock key `key` is, or `None` if `key` is not a lock key of this
    /// layout (another prefix, a derived key such as `...:fence`, or a key this layout never
    /// writes, such as an older version's key of a name that begins with `}`).
    pub fn name_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        let stored = key.strip_prefix(self.lead.as_str())?.strip_suffix('}')?;
        let name = match stored.strip_prefix(NAME_ESCAPE) {
            Some(rest) if needs_escape(rest) => rest,
            Some(_) => return None,
            None if needs_escape(stored) => return None,
            None => stored,
        };
        Some(name)
    }
}

/// Whether `name` is stored with [`NAME_ESCAPE`] in front.
fn needs_escape(name: &str) -> bool {
    name.is_empty() || name.starts_with('}') || name.starts_with(NAME_ESCAPE)
}

/// Appends `prefix`, with a NUL byte inside its first `{}` if its first `{` is directly
/// followed by `}` (an empty hash tag makes Redis hash the whole key).
fn push_prefix(out: &mut String, prefix: &str) {
    match prefix.find('{') {
        Some(at) if prefix[at + 1..].starts_with('}') => {
            out.push_str(&prefix[..=at]);
            out.push(NAME_ESCAPE);
            out.push_str(&prefix[at + 1..]);
        }
        _ => out.push_str(prefix),
    }
}

/// Appends `name` as stored, and the closing `}`.
fn push_tagged_name(out: &mut String, name: &str) {
    if needs_escape(name) {
        out.push(NAME_ESCAPE);
    }
    out.push_str(name);
    out.push('}');
}

/// `<prefix>{<name>}` as [`KeyLayout`] builds it, in one allocation.
pub(crate) fn lock_key(prefix: &str, name: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + name.len() + 4);
    push_prefix(&mut key, prefix);
    key.push('{');
    push_tagged_name(&mut key, name);
    key
}

/// The Redis keys of one lock.
///
/// Every key of a lock is its lock key and a suffix; the lock key carries the name inside a
/// hash tag that is never empty (see [`KeyLayout`]), so that in a Redis Cluster all of them
/// live in one slot and one script may touch them together. The same layout is used on a
/// single server so that data moves between deployments unchanged, and so that no lock name
/// can ever collide with another lock's fencing counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The name as the user gave it.
    pub name: String,
    /// `<prefix>{<name>}` (see [`KeyLayout`]): holds `<token>:<holder label>` with a TTL.
    pub lock: String,
}

impl LockKeys {
    /// Takes the name by value: the acquire path builds one string, not two.
    pub fn new(prefix: &str, name: String) -> Result<LockKeys, LockError> {
        validate_name(&name)?;
        let lock = lock_key(prefix, &name);
        Ok(LockKeys { name, lock })
    }

    /// `<lock key>:fence`: the fencing counter (no TTL). Built only where fencing is used.
    pub fn fence(&self) -> String {
        format!("{}:fence", self.lock)
    }

    /// `<lock key>:q`: the waiter queue (a sorted set of waiting Lockers, in line; see
    /// `scripts/queue.lua`). It exists only while someone waits.
    pub fn queue(&self) -> String {
        format!("{}:q", self.lock)
    }

    /// `<lock key>:released`: the pub/sub channel releases are announced on. The release
    /// script derives the same name from the lock key itself.
    pub fn channel(&self) -> String {
        format!("{}:released", self.lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = LockKeys::new("lock:", "market:7".to_owned()).unwrap();
        assert_eq!(keys.lock, "lock:{market:7}");
        assert_eq!(keys.fence(), "lock:{market:7}:fence");
        assert_eq!(keys.channel(), "lock:{market:7}:released");
        assert_eq!(keys.queue(), "lock:{market:7}:q");
    }
}

/// The key layout against Redis Cluster's slot rule: every key derived from one name (the
/// lock's, its fencing counter and queue, the semaphore's and read-write lock's) lies in
/// one slot whatever bytes the name and the prefix hold, no two names share a key, and the
/// name comes back from its key.
#[cfg(test)]
mod slots {
    use proptest::prelude::*;

    use super::*;
    use crate::slot::cluster_slot;

    /// Every key the crate derives from one name, lock and primitives.
    fn derived(prefix: &str, name: &str) -> Vec<String> {
        let keys = LockKeys {
            name: name.to_owned(),
            lock: lock_key(prefix, name),
        };
        let mut all = vec![keys.lock.clone(), keys.fence(), keys.queue()];
        // The semaphore's and read-write lock's keys (backend::permits checks that
        // PermitKeys builds exactly these).
        for kind in [":sem", ":rw"] {
            let holders = format!("{}{kind}", keys.lock);
            all.extend([format!("{holders}:q"), format!("{holders}:qe"), holders]);
        }
        all
    }

    #[test]
    fn plain_names_keep_their_keys() {
        let layout = KeyLayout::new("lock:");
        for name in ["job", "market:7", "a b ü", "{tenant}:job", "x}y", "a{}"] {
            assert_eq!(layout.lock_key(name), format!("lock:{{{name}}}"));
            assert_eq!(lock_key("lock:", name), layout.lock_key(name));
        }
        assert_eq!(KeyLayout::new("{locks}:").lock_key("a"), "{locks}:{a}");
    }

    #[test]
    fn the_issue_names_get_a_tag() {
        assert_eq!(lock_key("lock:", "}job"), "lock:{\0}job}");
        assert_eq!(lock_key("lock:", "\0x"), "lock:{\0\0x}");
        assert_eq!(lock_key("lock:", ""), "lock:{\0}");
        assert_eq!(lock_key("app{}:", "job"), "app{\0}:{job}");
        for (prefix, name) in [("lock:", "}job"), ("app{}:", "job"), ("{}", "}")] {
            let slots: Vec<u16> = derived(prefix, name)
                .iter()
                .map(|k| cluster_slot(k.as_bytes()))
                .collect();
            assert!(
                slots.windows(2).all(|w| w[0] == w[1]),
                "{prefix:?} {name:?}"
            );
        }
    }

    /// Names and prefixes drawn from what breaks hash tags and key suffixes.
    fn hostile_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => Just("{".to_owned()),
            3 => Just("}".to_owned()),
            1 => Just("{}".to_owned()),
            1 => Just(":q".to_owned()),
            1 => Just(":qe".to_owned()),
            1 => Just(":fence".to_owned()),
            1 => Just(":sem".to_owned()),
            1 => Just(":rw".to_owned()),
            1 => Just(" ".to_owned()),
            1 => Just("\0".to_owned()),
            1 => Just("é日🦀".to_owned()),
            2 => "[a-z0-9:]{1,4}",
            1 => any::<char>().prop_map(String::from),
        ]
    }

    fn hostile_string(max_pieces: usize) -> impl Strategy<Value = String> {
        prop_oneof![
            8 => proptest::collection::vec(hostile_piece(), 0..max_pieces)
                .prop_map(|pieces| pieces.concat()),
            // 1 KiB and more, beginning with a brace.
            1 => (prop_oneof![Just("}"), Just("{"), Just("{}")], "[a-z}{]{1024,1100}")
                .prop_map(|(head, tail)| format!("{head}{tail}")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Every derived key of one name computes the same cluster slot.
        #[test]
        fn derived_keys_share_a_slot(prefix in hostile_string(4), name in hostile_string(8)) {
            let keys = derived(&prefix, &name);
            let first = cluster_slot(keys[0].as_bytes());
            for key in &keys {
                prop_assert_eq!(cluster_slot(key.as_bytes()), first, "{:?} vs {:?}", key, keys[0]);
            }
            // Redis hashed the tag, not the whole key: the tag is within the lock key,
            // so any suffix keeps it.
            let with_other_suffix = format!("{}:anything", keys[0]);
            prop_assert_eq!(cluster_slot(with_other_suffix.as_bytes()), first);
        }

        /// The name comes back from its key, and two names never share any key.
        #[test]
        fn keys_are_one_to_one(
            prefix in hostile_string(4),
            a in hostile_string(8),
            b in hostile_string(8),
        ) {
            let layout = KeyLayout::new(&prefix);
            prop_assert_eq!(layout.lock_key(&a), lock_key(&prefix, &a));
            let key = layout.lock_key(&a);
            prop_assert_eq!(layout.name_of(&key), Some(a.as_str()));
            let fence = format!("{key}:fence");
            prop_assert_eq!(layout.name_of(&fence), None);
            if a != b {
                let (ka, kb) = (derived(&prefix, &a), derived(&prefix, &b));
                for key in &ka {
                    prop_assert!(!kb.contains(key), "{:?} of {:?} is also a key of {:?}", key, a, b);
                }
            }
        }
    }
}
