use lock_core::{redis_locked, LockError};

pub struct User {
    pub name: String,
}

#[redis_locked(key = "users:{user.name.len()}")]
async fn rename(user: &User) -> Result<(), LockError> {
    let _ = &user.name;
    Ok(())
}

fn main() {}
