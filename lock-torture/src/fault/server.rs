//! Faults of the proxied lock servers (one server, or Redlock's nodes): kills and
//! restarts, latency, dropped connections and partitions through the proxies, the script
//! cache flushed, client connections killed, an exhausted pool, foreign values on lock
//! keys, stalls with `DEBUG SLEEP`, held lock keys taken from their holders (`steal`).

use std::time::Duration;

use super::{ms_of, sleep_until_or, Injector};
use crate::clock;
use crate::event::Event;
use crate::mode::Mode;
use crate::BoxError;

impl Injector<'_> {
    /// One fault of the proxied servers.
    pub(super) fn server_fault(
        &mut self,
        fault: Mode,
        until: crate::clock::Nanos,
    ) -> Result<bool, BoxError> {
        let ttl = self.ttl;
        match fault {
            Mode::Kill | Mode::KillDelayed => {
                let node = self.rng.usize(..self.rig.nodes.len());
                let t_start = clock::now();
                self.rig.nodes[node].server.kill();
                if fault == Mode::KillDelayed {
                    // Stay down past every lease the server granted: at least one TTL.
                    std::thread::sleep(ttl * 2);
                }
                // The new process may serve clients as soon as it is spawned, before it
                // answers the orchestrator's PING: the outage ends here.
                let t_spawn = clock::now();
                self.rig.nodes[node].server.restart();
                let t_end = clock::now();
                self.log.write(&Event::Down {
                    node: node as u32,
                    t_start,
                    t_end: t_spawn,
                    empty: true,
                })?;
                self.fault(fault.name(), &format!("node{node}"), t_start, t_end)
            }
            Mode::Latency | Mode::Pool => {
                let targets = if fault == Mode::Pool {
                    (0..self.rig.clients.len()).collect()
                } else {
                    self.some_clients()
                };
                let ms = ms_of(ttl);
                let latency = if fault == Mode::Pool {
                    Duration::from_millis(ms / 2)
                } else {
                    Duration::from_millis(self.rng.u64(ms / 4..=ms * 3 / 2))
                };
                let t_start = clock::now();
                self.rig.set_latency(&targets, latency);
                let d = Duration::from_millis(self.rng.u64(500..1000));
                sleep_until_or(d, until);
                self.rig.set_latency(&targets, Duration::ZERO);
                let target = format!("clients{targets:?}+{}ms", latency.as_millis());
                self.fault(fault.name(), &target, t_start, clock::now())
            }
            Mode::Drop => {
                let targets = self.some_clients();
                let t = clock::now();
                self.rig.drop_connections(&targets);
                self.fault("drop", &format!("clients{targets:?}"), t, t)
            }
            Mode::Partition => {
                let targets = self.some_clients();
                let t_start = clock::now();
                self.rig.set_blackhole(&targets, true);
                let d = Duration::from_millis(self.rng.u64(1000..2000));
                sleep_until_or(d, until);
                self.rig.set_blackhole(&targets, false);
                let target = format!("clients{targets:?}");
                self.fault("partition", &target, t_start, clock::now())
            }
            Mode::ScriptFlush => {
                let t = clock::now();
                for node in &self.rig.nodes {
                    node.server.command(&["SCRIPT", "FLUSH"]);
                }
                self.fault("script-flush", "all nodes", t, t)
            }
            Mode::ClientKill => {
                let node = self.rng.usize(..self.rig.nodes.len());
                let t = clock::now();
                let server = &self.rig.nodes[node].server;
                server.command(&["CLIENT", "KILL", "TYPE", "normal"]);
                server.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                self.fault("client-kill", &format!("node{node}"), t, t)
            }
            Mode::Stall => {
                let n = self.rig.nodes.len();
                let nodes: Vec<usize> = if n > 1 && self.rng.bool() {
                    (0..n).collect()
                } else {
                    vec![self.rng.usize(..n)]
                };
                let ms = ms_of(ttl);
                let d = Duration::from_millis(self.rng.u64(ms / 5..=ms * 4 / 5));
                let t_start = clock::now();
                let sleepers: Vec<_> = nodes
                    .iter()
                    .map(|&node| self.rig.nodes[node].server.stall(d))
                    .collect();
                for sleeper in sleepers {
                    if sleeper.join().is_err() {
                        return Err(
                            "DEBUG SLEEP failed on a lock server (is DEBUG enabled?)".into()
                        );
                    }
                }
                let target = format!("nodes{nodes:?}+{}ms", d.as_millis());
                self.fault("stall", &target, t_start, clock::now())
            }
            Mode::WrongType => {
                let names = self.rig.names.max(1);
                // A lock's run draws its name first, as it always did (same seed, same run).
                let drawn = (!self.rig.primitive.is_permit_set())
                    .then(|| self.rig.name(self.rng.u32(..names)));
                // With Redlock, half the time on one node only: the other nodes then take
                // the attempt's value, which must be taken back when the attempt fails.
                let n = self.rig.nodes.len();
                let only = (n > 1 && self.rng.bool()).then(|| self.rng.usize(..n));
                // HSETNX creates a hash only where no key exists: a held lock is left alone
                // (and a semaphore's sorted set of holders answers WRONGTYPE).
                let plant = |key: &str| {
                    self.rig
                        .nodes
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| only.is_none_or(|only| only == *i))
                        .map(|(_, node)| {
                            node.server
                                .command(&["HSETNX", key, "owner", "someone-else"])
                        })
                        .filter(|reply| reply.starts_with(":1"))
                        .count()
                };
                let (name, created) = if let Some(name) = drawn {
                    let created = plant(&self.rig.primitive.holders_key(&name));
                    (name, created)
                } else {
                    // A semaphore's or read-write lock's holders key stays while any permit
                    // is held or reserved for a queued waiter: look for a moment when one
                    // of the names is free, for up to a TTL.
                    let give_up = clock::now() + clock::nanos(ttl);
                    let mut found = (String::new(), 0);
                    while found.1 == 0 && clock::now() < give_up.min(until) {
                        for i in 0..names {
                            let name = self.rig.name(i);
                            let created = plant(&self.rig.primitive.holders_key(&name));
                            if created > 0 {
                                found = (name, created);
                                break;
                            }
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    found
                };
                // The lock's key, or the semaphore's or read-write lock's holders.
                let key = self.rig.primitive.holders_key(&name);
                if created == 0 {
                    return Ok(false);
                }
                let t_start = clock::now();
                let d = Duration::from_millis(self.rng.u64(300..800));
                sleep_until_or(d, until);
                let t_end = clock::now();
                for node in &self.rig.nodes {
                    node.server.command(&[
                        "EVAL",
                        "if redis.call('TYPE', KEYS[1]).ok == 'hash' then return redis.call('DEL', KEYS[1]) end return 0",
                        "1",
                        &key,
                    ]);
                }
                if created == self.rig.nodes.len() {
                    self.log.write(&Event::Foreign {
                        name: name.clone(),
                        t_start,
                        t_end,
                    })?;
                }
                let target = match only {
                    Some(node) => format!("{name}@node{node}"),
                    None => name,
                };
                self.fault("wrong-type", &target, t_start, t_end)
            }
            Mode::Steal => self.steal(),
            _ => Ok(false),
        }
    }

    /// `--mode steal`: the lock key of one of the names, if a lease holds it now, deleted
    /// or overwritten with a foreign value (which expires after a TTL), in one script that
    /// reads it first; logged with the token taken. False when no name was held.
    fn steal(&mut self) -> Result<bool, BoxError> {
        /// Takes KEYS[1] if it holds a lease (a string that is not a steal's own value):
        /// ARGV[1] `del` or `overwrite` (with ARGV[2] for ARGV[3] ms). Returns the value
        /// taken and the server's TIME, or nothing.
        const STEAL: &str = "if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return {} end \
            local v = redis.call('GET', KEYS[1]) \
            if string.sub(v, 1, 6) == 'stolen' then return {} end \
            if ARGV[1] == 'del' then redis.call('DEL', KEYS[1]) \
            else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end \
            local t = redis.call('TIME') return {v, t[1], t[2]}";
        let Some(node) = self.rig.nodes.first() else {
            return Ok(false);
        };
        let port = node.server.port();
        let names = self.rig.names.max(1);
        let first = self.rng.u32(..names);
        let how = if self.rng.bool() { "del" } else { "overwrite" };
        let foreign = format!("stolen-{}:torture-steal", self.rng.u32(..));
        let ttl_ms = ms_of(self.ttl).to_string();
        let mut conn = crate::ha::ops::connect(port)?;
        // The names in turn from a random one: the first held is taken.
        for i in 0..names {
            let name = self.rig.name((first + i) % names);
            let key = self.rig.primitive.holders_key(&name);
            let t_sent = clock::now();
            let reply = crate::ha::ops::run(
                &mut conn,
                &["EVAL", STEAL, "1", &key, how, &foreign, &ttl_ms],
            )?;
            let t_reply = clock::now();
            let redis::Value::Array(items) = reply else {
                continue;
            };
            let texts: Vec<String> = items.iter().filter_map(crate::ha::ops::text).collect();
            let [value, secs, micros] = texts.as_slice() else {
                continue;
            };
            let server_us =
                secs.parse::<u64>().unwrap_or(0) * 1_000_000 + micros.parse::<u64>().unwrap_or(0);
            self.log.write(&Event::Steal {
                name: name.clone(),
                token: crate::event::lease_token(value).to_owned(),
                how: how.to_owned(),
                t_sent,
                t_reply,
                server_us,
            })?;
            return self.fault("steal", &format!("{name}:{how}"), t_sent, t_reply);
        }
        Ok(false)
    }
}
