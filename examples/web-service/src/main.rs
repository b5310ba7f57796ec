//! `cargo run -p web-service [-- --port 3000 --work-ms 200]`: the checkout API on
//! 127.0.0.1, on the Redis that `lock_tests::discover` finds (or starts).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use lock_tests::discover;
use web_service::{redact, router, state};

const USAGE: &str =
    "usage: web-service [--port N (default 3000, 0 = any)] [--work-ms N (default 200)]";

fn parse_args() -> Result<(u16, u64), String> {
    let mut port = 3000;
    let mut work_ms = 200;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = |args: &mut dyn Iterator<Item = String>| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| format!("{arg} needs a number\n{USAGE}"))
        };
        match arg.as_str() {
            "--port" => {
                port = u16::try_from(value(&mut args)?).map_err(|_| format!("bad port\n{USAGE}"))?
            }
            "--work-ms" => work_ms = value(&mut args)?,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok((port, work_ms))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .init();
    let (port, work_ms) = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let redis = match discover::discover().await {
        Ok(redis) => redis,
        Err(message) => {
            eprintln!("web-service: {message}");
            return ExitCode::FAILURE;
        }
    };
    let state = match state(redis.url(), Duration::from_millis(work_ms)) {
        Ok(state) => state,
        Err(message) => {
            eprintln!("web-service: {message}");
            return ExitCode::FAILURE;
        }
    };
    let server = match web_service::spawn(
        router(state),
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
    )
    .await
    {
        Ok(server) => server,
        Err(err) => {
            eprintln!("web-service: cannot listen on 127.0.0.1:{port}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let base = server.base_url();
    println!(
        "web-service on {base}  (Redis {}: {})",
        redact(redis.url()),
        redis.source().describe()
    );
    println!("  curl -i -X POST {base}/orders/7/pay -H 'content-type: application/json' -d '{{\"amount_cents\":1299}}'");
    println!("  curl -i -X POST {base}/webhooks/payments -H 'Idempotency-Key: evt_1' -H 'content-type: application/json' -d '{{\"type\":\"charge.succeeded\",\"order_id\":7}}'");
    println!("Ctrl-C stops it.");
    if let Err(err) = tokio::signal::ctrl_c().await {
        eprintln!("web-service: cannot wait for Ctrl-C: {err}");
    }
    drop(server);
    drop(redis);
    ExitCode::SUCCESS
}
