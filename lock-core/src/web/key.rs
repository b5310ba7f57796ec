//! Lock keys derived from a request: any closure over [`http::request::Parts`], and ready-made
//! ones for a header ([`header`]) and, with the `axum` feature, path parameters (`path`).

use std::borrow::Cow;
use std::fmt;

use http::header::HeaderName;
use http::request::Parts;
use http::StatusCode;

#[cfg(feature = "axum")]
pub use super::axum::{path, PathKey};

/// Derives the lock name of a request. The layer calls it before taking the lock; an `Err`
/// answers the request without calling the inner service and without touching Redis.
///
/// Implemented for every `Fn(&Parts) -> K` closure where `K` is a `String`, an
/// `Option<String>` (`None` answers 400) or a `Result<String, KeyRejection>`, and for the
/// helpers of this module.
///
/// ```
/// use lock_core::web::{KeyRejection, LockKey};
/// use http::request::Parts;
///
/// // The tenant and the order, from a header and the query string.
/// let key = |parts: &Parts| -> Result<String, KeyRejection> {
///     let tenant = parts
///         .headers
///         .get("x-tenant")
///         .and_then(|v| v.to_str().ok())
///         .ok_or_else(|| KeyRejection::bad_request("missing `X-Tenant` header"))?;
///     Ok(format!("{tenant}:{}", parts.uri.query().unwrap_or_default()))
/// };
/// let (mut parts, ()) = http::Request::get("/pay?order=7")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(key.lock_key(&mut parts).unwrap(), "acme:order=7");
/// ```
pub trait LockKey: Send + Sync + 'static {
    /// The lock name for this request. `parts` is mutable only so that framework extractors
    /// that need `&mut Parts` can be used; implementations must not change the request.
    fn lock_key(&self, parts: &mut Parts) -> Result<String, KeyRejection>;
}

impl<F, K> LockKey for F
where
    F: Fn(&Parts) -> K + Send + Sync + 'static,
    K: IntoLockKey,
{
    fn lock_key(&self, parts: &mut Parts) -> Result<String, KeyRejection> {
        self(parts).into_lock_key()
    }
}

/// What a key closure may return.
pub trait IntoLockKey {
    /// The lock name, or why the request has none.
    fn into_lock_key(self) -> Result<String, KeyRejection>;
}

impl IntoLockKey for String {
    fn into_lock_key(self) -> Result<String, KeyRejection> {
        Ok(self)
    }
}

impl IntoLockKey for Option<String> {
    fn into_lock_key(self) -> Result<String, KeyRejection> {
        self.ok_or_else(|| {
            KeyRejection::bad_request("this request lacks the value its lock is named after")
        })
    }
}

impl IntoLockKey for Result<String, KeyRejection> {
    fn into_lock_key(self) -> Result<String, KeyRejection> {
        self
    }
}

/// Why a request has no lock key: a client error (400, with a detail the client sees) or a
/// server misconfiguration (500, with a message that is logged and not sent).
///
/// ```
/// use lock_core::web::KeyRejection;
/// use http::StatusCode;
///
/// let missing = KeyRejection::bad_request("missing `Idempotency-Key` header");
/// assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(missing.detail(), "missing `Idempotency-Key` header");
///
/// let broken = KeyRejection::server_error("route `/orders` has no `{id}` parameter");
/// assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
/// assert!(!broken.detail().contains("{id}"), "internal messages are not sent");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRejection {
    status: StatusCode,
    message: Cow<'static, str>,
}

impl KeyRejection {
    /// The request lacks what its key is made from (a header, a parameter): 400, and
    /// `detail` is sent to the client.
    #[must_use]
    pub fn bad_request(detail: impl Into<Cow<'static, str>>) -> KeyRejection {
        KeyRejection {
            status: StatusCode::BAD_REQUEST,
            message: detail.into(),
        }
    }

    /// The key cannot be built because of how the service is set up (e.g. a path key on a
    /// route without that parameter): 500; `message` is logged, the client gets a generic
    /// detail.
    #[must_use]
    pub fn server_error(message: impl Into<Cow<'static, str>>) -> KeyRejection {
        KeyRejection {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }

    /// The status to answer with.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// What the client is told.
    #[must_use]
    pub fn detail(&self) -> &str {
        if self.status.is_client_error() {
            &self.message
        } else {
            "the request could not be guarded because of a server-side problem"
        }
    }

    /// The full message, for logs.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for KeyRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no lock key for this request: {}", self.message)
    }
}

impl std::error::Error for KeyRejection {}

/// A key made of a request header's value, e.g. `Idempotency-Key`: requests carrying the same
/// value never run at once. A missing, empty or non-ASCII header answers 400.
///
/// Give each route its own [`prefix`](HeaderKey::prefix) so that the same header value on
/// two routes names two locks.
///
/// # Panics
///
/// If `name` is not a valid header name (a programming error, caught at startup).
///
/// ```
/// use lock_core::web::{key, LockKey};
///
/// let key = key::header("Idempotency-Key").prefix("webhooks:");
/// let (mut parts, ()) = http::Request::post("/webhooks/payments")
///     .header("idempotency-key", "evt_123")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(key.lock_key(&mut parts).unwrap(), "webhooks:evt_123");
///
/// let (mut bare, ()) = http::Request::post("/webhooks/payments").body(()).unwrap().into_parts();
/// let missing = key.lock_key(&mut bare).unwrap_err();
/// assert_eq!(missing.status(), 400);
/// assert_eq!(missing.detail(), "missing `idempotency-key` header");
/// ```
#[must_use]
pub fn header(name: &str) -> HeaderKey {
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(name) => HeaderKey {
            name,
            prefix: String::new(),
        },
        Err(_) => panic!("lock_core::web::key::header: {name:?} is not a valid header name"),
    }
}

/// The key [`header`] builds.
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    prefix: String,
}

impl HeaderKey {
    /// Puts `prefix` in front of the header's value (e.g. `"webhooks:"`).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> HeaderKey {
        self.prefix = prefix.into();
        self
    }
}

impl LockKey for HeaderKey {
    fn lock_key(&self, parts: &mut Parts) -> Result<String, KeyRejection> {
        let mut values = parts.headers.get_all(&self.name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            let why = if parts.headers.contains_key(&self.name) {
                "more than one"
            } else {
                "missing"
            };
            return Err(KeyRejection::bad_request(format!(
                "{why} `{}` header",
                self.name
            )));
        };
        let value = value.to_str().map(str::trim).unwrap_or_default();
        if value.is_empty() {
            return Err(KeyRejection::bad_request(format!(
                "the `{}` header must be a non-empty ASCII string",
                self.name
            )));
        }
        Ok(format!("{}{value}", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &[u8])]) -> Parts {
        let mut request = http::Request::post("/x");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_values_are_trimmed_and_prefixed() {
        let key = header("Idempotency-Key").prefix("hooks:");
        let mut p = parts(&[("idempotency-key", b" abc ")]);
        assert_eq!(key.lock_key(&mut p).unwrap(), "hooks:abc");
    }

    #[test]
    fn bad_headers_are_400_never_an_empty_key() {
        let key = header("Idempotency-Key").prefix("hooks:");
        for headers in [
            vec![],
            vec![("idempotency-key", &b""[..])],
            vec![("idempotency-key", &b"   "[..])],
            vec![("idempotency-key", &b"caf\xc3\xa9"[..])],
            vec![
                ("idempotency-key", &b"a"[..]),
                ("idempotency-key", &b"b"[..]),
            ],
        ] {
            let err = key.lock_key(&mut parts(&headers)).unwrap_err();
            assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        }
    }

    #[test]
    #[should_panic(expected = "not a valid header name")]
    fn invalid_header_names_panic_at_startup() {
        let _ = header("bad header");
    }

    #[test]
    fn closures_may_return_string_option_or_result() {
        let mut p = parts(&[]);
        let plain = |parts: &Parts| format!("m:{}", parts.method);
        assert_eq!(plain.lock_key(&mut p).unwrap(), "m:POST");
        let none = |_: &Parts| None::<String>;
        assert_eq!(none.lock_key(&mut p).unwrap_err().status(), 400);
        let rejected = |_: &Parts| Err::<String, _>(KeyRejection::server_error("oops"));
        let err = rejected.lock_key(&mut p).unwrap_err();
        assert_eq!(err.status(), 500);
        assert_eq!(err.message(), "oops");
        assert!(!err.detail().contains("oops"));
    }
}
