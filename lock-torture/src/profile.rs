//! Workload profiles: what the client tasks do between faults.
//!
//! `default` is the mix the fault modes were designed around: holds that often run past
//! the TTL, long waits, many auto-renewed and annotated rounds, three names. `throughput`
//! checks volume: short holds (most a few milliseconds), short waits, more names, clients
//! and tasks, and only a few rounds of each special kind, so that a run of half an hour
//! checks a million acquisitions while the same faults are injected throughout.

/// A workload profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Overruns and special rounds first.
    Default,
    /// Volume first.
    Throughput,
}

impl Profile {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Throughput => "throughput",
        }
    }

    /// Client processes, unless `--clients` says otherwise.
    pub fn clients(self) -> u32 {
        match self {
            Profile::Default => 4,
            Profile::Throughput => 10,
        }
    }

    /// Whether every client runs on Lua scripts unless `--protocol` says otherwise
    /// (otherwise even clients on scripts and odd ones on WATCH/MULTI).
    pub fn scripts_only(self) -> bool {
        self == Profile::Throughput
    }

    /// Tasks per client, unless `--tasks` says otherwise.
    pub fn tasks(self) -> u32 {
        match self {
            Profile::Default => 2,
            Profile::Throughput => 4,
        }
    }

    /// Lock names, unless `--names` says otherwise.
    pub fn names(self) -> u32 {
        match self {
            Profile::Default => 3,
            Profile::Throughput => 64,
        }
    }

    /// Lease TTL in ms, unless `--ttl-ms` says otherwise.
    pub fn ttl_ms(self) -> u64 {
        match self {
            Profile::Default => 200,
            Profile::Throughput => 100,
        }
    }

    /// One chance in this many that a round goes through a `#[redis_locked]` function,
    /// that a lease is auto-renewed, or that a holder tries to extend.
    fn rarity(self) -> u8 {
        match self {
            Profile::Default => 5,
            Profile::Throughput => 20,
        }
    }

    /// Whether this round takes the lock through a `#[redis_locked]` function.
    pub fn annotated_round(self, rng: &mut fastrand::Rng) -> bool {
        rng.u8(0..self.rarity()) == 0
    }

    /// Whether this lease is auto-renewed.
    pub fn auto_renew(self, rng: &mut fastrand::Rng) -> bool {
        rng.u8(0..self.rarity()) == 0
    }

    /// Whether the holder tries to extend.
    pub fn extend(self, rng: &mut fastrand::Rng) -> bool {
        rng.u8(0..self.rarity()) == 0
    }

    /// How long a request waits, in ms.
    pub fn wait_ms(self, rng: &mut fastrand::Rng, ttl_ms: u64) -> u64 {
        match self {
            // One request in eight a try (no wait: `Busy` at once), as `try_lock` callers
            // make: what a stalled replica must not slow (rule `busy-delayed`).
            Profile::Default if rng.u8(0..8) == 0 => 0,
            Profile::Default => rng.u64(0..=ttl_ms * 2),
            Profile::Throughput => rng.u64(0..=ttl_ms / 2),
        }
    }

    /// How long a holder keeps its lease, in ms. Most holds end well within the TTL; some
    /// overrun it (the holder that does not know its lock expired), and auto-renewed ones
    /// may outlive `max_hold`.
    pub fn hold_ms(self, rng: &mut fastrand::Rng, ttl_ms: u64, auto_renew: bool) -> u64 {
        match (self, auto_renew) {
            (Profile::Default, true) => rng.u64(0..ttl_ms * 4),
            (Profile::Default, false) if rng.u8(0..10) < 7 => rng.u64(0..ttl_ms * 3 / 4),
            (Profile::Default, false) => rng.u64(ttl_ms..ttl_ms * 2),
            (Profile::Throughput, true) => rng.u64(0..ttl_ms * 2),
            (Profile::Throughput, false) => match rng.u8(0..100) {
                0 => rng.u64(ttl_ms..ttl_ms * 2),
                1..=5 => rng.u64(ttl_ms / 20..ttl_ms * 3 / 4),
                _ => rng.u64(0..(ttl_ms / 20).max(1)),
            },
        }
    }
}
