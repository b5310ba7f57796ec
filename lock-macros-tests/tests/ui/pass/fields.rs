// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use lock_core::{redis_locked, LockError};

pub struct Customer {
    pub id: u64,
}

pub struct Order {
    pub customer: Customer,
    pub lines: (u32, &'static str),
}

pub struct Shop {
    pub id: String,
}

#[redis_locked(key = "order:{order.customer.id}:{order.lines.1}")]
async fn nested_fields(order: &Order) -> Result<u32, LockError> {
    Ok(order.lines.0)
}

impl Shop {
    #[redis_locked(key = "shop:{self.id}:{order.customer.id}")]
    async fn place(&self, order: Order) -> Result<u64, LockError> {
        Ok(order.customer.id)
    }
}

fn main() {
    let order = Order {
        customer: Customer { id: 1 },
        lines: (2, "x"),
    };
    drop(nested_fields(&order));
    drop(Shop { id: "s".into() }.place(order));
}
