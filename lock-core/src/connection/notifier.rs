//! Notifications from Redis: one pub/sub connection per `Locker`, shared by all of its
//! waiters, in one of two ways.
//!
//! - The waiter queue (one Redis, Cluster, and Redlock with one notifier per master, all on
//!   the same channel): the Locker subscribes once to a channel of its
//!   own, and the scripts publish `<kind>:<ms>:<lock key>` there when it is this Locker's
//!   turn (see the repository's `docs/guide/how-it-works.md`). A waiter registers its
//!   interest in a lock key locally ([`Notifier::listen`]): no Redis call after the first SUBSCRIBE.
//! - Broadcast (WATCH/MULTI, multi-locks): the release publishes on `<lock key>:released`, and a
//!   waiter subscribes to that channel (reference-counted: the first waiter on a name sends
//!   SUBSCRIBE, the last one to leave sends UNSUBSCRIBE).
//!
//! On a Redis Cluster (Redis 7+) both go through sharded pub/sub instead
//! ([`crate::connection::sharded`]): the Locker's channel begins with `$`, which tells the
//! scripts to announce a turn with SPUBLISH on `<lock key>:t:<channel>` (in the lock's
//! slot) rather than PUBLISH on the channel, and the waiter subscribes to that with
//! SSUBSCRIBE on the slot's master; release channels likewise. A message then stays in the
//! lock's shard instead of reaching every node of the cluster.
//!
//! If the pub/sub connection drops, every waiter is woken (messages may have been lost, so
//! they look again) and the connection is re-opened and re-subscribed by itself. Behind
//! Sentinel the same happens at each switch of the master the Sentinels announce: a
//! pub/sub connection sends nothing that could fail on a stalled or deposed master, so it
//! would go on listening there while the releases are published on the new one.

use std::collections::{HashMap, HashSet};
#[cfg(feature = "sentinel")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt as _;
use redis::aio::PubSubSink;

use crate::connection::connect::Dial;
#[cfg(feature = "cluster")]
use crate::connection::sharded::{Listener, ShardDial, Shards};
use crate::signal::{parse_batch, parse_message, Wake};

#[derive(Clone)]
pub(crate) struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the pub/sub connection is opened (again after a drop).
    dial: Dial,
    /// This Locker's own channel, for waiter-queue messages.
    own_channel: String,
    /// Wanted subscriptions: channel -> (number of waiters, their signal). The own channel
    /// joins at the first `listen` and stays.
    wanted: Mutex<HashMap<String, (usize, Arc<Wake>)>>,
    /// Lock keys this Locker waits for in a waiter queue -> (number of waiters, signal).
    interests: Mutex<HashMap<String, (usize, Arc<Wake>)>>,
    /// The connection and what it is actually subscribed to. An async mutex: SUBSCRIBE and
    /// UNSUBSCRIBE for one channel must reach Redis in the order they were decided.
    link: tokio::sync::Mutex<Link>,
    /// Behind Sentinel: the task that retires the connection at each switch was started.
    #[cfg(feature = "sentinel")]
    following: AtomicBool,
    /// On a Redis Cluster: the sharded subscriptions (turns and release channels).
    #[cfg(feature = "cluster")]
    shards: Option<Shards>,
}

#[derive(Default)]
struct Link {
    sink: Option<PubSubSink>,
    subscribed: HashSet<String>,
    /// The Sentinel switches announced before the connection was opened (0 elsewhere).
    epoch: u64,
    /// The task that reads the connection's messages.
    reader: Option<tokio::task::AbortHandle>,
}

/// An open pub/sub connection's parts, as [`Notifier::open`] hands them to the link.
struct Opened {
    sink: PubSubSink,
    epoch: u64,
    reader: tokio::task::AbortHandle,
}

/// A waiter's subscription; dropping it gives the channel up.
pub(crate) struct Subscription {
    notifier: Notifier,
    channel: String,
    /// Subscribed in the channel's shard (a Cluster's sharded pub/sub).
    sharded: bool,
}

/// A waiter's interest in the queue messages of one lock; dropping it withdraws it.
pub(crate) struct Interest {
    notifier: Notifier,
    lock_key: String,
    /// The sharded channel its turns come on (a Cluster's sharded pub/sub), if any.
    sharded: Option<String>,
}

impl Notifier {
    /// A notifier whose own channel (for waiter-queue messages) is `own_channel`.
    pub fn new(dial: impl Into<Dial>, own_channel: String) -> Notifier {
        Notifier {
            inner: Arc::new(Inner::new(dial.into(), own_channel)),
        }
    }

    /// A notifier on a Redis Cluster that listens in the shards of the locks it waits for
    /// (`shards`; permit sets' too), and on `dial` only for what is published on its own
    /// channel (every turn on a server without sharded pub/sub). Its channel is `own_channel`
    /// with a `$` in front: the mark that tells the scripts to announce its turns with
    /// SPUBLISH in the lock's slot.
    #[cfg(feature = "cluster")]
    pub fn sharded(dial: impl Into<Dial>, shards: ShardDial, own_channel: &str) -> Notifier {
        let dial = dial.into();
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let listener: std::sync::Weak<dyn Listener> = weak.clone();
            let mut inner = Inner::new(dial, format!("${own_channel}"));
            inner.shards = Some(Shards::new(shards, listener));
            inner
        });
        Notifier { inner }
    }

    /// The sharded subscriptions, while the cluster has them.
    #[cfg(feature = "cluster")]
    fn shards(&self) -> Option<&Shards> {
        self.inner
            .shards
            .as_ref()
            .filter(|shards| shards.supported())
    }

    /// Whether turns and releases come through sharded subscriptions.
    fn in_shards(&self) -> bool {
        #[cfg(feature = "cluster")]
        return self.shards().is_some();
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// A pub/sub connection of its own, opened where this notifier's is (an election's
    /// observer reads its messages in order, payloads included).
    pub async fn open_pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        self.inner.dial.pubsub().await
    }

    /// This Locker's channel: the name it stands under in waiter queues.
    pub fn own_channel(&self) -> &str {
        &self.inner.own_channel
    }

    /// Routes the queue messages about `lock_key` to `signal`; returns once the Locker's
    /// channel is subscribed (a round trip the first time, free afterwards), so that no
    /// message published after this point is missed. On a Cluster with sharded pub/sub,
    /// the turns come on the lock's own sharded channel
    /// (an SSUBSCRIBE on the slot's master the first time, kept a while after the last
    /// waiter: free when waited for again soon).
    pub async fn listen(&self, lock_key: &str, signal: &Arc<Wake>) -> redis::RedisResult<Interest> {
        self.listen_in(lock_key, lock_key, signal).await
    }

    /// Routes the turn messages of a permit waiter (`route`, `<holders key>#<waiter id>`) to
    /// `signal`, as [`Notifier::listen`] does for a lock. On a Cluster with sharded pub/sub
    /// they come on the holders key's sharded turn channel (`<holders key>:t:<channel>`, in
    /// the semaphore's slot); elsewhere on this Locker's own channel.
    pub async fn listen_permits(
        &self,
        holders_key: &str,
        route: &str,
        signal: &Arc<Wake>,
    ) -> redis::RedisResult<Interest> {
        self.listen_in(holders_key, route, signal).await
    }

    /// Routes the messages for `route` to `signal`: on a Cluster with sharded pub/sub, on
    /// the sharded turn channel of `slot_key` (whose slot they are published in); elsewhere
    /// on this Locker's own channel.
    async fn listen_in(
        &self,
        slot_key: &str,
        route: &str,
        signal: &Arc<Wake>,
    ) -> redis::RedisResult<Interest> {
        #[allow(unused_mut)]
        let mut interest = self.interest(route, signal);
        #[cfg(feature = "cluster")]
        if let Some(shards) = self.shards() {
            let channel = turn_channel(slot_key, &self.inner.own_channel);
            interest.sharded = Some(channel.clone());
            match shards.want(&channel).await {
                Err(_) if !shards.supported() => {
                    // Redis before 7: the scripts fall back to PUBLISH on our channel.
                    if let Some(channel) = interest.sharded.take() {
                        shards.unwant(&channel);
                    }
                }
                done => return done.map(|()| interest),
            }
        }
        #[cfg(not(feature = "cluster"))]
        let _ = slot_key;
        self.listen_on_own_channel(interest).await
    }

    fn interest(&self, key: &str, signal: &Arc<Wake>) -> Interest {
        let mut interests = self.interests();
        let entry = interests
            .entry(key.to_owned())
            .or_insert_with(|| (0, Arc::clone(signal)));
        entry.0 += 1;
        Interest {
            notifier: self.clone(),
            lock_key: key.to_owned(),
            sharded: None,
        }
    }

    async fn listen_on_own_channel(&self, interest: Interest) -> redis::RedisResult<Interest> {
        let own = &self.inner.own_channel;
        self.wanted()
            .entry(own.clone())
            .or_insert_with(|| (1, Arc::default()));
        self.reconcile(own).await?;
        Ok(interest)
    }

    /// Whether this Locker listens on its channel already (a waiter asked before), so that
    /// a request can stand in a queue from its first attempt at no extra round trip.
    pub fn listens(&self) -> bool {
        self.wanted().contains_key(&self.inner.own_channel)
    }

    /// The signal of the waiters listening for `lock_key`, for a turn learned from a
    /// script's reply instead of a message.
    pub fn signal(&self, lock_key: &str) -> Option<Arc<Wake>> {
        self.interests()
            .get(lock_key)
            .map(|(_, signal)| Arc::clone(signal))
    }

    /// Wakes (no hint: look at Redis) every waiter listening for a key that starts with
    /// `prefix`: a reply that would have told them their turn was lost.
    pub fn wake_prefixed(&self, prefix: &str) {
        let signals: Vec<Arc<Wake>> = self
            .interests()
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .map(|(_, (_, signal))| Arc::clone(signal))
            .collect();
        for signal in signals {
            signal.wake();
        }
    }

    fn interests(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Arc<Wake>)>> {
        self.inner
            .interests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes `signal` to `channel`; returns once Redis has confirmed the subscription,
    /// so that any release after this point is seen.
    pub async fn subscribe(
        &self,
        channel: &str,
        signal: &Arc<Wake>,
    ) -> redis::RedisResult<Subscription> {
        {
            let mut wanted = self.wanted();
            let entry = wanted
                .entry(channel.to_owned())
                .or_insert_with(|| (0, Arc::clone(signal)));
            entry.0 += 1;
        }
        #[allow(unused_mut)]
        let mut subscription = Subscription {
            notifier: self.clone(),
            channel: channel.to_owned(),
            sharded: false,
        };
        #[cfg(feature = "cluster")]
        if let Some(shards) = self.shards() {
            subscription.sharded = true;
            match shards.want(channel).await {
                Err(_) if !shards.supported() => {
                    subscription.sharded = false;
                    shards.unwant(channel);
                }
                done => return done.map(|()| subscription),
            }
        }
        self.reconcile(channel).await?;
        Ok(subscription)
    }

    /// [`Notifier::subscribe`] with the signal every subscriber of `channel` in this Locker
    /// shares (the first one's), returned: a broadcast wakes all of them at once.
    pub async fn subscribe_shared(
        &self,
        channel: &str,
    ) -> redis::RedisResult<(Subscription, Arc<Wake>)> {
        let signal = self
            .wanted()
            .get(channel)
            .map_or_else(Arc::default, |(_, signal)| Arc::clone(signal));
        let subscription = self.subscribe(channel, &signal).await?;
        // Another subscriber may have come first in between: its signal is the one.
        let signal = self
            .wanted()
            .get(channel)
            .map_or(signal, |(_, signal)| Arc::clone(signal));
        Ok((subscription, signal))
    }

    fn wanted(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, Arc<Wake>)>> {
        self.inner
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Brings the connection's subscription to `channel` in line with the waiters' wish.
    async fn reconcile(&self, channel: &str) -> redis::RedisResult<()> {
        let mut link = self.inner.link.lock().await;
        // With sharded pub/sub, only this Locker's own channel is subscribed here.
        let wanted = self.wanted().contains_key(channel)
            && (channel == self.inner.own_channel || !self.in_shards());
        let subscribed = link.subscribed.contains(channel);
        if wanted == subscribed {
            return Ok(());
        }
        let sink = match link.sink.as_mut() {
            Some(sink) => sink,
            None if wanted => {
                let opened = self.connect().await?;
                link.subscribed.clear();
                link.epoch = opened.epoch;
                if let Some(old) = link.reader.replace(opened.reader) {
                    old.abort();
                }
                link.sink.insert(opened.sink)
            }
            None => return Ok(()),
        };
        let result = if wanted {
            sink.subscribe(channel).await
        } else {
            sink.unsubscribe(channel).await
        };
        match result {
            Ok(()) => {
                if wanted {
                    link.subscribed.insert(channel.to_owned());
                } else {
                    link.subscribed.remove(channel);
                }
                Ok(())
            }
            Err(err) => {
                link.sink = None;
                link.subscribed.clear();
                Err(err)
            }
        }
    }

    /// Opens the pub/sub connection and starts the task that hands messages to waiters.
    ///
    /// Boxed with an explicit `Send`: the task it spawns may come back here to reconnect,
    /// and the compiler cannot see through that cycle by itself.
    fn connect(&self) -> BoxFuture<'_, redis::RedisResult<Opened>> {
        Box::pin(self.open())
    }

    async fn open(&self) -> redis::RedisResult<Opened> {
        let (pubsub, epoch) = self.inner.dial.pubsub_in_epoch().await?;
        self.follow_switches();
        let (sink, mut stream) = pubsub.split();
        let weak = Arc::downgrade(&self.inner);
        let reader = tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                let Some(inner) = weak.upgrade() else { return };
                let payload: String = message.get_payload().unwrap_or_default();
                inner.deliver(message.get_channel_name(), &payload);
            }
            // The connection is gone: releases may have been missed. Wake everyone so they
            // look at Redis themselves, and re-subscribe what is still wanted.
            let Some(inner) = weak.upgrade() else { return };
            let notifier = Notifier { inner };
            {
                let mut link = notifier.inner.link.lock().await;
                link.sink = None;
                link.subscribed.clear();
            }
            notifier.wake_all();
            notifier.resubscribe_all().await;
        });
        Ok(Opened {
            sink,
            epoch,
            reader: reader.abort_handle(),
        })
    }

    /// Behind Sentinel, starts (once) the task that retires the connection at each switch
    /// of the master and subscribes again on the new one, waking every waiter (a release
    /// on the new master may have gone unheard). It ends with the locker.
    fn follow_switches(&self) {
        #[cfg(feature = "sentinel")]
        {
            let Some(switches) = self.inner.dial.switches() else {
                return;
            };
            if self.inner.following.swap(true, Ordering::AcqRel) {
                return;
            }
            let mut changes = switches.changes();
            let weak = Arc::downgrade(&self.inner);
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let epoch = *changes.borrow_and_update();
                    let Some(inner) = weak.upgrade() else { return };
                    let notifier = Notifier { inner };
                    if notifier.retire_before(epoch).await {
                        tracing::info!(epoch, "the Sentinels switched the master; lock notifications subscribe on the new one");
                        notifier.wake_all();
                        notifier.resubscribe_all().await;
                    }
                }
            });
        }
    }

    /// Closes the pub/sub connection if it was opened before switch `epoch`; true if it did.
    #[cfg(feature = "sentinel")]
    async fn retire_before(&self, epoch: u64) -> bool {
        let mut link = self.inner.link.lock().await;
        if link.sink.is_none() || link.epoch >= epoch {
            return false;
        }
        if let Some(reader) = link.reader.take() {
            reader.abort();
        }
        link.sink = None;
        link.subscribed.clear();
        true
    }

    fn wake_all(&self) {
        for (_, signal) in self.wanted().values() {
            signal.wake();
        }
        for (_, signal) in self.interests().values() {
            signal.wake();
        }
    }

    async fn resubscribe_all(&self) {
        let mut pause = Duration::from_millis(50);
        loop {
            let channels: Vec<String> = self.wanted().keys().cloned().collect();
            if channels.is_empty() {
                return;
            }
            let mut failed = false;
            for channel in channels {
                if self.reconcile(&channel).await.is_err() {
                    failed = true;
                    break;
                }
            }
            if !failed {
                tracing::debug!("lock release notifications re-subscribed");
                self.wake_all();
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

impl Inner {
    fn new(dial: Dial, own_channel: String) -> Inner {
        Inner {
            dial,
            own_channel,
            wanted: Mutex::new(HashMap::new()),
            interests: Mutex::new(HashMap::new()),
            link: tokio::sync::Mutex::new(Link::default()),
            #[cfg(feature = "sentinel")]
            following: AtomicBool::new(false),
            #[cfg(feature = "cluster")]
            shards: None,
        }
    }

    /// Hands a message to its waiters: a turn (on our channel, or on a lock's sharded turn
    /// channel) to the lock's signal, with its hint; a release to the channel's.
    fn deliver(&self, channel: &str, payload: &str) {
        if channel == self.own_channel || is_turn_channel(channel, &self.own_channel) {
            // Several waiters of this Locker granted permits at once: one message.
            if let Some((holders, ids)) = parse_batch(payload) {
                let interests = self
                    .interests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let mut route = String::new();
                for id in ids {
                    route.clear();
                    route.push_str(holders);
                    route.push('#');
                    route.push_str(id);
                    if let Some((_, signal)) = interests.get(&route) {
                        signal.post(crate::signal::Hint::Granted);
                    }
                }
                return;
            }
            let Some((lock_key, hint)) = parse_message(payload) else {
                return;
            };
            let signal = self
                .interests
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(lock_key)
                .map(|(_, signal)| Arc::clone(signal));
            // No local waiter any more: the reservation lapses after its window, or the
            // waiter that left already passed it on.
            if let Some(signal) = signal {
                signal.post(hint);
            }
            return;
        }
        let signal = self
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(channel)
            .map(|(_, signal)| Arc::clone(signal));
        if let Some(signal) = signal {
            // A latch's opening names its round; every other broadcast just wakes.
            match crate::signal::parse_opened(payload) {
                Some(round) => signal.post_opened(round),
                None => signal.wake(),
            }
        }
    }
}

#[cfg(feature = "cluster")]
impl Listener for Inner {
    fn message(&self, channel: &str, payload: &str) {
        self.deliver(channel, payload);
    }

    fn missed(&self, channel: Option<&str>) {
        let lock_key = channel.and_then(|channel| {
            channel
                .strip_suffix(self.own_channel.as_str())?
                .strip_suffix(TURN_INFIX)
        });
        let wake = |map: &Mutex<HashMap<String, (usize, Arc<Wake>)>>, key: Option<&str>| {
            let map = map.lock().unwrap_or_else(PoisonError::into_inner);
            match key {
                Some(key) => map.get(key).iter().for_each(|(_, signal)| signal.wake()),
                None => map.values().for_each(|(_, signal)| signal.wake()),
            }
        };
        match (channel, lock_key) {
            (None, _) => {
                wake(&self.wanted, None);
                wake(&self.interests, None);
            }
            (Some(_), Some(lock_key)) => {
                wake(&self.interests, Some(lock_key));
                // A permit set's turn channel: its waiters listen under `<holders key>#<id>`
                // (a lock's waiters, whose key merely starts so, only look again).
                let map = self
                    .interests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                map.iter()
                    .filter(|(key, _)| {
                        key.strip_prefix(lock_key)
                            .is_some_and(|rest| rest.starts_with('#'))
                    })
                    .for_each(|(_, (_, signal))| signal.wake());
            }
            (Some(channel), None) => wake(&self.wanted, Some(channel)),
        }
    }
}

/// Between a lock key and a Locker's channel in the lock's sharded turn channel.
const TURN_INFIX: &str = ":t:";

/// The sharded channel that a Locker whose channel is `own` hears its turns for `lock_key`
/// on: `<lock key>:t:<own>`, in the lock's slot (the lock key's hash tag comes first); the
/// scripts build the same (`tell` in `scripts/queue.lua`).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) fn turn_channel(lock_key: &str, own: &str) -> String {
    format!("{lock_key}{TURN_INFIX}{own}")
}

fn is_turn_channel(channel: &str, own: &str) -> bool {
    channel
        .strip_suffix(own)
        .is_some_and(|rest| rest.ends_with(TURN_INFIX))
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.sharded {
            let mut wanted = self.notifier.wanted();
            match wanted.get_mut(&self.channel) {
                Some(entry) if entry.0 > 1 => entry.0 -= 1,
                Some(_) => {
                    wanted.remove(&self.channel);
                }
                None => {}
            }
            drop(wanted);
            #[cfg(feature = "cluster")]
            if let Some(shards) = &self.notifier.inner.shards {
                shards.unwant(&self.channel);
            }
            return;
        }
        let last = {
            let mut wanted = self.notifier.wanted();
            match wanted.get_mut(&self.channel) {
                Some(entry) if entry.0 > 1 => {
                    entry.0 -= 1;
                    false
                }
                Some(_) => {
                    wanted.remove(&self.channel);
                    true
                }
                None => false,
            }
        };
        if !last {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let notifier = self.notifier.clone();
            let channel = std::mem::take(&mut self.channel);
            runtime.spawn(async move {
                let _ = notifier.reconcile(&channel).await;
            });
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if let Some(channel) = self.sharded.take() {
            #[cfg(feature = "cluster")]
            if let Some(shards) = &self.notifier.inner.shards {
                shards.unwant(&channel);
            }
            drop(channel);
        }
        let mut interests = self.notifier.interests();
        match interests.get_mut(&self.lock_key) {
            Some(entry) if entry.0 > 1 => entry.0 -= 1,
            Some(_) => {
                interests.remove(&self.lock_key);
            }
            None => {}
        }
    }
}

#[cfg(test)]
#[path = "notifier_tests.rs"]
mod tests;
