#!/usr/bin/env bash
# SQLite writers sharing one database through the mount and in BACKING.
# Reports, never asserts.
#
# Usage: scripts/bench-sqlite-locks.sh [BIN]   (default target/release/cutf8fs)
#
# One rollback-journal database (SQLite's default mode) in an empty
# BACKING, mounted by BIN. Each writer is python3's sqlite3 in a loop of
# BEGIN IMMEDIATE; INSERT; COMMIT with a 60 s busy timeout, for SECS (15)
# seconds. Three pairings run in turn, REPS (3) times: two writers in
# BACKING, two through the mount, one in each. Printed per run: each
# writer's commits and its median commit time. Then one writer through the
# mount alone, under strace, for the median time of fcntl(F_SETLK) calls
# that are granted locks and that are unlocks: an unlock costs one round
# trip to the daemon; a granted lock costs that, the lock on the backing
# file, and the kernel dropping its cache of the file before the reply
# (man cutf8fs, LOCKS). Needs root, python3 with sqlite3, strace.
set -euo pipefail

BIN=${1:-target/release/cutf8fs}
SECS=${SECS:-15}
REPS=${REPS:-3}
[ -x "$BIN" ] || { echo "not executable: $BIN" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (mounts)" >&2; exit 1; }
BIN=$(realpath "$BIN")
PY=$(python3 -c 'import sys; print(sys.executable)')

work=$(mktemp -d /var/tmp/bench-sqlite-locks.XXXXXX)
B=$work/backing M=$work/mnt
mkdir -p "$B" "$M"
cleanup() {
    mountpoint -q "$M" && { fusermount3 -u "$M" || umount -l "$M"; }
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/writer.py" <<'EOF'
import sqlite3, sys, time
path, secs, tag = sys.argv[1], float(sys.argv[2]), sys.argv[3]
c = sqlite3.connect(path, timeout=60, isolation_level=None)
n, took = 0, []
end = time.time() + secs
while time.time() < end:
    t = time.time()
    c.execute("BEGIN IMMEDIATE")
    c.execute("INSERT INTO t(v) VALUES (?)", (tag,))
    c.execute("COMMIT")
    n += 1
    took.append(time.time() - t)
took.sort()
p50 = 1000 * took[len(took) // 2] if took else float("nan")
print(f"{tag:<8} {n:6d} commits, median commit {p50:8.2f} ms")
EOF
"$PY" -c "import sqlite3; c = sqlite3.connect('$B/db'); c.execute('create table t(v)'); c.commit()"
"$BIN" -o "log=$work/daemon.log" "$B" "$M"

pair() {
    echo "-- $1 + $2"
    "$PY" "$work/writer.py" "$3" "$SECS" "$1" &
    "$PY" "$work/writer.py" "$4" "$SECS" "$2" &
    wait
}
for r in $(seq "$REPS"); do
    echo "== run $r (load $(cut -d' ' -f1 /proc/loadavg))"
    pair backing1 backing2 "$B/db" "$B/db"
    pair mount1 mount2 "$M/db" "$M/db"
    pair backing mount "$B/db" "$M/db"
done

echo "== fcntl(F_SETLK) through the mount, one writer alone (strace -T)"
strace -T -e trace=fcntl -o "$work/trace" "$PY" "$work/writer.py" "$M/db" 5 mount
median() { sort -n | awk '{a[NR]=$1} END {if (NR) printf "%d calls, median %.0f us\n", NR, a[int((NR+1)/2)]*1e6}'; }
echo -n "unlocks:        "
grep F_SETLK "$work/trace" | grep F_UNLCK | grep '= 0 <' | sed 's/.*<\(.*\)>/\1/' | median
echo -n "granted locks:  "
grep F_SETLK "$work/trace" | grep -E 'F_RDLCK|F_WRLCK' | grep '= 0 <' | sed 's/.*<\(.*\)>/\1/' | median
strace -T -e trace=fcntl -o "$work/trace" "$PY" "$work/writer.py" "$B/db" 5 backing
echo -n "in BACKING, all: "
grep F_SETLK "$work/trace" | grep '= 0 <' | sed 's/.*<\(.*\)>/\1/' | median
