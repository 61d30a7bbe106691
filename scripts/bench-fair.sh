#!/usr/bin/env bash
# One user's storm against another user's small reads, through the mount
# and natively on the same BACKING (issue 35, fair turns). Reports; it
# asserts nothing (tests/fair_turns.rs asserts the bound).
#
# User cutf8t-a runs two 8-process storms (scripts/fair-turns.py: open,
# read and close of its files, lookups of names that do not exist), one
# through the mount and one in BACKING, each let run only in its phase;
# user cutf8t-b times N open-read-close of small files alone and during
# the storm, through the mount and natively, interleaved, ROUNDS times.
# Printed: the medians, each slowdown (storm ÷ alone) and the mount's
# slowdown ÷ the native one (issue 35 asks at most 2).
#
# Usage: scripts/bench-fair.sh [ROUNDS] [N]   (root: mounts, real users)
#   CUTF8FS=path  another daemon binary (e.g. main's, for before/after)
#   FAIR_OPTS=opts  mount options beside allow_other (default: turns,
#                   the mount's default; FAIR_OPTS=noturns for first come)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-10}
N=${2:-50}
if [ -z "${CUTF8FS:-}" ]; then
    cargo build --release --bins --quiet
    CUTF8FS=$PWD/target/release/cutf8fs
fi
PY=/usr/bin/python3
TURNS=$PWD/scripts/fair-turns.py
for u in cutf8t-a cutf8t-b; do
    id -u "$u" >/dev/null 2>&1 || useradd -M -U -s /usr/sbin/nologin -d /nonexistent "$u"
done
work=$(mktemp -d /tmp/bench-fair-XXXXXX)
chmod 755 "$work"
cleanup() {
    touch "$work/ctl/stop" 2>/dev/null || true
    wait 2>/dev/null || true
    fusermount3 -u "$work/mnt" 2>/dev/null || umount "$work/mnt" 2>/dev/null || true
    sleep 0.5
    rm -rf "$work" || true
}
trap cleanup EXIT
mkdir -p "$work/backing/a" "$work/backing/b" "$work/mnt" "$work/ctl"
chmod 755 "$work/backing"
chmod 1777 "$work/ctl"
$PY - "$work/backing" <<'PYEOF'
import os, sys
b = sys.argv[1]
for i in range(20):
    open(f"{b}/b/v{i}", "w").write(f"v{i}\n" * 8)
for k in range(8):
    for j in range(40):
        open(f"{b}/a/s{k}_{j}", "w").write(f"s{k}_{j}\n" * 8)
PYEOF
chown -R cutf8t-a: "$work/backing/a"
chown -R cutf8t-b: "$work/backing/b"
"$CUTF8FS" -o "allow_other,${FAIR_OPTS-turns},log=$work/daemon.log" "$work/backing" "$work/mnt"
sleep 0.5

as() { setpriv --reuid="$(id -u "$1")" --regid="$(id -g "$1")" --init-groups -- "${@:2}"; }
as cutf8t-a $PY "$TURNS" storm "$work/mnt/a" 8 "$work/ctl" mount >"$work/storm-mount" &
as cutf8t-a $PY "$TURNS" storm "$work/backing/a" 8 "$work/ctl" native >"$work/storm-native" &
as cutf8t-b $PY "$TURNS" victim "$work/ctl" "$N" "$ROUNDS" \
    "mount=$work/mnt/b" "native=$work/backing/b" >"$work/victim"
touch "$work/ctl/stop"
wait
cat "$work/victim"
echo "storm through the mount: $(cat "$work/storm-mount"); natively: $(cat "$work/storm-native")"
awk '{alone[$1] = $3; storm[$1] = $5}
     END {m = storm["mount"] / alone["mount"]; n = storm["native"] / alone["native"]
          printf "slowdown: mount x%.2f, native x%.2f, mount/native %.2f\n", m, n, m / n}' \
    "$work/victim"
