#!/usr/bin/env python3
"""One user's storm against another user's small reads (issue 35, fair
turns): the two roles that tests/fair_turns.rs and scripts/bench-fair.sh
run as two real users.

  fair-turns.py storm DIR PROCS CTL LABEL
      PROCS processes each cat(1) their files s{k}_* in DIR (open, read,
      close: requests for the daemon), check what they read, and look up
      a name that does not exist, while CTL/go-LABEL exists, idle
      otherwise, until CTL/stop exists. Prints "ops N bad B" (B: reads
      that saw wrong contents, or lookups that found a name).
  fair-turns.py victim CTL N ROUNDS LABEL=DIR...
      Each round, for each LABEL in turn: N open-read-close of the files
      v* in DIR timed alone, then N more while CTL/go-LABEL lets that
      LABEL's storm run. Prints per LABEL "LABEL alone_us A storm_us S
      bad B" (A, S: medians in microseconds).
"""
import os
import sys
import time


# One storm process: cat(1) reads its 40 files in one go (little work
# outside the daemon: the daemon, not the CPU, is what the storm loads)
# and the result is compared with what they hold; then a name that does
# not exist is looked up.
STORM_LOOP = """
i=0 bad=0 ops=0
while [ ! -e "$3/stop" ]; do
    if [ ! -e "$3/go-$4" ]; then sleep 0.005; continue; fi
    cat "$1"/s"$2"_* | cmp -s - "$5" || bad=$((bad + 1))
    i=$((i + 1))
    [ -e "$1/none-$$-$i" ] && bad=$((bad + 1))
    ops=$((ops + 1))
done
echo "$ops $bad"
"""


def storm(d, procs, ctl, label):
    import subprocess
    kids = []
    for k in range(procs):
        names = sorted((f for f in os.listdir(d) if f.startswith(f"s{k}_")))
        expect = os.path.join(ctl, f"expect-{label}-{k}-{os.getuid()}")
        if not os.path.exists(expect):
            with open(expect, "wb") as f:
                for n in names:
                    f.write((n + "\n").encode() * 8)
        kids.append(subprocess.Popen(
            ["sh", "-c", STORM_LOOP, "sh", d, str(k), ctl, label, expect],
            stdout=subprocess.PIPE))
    ops = bad = 0
    for p in kids:
        o, b = p.communicate()[0].split()
        ops += int(o)
        bad += int(b)
    print(f"ops {ops} bad {bad}")


def reads(d, n, times):
    names = sorted(f for f in os.listdir(d) if f.startswith("v"))
    bad = 0
    for i in range(n):
        name = names[i % len(names)]
        p = os.path.join(d, name)
        t = time.perf_counter_ns()
        fd = os.open(p, os.O_RDONLY)
        data = os.read(fd, 65536)
        os.close(fd)
        times.append(time.perf_counter_ns() - t)
        if data != (name + "\n").encode() * 8:
            bad += 1
    return bad


def median_us(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] / 1000


def victim(ctl, n, rounds, places):
    got = {label: ([], [], [0]) for label, _ in places}
    for _ in range(rounds):
        for label, d in places:
            alone, stormy, bad = got[label]
            bad[0] += reads(d, n, alone)
            go = os.path.join(ctl, "go-" + label)
            open(go, "w").close()
            time.sleep(0.2)
            bad[0] += reads(d, n, stormy)
            os.unlink(go)
            time.sleep(0.05)
    for label, _ in places:
        alone, stormy, bad = got[label]
        print(f"{label} alone_us {median_us(alone):.1f} storm_us {median_us(stormy):.1f} bad {bad[0]}")


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "storm":
        storm(a[2], int(a[3]), a[4], a[5])
    else:
        victim(a[2], int(a[3]), int(a[4]), [p.split("=", 1) for p in a[5:]])
