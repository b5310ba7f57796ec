//! Connections: the layer under the backends.
//!
//! - [`shared`]: the one multiplexed connection a backend sends its commands on (from a
//!   deadpool pool, a Cluster client or a Sentinel-named master), reconnected on failure.
//! - [`lanes`]: the sockets of a shared connection opened from a URL, whose writes are
//!   gathered into batches.
//! - [`spares`]: the clones of it each thread keeps between operations.
//! - [`deadlines`]: the command timeout of a shared connection this Locker opened itself,
//!   kept without a timer per command.
//! - [`connect`]: turning URLs and TLS settings into pools, clients and dialers.
//! - [`notifier`]: the one pub/sub connection per Locker that tells waiters their turn.
//! - `sharded`: on a Redis Cluster, the notifier's sharded subscriptions (SSUBSCRIBE in
//!   each lock's shard), kept on each slot's master when the slot moves or its master
//!   changes (feature `cluster`).
//! - `sentinel`: connecting to the master the Sentinels name, and retiring connections to
//!   a deposed one at the Sentinels' `+switch-master` (feature `sentinel`).
//! - [`watcher`]: the one RESP3 connection per Locker with `CLIENT TRACKING` on, whose
//!   reads ask the server to push the next change of a key, and which reads the server's
//!   eviction settings when it opens; behind Sentinel, on the master the Sentinels name.
//! - `watch_nodes`: on a Redis Cluster, one such connection per master, each key read on
//!   its slot's master (feature `cluster`).
//! - `tls`: [`TlsConfig`](crate::TlsConfig) (feature `tls-rustls`).
//!
//! Nothing here knows about locks beyond channel names; these modules import only leaves.

pub(crate) mod connect;
pub(crate) mod deadlines;
pub(crate) mod lanes;
pub(crate) mod notifier;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
#[cfg(feature = "cluster")]
pub(crate) mod sharded;
pub(crate) mod shared;
pub(crate) mod spares;
#[cfg(feature = "tls-rustls")]
pub(crate) mod tls;
#[cfg(feature = "cluster")]
pub(crate) mod watch_nodes;
pub(crate) mod watcher;
