use lock_core::redis_locked;

#[redis_locked(key = "market")]
struct Market;

fn main() {}
