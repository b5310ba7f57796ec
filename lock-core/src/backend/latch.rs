//! Countdown latches' state, on one Redis or a Cluster (`scripts/latch_*.lua`: one script
//! per step) or in this process. A latch is one hash at `<lock key of its name>:latch`
//! (round id, count left, count armed, the round before when it had opened) with a TTL;
//! its opening is told once, on `<latch key>:opened`, to every process that waits on it.
//!
//! (Backends layer: knows the keys and scripts; the waiting is in `prims::latch`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::millis;
use crate::backend::prim_scripts::{Server, LATCH_ARM, LATCH_COUNT_DOWN, LATCH_STATE};
use crate::signal::Wake;
use crate::LockError;

/// A latch's keys: the state, and the channel its opening is told on (same hash tag).
#[derive(Debug, Clone)]
pub(crate) struct LatchKeys {
    pub name: String,
    pub key: String,
    pub channel: String,
}

impl LatchKeys {
    pub fn new(prefix: &str, name: String) -> Result<LatchKeys, LockError> {
        crate::limits::validate_name(&name)?;
        let mut key = crate::key::lock_key(prefix, &name);
        key.push_str(":latch");
        let channel = format!("{key}:opened");
        Ok(LatchKeys { name, key, channel })
    }
}

/// The current round of a latch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    pub round: u64,
    pub left: u64,
    pub armed: u64,
    /// Until the key expires (`None`: no TTL, which the scripts never leave).
    pub ttl: Option<Duration>,
    /// The round before, when it had opened before this one was armed.
    pub previous: Option<u64>,
}

/// What `arm` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Armed {
    Armed {
        round: u64,
    },
    /// The current round still counts: nothing was changed.
    Counting {
        left: u64,
    },
}

/// What `count_down` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Left {
        left: u64,
    },
    /// No latch: never armed, or expired.
    Missing,
    /// More than is left: nothing was changed.
    TooMany {
        left: u64,
    },
}

/// Where latches live.
#[derive(Clone)]
pub(crate) enum LatchStore {
    Server(Server),
    Memory(Arc<MemoryLatches>),
}

fn number(value: Option<&redis::Value>) -> Option<u64> {
    value.and_then(|v| {
        redis::from_redis_value_ref::<u64>(v)
            .ok()
            .or_else(|| redis::from_redis_value_ref::<String>(v).ok()?.parse().ok())
    })
}

impl LatchStore {
    pub async fn arm(
        &self,
        keys: &LatchKeys,
        count: u64,
        ttl: Duration,
    ) -> Result<Armed, LockError> {
        match self {
            LatchStore::Server(server) => {
                let (count, ttl) = (count.to_string(), millis(ttl).to_string());
                let reply: Vec<redis::Value> = server
                    .run(
                        &LATCH_ARM,
                        &keys.name,
                        &[&keys.key],
                        &[count.as_bytes(), ttl.as_bytes()],
                    )
                    .await?;
                let (code, round, left) = (
                    redis::from_redis_value_ref::<i64>(&reply[0]).unwrap_or(0),
                    number(reply.get(1)).unwrap_or(0),
                    number(reply.get(2)).unwrap_or(0),
                );
                Ok(if code == 1 {
                    Armed::Armed { round }
                } else {
                    Armed::Counting { left }
                })
            }
            LatchStore::Memory(memory) => Ok(memory.arm(&keys.key, count, ttl)),
        }
    }

    pub async fn count_down(&self, keys: &LatchKeys, n: u64) -> Result<Counted, LockError> {
        match self {
            LatchStore::Server(server) => {
                let n = n.to_string();
                let reply: Vec<redis::Value> = server
                    .run(
                        &LATCH_COUNT_DOWN,
                        &keys.name,
                        &[&keys.key],
                        &[n.as_bytes(), server.announce],
                    )
                    .await?;
                let code = reply
                    .first()
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
                    .unwrap_or(-1);
                let left = number(reply.get(2)).unwrap_or(0);
                Ok(match code {
                    1 => Counted::Left { left },
                    -2 => Counted::TooMany { left },
                    _ => Counted::Missing,
                })
            }
            LatchStore::Memory(memory) => Ok(memory.count_down(&keys.key, n)),
        }
    }

    pub async fn state(&self, keys: &LatchKeys) -> Result<Option<State>, LockError> {
        match self {
            LatchStore::Server(server) => {
                let reply: Vec<redis::Value> = server
                    .run(&LATCH_STATE, &keys.name, &[&keys.key], &[])
                    .await?;
                if reply.is_empty() {
                    return Ok(None);
                }
                let ttl = reply
                    .get(3)
                    .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis);
                Ok(Some(State {
                    round: number(reply.first()).unwrap_or(0),
                    left: number(reply.get(1)).unwrap_or(0),
                    armed: number(reply.get(2)).unwrap_or(0),
                    ttl,
                    previous: number(reply.get(4)),
                }))
            }
            LatchStore::Memory(memory) => Ok(memory.state(&keys.key)),
        }
    }
}

/// Latches in this process: the scripts' rules, with the opening posted to one signal.
#[derive(Default)]
pub(crate) struct MemoryLatches {
    latches: Mutex<HashMap<String, MemoryLatch>>,
    /// Every opening is posted here (with its round), for the waiters of every latch.
    opened: Arc<Wake>,
    /// The last round id handed out (never reused).
    rounds: Mutex<u64>,
}

struct MemoryLatch {
    round: u64,
    left: u64,
    armed: u64,
    expires: Instant,
    previous: Option<u64>,
}

impl std::fmt::Debug for MemoryLatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLatches").finish_non_exhaustive()
    }
}

impl MemoryLatches {
    /// The signal every opening is posted to.
    pub fn signal(&self) -> &Arc<Wake> {
        &self.opened
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, MemoryLatch>> {
        let mut latches = self.latches.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        latches.retain(|_, latch| latch.expires > now);
        latches
    }

    fn arm(&self, key: &str, count: u64, ttl: Duration) -> Armed {
        let mut latches = self.live();
        let previous = match latches.get(key) {
            Some(latch) if latch.left > 0 => return Armed::Counting { left: latch.left },
            Some(latch) => Some(latch.round),
            None => None,
        };
        let round = {
            let mut rounds = self.rounds.lock().unwrap_or_else(PoisonError::into_inner);
            *rounds += 1;
            *rounds
        };
        latches.insert(
            key.to_owned(),
            MemoryLatch {
                round,
                left: count,
                armed: count,
                expires: Instant::now() + ttl,
                previous,
            },
        );
        Armed::Armed { round }
    }

    fn count_down(&self, key: &str, n: u64) -> Counted {
        let mut latches = self.live();
        let Some(latch) = latches.get_mut(key) else {
            return Counted::Missing;
        };
        if n > latch.left {
            return Counted::TooMany { left: latch.left };
        }
        latch.left -= n;
        let (left, round) = (latch.left, latch.round);
        drop(latches);
        if left == 0 {
            self.opened.post_opened(round);
        }
        Counted::Left { left }
    }

    fn state(&self, key: &str) -> Option<State> {
        let latches = self.live();
        latches.get(key).map(|latch| State {
            round: latch.round,
            left: latch.left,
            armed: latch.armed,
            ttl: Some(latch.expires.saturating_duration_since(Instant::now())),
            previous: latch.previous,
        })
    }
}
