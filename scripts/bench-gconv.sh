#!/bin/sh
# iconv(1) with the CORRECTED-UTF-8 gconv module vs iconv(1) on UTF-16 vs
# cutf8, on the codec benchmark's corpora; medians of repeated runs, whole
# processes to /dev/null. Reports, never asserts. Table in docs/charset.md.
#
#   scripts/bench-gconv.sh [MIB] [REPEATS]      defaults: 64 MiB, 7 repeats
set -eu
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo build --quiet --release -p cutf8-gconv
cargo build --quiet --release -p cutf8fs --bin cutf8
target=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
prefix=$target/release/gconv-bench-prefix
CUTF8_GCONV_SO=$target/release/libcutf8_gconv.so scripts/install-gconv.sh "$prefix" >/dev/null
export GCONV_PATH="$prefix/lib/cutf8fs/gconv" CUTF8="$target/release/cutf8"
exec cargo run --quiet --release --example bench_gconv -- "$@"
