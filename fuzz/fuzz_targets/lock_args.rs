//! The LOCK option parser fed arbitrary arguments (split on NUL): an error or
//! options that are all valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_unique::commands::lock::parse_options;
use redis_unique::engine::{MAX_LIMIT, RateLimit, validate_meta, validate_owner, validate_type};

fuzz_target!(|data: &[u8]| {
    let args: Vec<&[u8]> = data.split(|b| *b == 0).collect();
    if let Ok(opts) = parse_options(&args, 1024) {
        assert!(opts.limit.is_none_or(|l| i64::from(l) <= MAX_LIMIT));
        assert!(opts.lock_type.is_none_or(|t| validate_type(t.as_bytes()).is_ok()));
        assert!(opts.owner.is_none_or(|o| validate_owner(o).is_ok()));
        assert!(opts.meta.is_none_or(|m| validate_meta(m.as_bytes(), 1024).is_ok()));
        assert!(opts.wait.is_none_or(|w| w > 0));
        assert!(opts.rate.is_none_or(|r| RateLimit::new(r.n, r.per, r.burst) == Some(r)));
    }
});
