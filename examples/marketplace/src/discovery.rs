//! Finding a Redis for the example: `REDIS_URL` if set; otherwise `127.0.0.1:6379` if it
//! answers; otherwise a private `redis-server` started from `PATH` on a free port (stopped
//! when the [`RedisTarget`] is dropped); otherwise an error that says how to install Redis.

use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that names the Redis to use.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// Where a local Redis usually listens.
pub const LOCAL_URL: &str = "redis://127.0.0.1:6379/";
/// How long a probe may take.
const PROBE_LIMIT: Duration = Duration::from_millis(500);
/// How long a private server may take to answer its first `PING`.
const STARTUP_LIMIT: Duration = Duration::from_secs(10);

/// What to tell someone without Redis.
pub const INSTALL_HINT: &str = "no Redis found: REDIS_URL is not set, nothing answers on \
    127.0.0.1:6379, and redis-server is not on PATH. Install Redis (Debian/Ubuntu: \
    `sudo apt-get install -y redis-server`; macOS: `brew install redis`) or set \
    REDIS_URL=redis://host:port/";

/// Where the Redis came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `REDIS_URL`.
    Env,
    /// The usual local port, already running.
    Local,
    /// A private `redis-server` this process started.
    Private,
}

/// Why no Redis could be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// `REDIS_URL` is set, but its server does not answer.
    #[error("REDIS_URL={url} does not answer: {reason}")]
    Unreachable {
        /// The URL, without password.
        url: String,
        /// What failed.
        reason: String,
    },
    /// Nothing to connect to and no `redis-server` to start.
    #[error("{INSTALL_HINT}")]
    NotInstalled,
    /// `redis-server` is installed but did not come up.
    #[error("could not start a private redis-server: {0}")]
    Start(String),
}

/// The Redis the example talks to. Dropping it stops a private server.
#[derive(Debug)]
pub struct RedisTarget {
    url: String,
    source: Source,
    server: Option<PrivateServer>,
}

impl RedisTarget {
    /// The URL to connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where it came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// One line for humans: where, and from where (the password hidden).
    pub fn describe(&self) -> String {
        let how = match self.source {
            Source::Env => "from REDIS_URL",
            Source::Local => "already running",
            Source::Private => "private redis-server started for this run",
        };
        format!("{} ({how})", redact(&self.url))
    }

    /// Stops a private server now (dropping does the same).
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop();
        }
    }
}

/// Finds a Redis in the order the module docs give.
pub async fn discover() -> Result<RedisTarget, DiscoveryError> {
    let env_url = std::env::var(REDIS_URL_ENV).ok().filter(|u| !u.is_empty());
    discover_with(env_url, LOCAL_URL, "redis-server").await
}

/// [`discover`] with every input given: the `REDIS_URL` value, the local URL to probe, and
/// the `redis-server` binary to start.
pub async fn discover_with(
    env_url: Option<String>,
    local_url: &str,
    server_bin: &str,
) -> Result<RedisTarget, DiscoveryError> {
    if let Some(url) = env_url {
        return match probe(&url).await {
            Ok(()) => Ok(RedisTarget {
                url,
                source: Source::Env,
                server: None,
            }),
            Err(reason) => Err(DiscoveryError::Unreachable {
                url: redact(&url),
                reason,
            }),
        };
    }
    if probe(local_url).await.is_ok() {
        return Ok(RedisTarget {
            url: local_url.to_owned(),
            source: Source::Local,
            server: None,
        });
    }
    let server = PrivateServer::start(server_bin).await?;
    Ok(RedisTarget {
        url: server.url(),
        source: Source::Private,
        server: Some(server),
    })
}

/// Connects and sends `PING`, within half a second.
pub async fn probe(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|err| err.to_string())?;
    let attempt = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(PROBE_LIMIT, attempt).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_LIMIT:?}")),
    }
}

/// A `redis-server` of our own: loopback only, persistence off, in a temporary directory;
/// killed when dropped.
#[derive(Debug)]
pub struct PrivateServer {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PrivateServer {
    /// Starts `binary` on a free port and waits until it answers.
    pub async fn start(binary: &str) -> Result<PrivateServer, DiscoveryError> {
        let dir = tempfile::Builder::new()
            .prefix("marketplace-redis-")
            .tempdir()
            .map_err(|err| DiscoveryError::Start(format!("no temp dir: {err}")))?;
        let mut last = String::new();
        // A port found free can be taken before redis binds it: try a few.
        for _ in 0..3 {
            let port = free_port().map_err(|err| DiscoveryError::Start(err.to_string()))?;
            let child = Command::new(binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match child {
                Ok(child) => child,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    return Err(DiscoveryError::NotInstalled)
                }
                Err(err) => return Err(DiscoveryError::Start(format!("{binary}: {err}"))),
            };
            let mut child = child;
            match wait_until_up(&mut child, port).await {
                Ok(()) => {
                    return Ok(PrivateServer {
                        child: Some(child),
                        port,
                        _dir: dir,
                    })
                }
                Err(reason) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last = reason;
                }
            }
        }
        Err(DiscoveryError::Start(last))
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until the server on `port` answers `PING`, or fails if it exits or stays silent.
async fn wait_until_up(child: &mut Child, port: u16) -> Result<(), String> {
    let started = Instant::now();
    let url = format!("redis://127.0.0.1:{port}/");
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server exited at once ({status})"));
        }
        let reason = match probe(&url).await {
            Ok(()) => return Ok(()),
            Err(reason) => reason,
        };
        if started.elapsed() > STARTUP_LIMIT {
            return Err(format!("no answer within {STARTUP_LIMIT:?}: {reason}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The URL with its user and password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_descriptions() {
        assert_eq!(redact("redis://:secret@db:6380/2"), "redis://***@db:6380/2");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }

    #[tokio::test]
    async fn a_missing_binary_gives_the_install_hint() {
        // Nothing listens on a free port, and the binary does not exist.
        let port = free_port().unwrap();
        let local = format!("redis://127.0.0.1:{port}/");
        let err = discover_with(None, &local, "/nonexistent/redis-server-for-tests")
            .await
            .unwrap_err();
        assert!(matches!(err, DiscoveryError::NotInstalled), "{err}");
        assert!(
            err.to_string().contains("apt-get install -y redis-server"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_redis_url_is_an_error_not_a_fallback() {
        let port = free_port().unwrap();
        let url = format!("redis://:pw@127.0.0.1:{port}/");
        let err = discover_with(Some(url), LOCAL_URL, "redis-server")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("does not answer"), "{text}");
        assert!(!text.contains("pw"), "{text}");
    }
}
