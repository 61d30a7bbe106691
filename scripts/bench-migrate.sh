#!/usr/bin/env bash
# Benchmark `cutf8 migrate` against `cp -a` on the same tree.
#
# Generates an archive of mixed-script UTF-8 text (default: 10 500 files,
# about 1.1 GiB) in a temporary directory outside the repository, then, for
# each of REPS repetitions, on fresh copies of it:
#   cp -a SRC COPY                 (reads and writes the same bytes, converts nothing)
#   cp -a SRC COPY && sync         (the same, made durable, as migrate's fsyncs do)
#   cutf8 migrate --jobs 1 COPY
#   cutf8 migrate --jobs $(nproc) COPY
# and prints the median of each and the ratios to cp -a. It reports; it
# never asserts. Before each timed step the page cache is flushed with
# `sync` so that no step pays for the previous one's writes; the source
# stays in the page cache (as for a re-run), caches are never dropped.
#
# Usage: scripts/bench-migrate.sh [FILES] [TOTAL_MIB] [REPS]
# Environment: CUTF8 (binary; default: cargo build --release),
#              BENCH_DIR (parent of the temporary directory; default $TMPDIR or /tmp).
set -euo pipefail

FILES=${1:-10500}
TOTAL_MIB=${2:-1100}
REPS=${3:-3}
JOBS=$(nproc)

cd "$(dirname "$0")/.."
if [[ -z "${CUTF8:-}" ]]; then
    cargo build --release --quiet --bin cutf8
    CUTF8=$PWD/target/release/cutf8
fi

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/cutf8-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SRC=$WORK/src

echo "generating $FILES files, about $TOTAL_MIB MiB, in $SRC ..." >&2
python3 - "$SRC" "$FILES" "$TOTAL_MIB" <<'EOF'
import os, random, sys
root, files, total_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(2026)
pieces = [
    "The quick brown fox jumps over the lazy dog. ",
    "Grüße aus Köln, déjà vu, œuvre, Ærøskøbing. ",
    "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. ",
    "Съешь же ещё этих мягких французских булок. ",
    "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。",
    "日本語のテキストとカタカナ。한국어 문장입니다. ",
    "🦀🎉👩‍👩‍👧 ",
    "\u0800\u081a\u085f\u089f ",
    "\U00010000\U00010e7d\U0001109f ",
    "\n",
]
# A pool of text to cut files from: mostly Latin, some of every script.
weights = [30, 15, 8, 8, 8, 6, 3, 2, 2, 18]
pool = "".join(rng.choices(pieces, weights, k=400_000)).encode()
mean = total_mib * 1024 * 1024 // files
written = 0
for i in range(files):
    d = os.path.join(root, f"d{i % 97:02d}", f"s{i % 13:02d}")
    os.makedirs(d, exist_ok=True)
    size = max(1, int(rng.expovariate(1 / mean)))
    size = min(size, len(pool) - 1, 40 * mean)
    start = rng.randrange(0, len(pool) - size)
    chunk = pool[start:start + size]
    # Cut at character boundaries.
    while chunk and chunk[0] & 0xC0 == 0x80:
        chunk = chunk[1:]
    while chunk and chunk[-1] >= 0x80:
        chunk = chunk[:-1]
    with open(os.path.join(d, f"f{i:05d}.txt"), "wb") as f:
        f.write(chunk + b"\n")
    written += len(chunk) + 1
print(f"{files} files, {written / 2**20:.0f} MiB", file=sys.stderr)
EOF
BYTES=$(du -sb "$SRC" | cut -f1)
NFILES=$(find "$SRC" -type f | wc -l)
sync

now() { date +%s.%N; }
declare -A T
run() { # name command...
    local name=$1; shift
    sync
    local t0; t0=$(now)
    "$@" >/dev/null
    T[$name]="${T[$name]:-} $(echo "$(now) - $t0" | bc)"
}
cp_sync() { cp -a "$1" "$2" && sync; }

for r in $(seq 1 "$REPS"); do
    echo "repetition $r of $REPS ..." >&2
    run cp cp -a "$SRC" "$WORK/cp"
    rm -rf "$WORK/cp"; sync
    run cp_sync cp_sync "$SRC" "$WORK/cp"
    rm -rf "$WORK/cp"
    cp -a "$SRC" "$WORK/m1"; cp -a "$SRC" "$WORK/mn"; sync
    run migrate1 "$CUTF8" migrate --quiet --jobs 1 "$WORK/m1"
    run migraten "$CUTF8" migrate --quiet --jobs "$JOBS" "$WORK/mn"
    # Every file must have been converted (a benchmark of skips is no benchmark).
    if [[ $r == 1 ]]; then
        left=$("$CUTF8" migrate --dry-run --quiet --jobs "$JOBS" "$WORK/mn" | grep -c '^would-convert' || true)
        [[ $left == 0 ]] || echo "WARNING: $left files were not converted" >&2
    fi
    rm -rf "$WORK/m1" "$WORK/mn"
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
CP=$(echo "${T[cp]}" | median)
printf '\n%s files, %.2f GiB, %s CPUs, %s repetitions (median seconds)\n\n' \
    "$NFILES" "$(echo "$BYTES / 1073741824" | bc -l)" "$JOBS" "$REPS"
printf '| %-34s | %9s | %10s | %9s |\n' "command" "median s" "MiB/s" "vs cp -a"
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..36})" "-----------" "------------" "-----------"
for k in cp cp_sync migrate1 migraten; do
    case $k in
        cp) label="cp -a" ;;
        cp_sync) label="cp -a && sync" ;;
        migrate1) label="cutf8 migrate --jobs 1" ;;
        migraten) label="cutf8 migrate --jobs $JOBS" ;;
    esac
    m=$(echo "${T[$k]}" | median)
    printf '| %-34s | %9.2f | %10.0f | %8.2fx |\n' "$label" "$m" \
        "$(echo "$BYTES / 1048576 / $m" | bc -l)" "$(echo "$m / $CP" | bc -l)"
done
echo
echo "all runs (s): cp:${T[cp]}; cp+sync:${T[cp_sync]}; migrate -j1:${T[migrate1]}; migrate -j$JOBS:${T[migraten]}"
