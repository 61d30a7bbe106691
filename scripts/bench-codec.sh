#!/bin/sh
# Codec throughput: first V's and W's speed against simdutf8's validation of
# the same text (validation time ÷ conversion time), then the table corpus ×
# operation, GB/s (median of repeats) and the ratio to memcpy,
# std::str::from_utf8, simdutf8 and encoding_rs UTF-8→UTF-16, all measured on
# the same buffers in the same run. Reports, never asserts.
#
#   scripts/bench-codec.sh [MIB] [REPEATS] [CORPUS...]
#       defaults: 64 MiB, 9 repeats, all of english latin cjk emoji mixed random dense
#   CUTF8_SIMD=avx2 scripts/bench-codec.sh      the AVX2 path on an AVX-512 CPU (or =sse2, =portable;
#                                               CUTF8FS_SIMD, the binaries' knob, is taken too)
#
# `cargo bench -p cutf8 --bench codec` gives the same operations through criterion;
# `cargo run -p cutf8 --release --example bench_cpu -- CORPUS OP` one of them in
# thread CPU time (steadier on a loaded machine);
# `cargo run -p cutf8 --release --example bench_ratio -- [MIB] [ROUNDS]` the
# headline alone (V and W ÷ validation, and memcpy ÷ validation) in thread CPU
# time, the operations alternating, each ratio taken within a round.
set -eu
cd "$(dirname "$0")/.."
if [ -n "${CUTF8FS_SIMD:-}" ] && [ -z "${CUTF8_SIMD:-}" ]; then
    export CUTF8_SIMD="$CUTF8FS_SIMD"
fi
exec cargo run --quiet --release -p cutf8 --example bench_table -- "$@"
