#!/usr/bin/env bash
# What the daemon's memory and time cost per inode the kernel remembers.
# Reports, never asserts.
#
# For each N in BENCH_INODES (default "200000 1000000"): one directory of N
# empty files in WORKDIR (made once, kept for the next run), listed with
# `ls -l DIR >/dev/null` natively, through bindfs and through cutf8fs (and
# through BENCH_BASE, another cutf8fs binary, when set: the code before a
# change). Each timed listing starts from the same state: the kernel's
# dentry and inode caches dropped (`echo 2 > /proc/sys/vm/drop_caches`,
# which also makes it forget every inode of the FUSE mounts), then one
# untimed native `ls -l` to bring BACKING's own metadata back, then the
# timed one. BENCH_RUNS (3) rounds, each starting one target later; the
# table gives medians and the ratios to native and to bindfs.
#
# The daemon's own CPU time during the listing (user + system, from
# /proc/PID/stat) is given too: on a busy machine it varies less than the
# wall-clock time, which FUSE round trips dominate.
#
# Memory, from the daemon's /proc/PID/status, per inode (N): its resident
# size before the listing (idle), at its peak (VmHWM, the listing included)
# and after the kernel forgot the inodes (caches dropped again; the
# daemon's resident size is read once it has been steady for a second,
# within BENCH_FORGET_WAIT (30) seconds). bindfs is measured the same way.
# Per inode means per inode the kernel holds: cutf8fs says how many it
# holds right after the listing (`cutf8fs --stats`); when that is fewer
# than N in any round (another process dropped the kernel's caches during
# the listing: the kernel forgot inodes it had), the memory figures are
# marked as not comparable.
#
# Needs root (drop_caches, mounts) and bindfs. Usage:
#   scripts/bench-inodes.sh [WORKDIR]     (default /var/tmp/cutf8fs-bench-inodes)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

W=${1:-${BENCH_DIR:-/var/tmp/cutf8fs-bench-inodes}}
SIZES=${BENCH_INODES:-200000 1000000}
RUNS=${BENCH_RUNS:-3}
FORGET_WAIT=${BENCH_FORGET_WAIT:-30}
BASE=${BENCH_BASE:-}

[ "$(id -u)" -eq 0 ] || { echo "bench-inodes: run as root (drops caches, mounts)" >&2; exit 1; }
command -v bindfs >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bindfs >/dev/null
}
cargo build --release --bin cutf8fs --quiet
CUTF8FS=$REPO/target/release/cutf8fs

mkdir -p "$W"
W=$(cd "$W" && pwd)
TARGETS="native bindfs cutf8fs"
[ -n "$BASE" ] && TARGETS="$TARGETS base"

unmount() {
    if mountpoint -q "$1"; then fusermount3 -u "$1" 2>/dev/null || umount -l "$1"; fi
}
cleanup() { for t in bindfs cutf8fs base; do unmount "$W/mnt-$t"; done; }
trap cleanup EXIT

# The daemon serving mount point $1 (its command line ends with it).
daemon_pid() { pgrep -f -- "$1\$" | head -1; }

kb() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }

# CPU seconds (user + system) process $1 has used.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"; }

mount_target() { # target dir
    local t=$1 d=$2 m=$W/mnt-$1
    mkdir -p "$m"
    unmount "$m"
    case $t in
        bindfs) bindfs "$d" "$m" ;;
        cutf8fs) "$CUTF8FS" -o log="$W/cutf8fs.log" "$d" "$m" ;;
        base) "$BASE" -o log="$W/base.log" "$d" "$m" ;;
    esac
}

# Waits until the resident size of $1 has been steady for a second.
steady_rss() {
    local pid=$1 last=-1 now end=$((SECONDS + FORGET_WAIT))
    while [ $SECONDS -lt $end ]; do
        echo 2 >/proc/sys/vm/drop_caches
        sleep 1
        now=$(kb "$pid" VmRSS)
        [ "$now" = "$last" ] && break
        last=$now
    done
    kb "$pid" VmRSS
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for n in $SIZES; do
    d=$W/d$n
    if [ ! -f "$d/.complete" ]; then
        echo "making $n files in $d ..." >&2
        rm -rf "$d"
        mkdir -p "$d/dir"
        python3 - "$d/dir" "$n" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(os.path.join(d, "f%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
EOF
        touch "$d/.complete"
    fi
    declare -A T=() IDLE=() PEAK=() AFTER=() CPU=()
    FORGOT=
    set -- $TARGETS
    order=("$@")
    for ((r = 0; r < RUNS; r++)); do
        for ((k = 0; k < ${#order[@]}; k++)); do
            t=${order[$(((k + r) % ${#order[@]}))]}
            if [ "$t" = native ]; then
                dir=$d/dir
            else
                mount_target "$t" "$d"
                dir=$W/mnt-$t/dir
            fi
            echo 2 >/proc/sys/vm/drop_caches
            ls -l "$d/dir" >/dev/null
            pid=
            [ "$t" != native ] && pid=$(daemon_pid "$W/mnt-$t")
            [ -n "$pid" ] && IDLE[$t]+="$(kb "$pid" VmRSS) "
            c0=0
            [ -n "$pid" ] && c0=$(cpu "$pid")
            s=$(date +%s.%N)
            ls -l "$dir" >/dev/null
            e=$(date +%s.%N)
            T[$t]+="$(echo "$e - $s" | bc) "
            if [ -n "$pid" ]; then
                CPU[$t]+="$(echo "$(cpu "$pid") - $c0" | bc) "
                PEAK[$t]+="$(kb "$pid" VmHWM) "
                if [ "$t" != bindfs ]; then
                    held=$("$CUTF8FS" --stats "$W/mnt-$t" 2>/dev/null | awk '$1 == "inodes" { print $2 }')
                    [ -n "$held" ] && [ "$held" -lt "$n" ] && FORGOT+="$t round $((r + 1)) held $held; "
                fi
                AFTER[$t]+="$(steady_rss "$pid") "
            fi
            [ "$t" != native ] && unmount "$W/mnt-$t"
            echo "  $n inodes, round $((r + 1)), $t: $(echo "$e - $s" | bc) s" >&2
        done
    done
    nat=$(echo "${T[native]}" | tr ' ' '\n' | grep . | median)
    bfs=$(echo "${T[bindfs]}" | tr ' ' '\n' | grep . | median)
    echo
    echo "ls -l of $n entries (medians of $RUNS; memory per inode in bytes, medians)"
    printf '| %-8s | %9s | %9s | %9s | %10s | %12s | %12s | %14s |\n' target seconds '÷ native' '÷ bindfs' 'daemon cpu' 'idle MB' 'peak B/inode' 'after B/inode'
    printf '|%s|\n' '----------|-----------|-----------|-----------|------------|--------------|--------------|----------------'
    for t in $TARGETS; do
        m=$(echo "${T[$t]}" | tr ' ' '\n' | grep . | median)
        if [ "$t" = native ]; then
            printf '| %-8s | %9.2f | %9.2f | %9.2f | %10s | %12s | %12s | %14s |\n' "$t" "$m" 1 "$(echo "$m / $bfs" | bc -l)" - - - -
            continue
        fi
        cpus=$(echo "${CPU[$t]}" | tr ' ' '\n' | grep . | median)
        idle=$(echo "${IDLE[$t]}" | tr ' ' '\n' | grep . | median)
        peak=$(echo "${PEAK[$t]}" | tr ' ' '\n' | grep . | median)
        after=$(echo "${AFTER[$t]}" | tr ' ' '\n' | grep . | median)
        printf '| %-8s | %9.2f | %9.2f | %9.2f | %10.2f | %12.1f | %12.0f | %14.0f |\n' "$t" "$m" \
            "$(echo "$m / $nat" | bc -l)" "$(echo "$m / $bfs" | bc -l)" "$cpus" \
            "$(echo "$idle / 1024" | bc -l)" \
            "$(echo "($peak - $idle) * 1024 / $n" | bc -l)" \
            "$(echo "($after - $idle) * 1024 / $n" | bc -l)"
    done
    if [ -n "$FORGOT" ]; then
        echo "NOT COMPARABLE (memory): the kernel forgot inodes during a listing ($FORGOT of $n):"
        echo "another process dropped the kernel's caches; run again on a machine where none does"
    fi
    unset T IDLE PEAK AFTER CPU
done
