use std::error::Error;

use lock_core::redis_locked;

#[redis_locked(key = "market:{item_id}")]
async fn purchase(item_id: u8) -> Box<dyn Error> {
    format!("sold out: {item_id}").into()
}

fn main() {}
