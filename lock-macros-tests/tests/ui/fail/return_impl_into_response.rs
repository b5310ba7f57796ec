// A web handler written as axum's examples write it: the response type where the whole
// `Result` belongs. (A local trait stands in for axum's: the macro sees only the tokens.)
use lock_core::redis_locked;

pub trait IntoResponse {}
impl IntoResponse for &'static str {}

#[redis_locked(key = "order:{id}")]
async fn pay(id: u64) -> impl IntoResponse {
    "paid"
}

fn main() {}
