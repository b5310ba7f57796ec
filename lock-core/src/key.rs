//! Lock names, the Redis keys they map to, and the limits on names and durations.

use std::time::Duration;

use crate::LockError;

/// Longest accepted lock name, in bytes. Longer names are refused with
/// [`LockError::InvalidName`] before anything is sent to Redis.
pub const MAX_NAME_LEN: usize = 512;

/// Shortest accepted TTL.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// Longest accepted TTL (24 hours). Work that runs longer should hold a shorter lease with
/// auto-renewal, so that a crashed holder does not block everyone for a day.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Longest accepted `wait` (24 hours).
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

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

/// Checks a lock name: not empty, at most [`MAX_NAME_LEN`] bytes. Any other bytes are fine:
/// names travel to Redis only as key arguments, never inside script text.
pub fn validate_name(name: &str) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        "it is empty; give every lock a name that says what it protects"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than lock_core::MAX_NAME_LEN (512) bytes; hash long identifiers first"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidName {
        name: shorten(name),
        reason,
    })
}

/// Checks a TTL against [`MIN_TTL`]..=[`MAX_TTL`].
pub fn validate_ttl(name: &str, ttl: Duration) -> Result<(), LockError> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        return Ok(());
    }
    Err(LockError::InvalidDuration {
        name: shorten(name),
        what: "ttl",
        value: ttl,
        reason: format!("it must be between {MIN_TTL:?} and {MAX_TTL:?}"),
    })
}

/// Checks a wait against `0..=MAX_WAIT`.
pub fn validate_wait(name: &str, wait: Duration) -> Result<(), LockError> {
    if wait <= MAX_WAIT {
        return Ok(());
    }
    Err(LockError::InvalidDuration {
        name: shorten(name),
        what: "wait",
        value: wait,
        reason: format!("it must be at most {MAX_WAIT:?}"),
    })
}

/// Keeps error messages readable when someone passes a megabyte as a name.
fn shorten(name: &str) -> String {
    const SHOWN: usize = 64;
    if name.len() <= SHOWN {
        return name.to_owned();
    }
    let mut end = SHOWN;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &name[..end], name.len())
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

    #[test]
    fn names_are_bounded() {
        assert!(matches!(
            validate_name(""),
            Err(LockError::InvalidName { .. })
        ));
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        let err = validate_name(&"é".repeat(MAX_NAME_LEN)).unwrap_err();
        assert!(err.to_string().contains("bytes"), "{err}");
    }

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl("a", Duration::ZERO).is_err());
        assert!(validate_ttl("a", MIN_TTL).is_ok());
        assert!(validate_ttl("a", MAX_TTL).is_ok());
        assert!(validate_ttl("a", MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(validate_wait("a", Duration::ZERO).is_ok());
        assert!(validate_wait("a", MAX_WAIT * 2).is_err());
    }
}

/// The number of key slots of a Redis Cluster.
pub(crate) const CLUSTER_SLOTS: u16 = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum of Redis Cluster's key
/// slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

/// Redis Cluster's slot of `key`: the CRC16 of what lies between the first `{` and the
/// first `}` after it, if that is not empty; else of the whole key.
pub(crate) fn cluster_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % CLUSTER_SLOTS
}

/// The key layout against Redis Cluster's slot rule: every key derived from one name (the
/// lock's, its fencing counter and queue, the semaphore's and read-write lock's) lies in
/// one slot whatever bytes the name and the prefix hold, no two names share a key, and the
/// name comes back from its key.
#[cfg(test)]
mod slots {
    use proptest::prelude::*;

    use super::*;

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
    fn crc16_and_slot_match_redis() {
        // The examples of the Redis Cluster specification and known slots.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(cluster_slot(b"foo"), 12182);
        assert_eq!(
            cluster_slot(b"{user1000}.following"),
            cluster_slot(b"{user1000}.followers")
        );
        assert_eq!(cluster_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(cluster_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
        assert_eq!(cluster_slot(b"foo{bar}{zap}"), crc16(b"bar") % 16384);
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

/// Property tests: any name and any duration give `Ok` or the precise error, never a panic,
/// and the name in the error is cut on a character boundary.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// What `shorten` may keep of a name: all of it up to 64 bytes, else at most 64 bytes
    /// cut on a character boundary (so at least 61) and the full length.
    fn check_shortened(name: &str, shown: &str) -> Result<(), TestCaseError> {
        if name.len() <= 64 {
            prop_assert_eq!(shown, name);
            return Ok(());
        }
        let suffix = format!("... ({} bytes)", name.len());
        let kept = shown.strip_suffix(&suffix);
        prop_assert!(kept.is_some(), "{:?} lacks {:?}", shown, suffix);
        let kept = kept.unwrap_or_default();
        prop_assert!(name.starts_with(kept), "{:?} is not a prefix", kept);
        prop_assert!((61..=64).contains(&kept.len()), "kept {} bytes", kept.len());
        // The next character would not have fit.
        let next = name[kept.len()..].chars().next().map_or(0, char::len_utf8);
        prop_assert!(kept.len() + next > 64);
        Ok(())
    }

    fn check_name(name: &str) -> Result<(), TestCaseError> {
        let result = validate_name(name);
        let valid = !name.is_empty() && name.len() <= MAX_NAME_LEN;
        match result {
            Ok(()) => prop_assert!(valid, "{} bytes accepted", name.len()),
            Err(LockError::InvalidName {
                name: ref shown,
                reason,
            }) => {
                prop_assert!(!valid, "{} bytes refused", name.len());
                let expected = if name.is_empty() {
                    "empty"
                } else {
                    "MAX_NAME_LEN (512)"
                };
                prop_assert!(reason.contains(expected), "{}", reason);
                check_shortened(name, shown)?;
                let err = result.unwrap_err();
                prop_assert!(err.to_string().contains(reason));
            }
            Err(other) => prop_assert!(false, "not InvalidName: {other:?}"),
        }
        Ok(())
    }

    /// Characters of every UTF-8 width, ASCII most often.
    fn mixed_char() -> impl Strategy<Value = char> {
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => Just('é'),
            1 => Just('日'),
            1 => Just('🦀'),
            1 => any::<char>(),
        ]
    }

    /// Durations anywhere, and near the bounds to the nanosecond.
    fn duration() -> impl Strategy<Value = Duration> {
        let bound = proptest::sample::select(&[Duration::ZERO, MIN_TTL, MAX_TTL, MAX_WAIT][..]);
        prop_oneof![
            2 => any::<Duration>(),
            1 => Just(Duration::MAX),
            4 => (bound, -2_000_000i64..2_000_000).prop_map(|(bound, delta)| {
                let delta_abs = Duration::from_nanos(delta.unsigned_abs());
                if delta < 0 {
                    bound.saturating_sub(delta_abs)
                } else {
                    bound + delta_abs
                }
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any string: accepted exactly when 1..=512 bytes, else `InvalidName` with its reason.
        #[test]
        fn any_name(name in prop_oneof![
            any::<String>(),
            proptest::collection::vec(mixed_char(), 0..700).prop_map(String::from_iter),
        ]) {
            check_name(&name)?;
        }

        /// Names at and around 512 bytes (the limit) and 64 bytes (where the message cuts),
        /// with a multi-byte character across the boundary.
        #[test]
        fn names_around_the_limits(
            limit in prop_oneof![Just(MAX_NAME_LEN), Just(64usize)],
            offset in -4isize..=4,
            cut in prop_oneof![Just('é'), Just('日'), Just('🦀'), Just('x')],
            tail in proptest::collection::vec(mixed_char(), 0..4),
            filler in prop_oneof![Just('a'), Just('é'), Just('日'), Just('🦀')],
        ) {
            // Fill up to `limit + offset` bytes with `filler` (as far as it fits), then `cut`.
            let target = limit.saturating_add_signed(offset);
            let mut name = String::new();
            while name.len() + filler.len_utf8() <= target {
                name.push(filler);
            }
            while name.len() < target {
                name.push('a');
            }
            name.push(cut);
            name.extend(tail);
            check_name(&name)?;
            let shorter: String = name.chars().take(name.chars().count() - 1).collect();
            check_name(&shorter)?;
        }

        /// Any TTL: accepted exactly within MIN_TTL..=MAX_TTL, else `InvalidDuration` naming
        /// `ttl`, the value as given and the range.
        #[test]
        fn any_ttl(ttl in duration(), name in "(.{0,8}|.{60,80})") {
            match validate_ttl(&name, ttl) {
                Ok(()) => prop_assert!((MIN_TTL..=MAX_TTL).contains(&ttl), "{:?} accepted", ttl),
                Err(err) => {
                    let LockError::InvalidDuration { name: ref shown, what, value, ref reason } = err else {
                        return Err(TestCaseError::fail(format!("not InvalidDuration: {err:?}")));
                    };
                    prop_assert!(!(MIN_TTL..=MAX_TTL).contains(&ttl), "{:?} refused", ttl);
                    prop_assert_eq!(what, "ttl");
                    prop_assert_eq!(value, ttl);
                    prop_assert!(reason.contains("between 1ms and 86400s"), "{}", reason);
                    check_shortened(&name, shown)?;
                    let msg = err.to_string();
                    prop_assert!(msg.contains(&format!("{ttl:?}")), "{}", msg);
                }
            }
        }

        /// Any wait: accepted exactly up to MAX_WAIT, zero included.
        #[test]
        fn any_wait(wait in duration(), name in "(.{0,8}|.{60,80})") {
            match validate_wait(&name, wait) {
                Ok(()) => prop_assert!(wait <= MAX_WAIT, "{:?} accepted", wait),
                Err(err) => {
                    let LockError::InvalidDuration { name: ref shown, what, value, ref reason } = err else {
                        return Err(TestCaseError::fail(format!("not InvalidDuration: {err:?}")));
                    };
                    prop_assert!(wait > MAX_WAIT, "{:?} refused", wait);
                    prop_assert_eq!(what, "wait");
                    prop_assert_eq!(value, wait);
                    prop_assert!(reason.contains("at most 86400s"), "{}", reason);
                    check_shortened(&name, shown)?;
                    let msg = err.to_string();
                    prop_assert!(msg.contains(&format!("{wait:?}")), "{}", msg);
                }
            }
        }
    }
}
