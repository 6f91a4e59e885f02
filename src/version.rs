//! The module's version as Redis reports it.
//!
//! Redis module versions are integers (`MODULE LIST` shows `ver`), so the
//! crate's semantic version, the one version of every artifact, is encoded the
//! way Redis's own modules do (RedisJSON 2.6.1 is 20601):
//! `major * 10000 + minor * 100 + patch`, so 0.1.0 is 100 and 1.2.3 is 10203.
//! The clients decode it the same way to compare it with their own version.

/// `MODULE LIST`'s `ver` for this build, from Cargo.toml's version.
pub const MODULE_VERSION: i32 = encode(
    env!("CARGO_PKG_VERSION_MAJOR"),
    env!("CARGO_PKG_VERSION_MINOR"),
    env!("CARGO_PKG_VERSION_PATCH"),
);

const fn parse(part: &str) -> i32 {
    let bytes = part.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        let digit = bytes[i];
        assert!(digit.is_ascii_digit(), "a version part is not a number");
        n = n * 10 + (digit - b'0') as i32;
        i += 1;
    }
    n
}

/// Fails the build for a minor or patch of 100 or more, which the encoding cannot hold.
const fn encode(major: &str, minor: &str, patch: &str) -> i32 {
    let (major, minor, patch) = (parse(major), parse(minor), parse(patch));
    assert!(
        minor < 100 && patch < 100,
        "minor and patch must stay below 100"
    );
    major * 10000 + minor * 100 + patch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_encode_as_redis_modules_do() {
        assert_eq!(encode("0", "1", "0"), 100);
        assert_eq!(encode("2", "6", "1"), 20601);
        assert_eq!(encode("1", "12", "3"), 11203);
    }

    #[test]
    fn the_module_reports_cargo_tomls_version() {
        let expected = env!("CARGO_PKG_VERSION")
            .split('.')
            .map(|p| p.parse::<i32>().unwrap_or(-1))
            .fold(0, |acc, p| acc * 100 + p);
        assert_eq!(MODULE_VERSION, expected);
    }
}
