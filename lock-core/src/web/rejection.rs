//! Why a guarded request was answered without reaching the inner service, and how.

use std::fmt;

use bytes::Bytes;
use http::Response;

use super::problem::{ErrorResponses, Problem};
use super::KeyRejection;
use crate::LockError;

/// Why a guarded request was answered without reaching the inner service.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection {
    /// No lock key could be derived from the request.
    Key(KeyRejection),
    /// The lock could not be had.
    Lock(LockError),
    /// With [`LockLayer::permits`](super::LockLayer::permits): every permit of the key is
    /// taken (answered 429 Too Many Requests with `Retry-After`).
    Limit {
        /// The contention error (`Busy` or `Timeout`), or what else went wrong.
        err: LockError,
        /// The layer's limit.
        permits: u64,
    },
}

impl Rejection {
    /// The problem document `responses` makes of this rejection.
    #[must_use]
    pub fn problem(&self, responses: &ErrorResponses) -> Problem {
        match self {
            Rejection::Key(rejection) => Problem::new(rejection.status(), rejection.detail()),
            Rejection::Lock(err) => responses.problem(err),
            Rejection::Limit { err, permits } => {
                super::held::limit_problem(err, *permits, responses)
            }
        }
    }

    /// The default response: [`Rejection::problem`], logged.
    #[must_use]
    pub fn response(&self, responses: &ErrorResponses) -> Response<Bytes> {
        match self {
            Rejection::Lock(err) => responses.response(err),
            Rejection::Limit { err, .. } if !err.is_contention() => responses.response(err),
            Rejection::Limit { err, permits } => {
                tracing::debug!(error = %err, permits, "request refused: the key is at its limit");
                self.problem(responses).to_response()
            }
            Rejection::Key(rejection) => {
                if rejection.status().is_server_error() {
                    tracing::error!(error = %rejection, "request failed: no lock key");
                } else {
                    tracing::debug!(error = %rejection, "request refused: no lock key");
                }
                self.problem(responses).to_response()
            }
        }
    }

    /// A gRPC "trailers-only" response for services such as tonic's: HTTP 200 with
    /// `grpc-status` `ABORTED` (10) for a busy lock, plus `grpc-retry-pushback-ms`;
    /// `INVALID_ARGUMENT` (3) for a bad key; `UNAVAILABLE` (14) when Redis cannot be
    /// reached; `INTERNAL` (13) otherwise. Use it with
    /// [`LockLayer::on_reject`](super::LockLayer::on_reject).
    ///
    /// ```
    /// use lock_core::web::Rejection;
    /// use lock_core::LockError;
    ///
    /// let busy = Rejection::Lock(LockError::Busy {
    ///     name: "jobs:7".into(),
    ///     holder: None,
    ///     retry_after: Some(std::time::Duration::from_millis(1500)),
    ///     wait_setting: Default::default(),
    /// });
    /// let response = busy.grpc_response();
    /// assert_eq!(response.status(), 200);
    /// assert_eq!(response.headers()["grpc-status"], "10");
    /// assert_eq!(response.headers()["grpc-retry-pushback-ms"], "1500");
    /// ```
    #[must_use]
    pub fn grpc_response(&self) -> Response<Bytes> {
        let problem = self.problem(&ErrorResponses::new());
        let code: u16 = match problem.status().as_u16() {
            409 => 10,
            429 => 8,
            400 => 3,
            503 => 14,
            _ => 13,
        };
        let mut response = Response::new(Bytes::new());
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", http::HeaderValue::from(code));
        if let Ok(message) = http::HeaderValue::from_str(&percent_encode(problem.detail())) {
            headers.insert("grpc-message", message);
        }
        if let Rejection::Lock(err) | Rejection::Limit { err, .. } = self
            && let Some(after) = err.retry_after()
        {
            let millis = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
            headers.insert("grpc-retry-pushback-ms", http::HeaderValue::from(millis));
        }
        response
    }
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2, "Responses").
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Key(rejection) => rejection.fmt(f),
            Rejection::Lock(err) | Rejection::Limit { err, .. } => err.fmt(f),
        }
    }
}

impl std::error::Error for Rejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Rejection::Key(rejection) => Some(rejection),
            Rejection::Lock(err) | Rejection::Limit { err, .. } => Some(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("lock `a` 100%\n"), "lock `a` 100%25%0A");
    }
}
