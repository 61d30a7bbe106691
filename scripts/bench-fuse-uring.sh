#!/bin/bash
# Times one FUSE request round trip over /dev/fuse and over io_uring.
#
# Builds scripts/fuse-uring-probe/probe.c (a tiny read-only filesystem with
# one handler and two transports), mounts it once per transport and thread
# count, runs request-heavy workloads and prints microseconds per request
# (wall time divided by the requests the server counted) and the ratio
# uring/devfuse, as medians over BENCH_RUNS runs. It reports; it asserts
# nothing. docs/performance.md ("FUSE over io_uring") has the figures.
#
# Part 1 runs nothing pinned, at 1 and 2 server threads. Part 2
# (BENCH_PLACEMENT=1, the default) pins the client to CPU 0 and the server
# to the same CPU, to the other one, or (uring, 2 threads) one thread per
# kernel queue on its own CPU; there BENCH_PLACEMENT_ROUNDS (2) rounds.
#
# Workloads, each over BENCH_FILES files:
#   stat  stat(2) of every file under /u, BENCH_ROUNDS times (nothing cached:
#         each stat asks LOOKUP twice and GETATTR once)
#   open  open(2) + close(2) of every file under /d, BENCH_ROUNDS times
#         (entries cached: OPEN, FLUSH, RELEASE per file, as cutf8fs's warm
#         grep sends)
#   grep  a warm `grep -r` over /d (OPEN, FLUSH, RELEASE per file, no READ
#         while the page cache holds the files)
#
# Needs root, /dev/fuse, gcc and liburing's headers (apt-get install
# liburing-dev), and a kernel with FUSE over io_uring (Linux 6.14+,
# CONFIG_FUSE_IO_URING). /sys/module/fuse/parameters/enable_uring is off by
# default; the script turns it on for the run and puts it back after.
set -euo pipefail

FILES=${BENCH_FILES:-5000}
ROUNDS=${BENCH_ROUNDS:-10}
RUNS=${BENCH_RUNS:-7}
THREADS=${BENCH_THREADS:-"1 2"}
DEPTH=${BENCH_DEPTH:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
PARAM=/sys/module/fuse/parameters/enable_uring

[ "$(id -u)" = 0 ] || { echo "bench-fuse-uring: needs root (mount(2) of a FUSE filesystem, $PARAM)" >&2; exit 1; }
[ -c /dev/fuse ] || { echo "bench-fuse-uring: no /dev/fuse" >&2; exit 1; }
[ -f /usr/include/liburing.h ] || { echo "bench-fuse-uring: no liburing.h (apt-get install liburing-dev)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/bench-fuse-uring.XXXXXX)
OLD_PARAM=
DAEMON=
cleanup() {
	# umount even a dead mount (a server that exited leaves ENOTCONN behind).
	awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | while read -r m; do umount "$m" || true; done
	[ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null || true
	[ -n "$OLD_PARAM" ] && echo "$OLD_PARAM" > "$PARAM" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

gcc -O2 -Wall -Wextra -o "$WORK/probe" "$HERE/fuse-uring-probe/probe.c" -luring -lpthread

MODES="devfuse uring"
if [ ! -e "$PARAM" ]; then
	echo "bench-fuse-uring: this kernel ($(uname -r)) has no FUSE over io_uring" \
		"($PARAM is missing: Linux 6.14+ with CONFIG_FUSE_IO_URING needed); timing /dev/fuse only"
	MODES=devfuse
elif [ "$(cat "$PARAM")" != Y ]; then
	OLD_PARAM=$(cat "$PARAM")
	if ! echo Y > "$PARAM" 2>/dev/null || [ "$(cat "$PARAM")" != Y ]; then
		echo "bench-fuse-uring: $PARAM is $OLD_PARAM and cannot be turned on; timing /dev/fuse only"
		OLD_PARAM=
		MODES=devfuse
	fi
fi

echo "kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg);" \
	"$FILES files, $ROUNDS rounds, $RUNS runs, threads: $THREADS, ring depth $DEPTH"

RESULTS=$WORK/results
: > "$RESULTS"
# One mount, its workloads, its unmount; appends "SECTION CONFIG workload key=value..." rows.
# Arguments: section, config label, transport, threads, CPUs of the server
# and of the client (taskset lists, or "" for no pinning), workloads.
one_mount() {
	local section=$1 config=$2 mode=$3 threads=$4 scpu=$5 ccpu=$6 works=$7
	local mnt=$WORK/mnt-$mode stats=$WORK/stats-$mode w dir
	local spin=() cpin=()
	[ -n "$scpu" ] && spin=(taskset -c "$scpu")
	[ -n "$ccpu" ] && cpin=(taskset -c "$ccpu")
	mkdir -p "$mnt"
	"${spin[@]}" "$WORK/probe" serve "$mode" "$mnt" "$stats" "$FILES" "$threads" "$DEPTH" 2> "$WORK/log-$mode" &
	DAEMON=$!
	for _ in $(seq 50); do [ -d "$mnt/d" ] && break; sleep 0.1; done
	if ! [ -d "$mnt/d" ]; then
		echo "bench-fuse-uring: the $mode server did not come up:" >&2
		cat "$WORK/log-$mode" >&2
		exit 1
	fi
	grep -r -q zzz "$mnt/d" || true # warm: entries, attributes, page cache
	for w in $works; do
		case $w in
		stat) "${cpin[@]}" "$WORK/probe" loop stat "$mnt/u" "$FILES" "$ROUNDS" "$stats" ;;
		open) "${cpin[@]}" "$WORK/probe" loop open "$mnt/d" "$FILES" "$ROUNDS" "$stats" ;;
		grep) "${cpin[@]}" "$WORK/probe" measure "$stats" grep "$FILES" -- grep -r zzz "$mnt/d" ;;
		esac | sed "s/^/$section $config /" >> "$RESULTS"
	done
	umount "$mnt"
	wait "$DAEMON" || true
	DAEMON=
}

# Part 1: nothing pinned (as a daemon runs by default), 1 and 2 threads.
for threads in $THREADS; do
	for run in $(seq "$RUNS"); do
		# Alternate which transport goes first, so a drift in load favours neither.
		if [ $((run % 2)) = 1 ]; then order=$MODES; else order=$(echo "$MODES" | tr ' ' '\n' | tac | tr '\n' ' '); fi
		for mode in $order; do one_mount "threads=$threads" "$mode" "$mode" "$threads" "" "" "stat open grep"; done
	done
done
grep -h "io_uring:" "$WORK"/log-uring 2>/dev/null | tail -1 || true

# Part 2: where the server runs. The client sits on CPU 0; the server on the
# same CPU, on the other one, or (uring, 2 threads) one thread per queue,
# each pinned to its CPU, which is how the kernel means the ring to be used.
if [ "${BENCH_PLACEMENT:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
	configs="devfuse-same:devfuse:1:0 devfuse-cross:devfuse:1:1 devfuse-2thr:devfuse:2:"
	[ "$MODES" = "devfuse uring" ] &&
		configs="$configs uring-same:uring:1:0 uring-cross:uring:1:1 uring-perq:uring:2:"
	ROUNDS=${BENCH_PLACEMENT_ROUNDS:-2} # a cross-CPU round trip is 15-25 times slower
	for run in $(seq "$RUNS"); do
		for c in $configs; do
			IFS=: read -r label mode threads scpu <<< "$c"
			one_mount "client-on-cpu0" "$label" "$mode" "$threads" "$scpu" 0 "stat open"
		done
	done
fi

python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[3:])
    rows.setdefault((f[0], f[2], f[1]), []).append(kv)  # (section, workload, config)
med = statistics.median
print("wall and CPU (server + client) microseconds per request; medians, then wall us/request per run")
print(f"{'section':>14} {'workload':>8} {'config':>13} {'req/file':>8} {'wall':>6} {'cpu':>6} {'on ring':>7}")
for (section, work, mode), runs in sorted(rows.items(), key=lambda kv: (kv[0][0][0] == "c", kv[0])):
    wall = [float(r["us_per_request"]) for r in runs]
    cpu = [float(r["cpu_us_per_request"]) for r in runs]
    reqs = [int(r["requests"]) / int(r["ops"]) for r in runs]
    ring = [int(r["on_ring"]) / max(1, int(r["requests"])) for r in runs]
    print(f"{section:>14} {work:>8} {mode:>13} {med(reqs):>8.2f} {med(wall):>6.2f} {med(cpu):>6.2f} {med(ring):>7.0%}  "
          + " ".join(f"{x:.1f}" for x in wall))
for (section, work, mode), runs in sorted(rows.items(), key=lambda kv: (kv[0][0][0] == "c", kv[0])):
    # uring against devfuse with the same threads; placements against devfuse-same.
    ref = "devfuse" if mode == "uring" else "devfuse-same" if section.startswith("client") else None
    if ref is None or mode == ref or (section, work, ref) not in rows:
        continue
    # Runs pair up by index (the configurations of a run ran back to back).
    base = rows[(section, work, ref)]
    out = []
    for key in ("us_per_request", "cpu_us_per_request"):
        pairs = [float(u[key]) / float(d[key]) for u, d in zip(runs, base)]
        out.append(f"{med(pairs):.2f} ({min(pairs):.2f}-{max(pairs):.2f})")
    print(f"{section} {work:>4}: {mode}/{ref} wall {out[0]}, cpu {out[1]}; median of runs (range)")
EOF
