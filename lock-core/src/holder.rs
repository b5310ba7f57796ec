//! Who holds a lock: the holder label stored beside the token, read back into its parts.

/// A holder label, and its parts when it has lock-core's default shape `[app@]host:pid`
/// (see [`LockerBuilder::app_name`](crate::LockerBuilder::app_name)).
///
/// ```
/// let holder = lock_core::Holder::parse("billing@web-1:4242");
/// assert_eq!(holder.app.as_deref(), Some("billing"));
/// assert_eq!(holder.host.as_deref(), Some("web-1"));
/// assert_eq!(holder.pid, Some(4242));
///
/// // A custom label keeps only `label`.
/// let custom = lock_core::Holder::parse("nightly import");
/// assert_eq!((custom.host, custom.pid), (None, None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Reads a label. A custom label that is not `[app@]host:pid` keeps only `label`. The
    /// host is what follows the last `@` (an application name may contain `@`), the pid what
    /// follows the last `:`.
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
        holder.app = app.filter(|app| !app.is_empty()).map(str::to_owned);
        holder.host = Some(host.to_owned());
        holder.pid = Some(pid);
        holder
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
        assert_eq!(
            Holder::parse(&crate::token::default_label(Some("app"))).pid,
            Some(std::process::id())
        );
    }

    #[test]
    fn custom_labels_stay_whole() {
        for label in ["nightly job", "a:b", "x@:1", "", ":", "@h:99999999999"] {
            let h = Holder::parse(label);
            assert_eq!(h.label, label);
            assert_eq!((h.host, h.pid), (None, None), "{label}");
        }
    }
}
