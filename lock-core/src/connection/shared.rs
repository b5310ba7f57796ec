//! How lock commands reach Redis: one multiplexed connection taken from the pool (or a
//! cluster connection, or the master a Sentinel names).
//!
//! A deadpool-redis checkout answers a `PING` (and `UNWATCH`) before handing out the
//! connection, which doubles the round trips of a one-command lock operation. Lock commands
//! are short and independent, so they share one multiplexed connection instead: every task
//! pipelines on the same socket, which is also what makes 64 concurrent lockers fast. A
//! Locker given a URL opens (and, after a failure, reopens) that connection with its own
//! client, under the URL's TLS and auth settings, without redis-rs's response timeout:
//! [`Deadlines`] bounds each command instead. Without TLS it is four sockets whose writes
//! are gathered ([`Lanes`], `connection/lanes.rs`). On a pool built elsewhere the pool creates
//! it, with that pool's settings and timeout. The WATCH/MULTI backend keeps using
//! checkouts because it needs a connection of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::Duration;

use deadpool_redis::{Connection, Pool, PoolError, TimeoutType};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::connect::Direct;
use super::deadlines::Deadlines;
use super::lanes::{Flight, Lanes, LANES};
use super::spares::{Spare, Spares};
use crate::deadline::within;
use crate::refusal::misconfiguration;
use crate::LockError;

/// Where the shared connection comes from.
#[derive(Clone)]
pub(crate) enum Source {
    /// One server, through a deadpool-redis pool built elsewhere: its connections' own
    /// response timeout bounds each command.
    Pool(Pool),
    /// One server at a URL this Locker was given: the shared connection is opened by its
    /// own client, without redis-rs's response timeout, and each command is bounded by the
    /// command timeout through [`Deadlines`] (no timer per command).
    Direct(Box<Direct>),
    /// A Redis Cluster: one cluster connection routes each command to the master of its
    /// key's slot and follows MOVED/ASK redirections during resharding and failover.
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterClient>),
    /// The master Redis Sentinel currently names; asked again after every failure.
    #[cfg(feature = "sentinel")]
    Sentinel {
        client: Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
        config: Box<redis::AsyncConnectionConfig>,
        /// The failovers announced so far: a connection opened before the latest one is
        /// retired.
        switches: Arc<crate::connection::sentinel::Switches>,
    },
}

/// A connection of any source; cheap to clone (all share one socket or socket set).
#[derive(Clone)]
pub(crate) enum Conn {
    /// Its own response timeout bounds each command (a pool built elsewhere).
    Single(MultiplexedConnection),
    /// Opened without a response timeout: each command is bounded by `timeout` through
    /// `deadlines` (see `connection/deadlines.rs`), and goes out on the lane of the task
    /// that sends it (see `connection/lanes.rs`).
    Bounded {
        conn: Lanes,
        deadlines: Deadlines,
        timeout: Duration,
    },
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Bounded {
                conn,
                deadlines,
                timeout,
            } => {
                let (lane, flight) = conn.pick();
                let command = lane.send_packed_command(cmd);
                Box::pin(deadlines.bound(*timeout, Flight::count(flight, command)))
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Bounded {
                conn,
                deadlines,
                timeout,
            } => {
                let (lane, flight) = conn.pick();
                let commands = lane.send_packed_commands(cmd, offset, count);
                Box::pin(deadlines.bound(*timeout, Flight::count(flight, commands)))
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Bounded { conn, .. } => conn.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

impl Conn {
    /// A clone whose commands go out behind the last command this one sent, on its socket,
    /// from any task (see `connection/lanes.rs`).
    pub fn following(&self) -> Conn {
        self.with_lanes(Lanes::following)
    }

    /// A clone whose commands, from any task, go out on the socket a command sent now on
    /// this one would take, in order (see `connection/lanes.rs`).
    pub fn pinned_here(&self) -> Conn {
        self.with_lanes(Lanes::pinned_here)
    }

    /// A clone whose lanes are `lanes` of this one's (a plain clone of one socket).
    fn with_lanes(&self, lanes: impl FnOnce(&Lanes) -> Lanes) -> Conn {
        match self {
            Conn::Bounded {
                conn,
                deadlines,
                timeout,
            } => Conn::Bounded {
                conn: lanes(conn),
                deadlines: deadlines.clone(),
                timeout: *timeout,
            },
            other => other.clone(),
        }
    }

    /// Sets how long each command on this clone waits for its reply (every clone carries
    /// its own; the other clones keep theirs). False, and nothing changed, on a Cluster
    /// connection, whose timeout is the client's.
    pub fn set_response_timeout(&mut self, timeout: Duration) -> bool {
        match self {
            Conn::Single(conn) => {
                conn.set_response_timeout(timeout);
                true
            }
            Conn::Bounded { timeout: bound, .. } => {
                *bound = timeout;
                true
            }
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => false,
        }
    }
}

/// The source plus the shared connection currently in use.
#[derive(Clone)]
pub(crate) struct SharedConnection {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    /// Deadline for opening a connection (the pool's own timeouts may be unset when the
    /// user built the pool).
    connect_timeout: Duration,
    /// The server's URL without credentials, for messages (unknown for a user's pool).
    address: Option<String>,
    current: RwLock<Option<Slot>>,
    /// The generation of the open connection (0: none), written with `current`: read by
    /// every operation without taking the lock (see [`SharedConnection::give_back`]).
    open: AtomicU64,
    /// How many connections were opened: the last one's generation.
    issued: AtomicU64,
    /// Clones of the open connection each thread keeps between operations.
    spares: Spares<Conn>,
    /// Serialises reconnects so that a burst of failures opens one new connection, not one
    /// per waiting task.
    reconnect: tokio::sync::Mutex<()>,
    /// The commands' deadlines on a connection this Locker opened itself (not from a pool
    /// built elsewhere).
    deadlines: Deadlines,
}

#[derive(Clone)]
struct Slot {
    conn: Conn,
    generation: u64,
    /// The Sentinel failovers announced before it was opened (0 for other sources).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    switches: u64,
}

/// A clone of the shared connection, remembering which one it was so that a failure can
/// retire exactly that connection.
pub(crate) struct Lent {
    pub conn: Conn,
    generation: u64,
    /// The Sentinel failovers announced before the connection was opened.
    switches: u64,
}

impl From<Slot> for Lent {
    fn from(slot: Slot) -> Lent {
        Lent {
            conn: slot.conn,
            generation: slot.generation,
            switches: slot.switches,
        }
    }
}

impl SharedConnection {
    /// `address` is the server's URL without credentials, named when it cannot be reached.
    pub fn new(
        source: Source,
        connect_timeout: Duration,
        address: Option<String>,
    ) -> SharedConnection {
        SharedConnection {
            inner: Arc::new(Inner {
                source,
                connect_timeout,
                address,
                current: RwLock::new(None),
                open: AtomicU64::new(0),
                issued: AtomicU64::new(0),
                spares: Spares::new(),
                reconnect: tokio::sync::Mutex::new(()),
                deadlines: Deadlines::new(),
            }),
        }
    }

    /// Whether a connection is open, so that an operation started now needs no set-up.
    pub fn is_open(&self) -> bool {
        self.inner.open.load(Ordering::Acquire) != 0
    }

    /// The deadline for opening a connection, which is also each command's (the locker's
    /// command timeout).
    pub fn timeout(&self) -> Duration {
        self.inner.connect_timeout
    }

    /// The shared connection if one is open (nothing is opened: `None` otherwise).
    pub fn get_open(&self) -> Option<Lent> {
        self.spare().or_else(|| self.current().map(Lent::from))
    }

    /// Keeps `lent` for the next operation on this thread (see `connection/spares.rs`),
    /// unless its connection was retired since. Only for a clone whose response timeout is
    /// the connection's own (put back after an attempt cut it short).
    pub fn give_back(&self, lent: Lent) {
        if lent.generation == self.inner.open.load(Ordering::Acquire) {
            self.inner.spares.put(Spare {
                conn: lent.conn,
                generation: lent.generation,
                switches: lent.switches,
            });
        }
    }

    /// A clone of the open connection this thread kept, if any.
    fn spare(&self) -> Option<Lent> {
        let generation = self.inner.open.load(Ordering::Acquire);
        if generation == 0 {
            return None;
        }
        let spare = self
            .inner
            .spares
            .take(generation, |spare| self.leads_to_master(spare.switches))?;
        Some(Lent {
            conn: spare.conn,
            generation,
            switches: spare.switches,
        })
    }

    /// False when a Sentinel announced a failover since a connection opened after
    /// `switches` of them (it may lead to a deposed master); always true elsewhere.
    fn leads_to_master(&self, switches: u64) -> bool {
        #[cfg(feature = "sentinel")]
        if let Source::Sentinel { switches: now, .. } = &self.inner.source {
            return now.epoch() == switches;
        }
        let _ = switches;
        true
    }

    /// Whether each clone of the connection carries a response timeout of its own (one
    /// server, or Sentinel's master; not a Cluster's connection).
    pub fn times_out_per_clone(&self) -> bool {
        #[cfg(feature = "cluster")]
        if matches!(self.inner.source, Source::Cluster(_)) {
            return false;
        }
        true
    }

    /// The shared connection, opening it first if there is none.
    pub async fn get(&self, name: &str) -> Result<Lent, LockError> {
        if let Some(lent) = self.get_open() {
            return Ok(lent);
        }
        match self.open_in_task(name).await {
            Ok(result) => result,
            Err(_) => Err(LockError::connection(name, "the connecting task failed")),
        }
    }

    /// Opens the connection in a task of its own: a caller that gives up (a Redlock node
    /// deadline, a dropped request) must not abort a connection that the next caller
    /// needs, or a slow network would never get one established. Not inlined: the
    /// connecting future is built here, not in the frame of every [`SharedConnection::get`]
    /// (see `out_of_line.rs`).
    #[inline(never)]
    fn open_in_task(&self, name: &str) -> tokio::task::JoinHandle<Result<Lent, LockError>> {
        let this = self.clone();
        let owned_name = name.to_owned();
        tokio::spawn(async move { this.connect(&owned_name).await })
    }

    async fn connect(&self, name: &str) -> Result<Lent, LockError> {
        let _one_at_a_time = self.inner.reconnect.lock().await;
        if let Some(slot) = self.current() {
            return Ok(Lent::from(slot));
        }
        let (conn, switches) = within(self.inner.connect_timeout, name, self.open(name)).await?;
        let generation = {
            let mut current = write_ignoring_poison(&self.inner.current);
            // Never a number used before, even after a retired connection left none open:
            // a clone of that one (kept, or failing late) must not pass for this one.
            let generation = self.inner.issued.fetch_add(1, Ordering::Relaxed) + 1;
            *current = Some(Slot {
                conn: conn.clone(),
                generation,
                switches,
            });
            self.inner.open.store(generation, Ordering::Release);
            generation
        };
        Ok(Lent {
            conn,
            generation,
            switches,
        })
    }

    /// Retires the connection `lent` came from after an I/O failure, so the next command
    /// opens a fresh one. A newer connection is left alone.
    /// Whether the server behind this connection can change under it (a Sentinel's master):
    /// an operation given up without an answer should make the next one ask again where
    /// the master is, rather than keep talking to a server that may have been deposed.
    pub fn follows_master(&self) -> bool {
        #[cfg(feature = "sentinel")]
        if matches!(self.inner.source, Source::Sentinel { .. }) {
            return true;
        }
        false
    }

    pub fn retire(&self, lent: &Lent) {
        let mut current = write_ignoring_poison(&self.inner.current);
        if current
            .as_ref()
            .is_some_and(|slot| slot.generation == lent.generation)
        {
            *current = None;
            self.inner.open.store(0, Ordering::Release);
        }
    }

    async fn open(&self, name: &str) -> Result<(Conn, u64), LockError> {
        match &self.inner.source {
            Source::Pool(pool) => Ok((
                Conn::Single(Connection::take(
                    checkout(pool, name, self.inner.address.as_deref()).await?,
                )),
                0,
            )),
            Source::Direct(direct) => {
                let lanes = match super::lanes::open(&direct.client, &direct.config, LANES).await {
                    Ok(Some(lanes)) => Ok(lanes),
                    // TLS: one connection of redis-rs's making.
                    Ok(None) => direct
                        .client
                        .get_multiplexed_async_connection_with_config(&direct.config)
                        .await
                        .map(Lanes::one),
                    Err(err) => Err(err),
                };
                lanes.map(|lanes| (self.bounded(lanes), 0)).map_err(|err| {
                    cannot_connect(name, err, &server_at(self.inner.address.as_deref()))
                })
            }
            #[cfg(feature = "cluster")]
            Source::Cluster(client) => client
                .get_async_connection()
                .await
                .map(|conn| (Conn::Cluster(conn), 0))
                .map_err(|err| cannot_connect(name, err, "the server")),
            #[cfg(feature = "sentinel")]
            Source::Sentinel {
                client,
                config,
                switches,
            } => crate::connection::sentinel::open_master(name, client, config, switches)
                .await
                .map(|(conn, epoch)| (self.bounded(Lanes::one(conn)), epoch)),
        }
    }

    /// `conn`, opened without a response timeout, with each command bounded by the command
    /// timeout through this connection's deadlines.
    fn bounded(&self, conn: Lanes) -> Conn {
        Conn::Bounded {
            conn,
            deadlines: self.inner.deadlines.clone(),
            timeout: self.inner.connect_timeout,
        }
    }

    /// The open connection, unless a Sentinel announced a failover since it was opened
    /// (then it is retired: it leads to a deposed master).
    fn current(&self) -> Option<Slot> {
        let slot = self
            .inner
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        #[cfg(feature = "sentinel")]
        if let Source::Sentinel { switches, .. } = &self.inner.source
            && switches.epoch() != slot.switches
        {
            let mut current = write_ignoring_poison(&self.inner.current);
            if current
                .as_ref()
                .is_some_and(|open| open.generation == slot.generation)
            {
                *current = None;
                self.inner.open.store(0, Ordering::Release);
            }
            return None;
        }
        Some(slot)
    }
}

/// Why a connection to `at` (`the server at <url>`) could not be opened, as the error of a
/// request on `name`.
fn cannot_connect(name: &str, err: redis::RedisError, at: &str) -> LockError {
    if let Some(reason) = misconfiguration(&err, at) {
        return LockError::Misconfigured {
            name: name.to_owned(),
            reason,
            source: Some(Box::new(err)),
        };
    }
    LockError::Connection {
        name: name.to_owned(),
        reason: cannot_open(&err, at),
        source: Some(Box::new(err)),
    }
}

/// A pooled connection of its own, for commands that need connection state (WATCH).
/// `address` (the URL without credentials) is named when the server cannot be reached.
pub(crate) async fn checkout(
    pool: &Pool,
    name: &str,
    address: Option<&str>,
) -> Result<Connection, LockError> {
    pool.get().await.map_err(|err| {
        // Retrying cannot help a server that refuses this client's settings.
        if let PoolError::Backend(backend) = &err
            && let Some(reason) = misconfiguration(backend, &server_at(address))
        {
            return LockError::Misconfigured {
                name: name.to_owned(),
                reason,
                source: Some(Box::new(err)),
            };
        }
        LockError::Connection {
            name: name.to_owned(),
            reason: no_connection(&err, address),
            source: Some(Box::new(err)),
        }
    })
}

/// `the server at <url>`, or `the Redis server` when the address is unknown.
fn server_at(address: Option<&str>) -> String {
    address.map_or_else(
        || "the Redis server".to_owned(),
        |address| format!("the server at {address}"),
    )
}

/// Why the pool gave no connection, in words that say what happened at which server (not
/// the pool's "Error occurred while creating a new object").
pub(crate) fn no_connection(err: &PoolError, address: Option<&str>) -> String {
    let at = server_at(address);
    match err {
        PoolError::Backend(err) => cannot_open(err, &at),
        PoolError::Timeout(TimeoutType::Wait) => {
            "no pooled connection came free in time: raise the pool size or the command \
             timeout"
                .to_owned()
        }
        PoolError::Timeout(_) => format!("{at} did not answer in time while connecting"),
        PoolError::Closed => "the connection pool was closed".to_owned(),
        PoolError::NoRuntimeSpecified => {
            "the connection pool has no async runtime: build it with Runtime::Tokio1".to_owned()
        }
        PoolError::PostCreateHook(err) => {
            format!("the pool's post-create hook refused a new connection to {at}: {err}")
        }
    }
}

/// Why a connection to `at` (`the server at <url>`) could not be opened.
pub(crate) fn cannot_open(err: &redis::RedisError, at: &str) -> String {
    use redis::ErrorKind;
    if err.is_connection_refusal() {
        return format!(
            "{at} refused the connection: nothing listens there (is Redis running, on that host \
             and port?)"
        );
    }
    if err.is_timeout() {
        return format!("{at} could not be reached in time ({err})");
    }
    match err.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => format!(
            "{at} does not speak the Redis protocol: its first answer was not a Redis reply \
             (an HTTP server or proxy on that port, a TLS server behind a redis:// URL, or \
             another service?)"
        ),
        ErrorKind::AuthenticationFailed => {
            format!("{at} refused the credentials ({err}): check the user and password in the URL")
        }
        ErrorKind::Io => format!("{at} could not be reached: {err}"),
        _ => format!("cannot open a connection to {at}: {err}"),
    }
}

/// A poisoned lock here only means another thread panicked while swapping a connection
/// handle; the handle itself is always in a valid state.
fn write_ignoring_poison<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// True when the error means the connection itself is unusable, or points at a server that
/// is no longer the master (after a Sentinel failover the old master answers READONLY).
pub(crate) fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_unrecoverable_error()
        || err.code() == Some("READONLY")
}
