//! Sharded pub/sub on a Redis Cluster (Redis 7+): a channel is subscribed with SSUBSCRIBE
//! on the master of the channel's slot, so that a message published there with SPUBLISH
//! stays inside the slot's shard (its master and replicas) instead of being copied over
//! the cluster bus to every node, as a classic PUBLISH is.
//!
//! One redis-rs cluster connection (RESP3, its pushes delivered here) carries every sharded
//! subscription of a notifier. redis-rs sends each SSUBSCRIBE to the master of the
//! channel's slot, holds one connection per master (a Locker's pub/sub connections grow
//! with the cluster's shards, not with the names it waits on), and subscribes again on its
//! own after a reconnect. What it does not do is follow a slot that moves: when a slot's
//! migration ends, its old master drops the slot's subscriptions and says so with a
//! `sunsubscribe` push, after which redis-rs forgets them. This module subscribes again
//! (the SSUBSCRIBE goes to the old master, whose MOVED reply sends it to the new one and
//! refreshes redis-rs's slot map) and tells the [`Listener`] that messages on the channel
//! may have been missed meanwhile (a message published on the new master before the
//! subscription reached it).
//!
//! A subscription lingers for [`LINGER`] after its last waiter leaves, so that a name
//! waited for again and again (a hot lock) costs no SSUBSCRIBE / SUNSUBSCRIBE pair per
//! wait.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// How long a sharded subscription is kept after its last waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// Builds the cluster client of the sharded subscriptions, its pushes sent to the sender.
pub(crate) type ShardDial =
    Arc<dyn Fn(UnboundedSender<PushInfo>) -> RedisResult<ClusterClient> + Send + Sync>;

/// What the notifier is told by the sharded subscriptions.
pub(crate) trait Listener: Send + Sync {
    /// A message on `channel`.
    fn message(&self, channel: &str, payload: &str);
    /// Messages on `channel` (every channel when `None`) may have been missed: a slot
    /// moved, or a connection dropped.
    fn missed(&self, channel: Option<&str>);
}

/// The sharded subscriptions of one notifier.
#[derive(Clone)]
pub(crate) struct Shards {
    inner: Arc<Inner>,
}

struct Inner {
    dial: ShardDial,
    listener: Weak<dyn Listener>,
    /// Wanted channels -> number of waiters.
    wanted: Mutex<HashMap<String, usize>>,
    /// The connection and what it is subscribed to. An async mutex: SSUBSCRIBE and
    /// SUNSUBSCRIBE of one channel must reach Redis in the order they were decided.
    link: tokio::sync::Mutex<Link>,
    /// The cluster refused SSUBSCRIBE (a server older than Redis 7): the notifier uses
    /// classic pub/sub instead.
    unsupported: AtomicBool,
}

#[derive(Default)]
struct Link {
    conn: Option<ClusterConnection>,
    subscribed: HashSet<String>,
    reader: Option<tokio::task::AbortHandle>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

impl Shards {
    /// Sharded subscriptions opened with `dial`, reported to `listener`.
    pub fn new(dial: ShardDial, listener: Weak<dyn Listener>) -> Shards {
        Shards {
            inner: Arc::new(Inner {
                dial,
                listener,
                wanted: Mutex::new(HashMap::new()),
                link: tokio::sync::Mutex::new(Link::default()),
                unsupported: AtomicBool::new(false),
            }),
        }
    }

    /// False once the cluster refused SSUBSCRIBE as an unknown command (Redis before 7).
    pub fn supported(&self) -> bool {
        !self.inner.unsupported.load(Ordering::Acquire)
    }

    /// Counts one more waiter on `channel`; returns once the cluster confirmed the
    /// subscription, so that no message published after this point is missed. On an
    /// error the waiter still counts: [`Shards::unwant`] takes it back.
    pub async fn want(&self, channel: &str) -> RedisResult<()> {
        *self.wanted().entry(channel.to_owned()).or_insert(0) += 1;
        self.reconcile(channel).await
    }

    /// One waiter less on `channel`; the last one's leaving unsubscribes after [`LINGER`]
    /// (unless a waiter came back meanwhile).
    pub fn unwant(&self, channel: &str) {
        let last = {
            let mut wanted = self.wanted();
            match wanted.get_mut(channel) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    wanted.remove(channel);
                    true
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&self.inner);
            let channel = channel.to_owned();
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                if let Some(inner) = weak.upgrade() {
                    let _ = Shards { inner }.reconcile(&channel).await;
                }
            });
        }
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.inner
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Brings the subscription to `channel` in line with the waiters' wish.
    async fn reconcile(&self, channel: &str) -> RedisResult<()> {
        let mut link = self.inner.link.lock().await;
        let wanted = self.wanted().contains_key(channel);
        if wanted == link.subscribed.contains(channel) {
            return Ok(());
        }
        let conn = match link.conn.as_mut() {
            Some(conn) => conn,
            None if wanted => {
                let (conn, reader) = self.connect().await?;
                link.subscribed.clear();
                if let Some(old) = link.reader.replace(reader) {
                    old.abort();
                }
                link.conn.insert(conn)
            }
            None => return Ok(()),
        };
        let result = if wanted {
            conn.ssubscribe(channel).await
        } else {
            conn.sunsubscribe(channel).await
        };
        match result {
            Ok(()) if wanted => {
                link.subscribed.insert(channel.to_owned());
                Ok(())
            }
            Ok(()) => {
                link.subscribed.remove(channel);
                Ok(())
            }
            Err(err) => {
                if is_unknown_command(&err) {
                    tracing::info!(%err, "the cluster has no sharded pub/sub (Redis 7+); lock notifications use classic pub/sub");
                    self.inner.unsupported.store(true, Ordering::Release);
                }
                Err(err)
            }
        }
    }

    /// [`Shards::open`], boxed with an explicit `Send`: the task it spawns may come back
    /// here (a slot that moved), and the compiler cannot see through that cycle by itself.
    fn connect(&self) -> BoxFuture<'_, RedisResult<(ClusterConnection, tokio::task::AbortHandle)>> {
        Box::pin(self.open())
    }

    /// Opens the cluster connection and starts the task that reads its pushes.
    async fn open(&self) -> RedisResult<(ClusterConnection, tokio::task::AbortHandle)> {
        let (sender, receiver) = unbounded_channel();
        let client = (self.inner.dial)(sender)?;
        let conn = client.get_async_connection().await?;
        let reader = tokio::spawn(read(Arc::downgrade(&self.inner), receiver));
        Ok((conn, reader.abort_handle()))
    }

    /// Records that `channel` is no longer subscribed, unless a waiter wants it again
    /// meanwhile (then it is subscribed again).
    async fn forget(&self, channel: &str) {
        self.inner.link.lock().await.subscribed.remove(channel);
        if self.wanted().contains_key(channel) {
            self.follow(channel.to_owned()).await;
        }
    }

    /// After the old master of `channel`'s slot dropped it: subscribes again where the slot
    /// lives now (retrying while the slot settles), then tells the listener.
    async fn follow(&self, channel: String) {
        self.inner.link.lock().await.subscribed.remove(&channel);
        let mut pause = Duration::from_millis(10);
        loop {
            match self.reconcile(&channel).await {
                Ok(()) => break,
                Err(_) if !self.supported() => return,
                Err(err) => {
                    tracing::debug!(%channel, %err, "sharded re-subscription failed; trying again");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
        tracing::debug!(%channel, "a lock's slot moved; its notifications follow it");
        if let Some(listener) = self.inner.listener.upgrade() {
            listener.missed(Some(&channel));
        }
    }
}

/// Reads the cluster connection's pushes until it is dropped.
async fn read(weak: Weak<Inner>, mut pushes: UnboundedReceiver<PushInfo>) {
    while let Some(push) = pushes.recv().await {
        let Some(inner) = weak.upgrade() else { return };
        let Some(listener) = inner.listener.upgrade() else {
            return;
        };
        match push.kind {
            PushKind::SMessage => {
                if let (Some(channel), Some(payload)) =
                    (text(push.data.first()), text(push.data.get(1)))
                {
                    listener.message(&channel, &payload);
                }
            }
            PushKind::SUnsubscribe => {
                let Some(channel) = text(push.data.first()) else {
                    continue;
                };
                let shards = Shards { inner };
                // Our own SUNSUBSCRIBE's confirmation, or the slot moved: a channel still
                // wanted is subscribed again; any other is no longer subscribed (a
                // lingering one whose slot moved must not count as subscribed when a
                // waiter comes back).
                if shards.wanted().contains_key(&channel) {
                    tokio::spawn(async move { shards.follow(channel).await });
                } else {
                    tokio::spawn(async move { shards.forget(&channel).await });
                }
            }
            // redis-rs reconnects and subscribes again by itself; what was published
            // meanwhile is lost.
            PushKind::Disconnection => listener.missed(None),
            _ => {}
        }
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn is_unknown_command(err: &redis::RedisError) -> bool {
    let text = err.to_string().to_ascii_lowercase();
    text.contains("unknown command") || text.contains("unknown subcommand")
}
