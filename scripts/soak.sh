#!/usr/bin/env bash
# Soak test of the cutf8fs daemon: a churn through the mount for a long time
# (default one hour), sampling the daemon's resident memory, open
# descriptors and threads every 10 s, then printing each one's slope
# (least squares, per hour) and its first, last and largest value. Reports,
# never asserts: a slope near zero is what months of uptime need.
#
# The churn: SOAK_WORKERS (3) processes, each in a directory of its own,
# round after round create SOAK_FILES (2000) small text files, read them,
# rename them, append to half of them and delete them all; every fifth
# round the kernel's caches are dropped. With SOAK_USERS=1 the workers run
# as the test users cutf8t-a, -b and -c (created by the test suite) instead
# of root.
#
# Usage: scripts/soak.sh [WORKDIR]   (default /var/tmp/cutf8fs-soak)
#   SOAK_SECONDS=3600 SOAK_EVERY=10 SOAK_WORKERS=3 SOAK_FILES=2000
# Needs root (mounts, drops caches) and python3. The samples are kept in
# WORKDIR/samples.tsv (seconds, RSS KiB, descriptors, threads).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
W=${1:-${SOAK_DIR:-/var/tmp/cutf8fs-soak}}
SECONDS_TOTAL=${SOAK_SECONDS:-3600}
EVERY=${SOAK_EVERY:-10}
WORKERS=${SOAK_WORKERS:-3}
FILES=${SOAK_FILES:-2000}

[ "$(id -u)" -eq 0 ] || { echo "soak: run as root (mounts, drops caches)" >&2; exit 1; }
cargo build --release --bins --quiet
CUTF8FS=${SOAK_CUTF8FS:-$REPO/target/release/cutf8fs}

mkdir -p "$W"
W=$(cd "$W" && pwd)
B=$W/backing M=$W/mnt
if mountpoint -q "$M"; then fusermount3 -u "$M" || umount -l "$M"; fi
rm -rf "$B"
mkdir -p "$B" "$M"
chmod 755 "$W" "$B"
"$CUTF8FS" -o "log=$W/daemon.log" "$B" "$M"
PID=$(pgrep -n -f -- "-o log=$W/daemon.log") || { echo "soak: the daemon did not start" >&2; exit 1; }
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; fusermount3 -u "$M" 2>/dev/null || umount -l "$M"' EXIT

CHURN='
import os, sys, time
d, n, until = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
r = 0
while time.time() < until:
    for i in range(n):
        with open(os.path.join(d, "f%d.txt" % i), "w") as f:
            f.write(("round %d file %d: héllo wörld ✓\n" % (r, i)) * (1 + i % 7))
    for i in range(n):
        with open(os.path.join(d, "f%d.txt" % i)) as f:
            f.read()
    for i in range(n):
        os.rename(os.path.join(d, "f%d.txt" % i), os.path.join(d, "g%d.txt" % i))
    for i in range(0, n, 2):
        with open(os.path.join(d, "g%d.txt" % i), "a") as f:
            f.write("appended ✓\n")
    for i in range(n):
        os.unlink(os.path.join(d, "g%d.txt" % i))
    r += 1
'
until=$(($(date +%s) + SECONDS_TOTAL))
users=(cutf8t-a cutf8t-b cutf8t-c)
for ((k = 0; k < WORKERS; k++)); do
    d=$M/w$k
    mkdir -p "$d"
    if [ "${SOAK_USERS:-0}" = 1 ]; then
        u=${users[$((k % 3))]}
        chown "$u:" "$B/w$k"
        setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- \
            /usr/bin/python3 -c "$CHURN" "$d" "$FILES" "$until" &
    else
        python3 -c "$CHURN" "$d" "$FILES" "$until" &
    fi
done

out=$W/samples.tsv
: > "$out"
start=$(date +%s)
n=0
while [ "$(date +%s)" -lt "$until" ]; do
    t=$(($(date +%s) - start))
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status")
    fds=$(ls "/proc/$PID/fd" | wc -l)
    threads=$(ls "/proc/$PID/task" | wc -l)
    printf '%s\t%s\t%s\t%s\n' "$t" "$rss" "$fds" "$threads" >> "$out"
    n=$((n + 1))
    if [ $((n % 5)) = 0 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
    sleep "$EVERY"
done
wait || true
# At rest: the kernel forgets everything, the daemon is left quiet.
sync; echo 3 > /proc/sys/vm/drop_caches; sleep 10
rest=$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status")
awk -F '\t' -v rest="$rest" -v commit="$(git -C "$REPO" rev-parse --short HEAD)" \
    -v workers="$WORKERS" -v files="$FILES" '
# Least-squares slope per hour of column c from sample `from` on.
function slope(c, from,    i, n, x, y, sx, sy, sxx, sxy, d) {
    for (i = from; i <= NR; i++) { x = t[i] / 3600; y = v[c, i]; n++; sx += x; sy += y; sxx += x * x; sxy += x * y }
    d = n * sxx - sx * sx
    return d > 0 ? (n * sxy - sx * sy) / d : 0
}
{ t[NR] = $1; for (c = 2; c <= 4; c++) { v[c, NR] = $c; if (NR == 1 || $c > mx[c]) mx[c] = $c } }
END {
    split("RSS (KiB),descriptors,threads", name, ",")
    printf "cutf8fs soak (%s): %d workers x %d files, %d samples over %d s\n", commit, workers, files, NR, t[NR]
    for (c = 2; c <= 4; c++) {
        printf "%-16s first %8d  last %8d  max %8d  slope %+10.1f per hour, %+10.1f in the second half\n", \
            name[c - 1], v[c, 1], v[c, NR], mx[c], slope(c, 1), slope(c, int(NR / 2) + 1)
    }
    printf "RSS at rest after the churn (caches dropped, 10 s quiet): %d KiB\n", rest
}' "$out" | tee "$W/results.txt"
