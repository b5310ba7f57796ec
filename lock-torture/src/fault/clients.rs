//! Faults of the client processes: a holder frozen (the GC pause), a queued waiter frozen
//! or killed, the queue's head killed the moment its turn is announced.
//!
//! Who holds or waits for what is read from Redis: a lock key's value and a waiter-queue
//! entry carry the holder label `torture-c<slot>@host:pid`, and the queue's entries map
//! each waiting Locker's channel to it.

use std::collections::HashMap;
use std::time::Duration;

use super::{ms_of, Injector};
use crate::clock;
use crate::ha::ops;
use crate::mode::Mode;
use crate::BoxError;

/// The client slot named by a holder label in `text` (`...:torture-c<slot>@...`).
fn slot_in(text: &str) -> Option<usize> {
    text.split_once(":torture-c")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(id, _)| id.parse().ok())
}

impl Injector<'_> {
    /// One client fault.
    pub(super) fn client_fault(&mut self, fault: Mode) -> Result<bool, BoxError> {
        match fault {
            Mode::Pause => {
                // Stop a client that holds a lock right now, if one does: the GC pause.
                let client = self
                    .holding_client()
                    .unwrap_or_else(|| self.rng.usize(..self.rig.clients.len()));
                self.freeze(client, "pause")
            }
            Mode::PauseWaiter => {
                // Stop a client that waits in a lock's queue right now; none: nothing to do.
                let Some(client) = self.queued_client() else {
                    return Ok(false);
                };
                self.freeze(client, "pause-waiter")
            }
            Mode::KillWaiter => {
                let Some(client) = self.queued_client() else {
                    return Ok(false);
                };
                let t = clock::now();
                self.rig.replace_client(client)?;
                self.fault("kill-waiter", &format!("client{client}"), t, clock::now())
            }
            Mode::KillWokenHead => self.kill_woken_head(),
            Mode::KillCounter => {
                // Any client but 0, which arms the latches' rounds.
                let clients = self.rig.clients.len();
                if clients < 2 {
                    return Ok(false);
                }
                let client = self.rng.usize(1..clients);
                let t = clock::now();
                self.rig.replace_client(client)?;
                self.fault("kill-counter", &format!("client{client}"), t, clock::now())
            }
            _ => Ok(false),
        }
    }

    /// A client that holds one of the locks (or permits, or read-write sides) now.
    fn holding_client(&mut self) -> Option<usize> {
        let clients = self.rig.clients.len();
        let holders: Vec<usize> = self
            .rig
            .name_list()
            .iter()
            .flat_map(|name| self.holders_of(name))
            .filter(|&c| c < clients)
            .collect();
        (!holders.is_empty()).then(|| holders[self.rng.usize(..holders.len())])
    }

    /// The client slots holding `name` now: the lock key's holder, or every member of a
    /// semaphore's or read-write lock's holders (a reservation for a woken waiter too).
    fn holders_of(&self, name: &str) -> Vec<usize> {
        let primitive = self.rig.primitive;
        let key = primitive.holders_key(name);
        let values = if primitive.is_permit_set() {
            self.rig.ask_about(name, &["ZRANGE", &key, "0", "-1"])
        } else {
            self.rig.ask_about(name, &["GET", &key])
        };
        values.iter().filter_map(|v| slot_in(v)).collect()
    }

    /// A client that stands in the waiter queue of one of the names (its entry holds its
    /// value, whose label names the client), and does not hold that lock.
    fn queued_client(&mut self) -> Option<usize> {
        if !self.rig.topology.has_queue() {
            return None;
        }
        let clients = self.rig.clients.len();
        let mut waiting = Vec::new();
        for name in self.rig.name_list() {
            let key = self.rig.primitive.holders_key(&name);
            let holders = self.holders_of(&name);
            if self.rig.primitive.is_permit_set() {
                // A permit set's queue members carry the waiter's Locker channel and value.
                let queued = self.permit_waiter_channels(&name, &key).into_values();
                waiting.extend(queued.filter(|&c| c < clients && !holders.contains(&c)));
                continue;
            }
            // A lock's queue members are `<16 hex digits>:<holder label>`.
            let entries = self
                .rig
                .ask_about(&name, &["ZRANGE", &format!("{key}:q"), "0", "-1"]);
            for entry in entries {
                waiting.extend(slot_in(&entry).filter(|&c| c < clients && !holders.contains(&c)));
            }
        }
        (!waiting.is_empty()).then(|| waiting[self.rng.usize(..waiting.len())])
    }

    /// SIGSTOP of `client` for two to three TTLs, then SIGCONT, logged as fault `kind`.
    fn freeze(&mut self, client: usize, kind: &str) -> Result<bool, BoxError> {
        let Some(pid) = self
            .rig
            .clients
            .get(client)
            .and_then(|c| u32::try_from(c.pid).ok())
        else {
            return Ok(false);
        };
        let pause = self.ttl * 2 + Duration::from_millis(self.rng.u64(0..ms_of(self.ttl)));
        let t_start = clock::now();
        super::signal(pid, true)?;
        std::thread::sleep(pause);
        super::signal(pid, false)?;
        self.fault(kind, &format!("client{client}"), t_start, clock::now())
    }

    /// Listens for the announcement of a head's turn (`g:<window>:<lock key>` published on
    /// the head's own channel when the lock is reserved for it) and SIGKILLs that client at
    /// once; a new process takes its slot. Gives up after two seconds without one.
    fn kill_woken_head(&mut self) -> Result<bool, BoxError> {
        let Some(port) = self
            .rig
            .name_list()
            .first()
            .and_then(|n| self.rig.server_of(n))
        else {
            return Ok(false);
        };
        let mut conn = ops::connect(port)?;
        let mut channels = self.waiter_channels();
        let mut pubsub = conn.as_pubsub();
        pubsub.psubscribe("lock:waiters:*")?;
        pubsub.set_read_timeout(Some(Duration::from_millis(50)))?;
        let give_up = clock::now() + clock::nanos(Duration::from_secs(2));
        // Permit sets: the waiting Lockers' channels, learned from the queues while they
        // wait (a waiter handed its permit has left its queue when the message comes).
        let mut known = HashMap::new();
        while clock::now() < give_up {
            if self.rig.primitive.is_permit_set() {
                for name in self.rig.name_list() {
                    let holders = self.rig.primitive.holders_key(&name);
                    known.extend(self.permit_waiter_channels(&name, &holders));
                }
            }
            let Ok(message) = pubsub.get_message() else {
                continue;
            };
            let payload: String = message.get_payload().unwrap_or_default();
            if self.rig.primitive.is_permit_set() {
                // A semaphore's or read-write lock's turn: `g:<window>:<holders key>#<id>`,
                // or several waiters of one Locker at once, `b:<window>:<id>,...:<holders
                // key>`; the message's channel is their Locker's.
                let holders = match payload.strip_prefix("b:") {
                    Some(batch) => batch.splitn(3, ':').nth(2).map(str::to_owned),
                    None => payload
                        .strip_prefix("g:")
                        .and_then(|rest| rest.split_once(':'))
                        .and_then(|(_, key)| key.rsplit_once('#'))
                        .map(|(holders, _)| holders.to_owned()),
                };
                let Some(holders) = holders else {
                    continue;
                };
                let channel = message.get_channel_name().to_owned();
                let Some(done) = self.kill_woken_permit_waiter(&holders, &channel, &known)? else {
                    continue;
                };
                return Ok(done);
            }
            let Some(lock_key) = payload
                .strip_prefix("g:")
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, key)| key.to_owned())
            else {
                continue;
            };
            let channel = message.get_channel_name().to_owned();
            let name = crate::names::name_of_key(&lock_key)
                .unwrap_or_default()
                .to_owned();
            // The lock is reserved for the head (`?<member>`, marked or not; the member is
            // its channel's 16 hex digits and its holder label) until it claims it; the
            // head left the queue when the reservation was made.
            let id = channel.rsplit(':').next().unwrap_or_default();
            let reserved_for = |held: &[String]| {
                held.first()
                    .map(|v| v.trim_start_matches('~'))
                    .and_then(|v| v.strip_prefix('?'))
                    .filter(|member| member.starts_with(id))
                    .and_then(slot_in)
            };
            let reserved = reserved_for(&self.rig.ask_about(&name, &["GET", &lock_key]));
            if reserved.is_none() && !channels.contains_key(&channel) {
                channels = self.waiter_channels();
            }
            let Some(client) = reserved.or_else(|| channels.get(&channel).copied()) else {
                continue;
            };
            let t = clock::now();
            drop(pubsub);
            self.rig.replace_client(client)?;
            // Killed before it claimed its turn (the lock still holds the reservation), or
            // just after.
            let unclaimed =
                reserved_for(&self.rig.ask_about(&name, &["GET", &lock_key])) == Some(client);
            let when = if unclaimed { "unclaimed" } else { "claimed" };
            let target = format!("client{client} {name} {when}");
            return self.fault("kill-woken-head", &target, t, clock::now());
        }
        Ok(false)
    }

    /// A turn of a semaphore or read-write lock (holders key `holders`) was announced on
    /// `channel`, a waiting Locker's: SIGKILL of that Locker's client, found in `known`
    /// (learned from the queue members, each of which carries its Locker's channel and its
    /// holder label), and a new process in its place. `None` when the message was not for
    /// one of the run's names or the channel is not known.
    fn kill_woken_permit_waiter(
        &mut self,
        holders: &str,
        channel: &str,
        known: &HashMap<String, usize>,
    ) -> Result<Option<bool>, BoxError> {
        let suffix = self.rig.primitive.key_suffix();
        let Some(name) = holders
            .strip_suffix(suffix)
            .and_then(crate::names::name_of_key)
            .map(str::to_owned)
        else {
            return Ok(None);
        };
        let clients = self.rig.clients.len();
        let Some(client) = known.get(channel).copied().filter(|&c| c < clients) else {
            return Ok(None);
        };
        let t = clock::now();
        self.rig.replace_client(client)?;
        // A claim moves the reservation's end from the claim window to the TTL: a member
        // of the client still ending within the window was not claimed.
        let now_ms = self
            .rig
            .ask_about(&name, &["TIME"])
            .first()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(0, |s| s * 1000);
        let members = self.rig.ask_about(
            &name,
            &["ZRANGEBYSCORE", holders, "(0", "+inf", "WITHSCORES"],
        );
        let unclaimed = members.chunks(2).any(|pair| {
            matches!(pair, [member, end]
                if slot_in(member) == Some(client)
                    && end.parse::<u64>().is_ok_and(|end| end <= now_ms + 1_100))
        });
        let when = if unclaimed { "unclaimed" } else { "claimed" };
        let target = format!("client{client} {name} {when}");
        self.fault("kill-woken-head", &target, t, clock::now())
            .map(Some)
    }

    /// The channels of the Lockers waiting in the queue of permit set `holders` (of
    /// `name`), with the client slot each belongs to: a queue member is `<weight> <life>
    /// <ttl> <id> <channel length> <channel><value>`.
    fn permit_waiter_channels(&self, name: &str, holders: &str) -> HashMap<String, usize> {
        let mut channels = HashMap::new();
        let members = self
            .rig
            .ask_about(name, &["ZRANGE", &format!("{holders}:q"), "0", "-1"]);
        for member in members {
            let mut fields = member.splitn(6, ' ');
            let (Some(len), Some(rest)) = (fields.nth(4), fields.next()) else {
                continue;
            };
            let Some(len) = len.parse::<usize>().ok().filter(|&len| len <= rest.len()) else {
                continue;
            };
            let (channel, value) = rest.split_at(len);
            if let Some(client) = slot_in(value) {
                channels.insert(channel.to_owned(), client);
            }
        }
        channels
    }

    /// Every waiting Locker's channel in the queues now (`lock:waiters:` and the first 16
    /// characters of its member), with the client slot it belongs to (from the member's
    /// holder label).
    fn waiter_channels(&self) -> HashMap<String, usize> {
        let mut channels = HashMap::new();
        for name in self.rig.name_list() {
            let queue = format!("{}:q", ops::lock_key(&name));
            for member in self.rig.ask_about(&name, &["ZRANGE", &queue, "0", "-1"]) {
                if let (Some(id), Some(client)) = (member.get(..16), slot_in(&member)) {
                    channels.insert(format!("lock:waiters:{id}"), client);
                }
            }
        }
        channels
    }
}

#[cfg(test)]
mod tests {
    use super::slot_in;

    #[test]
    fn the_slot_comes_from_the_holder_label() {
        assert_eq!(slot_in("0123abcd:torture-c3@host:42"), Some(3));
        assert_eq!(slot_in("1700 0123abcd:torture-c12@host:42"), Some(12));
        assert_eq!(slot_in("0123abcd:other@host:42"), None);
    }
}
