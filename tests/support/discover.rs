//! "Find or start a redis-server", for the programs of this workspace (the marketplace and
//! web-service examples): `REDIS_URL` if set (it must answer); else `127.0.0.1:6379` if
//! something answers there; else a private [`RedisServer`] started from `PATH` (or
//! `REDIS_SERVER_BIN`) on a free port, stopped when the [`RedisTarget`] is dropped; else an
//! error with the install hint.

use std::fmt;
use std::time::Duration;

use crate::{RedisServer, StartError, INSTALL_HINT};

/// The environment variable that names the Redis to use.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// Where a local Redis usually listens.
pub const LOCAL_URL: &str = "redis://127.0.0.1:6379/";
/// How long a probe may take.
const PROBE_LIMIT: Duration = Duration::from_millis(500);

/// Where the Redis came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `REDIS_URL`.
    Env,
    /// The usual local port, already running.
    Local,
    /// A private `redis-server` this process started.
    Private,
}

impl Source {
    /// A few words for a banner: "from REDIS_URL", "already running", ...
    pub fn describe(self) -> &'static str {
        match self {
            Source::Env => "from REDIS_URL",
            Source::Local => "already running",
            Source::Private => "private redis-server started for this run",
        }
    }
}

/// Why no Redis could be had.
#[derive(Debug)]
pub enum DiscoveryError {
    /// `REDIS_URL` is set, but its server does not answer.
    Unreachable {
        /// The URL, without password.
        url: String,
        /// What failed.
        reason: String,
    },
    /// Nothing to connect to and no `redis-server` to start.
    NotInstalled,
    /// `redis-server` is installed but did not come up.
    Start(String),
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Unreachable { url, reason } => {
                write!(f, "REDIS_URL={url} does not answer: {reason}")
            }
            DiscoveryError::NotInstalled => write!(
                f,
                "no Redis found: REDIS_URL is not set and nothing answers on 127.0.0.1:6379; {INSTALL_HINT}"
            ),
            DiscoveryError::Start(reason) => {
                write!(f, "could not start a private redis-server: {reason}")
            }
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// The Redis to talk to. Dropping it stops a private server.
#[derive(Debug)]
pub struct RedisTarget {
    url: String,
    source: Source,
    server: Option<RedisServer>,
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
        format!("{} ({})", redact(&self.url), self.source.describe())
    }

    /// Stops a private server now (dropping does the same).
    pub fn stop(&mut self) {
        self.server = None;
    }
}

/// Finds a Redis in the order the module docs give.
pub async fn discover() -> Result<RedisTarget, DiscoveryError> {
    let env_url = std::env::var(REDIS_URL_ENV).ok().filter(|u| !u.is_empty());
    let binary = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
    discover_with(env_url, LOCAL_URL, &binary).await
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
    // Starting waits (blocking) for the server's first PONG.
    let binary = server_bin.to_owned();
    let started = tokio::task::spawn_blocking(move || RedisServer::try_start_binary(&binary))
        .await
        .map_err(|err| DiscoveryError::Start(err.to_string()))?;
    let server = match started {
        Ok(server) => server,
        Err(StartError::NotInstalled) => return Err(DiscoveryError::NotInstalled),
        Err(StartError::Failed(log)) => return Err(DiscoveryError::Start(log)),
    };
    Ok(RedisTarget {
        url: server.url(),
        source: Source::Private,
        server: Some(server),
    })
}

/// Connects and sends `PING` (with the URL's credentials), within half a second.
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

/// The URL with its user and password replaced by `***`, for banners and logs.
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
    use crate::free_port;

    #[test]
    fn passwords_stay_out_of_descriptions() {
        assert_eq!(redact("redis://:secret@db:6380/2"), "redis://***@db:6380/2");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }

    #[tokio::test]
    async fn a_missing_binary_gives_the_install_hint() {
        // Nothing listens on a free port, and the binary does not exist.
        let local = format!("redis://127.0.0.1:{}/", free_port());
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
        let url = format!("redis://:pw@127.0.0.1:{}/", free_port());
        let err = discover_with(Some(url), LOCAL_URL, "redis-server")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("does not answer"), "{text}");
        assert!(!text.contains("pw"), "{text}");
    }

    #[tokio::test]
    async fn starts_and_stops_a_private_server_when_nothing_answers() {
        let nothing = format!("redis://127.0.0.1:{}/", free_port());
        let mut target = discover_with(None, &nothing, "redis-server")
            .await
            .expect("discover");
        assert_eq!(target.source(), Source::Private);
        assert!(
            target.describe().contains("private"),
            "{}",
            target.describe()
        );
        let url = target.url().to_owned();
        probe(&url).await.expect("the private server answers");
        target.stop();
        assert!(probe(&url).await.is_err(), "the private server is gone");
    }

    #[tokio::test]
    async fn prefers_redis_url_then_the_local_port() {
        let server = RedisServer::start();
        let target = discover_with(Some(server.url()), "redis://127.0.0.1:1/", "redis-server")
            .await
            .expect("REDIS_URL answers");
        assert_eq!(target.source(), Source::Env);
        assert_eq!(target.url(), server.url());

        let target = discover_with(None, &server.url(), "/nonexistent/redis-server")
            .await
            .expect("the local port answers");
        assert_eq!(target.source(), Source::Local);
    }
}
