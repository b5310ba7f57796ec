//! A small HTTP/1 client (hyper) for the web tests, and helpers to fire requests at once.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{HeaderMap, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// One HTTP answer, read to the end.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.body))
    }

    /// `Retry-After` in seconds, if present.
    pub fn retry_after(&self) -> Option<u64> {
        self.headers.get("retry-after").map(|v| {
            v.to_str()
                .unwrap()
                .parse()
                .expect("Retry-After is delta-seconds")
        })
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .map_or("", |v| v.to_str().unwrap())
    }
}

#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    pub fn new() -> Http {
        Http {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(5))
                .build_http(),
        }
    }

    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("request");
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .unwrap_or_else(|_| panic!("no answer from {url} within 30 s"))
            .unwrap_or_else(|err| panic!("request to {url} failed: {err}"));
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub async fn post_json(&self, url: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.send(Method::POST, url, &all, body).await
    }

    pub async fn get(&self, url: &str) -> Reply {
        self.send(Method::GET, url, &[], "").await
    }
}

/// Runs every future at once (on the multi-threaded runtime) and collects the results in
/// order.
pub async fn all_at_once<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(futures.len()));
    let tasks: Vec<_> = futures
        .into_iter()
        .map(|future| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                future.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("request task panicked"));
    }
    out
}

/// Asserts the shape of a lock-busy answer: 409, `Retry-After` >= 1, a problem body naming
/// the lock.
pub fn assert_busy(reply: &Reply, lock: &str) {
    assert_eq!(reply.status, StatusCode::CONFLICT, "{reply:?}");
    let after = reply
        .retry_after()
        .unwrap_or_else(|| panic!("no Retry-After: {reply:?}"));
    assert!((1..=60).contains(&after), "{reply:?}");
    assert_eq!(
        reply.content_type(),
        "application/problem+json",
        "{reply:?}"
    );
    let problem = reply.json();
    assert_eq!(problem["type"], "about:blank", "{problem}");
    assert_eq!(problem["title"], "Conflict", "{problem}");
    assert_eq!(problem["status"], 409, "{problem}");
    assert_eq!(problem["lock"], lock, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("lock `{lock}` is busy")),
        "{problem}"
    );
}
