//! Following the master Redis Sentinel names (connections layer): opening a connection
//! to it that is not trusted when the Sentinels changed their mind while it was being
//! opened, and the Sentinels' `+switch-master` events, which retire every connection to a
//! deposed master at the switch.
//!
//! Why both: a connect asks the Sentinels where the master is, then checks the server's
//! role. When that server stalls in between (SIGSTOP, a paused VM, a GC-like pause) the
//! check hangs, and the Sentinels may promote a replica meanwhile; once resumed, the old
//! master answers the check as the master it still believes it is, for the seconds until
//! the Sentinels demote it. So a connect is only trusted when no switch was announced while
//! it ran and the Sentinels, asked again once it is open, still name the same server. An
//! open connection that saw no error through the failover (nothing was sent during the
//! stall) is retired when the switch is announced.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;

use crate::undo::Undo;
use crate::LockError;

/// The channels on which Sentinels announce a failover: `+promoted-slave` when the chosen
/// replica answers as a master (from then on `SENTINEL GET-MASTER-ADDR-BY-NAME` names it;
/// payload `slave <ip>:<port> <ip> <port> @ <name> <old ip> <old port>`), and
/// `+switch-master` once the other replicas are reconfigured (`<name> <old ip> <old port>
/// <new ip> <new port>`).
const SWITCH_CHANNELS: [&str; 2] = ["+promoted-slave", "+switch-master"];

/// How long the watcher waits before subscribing again after losing its Sentinel.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// How often an idle watcher checks whether its locker is gone.
const LIVENESS_CHECK: Duration = Duration::from_secs(5);

/// How many times a connect asks again when the Sentinels changed their answer under it.
const CONNECT_ROUNDS: usize = 3;

/// Failovers of one master seen by this locker; a connection opened before the latest is
/// to a deposed master.
pub(crate) struct Switches {
    master: String,
    epoch: AtomicU64,
    watching: AtomicBool,
    /// The epoch, for those who act at a switch (the notifier retires its pub/sub
    /// connection, which sends nothing that could fail on the deposed master).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Switches {
    pub fn new(master: String) -> Arc<Switches> {
        Arc::new(Switches {
            master,
            epoch: AtomicU64::new(0),
            watching: AtomicBool::new(false),
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The number of switches seen so far.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Tells of every switch from now on (the receiver ends with this locker).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Counts a switch announced by a Sentinel, if it is of this master.
    fn announced(&self, channel: &str, payload: &str) {
        let mut words = payload.split(' ');
        let master = if channel == "+switch-master" {
            words.next()
        } else {
            words.skip_while(|word| *word != "@").nth(1)
        };
        if master == Some(self.master.as_str()) {
            let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            self.changes.send_replace(epoch);
            tracing::info!(master = %self.master, epoch, switch = payload, "the Sentinels switched the master; connections to the old one are retired");
        }
    }

    /// Starts following `+switch-master` (once; the task ends soon after the locker).
    pub fn watch(self: &Arc<Self>, client: &Arc<tokio::sync::Mutex<SentinelClient>>) {
        if self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.watching.store(false, Ordering::Release);
            return;
        };
        let switches = Arc::downgrade(self);
        let client = Arc::clone(client);
        // Dropped with its runtime (before its first poll, too) while the locker lives on:
        // the locker's next connection to the master starts another follower.
        let mark = switches.clone();
        let unfinished = Undo::new(move || {
            if let Some(switches) = mark.upgrade() {
                switches.watching.store(false, Ordering::Release);
            }
        });
        runtime.spawn(async move {
            follow_switches(switches, client).await;
            // Ends only once the locker is gone: nothing to take back.
            unfinished.disarm();
        });
    }
}

/// Subscribes to `+switch-master` on a Sentinel, again after every loss, until the locker
/// is gone.
async fn follow_switches(
    switches: Weak<Switches>,
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
) {
    loop {
        if switches.strong_count() == 0 {
            return;
        }
        match subscribe(&client).await {
            Ok(pubsub) => {
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        message = messages.next() => {
                            let Some(message) = message else { break };
                            let Some(switches) = switches.upgrade() else { return };
                            if let Ok(payload) = message.get_payload::<String>() {
                                switches.announced(message.get_channel_name(), &payload);
                            }
                        }
                        () = tokio::time::sleep(LIVENESS_CHECK) => {
                            if switches.strong_count() == 0 {
                                return;
                            }
                        }
                    }
                }
            }
            Err(err) => {
                tracing::debug!(%err, "cannot subscribe to the Sentinels' +switch-master; retrying");
            }
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}

async fn subscribe(
    client: &tokio::sync::Mutex<SentinelClient>,
) -> redis::RedisResult<redis::aio::PubSub> {
    let sentinel = client.lock().await.async_get_sentinel_client().await?;
    let mut pubsub = sentinel.get_async_pubsub().await?;
    pubsub.subscribe(&SWITCH_CHANNELS[..]).await?;
    Ok(pubsub)
}

/// A connection to the master the Sentinels name, trusted only when no switch was
/// announced while it was opened and the Sentinels, asked again once it is open, still
/// name the same server.
pub(crate) async fn open_master(
    name: &str,
    client: &Arc<tokio::sync::Mutex<SentinelClient>>,
    config: &redis::AsyncConnectionConfig,
    switches: &Arc<Switches>,
) -> Result<(MultiplexedConnection, u64), LockError> {
    open_trusted(client, switches, |named| async move {
        named
            .get_multiplexed_async_connection_with_config(config)
            .await
    })
    .await
    .map_err(|err| err.for_lock(name))
}

/// A pub/sub connection to the master the Sentinels name (a notifier's), trusted as
/// [`open_master`]'s connections are, each step bounded by `timeout`, with the epoch of
/// switches it was opened in.
pub(crate) async fn open_pubsub(
    client: &Arc<tokio::sync::Mutex<SentinelClient>>,
    switches: &Arc<Switches>,
    timeout: Duration,
) -> redis::RedisResult<(redis::aio::PubSub, u64)> {
    let opening = open_trusted(client, switches, |named| async move {
        named.get_async_pubsub().await
    });
    match tokio::time::timeout(timeout, opening).await {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(err)) => Err(err.into_redis()),
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no pub/sub connection to the Sentinels' master within {timeout:?}"),
        ))),
    }
}

/// A connection opened by `open` on the master the Sentinels name (a key-tracking
/// connection's), trusted as [`open_master`]'s connections are, with the epoch of switches
/// it was opened in.
pub(crate) async fn open_with<T, F>(
    client: &Arc<tokio::sync::Mutex<SentinelClient>>,
    switches: &Arc<Switches>,
    open: impl Fn(redis::Client) -> F,
) -> redis::RedisResult<(T, u64)>
where
    F: std::future::Future<Output = redis::RedisResult<T>>,
{
    open_trusted(client, switches, open)
        .await
        .map_err(OpenError::into_redis)
}

/// Why a connect to the Sentinels' master failed.
enum OpenError {
    Redis(redis::RedisError),
    KeptChanging(String),
}

impl OpenError {
    fn for_lock(self, name: &str) -> LockError {
        match self {
            OpenError::Redis(err) => cannot_connect(name, err),
            OpenError::KeptChanging(last) => LockError::connection(
                name,
                format!("the Sentinels' master kept changing during the connect ({last}); retry once the failover has settled"),
            ),
        }
    }

    fn into_redis(self) -> redis::RedisError {
        match self {
            OpenError::Redis(err) => err,
            OpenError::KeptChanging(last) => redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                format!("the Sentinels' master kept changing during the connect ({last})"),
            )),
        }
    }
}

/// Opens a connection with `open` to the master the Sentinels name; trusted only when no
/// switch was announced meanwhile and the Sentinels, asked again once it is open, still
/// name that server.
async fn open_trusted<T, F>(
    client: &Arc<tokio::sync::Mutex<SentinelClient>>,
    switches: &Arc<Switches>,
    open: impl Fn(redis::Client) -> F,
) -> Result<(T, u64), OpenError>
where
    F: std::future::Future<Output = redis::RedisResult<T>>,
{
    switches.watch(client);
    let mut last = String::new();
    for _ in 0..CONNECT_ROUNDS {
        let epoch = switches.epoch();
        let named = client
            .lock()
            .await
            .async_get_client()
            .await
            .map_err(OpenError::Redis)?;
        let first = host_port(named.get_connection_info().addr());
        let conn = open(named).await.map_err(OpenError::Redis)?;
        // The role check above may have hung on a stalled server and been answered when it
        // resumed, after a failover: ask again, the way the Sentinel client protocol says
        // (`SENTINEL MASTERS`, which redis-rs reads, names the old master until the end of
        // the failover; this names the promoted replica from its promotion on).
        let second = named_master(client, &switches.master)
            .await
            .map_err(OpenError::Redis)?;
        if Some(&second) == first.as_ref() && switches.epoch() == epoch {
            return Ok((conn, epoch));
        }
        last = format!(
            "the Sentinels named {:?} and then {second:?} while it connected",
            first.unwrap_or_default()
        );
        tracing::info!(change = %last, "the master changed during a connect; asking the Sentinels again");
    }
    Err(OpenError::KeptChanging(last))
}

/// Where the Sentinels say the master is now (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
async fn named_master(
    client: &tokio::sync::Mutex<SentinelClient>,
    master: &str,
) -> redis::RedisResult<(String, u16)> {
    let sentinel = client.lock().await.async_get_sentinel_client().await?;
    let mut conn = sentinel.get_multiplexed_async_connection().await?;
    let (host, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    Ok((host, port))
}

fn host_port(addr: &redis::ConnectionAddr) -> Option<(String, u16)> {
    match addr {
        redis::ConnectionAddr::Tcp(host, port) => Some((host.clone(), *port)),
        redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

fn cannot_connect(name: &str, err: redis::RedisError) -> LockError {
    if let Some(reason) = crate::refusal::misconfiguration(&err, "the master") {
        return LockError::Misconfigured {
            name: name.to_owned(),
            reason,
            source: Some(Box::new(err)),
        };
    }
    LockError::Connection {
        name: name.to_owned(),
        reason: format!("cannot connect: {err}"),
        source: Some(Box::new(err)),
    }
}
