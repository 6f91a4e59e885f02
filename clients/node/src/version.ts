/**
 * This package's version, the one of every redis-unique artifact (Cargo.toml's, kept equal
 * by scripts/version.sh): the module version this client was built for.
 */
export const VERSION = "0.1.0";
