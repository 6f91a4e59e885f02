//! Whether this server is a primary, for code that runs without a command
//! context (the type callbacks). Kept up to date by the role-change server
//! event and checked at load.

use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{Context, ContextFlags};

static PRIMARY: AtomicBool = AtomicBool::new(true);

pub fn is_primary() -> bool {
    PRIMARY.load(Ordering::Relaxed)
}

pub fn set_primary(primary: bool) {
    PRIMARY.store(primary, Ordering::Relaxed);
}

pub fn refresh(ctx: &Context) {
    set_primary(!ctx.get_flags().contains(ContextFlags::SLAVE));
}
