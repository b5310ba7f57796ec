//! Notifications from Redis: one pub/sub connection per `Locker`, shared by all of its
//! waiters, in one of two ways.
//!
//! - The waiter queue (one Redis, Cluster, and Redlock with one notifier per master, all on
//!   the same channel): the Locker subscribes once to a channel of its
//!   own, and the scripts publish `<kind>:<ms>:<lock key>` there when it is this Locker's
//!   turn (see the crate docs, "Waiting"). A waiter registers its interest in a lock key
//!   locally ([`Notifier::listen`]): no Redis call after the first SUBSCRIBE.
//! - Broadcast (WATCH/MULTI, multi-locks): the release publishes on `<lock key>:released`, and a
//!   waiter subscribes to that channel (reference-counted: the first waiter on a name sends
//!   SUBSCRIBE, the last one to leave sends UNSUBSCRIBE).
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
}

/// A waiter's interest in the queue messages of one lock; dropping it withdraws it.
pub(crate) struct Interest {
    notifier: Notifier,
    lock_key: String,
}

impl Notifier {
    /// A notifier whose own channel (for waiter-queue messages) is `own_channel`.
    pub fn new(dial: impl Into<Dial>, own_channel: String) -> Notifier {
        Notifier {
            inner: Arc::new(Inner {
                dial: dial.into(),
                own_channel,
                wanted: Mutex::new(HashMap::new()),
                interests: Mutex::new(HashMap::new()),
                link: tokio::sync::Mutex::new(Link::default()),
                #[cfg(feature = "sentinel")]
                following: AtomicBool::new(false),
            }),
        }
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
    /// message published after this point is missed.
    pub async fn listen(&self, lock_key: &str, signal: &Arc<Wake>) -> redis::RedisResult<Interest> {
        {
            let mut interests = self.interests();
            let entry = interests
                .entry(lock_key.to_owned())
                .or_insert_with(|| (0, Arc::clone(signal)));
            entry.0 += 1;
        }
        let interest = Interest {
            notifier: self.clone(),
            lock_key: lock_key.to_owned(),
        };
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
        let subscription = Subscription {
            notifier: self.clone(),
            channel: channel.to_owned(),
        };
        self.reconcile(channel).await?;
        Ok(subscription)
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
        let wanted = self.wanted().contains_key(channel);
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
                let channel = message.get_channel_name();
                if channel == inner.own_channel {
                    let payload: String = message.get_payload().unwrap_or_default();
                    if let Some((holders, ids)) = parse_batch(&payload) {
                        let interests = inner
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
                        continue;
                    }
                    let Some((lock_key, hint)) = parse_message(&payload) else {
                        continue;
                    };
                    let signal = inner
                        .interests
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(lock_key)
                        .map(|(_, signal)| Arc::clone(signal));
                    // No local waiter any more: the reservation lapses after its window,
                    // or the waiter that left already passed it on.
                    if let Some(signal) = signal {
                        signal.post(hint);
                    }
                    continue;
                }
                let signal = inner
                    .wanted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(channel)
                    .map(|(_, signal)| Arc::clone(signal));
                if let Some(signal) = signal {
                    signal.wake();
                }
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

impl Drop for Subscription {
    fn drop(&mut self) {
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
mod tests {
    use super::*;

    fn numsub(server: &lock_tests::RedisServer, channel: &str) -> String {
        server.command(&["PUBSUB", "NUMSUB", channel])
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn subscriptions_are_counted_per_channel_and_dropped_with_the_last_waiter() {
        let server = lock_tests::RedisServer::start();
        let notifier = Notifier::new(
            redis::Client::open(server.url()).unwrap(),
            "lock:waiters:test".into(),
        );
        let signal = Arc::new(Wake::default());
        let first = notifier
            .subscribe("lock:{a}:released", &signal)
            .await
            .unwrap();
        let second = notifier
            .subscribe("lock:{a}:released", &signal)
            .await
            .unwrap();
        assert_eq!(
            notifier.wanted().get("lock:{a}:released").map(|e| e.0),
            Some(2)
        );
        assert!(
            numsub(&server, "lock:{a}:released").contains(":1\r\n"),
            "one connection, one subscription"
        );

        // A publish reaches the waiter's signal.
        let woken = signal.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        server.command(&["PUBLISH", "lock:{a}:released", "released"]);
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .unwrap();

        drop(first);
        assert_eq!(
            notifier.wanted().get("lock:{a}:released").map(|e| e.0),
            Some(1)
        );
        drop(second);
        assert!(notifier.wanted().is_empty());
        let started = std::time::Instant::now();
        while !numsub(&server, "lock:{a}:released").contains(":0\r\n") {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "UNSUBSCRIBE was sent"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_connection_wakes_waiters_and_resubscribes() {
        let mut server = lock_tests::RedisServer::start();
        let notifier = Notifier::new(
            redis::Client::open(server.url()).unwrap(),
            "lock:waiters:test".into(),
        );
        let signal = Arc::new(Wake::default());
        let _sub = notifier
            .subscribe("lock:{b}:released", &signal)
            .await
            .unwrap();
        let woken = signal.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        server.restart();
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .expect("waiters are told that notifications may have been missed");
        let started = std::time::Instant::now();
        while !numsub(&server, "lock:{b}:released").contains(":1\r\n") {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "re-subscribed by itself"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
