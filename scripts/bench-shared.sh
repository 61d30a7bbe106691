#!/usr/bin/env bash
# Two mounts of one BACKING listing at the same moment, against one mount
# alone (issue: several daemons sharing the index database). Reports; it
# asserts nothing.
#
# A BACKING of N corrected files (default 1500, in 15 directories) is
# made with `cutf8 migrate`, listed once through a first mount (the index
# database learns every size), then each round:
#   alone  caches dropped, one fresh mount, `ls -lR` timed, the daemon's
#          rchar (bytes its read calls returned) taken;
#   both   caches dropped, two fresh mounts, `ls -lR` through both at the
#          same moment, each timed, each daemon's rchar taken.
# Prints the medians of ROUNDS (default 5) rounds and the ratios
# both ÷ alone (time, per mount) and rchar ÷ the tree's bytes.
#
# Usage: scripts/bench-shared.sh [N] [ROUNDS]   (root: mounts, drop_caches)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1500}
ROUNDS=${2:-5}
cargo build --release --bins --quiet
CUTF8=$PWD/target/release/cutf8
CUTF8FS=$PWD/target/release/cutf8fs
export CUTF8FS_RACY_MARGIN_MS=200

work=$(mktemp -d /tmp/bench-shared-XXXXXX)
cleanup() {
    fusermount3 -u "$work/a" 2>/dev/null || true
    fusermount3 -u "$work/b" 2>/dev/null || true
    sleep 0.5
    rm -rf "$work" || true
}
trap cleanup EXIT
mkdir -p "$work/backing" "$work/a" "$work/b"
python3 - "$work/backing" "$N" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i % 15}")
    os.makedirs(d, exist_ok=True)
    text = f"file {i}: " + "\u0800\U00010000caf\u00e9 Μοῦσα " * (200 + i % 400)
    with open(os.path.join(d, f"f{i}.txt"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
EOF
"$CUTF8" migrate "$work/backing" >/dev/null
tree=$(du -sb --exclude=.cutf8fs-index "$work/backing" | cut -f1)
sleep 0.5

mount_at() { # BACKING MNT
    "$CUTF8FS" -o "log=$work/$(basename "$2").log" "$1" "$2"
    for _ in $(seq 200); do mountpoint -q "$2" && return 0; sleep 0.02; done
    echo "mount of $2 failed" >&2
    exit 1
}
pid_of() { pgrep -n -f "cutf8fs .* $work/backing $1\$"; }
rchar() { awk '/^rchar:/ {print $2}' "/proc/$1/io"; }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.4f\", $1 }"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

mount_at "$work/backing" "$work/a"
ls -lR "$work/a" >/dev/null
fusermount3 -u "$work/a"
sleep 1.5

alone_t=() alone_r=() both_t=() both_r=()
for _ in $(seq "$ROUNDS"); do
    sync; echo 3 >/proc/sys/vm/drop_caches
    mount_at "$work/backing" "$work/a"
    p=$(pid_of "$work/a"); r0=$(rchar "$p")
    t0=$(now); ls -lR "$work/a" >/dev/null; t1=$(now)
    alone_t+=("$(calc "$t1 - $t0")")
    alone_r+=("$(( $(rchar "$p") - r0 ))")
    fusermount3 -u "$work/a"; sleep 1.5

    sync; echo 3 >/proc/sys/vm/drop_caches
    mount_at "$work/backing" "$work/a"
    mount_at "$work/backing" "$work/b"
    pa=$(pid_of "$work/a"); pb=$(pid_of "$work/b")
    ra=$(rchar "$pa"); rb=$(rchar "$pb")
    ( t0=$(now); ls -lR "$work/a" >/dev/null; t1=$(now); calc "$t1 - $t0" >"$work/ta" ) &
    ( t0=$(now); ls -lR "$work/b" >/dev/null; t1=$(now); calc "$t1 - $t0" >"$work/tb" ) &
    wait
    both_t+=("$(cat "$work/ta")" "$(cat "$work/tb")")
    both_r+=("$(( $(rchar "$pa") - ra ))" "$(( $(rchar "$pb") - rb ))")
    fusermount3 -u "$work/a"; fusermount3 -u "$work/b"; sleep 1.5
done

at=$(printf '%s\n' "${alone_t[@]}" | median)
bt=$(printf '%s\n' "${both_t[@]}" | median)
ar=$(printf '%s\n' "${alone_r[@]}" | median)
br=$(printf '%s\n' "${both_r[@]}" | median)
printf 'BACKING: %d corrected files, %d bytes; %d rounds, medians\n' "$N" "$tree" "$ROUNDS"
printf '%-34s %8s s  %12s bytes read (%s of the tree)\n' \
    "one mount alone, cold ls -lR" "$(printf %.3f "$at")" "$ar" "$(calc "$ar / $tree")" \
    "two mounts at once, each" "$(printf %.3f "$bt")" "$br" "$(calc "$br / $tree")"
printf 'ratio, two at once / one alone: %.2f\n' "$(calc "$bt / $at")"
exit 0
