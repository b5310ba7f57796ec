//! The events of scheduled runs ([`Event::RunStarted`](super::Event::RunStarted),
//! [`Event::TickDone`](super::Event::TickDone)).

use serde::{Deserialize, Serialize};

use crate::clock::Nanos;

/// A scheduled run, as its job saw it begin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStarted {
    /// Client number (the replica).
    pub client: u32,
    /// The job (its lock name).
    pub job: String,
    /// The tick the replica's timer fired for.
    pub tick: u64,
    /// Start of the attempt that took the lock (`lease.acquired_at()`): the minimum hold
    /// counts from here.
    pub attempt_start: Nanos,
    /// When the job began.
    pub t: Nanos,
    /// The lease token.
    pub token: String,
}

/// One fire of a replica's timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickDone {
    /// Client number (the replica).
    pub client: u32,
    /// The job (its lock name).
    pub job: String,
    /// The tick.
    pub tick: u64,
    /// When `run_once` was called (or the fire was dropped as too late).
    pub t_call: Nanos,
    /// When it returned.
    pub t_return: Nanos,
    /// `ran`, `skipped` (another replica holds the tick), `late` (the timer fired past
    /// the schedule's allowance: not tried), or the error's kind.
    pub outcome: String,
    /// The schedule: between ticks, in ms.
    pub interval_ms: u64,
    /// The schedule: the latest a replica fires, in ms.
    pub max_offset_ms: u64,
    /// The schedule: the minimum hold, in ms.
    pub hold_ms: u64,
}
