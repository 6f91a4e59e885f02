#!/usr/bin/env bash
# The one version of every artifact is Cargo.toml's [package] version. The clients carry a
# copy each (their ecosystems read it from their own files); this script keeps them equal.
#   scripts/version.sh              prints the version (0.1.0)
#   scripts/version.sh module       prints it as MODULE LIST's ver (0.1.0 -> 100, see src/version.rs)
#   scripts/version.sh check        fails, naming each file, when a client's copy differs
#   scripts/version.sh set 0.2.0    writes the version into Cargo.toml, every copy and docs/install.md
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_version() { sed -n '/^\[package\]/,/^\[/{s/^version = "\(.*\)"/\1/p}' Cargo.toml | head -1; }

# file | sed expression printing that file's copy | sed expression replacing it (@V@ is the new one)
copies() {
    cat <<'TABLE'
clients/ruby/lib/redis_unique/version.rb|s/^ *VERSION = "\(.*\)"/\1/p|s/^\( *VERSION = \)".*"/\1"@V@"/
clients/python/src/redis_unique/__init__.py|s/^__version__ = "\(.*\)"/\1/p|s/^__version__ = ".*"/__version__ = "@V@"/
clients/node/package.json|2,4s/^  "version": "\(.*\)",/\1/p|2,4s/^  "version": ".*",/  "version": "@V@",/
clients/node/package-lock.json|2,4s/^  "version": "\(.*\)",/\1/p|2,4s/^  "version": ".*",/  "version": "@V@",/
clients/node/package-lock.json|8,10s/^      "version": "\(.*\)",/\1/p|8,10s/^      "version": ".*",/      "version": "@V@",/
clients/node/src/version.ts|s/^export const VERSION = "\(.*\)";/\1/p|s/^export const VERSION = ".*";/export const VERSION = "@V@";/
TABLE
}

version=$(cargo_version)
case "${1:-}" in
"") echo "$version" ;;
module)
    IFS=. read -r major minor patch <<<"$version"
    echo $((10#$major * 10000 + 10#$minor * 100 + 10#$patch)) ;;
check)
    bad=0
    while IFS='|' read -r file get _; do
        found=$(sed -n "$get" "$file" | head -1)
        if [ "$found" != "$version" ]; then
            echo "$file has version '${found:-none}', Cargo.toml $version: run scripts/version.sh set $version" >&2
            bad=1
        fi
    done < <(copies)
    [ $bad = 0 ] && echo "every client is at version $version" ;;
set)
    new=${2:?usage: scripts/version.sh set MAJOR.MINOR.PATCH}
    [[ $new =~ ^[0-9]+\.[0-9]{1,2}\.[0-9]{1,2}$ ]] || { echo "not MAJOR.MINOR.PATCH with minor and patch below 100: $new" >&2; exit 1; }
    sed -i '/^\[package\]/,/^\[/{s/^version = ".*"/version = "'"$new"'"/}' Cargo.toml
    # docs/install.md names the release's files and MODULE LIST's ver (tests/install_doc.rs checks).
    old_ver=$(IFS=. read -r a b c <<<"$version"; echo $((10#$a * 10000 + 10#$b * 100 + 10#$c)))
    new_ver=$(IFS=. read -r a b c <<<"$new"; echo $((10#$a * 10000 + 10#$b * 100 + 10#$c)))
    sed -i "s/${version//./\\.}/$new/g; s/\`ver $old_ver\`/\`ver $new_ver\`/g" docs/install.md
    while IFS='|' read -r file _ put; do
        sed -i "${put//@V@/$new}" "$file"
    done < <(copies)
    cargo update --quiet --offline -p redis-unique 2>/dev/null || true
    "$0" check ;;
*) echo "usage: scripts/version.sh [module|check|set X.Y.Z]" >&2; exit 2 ;;
esac
