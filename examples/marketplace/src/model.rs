//! The book's data model, its keys, and how a run seeds and removes it.
//!
//! - `market:`: a sorted set of `<itemid>.<sellerid>` members scored by price;
//! - `users:<id>`: a hash with `name` and `funds`;
//! - `inventory:<id>`: a set of item ids.
//!
//! Every key carries a prefix ([`Keys`]), so that each simulation row works on its own data
//! and never touches anyone else's keys.

use redis::aio::MultiplexedConnection;

use crate::MarketError;

/// The names of every key of one marketplace, under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (for example `mp:1a2b:3:`; empty for the book's bare names).
    pub fn new(prefix: impl Into<String>) -> Keys {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// The resource whose guard fences the writes made under lock `lock` (fenced mode): its
    /// key is never written, only its guard beside it (`lock_core::fenced::RedisStore`),
    /// which keeps the prefix (the lock's name is the key's hash tag).
    pub fn guarded(&self, lock: &str) -> String {
        format!("{}guarded:{{{lock}}}", self.prefix)
    }

    /// The prefix every key of this marketplace starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The market: a sorted set of `<itemid>.<sellerid>` scored by price.
    pub fn market(&self) -> String {
        format!("{}market:", self.prefix)
    }

    /// A user's hash (`name`, `funds`).
    pub fn user(&self, user_id: u64) -> String {
        format!("{}users:{user_id}", self.prefix)
    }

    /// A user's inventory: a set of item ids.
    pub fn inventory(&self, user_id: u64) -> String {
        format!("{}inventory:{user_id}", self.prefix)
    }

    /// The prefix to give a [`lock_core::Locker`] so that this marketplace's locks live
    /// beside its data (and are removed with it).
    pub fn lock_prefix(&self) -> String {
        format!("{}lock:", self.prefix)
    }

    /// A `SCAN MATCH` pattern covering every key of this marketplace, locks included.
    pub fn pattern(&self) -> String {
        format!("{}*", escape_glob(&self.prefix))
    }
}

/// The market member of an item listed by a seller: `<itemid>.<sellerid>`.
pub fn item_member(item_id: u64, seller_id: u64) -> String {
    format!("{item_id}.{seller_id}")
}

/// Reads `<itemid>.<sellerid>` back; `None` for anything else.
pub fn parse_member(member: &str) -> Option<(u64, u64)> {
    let (item, seller) = member.split_once('.')?;
    Some((item.parse().ok()?, seller.parse().ok()?))
}

/// Escapes the characters `SCAN MATCH` treats as glob syntax.
fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The starting state of a marketplace: `users` users, each with `funds` and
/// `items_per_user` items in the inventory. User `u` starts with items
/// `u * items_per_user .. (u + 1) * items_per_user`, so item ids run from 0 to
/// [`Seed::items`] − 1 and each belongs to exactly one user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Seed {
    /// Number of users.
    pub users: u64,
    /// Items each user starts with.
    pub items_per_user: u64,
    /// Funds each user starts with.
    pub funds: i64,
}

impl Seed {
    /// Total number of items.
    pub fn items(&self) -> u64 {
        self.users.saturating_mul(self.items_per_user)
    }

    /// Total funds, which every purchase must conserve.
    pub fn total_funds(&self) -> i128 {
        i128::from(self.funds) * i128::from(self.users)
    }

    /// The user who starts with `item_id`.
    pub fn initial_owner(&self, item_id: u64) -> u64 {
        item_id / self.items_per_user.max(1)
    }
}

/// Items written per pipeline while seeding (at least one user's worth).
const SEED_BATCH_ITEMS: u64 = 50_000;

/// Writes the starting state. The keys must not exist yet (each row has a fresh prefix).
pub async fn seed(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    seed: &Seed,
) -> Result<(), MarketError> {
    let mut first = 0;
    while first < seed.users {
        let users_per_batch = (SEED_BATCH_ITEMS / seed.items_per_user.max(1)).clamp(1, 1000);
        let last = (first + users_per_batch).min(seed.users);
        let mut pipe = redis::pipe();
        for user in first..last {
            pipe.hset_multiple(
                keys.user(user),
                &[
                    ("name", format!("user{user}")),
                    ("funds", seed.funds.to_string()),
                ],
            )
            .ignore();
            let items: Vec<u64> =
                (user * seed.items_per_user..(user + 1) * seed.items_per_user).collect();
            if !items.is_empty() {
                pipe.sadd(keys.inventory(user), items).ignore();
            }
        }
        pipe.query_async::<()>(conn).await?;
        first = last;
    }
    Ok(())
}

/// Deletes every key under the marketplace's prefix with `SCAN` + `UNLINK`, and returns how
/// many went. Touches nothing outside the prefix: safe on a server shared with other data.
pub async fn delete_all(conn: &mut MultiplexedConnection, keys: &Keys) -> Result<u64, MarketError> {
    let pattern = keys.pattern();
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !found.is_empty() {
            let removed: u64 = redis::cmd("UNLINK").arg(&found).query_async(conn).await?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_book_under_a_prefix() {
        let keys = Keys::new("mp:x:1:");
        assert_eq!(keys.market(), "mp:x:1:market:");
        assert_eq!(keys.user(7), "mp:x:1:users:7");
        assert_eq!(keys.inventory(7), "mp:x:1:inventory:7");
        assert_eq!(keys.lock_prefix(), "mp:x:1:lock:");
        assert_eq!(keys.pattern(), "mp:x:1:*");
        assert_eq!(Keys::new("").market(), "market:");
    }

    #[test]
    fn glob_characters_in_a_prefix_are_escaped() {
        assert_eq!(Keys::new("a*[b]?\\:").pattern(), "a\\*\\[b\\]\\?\\\\:*");
    }

    #[test]
    fn members_round_trip() {
        assert_eq!(item_member(17, 4), "17.4");
        assert_eq!(parse_member("17.4"), Some((17, 4)));
        for bad in ["", "17", "17.", ".4", "a.4", "17.4.1", "-1.4"] {
            assert_eq!(parse_member(bad), None, "{bad}");
        }
    }

    #[test]
    fn seed_gives_each_item_one_owner() {
        let seed = Seed {
            users: 3,
            items_per_user: 4,
            funds: 100,
        };
        assert_eq!(seed.items(), 12);
        assert_eq!(seed.total_funds(), 300);
        assert_eq!(seed.initial_owner(0), 0);
        assert_eq!(seed.initial_owner(3), 0);
        assert_eq!(seed.initial_owner(4), 1);
        assert_eq!(seed.initial_owner(11), 2);
    }
}
