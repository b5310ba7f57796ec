//! What is stored on a lock key, who it names as holder, and how names and labels are shown.

use std::borrow::Cow;

/// The stored value `<token>:<label>`, split, without the `~` lock-core puts in front while
/// someone waits for the lock's release. Values written by other tools (no `:`) are all
/// token.
pub fn split_value(value: &str) -> (&str, Option<&str>) {
    let value = value.strip_prefix('~').unwrap_or(value);
    match value.split_once(':') {
        Some((token, label)) => (token, Some(label)),
        None => (value, None),
    }
}

/// A holder label and its parts: lock-core's, so that lockctl reads labels exactly as the
/// library writes them.
pub use lock_core::Holder;

/// Shows `text` as is, unless it holds control characters (a newline in a lock name, an
/// escape sequence in a label): then escaped, so one lock stays on one line and cannot
/// drive the terminal.
pub fn display_safe(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) {
        Cow::Owned(text.escape_debug().to_string())
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_at_the_first_colon() {
        assert_eq!(split_value("0123:app@h:1"), ("0123", Some("app@h:1")));
        assert_eq!(split_value("foreign"), ("foreign", None));
        assert_eq!(split_value("~0123:app@h:1"), ("0123", Some("app@h:1")));
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(display_safe("ünï cødé"), "ünï cødé");
        assert_eq!(display_safe("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
    }
}
