//! `cargo run --release -p web-service --bin loadgen [-- --requests 20000 --concurrency 32]`
//!
//! What a guard costs: one handler served three ways on an ephemeral port (unguarded, under
//! `#[redis_locked]`, under `LockLayer` with a path key), every request on a distinct id,
//! measured with a keep-alive HTTP/1 client in the same process. Prints requests per
//! second, latency percentiles, and the Redis commands each request cost.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lock_core::web::{key, LockLayer};
use lock_core::{redis_locked, LockError, Locker};
use lock_tests::discover;
use serde::Serialize;

#[derive(Clone)]
struct Bench {
    locker: Locker,
}

#[derive(Serialize)]
struct Ack {
    id: u64,
}

/// The handler, unguarded.
async fn plain(State(_bench): State<Bench>, Path(id): Path<u64>) -> Result<Json<Ack>, LockError> {
    Ok(Json(Ack { id }))
}

/// The same handler under `#[redis_locked]`.
#[redis_locked(key = "bench:{id}", ttl = "5s", wait = "0s", locker = bench.locker)]
async fn guarded(State(bench): State<Bench>, Path(id): Path<u64>) -> Result<Json<Ack>, LockError> {
    Ok(Json(Ack { id }))
}

fn router(locker: Locker) -> Router {
    let layer = LockLayer::new(locker.clone(), key::path("bench:{id}")).ttl(Duration::from_secs(5));
    Router::new()
        .route("/plain/{id}", post(plain))
        .route("/macro/{id}", post(guarded))
        .route("/layer/{id}", post(plain).route_layer(layer.clone()))
        .route(
            "/layer-no-renew/{id}",
            post(plain).route_layer(layer.auto_renew(false)),
        )
        .with_state(Bench { locker })
}

struct Outcome {
    requests: usize,
    failed: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    commands: Option<u64>,
}

async fn run(
    client: &Client<HttpConnector, Full<Bytes>>,
    base: &str,
    route: &str,
    requests: usize,
    concurrency: usize,
    ids: &Arc<AtomicU64>,
) -> (usize, Duration, Vec<Duration>) {
    let left = Arc::new(AtomicU64::new(requests as u64));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            let left = Arc::clone(&left);
            let ids = Arc::clone(ids);
            let prefix = format!("{base}/{route}/");
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failed = 0;
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    let request =
                        hyper::Request::post(format!("{prefix}{id}")).body(Full::new(Bytes::new()));
                    let Ok(request) = request else {
                        failed += 1;
                        continue;
                    };
                    let sent = Instant::now();
                    let ok = match client.request(request).await {
                        Ok(response) => {
                            let status = response.status();
                            response.into_body().collect().await.is_ok() && status == 200
                        }
                        Err(_) => false,
                    };
                    latencies.push(sent.elapsed());
                    if !ok {
                        failed += 1;
                    }
                }
                (failed, latencies)
            })
        })
        .collect();
    let mut failed = 0;
    let mut latencies = Vec::with_capacity(requests);
    for worker in workers {
        if let Ok((f, l)) = worker.await {
            failed += f;
            latencies.extend(l);
        }
    }
    (failed, started.elapsed(), latencies)
}

async fn commands_processed(redis: &mut redis::aio::MultiplexedConnection) -> Option<u64> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(redis)
        .await
        .ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Round trips and commands per request on `route`: 200 sequential requests watched with
/// `MONITOR`, where commands run inside a script show as `[.. lua]` and round trips do not.
async fn monitor_sample(
    url: &str,
    client: &Client<HttpConnector, Full<Bytes>>,
    base: &str,
    route: &str,
    ids: &Arc<AtomicU64>,
) -> Option<(f64, f64)> {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
    const SAMPLE: usize = 200;
    let addr = url
        .trim_start_matches("redis://")
        .split(['/', '@'])
        .find(|part| part.contains(':') && !part.is_empty())?
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(b"MONITOR\r\n").await.ok()?;
    let mut lines = tokio::io::BufReader::new(stream).lines();
    lines.next_line().await.ok()??; // +OK
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let counter = {
        let counts = Arc::clone(&counts);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                counts[1].fetch_add(1, Ordering::Relaxed);
                if !line.contains(" lua]") {
                    counts[0].fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let _ = run(client, base, route, SAMPLE, 1, ids).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    counter.abort();
    let top = counts[0].load(Ordering::Relaxed);
    let all = counts[1].load(Ordering::Relaxed);
    Some((top as f64 / SAMPLE as f64, all as f64 / SAMPLE as f64))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn parse_args() -> Result<(usize, Vec<usize>), String> {
    let usage =
        "usage: loadgen [--requests N (default 20000)] [--concurrency C[,C..] (default 1,32)]";
    let mut requests = 20_000;
    let mut concurrency = vec![1, 32];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| usage.to_owned())?;
        match arg.as_str() {
            "--requests" => requests = value.parse().map_err(|_| usage.to_owned())?,
            "--concurrency" => {
                concurrency = value
                    .split(',')
                    .map(|c| c.trim().parse::<usize>().ok().filter(|c| *c > 0))
                    .collect::<Option<_>>()
                    .ok_or_else(|| usage.to_owned())?;
            }
            _ => return Err(usage.to_owned()),
        }
    }
    Ok((requests, concurrency))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (requests, levels) = match parse_args() {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let redis_target = match discover::discover().await {
        Ok(redis) => redis,
        Err(message) => {
            eprintln!("loadgen: {message}");
            return ExitCode::FAILURE;
        }
    };
    let setup = async {
        let locker = Locker::builder()
            .url(redis_target.url())
            .app_name("loadgen")
            .build()
            .map_err(|err| err.to_string())?;
        let server = web_service::spawn(router(locker), SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .map_err(|err| err.to_string())?;
        let redis = redis::Client::open(redis_target.url())
            .map_err(|err| err.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|err| err.to_string())?;
        Ok::<_, String>((server, redis))
    };
    let (server, mut redis) = match setup.await {
        Ok(parts) => parts,
        Err(message) => {
            eprintln!("loadgen: {message}");
            return ExitCode::FAILURE;
        }
    };
    let base = server.base_url();
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http();
    let ids = Arc::new(AtomicU64::new(1));

    // The floor: one Redis round trip (PING) from this process.
    let mut pings = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let sent = Instant::now();
        let _: Result<String, _> = redis::cmd("PING").query_async(&mut redis).await;
        pings.push(sent.elapsed());
    }
    pings.sort();
    println!(
        "Redis {} ({}); one PING round trip: p50 {}, p99 {}",
        web_service::redact(redis_target.url()),
        redis_target.source().describe(),
        us(percentile(&pings, 50.0)),
        us(percentile(&pings, 99.0)),
    );
    println!("{requests} requests per run, distinct ids, keep-alive HTTP/1.1, client and server in one process\n");
    println!("Redis round trips per request (MONITOR, 200 sequential requests; commands run inside scripts in parentheses):");
    for route in ROUTES {
        if let Some((trips, all)) =
            monitor_sample(redis_target.url(), &client, &base, route, &ids).await
        {
            println!("  {:<29} {trips:.2} ({all:.2})", label(route));
        }
    }
    println!();
    println!("| route | concurrency | req/s | p50 | p99 | mean | Redis cmds/req (incl. in scripts) | failed |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for &concurrency in &levels {
        for route in ROUTES {
            // Warm-up: connections, script cache, allocator.
            let _ = run(&client, &base, route, 1000.min(requests), concurrency, &ids).await;
            let before = commands_processed(&mut redis).await;
            let (failed, elapsed, mut latencies) =
                run(&client, &base, route, requests, concurrency, &ids).await;
            let after = commands_processed(&mut redis).await;
            latencies.sort();
            let outcome = Outcome {
                requests,
                failed,
                elapsed,
                // The INFO call itself counts one.
                commands: before.zip(after).map(|(b, a)| a.saturating_sub(b + 1)),
                latencies,
            };
            print_row(route, concurrency, &outcome);
        }
    }
    drop(server);
    ExitCode::SUCCESS
}

fn print_row(route: &str, concurrency: usize, outcome: &Outcome) {
    let mean = outcome
        .latencies
        .iter()
        .sum::<Duration>()
        .checked_div(outcome.latencies.len().max(1) as u32)
        .unwrap_or_default();
    let per_request = outcome.commands.map_or("?".to_owned(), |c| {
        format!("{:.2}", c as f64 / outcome.requests as f64)
    });
    println!(
        "| {} | {concurrency} | {:.0} | {} | {} | {} | {per_request} | {} |",
        label(route),
        outcome.requests as f64 / outcome.elapsed.as_secs_f64(),
        us(percentile(&outcome.latencies, 50.0)),
        us(percentile(&outcome.latencies, 99.0)),
        us(mean),
        outcome.failed,
    );
}

const ROUTES: [&str; 4] = ["plain", "macro", "layer", "layer-no-renew"];

fn label(route: &str) -> &'static str {
    match route {
        "plain" => "unguarded",
        "macro" => "#[redis_locked]",
        "layer" => "LockLayer (path key)",
        _ => "LockLayer, auto_renew(false)",
    }
}
