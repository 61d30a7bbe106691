#!/bin/sh
# Regenerate man/cutf8.1 from the clap definitions in src/bin/cutf8/main.rs.
# Run after changing any cutf8 option or subcommand; tests/cli.rs fails
# while the committed page differs from what the binary generates.
set -eu
cd "$(dirname "$0")/.."
cargo run --quiet --bin cutf8 -- --generate-man > man/cutf8.1.tmp
mv man/cutf8.1.tmp man/cutf8.1
echo "wrote man/cutf8.1"
