//! How a lock that cannot be had becomes an HTTP answer: an RFC 9457 problem body, a status
//! chosen by [`ErrorResponses`], a `Retry-After` header for contention, and a log line.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;

use crate::LockError;

/// The media type of problem bodies (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// What every process answers when a lock is busy, until [`set_error_responses`] says
/// otherwise.
static DEFAULT: RwLock<ErrorResponses> = RwLock::new(ErrorResponses::new());

/// How lock failures are turned into HTTP responses.
///
/// | failure | status | body detail |
/// |---|---|---|
/// | [`Busy`](LockError::Busy), [`Timeout`](LockError::Timeout) | `busy_status` (409 by default), with `Retry-After` | names the lock |
/// | [`Deadlock`](LockError::Deadlock), [`WaitChainTooLong`](LockError::WaitChainTooLong) | `busy_status` (409 by default), with `Retry-After: 1` | names the lock waited for, not the cycle's holders |
/// | [`LimitReached`](LockError::LimitReached) (`#[redis_locked(permits = N)]` on a handler) | 429, with `Retry-After`, as `LockLayer::permits` | names the key and N |
/// | [`Connection`](LockError::Connection), [`Misconfigured`](LockError::Misconfigured), [`Redis`](LockError::Redis), [`SlotMigrating`](LockError::SlotMigrating), [`NoQuorum`](LockError::NoQuorum), [`NotReplicated`](LockError::NotReplicated) | 503 | generic: no URL, host or Redis error text |
/// | [`InvalidName`](LockError::InvalidName) (a key built from request data is empty or too long) | 400 | generic |
/// | [`Lost`](LockError::Lost), [`CapacityMismatch`](LockError::CapacityMismatch) and configuration errors | 500 | generic |
///
/// Why 409 Conflict by default rather than 423 Locked: 409 means "the request conflicts
/// with the current state of the target resource", which is exactly "another request for
/// this order is in flight", and it is what the IETF `Idempotency-Key` draft and the large
/// payment APIs answer for a concurrent request with the same key. 423 comes from WebDAV
/// (RFC 4918), where it describes a resource locked by a client-visible WebDAV lock; generic
/// clients, proxies and API gateways know it less well. Pick 423 (or 429, 503, ...) with
/// [`ErrorResponses::busy_status`] if your clients expect it.
///
/// ```
/// use lock_core::web::ErrorResponses;
/// use http::StatusCode;
///
/// let responses = ErrorResponses::new().busy_status(StatusCode::LOCKED);
/// assert_eq!(responses.status_when_busy(), StatusCode::LOCKED);
/// assert_eq!(ErrorResponses::default().status_when_busy(), StatusCode::CONFLICT);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorResponses {
    busy_status: StatusCode,
}

impl Default for ErrorResponses {
    fn default() -> Self {
        ErrorResponses::new()
    }
}

impl ErrorResponses {
    /// The defaults: 409 Conflict for a busy lock.
    #[must_use]
    pub const fn new() -> ErrorResponses {
        ErrorResponses {
            busy_status: StatusCode::CONFLICT,
        }
    }

    /// The status for a busy lock (and a `wait` that ran out). 409 by default.
    #[must_use]
    pub const fn busy_status(mut self, status: StatusCode) -> ErrorResponses {
        self.busy_status = status;
        self
    }

    /// The status used for a busy lock.
    #[must_use]
    pub const fn status_when_busy(&self) -> StatusCode {
        self.busy_status
    }

    /// The problem that describes `err` to a client. Pure: no logging.
    ///
    /// ```
    /// use lock_core::{web::ErrorResponses, LockError};
    /// use std::time::Duration;
    ///
    /// let err = LockError::Busy {
    ///     name: "orders:7".into(),
    ///     holder: Some("web-1@host-a:4242".into()),
    ///     retry_after: Some(Duration::from_millis(2300)),
    ///     wait_setting: Default::default(),
    /// };
    /// let problem = ErrorResponses::new().problem(&err);
    /// assert_eq!(problem.status().as_u16(), 409);
    /// assert_eq!(problem.retry_after_secs(), Some(3));
    /// assert!(problem.detail().contains("`orders:7` is busy"));
    /// assert!(!problem.to_json().contains("host-a"), "holder labels stay private");
    /// ```
    #[must_use]
    pub fn problem(&self, err: &LockError) -> Problem {
        match err {
            LockError::Busy {
                name, retry_after, ..
            } => Problem::new(
                self.busy_status,
                format!("lock `{name}` is busy: another request holds it; retry later"),
            )
            .with_lock(name)
            .with_retry_after(retry_after.unwrap_or(UNKNOWN_RETRY)),
            LockError::Timeout {
                name,
                waited,
                retry_after,
                ..
            } => Problem::new(
                self.busy_status,
                format!(
                    "lock `{name}` stayed busy for {} ms: another request holds it; retry later",
                    waited.as_millis()
                ),
            )
            .with_lock(name)
            .with_retry_after(retry_after.unwrap_or(UNKNOWN_RETRY)),
            // The request closed a cycle of waiters and gave up so that the others get
            // through: a conflict the client may retry (at once, or after the others).
            LockError::Deadlock { name, .. } => Problem::new(
                self.busy_status,
                format!("lock `{name}` would deadlock with other requests holding what this one needs; retry"),
            )
            .with_lock(name)
            .with_retry_after(UNKNOWN_RETRY),
            // The same, for a chain of waiters too long to check for a cycle.
            LockError::WaitChainTooLong { name, .. } => Problem::new(
                self.busy_status,
                format!("lock `{name}` is waited for behind too many other requests holding what this one needs; retry"),
            )
            .with_lock(name)
            .with_retry_after(UNKNOWN_RETRY),
            LockError::LimitReached { permits, .. } => {
                super::held::limit_problem(err, *permits, self)
            }
            LockError::InvalidName { .. } => Problem::new(
                StatusCode::BAD_REQUEST,
                "the lock key derived from this request is invalid (empty, or longer than 512 bytes)",
            ),
            LockError::Lost { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the lock guarding this request was lost while it ran; its outcome is unknown",
            ),
            LockError::WrongType { .. }
            | LockError::CapacityMismatch { .. }
            | LockError::PermitsAboveCapacity { .. }
            | LockError::InvalidDuration { .. }
            | LockError::Config(_)
            | LockError::NoDefaultLocker { .. }
            | LockError::HeldByThisTask { .. }
            | LockError::BlockingInAsync { .. }
            | LockError::UpgradeRefused { .. }
            | LockError::LatchNotFound { .. }
            | LockError::LatchExpired { .. }
            | LockError::LatchCountBelowZero { .. }
            | LockError::LatchStillCounting { .. }
            | LockError::LatchTimeout { .. }
            | LockError::Entropy { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the request could not be guarded because of a server-side problem",
            ),
            LockError::Connection { .. }
            | LockError::Misconfigured { .. }
            | LockError::Redis { .. }
            | LockError::SlotMigrating { .. }
            | LockError::NoQuorum { .. }
            | LockError::NotReplicated { .. } => {
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the lock service is unavailable; retry later",
                )
            }
        }
    }

    /// The full response for `err`, logged with `tracing`: contention at `debug`, a key
    /// built from bad request data at `warn`, everything else at `error` (with the internal
    /// details that the body leaves out).
    #[must_use]
    pub fn response(&self, err: &LockError) -> http::Response<Bytes> {
        let problem = self.problem(err);
        log(err, &problem);
        problem.to_response()
    }
}

/// The `Retry-After` sent when Redis did not say when the holder's lease runs out.
const UNKNOWN_RETRY: Duration = Duration::from_secs(1);

fn log(err: &LockError, problem: &Problem) {
    let status = problem.status.as_u16();
    if err.is_contention() {
        tracing::debug!(
            status,
            lock = err.name().unwrap_or_default(),
            retry_after_s = problem.retry_after_secs(),
            "request refused: lock busy"
        );
    } else if problem.status.is_client_error() {
        tracing::warn!(status, error = %err, "request refused: bad lock key");
    } else {
        tracing::error!(status, error = %err, "request failed: lock error");
    }
}

/// Sets the [`ErrorResponses`] that `LockError`'s `IntoResponse` (feature `axum`) and
/// layers without their own use, for the whole process. Call it once at startup.
///
/// ```
/// use lock_core::web::{error_responses, set_error_responses, ErrorResponses};
/// use http::StatusCode;
///
/// set_error_responses(ErrorResponses::new().busy_status(StatusCode::LOCKED));
/// assert_eq!(error_responses().status_when_busy(), StatusCode::LOCKED);
/// # set_error_responses(ErrorResponses::new());
/// ```
pub fn set_error_responses(responses: ErrorResponses) {
    *DEFAULT.write().unwrap_or_else(PoisonError::into_inner) = responses;
}

/// The process-wide [`ErrorResponses`] (409 for a busy lock unless
/// [`set_error_responses`] changed it).
#[must_use]
pub fn error_responses() -> ErrorResponses {
    *DEFAULT.read().unwrap_or_else(PoisonError::into_inner)
}

/// An RFC 9457 problem: `{"type":"about:blank","title":"Conflict","status":409,"detail":..}`,
/// plus the lock name for contention, and the `Retry-After` to send.
///
/// ```
/// use lock_core::web::Problem;
/// use http::StatusCode;
/// use std::time::Duration;
///
/// let problem = Problem::new(StatusCode::CONFLICT, "order 7 is already paid")
///     .with_retry_after(Duration::from_millis(1200));
/// let response = problem.to_response();
/// assert_eq!(response.status(), StatusCode::CONFLICT);
/// assert_eq!(response.headers()["retry-after"], "2");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert_eq!(
///     response.body(),
///     r#"{"type":"about:blank","title":"Conflict","status":409,"detail":"order 7 is already paid"}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    detail: String,
    lock: Option<String>,
    retry_after: Option<Duration>,
}

impl Problem {
    /// A problem with `status` (its reason phrase becomes the title) and a human-readable
    /// `detail`, which clients see: keep internal details out of it.
    #[must_use]
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            lock: None,
            retry_after: None,
        }
    }

    /// Adds the `lock` extension member (the lock name).
    #[must_use]
    pub fn with_lock(mut self, name: impl Into<String>) -> Problem {
        self.lock = Some(name.into());
        self
    }

    /// Sends `Retry-After` with this delay, rounded up to whole seconds (at least 1).
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Problem {
        self.retry_after = Some(after);
        self
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `title` member: the status's reason phrase.
    #[must_use]
    pub fn title(&self) -> &'static str {
        self.status.canonical_reason().unwrap_or("Error")
    }

    /// The `detail` member.
    #[must_use]
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The lock name, for contention problems.
    #[must_use]
    pub fn lock(&self) -> Option<&str> {
        self.lock.as_deref()
    }

    /// The `Retry-After` value in whole seconds: the delay rounded up, at least 1.
    #[must_use]
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|after| {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            secs.max(1)
        })
    }

    /// The body, as compact JSON.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(96 + self.detail.len());
        out.push_str(r#"{"type":"about:blank","title":"#);
        push_json_string(&mut out, self.title());
        out.push_str(r#","status":"#);
        out.push_str(&self.status.as_u16().to_string());
        out.push_str(r#","detail":"#);
        push_json_string(&mut out, &self.detail);
        if let Some(lock) = &self.lock {
            out.push_str(r#","lock":"#);
            push_json_string(&mut out, lock);
        }
        out.push('}');
        out
    }

    /// The response: status, `Content-Type: application/problem+json`, `Retry-After` when
    /// set, and the JSON body.
    #[must_use]
    pub fn to_response(&self) -> http::Response<Bytes> {
        let mut response = http::Response::new(Bytes::from(self.to_json()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self.retry_after_secs() {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Appends `text` as a JSON string literal.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection_error() -> LockError {
        LockError::Connection {
            name: "orders:7".into(),
            reason: "redis://:hunter2@10.0.0.5:6379/ refused the connection".into(),
            source: None,
        }
    }

    #[test]
    fn busy_is_409_with_retry_after_from_the_holders_ttl() {
        let err = LockError::Busy {
            name: "orders:7".into(),
            holder: Some("api@10.1.2.3:77".into()),
            retry_after: Some(Duration::from_millis(4001)),
            wait_setting: Default::default(),
        };
        let response = ErrorResponses::new().response(&err);
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[RETRY_AFTER], "5");
        let body = std::str::from_utf8(response.body()).unwrap();
        assert!(body.starts_with(r#"{"type":"about:blank","title":"Conflict","status":409,"detail":"lock `orders:7` is busy"#), "{body}");
        assert!(body.ends_with(r#","lock":"orders:7"}"#), "{body}");
        assert!(!body.contains("10.1.2.3"), "{body}");
    }

    #[test]
    fn timeout_uses_the_configured_busy_status() {
        let err = LockError::Timeout {
            name: "orders:7".into(),
            waited: Duration::from_millis(250),
            holder: None,
            retry_after: None,

            wait_setting: Default::default(),
        };
        let problem = ErrorResponses::new()
            .busy_status(StatusCode::LOCKED)
            .problem(&err);
        assert_eq!(problem.status(), StatusCode::LOCKED);
        assert_eq!(problem.title(), "Locked");
        assert_eq!(problem.retry_after_secs(), Some(1));
    }

    #[test]
    fn unavailable_redis_is_503_without_internal_details() {
        let response = ErrorResponses::new().response(&connection_error());
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get(RETRY_AFTER).is_none());
        let body = std::str::from_utf8(response.body()).unwrap();
        for secret in ["hunter2", "10.0.0.5", "redis://", "refused", "orders:7"] {
            assert!(!body.contains(secret), "{secret} leaked: {body}");
        }
    }

    #[test]
    fn other_errors_map_to_400_and_500() {
        let invalid = LockError::InvalidName {
            name: String::new(),
            reason: "it is empty",
        };
        assert_eq!(
            ErrorResponses::new().problem(&invalid).status(),
            StatusCode::BAD_REQUEST
        );
        let lost = LockError::Lost { name: "a".into() };
        assert_eq!(
            ErrorResponses::new().problem(&lost).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        let config = LockError::Config("redis://secret@host".into());
        let problem = ErrorResponses::new().problem(&config);
        assert_eq!(problem.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!problem.to_json().contains("secret"));
    }

    #[test]
    fn json_strings_are_escaped() {
        let problem = Problem::new(StatusCode::CONFLICT, "a \"quoted\" \\ line\nnext\u{1}")
            .with_lock("k\"ey");
        assert_eq!(
            problem.to_json(),
            r#"{"type":"about:blank","title":"Conflict","status":409,"detail":"a \"quoted\" \\ line\nnext\u0001","lock":"k\"ey"}"#
        );
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let at = |ms| {
            Problem::new(StatusCode::CONFLICT, "")
                .with_retry_after(Duration::from_millis(ms))
                .retry_after_secs()
        };
        assert_eq!(at(0), Some(1));
        assert_eq!(at(1), Some(1));
        assert_eq!(at(1000), Some(1));
        assert_eq!(at(1001), Some(2));
        assert_eq!(at(29_500), Some(30));
    }
}
