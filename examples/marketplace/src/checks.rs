//! The invariants every run must keep, checked against what is in Redis at the end.
//!
//! While a row runs, every task writes what it did into a [`Ledger`] (which item it listed
//! for whom, which purchase it completed at what price). Afterwards [`verify`] reads the
//! whole marketplace back and checks:
//!
//! 1. total funds are conserved;
//! 2. no user's funds are negative;
//! 3. every user's funds equal the seed plus what the ledger says they earned minus what they
//!    spent (so no purchase happened that nobody reported, and none was applied twice);
//! 4. every item is in exactly one place: one inventory, or the market once;
//! 5. no listing was sold twice: per item, purchases never exceed listings, and the item is
//!    on the market exactly when it was listed once more than it was bought;
//! 6. bought items changed owner: every inventory holds its seed, plus what its user bought,
//!    minus what was listed from it; the market holds listed minus bought.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use redis::aio::MultiplexedConnection;
use serde::Serialize;

use crate::model::{parse_member, Keys, Seed};
use crate::MarketError;

/// At most this many violations are described; the rest are only counted.
const MAX_DESCRIBED: usize = 20;
/// Items (and users) read per pipeline or per `ZRANGE`.
const READ_BATCH_ITEMS: u64 = 50_000;

/// What the tasks of one run did, as they saw it.
#[derive(Debug)]
pub struct Ledger {
    listed: Vec<AtomicU32>,
    bought: Vec<AtomicU32>,
    listed_from: Vec<AtomicU64>,
    bought_by: Vec<AtomicU64>,
    earned: Vec<AtomicI64>,
    spent: Vec<AtomicI64>,
}

impl Ledger {
    /// An empty ledger for the items and users of `seed`.
    pub fn new(seed: &Seed) -> Ledger {
        fn zeroed<T: Default>(n: u64) -> Vec<T> {
            (0..n).map(|_| T::default()).collect()
        }
        Ledger {
            listed: zeroed(seed.items()),
            bought: zeroed(seed.items()),
            listed_from: zeroed(seed.users),
            bought_by: zeroed(seed.users),
            earned: zeroed(seed.users),
            spent: zeroed(seed.users),
        }
    }

    /// Records a completed listing. Ids outside the seed are ignored (and then show up as
    /// violations in [`verify`]).
    pub fn record_listing(&self, item_id: u64, seller_id: u64) {
        if let Some(count) = slot(&self.listed, item_id) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(count) = slot(&self.listed_from, seller_id) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a completed purchase.
    pub fn record_purchase(&self, buyer_id: u64, item_id: u64, seller_id: u64, price: i64) {
        if let Some(count) = slot(&self.bought, item_id) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(count) = slot(&self.bought_by, buyer_id) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(sum) = slot(&self.earned, seller_id) {
            sum.fetch_add(price, Ordering::Relaxed);
        }
        if let Some(sum) = slot(&self.spent, buyer_id) {
            sum.fetch_add(price, Ordering::Relaxed);
        }
    }

    fn listed(&self, item: usize) -> u64 {
        self.listed
            .get(item)
            .map_or(0, |c| c.load(Ordering::Relaxed).into())
    }

    fn bought(&self, item: usize) -> u64 {
        self.bought
            .get(item)
            .map_or(0, |c| c.load(Ordering::Relaxed).into())
    }
}

/// The slot of `id`, if it is one of the seed's ids.
fn slot<T>(slots: &[T], id: u64) -> Option<&T> {
    usize::try_from(id).ok().and_then(|i| slots.get(i))
}

/// The marketplace as read back from Redis.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// `funds` of each user (`None`: missing or unreadable).
    pub funds: Vec<Option<i64>>,
    /// Each user's inventory.
    pub inventories: Vec<Vec<u64>>,
    /// The market's members and scores.
    pub market: Vec<(String, f64)>,
}

impl Snapshot {
    /// Reads every user, inventory and the market.
    pub async fn read(
        conn: &mut MultiplexedConnection,
        keys: &Keys,
        seed: &Seed,
    ) -> Result<Snapshot, MarketError> {
        let mut snapshot = Snapshot::default();
        let mut first = 0;
        while first < seed.users {
            let users_per_batch = (READ_BATCH_ITEMS / seed.items_per_user.max(1)).clamp(1, 1000);
            let last = (first + users_per_batch).min(seed.users);
            let mut pipe = redis::pipe();
            for user in first..last {
                pipe.hget(keys.user(user), "funds")
                    .smembers(keys.inventory(user));
            }
            let replies: Vec<redis::Value> = pipe.query_async(conn).await?;
            for pair in replies.chunks(2) {
                let [funds, inventory] = pair else {
                    return Err(MarketError::Data("short reply while reading users".into()));
                };
                snapshot.funds.push(
                    redis::from_redis_value_ref::<Option<i64>>(funds)
                        .ok()
                        .flatten(),
                );
                snapshot.inventories.push(
                    redis::from_redis_value_ref::<Vec<u64>>(inventory).map_err(|err| {
                        MarketError::Data(format!("an inventory holds a non-item: {err}"))
                    })?,
                );
            }
            first = last;
        }
        // In slices by rank: nothing writes the market while a finished row is checked.
        let mut start = 0u64;
        loop {
            let slice: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(keys.market())
                .arg(start)
                .arg(start + READ_BATCH_ITEMS - 1)
                .arg("WITHSCORES")
                .query_async(conn)
                .await?;
            let len = slice.len() as u64;
            snapshot.market.extend(slice);
            if len < READ_BATCH_ITEMS {
                return Ok(snapshot);
            }
            start += READ_BATCH_ITEMS;
        }
    }
}

/// The result of [`verify`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CheckReport {
    /// Number of broken invariants found.
    pub violations: u64,
    /// The first few, described.
    pub details: Vec<String>,
    /// Items on the market at the end.
    pub items_on_market: u64,
    /// Items checked.
    pub items: u64,
    /// Users checked.
    pub users: u64,
}

impl CheckReport {
    /// True when every invariant held.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }

    fn violation(&mut self, detail: impl FnOnce() -> String) {
        self.violations += 1;
        if self.details.len() < MAX_DESCRIBED {
            self.details.push(detail());
        }
    }
}

/// Reads the marketplace back and checks every invariant against the seed and the ledger.
pub async fn verify(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    seed: &Seed,
    ledger: &Ledger,
) -> Result<CheckReport, MarketError> {
    let snapshot = Snapshot::read(conn, keys, seed).await?;
    Ok(check(seed, ledger, &snapshot))
}

/// Checks `snapshot` against the seed and the ledger (the pure half of [`verify`]).
pub fn check(seed: &Seed, ledger: &Ledger, snapshot: &Snapshot) -> CheckReport {
    let mut report = CheckReport {
        items: seed.items(),
        users: seed.users,
        items_on_market: snapshot.market.len() as u64,
        ..CheckReport::default()
    };
    check_funds(seed, ledger, snapshot, &mut report);
    check_items(seed, ledger, snapshot, &mut report);
    report
}

fn check_funds(seed: &Seed, ledger: &Ledger, snapshot: &Snapshot, report: &mut CheckReport) {
    let mut total: i128 = 0;
    for user in 0..seed.users {
        let Some(funds) = snapshot.funds.get(user as usize).copied().flatten() else {
            report.violation(|| format!("user {user} has no funds"));
            continue;
        };
        total += i128::from(funds);
        if funds < 0 {
            report.violation(|| format!("user {user} has negative funds ({funds})"));
        }
        let i = user as usize;
        let expected = i128::from(seed.funds)
            + i128::from(
                ledger
                    .earned
                    .get(i)
                    .map_or(0, |c| c.load(Ordering::Relaxed)),
            )
            - i128::from(ledger.spent.get(i).map_or(0, |c| c.load(Ordering::Relaxed)));
        if i128::from(funds) != expected {
            report.violation(|| {
                format!("user {user} has funds {funds}, the completed purchases say {expected}")
            });
        }
    }
    if total != seed.total_funds() {
        report.violation(|| {
            format!(
                "total funds are {total}, started with {}",
                seed.total_funds()
            )
        });
    }
}

fn check_items(seed: &Seed, ledger: &Ledger, snapshot: &Snapshot, report: &mut CheckReport) {
    let items = seed.items() as usize;
    // How many places hold each item: inventories and market entries.
    let mut places = vec![0u32; items];
    let mut on_market = vec![false; items];
    for (user, inventory) in snapshot.inventories.iter().enumerate() {
        for &item in inventory {
            match places.get_mut(item as usize) {
                Some(count) => *count += 1,
                None => report.violation(|| format!("inventory {user} holds unknown item {item}")),
            }
        }
        let held = inventory.len() as u64;
        // In i128: a broken run could list more than a user ever held.
        let expected = i128::from(seed.items_per_user) + i128::from(load(&ledger.bought_by, user))
            - i128::from(load(&ledger.listed_from, user));
        if i128::from(held) != expected {
            report.violation(|| {
                format!("user {user} holds {held} items; seed + bought - listed = {expected}")
            });
        }
    }
    for (member, price) in &snapshot.market {
        let Some((item, seller)) = parse_member(member) else {
            report.violation(|| format!("market holds malformed member {member:?}"));
            continue;
        };
        if seller >= seed.users {
            report.violation(|| format!("market member {member:?} names unknown seller"));
        }
        if price.fract() != 0.0 || *price < 0.0 {
            report.violation(|| format!("market member {member:?} has odd price {price}"));
        }
        match places.get_mut(item as usize) {
            Some(count) => {
                *count += 1;
                on_market[item as usize] = true;
            }
            None => report.violation(|| format!("market holds unknown item {item}")),
        }
    }
    let mut listed_total = 0u64;
    let mut bought_total = 0u64;
    for item in 0..items {
        let count = places[item];
        if count != 1 {
            report.violation(|| format!("item {item} is in {count} places"));
        }
        let listed = ledger.listed(item);
        let bought = ledger.bought(item);
        listed_total += listed;
        bought_total += bought;
        if bought > listed {
            report
                .violation(|| format!("item {item} was bought {bought} times but listed {listed}"));
        } else if (listed - bought == 1) != on_market[item] || listed - bought > 1 {
            report.violation(|| {
                format!(
                    "item {item}: listed {listed}, bought {bought}, on the market: {}",
                    on_market[item]
                )
            });
        }
    }
    let market_len = snapshot.market.len() as u64;
    if listed_total.checked_sub(bought_total) != Some(market_len) {
        report.violation(|| {
            format!(
                "market holds {market_len} items; listed {listed_total} - bought {bought_total}"
            )
        });
    }
}

fn load(counters: &[AtomicU64], index: usize) -> u64 {
    counters.get(index).map_or(0, |c| c.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: Seed = Seed {
        users: 2,
        items_per_user: 2,
        funds: 100,
    };

    fn start() -> Snapshot {
        Snapshot {
            funds: vec![Some(100), Some(100)],
            inventories: vec![vec![0, 1], vec![2, 3]],
            market: vec![],
        }
    }

    #[test]
    fn the_seed_passes() {
        let report = check(&SEED, &Ledger::new(&SEED), &start());
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn a_listing_and_a_purchase_pass_when_reported() {
        let ledger = Ledger::new(&SEED);
        // User 0 lists item 1 at 30, user 1 buys it; user 0 lists item 0 at 5.
        ledger.record_listing(1, 0);
        ledger.record_purchase(1, 1, 0, 30);
        ledger.record_listing(0, 0);
        let snapshot = Snapshot {
            funds: vec![Some(130), Some(70)],
            inventories: vec![vec![], vec![1, 2, 3]],
            market: vec![("0.0".into(), 5.0)],
        };
        let report = check(&SEED, &ledger, &snapshot);
        assert!(report.passed(), "{report:?}");
        assert_eq!(report.items_on_market, 1);
    }

    #[test]
    fn a_double_sale_is_caught() {
        let ledger = Ledger::new(&SEED);
        ledger.record_listing(1, 0);
        ledger.record_purchase(1, 1, 0, 30);
        ledger.record_purchase(0, 1, 0, 30);
        // Both buyers paid and got the item.
        let snapshot = Snapshot {
            funds: vec![Some(130 + 30 - 30), Some(70)],
            inventories: vec![vec![0, 1], vec![1, 2, 3]],
            market: vec![],
        };
        let report = check(&SEED, &ledger, &snapshot);
        assert!(!report.passed());
        let text = report.details.join("\n");
        assert!(text.contains("item 1 is in 2 places"), "{text}");
        assert!(text.contains("bought 2 times but listed 1"), "{text}");
    }

    #[test]
    fn lost_and_created_money_are_caught() {
        let mut snapshot = start();
        snapshot.funds = vec![Some(150), Some(-10)];
        let report = check(&SEED, &Ledger::new(&SEED), &snapshot);
        let text = report.details.join("\n");
        assert!(text.contains("negative funds"), "{text}");
        assert!(text.contains("total funds are 140"), "{text}");
    }

    #[test]
    fn an_unreported_purchase_is_caught() {
        let ledger = Ledger::new(&SEED);
        ledger.record_listing(1, 0);
        // Redis shows the purchase, the ledger does not.
        let snapshot = Snapshot {
            funds: vec![Some(130), Some(70)],
            inventories: vec![vec![0], vec![1, 2, 3]],
            market: vec![],
        };
        let report = check(&SEED, &ledger, &snapshot);
        assert!(!report.passed());
        let text = report.details.join("\n");
        assert!(text.contains("the completed purchases say 100"), "{text}");
        assert!(text.contains("user 1 holds 3 items"), "{text}");
    }

    #[test]
    fn missing_and_malformed_entries_are_caught() {
        let snapshot = Snapshot {
            funds: vec![Some(100), None],
            inventories: vec![vec![0, 1], vec![2]],
            market: vec![("junk".into(), 1.0), ("9.0".into(), 1.0)],
        };
        let report = check(&SEED, &Ledger::new(&SEED), &snapshot);
        let text = report.details.join("\n");
        assert!(text.contains("user 1 has no funds"), "{text}");
        assert!(text.contains("malformed member"), "{text}");
        assert!(text.contains("unknown item 9"), "{text}");
        assert!(text.contains("item 3 is in 0 places"), "{text}");
    }
}
