//! An order/checkout API whose handlers run under distributed locks: `POST
//! /orders/{order_id}/pay` with `#[redis_locked]`, and a payment-provider webhook with a
//! `LockLayer` keyed by the `Idempotency-Key` header. Run it with
//! `cargo run -p web-service`; see the README for curl commands.

pub mod app;
pub mod store;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use lock_core::Locker;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use app::{router, AppError, AppState};
pub use store::Store;

/// The state of one replica on the Redis at `url`: its own `Locker` and data store.
pub fn state(url: &str, work: Duration) -> Result<AppState, String> {
    let locker = Locker::builder()
        .url(url)
        .app_name("web-service")
        .build()
        .map_err(|err| err.to_string())?;
    let store = Store::open(url, "shop:").map_err(|err| err.to_string())?;
    Ok(AppState::new(locker, store, work))
}

/// A server running in the background; stopped when dropped.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Running {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `router` on `addr` (port 0: a free one) in a background task.
pub async fn spawn(router: Router, addr: SocketAddr) -> std::io::Result<Running> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, router).await {
            tracing::error!(error = %err, "server stopped");
        }
    });
    Ok(Running { addr, task })
}

/// The URL with its user and password replaced by `***`, for banners and logs.
pub use lock_tests::discover::redact;

/// The README's example, compiled as written by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
