//! Routing: a message on the notifier's connections handed to the waiters it is for (a
//! turn to the lock's signal, a batch of permit grants, a release or a latch's opening to
//! the channel's subscribers), and the sharded turn channels' names.

#[cfg(feature = "cluster")]
use std::collections::HashMap;
#[cfg(feature = "cluster")]
use std::sync::Mutex;
use std::sync::{Arc, PoisonError};

#[cfg(feature = "cluster")]
use crate::connection::sharded::Listener;
#[cfg(feature = "cluster")]
use crate::signal::Wake;
use crate::signal::{parse_batch, parse_given, parse_message, Batch};

use super::Inner;

impl Inner {
    /// The signal of the waiters listening under `key` (a lock key, or a permit waiter's
    /// route), if any.
    fn interest(&self, key: &str) -> Option<Arc<crate::signal::Wake>> {
        self.interests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(|(_, signal)| Arc::clone(signal))
    }

    /// Hands a message to its waiters: a turn (on our channel, or on a lock's sharded turn
    /// channel) to the lock's signal, with its hint; a release to the channel's.
    pub(super) fn deliver(&self, channel: &str, payload: &str) {
        if channel == self.own_channel || is_turn_channel(channel, &self.own_channel) {
            // Several waiters of this Locker granted permits at once: one message.
            if let Some((batch, holders, ids)) = parse_batch(payload) {
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
                    // A waiter gone already: its guard gives back what it was handed.
                    if let Some((_, signal)) = interests.get(&route) {
                        match batch {
                            Batch::Reserved => signal.post(crate::signal::Hint::Granted),
                            Batch::Given(server_ms) => signal.post_given(server_ms),
                        }
                    }
                }
                return;
            }
            // A permit granted outright to one waiter of this Locker.
            if let Some((route, server_ms)) = parse_given(payload) {
                // A waiter gone already: its guard gives back what it was handed.
                if let Some(signal) = self.interest(route) {
                    signal.post_given(server_ms);
                }
                return;
            }
            let Some((lock_key, hint)) = parse_message(payload) else {
                return;
            };
            // No local waiter any more: the reservation lapses after its window, or the
            // waiter that left already passed it on.
            if let Some(signal) = self.interest(lock_key) {
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
