// Generated code must name everything by absolute path: nothing from the prelude, nothing
// from the user's scope, and its own locals must not clash with the user's.
mod hygiene {
    #![no_implicit_prelude]

    // Shadow what a careless expansion might use unqualified.
    #[allow(dead_code)]
    struct Option;
    #[allow(dead_code)]
    struct String;
    #[allow(dead_code)]
    struct Result;
    #[allow(dead_code)]
    struct Duration;
    #[allow(dead_code)]
    mod __private {}
    #[allow(unused_macros)]
    macro_rules! format {
        ($($t:tt)*) => {
            compile_error!("the user's format! was used")
        };
    }

    #[::lock_core::redis_locked(
        key = "hygiene:{__lock_key}:{__lock_locker}",
        ttl = "1s",
        wait = "1s"
    )]
    pub async fn collide(
        __lock_key: u32,
        __lock_locker: u32,
    ) -> ::core::result::Result<u32, ::lock_core::LockError> {
        let __lock_r = __lock_key + __lock_locker;
        ::core::result::Result::Ok(__lock_r)
    }

    // A duration expression named like the expansion's locals: the user's `__lock_ttl` is
    // the one read, and the expansion's `Duration` is `::core`'s, not the struct above.
    #[::lock_core::redis_locked(
        key = "hygiene:{__lock_wait}",
        ttl = __lock_ttl,
        wait = ::core::time::Duration::from_millis(__lock_wait)
    )]
    pub async fn duration_locals(
        __lock_ttl: ::core::time::Duration,
        __lock_wait: u64,
    ) -> ::core::result::Result<u64, ::lock_core::LockError> {
        ::core::result::Result::Ok(__lock_wait + __lock_ttl.as_secs())
    }

    #[::lock_core::redis_locked(key = "hygiene", locker = locker)]
    pub async fn constant(
        locker: &::lock_core::Locker,
    ) -> ::core::result::Result<(), ::lock_core::LockError> {
        ::core::result::Result::Ok(())
    }
}

fn main() {
    drop(hygiene::collide(1, 2));
    drop(hygiene::constant(&lock_core::Locker::memory()));
    drop(hygiene::duration_locals(
        std::time::Duration::from_secs(1),
        2,
    ));
}
