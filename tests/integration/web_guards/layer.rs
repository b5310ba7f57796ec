//! `LockLayer` on routes of its own: path keys, closure keys, waiting, another busy status,
//! a misconfigured key, a plain (non-axum) tower service, and `#[redis_locked]` handlers
//! returning `Result<impl IntoResponse, LockError>`.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::extract::Path;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::StatusCode;
use lock_core::web::{key, ErrorResponses, LockLayer, Rejection};
use lock_core::{redis_locked, LockError, Locker};
use lock_tests::RedisServer;
use tower::ServiceExt as _;
use web_service::Running;

use super::client::{all_at_once, assert_busy, Http, Reply};

const HOLD: Duration = Duration::from_millis(1500);

fn locker(server: &RedisServer) -> Locker {
    Locker::builder()
        .url(server.url())
        .app_name("web-tests")
        .build()
        .expect("locker")
}

async fn serve(router: Router) -> Running {
    web_service::spawn(router, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .expect("listen")
}

/// `POST /jobs/{id}/run`, working for `hold`, under `layer`.
fn jobs(layer: LockLayer, hold: Duration) -> Router {
    Router::new()
        .route(
            "/jobs/{id}/run",
            post(move |Path(id): Path<String>| async move {
                tokio::time::sleep(hold).await;
                format!("ran {id}")
            }),
        )
        .route_layer(layer)
}

async fn post_all(http: &Http, urls: Vec<String>) -> Vec<Reply> {
    all_at_once(
        urls.into_iter()
            .map(|url| {
                let http = http.clone();
                async move { http.post_json(&url, &[], "{}").await }
            })
            .collect(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn path_key_excludes_same_id_and_lets_different_ids_run() {
    let server = RedisServer::start();
    let app = serve(jobs(
        LockLayer::new(locker(&server), key::path("jobs:{id}")).ttl(Duration::from_secs(4)),
        HOLD,
    ))
    .await;
    let http = Http::new();
    let base = app.base_url();

    // 20 requests for job 5, one of them spelled `%35` (the same id once decoded).
    let mut urls = vec![format!("{base}/jobs/5/run"); 19];
    urls.push(format!("{base}/jobs/%35/run"));
    let replies = post_all(&http, urls).await;
    let ok: Vec<_> = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .collect();
    assert_eq!(ok.len(), 1, "{replies:#?}");
    assert_eq!(ok[0].body, "ran 5");
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_busy(reply, "jobs:5");
        assert!(reply.retry_after().unwrap() <= 4, "{reply:?}");
    }

    let replies = post_all(
        &http,
        (0..20).map(|i| format!("{base}/jobs/{i}/run")).collect(),
    )
    .await;
    assert!(
        replies.iter().all(|r| r.status == StatusCode::OK),
        "{replies:#?}"
    );
    // Released before each response went out: nothing is left behind.
    let keys = server.command(&["KEYS", "lock:*"]);
    assert_eq!(keys, "*0\r\n", "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn header_key_missing_is_400_and_present_is_exclusive() {
    let server = RedisServer::start();
    let app = serve(jobs(
        LockLayer::new(
            locker(&server),
            key::header("Idempotency-Key").prefix("jobs:"),
        ),
        HOLD,
    ))
    .await;
    let http = Http::new();
    let url = format!("{}/jobs/1/run", app.base_url());

    let missing = http.post_json(&url, &[], "{}").await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{missing:?}");
    assert_eq!(missing.json()["detail"], "missing `idempotency-key` header");
    let stats = server.command(&["INFO", "commandstats"]);
    assert!(!stats.contains("cmdstat_set:"), "{stats}");
    assert!(!stats.contains("cmdstat_evalsha:"), "{stats}");

    let replies = all_at_once(
        (0..20)
            .map(|_| {
                let http = http.clone();
                let url = url.clone();
                async move {
                    http.post_json(&url, &[("Idempotency-Key", "k-1")], "{}")
                        .await
                }
            })
            .collect(),
    )
    .await;
    assert_eq!(
        replies
            .iter()
            .filter(|r| r.status == StatusCode::OK)
            .count(),
        1,
        "{replies:#?}"
    );
    for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
        assert_busy(reply, "jobs:k-1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closure_keys_waiting_and_another_busy_status() {
    let server = RedisServer::start();
    let locker = locker(&server);
    // Key: the `account` query parameter; none gives 400.
    let by_account = |parts: &Parts| {
        parts
            .uri
            .query()
            .and_then(|q| q.strip_prefix("account="))
            .map(|account| format!("accounts:{account}"))
    };
    let waiting = LockLayer::new(locker.clone(), by_account).wait(Duration::from_secs(10));
    let locked = LockLayer::new(locker.clone(), by_account)
        .responses(ErrorResponses::new().busy_status(StatusCode::LOCKED));
    let hold = Duration::from_millis(300);
    let router = Router::new()
        .route(
            "/wait",
            post(move || async move {
                tokio::time::sleep(hold).await;
                "done"
            })
            .route_layer(waiting),
        )
        .route(
            "/locked",
            post(move || async move {
                tokio::time::sleep(hold).await;
                "done"
            })
            .route_layer(locked),
        );
    let app = serve(router).await;
    let http = Http::new();
    let base = app.base_url();

    let none = http.post_json(&format!("{base}/wait"), &[], "").await;
    assert_eq!(none.status, StatusCode::BAD_REQUEST, "{none:?}");

    // With a wait, all requests for one account get their turn.
    let replies = post_all(&http, vec![format!("{base}/wait?account=a"); 5]).await;
    assert!(
        replies.iter().all(|r| r.status == StatusCode::OK),
        "{replies:#?}"
    );

    // 423 Locked instead of 409, same headers and body shape.
    let replies = post_all(&http, vec![format!("{base}/locked?account=b"); 5]).await;
    let refused: Vec<_> = replies
        .iter()
        .filter(|r| r.status != StatusCode::OK)
        .collect();
    assert_eq!(refused.len(), 4, "{replies:#?}");
    for reply in refused {
        assert_eq!(reply.status, StatusCode::LOCKED, "{reply:?}");
        assert!(reply.retry_after().is_some());
        assert_eq!(reply.json()["title"], "Locked");
        assert_eq!(reply.json()["status"], 423);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_path_key_naming_a_missing_parameter_is_a_500_without_details() {
    let server = RedisServer::start();
    let app = serve(jobs(
        LockLayer::new(locker(&server), key::path("jobs:{job_id}")),
        Duration::ZERO,
    ))
    .await;
    let reply = Http::new()
        .post_json(&format!("{}/jobs/3/run", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{reply:?}");
    assert!(!reply.body.contains("job_id"), "{reply:?}");
}

/// A tower service that is not axum (as tonic's are): the layer guards it the same way, and
/// `on_reject` can answer in gRPC's terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_tower_service_can_be_guarded_and_answer_grpc_statuses() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let service = tower::service_fn(|_request: axum::http::Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(axum::http::Response::new(Full::new(Bytes::from_static(
            b"ok",
        ))))
    });
    let by_job = key::header("x-job-id").prefix("grpc:");
    let plain = tower::Layer::layer(&LockLayer::new(locker.clone(), by_job.clone()), service);
    let grpc = tower::Layer::layer(
        &LockLayer::new(locker.clone(), by_job).on_reject(Rejection::grpc_response),
        service,
    );
    let request = || {
        axum::http::Request::post("/jobs.Runner/Run")
            .header("x-job-id", "42")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };

    let free = plain.clone().oneshot(request()).await.unwrap();
    assert_eq!(free.status(), 200);
    assert_eq!(free.into_body().collect().await.unwrap().to_bytes(), "ok");

    // Someone else (another process) holds the job's lock.
    let other = Locker::from_url(&server.url()).unwrap();
    let held = other
        .try_lock("grpc:42", Duration::from_secs(7))
        .await
        .unwrap();
    let busy = plain.oneshot(request()).await.unwrap();
    assert_eq!(busy.status(), 409);
    assert_eq!(busy.headers()["retry-after"], "7");
    let busy = grpc.oneshot(request()).await.unwrap();
    assert_eq!(busy.status(), 200);
    assert_eq!(busy.headers()["grpc-status"], "10");
    let pushback: u64 = busy.headers()["grpc-retry-pushback-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((6_000..=7_000).contains(&pushback), "{pushback}");
    assert!(busy
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());
    held.release().await.unwrap();
}

/// The simplest handler shape: `Result<impl IntoResponse, LockError>`, no error type of your
/// own.
#[redis_locked(key = "reports:{day}", wait = "0s", locker = locker)]
async fn report(
    axum::extract::State(locker): axum::extract::State<Locker>,
    Path(day): Path<u32>,
) -> Result<impl IntoResponse, LockError> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    Ok((StatusCode::CREATED, format!("report {day}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_locked_handlers_may_return_impl_into_response_with_lock_error() {
    let server = RedisServer::start();
    let router = Router::new()
        .route("/reports/{day}", post(report))
        .with_state(locker(&server));
    let app = serve(router).await;
    let http = Http::new();
    let replies = post_all(&http, vec![format!("{}/reports/3", app.base_url()); 10]).await;
    let created: Vec<_> = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .collect();
    assert_eq!(created.len(), 1, "{replies:#?}");
    assert_eq!(created[0].body, "report 3");
    for reply in replies.iter().filter(|r| r.status != StatusCode::CREATED) {
        assert_busy(reply, "reports:3");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_guarded_handler_sees_its_lease() {
    let server = RedisServer::start();
    let router = Router::new()
        .route(
            "/jobs/{id}/run",
            post(|| async {
                let lease = lock_core::current_lease().expect("the layer's lease");
                format!(
                    "{} fenced {:?} lost {}",
                    lease.name(),
                    lease.fencing_token(),
                    lease.is_lost()
                )
            }),
        )
        .route_layer(LockLayer::new(locker(&server), key::path("jobs:{id}")));
    let app = serve(router).await;
    let reply = Http::new()
        .post_json(&format!("{}/jobs/9/run", app.base_url()), &[], "{}")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(reply.body, "jobs:9 fenced None lost false");
}

/// With auto-renewal the holder's TTL is renewed all along, so it would tell a rival to come
/// back in a full TTL (30 s here) for a request that takes 300 ms; the layer answers from the
/// hold times it has seen instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_follows_the_hold_times_not_the_renewed_ttl() {
    let server = RedisServer::start();
    let hold = Duration::from_millis(300);
    let layer =
        LockLayer::new(locker(&server), key::path("jobs:{id}")).ttl(Duration::from_secs(30));
    let app = serve(jobs(layer, hold)).await;
    let http = Http::new();
    let url = format!("{}/jobs/5/run", app.base_url());
    // Before any request finished, the holder's TTL is all there is to go by.
    let first = post_all(&http, vec![url.clone(); 2]).await;
    let busy = first
        .iter()
        .find(|r| r.status == StatusCode::CONFLICT)
        .expect("one of two was busy");
    assert!(busy.retry_after().expect("Retry-After") >= 29, "{busy:?}");
    for _ in 0..3 {
        assert_eq!(http.post_json(&url, &[], "{}").await.status, StatusCode::OK);
    }
    let replies = post_all(&http, vec![url; 2]).await;
    let busy = replies
        .iter()
        .find(|r| r.status == StatusCode::CONFLICT)
        .expect("one of two was busy");
    assert_eq!(busy.retry_after(), Some(1), "{busy:?}");
    assert_busy(busy, "jobs:5");
}

/// A rival in this same process finds the holder in the Locker's own registry, before Redis
/// is asked, and is told the hold times too: not the holder's renewed TTL (30 s here). Under
/// load, two requests of the test above can meet this way; this one makes it certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rival_in_this_process_is_told_the_hold_times_too() {
    let server = RedisServer::start();
    let (entered, mut inside) = tokio::sync::mpsc::unbounded_channel();
    // Three warm-up requests go straight through; the fourth holds the lock until let go.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(3));
    let handler = {
        let gate = gate.clone();
        move || async move {
            let _ = entered.send(());
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            "ran"
        }
    };
    let layer =
        LockLayer::new(locker(&server), key::path("jobs:{id}")).ttl(Duration::from_secs(30));
    let router = Router::new()
        .route("/jobs/{id}/run", post(handler))
        .route_layer(layer);
    let app = serve(router).await;
    let http = Http::new();
    let url = format!("{}/jobs/6/run", app.base_url());
    for _ in 0..3 {
        assert_eq!(http.post_json(&url, &[], "{}").await.status, StatusCode::OK);
        inside.recv().await.expect("the warm-up ran");
    }
    let holder = tokio::spawn({
        let (http, url) = (http.clone(), url.clone());
        async move { http.post_json(&url, &[], "{}").await }
    });
    inside.recv().await.expect("the holder is in its handler");
    let busy = http.post_json(&url, &[], "{}").await;
    assert_eq!(busy.status, StatusCode::CONFLICT, "{busy:?}");
    assert_eq!(busy.retry_after(), Some(1), "{busy:?}");
    assert_busy(&busy, "jobs:6");
    gate.add_permits(1);
    assert_eq!(holder.await.expect("holder").status, StatusCode::OK);
}
