//! Passwords out of messages.

/// A Redis URL with its user and password replaced by `***`, for messages and logs (this
/// crate's errors show URLs this way): `redis://app:s3cret@db:6379/0` becomes
/// `redis://***@db:6379/0`; a URL without credentials is returned as it is. Not part of
/// the public API: lockctl reaches it through `__private`.
///
/// ```compile_fail
/// // Not exported at the crate root.
/// let _ = lock_core::redact_url("redis://app:s3cret@db:6379/0");
/// ```
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redact_url("redis://user:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact_url("redis://host/"), "redis://host/");
    }
}
