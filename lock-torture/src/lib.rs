//! Fault-injection torture for `lock-core`, with a checker that judges the recorded history.
//!
//! `lock-torture run --mode <mode> --seconds <s>` starts a private lock server (or several,
//! for Redlock), a separate fenced store, one TCP proxy per client in front of each lock
//! server, and `--clients` client processes (this same binary, `client` subcommand). Each
//! client loops: take one of `--names` locks with a short TTL and a fencing token, hold it for
//! a random time that sometimes outlives the TTL, write to the fenced store with its token,
//! release. Every step goes to a per-client JSON-lines log stamped with `CLOCK_MONOTONIC`.
//! Meanwhile the orchestrator injects the faults of the mode ([`fault::Mode`]): servers
//! killed and restarted empty, clients stopped with SIGSTOP, latency, dropped connections and
//! partitions through the proxies, `SCRIPT FLUSH`, `CLIENT KILL`, pool exhaustion, foreign
//! values on lock keys, servers stalled with `DEBUG SLEEP`. Some rounds take the lock through
//! a `#[redis_locked]` function whose critical section is a nested annotated call, or two
//! concurrent sibling calls; `--primitive multi` takes several names at once, `--primitive
//! election` campaigns for leadership and acts as leader, `--primitive schedule` runs a job
//! once per tick across the clients ([`cadence`]), `--primitive latch` arms, counts down
//! and waits on countdown latches, `--primitive weighted` takes semaphore permits by weight
//! while their capacity is changed in use, `--mode
//! cancel` drops requests at random points, and `--mode clock-skew` (Redlock) sets the
//! clients' wall clocks seconds off where lock-core reads them. Afterwards [`check::check`] merges the logs and verifies the rules
//! listed in [`check`], and one summary line per run is printed. The exit code is non-zero on
//! any violation.
//!
//! The binary's modules are public so that tests and other tools can drive a run or re-check
//! a kept history (`lock-torture check <dir>`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]
// The client task's future (rounds of every kind, nested annotated calls) is deep.
#![recursion_limit = "256"]

pub mod cadence;
pub mod check;
pub mod client;
pub mod clock;
pub mod event;
pub mod fault;
pub mod ha;
pub mod heartbeat;
pub mod mode;
pub mod names;
pub mod primitive;
pub mod profile;
pub mod resource;
pub mod rig;
pub mod run;
pub mod settings;
pub mod spawn;
pub mod start;
pub mod topology;
pub mod trace;
pub mod waits;
pub mod workers;

/// The error type of the harness (not of the library under test).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
