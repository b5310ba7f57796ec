//! The limits on lock names and durations, and the checks that refuse what lies outside
//! them with [`LockError::InvalidName`] and [`LockError::InvalidDuration`]; the longest
//! chain of waiters deadlock detection follows ([`MAX_WAIT_CHAIN`]).

use std::time::Duration;

use crate::error::{shown, LockError};

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

/// Most locks in a chain of waiters that deadlock detection follows: a request that waits
/// while its task holds other locks is checked against the chain of holders it would wait
/// behind (the holder of the lock it wants, waiting for another lock, whose holder waits
/// for another...). Every cycle of up to this many locks is told to exactly one of its
/// requests as [`LockError::Deadlock`]; a request whose chain, its own lock included,
/// would be longer is refused with [`LockError::WaitChainTooLong`] instead of waiting (so
/// no longer cycle can form unseen). A request whose task holds nothing is never refused.
pub const MAX_WAIT_CHAIN: usize = 64;

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
        reason: format!(
            "it must be between {} and {}",
            shown(MIN_TTL),
            shown(MAX_TTL)
        ),
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
        reason: format!("it must be at most {}", shown(MAX_WAIT)),
    })
}

/// Checks a minimum hold: more than zero, at most [`MAX_TTL`] (the release sets what is
/// left of it as the key's TTL).
pub(crate) fn validate_hold_at_least(name: &str, hold: Duration) -> Result<(), LockError> {
    if hold.is_zero() || hold > MAX_TTL {
        return Err(LockError::InvalidDuration {
            name: shorten(name),
            what: "hold_at_least",
            value: hold,
            reason: format!(
                "it must be more than zero and at most {}; leave it out for no minimum hold",
                shown(MAX_TTL)
            ),
        });
    }
    Ok(())
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
                    prop_assert!(reason.contains("between 1ms and 24h"), "{}", reason);
                    check_shortened(&name, shown)?;
                    let msg = err.to_string();
                    prop_assert!(msg.contains(&crate::error::shown(ttl)), "{}", msg);
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
                    prop_assert!(reason.contains("at most 24h"), "{}", reason);
                    check_shortened(&name, shown)?;
                    let msg = err.to_string();
                    prop_assert!(msg.contains(&crate::error::shown(wait)), "{}", msg);
                }
            }
        }
    }
}
