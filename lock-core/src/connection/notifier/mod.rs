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
//!
//! This file holds what the waiters want (channels, lock keys and their signals);
//! [`link`] the pub/sub connection that serves it, [`deliver`] the routing of a message
//! to its waiters.

use std::collections::HashMap;
#[cfg(feature = "sentinel")]
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use crate::connection::connect::Dial;
#[cfg(feature = "cluster")]
use crate::connection::sharded::{Listener, ShardDial, Shards};
use crate::signal::Wake;

mod deliver;
mod link;

#[cfg(feature = "cluster")]
use deliver::turn_channel;
use link::Link;

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
mod tests;
