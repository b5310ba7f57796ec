//! Redis refusing the client's settings (a password required and not given, a wrong one, a
//! database that does not exist): told apart from an outage, which may pass by itself, so
//! that such a failure is reported at once with what to change.

/// Why `err`, from the server `at` ("the server at redis://..."), means the client's
/// settings do not fit the server, so that retrying cannot help; `None` for every other
/// error. What to change is part of the answer.
pub fn misconfiguration(err: &redis::RedisError, at: &str) -> Option<String> {
    let code = err.code().unwrap_or_default();
    let text = err.to_string();
    // Redis refuses a large request before authentication with a protocol error that
    // says "unauthenticated" (and closes the connection).
    if code == "NOAUTH" || text.contains("NOAUTH") || text.contains("unauthenticated") {
        return Some(format!(
            "{at} requires a password (NOAUTH: authentication required) and none was given: \
             put it in the URL, redis://:PASSWORD@host:port/ (redis://USER:PASSWORD@host:port/ \
             for an ACL user; lockctl reads --url or REDIS_URL)"
        ));
    }
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || code == "WRONGPASS"
        || text.contains("WRONGPASS")
    {
        return Some(format!(
            "{at} refused the credentials (WRONGPASS: wrong user or password): check the \
             user and password in the URL, redis://USER:PASSWORD@host:port/"
        ));
    }
    if text.contains("DB index is out of range") {
        return Some(format!(
            "{at} has no such database (DB index is out of range): use a database number \
             below the server's `databases` setting (16 by default) at the end of the URL, \
             redis://host:port/0"
        ));
    }
    if text.contains("refused to switch database") {
        return Some(format!(
            "{at} refused to switch to the URL's database ({text}): check the database number \
             and the ACL user's permission for SELECT"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_of_the_settings_say_what_to_change() {
        let noauth = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "NOAUTH",
            "Authentication required.".to_owned(),
        ));
        let said = misconfiguration(&noauth, "the server").expect("NOAUTH");
        assert!(said.contains("redis://:PASSWORD@host:port/"), "{said}");
        let io = redis::RedisError::from(std::io::Error::other("connection reset"));
        assert_eq!(misconfiguration(&io, "the server"), None);
    }
}
