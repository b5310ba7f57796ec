// A test target of the workspace (built and linted with it): the lints on the user code
// written here, not on what the attribute generates, are off.
#![allow(missing_debug_implementations)]
use lock_core::{redis_locked, LockError};

/// Shaped like axum's extractors.
pub struct Path<T>(pub T);
pub struct Wrapper(pub u64);
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[redis_locked(key = "path:{id}")]
async fn extractor(Path(id): Path<u64>) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_locked(key = "pair:{a}-{b}")]
async fn tuple((a, b): (u32, u32)) -> Result<u32, LockError> {
    Ok(a + b)
}

#[redis_locked(key = "wrapped:{id}")]
async fn tuple_struct(Wrapper(id): Wrapper) -> Result<u64, LockError> {
    Ok(id)
}

#[redis_locked(key = "point:{x}:{vertical}")]
async fn struct_pattern(Point { x, y: vertical }: Point) -> Result<i32, LockError> {
    Ok(x + vertical)
}

#[redis_locked(key = "nested:{first}:{inner}:{whole.0}")]
async fn nested(
    (Path(first), whole @ Wrapper(inner)): (Path<String>, Wrapper),
    _ignored: u8,
) -> Result<String, LockError> {
    Ok(format!("{first}{inner}{}", whole.0))
}

fn main() {
    drop(extractor(Path(1)));
    drop(tuple((1, 2)));
    drop(tuple_struct(Wrapper(3)));
    drop(struct_pattern(Point { x: 1, y: 2 }));
    drop(nested((Path(String::new()), Wrapper(4)), 0));
}
