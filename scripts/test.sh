#!/usr/bin/env bash
# Runs every test: installs what they need (scripts/setup.sh), then format,
# lint, and `cargo test` (unit, property, CLI, real-mount, editor and peer
# suite tests). `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --release --workspace --all-targets
cargo test --release --workspace --doc
# The codec crate stands alone: its docs build without a warning and it
# packages as it would be published (crates/cutf8).
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo package -p cutf8 --allow-dirty
