//! The commands every variant sends: the reads that check a listing or a purchase, and the
//! `MULTI`/`EXEC` transactions that apply them. Variants differ only in what protects the
//! gap between the two (a `WATCH`, the market lock, or the item's lock).

use redis::Pipeline;

use crate::model::{item_member, Keys};
use crate::MarketError;

/// The arguments of one purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PurchaseArgs {
    pub buyer_id: u64,
    pub item_id: u64,
    pub seller_id: u64,
    pub price: i64,
}

/// What the purchase check read: the item's price on the market (if listed) and the
/// buyer's funds.
pub(crate) type PurchaseReads = (Option<f64>, Option<i64>);

/// `ZSCORE market: <item>.<seller>` and `HGET users:<buyer> funds`, in one pipeline.
pub(crate) fn add_purchase_reads(pipe: &mut Pipeline, keys: &Keys, args: &PurchaseArgs) {
    pipe.zscore(keys.market(), item_member(args.item_id, args.seller_id))
        .hget(keys.user(args.buyer_id), "funds");
}

/// Why the purchase cannot go ahead, if it cannot.
pub(crate) fn purchase_refusal(
    reads: PurchaseReads,
    args: &PurchaseArgs,
) -> Result<Option<crate::Purchase>, MarketError> {
    let (listed_at, funds) = reads;
    let Some(listed_at) = listed_at else {
        return Ok(Some(crate::Purchase::NotListed));
    };
    if listed_at != args.price as f64 {
        return Ok(Some(crate::Purchase::NotListed));
    }
    let Some(funds) = funds else {
        return Err(MarketError::Data(format!(
            "buyer {} has no funds field",
            args.buyer_id
        )));
    };
    if funds < args.price {
        return Ok(Some(crate::Purchase::InsufficientFunds));
    }
    Ok(None)
}

/// The transfer, as one `MULTI`/`EXEC`: funds seller-ward, the item into the buyer's
/// inventory and off the market. Replies: seller's funds, buyer's funds, `SADD`, `ZREM`.
pub(crate) fn purchase_transaction(keys: &Keys, args: &PurchaseArgs) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .hincr(keys.user(args.seller_id), "funds", args.price)
        .hincr(keys.user(args.buyer_id), "funds", -args.price)
        .sadd(keys.inventory(args.buyer_id), args.item_id)
        .zrem(keys.market(), item_member(args.item_id, args.seller_id));
    pipe
}

/// Replies of [`purchase_transaction`].
pub(crate) type PurchaseReplies = (i64, i64, i64, i64);

/// Checks what the transfer did: it must have removed exactly the listing it paid for, and
/// left the buyer solvent. Anything else means the check and the transfer were not
/// protected (two buyers paid for one listing), which a lock must make impossible.
pub(crate) fn check_purchase_replies(
    replies: PurchaseReplies,
    args: &PurchaseArgs,
) -> Result<(), MarketError> {
    let (_, buyer_funds, _, removed) = replies;
    if removed != 1 {
        return Err(MarketError::Data(format!(
            "item {} of seller {} was paid for but was no longer on the market",
            args.item_id, args.seller_id
        )));
    }
    if buyer_funds < 0 {
        return Err(MarketError::Data(format!(
            "buyer {} went negative ({buyer_funds})",
            args.buyer_id
        )));
    }
    Ok(())
}

/// The arguments of one listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListArgs {
    pub item_id: u64,
    pub seller_id: u64,
    pub price: i64,
}

/// The listing, as one `MULTI`/`EXEC`: onto the market at its price, out of the seller's
/// inventory. Replies: `ZADD`, `SREM`.
pub(crate) fn list_transaction(keys: &Keys, args: &ListArgs) -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .zadd(
            keys.market(),
            item_member(args.item_id, args.seller_id),
            args.price,
        )
        .srem(keys.inventory(args.seller_id), args.item_id);
    pipe
}

/// Checks what the listing did: the item must have left the inventory.
pub(crate) fn check_list_replies(replies: (i64, i64), args: &ListArgs) -> Result<(), MarketError> {
    if replies.1 != 1 {
        return Err(MarketError::Data(format!(
            "item {} was listed but was no longer in seller {}'s inventory",
            args.item_id, args.seller_id
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Purchase;

    const ARGS: PurchaseArgs = PurchaseArgs {
        buyer_id: 1,
        item_id: 10,
        seller_id: 2,
        price: 50,
    };

    #[test]
    fn a_purchase_needs_the_listing_at_its_price_and_the_funds() {
        assert_eq!(
            purchase_refusal((None, Some(100)), &ARGS).unwrap(),
            Some(Purchase::NotListed)
        );
        assert_eq!(
            purchase_refusal((Some(49.0), Some(100)), &ARGS).unwrap(),
            Some(Purchase::NotListed)
        );
        assert_eq!(
            purchase_refusal((Some(50.0), Some(49)), &ARGS).unwrap(),
            Some(Purchase::InsufficientFunds)
        );
        assert_eq!(
            purchase_refusal((Some(50.0), Some(50)), &ARGS).unwrap(),
            None
        );
        assert!(purchase_refusal((Some(50.0), None), &ARGS).is_err());
    }

    #[test]
    fn replies_reveal_a_double_sale() {
        assert!(check_purchase_replies((150, 50, 1, 1), &ARGS).is_ok());
        assert!(check_purchase_replies((150, 50, 1, 0), &ARGS).is_err());
        assert!(check_purchase_replies((150, -1, 1, 1), &ARGS).is_err());
        let list = ListArgs {
            item_id: 10,
            seller_id: 2,
            price: 5,
        };
        assert!(check_list_replies((1, 1), &list).is_ok());
        assert!(check_list_replies((1, 0), &list).is_err());
    }
}
