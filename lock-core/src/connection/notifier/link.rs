//! The notifier's pub/sub connection: opened at the first subscription, its subscriptions
//! brought in line with what the waiters want, opened again after a drop or (behind
//! Sentinel) a switch of the master, with every waiter woken to look at Redis itself.

use std::collections::HashSet;
#[cfg(feature = "sentinel")]
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt as _;
use redis::aio::PubSubSink;

use super::Notifier;

#[derive(Default)]
pub(super) struct Link {
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

impl Notifier {
    /// Brings the connection's subscription to `channel` in line with the waiters' wish.
    pub(super) async fn reconcile(&self, channel: &str) -> redis::RedisResult<()> {
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
            // Dropped with its runtime (before its first poll, too) while the locker lives
            // on: the next opening of the link starts another follower.
            let mark = weak.clone();
            let unfinished = crate::undo::Undo::new(move || {
                if let Some(inner) = mark.upgrade() {
                    inner.following.store(false, Ordering::Release);
                }
            });
            tokio::spawn(async move {
                let _unfinished = unfinished;
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

    pub(super) fn wake_all(&self) {
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
