//! axum integration: `LockError` (and the other web types) as responses, and lock keys made
//! of path parameters.

use axum::body::Body;
use axum::extract::{FromRequestParts as _, RawPathParams};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use http::request::Parts;

use super::problem::{error_responses, Problem};
use super::{KeyRejection, LockKey, Rejection};
use crate::LockError;

/// A lock that cannot be had answers as the process-wide
/// [`ErrorResponses`](super::ErrorResponses) say: 409 Conflict with `Retry-After` for a busy
/// lock, 503 when Redis cannot be reached, with an RFC 9457 problem body, logged with
/// `tracing`. So `Result<T, LockError>` is a handler return type, and `#[redis_locked]`
/// handlers need no error type of their own:
///
/// ```
/// use axum::{extract::{Path, State}, routing::post, Json, Router};
/// use lock_core::{redis_locked, LockError, Locker};
///
/// #[derive(Clone)]
/// struct App {
///     locker: Locker,
/// }
///
/// #[redis_locked(key = "orders:{order_id}", ttl = "10s", wait = "0s", locker = app.locker)]
/// async fn pay(State(app): State<App>, Path(order_id): Path<u64>) -> Result<Json<u64>, LockError> {
///     // ... charge the order: no other request for this order runs, in any replica ...
///     Ok(Json(order_id))
/// }
///
/// let router: Router = Router::new()
///     .route("/orders/{order_id}/pay", post(pay))
///     .with_state(App { locker: Locker::memory() });
/// ```
impl IntoResponse for LockError {
    fn into_response(self) -> Response {
        error_responses().response(&self).map(Body::from)
    }
}

/// The problem document as a response (status, `Retry-After`, `application/problem+json`).
/// Not logged.
impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        self.to_response().map(Body::from)
    }
}

/// 400 (or 500 for a misconfigured key) with a problem body.
impl IntoResponse for KeyRejection {
    fn into_response(self) -> Response {
        Rejection::Key(self).into_response()
    }
}

/// The response a [`LockLayer`](super::LockLayer) sends by default, logged.
impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.response(&error_responses()).map(Body::from)
    }
}

/// A key made of the route's path parameters: `key::path("orders:{id}")` on a route
/// `/orders/{id}/pay` locks `orders:7` for `/orders/7/pay`. Parameters are percent-decoded,
/// as axum's `Path` extractor gives them, so `/orders/%37/pay` names the same lock.
///
/// Add the layer with `Router::route_layer` (or `MethodRouter::route_layer`), which runs
/// after routing, where the parameters are known. `Router::layer` also wraps the fallback,
/// which has no parameters: a request for an unknown path would get 500 instead of 404.
/// `{{` and `}}` are literal braces. A route without one of the parameters answers 500 (and
/// logs why); a parameter that is not UTF-8 answers 400.
///
/// # Panics
///
/// If the template is malformed: an unclosed `{`, a stray `}` or an empty `{}` (a
/// programming error, caught at startup).
///
/// ```
/// use axum::{routing::post, Router};
/// use lock_core::web::{key, LockLayer};
/// use lock_core::Locker;
///
/// let app: Router = Router::new()
///     .route("/orders/{id}/refund", post(|| async { "refunded" }))
///     .route_layer(LockLayer::new(Locker::memory(), key::path("orders:{id}")));
/// ```
#[must_use]
pub fn path(template: &str) -> PathKey {
    match parse(template) {
        Ok(parts) => PathKey { parts },
        Err(why) => panic!("lock_core::web::key::path({template:?}): {why}"),
    }
}

/// The key [`path`] builds.
#[derive(Debug, Clone)]
pub struct PathKey {
    parts: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Param(String),
}

fn parse(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => {
                            return Err(format!(
                                "unclosed `{{{name}`; write `{{{{` for a literal brace"
                            ))
                        }
                    }
                }
                if name.is_empty() {
                    return Err("empty `{}`; name a path parameter, e.g. `{id}`".to_owned());
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Param(name));
            }
            '}' => return Err("stray `}`; write `}}` for a literal brace".to_owned()),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

impl LockKey for PathKey {
    fn lock_key(&self, parts: &mut Parts) -> Result<String, KeyRejection> {
        let needs_params = self.parts.iter().any(|p| matches!(p, Piece::Param(_)));
        if !needs_params {
            return Ok(self.text_only());
        }
        // axum's extractor reads the parameters the router stored in the request's
        // extensions; it never actually suspends.
        let params = match RawPathParams::from_request_parts(parts, &()).now_or_never() {
            Some(Ok(params)) => params,
            Some(Err(rejection)) => {
                let status = rejection.status();
                let text = rejection.body_text();
                return Err(if status.is_client_error() {
                    KeyRejection::bad_request(text)
                } else {
                    KeyRejection::server_error(format!(
                        "path parameters unavailable ({text}); add the layer with \
                         Router::route_layer or Router::layer"
                    ))
                });
            }
            None => {
                return Err(KeyRejection::server_error(
                    "axum's path parameter extractor did not complete at once",
                ))
            }
        };
        let mut key = String::new();
        for piece in &self.parts {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Param(name) => {
                    let Some((_, value)) = params.iter().find(|(param, _)| param == name) else {
                        let known: Vec<&str> = params.iter().map(|(param, _)| param).collect();
                        return Err(KeyRejection::server_error(format!(
                            "the route has no path parameter `{name}` (it has {known:?}); \
                             fix the key template"
                        )));
                    };
                    key.push_str(value);
                }
            }
        }
        Ok(key)
    }
}

impl PathKey {
    fn text_only(&self) -> String {
        self.parts
            .iter()
            .filter_map(|piece| match piece {
                Piece::Text(text) => Some(text.as_str()),
                Piece::Param(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse() {
        assert_eq!(
            parse("orders:{id}:{{x}}").unwrap(),
            vec![
                Piece::Text("orders:".into()),
                Piece::Param("id".into()),
                Piece::Text(":{x}".into()),
            ]
        );
        assert!(parse("a{").unwrap_err().contains("unclosed"));
        assert!(parse("a}").unwrap_err().contains("stray"));
        assert!(parse("a{}").unwrap_err().contains("empty"));
    }

    #[test]
    #[should_panic(expected = "unclosed")]
    fn bad_templates_panic_at_startup() {
        let _ = path("orders:{id");
    }

    #[test]
    fn outside_a_router_the_key_is_a_server_error() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let err = path("orders:{id}").lock_key(&mut parts).unwrap_err();
        assert_eq!(err.status(), 500, "{err}");
        assert_eq!(path("fixed").lock_key(&mut parts).unwrap(), "fixed");
    }
}
