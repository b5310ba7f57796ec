use lock_core::redis_locked;

/// An alias the macro cannot see through: it is not a `Result`.
type Res = Option<u8>;

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u8) -> Res {
    Some(item_id)
}

fn main() {}
