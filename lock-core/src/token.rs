//! Lease tokens and the value stored on a lock key.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::LockError;

/// Longest holder label stored beside the token, in bytes. Longer labels are cut.
pub const MAX_LABEL_LEN: usize = 200;

/// How many tokens a thread draws from its generator before it is seeded again from the
/// operating system (64 KiB of output, as rand's `ThreadRng` does).
const TOKENS_PER_SEED: u32 = 4096;

thread_local! {
    /// This thread's token generator, and how many more tokens it may give before reseeding.
    static GENERATOR: RefCell<Option<(StdRng, u32)>> = const { RefCell::new(None) };
}

/// A fresh value for the lock key: a new 128-bit token as 32 lowercase hex digits, then
/// `:<label>` when there is a label. One allocation, of the exact size.
///
/// The token comes from a cryptographically secure generator: ChaCha12 (rand's `StdRng`),
/// one per thread, seeded with 256 bits from the operating system's CSPRNG and seeded again
/// every 4096 tokens.
///
/// Why not ask the OS for every token: that is a system call per acquisition, a measurable
/// share of an uncontended lock cycle; ChaCha's output is as unpredictable as its seed, so
/// knowing a lock's name, holder and any number of earlier tokens does not let anyone guess
/// the next one. Never derived from time, pid or a counter. The one caveat is `fork()`
/// without `exec`: a child process would draw the parent's next tokens until its next
/// reseed (lock-core never forks; `lockctl run` forks only to `exec` the command).
///
/// Fails only if the operating system cannot provide a seed.
pub(crate) fn new_value(name: &str, label: Option<&str>) -> Result<String, LockError> {
    let mut bytes = [0u8; 16];
    GENERATOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let generator = match slot.as_mut() {
            Some((generator, left)) if *left > 0 => {
                *left -= 1;
                generator
            }
            _ => {
                let mut seed = [0u8; 32];
                getrandom::fill(&mut seed).map_err(|err| LockError::Entropy {
                    name: name.to_owned(),
                    reason: err.to_string(),
                })?;
                &mut slot
                    .insert((StdRng::from_seed(seed), TOKENS_PER_SEED - 1))
                    .0
            }
        };
        generator.fill_bytes(&mut bytes);
        Ok::<(), LockError>(())
    })?;
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // The digits on the stack, then one copy: a character pushed at a time checks the
    // string's capacity 32 times.
    let mut hex = [0u8; TOKEN_LEN];
    for (pair, byte) in hex.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    // Hex digits are ASCII, so this never fails.
    let hex = std::str::from_utf8(&hex).map_err(|err| LockError::Entropy {
        name: name.to_owned(),
        reason: err.to_string(),
    })?;
    let mut value = String::with_capacity(TOKEN_LEN + label.map_or(0, |label| 1 + label.len()));
    value.push_str(hex);
    if let Some(label) = label {
        value.push(':');
        value.push_str(label);
    }
    Ok(value)
}

/// Length of a token in a value written by [`new_value`].
pub(crate) const TOKEN_LEN: usize = 32;

/// The first byte of a stored value while someone listens for its release (a waiter in the
/// lock's Redis-side queue, `lockctl watch`): the release scripts hand over and announce
/// only then (see `scripts/queue.lua`). Never part of a token: tokens are hex.
pub(crate) const LISTENED_MARK: u8 = b'~';

/// The first byte of a lock's value while it is reserved for the head of its waiter queue
/// (`?<member>`, see `scripts/queue.lua`): no token begins with it, so no holder's
/// compare-and-delete or extension ever matches a reservation.
pub(crate) const RESERVED_MARK: u8 = b'?';

/// A stored value without its listened-for mark.
pub(crate) fn unmarked(value: &str) -> &str {
    value
        .strip_prefix(char::from(LISTENED_MARK))
        .unwrap_or(value)
}

/// Whether a stored value is ours (`value`), marked or not.
pub(crate) fn is_ours(stored: &[u8], value: &str) -> bool {
    let stored = match stored.split_first() {
        Some((&LISTENED_MARK, rest)) => rest,
        _ => stored,
    };
    stored == value.as_bytes()
}

/// Splits a stored value into token and label (without the listened-for mark). Values
/// written by other tools are returned whole as the token.
pub(crate) fn decode_value(value: &str) -> (&str, Option<&str>) {
    match unmarked(value).split_once(':') {
        Some((token, label)) => (token, Some(label)),
        None => (value, None),
    }
}

/// The default holder label: `<host>:<pid>`, with `<app>@` in front when an application name
/// was configured. Cut to [`MAX_LABEL_LEN`] bytes.
pub(crate) fn default_label(app: Option<&str>) -> String {
    let host = hostname();
    let pid = std::process::id();
    let label = match app {
        Some(app) => format!("{app}@{host}:{pid}"),
        None => format!("{host}:{pid}"),
    };
    bound_label(label)
}

/// Cuts a label to [`MAX_LABEL_LEN`] bytes on a character boundary.
pub(crate) fn bound_label(mut label: String) -> String {
    if label.len() > MAX_LABEL_LEN {
        let mut end = MAX_LABEL_LEN;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label.truncate(end);
    }
    label
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_token(name: &str) -> Result<String, LockError> {
        new_value(name, None)
    }

    #[test]
    fn values_are_token_then_label() {
        let value = new_value("x", Some("app@host:1")).unwrap();
        assert_eq!(value.len(), TOKEN_LEN + 1 + "app@host:1".len());
        assert_eq!(value.capacity(), value.len());
        let (token, label) = decode_value(&value);
        assert_eq!((token.len(), label), (TOKEN_LEN, Some("app@host:1")));
    }

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token("x").unwrap();
        let b = new_token("x").unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        assert_ne!(a, b);
        // Every digit is used, at both places of a byte.
        let tokens: Vec<String> = (0..64).map(|_| new_token("x").unwrap()).collect();
        for place in 0..2 {
            let digits: std::collections::HashSet<u8> = tokens
                .iter()
                .flat_map(|t| t.bytes().skip(place).step_by(2))
                .collect();
            assert_eq!(digits.len(), 16, "place {place}");
        }
    }

    #[test]
    fn tokens_stay_distinct_across_reseeds_and_threads() {
        let mut seen = std::collections::HashSet::new();
        // Past two reseeds on this thread, and a batch from other threads (each with a
        // generator of its own, seeded separately).
        for _ in 0..(2 * TOKENS_PER_SEED + 10) {
            assert!(seen.insert(new_token("x").unwrap()));
        }
        let others: Vec<Vec<String>> = (0..4)
            .map(|_| std::thread::spawn(|| (0..100).map(|_| new_token("x").unwrap()).collect()))
            .map(|thread| thread.join().unwrap())
            .collect();
        for token in others.into_iter().flatten() {
            assert!(seen.insert(token), "a token repeated across threads");
        }
    }

    #[test]
    fn value_round_trips() {
        let v = "abc:app@host:1".to_owned();
        assert_eq!(decode_value(&v), ("abc", Some("app@host:1")));
        assert_eq!(decode_value("plain"), ("plain", None));
        assert_eq!(decode_value(&format!("~{v}")), ("abc", Some("app@host:1")));
        assert!(is_ours(format!("~{v}").as_bytes(), &v));
        assert!(is_ours(v.as_bytes(), &v));
        assert!(!is_ours(b"~~abc:app@host:1", &v));
        assert!(!is_ours(b"abc", &v));
    }

    #[test]
    fn labels_are_bounded() {
        let long = "ü".repeat(MAX_LABEL_LEN);
        let cut = bound_label(long);
        assert!(cut.len() <= MAX_LABEL_LEN);
        assert!(default_label(Some("billing")).starts_with("billing@"));
    }
}
