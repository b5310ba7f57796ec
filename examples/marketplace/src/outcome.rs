//! What a listing or a purchase did.

use serde::Serialize;

/// The result of `purchase_item`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Purchase {
    /// Funds went to the seller, the item into the buyer's inventory and off the market.
    Bought,
    /// The item is no longer listed by that seller at that price (sold, or relisted).
    NotListed,
    /// The buyer's funds are below the price.
    InsufficientFunds,
    /// Optimistic mode only: every attempt lost its `WATCH` until the time limit ran out.
    GaveUp,
}

/// The result of `list_item`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Listing {
    /// The item left the seller's inventory and is on the market.
    Listed,
    /// The item is not in the seller's inventory (already listed, or sold).
    NotInInventory,
    /// Optimistic mode only: every attempt lost its `WATCH` until the time limit ran out.
    GaveUp,
}

/// An outcome, with the number of optimistic transactions that were aborted by a
/// concurrent write and retried on the way (always 0 under a lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried<T> {
    /// What happened in the end.
    pub outcome: T,
    /// Aborted `EXEC`s before it.
    pub retries: u32,
}

impl<T> Tried<T> {
    /// An outcome reached on the first try.
    pub fn first(outcome: T) -> Tried<T> {
        Tried {
            outcome,
            retries: 0,
        }
    }
}
