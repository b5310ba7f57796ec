//! The example checkout service (examples/web-service) on an ephemeral port, with a
//! redis-server of its own.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use hyper::StatusCode;
use lock_tests::RedisServer;
use web_service::{router, AppState, Running};

use super::client::{all_at_once, assert_busy, Http, Reply};

/// How long a payment (or webhook) holds its lock: long enough that 50 requests fired at
/// once all arrive while the first one still works.
const HOLD: Duration = Duration::from_millis(1500);
const PAY: &str = r#"{"amount_cents":1299}"#;
const EVENT: &str = r#"{"type":"charge.succeeded","order_id":7}"#;

/// One replica of the service: its own `Locker` and store on `server`.
async fn replica(server: &RedisServer, work: Duration) -> (AppState, Running) {
    let state = web_service::state(&server.url(), work).expect("state");
    let running = web_service::spawn(
        router(state.clone()),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
    )
    .await
    .expect("listen");
    (state, running)
}

async fn pay_many(http: &Http, urls: Vec<String>) -> Vec<Reply> {
    all_at_once(
        urls.into_iter()
            .map(|url| {
                let http = http.clone();
                async move { http.post_json(&url, &[], PAY).await }
            })
            .collect(),
    )
    .await
}

fn split(replies: &[Reply]) -> (Vec<&Reply>, Vec<&Reply>) {
    replies
        .iter()
        .partition(|reply| reply.status == StatusCode::OK)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_payments_of_one_order_charge_it_once() {
    let server = RedisServer::start();
    let (state, app) = replica(&server, HOLD).await;
    let http = Http::new();
    let url = format!("{}/orders/7/pay", app.base_url());

    let replies = pay_many(&http, vec![url.clone(); 50]).await;
    let (paid, refused) = split(&replies);
    assert_eq!(paid.len(), 1, "exactly one request pays: {replies:#?}");
    let receipt = paid[0].json();
    assert_eq!(receipt["status"], "paid");
    assert_eq!(receipt["order_id"], 7);
    assert_eq!(refused.len(), 49);
    for reply in refused {
        assert_busy(reply, "orders:7");
        // The handler's TTL is 5 s: Retry-After is the holder's remaining TTL.
        assert!(reply.retry_after().unwrap() <= 5, "{reply:?}");
    }
    assert_eq!(state.store.payments(7).await.unwrap(), 1);

    // Once the lock is free, the order's own state refuses a second charge.
    let again = http.post_json(&url, &[], PAY).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    assert!(again.retry_after().is_none(), "{again:?}");
    assert_eq!(again.json()["detail"], "order 7 is already paid");
    let order = http.get(&format!("{}/orders/7", app.base_url())).await;
    assert_eq!(order.json()["payments"], 1, "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_of_different_orders_all_succeed_in_parallel() {
    let server = RedisServer::start();
    let (state, app) = replica(&server, HOLD).await;
    let http = Http::new();
    let urls = (100..150)
        .map(|id| format!("{}/orders/{id}/pay", app.base_url()))
        .collect();

    let started = Instant::now();
    let replies = pay_many(&http, urls).await;
    let elapsed = started.elapsed();
    let (paid, refused) = split(&replies);
    assert!(refused.is_empty(), "{refused:#?}");
    assert_eq!(paid.len(), 50);
    for id in 100..150 {
        assert_eq!(state.store.payments(id).await.unwrap(), 1, "order {id}");
    }
    // Each payment holds its own order's lock only: they overlapped (serialised, 50
    // payments would have taken 50 x 1.5 s).
    let peak = state.stats.peak();
    assert!(peak > 1, "payments of different orders ran one at a time");
    eprintln!("50 distinct orders: {elapsed:?}, at most {peak} payments at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_sharing_one_redis_exclude_each_other() {
    let server = RedisServer::start();
    let (a_state, a) = replica(&server, HOLD).await;
    let (_b_state, b) = replica(&server, HOLD).await;
    let http = Http::new();
    // Alternate between the replicas, as a load balancer would.
    let urls: Vec<String> = (0..50)
        .map(|i| {
            let base = if i % 2 == 0 {
                a.base_url()
            } else {
                b.base_url()
            };
            format!("{base}/orders/9/pay")
        })
        .collect();

    let replies = pay_many(&http, urls).await;
    let (paid, refused) = split(&replies);
    assert_eq!(paid.len(), 1, "{replies:#?}");
    assert_eq!(refused.len(), 49);
    for reply in &refused {
        assert_busy(reply, "orders:9");
    }
    // The replica that did not pay refused all of its 25 requests: it saw the other's lock.
    let winner = replies
        .iter()
        .position(|r| r.status == StatusCode::OK)
        .unwrap()
        % 2;
    let refused_by_other = replies
        .iter()
        .enumerate()
        .filter(|(i, r)| i % 2 != winner && r.status == StatusCode::CONFLICT)
        .count();
    assert_eq!(refused_by_other, 25);
    assert_eq!(a_state.store.payments(9).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_down_answers_503_and_service_resumes_when_it_is_back() {
    let mut server = RedisServer::start();
    let (state, app) = replica(&server, Duration::ZERO).await;
    let http = Http::new();
    let base = app.base_url();
    let ok = http
        .post_json(&format!("{base}/orders/1/pay"), &[], PAY)
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{ok:?}");

    server.kill();
    let port = server.port().to_string();
    let down = [
        http.post_json(&format!("{base}/orders/2/pay"), &[], PAY)
            .await,
        http.post_json(
            &format!("{base}/webhooks/payments"),
            &[("idempotency-key", "evt_down")],
            EVENT,
        )
        .await,
    ];
    for reply in &down {
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        assert_eq!(reply.content_type(), "application/problem+json");
        let problem = reply.json();
        assert_eq!(problem["status"], 503);
        assert_eq!(problem["title"], "Service Unavailable");
        assert_eq!(
            problem["detail"],
            "the lock service is unavailable; retry later"
        );
        for secret in [
            "127.0.0.1",
            "redis://",
            port.as_str(),
            "refused",
            "os error",
        ] {
            assert!(
                !reply.body.contains(secret),
                "{secret} leaked: {}",
                reply.body
            );
        }
    }

    server.restart();
    // The same process serves again once Redis is back (its connections are re-opened).
    let deadline = Instant::now() + Duration::from_secs(15);
    let paid = loop {
        let reply = http
            .post_json(&format!("{base}/orders/2/pay"), &[], PAY)
            .await;
        if reply.status == StatusCode::OK || Instant::now() > deadline {
            break reply;
        }
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(state.store.payments(2).await.unwrap(), 1);
    let hook = http
        .post_json(
            &format!("{base}/webhooks/payments"),
            &[("idempotency-key", "evt_down")],
            EVENT,
        )
        .await;
    assert_eq!(hook.json()["status"], "processed", "{hook:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_deliveries_with_one_idempotency_key_are_processed_once() {
    let server = RedisServer::start();
    let (state, app) = replica(&server, HOLD).await;
    let http = Http::new();
    let url = format!("{}/webhooks/payments", app.base_url());
    let deliver = |key: String| {
        let http = http.clone();
        let url = url.clone();
        async move {
            http.post_json(&url, &[("Idempotency-Key", key.as_str())], EVENT)
                .await
        }
    };

    let replies = all_at_once((0..50).map(|_| deliver("evt_1".to_owned())).collect()).await;
    let (processed, refused) = split(&replies);
    assert_eq!(processed.len(), 1, "{replies:#?}");
    assert_eq!(processed[0].json()["status"], "processed");
    assert_eq!(refused.len(), 49);
    for reply in refused {
        assert_busy(reply, "webhooks:evt_1");
    }
    // A redelivery after the first finished is acknowledged, not processed again.
    let again = deliver("evt_1".to_owned()).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.json()["status"], "duplicate");

    // Different keys: all processed, in parallel.
    let replies = all_at_once((0..20).map(|i| deliver(format!("evt_other_{i}"))).collect()).await;
    assert!(
        replies.iter().all(|r| r.status == StatusCode::OK),
        "{replies:#?}"
    );
    assert_eq!(state.store.webhooks_processed().await.unwrap(), 21);
    assert!(state.stats.peak() > 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_without_idempotency_key_is_400_and_takes_no_lock() {
    let server = RedisServer::start();
    let (state, app) = replica(&server, Duration::ZERO).await;
    let http = Http::new();
    let url = format!("{}/webhooks/payments", app.base_url());

    let missing = http.post_json(&url, &[], EVENT).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{missing:?}");
    assert_eq!(missing.content_type(), "application/problem+json");
    let problem = missing.json();
    assert_eq!(problem["status"], 400);
    assert_eq!(problem["detail"], "missing `idempotency-key` header");
    let blank = http
        .post_json(&url, &[("Idempotency-Key", "  ")], EVENT)
        .await;
    assert_eq!(blank.status, StatusCode::BAD_REQUEST, "{blank:?}");

    // Neither request reached Redis: no lock was taken, on an empty key or any other.
    let stats = server.command(&["INFO", "commandstats"]);
    for command in ["cmdstat_set:", "cmdstat_evalsha:", "cmdstat_eval:"] {
        assert!(!stats.contains(command), "{command} ran: {stats}");
    }
    assert_eq!(state.store.webhooks_processed().await.unwrap(), 0);
}
