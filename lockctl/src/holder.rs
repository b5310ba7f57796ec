//! What is stored on a lock key, who it names as holder, and how names and labels are shown.

use std::borrow::Cow;

/// The stored value `<token>:<label>`, split. Values written by other tools (no `:`) are
/// all token.
pub fn split_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once(':') {
        Some((token, label)) => (token, Some(label)),
        None => (value, None),
    }
}

/// A holder label, and its parts when it has lock-core's default shape `[app@]host:pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The label as stored.
    pub label: String,
    /// The application name, if the label carries one.
    pub app: Option<String>,
    /// The host name, if the label has the default shape.
    pub host: Option<String>,
    /// The process id, if the label has the default shape.
    pub pid: Option<u32>,
}

impl Holder {
    /// Reads a label. A custom label that is not `[app@]host:pid` keeps only `label`.
    ///
    /// ```
    /// let holder = lockctl::Holder::parse("lockctl/backup.sh@web-1:4242");
    /// assert_eq!(holder.app.as_deref(), Some("lockctl/backup.sh"));
    /// assert_eq!(holder.host.as_deref(), Some("web-1"));
    /// assert_eq!(holder.pid, Some(4242));
    /// ```
    pub fn parse(label: &str) -> Holder {
        let mut holder = Holder {
            label: label.to_owned(),
            app: None,
            host: None,
            pid: None,
        };
        let Some((head, pid)) = label.rsplit_once(':') else {
            return holder;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            return holder;
        };
        let (app, host) = match head.rsplit_once('@') {
            Some((app, host)) => (Some(app), host),
            None => (None, head),
        };
        if host.is_empty() {
            return holder;
        }
        holder.app = app.filter(|a| !a.is_empty()).map(str::to_owned);
        holder.host = Some(host.to_owned());
        holder.pid = Some(pid);
        holder
    }
}

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
    fn default_labels_split_into_parts() {
        let h = Holder::parse("web-1:42");
        assert_eq!(
            (h.app, h.host.as_deref(), h.pid),
            (None, Some("web-1"), Some(42))
        );
        let h = Holder::parse("billing@worker@eu:7");
        assert_eq!(h.app.as_deref(), Some("billing@worker"));
        assert_eq!(h.host.as_deref(), Some("eu"));
    }

    #[test]
    fn custom_labels_stay_whole() {
        for label in ["nightly job", "a:b", "x@:1", ""] {
            let h = Holder::parse(label);
            assert_eq!(h.label, label);
            assert_eq!((h.host, h.pid), (None, None), "{label}");
        }
    }

    #[test]
    fn values_split_at_the_first_colon() {
        assert_eq!(split_value("0123:app@h:1"), ("0123", Some("app@h:1")));
        assert_eq!(split_value("foreign"), ("foreign", None));
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(display_safe("ünï cødé"), "ünï cødé");
        assert_eq!(display_safe("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
    }
}
