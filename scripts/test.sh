#!/usr/bin/env bash
# Runs every test: installs what they need (scripts/setup.sh), then format,
# lint, the vendored fuser against its patch series (scripts/check-vendor.sh,
# which also runs fuser's own tests), and `cargo test` (unit, property, CLI,
# real-mount, editor and peer suite tests, and the Debian package installed
# and removed), then builds the package (target/debian). `.ci/run` calls
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# vendor/fuser is the published fuser plus vendor/fuser-patches, and
# fuser's own tests pass on the patched code (scripts/check-vendor.sh).
scripts/check-vendor.sh
cargo test --release --workspace --all-targets
cargo test --release --workspace --doc
# The Debian package from the binaries just built (tests/package.rs has
# already built one of its own and installed, used and removed it).
CUTF8_BIN_DIR=target/release CUTF8_GCONV_SO=target/release/libcutf8_gconv.so \
    scripts/package-deb.sh
# The codec crate stands alone: its docs build without a warning, it builds
# as no_std + alloc without its default std feature, and it packages as it
# would be published (crates/cutf8), with no file a user does not need.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo build -p cutf8 --no-default-features
cargo clippy -p cutf8 --no-default-features -- -D warnings
cargo package -p cutf8 --allow-dirty
if cargo package -p cutf8 --allow-dirty --list | grep -v -E '^(src/.*\.rs|README\.md|LICENSE-(MIT|APACHE)|Cargo\.toml(\.orig)?|Cargo\.lock|\.cargo_vcs_info\.json)$'; then
    echo "cargo package -p cutf8 ships the files above, which a user does not need" >&2
    exit 1
fi
