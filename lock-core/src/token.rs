//! Lease tokens and the value stored on a lock key.

use crate::LockError;

/// Longest holder label stored beside the token, in bytes. Longer labels are cut.
pub const MAX_LABEL_LEN: usize = 200;

/// A fresh 128-bit token from the operating system's CSPRNG, as 32 lowercase hex digits.
///
/// Never derived from time, pid or a counter: knowing a lock's name and holder must not let
/// anyone guess the token that releases it.
pub(crate) fn new_token(name: &str) -> Result<String, LockError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| LockError::Entropy {
        name: name.to_owned(),
        reason: err.to_string(),
    })?;
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(32);
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    Ok(hex)
}

/// The value stored on the lock key: `<token>` or `<token>:<label>`.
pub(crate) fn encode_value(token: &str, label: Option<&str>) -> String {
    match label {
        Some(label) => format!("{token}:{label}"),
        None => token.to_owned(),
    }
}

/// Splits a stored value into token and label. Values written by other tools are returned
/// whole as the token.
pub(crate) fn decode_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once(':') {
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

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token("x").unwrap();
        let b = new_token("x").unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn value_round_trips() {
        let v = encode_value("abc", Some("app@host:1"));
        assert_eq!(decode_value(&v), ("abc", Some("app@host:1")));
        assert_eq!(decode_value("plain"), ("plain", None));
    }

    #[test]
    fn labels_are_bounded() {
        let long = "ü".repeat(MAX_LABEL_LEN);
        let cut = bound_label(long);
        assert!(cut.len() <= MAX_LABEL_LEN);
        assert!(default_label(Some("billing")).starts_with("billing@"));
    }
}
