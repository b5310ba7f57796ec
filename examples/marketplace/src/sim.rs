//! The simulation of the book's tables: listers and buyers hammering one marketplace.
//!
//! One row = one mode (see [`Mode`]) with some listers and some buyers, for a fixed time, on
//! a freshly seeded marketplace under its own key prefix:
//!
//! - a **lister** picks a random user, takes a random item from that user's inventory
//!   (`SRANDMEMBER`) and lists it at a random price;
//! - a **buyer** picks a random listed item (`ZRANDMEMBER .. WITHSCORES`) and buys it for
//!   one of its own users. Buyer task `k` of `B` acts for users `k, k + B, k + 2B, ..`, so
//!   a user's funds are only ever spent by one task (see [`crate::locked`] on funds), while
//!   items keep spreading over all users and the listers never run dry.
//!
//! Each task is one "process" of the book: it has its own Redis connection for the data
//! (`WATCH` needs one). By default all tasks of a row share one [`Locker`], the way an
//! application shares one locker between its tasks (its lock commands then travel on one
//! multiplexed connection); [`RowConfig::locker_per_task`] gives each task its own, as
//! separate processes would have. On a 2-core machine the two measure the same within
//! noise.
//!
//! The wait of a purchase is the time from the start of the `purchase_item` call to its
//! end: retries and lock waits included, the pick of the item excluded. Afterwards
//! [`crate::checks::verify`] checks the invariants, and the row's keys are deleted.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::Locker;
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::checks::{verify, CheckReport, Ledger};
use crate::locked::{self, BodyClock, LockedMarket};
use crate::model::{delete_all, parse_member, seed, Keys, Seed};
use crate::watch::WatchMarket;
use crate::{Listing, MarketError, Purchase, Tried};

/// How listings and purchases are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Optimistic `WATCH`/`MULTI`/`EXEC` with retries (the book's "no lock" rows).
    Watch,
    /// One lock around the whole market (the book's "with lock" rows).
    Market,
    /// One lock per item (the book's table 6.3).
    Item,
}

impl Mode {
    /// Every mode, in the book's order.
    pub const ALL: [Mode; 3] = [Mode::Watch, Mode::Market, Mode::Item];

    /// Short name: `watch`, `market` or `item`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Watch => "watch",
            Mode::Market => "market",
            Mode::Item => "item",
        }
    }

    /// How the book's tables call this mode.
    pub fn book_label(self) -> &'static str {
        match self {
            Mode::Watch => "no lock",
            Mode::Market => "with lock",
            Mode::Item => "item locks",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The book's three configurations: (listers, buyers).
pub const BOOK_CONFIGS: [(usize, usize); 3] = [(1, 1), (5, 1), (5, 5)];

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct RowConfig {
    /// How operations are protected.
    pub mode: Mode,
    /// Number of lister tasks.
    pub listers: usize,
    /// Number of buyer tasks.
    pub buyers: usize,
    /// How long the listers and buyers run.
    pub duration: Duration,
    /// The starting state.
    pub seed: Seed,
    /// Listing prices are drawn from `1..=max_price`.
    pub max_price: i64,
    /// Locked modes: give every task a [`Locker`] (and so a lock connection) of its own, as
    /// separate processes would have, instead of one shared by the row.
    pub locker_per_task: bool,
    /// Locked modes: every lease draws a fencing token and the writes are guarded scripts
    /// that check it ([`LockedMarket::with_fencing`]).
    pub fenced: bool,
}

impl RowConfig {
    /// Refuses settings the simulation cannot run.
    pub fn validate(&self) -> Result<(), MarketError> {
        let fail = |why: String| Err(MarketError::Config(why));
        if self.listers == 0 && self.buyers == 0 {
            return fail("a row needs at least one lister or buyer".into());
        }
        if self.seed.users == 0 || self.seed.users < self.buyers as u64 {
            return fail(format!(
                "{} users cannot give {} buyers a user each",
                self.seed.users, self.buyers
            ));
        }
        if self.seed.items_per_user == 0 {
            return fail("users need at least one item each".into());
        }
        if self.seed.items() > u64::from(u32::MAX) {
            return fail(format!("{} items are too many", self.seed.items()));
        }
        if self.max_price < 1 || self.seed.funds < 0 {
            return fail("prices must be at least 1 and funds not negative".into());
        }
        if self.duration.is_zero() {
            return fail("a row must run for some time".into());
        }
        Ok(())
    }

    /// `5 listers, 5 buyers, item locks`.
    pub fn label(&self) -> String {
        format!(
            "{} lister{}, {} buyer{}, {}",
            self.listers,
            plural(self.listers),
            self.buyers,
            plural(self.buyers),
            self.mode.book_label()
        ) + if self.fenced && self.mode != Mode::Watch {
            " + fence"
        } else {
            ""
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Asks running rows to stop early (for Ctrl-C). Clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A flag that is not raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Raises the flag: running tasks finish their current operation and stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// True once [`Stop::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Distribution of the waits of one row's purchases, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WaitStats {
    /// Number of purchase calls.
    pub count: u64,
    /// Mean wait.
    pub mean_ms: f64,
    /// Median wait.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Longest wait.
    pub max_ms: f64,
}

impl WaitStats {
    /// Statistics of `waits` (microseconds; sorted in place).
    pub fn from_micros(waits: &mut [u32]) -> WaitStats {
        if waits.is_empty() {
            return WaitStats::default();
        }
        waits.sort_unstable();
        let count = waits.len();
        let sum: u64 = waits.iter().map(|&w| u64::from(w)).sum();
        let rank = |p: f64| {
            // Nearest rank: the smallest wait with at least p of the waits at or below it.
            let index = ((p * count as f64).ceil() as usize).clamp(1, count) - 1;
            f64::from(waits[index]) / 1000.0
        };
        WaitStats {
            count: count as u64,
            mean_ms: sum as f64 / count as f64 / 1000.0,
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: f64::from(waits[count - 1]) / 1000.0,
        }
    }
}

/// What one row did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    /// How operations were protected.
    pub mode: Mode,
    /// Lister tasks.
    pub listers: usize,
    /// Buyer tasks.
    pub buyers: usize,
    /// How long the tasks ran, in seconds.
    pub seconds: f64,
    /// Completed listings.
    pub listed: u64,
    /// Completed purchases.
    pub bought: u64,
    /// Purchase calls (bought or not).
    pub purchases: u64,
    /// Aborted purchase transactions that were retried.
    pub purchase_retries: u64,
    /// Aborted listing transactions that were retried.
    pub list_retries: u64,
    /// Purchases that found the item gone or repriced.
    pub not_listed: u64,
    /// Purchases refused for lack of funds.
    pub insufficient_funds: u64,
    /// Optimistic operations that ran out of time.
    pub gave_up: u64,
    /// Operations whose lock stayed busy for the whole wait.
    pub lock_timeouts: u64,
    /// Lister picks that found an empty inventory.
    pub empty_picks: u64,
    /// Buyer picks that found an empty market.
    pub empty_market: u64,
    /// Operations that failed (Redis errors, lost leases, broken invariants).
    pub errors: u64,
    /// The first such failure.
    pub first_error: Option<String>,
    /// Waits per purchase call.
    pub wait: WaitStats,
    /// (listed + bought) per second.
    pub ops_per_sec: f64,
    /// Mean `PING` round trip before the row, in microseconds.
    pub rtt_us: f64,
    /// Locked modes: mean time a purchase spent holding its lock, in milliseconds.
    pub held_ms: Option<f64>,
    /// The invariant checks after the row.
    pub checks: CheckReport,
}

impl RowResult {
    /// True when the row ran without errors and every invariant held.
    pub fn passed(&self) -> bool {
        self.errors == 0 && self.checks.passed()
    }
}

/// Runs one row against the Redis at `url`, with every key under `prefix` (which must not be
/// in use), and deletes the row's keys afterwards.
pub async fn run_row(
    url: &str,
    prefix: &str,
    config: &RowConfig,
    stop: &Stop,
) -> Result<RowResult, MarketError> {
    config.validate()?;
    let client = redis::Client::open(url)?;
    // Seeding, checking and deleting a large marketplace can take seconds.
    let mut admin = connect(&client, ADMIN_TIMEOUT).await?;
    let keys = Keys::new(prefix);
    let rtt_us = measure_rtt(&mut admin).await?;
    let outcome = seed_and_run(url, &client, &mut admin, &keys, config, stop).await;
    let cleanup = delete_all(&mut admin, &keys).await;
    let mut result = match (outcome, cleanup) {
        (Ok(result), Ok(_)) => result,
        (Err(err), Ok(_)) | (Ok(_), Err(err)) => return Err(err),
        (Err(err), Err(cleanup)) => {
            return Err(MarketError::Data(format!(
                "{err}; then deleting the row's keys under {prefix:?} failed too: {cleanup}"
            )))
        }
    };
    result.rtt_us = rtt_us;
    Ok(result)
}

async fn seed_and_run(
    url: &str,
    client: &redis::Client,
    admin: &mut MultiplexedConnection,
    keys: &Keys,
    config: &RowConfig,
    stop: &Stop,
) -> Result<RowResult, MarketError> {
    seed(admin, keys, &config.seed).await?;
    let ledger = Arc::new(Ledger::new(&config.seed));
    let clock = Arc::new(BodyClock::default());
    let new_locker = || -> Result<Option<Locker>, MarketError> {
        Ok(match config.mode {
            Mode::Watch => None,
            Mode::Market | Mode::Item => Some(
                Locker::builder()
                    .url(url)
                    .prefix(keys.lock_prefix())
                    .app_name("marketplace")
                    .fencing(config.fenced)
                    .build()?,
            ),
        })
    };
    let shared_locker = new_locker()?;
    // Connect everything first, so that all tasks start together.
    let mut drivers = Vec::new();
    for _ in 0..config.listers + config.buyers {
        let conn = connect(client, TASK_TIMEOUT).await?;
        let locker = if config.locker_per_task {
            new_locker()?
        } else {
            shared_locker.clone()
        };
        let driver = match locker {
            Some(locker) => Driver::Locked {
                market: {
                    let market = LockedMarket::new(conn.clone(), keys.clone(), locker)
                        .with_body_clock(Arc::clone(&clock));
                    if config.fenced {
                        market.with_fencing()?
                    } else {
                        market
                    }
                },
                per_item: config.mode == Mode::Item,
            },
            None => Driver::Watch(WatchMarket::new(conn.clone(), keys.clone())),
        };
        drivers.push((conn, driver));
    }
    let started = Instant::now();
    let end = started + config.duration;
    let mut tasks = Vec::new();
    for (index, (conn, driver)) in drivers.into_iter().enumerate() {
        let task = Task {
            conn,
            driver,
            keys: keys.clone(),
            seed: config.seed,
            max_price: config.max_price,
            ledger: Arc::clone(&ledger),
            stop: stop.clone(),
            end,
            rng: fastrand::Rng::new(),
            stats: TaskStats::default(),
        };
        tasks.push(if index < config.listers {
            tokio::spawn(task.run_lister())
        } else {
            let buyer = (index - config.listers) as u64;
            tokio::spawn(task.run_buyer(buyer, config.buyers as u64))
        });
    }
    let mut total = TaskStats::default();
    for task in tasks {
        match task.await {
            Ok(stats) => total.merge(stats),
            Err(err) => total.fail(format!("a simulation task failed: {err}")),
        }
    }
    // Until the last task finished its last operation.
    let seconds = started.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
    let checks = verify(admin, keys, &config.seed, &ledger).await?;
    let wait = WaitStats::from_micros(&mut total.waits_us);
    Ok(RowResult {
        mode: config.mode,
        listers: config.listers,
        buyers: config.buyers,
        seconds,
        listed: total.listed,
        bought: total.bought,
        purchases: total.purchases,
        purchase_retries: total.purchase_retries,
        list_retries: total.list_retries,
        not_listed: total.not_listed,
        insufficient_funds: total.insufficient_funds,
        gave_up: total.gave_up,
        lock_timeouts: total.lock_timeouts,
        empty_picks: total.empty_picks,
        empty_market: total.empty_market,
        errors: total.errors,
        first_error: total.first_error,
        wait,
        ops_per_sec: (total.listed + total.bought) as f64 / seconds,
        rtt_us: 0.0,
        held_ms: shared_locker
            .is_some()
            .then(|| clock.mean().map(|d| d.as_secs_f64() * 1000.0))
            .flatten(),
        checks,
    })
}

/// Response deadline of the connection that seeds, checks and deletes a row's data.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Response deadline of the listers' and buyers' connections. Generous: a command that
/// times out leaves its effect unknown, which the checks would then (rightly) flag, and a
/// loaded 2-core machine can stall a process for more than redis-rs' default 500 ms.
const TASK_TIMEOUT: Duration = Duration::from_secs(10);

async fn connect(
    client: &redis::Client,
    timeout: Duration,
) -> Result<MultiplexedConnection, MarketError> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Mean round trip of a `PING`, in microseconds.
async fn measure_rtt(conn: &mut MultiplexedConnection) -> Result<f64, MarketError> {
    const PINGS: u32 = 200;
    let started = Instant::now();
    for _ in 0..PINGS {
        redis::cmd("PING").query_async::<()>(conn).await?;
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / f64::from(PINGS))
}

/// How a task lists and buys.
enum Driver {
    Watch(WatchMarket),
    Locked {
        market: LockedMarket,
        per_item: bool,
    },
}

impl Driver {
    async fn list(
        &mut self,
        item_id: u64,
        seller_id: u64,
        price: i64,
    ) -> Result<Tried<Listing>, MarketError> {
        match self {
            Driver::Watch(market) => market.list_item(item_id, seller_id, price).await,
            Driver::Locked {
                market,
                per_item: false,
            } => locked::list_item_market_lock(market, item_id, seller_id, price)
                .await
                .map(Tried::first),
            Driver::Locked {
                market,
                per_item: true,
            } => locked::list_item_item_lock(market, item_id, seller_id, price)
                .await
                .map(Tried::first),
        }
    }

    async fn purchase(
        &mut self,
        buyer_id: u64,
        item_id: u64,
        seller_id: u64,
        price: i64,
    ) -> Result<Tried<Purchase>, MarketError> {
        match self {
            Driver::Watch(market) => {
                market
                    .purchase_item(buyer_id, item_id, seller_id, price)
                    .await
            }
            Driver::Locked {
                market,
                per_item: false,
            } => locked::purchase_item_market_lock(market, buyer_id, item_id, seller_id, price)
                .await
                .map(Tried::first),
            Driver::Locked {
                market,
                per_item: true,
            } => locked::purchase_item_item_lock(market, buyer_id, item_id, seller_id, price)
                .await
                .map(Tried::first),
        }
    }
}

/// Counters of one task (and, merged, of a row).
#[derive(Debug, Default)]
struct TaskStats {
    listed: u64,
    list_retries: u64,
    bought: u64,
    purchases: u64,
    purchase_retries: u64,
    not_listed: u64,
    insufficient_funds: u64,
    gave_up: u64,
    lock_timeouts: u64,
    empty_picks: u64,
    empty_market: u64,
    errors: u64,
    first_error: Option<String>,
    waits_us: Vec<u32>,
}

impl TaskStats {
    fn merge(&mut self, other: TaskStats) {
        self.listed += other.listed;
        self.list_retries += other.list_retries;
        self.bought += other.bought;
        self.purchases += other.purchases;
        self.purchase_retries += other.purchase_retries;
        self.not_listed += other.not_listed;
        self.insufficient_funds += other.insufficient_funds;
        self.gave_up += other.gave_up;
        self.lock_timeouts += other.lock_timeouts;
        self.empty_picks += other.empty_picks;
        self.empty_market += other.empty_market;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.waits_us.extend(other.waits_us);
    }

    fn fail(&mut self, message: String) {
        self.errors += 1;
        self.first_error.get_or_insert(message);
    }

    /// Counts a failed operation; true if the task should go on (lock contention).
    fn failed(&mut self, err: &MarketError) -> bool {
        if err.is_lock_contention() {
            self.lock_timeouts += 1;
            return true;
        }
        self.fail(err.to_string());
        false
    }
}

/// One lister or buyer.
struct Task {
    /// For picking items; the driver has its own clone.
    conn: MultiplexedConnection,
    driver: Driver,
    keys: Keys,
    seed: Seed,
    max_price: i64,
    ledger: Arc<Ledger>,
    stop: Stop,
    end: Instant,
    rng: fastrand::Rng,
    stats: TaskStats,
}

impl Task {
    fn running(&self) -> bool {
        !self.stop.is_stopped() && Instant::now() < self.end
    }

    async fn run_lister(mut self) -> TaskStats {
        while self.running() {
            match self.list_one().await {
                Ok(()) => {}
                Err(err) if self.stats.failed(&err) => {}
                Err(_) => break,
            }
        }
        self.stats
    }

    async fn list_one(&mut self) -> Result<(), MarketError> {
        let seller = self.rng.u64(0..self.seed.users);
        let item: Option<u64> = redis::cmd("SRANDMEMBER")
            .arg(self.keys.inventory(seller))
            .query_async(&mut self.conn)
            .await?;
        let Some(item) = item else {
            self.stats.empty_picks += 1;
            return Ok(());
        };
        let price = self.rng.i64(1..=self.max_price);
        let tried = self.driver.list(item, seller, price).await?;
        self.stats.list_retries += u64::from(tried.retries);
        match tried.outcome {
            Listing::Listed => {
                self.stats.listed += 1;
                self.ledger.record_listing(item, seller);
            }
            Listing::NotInInventory => {}
            Listing::GaveUp => self.stats.gave_up += 1,
        }
        Ok(())
    }

    /// Buyer `index` of `buyers`, acting for users `index, index + buyers, ..`.
    async fn run_buyer(mut self, index: u64, buyers: u64) -> TaskStats {
        let own_users = (self.seed.users - index).div_ceil(buyers);
        while self.running() {
            let buyer = index + buyers * self.rng.u64(0..own_users);
            match self.buy_one(buyer).await {
                Ok(()) => {}
                Err(err) if self.stats.failed(&err) => {}
                Err(_) => break,
            }
        }
        self.stats
    }

    async fn buy_one(&mut self, buyer: u64) -> Result<(), MarketError> {
        let picked: Vec<String> = redis::cmd("ZRANDMEMBER")
            .arg(self.keys.market())
            .arg(1)
            .arg("WITHSCORES")
            .query_async(&mut self.conn)
            .await?;
        let [member, score] = picked.as_slice() else {
            self.stats.empty_market += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            return Ok(());
        };
        let (Some((item, seller)), Ok(price)) = (parse_member(member), score.parse::<f64>()) else {
            return Err(MarketError::Data(format!(
                "market member {member:?} with score {score:?}"
            )));
        };
        let price = price as i64;
        let started = Instant::now();
        let result = self.driver.purchase(buyer, item, seller, price).await;
        let waited = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
        self.stats.waits_us.push(waited);
        self.stats.purchases += 1;
        let tried = result?;
        self.stats.purchase_retries += u64::from(tried.retries);
        match tried.outcome {
            Purchase::Bought => {
                self.stats.bought += 1;
                self.ledger.record_purchase(buyer, item, seller, price);
            }
            Purchase::NotListed => self.stats.not_listed += 1,
            Purchase::InsufficientFunds => self.stats.insufficient_funds += 1,
            Purchase::GaveUp => self.stats.gave_up += 1,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statistics_use_nearest_rank() {
        let mut waits: Vec<u32> = (1..=100).rev().map(|ms| ms * 1000).collect();
        let stats = WaitStats::from_micros(&mut waits);
        assert_eq!(stats.count, 100);
        assert_eq!(stats.mean_ms, 50.5);
        assert_eq!(stats.p50_ms, 50.0);
        assert_eq!(stats.p99_ms, 99.0);
        assert_eq!(stats.max_ms, 100.0);
        assert_eq!(WaitStats::from_micros(&mut []), WaitStats::default());
        let one = WaitStats::from_micros(&mut [1500]);
        assert_eq!((one.p50_ms, one.p99_ms), (1.5, 1.5));
    }

    #[test]
    fn labels_follow_the_book() {
        let row = RowConfig {
            mode: Mode::Watch,
            listers: 5,
            buyers: 1,
            duration: Duration::from_secs(1),
            seed: Seed {
                users: 10,
                items_per_user: 1,
                funds: 1,
            },
            max_price: 10,
            locker_per_task: false,
            fenced: false,
        };
        assert_eq!(row.label(), "5 listers, 1 buyer, no lock");
        assert!(row.validate().is_ok());
    }

    #[test]
    fn impossible_rows_are_refused() {
        let good = RowConfig {
            mode: Mode::Item,
            listers: 1,
            buyers: 5,
            duration: Duration::from_secs(1),
            seed: Seed {
                users: 5,
                items_per_user: 1,
                funds: 1,
            },
            max_price: 10,
            locker_per_task: false,
            fenced: false,
        };
        assert!(good.validate().is_ok());
        let cases = [
            RowConfig {
                listers: 0,
                buyers: 0,
                ..good.clone()
            },
            RowConfig {
                seed: Seed {
                    users: 4,
                    ..good.seed
                },
                ..good.clone()
            },
            RowConfig {
                seed: Seed {
                    items_per_user: 0,
                    ..good.seed
                },
                ..good.clone()
            },
            RowConfig {
                max_price: 0,
                ..good.clone()
            },
            RowConfig {
                duration: Duration::ZERO,
                ..good.clone()
            },
        ];
        for case in cases {
            assert!(
                matches!(case.validate(), Err(MarketError::Config(_))),
                "{case:?}"
            );
        }
    }
}
