#!/usr/bin/env bash
# Cost of a write by a caller who is not root. Reports, never asserts.
#
# Usage: scripts/bench-user-writes.sh [BIN...]   (default target/release/cutf8fs)
#
# Each BIN mounts an empty BACKING (-o allow_other); an unprivileged uid
# (UID, default 65534, no groups) then writes COUNT (50000) 4 KiB blocks
# with dd (bs=4096, one write(2) each, conv=notrunc into one file) through
# the mount, and natively into a plain directory on the same disk. REPS
# (7) runs, round-robin over the targets; each run's time is divided by
# COUNT. Printed for each target: the median wall-clock microseconds per
# write, and for each BIN the median CPU time its daemon spent per write
# (all its threads, from /proc/PID/stat, in clock ticks: COUNT writes
# should take a good part of a second; much steadier than wall-clock time
# on a loaded machine), each over the first BIN's and
# wall-clock over native. Use it to compare builds: e.g. main's binary
# and a branch's.
set -euo pipefail

COUNT=${COUNT:-50000}
REPS=${REPS:-7}
RUN_UID=${UID_WRITER:-65534}
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(target/release/cutf8fs)
for b in "${BINS[@]}"; do
    [ -x "$b" ] || { echo "not executable: $b" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (the daemon switches ids only then)" >&2; exit 1; }

work=$(mktemp -d /tmp/bench-user-writes.XXXXXX)
chmod 755 "$work"
mnts=()
cleanup() {
    for m in "${mnts[@]}"; do
        fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -m 1777 "$work/native"
targets=("$work/native")
names=(native)
pids=(0)
for i in "${!BINS[@]}"; do
    b="$work/b$i" m="$work/m$i"
    mkdir -m 1777 "$b"
    mkdir "$m"
    "${BINS[$i]}" -f "$b" "$m" -o allow_other,log="$work/log$i" &
    pids+=($!)
    mnts+=("$m")
    for _ in $(seq 100); do mountpoint -q "$m" && break; sleep 0.1; done
    mountpoint -q "$m" || { echo "${BINS[$i]} did not mount" >&2; exit 1; }
    targets+=("$m")
    names+=("${BINS[$i]}")
done

# Nanoseconds on CPU of process $1 so far, threads that ended included
# (utime + stime of /proc/PID/stat, in clock ticks).
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
cpu_ns() {
    sed 's/.*) //' /proc/"$1"/stat | awk -v t="$TICK_NS" '{printf "%.0f\n", ($12 + $13) * t}'
}

# Microseconds per write of one run into directory $1 (wall-clock, and
# "/cpu" of daemon $2's if not 0).
one_run() {
    local f="$1/w" c0=0 c1=0
    setpriv --reuid="$RUN_UID" --regid="$RUN_UID" --clear-groups -- \
        sh -c ': > "$1"' sh "$f"
    local t0 t1
    [ "$2" = 0 ] || c0=$(cpu_ns "$2")
    t0=$(date +%s%N)
    setpriv --reuid="$RUN_UID" --regid="$RUN_UID" --clear-groups -- \
        dd if=/dev/zero of="$f" bs=4096 count="$COUNT" conv=notrunc status=none
    t1=$(date +%s%N)
    [ "$2" = 0 ] || c1=$(cpu_ns "$2")
    rm -f "$f"
    echo "$(echo "scale=3; ($t1 - $t0) / 1000 / $COUNT" | bc)/$(echo "scale=3; ($c1 - $c0) / 1000 / $COUNT" | bc)"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A times
n=${#targets[@]}
for r in $(seq 0 $((REPS - 1))); do
    for k in $(seq 0 $((n - 1))); do
        j=$(((k + r) % n))
        times[$j]+="$(one_run "${targets[$j]}" "${pids[$j]}") "
    done
done

echo "4 KiB writes by uid $RUN_UID: $COUNT a run, median of $REPS runs (us per write)"
wall=() cpu=()
for j in $(seq 0 $((n - 1))); do
    wall[$j]=$(echo "${times[$j]}" | tr ' ' '\n' | grep . | cut -d/ -f1 | median)
    cpu[$j]=$(echo "${times[$j]}" | tr ' ' '\n' | grep . | cut -d/ -f2 | median)
done
printf '%-40s %10s %14s\n' target wall daemon-cpu
for j in $(seq 0 $((n - 1))); do
    line=$(printf '%-40s %10.2f' "${names[$j]}" "${wall[$j]}")
    if [ "$j" -gt 0 ]; then
        line+=$(printf ' %14.2f' "${cpu[$j]}")
        line+=$(printf '   wall x%.2f of native' "$(echo "${wall[$j]} / ${wall[0]}" | bc -l)")
        line+=$(printf ', x%.3f of the first' "$(echo "${wall[$j]} / ${wall[1]}" | bc -l)")
        line+=$(printf '; cpu x%.3f of the first' "$(echo "${cpu[$j]} / ${cpu[1]}" | bc -l)")
    fi
    echo "$line"
    echo "    runs (wall/cpu): ${times[$j]}"
done
