//! How a `Locker` opens its connections: the pool of one server (or Redlock node), the
//! Cluster and Sentinel clients, and the pub/sub connection of its notifier; TLS settings
//! applied to each.

#[cfg(feature = "sentinel")]
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Manager, Pool, PoolConfig, Runtime, Timeouts};
use redis::AsyncConnectionConfig;

#[cfg(feature = "tls-rustls")]
use crate::connection::tls::{Pinned, TlsConfig};
use crate::redact::redact_url;
use crate::LockError;

/// The builder's TLS settings (none without the `tls-rustls` feature).
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSetting {
    #[cfg(feature = "tls-rustls")]
    pub config: Option<TlsConfig>,
}

impl TlsSetting {
    /// A server name replaces the hosts of URLs; only one server (or Redlock nodes) can do
    /// that, not a Cluster or Sentinel, whose nodes are named by the servers.
    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    fn refuse_server_name(&self, what: &str) -> Result<(), LockError> {
        #[cfg(feature = "tls-rustls")]
        if self.config.as_ref().is_some_and(TlsConfig::has_server_name) {
            return Err(LockError::Config(format!(
                "TlsConfig::server_name is for one Redis or Redlock nodes: {what} names its \
                 nodes by the addresses they announce, and their certificates must name those"
            )));
        }
        let _ = what;
        Ok(())
    }

    /// The certificates to use with `rediss://` nodes, if any were given.
    #[cfg(all(feature = "tls-rustls", any(feature = "cluster", feature = "sentinel")))]
    fn certificates(&self) -> Result<Option<redis::TlsCertificates>, LockError> {
        self.config
            .as_ref()
            .map(TlsConfig::certificates)
            .transpose()
    }
}

/// Where a notifier opens its pub/sub connection.
// One per notifier, and the plain client, the common case, is the large variant: boxing it
// would buy nothing. (The lint fires only with `sentinel` and without `tls-rustls`.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Dial {
    /// A plain client (TLS settings, if any, inside it).
    Client(redis::Client),
    /// A client whose host is a TLS server name, with the real host behind it.
    #[cfg(feature = "tls-rustls")]
    Pinned(redis::Client, Pinned),
    /// The master Sentinel names now; asked again at every reconnect, so the subscription
    /// follows a failover, and the connection is retired at each switch (`switches`). A
    /// connect is bounded by `timeout` (a stalled master's role check would hang).
    #[cfg(feature = "sentinel")]
    Sentinel {
        client: Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
        switches: Arc<crate::connection::sentinel::Switches>,
        timeout: Duration,
    },
}

impl From<redis::Client> for Dial {
    fn from(client: redis::Client) -> Dial {
        Dial::Client(client)
    }
}

impl Dial {
    /// Opens a pub/sub connection.
    pub async fn pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        self.pubsub_in_epoch().await.map(|(pubsub, _)| pubsub)
    }

    /// Opens a pub/sub connection, with the number of Sentinel switches announced before it
    /// was opened (0 for other servers): compared with [`Dial::switches`] later, it tells a
    /// connection to a deposed master.
    pub async fn pubsub_in_epoch(&self) -> redis::RedisResult<(redis::aio::PubSub, u64)> {
        match self {
            Dial::Client(client) => Ok((client.get_async_pubsub().await?, 0)),
            #[cfg(feature = "tls-rustls")]
            Dial::Pinned(client, pinned) => Ok((pinned.pubsub(client).await?, 0)),
            #[cfg(feature = "sentinel")]
            Dial::Sentinel {
                client,
                switches,
                timeout,
            } => crate::connection::sentinel::open_pubsub(client, switches, *timeout).await,
        }
    }

    /// The Sentinels' failovers of the master, when that is where it dials.
    #[cfg(feature = "sentinel")]
    pub fn switches(&self) -> Option<&Arc<crate::connection::sentinel::Switches>> {
        match self {
            Dial::Sentinel { switches, .. } => Some(switches),
            _ => None,
        }
    }
}

/// The form of a Redis URL, for messages about one that is not.
const URL_FORM: &str = "expected redis://[user:password@]host:port/db, for example \
                        redis://127.0.0.1:6379/0 (rediss:// for TLS, \
                        redis+unix:///path/to/redis.sock for a local socket)";

/// The schemes redis-rs opens.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "unix",
    "redis+unix",
    "valkey+unix",
];

/// What is wrong with `url` as a Redis URL, said before redis-rs's parser (whose error
/// says only "InvalidClientConfig"); `None` when its scheme and host look right.
pub(crate) fn url_problem(url: &str) -> Option<String> {
    let shown = redact_url(url);
    let trimmed = url.trim();
    if trimmed.is_empty() {
        return Some(format!("invalid Redis URL \"\": it is empty; {URL_FORM}"));
    }
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        let guess = if trimmed.contains(['/', ' ', '@']) {
            String::new()
        } else {
            format!(" (write redis://{trimmed}/)")
        };
        return Some(format!(
            "invalid Redis URL {shown:?}: it has no scheme{guess}; {URL_FORM}"
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&scheme.as_str()) {
        let why = if scheme.starts_with("http") {
            " (Redis does not speak HTTP)"
        } else {
            ""
        };
        return Some(format!(
            "invalid Redis URL {shown:?}: its scheme `{scheme}` is not Redis's{why}; \
             {URL_FORM}"
        ));
    }
    if scheme.ends_with("unix") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.rsplit_once(':') {
        // `[::1]` alone: the colons are the IPv6 address's.
        Some((host, port)) if !host_port.ends_with(']') => (host, Some(port)),
        _ => (host_port, None),
    };
    if host.is_empty() {
        return Some(format!(
            "invalid Redis URL {shown:?}: it names no host; {URL_FORM}"
        ));
    }
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|port| port > 0)
    {
        return Some(format!(
            "invalid Redis URL {shown:?}: its port `{port}` is not a number from 1 to 65535; \
                 {URL_FORM}"
        ));
    }
    None
}

/// The configuration error for a URL that redis-rs refused: what is wrong when it can be
/// told, redis-rs's reason otherwise, and the form expected.
fn bad_url(url: &str, err: &redis::RedisError) -> LockError {
    LockError::Config(url_problem(url).unwrap_or_else(|| {
        format!(
            "invalid Redis URL {:?} ({err}); {URL_FORM}",
            redact_url(url)
        )
    }))
}

/// A client for `url`, with the TLS settings applied when there are any, and where its
/// pub/sub connection is opened.
fn client(
    url: &str,
    tls: &TlsSetting,
) -> Result<(redis::Client, Dial, AsyncConnectionConfig), LockError> {
    if let Some(problem) = url_problem(url) {
        return Err(LockError::Config(problem));
    }
    let config = AsyncConnectionConfig::new();
    #[cfg(feature = "tls-rustls")]
    if let Some(tls) = &tls.config {
        let made = tls.client(url)?;
        return Ok(match made.pinned {
            Some(pinned) => (
                made.client.clone(),
                Dial::Pinned(made.client, pinned.clone()),
                pinned.connection_config(config),
            ),
            None => (made.client.clone(), Dial::Client(made.client), config),
        });
    }
    let _ = tls;
    let client = redis::Client::open(url).map_err(|err| bad_url(url, &err))?;
    Ok((client.clone(), Dial::Client(client), config))
}

/// The pool for WATCH/MULTI's commands on the server at `url`, where to open the
/// notifier's pub/sub connection, and how to open the shared connection of Lua-script
/// commands without the pool (one parse of the URL and its TLS settings for all three).
pub(crate) fn pool(
    url: &str,
    size: Option<usize>,
    timeout: Duration,
    tls: &TlsSetting,
) -> Result<(Pool, Dial, Direct), LockError> {
    // Parse first: deadpool's own error for a bad URL does not say which part is wrong.
    let (direct, dial) = direct(url, timeout, tls)?;
    // Every command on these connections answers within `timeout` or fails: the deadline
    // the WATCH/MULTI backend relies on.
    let connection = direct.config.clone().set_response_timeout(Some(timeout));
    let manager = Manager::new_with_config(direct.client.get_connection_info().clone(), connection)
        .map_err(|err| bad_url(url, &err))?;
    let mut config = PoolConfig::default();
    if let Some(size) = size {
        config.max_size = size.max(1);
    }
    config.timeouts = Timeouts {
        wait: Some(timeout),
        create: Some(timeout),
        recycle: Some(timeout),
    };
    let pool = Pool::builder(manager)
        .config(config)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|err| {
            LockError::Config(format!(
                "cannot build a pool for {:?}: {err}",
                redact_url(url)
            ))
        })?;
    Ok((pool, dial, direct))
}

/// How the shared connection to one server is opened without a pool: the server's client,
/// and connection settings with no response timeout (each command is bounded by the
/// connection's [`Deadlines`](super::deadlines::Deadlines) instead).
#[derive(Clone)]
pub(crate) struct Direct {
    pub client: redis::Client,
    pub config: AsyncConnectionConfig,
}

/// The direct opening of the shared connection to the server at `url` (see [`Direct`]),
/// which must end within `timeout`; and where to open its pub/sub connection.
pub(crate) fn direct(
    url: &str,
    timeout: Duration,
    tls: &TlsSetting,
) -> Result<(Direct, Dial), LockError> {
    let (client, dial, config) = client(url, tls)?;
    let config = config
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None);
    Ok((Direct { client, config }, dial))
}

/// How redis-rs's cluster client retries a command that a slot's migration or a failover
/// refused (TRYAGAIN, CLUSTERDOWN, MASTERDOWN; MOVED and ASK use up tries too): 16 tries,
/// the n-th after a random pause of 2 ms to min(2^(n+1) ms, 50 ms), 0.66 s at most in all
/// (0.35 s on average). redis-rs's default waits at least 1.28 s before each try, so that every command
/// caught by a slot's migration (which lasts milliseconds) stalled more than a second.
#[cfg(feature = "cluster")]
const CLUSTER_RETRY: (u32, u64, u64) = (16, 2, 50);

/// A Cluster client on `seeds`; where to open the notifier's classic pub/sub connection
/// (the first seed: PUBLISH reaches every node of a cluster); and how to open its sharded
/// one (a second client on the same seeds, speaking RESP3, its pushes sent to the notifier).
#[cfg(feature = "cluster")]
pub(crate) fn cluster(
    seeds: &[String],
    timeout: Duration,
    tls: &TlsSetting,
) -> Result<
    (
        redis::cluster::ClusterClient,
        Option<Dial>,
        crate::connection::sharded::ShardDial,
    ),
    LockError,
> {
    tls.refuse_server_name("a Redis Cluster")?;
    if let Some(problem) = seeds.iter().find_map(|seed| url_problem(seed)) {
        return Err(LockError::Config(format!("a cluster seed: {problem}")));
    }
    #[cfg(feature = "tls-rustls")]
    let certificates = tls.certificates()?;
    #[cfg(feature = "tls-rustls")]
    if certificates.is_some()
        && let Some(plain) = seeds.iter().find(|seed| !seed.starts_with("rediss://"))
    {
        return Err(LockError::Config(format!(
            "TLS settings are given but the seed {:?} is not a rediss:// URL",
            redact_url(plain)
        )));
    }
    // A seed that cannot be a client leaves waiters to their timers rather than failing
    // the build: the cluster client accepted the seeds.
    let dial = seeds
        .first()
        .and_then(|seed| client(seed, tls).ok())
        .map(|(_, dial, _)| dial);
    let seeds = seeds.to_vec();
    let builder = move || {
        let (retries, min_wait, max_wait) = CLUSTER_RETRY;
        #[allow(unused_mut)]
        let mut builder = redis::cluster::ClusterClient::builder(seeds.clone())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(retries)
            .min_retry_wait(min_wait)
            .max_retry_wait(max_wait)
            .retry_wait_formula(2, 2);
        #[cfg(feature = "tls-rustls")]
        if let Some(certificates) = &certificates {
            builder = builder.certs(certificates.clone());
        }
        builder
    };
    let cluster = builder()
        .build()
        .map_err(|err| LockError::Config(format!("cannot use the cluster seeds: {err}")))?;
    let shards: crate::connection::sharded::ShardDial = std::sync::Arc::new(move |pushes| {
        builder()
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
    });
    Ok((cluster, dial, shards))
}

/// A client for each seed that can be one (TLS settings applied): where a Cluster's key
/// tracking reads the slot map, and the template of its connections to each master.
#[cfg(feature = "cluster")]
pub(crate) fn seed_clients(seeds: &[String], tls: &TlsSetting) -> Vec<redis::Client> {
    seeds
        .iter()
        .filter_map(|seed| client(seed, tls).ok())
        .map(|(client, _, _)| client)
        .collect()
}

/// A Sentinel client for `master`. The Sentinels are reached over TLS when their URLs are
/// `rediss://`; the masters they name when the Sentinels are, or when TLS settings were
/// given. The locker's certificates apply to both.
#[cfg(feature = "sentinel")]
pub(crate) fn sentinel(
    sentinels: Vec<String>,
    master: String,
    tls: &TlsSetting,
) -> Result<Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>, LockError> {
    use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
    use redis::IntoConnectionInfo as _;

    tls.refuse_server_name("Sentinel")?;
    if let Some(problem) = sentinels.iter().find_map(|url| url_problem(url)) {
        return Err(LockError::Config(format!("a Sentinel: {problem}")));
    }
    let bad =
        |err: redis::RedisError| LockError::Config(format!("cannot use the sentinels: {err}"));
    let infos = sentinels
        .iter()
        .map(|url| url.as_str().into_connection_info().map_err(&bad))
        .collect::<Result<Vec<_>, _>>()?;
    let sentinels_tls = infos
        .iter()
        .any(|info| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }));
    #[cfg(feature = "tls-rustls")]
    let certificates = tls.certificates()?;
    #[cfg(not(feature = "tls-rustls"))]
    let certificates: Option<()> = None;
    // The masters speak TLS when the Sentinels do, or when TLS settings were given.
    let masters_tls = sentinels_tls || certificates.is_some();
    let client = if masters_tls {
        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|info| info.addr().clone()),
            master,
            SentinelServerType::Master,
        )
        .map_err(bad)?
        .set_client_to_redis_tls_mode(redis::TlsMode::Secure);
        // Credentials for the Sentinels come from the first URL that has them.
        let settings = infos.iter().map(redis::ConnectionInfo::redis_settings);
        if let Some(user) = settings.clone().find_map(|s| s.username()) {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = settings.clone().find_map(|s| s.password()) {
            builder = builder.set_client_to_sentinel_password(password);
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(certificates) = certificates {
            if sentinels_tls {
                builder = builder.set_client_to_sentinel_certificates(certificates.clone());
            }
            builder = builder.set_client_to_redis_certificates(certificates);
        }
        builder.build().map_err(bad)?
    } else {
        SentinelClient::build(infos, master, None, SentinelServerType::Master).map_err(bad)?
    };
    Ok(Arc::new(tokio::sync::Mutex::new(client)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_problems_say_what_is_wrong() {
        let cases = [
            ("", "is empty"),
            (
                "127.0.0.1:6379",
                "has no scheme (write redis://127.0.0.1:6379/)",
            ),
            (
                "http://127.0.0.1:6379/",
                "scheme `http` is not Redis's (Redis does not speak HTTP)",
            ),
            ("redis://:6379/", "names no host"),
            ("redis://u:pw@/0", "names no host"),
            ("redis://h:99999999/", "port `99999999`"),
            ("redis://h:0/", "port `0`"),
        ];
        for (url, expected) in cases {
            let problem = url_problem(url).unwrap_or_else(|| panic!("{url:?} accepted"));
            assert!(problem.contains(expected), "{url:?}: {problem}");
            assert!(
                problem.starts_with("invalid Redis URL"),
                "{url:?}: {problem}"
            );
            assert!(
                problem.contains("redis://127.0.0.1:6379/0"),
                "{url:?}: {problem}"
            );
            assert!(!problem.contains("pw"), "{url:?}: {problem}");
        }
        for url in [
            "redis://127.0.0.1:6379/",
            "redis://h",
            "rediss://u:p@h:6380/2",
            "redis://[::1]:6379/",
            "redis://[::1]",
            "redis+unix:///tmp/r.sock",
            "unix:///tmp/r.sock",
        ] {
            assert_eq!(url_problem(url), None, "{url}");
        }
    }
}
