//! Sharded pub/sub on a Redis Cluster (Redis 7+): a channel is subscribed with SSUBSCRIBE
//! on the master of the channel's slot, so that a message published there with SPUBLISH
//! stays inside the slot's shard (its master and replicas) instead of being copied over
//! the cluster bus to every node, as a classic PUBLISH is.
//!
//! One redis-rs cluster connection (RESP3, its pushes delivered here) carries every sharded
//! subscription of a notifier. redis-rs sends each SSUBSCRIBE where its slot map puts the
//! master of the channel's slot, holds one connection per node (a Locker's pub/sub
//! connections grow with the cluster's shards, not with the names it waits on), and
//! subscribes again on its own after a reconnect. What it does not do is keep a
//! subscription on the slot's master when the master changes:
//!
//! - a slot moves (resharding): when its migration ends, the old master drops the slot's
//!   subscriptions and says so with a `sunsubscribe` push;
//! - a failover (`CLUSTER FAILOVER`, with `FORCE` or `TAKEOVER`, or an election after a
//!   master failed): the demoted master drops them the same way as it turns into a replica
//!   (Redis 7.0 does so as it gives up the slots);
//! - a master dies: its connection drops (a `Disconnection` push), and nothing says where
//!   its slots went.
//!
//! On each, the channels concerned are subscribed again ([`Shards::follow`]) and the
//! [`Listener`] told that messages on them may have been missed meanwhile, so that their
//! waiters look at Redis once more. Subscribing again is not the end of it: redis-rs's
//! slot map may still name the demoted master, which, a replica now, accepts SSUBSCRIBE
//! instead of redirecting it, and hears the new master's SPUBLISH over the cluster bus
//! only once the new master counts it among its replicas (wake-ups published before are
//! lost). So every new SSUBSCRIBE is checked ([`Shards::place`]): one pipeline of `ROLE`
//! and `PUBSUB SHARDNUMSUB <channel>`, sent to the node redis-rs takes for the slot's
//! master, says whether that node is a master and has the subscriber. If not, the
//! misplaced subscription is dropped, redis-rs's slot map refreshed (a keyed command sent
//! to a replica is answered MOVED, which makes redis-rs ask the cluster again), and the
//! channel subscribed again until it is on the master; on a replica that lost its master
//! (a failed master's shard before the election) it is kept and looked at again, since a
//! promoted replica keeps its subscribers. A subscription found on the master gets a
//! notice (the drop, or the connection's loss) whenever the master stops being one, so
//! waiting on it costs no call: the check is one round trip per new subscription, none
//! per wait.
//!
//! A subscription lingers for [`LINGER`] after its last waiter leaves, so that a name
//! waited for again and again (a hot lock) costs no SSUBSCRIBE / SUNSUBSCRIBE pair per
//! wait.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::undo::Undo;

/// How long a sharded subscription is kept after its last waiter left.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// The first pause between two tries to subscribe a channel on its slot's master again.
const FOLLOW_FIRST_PAUSE: Duration = Duration::from_millis(10);

/// The longest. While a failed master's replica is elected (a second or two), each try
/// costs two round trips per channel; its waiters poll Redis about as often (their pauses
/// between transient errors stop at 100 ms), and the subscription is on the new master
/// within this pause of its promotion.
const FOLLOW_MAX_PAUSE: Duration = Duration::from_millis(50);

/// How long a try waits for the command that has redis-rs refresh its slot map: the MOVED
/// reply that sets off the refresh comes at once; redis-rs then retries the command itself
/// where the reply pointed, which may be a master that is gone, for up to 0.66 s.
const REFRESH_LIMIT: Duration = Duration::from_millis(50);

/// Builds the cluster client of the sharded subscriptions, its pushes sent to the sender.
pub(crate) type ShardDial =
    Arc<dyn Fn(UnboundedSender<PushInfo>) -> RedisResult<ClusterClient> + Send + Sync>;

/// What the notifier is told by the sharded subscriptions.
pub(crate) trait Listener: Send + Sync {
    /// A message on `channel`.
    fn message(&self, channel: &str, payload: &str);
    /// Messages on `channel` (every channel when `None`) may have been missed: a slot
    /// moved, its master changed, or a connection dropped.
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
    /// Channels a [`Shards::follow`] task is subscribing again.
    following: Mutex<HashSet<String>>,
    /// Our own SUNSUBSCRIBEs whose confirmation push is still to be read, per channel: a
    /// `sunsubscribe` push beyond them is the server dropping the channel.
    leaving: Mutex<HashMap<String, usize>>,
    /// The cluster refused SSUBSCRIBE (a server older than Redis 7): the notifier uses
    /// classic pub/sub instead.
    unsupported: AtomicBool,
    /// The cluster refused the placement check (`ROLE` or `PUBSUB` renamed or denied):
    /// subscriptions are taken where redis-rs sends them, as before the check.
    unchecked: AtomicBool,
}

#[derive(Default)]
struct Link {
    conn: Option<ClusterConnection>,
    /// Channels subscribed (confirmed, and not dropped since): `true` once found on the
    /// master of their slot, `false` while that is not known.
    subscribed: HashMap<String, bool>,
    reader: Option<tokio::task::AbortHandle>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

/// What one try of [`Shards::settle`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// The subscription is on the slot's master.
    Yes,
    /// Not yet; redis-rs's slot map was refreshed, so the next try may go at once.
    Refreshed,
    /// Not yet; the next try after a pause.
    No,
}

/// Where a channel's subscription is, as [`Shards::place`] found it on the node redis-rs
/// takes for the master of the channel's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// On the master of its slot.
    Master,
    /// On a replica trying to reach its master (which may have failed, a replica about to
    /// be elected in its place): kept there, in case it is this one; the next try looks
    /// again. A master just demoted passes through this state too, for a moment.
    Orphaned,
    /// Not on the master: the node is a replica (`held`: with a subscriber of the channel),
    /// or a master without it (`replica` false; redis-rs sent the SSUBSCRIBE elsewhere).
    Misplaced { replica: bool, held: bool },
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
                following: Mutex::new(HashSet::new()),
                leaving: Mutex::new(HashMap::new()),
                unsupported: AtomicBool::new(false),
                unchecked: AtomicBool::new(false),
            }),
        }
    }

    /// False once the cluster refused SSUBSCRIBE as an unknown command (Redis before 7).
    pub fn supported(&self) -> bool {
        !self.inner.unsupported.load(Ordering::Acquire)
    }

    /// Counts one more waiter on `channel`; returns once the cluster confirmed the
    /// subscription, so that no message published after this point is missed. Should the
    /// subscription not be on the slot's master (a topology change redis-rs has not seen
    /// yet), it is moved there in the background and the listener told afterwards, so
    /// that the waiter looks again. On an error the waiter still counts:
    /// [`Shards::unwant`] takes it back.
    pub async fn want(&self, channel: &str) -> RedisResult<()> {
        *lock(&self.inner.wanted)
            .entry(channel.to_owned())
            .or_insert(0) += 1;
        self.reconcile(channel).await
    }

    /// One waiter less on `channel`; the last one's leaving unsubscribes after [`LINGER`]
    /// (unless a waiter came back meanwhile).
    pub fn unwant(&self, channel: &str) {
        let last = {
            let mut wanted = lock(&self.inner.wanted);
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

    fn is_wanted(&self, channel: &str) -> bool {
        lock(&self.inner.wanted).contains_key(channel)
    }

    /// Brings the subscription to `channel` in line with the waiters' wish.
    async fn reconcile(&self, channel: &str) -> RedisResult<()> {
        let mut link = self.inner.link.lock().await;
        let wanted = self.is_wanted(channel);
        match (wanted, link.subscribed.get(channel)) {
            (true, Some(true)) | (false, None) => return Ok(()),
            // Subscribed, its place not known (a topology change): a follow finds out.
            (true, Some(false)) => {
                drop(link);
                self.start_following(channel);
                return Ok(());
            }
            (true, None) | (false, Some(_)) => {}
        }
        if link.conn.is_none() {
            if !wanted {
                return Ok(());
            }
            let (conn, reader) = self.connect().await?;
            link.subscribed.clear();
            if let Some(old) = link.reader.replace(reader) {
                old.abort();
            }
            link.conn = Some(conn);
        }
        if !wanted {
            return self.unsubscribe(&mut link, channel).await;
        }
        if self.settle(&mut link, channel).await? != Settled::Yes {
            drop(link);
            self.start_following(channel);
        }
        Ok(())
    }

    /// Sends SUNSUBSCRIBE for `channel` (to where redis-rs puts the slot's master), its
    /// confirmation push counted as ours.
    async fn unsubscribe(&self, link: &mut Link, channel: &str) -> RedisResult<()> {
        let Some(conn) = link.conn.as_mut() else {
            return Ok(());
        };
        *lock(&self.inner.leaving)
            .entry(channel.to_owned())
            .or_insert(0) += 1;
        match conn.sunsubscribe(channel).await {
            Ok(()) => {
                link.subscribed.remove(channel);
                Ok(())
            }
            Err(err) => {
                self.confirmed_leave(channel);
                Err(err)
            }
        }
    }

    /// Takes back one of our own SUNSUBSCRIBEs of `channel`; false if none was awaited.
    fn confirmed_leave(&self, channel: &str) -> bool {
        let mut leaving = lock(&self.inner.leaving);
        match leaving.get_mut(channel) {
            Some(count) if *count > 1 => {
                *count -= 1;
                true
            }
            Some(_) => {
                leaving.remove(channel);
                true
            }
            None => false,
        }
    }

    /// One try to have `channel` subscribed on its slot's master: SSUBSCRIBE, then the
    /// placement check. If the subscription is elsewhere, it is dropped there and
    /// redis-rs's slot map refreshed, for the next try; an error if SSUBSCRIBE failed.
    async fn settle(&self, link: &mut Link, channel: &str) -> RedisResult<Settled> {
        let Some(conn) = link.conn.as_mut() else {
            return Ok(Settled::No);
        };
        if let Err(err) = conn.ssubscribe(channel).await {
            if is_unknown_command(&err) {
                tracing::info!(%err, "the cluster has no sharded pub/sub (Redis 7+); lock notifications use classic pub/sub");
                self.inner.unsupported.store(true, Ordering::Release);
            }
            return Err(err);
        }
        link.subscribed.insert(channel.to_owned(), false);
        let placement = match self.place(conn, channel).await {
            Ok(placement) => placement,
            Err(err) => {
                tracing::debug!(%channel, %err, "cannot check where a sharded subscription is; trying again");
                return Ok(Settled::No);
            }
        };
        let (replica, held) = match placement {
            Placement::Master => {
                link.subscribed.insert(channel.to_owned(), true);
                return Ok(Settled::Yes);
            }
            Placement::Orphaned => return Ok(Settled::No),
            Placement::Misplaced { replica, held } => (replica, held),
        };
        tracing::debug!(%channel, replica, held, "a sharded subscription missed the slot's master; subscribing again");
        if replica && held {
            // On a replica under a live master: dropped there (the same route as the
            // check), so that it does not stay behind once the channel is on the master.
            let _ = self.unsubscribe(link, channel).await;
        }
        match (replica, link.conn.as_mut()) {
            (true, Some(conn)) => {
                // redis-rs's slot map names a replica: have it asked again.
                let refresh = refresh_slot_map(conn, channel);
                let _ = tokio::time::timeout(REFRESH_LIMIT, refresh).await;
                Ok(Settled::Refreshed)
            }
            _ => Ok(Settled::No),
        }
    }

    /// Where `channel`'s subscription is: asks the node redis-rs takes for the master of
    /// the channel's slot whether it is a master, and whether it has a subscriber of the
    /// channel (a Locker's turn channels are its own; a release channel's subscriber may be
    /// another Locker's, which it would follow the same way).
    async fn place(&self, conn: &mut ClusterConnection, channel: &str) -> RedisResult<Placement> {
        if self.inner.unchecked.load(Ordering::Acquire) {
            return Ok(Placement::Master);
        }
        let mut check = redis::pipe();
        check
            .cmd("ROLE")
            .cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel);
        let replies = conn.route_pipeline(check, 0, 2, slot_master(channel)).await;
        let replies = match replies {
            Ok(replies) => replies,
            Err(err) if is_refused(&err) => {
                tracing::warn!(%err, "the cluster refuses ROLE or PUBSUB SHARDNUMSUB: sharded subscriptions are not checked to be on their slot's master, and a failover may delay a waiter's turn until its own timer");
                self.inner.unchecked.store(true, Ordering::Release);
                return Ok(Placement::Master);
            }
            Err(err) => return Err(err),
        };
        Ok(placement(replies.first(), replies.get(1)))
    }

    /// Starts a [`Shards::follow`] of `channel`, unless one is under way.
    fn start_following(&self, channel: &str) {
        if !lock(&self.inner.following).insert(channel.to_owned()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            lock(&self.inner.following).remove(channel);
            return;
        };
        let shards = self.clone();
        let channel = channel.to_owned();
        // Dropped with its runtime (before its first poll, too): the channel's next change
        // starts another follower.
        let (inner, followed) = (Arc::clone(&shards.inner), channel.clone());
        let unfinished = Undo::new(move || {
            lock(&inner.following).remove(&followed);
        });
        runtime.spawn(async move {
            shards.follow(channel).await;
            unfinished.disarm();
        });
    }

    /// After the master of `channel`'s slot changed (or may have): subscribes again on the
    /// slot's master, retrying while the cluster settles, then tells the listener (a
    /// message published before the subscription got there was missed).
    async fn follow(&self, channel: String) {
        let mut pause = FOLLOW_FIRST_PAUSE;
        // The last try went at once after the one before (which refreshed the slot map).
        let mut hurried = false;
        loop {
            if self.is_wanted(&channel) {
                let settled = {
                    let mut link = self.inner.link.lock().await;
                    match link.subscribed.get(&channel) {
                        // Settled meanwhile; or no connection, so nothing to follow (the
                        // next waiter's `want` subscribes).
                        Some(true) => Ok(Settled::Yes),
                        _ if link.conn.is_none() => Ok(Settled::Yes),
                        _ => self.settle(&mut link, &channel).await,
                    }
                };
                match settled {
                    Ok(Settled::Yes) => {}
                    Err(_) if !self.supported() => {
                        lock(&self.inner.following).remove(&channel);
                        return;
                    }
                    Ok(Settled::Refreshed) if !hurried => {
                        hurried = true;
                        continue;
                    }
                    Ok(_) | Err(_) => {
                        if let Err(err) = settled {
                            tracing::debug!(%channel, %err, "sharded re-subscription failed; trying again");
                        }
                        hurried = false;
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(FOLLOW_MAX_PAUSE);
                        continue;
                    }
                }
            }
            lock(&self.inner.following).remove(&channel);
            // A change noticed while this task was finishing found it under way and left
            // the channel to it: look once more.
            let unsettled = self.is_wanted(&channel)
                && self.inner.link.lock().await.subscribed.get(&channel) != Some(&true);
            if !unsettled || !lock(&self.inner.following).insert(channel.clone()) {
                break;
            }
        }
        tracing::debug!(%channel, "a lock's slot changed master; its notifications follow it");
        if let Some(listener) = self.inner.listener.upgrade() {
            listener.missed(Some(&channel));
        }
    }

    /// A node dropped `channel` (its slot moved, or the node stopped being its master):
    /// subscribes again if a waiter wants it.
    async fn dropped(&self, channel: &str) {
        self.inner.link.lock().await.subscribed.remove(channel);
        if self.is_wanted(channel) {
            self.start_following(channel);
        }
    }

    /// A connection of the cluster client dropped (which node is not said): no
    /// subscription is known to be on its slot's master any more; each wanted one is
    /// checked again.
    async fn disconnected(&self) {
        // A confirmation still awaited may have gone with the connection; one that comes
        // after all is taken for a drop, which costs a check.
        lock(&self.inner.leaving).clear();
        let channels: Vec<String> = {
            let mut link = self.inner.link.lock().await;
            link.subscribed
                .values_mut()
                .for_each(|placed| *placed = false);
            link.subscribed.keys().cloned().collect()
        };
        for channel in channels.iter().filter(|channel| self.is_wanted(channel)) {
            self.start_following(channel);
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
                // Our own SUNSUBSCRIBE's confirmation, or a node dropped the channel: its
                // slot moved, or its master became a replica.
                if !shards.confirmed_leave(&channel) {
                    tokio::spawn(async move { shards.dropped(&channel).await });
                }
            }
            // redis-rs reconnects and subscribes again by itself (where its slot map says),
            // and what was published meanwhile is lost: every waiter looks again, and every
            // subscription is checked again.
            PushKind::Disconnection => {
                listener.missed(None);
                let shards = Shards { inner };
                tokio::spawn(async move { shards.disconnected().await });
            }
            _ => {}
        }
    }
}

/// Where redis-rs sends a command for the master of `channel`'s slot.
fn slot_master(channel: &str) -> SingleNodeRoutingInfo {
    let slot = crate::slot::cluster_slot(channel.as_bytes());
    SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master))
}

/// Has redis-rs ask the cluster for its slots again: a keyed command in `channel`'s slot,
/// sent where redis-rs takes the slot's master to be, is answered MOVED by a replica, which
/// redis-rs follows and then refreshes its slot map. Its answer does not matter.
async fn refresh_slot_map(conn: &mut ClusterConnection, channel: &str) {
    let mut probe = redis::cmd("EXISTS");
    probe.arg(channel);
    let routing = RoutingInfo::SingleNode(slot_master(channel));
    if let Err(err) = conn.route_command(probe, routing).await {
        tracing::debug!(%channel, %err, "a probe of the slot's master failed");
    }
}

/// Where a subscription is, from a node's replies to `ROLE` (`master ...`, or `slave
/// <host> <port> <link state> <offset>`) and `PUBSUB SHARDNUMSUB <channel>`.
fn placement(role: Option<&Value>, numsub: Option<&Value>) -> Placement {
    let role = match role {
        Some(Value::Array(items)) => items.as_slice(),
        _ => &[],
    };
    let master = text(role.first()).is_some_and(|role| role == "master");
    // Connecting to its master, not syncing or synced with it: the master may be gone.
    let orphaned =
        text(role.get(3)).is_some_and(|state| state == "connect" || state == "connecting");
    let held = numsub.and_then(subscribers).unwrap_or(0) > 0;
    match (master, held) {
        (true, true) => Placement::Master,
        (false, true) if orphaned => Placement::Orphaned,
        _ => Placement::Misplaced {
            replica: !master,
            held,
        },
    }
}

/// The subscriber count of a `PUBSUB SHARDNUMSUB <channel>` reply (an array of channel and
/// count, or a map of them).
fn subscribers(reply: &Value) -> Option<i64> {
    match reply {
        Value::Array(items) => match items.get(1)? {
            Value::Int(count) => Some(*count),
            _ => None,
        },
        Value::Map(pairs) => match &pairs.first()?.1 {
            Value::Int(count) => Some(*count),
            _ => None,
        },
        _ => None,
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_unknown_command(err: &redis::RedisError) -> bool {
    let text = err.to_string().to_ascii_lowercase();
    text.contains("unknown command") || text.contains("unknown subcommand")
}

/// The server refused a command for good (unknown, renamed away, or denied by an ACL).
fn is_refused(err: &redis::RedisError) -> bool {
    is_unknown_command(err) || err.code() == Some("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    /// `ROLE` of a replica whose link to its master is in `state`.
    fn replica(state: &str) -> Value {
        Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(7000),
            bulk(state),
            Value::Int(1234),
        ])
    }

    #[test]
    fn a_subscription_counts_as_placed_only_on_a_master_that_has_it() {
        let master = Value::Array(vec![bulk("master"), Value::Int(1234), Value::Array(vec![])]);
        let count = |n| Value::Array(vec![bulk("lock:{x}:t:$w"), Value::Int(n)]);
        assert_eq!(placement(Some(&master), Some(&count(1))), Placement::Master);
        // A master without it: redis-rs sent the SSUBSCRIBE elsewhere.
        assert_eq!(
            placement(Some(&master), Some(&count(0))),
            Placement::Misplaced {
                replica: false,
                held: false
            }
        );
        // A demoted master, a replica of the new one now (synced, or syncing): moved.
        for state in ["connected", "sync"] {
            assert_eq!(
                placement(Some(&replica(state)), Some(&count(1))),
                Placement::Misplaced {
                    replica: true,
                    held: true
                }
            );
        }
        // A replica whose master is gone (an election under way): kept, it may be promoted.
        for state in ["connect", "connecting"] {
            assert_eq!(
                placement(Some(&replica(state)), Some(&count(1))),
                Placement::Orphaned
            );
        }
        // Unreadable replies prove nothing.
        assert_eq!(
            placement(None, None),
            Placement::Misplaced {
                replica: true,
                held: false
            }
        );
    }

    #[test]
    fn subscriber_counts_are_read_from_either_reply_shape() {
        let channel = Value::BulkString(b"lock:{x}:t:$w".to_vec());
        let array = Value::Array(vec![channel.clone(), Value::Int(1)]);
        let map = Value::Map(vec![(channel, Value::Int(2))]);
        assert_eq!(subscribers(&array), Some(1));
        assert_eq!(subscribers(&map), Some(2));
        assert_eq!(subscribers(&Value::Nil), None);
    }
}
