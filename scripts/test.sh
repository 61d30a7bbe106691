#!/usr/bin/env bash
# Runs every test: installs what they need (scripts/setup.sh), then format,
# lint, and `cargo test` (unit, property, CLI, real-mount, editor and peer
# suite tests, and the Debian package installed and removed), then builds
# the package (target/debian). `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --release --workspace --all-targets
cargo test --release --workspace --doc
# The Debian package from the binaries just built (tests/package.rs has
# already built one of its own and installed, used and removed it).
CUTF8_BIN_DIR=target/release CUTF8_GCONV_SO=target/release/libcutf8_gconv.so \
    scripts/package-deb.sh
# The codec crate stands alone: its docs build without a warning and it
# packages as it would be published (crates/cutf8).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo package -p cutf8 --allow-dirty
