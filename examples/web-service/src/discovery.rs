//! Which Redis the service talks to, in this order: `REDIS_URL` if set (it must answer);
//! else `127.0.0.1:6379` if something answers there; else a private `redis-server` from
//! `PATH` on a free port, stopped when the [`Redis`] value is dropped; else an error with an
//! install hint.

use std::net::{Ipv4Addr, TcpListener};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// What to tell someone without Redis.
pub const INSTALL_HINT: &str = "no Redis: REDIS_URL is not set, nothing answers on \
     127.0.0.1:6379, and redis-server is not on PATH. Install it (Debian/Ubuntu: \
     `sudo apt-get install -y redis-server`, macOS: `brew install redis`) or set \
     REDIS_URL=redis://host:port/";

const LOCAL_URL: &str = "redis://127.0.0.1:6379/";

/// A Redis to use; dropping it stops the private server, if one was started.
#[derive(Debug)]
pub struct Redis {
    url: String,
    origin: &'static str,
    // Declared before the directory so the server stops before its directory goes.
    _child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl Redis {
    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where it came from, for the startup banner.
    pub fn origin(&self) -> &'static str {
        self.origin
    }
}

/// Finds a Redis as the module docs say.
pub async fn discover() -> Result<Redis, String> {
    if let Some(url) = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        return match ping(&url).await {
            Ok(()) => Ok(Redis {
                url,
                origin: "REDIS_URL",
                _child: None,
                _dir: None,
            }),
            Err(why) => Err(format!("REDIS_URL is set but does not answer: {why}")),
        };
    }
    if ping(LOCAL_URL).await.is_ok() {
        return Ok(Redis {
            url: LOCAL_URL.to_owned(),
            origin: "already running on the default port",
            _child: None,
            _dir: None,
        });
    }
    start_private("redis-server").await
}

/// Starts `binary` on a free loopback port, persistence off, in a temporary directory.
pub async fn start_private(binary: &str) -> Result<Redis, String> {
    let dir = tempfile::Builder::new()
        .prefix("web-service-redis-")
        .tempdir()
        .map_err(|err| format!("no temporary directory for redis-server: {err}"))?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map_err(|err| format!("no free port: {err}"))?
        .port();
    let child = Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(INSTALL_HINT.to_owned())
        }
        Err(err) => return Err(format!("cannot run {binary}: {err}")),
    };
    let url = format!("redis://127.0.0.1:{port}/");
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{binary} exited at once ({status})"));
        }
        match ping(&url).await {
            Ok(()) => break,
            Err(why) if started.elapsed() > Duration::from_secs(10) => {
                return Err(format!("{binary} did not answer within 10 s: {why}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    Ok(Redis {
        url,
        origin: "private redis-server started for this run",
        _child: Some(child),
        _dir: Some(dir),
    })
}

/// Connects and sends `PING`, within half a second.
async fn ping(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|err| err.to_string())?;
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(Duration::from_millis(500), attempt).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err("no answer within 500 ms".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_private_server_is_started_and_stopped() {
        let redis = start_private("redis-server")
            .await
            .expect("redis-server on PATH");
        assert!(redis.url().starts_with("redis://127.0.0.1:"));
        assert!(ping(redis.url()).await.is_ok());
        let url = redis.url().to_owned();
        drop(redis);
        let deadline = Instant::now() + Duration::from_secs(5);
        while ping(&url).await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "the private server outlived its handle"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn without_redis_server_the_error_says_how_to_install_it() {
        let err = start_private("/nonexistent/redis-server")
            .await
            .unwrap_err();
        assert_eq!(err, INSTALL_HINT);
        assert!(err.contains("apt-get install -y redis-server"));
    }
}
