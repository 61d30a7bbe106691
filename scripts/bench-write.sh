#!/usr/bin/env bash
# Benchmark of the cutf8fs write path (issue 4). Reports, never asserts.
#
# In one run, on the same machine and the same generated text (mostly
# Latin/ASCII, with Greek, Cyrillic, CJK and emoji), writes go to four
# targets side by side:
#   native    a plain directory on the same disk
#   bindfs    bindfs -o big_writes (Debian's bindfs is built on libfuse 2.9,
#             where big_writes still matters: without it the kernel sends
#             4 KiB writes, with it 128 KiB ones)
#   gocryptfs a gocryptfs mount (FUSE, encrypts)
#   cutf8fs   target/release/cutf8fs over an empty backing directory, so the
#             files written through it become Corrected UTF-8
# Cases (times in seconds, median of REPS=3 runs):
#   cp       cp of a SIZE_MIB (1024) MiB text file into the target
#   dd       dd if=that file of=TARGET bs=1M conv=fsync
#   tar      tar -x of a FILES (2000) file text tree (tarball made outside)
#   app-1M   APPENDS (10000) appends of one line, open/append/close each, to
#            a 1 MiB file
#   app-big  the same on a SIZE_MIB file (cutf8fs should be flat in size)
#   vim-open vim -es loading the VIM_MIB (100) MiB file and quitting
#   vim-save vim -es loading it, adding a line and saving (:wq)
# Before each timed run: sync, drop caches, then read the source back into
# the page cache, so the run measures the target's write path and not the
# source disk. The table gives the cutf8fs / faster-peer ratio (faster of
# bindfs and gocryptfs; below 1: cutf8fs is faster).
#
# A failed run shows as "fail" in the table instead of stopping the
# benchmark. (The cutf8fs daemon holds one descriptor per inode the kernel
# remembers and lifts its soft open-file limit to the hard one at start, so
# a 2000-file tar -x works under a login shell's `ulimit -Sn 1024`.)
# Needs root (mounts, drops caches), bindfs, gocryptfs, vim, python3.
# Usage: scripts/bench-write.sh [WORKDIR_PARENT]   (default /var/tmp)
# Env: SIZE_MIB (1024), VIM_MIB (100), FILES (2000), APPENDS (10000), REPS (3),
#      TARGETS ("native bindfs gocryptfs cutf8fs"), CASES (all of the above).
# The work directory (a fresh mktemp -d under WORKDIR_PARENT, which should be
# a disk filesystem, not tmpfs) is unmounted and removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

PARENT=${1:-/var/tmp}
SIZE_MIB=${SIZE_MIB:-1024}
VIM_MIB=${VIM_MIB:-100}
FILES=${FILES:-2000}
APPENDS=${APPENDS:-10000}
REPS=${REPS:-3}
TARGETS=${TARGETS:-native bindfs gocryptfs cutf8fs}
CASES=${CASES:-cp dd tar app-1M app-big vim-open vim-save}

[ "$(id -u)" -eq 0 ] || { echo "bench-write: run as root (drops caches, mounts)" >&2; exit 1; }
for t in bindfs gocryptfs vim python3 fusermount3; do
    command -v "$t" >/dev/null || { echo "bench-write: needs $t (apt-get install -y bindfs gocryptfs vim)" >&2; exit 1; }
done
cargo build --release --bins --quiet
CUTF8FS=$REPO/target/release/cutf8fs

W=$(mktemp -d "$PARENT/cutf8fs-bench-write.XXXXXX")
SRC=$W/src
mkdir -p "$SRC" "$W/native" "$W/bindfs-back" "$W/bindfs" \
    "$W/gocryptfs-cipher" "$W/gocryptfs" "$W/cutf8fs-back" "$W/cutf8fs"

umount_all() {
    for m in "$W/bindfs" "$W/gocryptfs" "$W/cutf8fs"; do
        if mountpoint -q "$m"; then
            fusermount3 -u "$m" 2>/dev/null || fusermount -u "$m" 2>/dev/null || umount -l "$m"
        fi
    done
}
cleanup() {
    umount_all
    sleep 0.3
    umount_all
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench-write: $*" >&2; }

# --- data (outside every target) --------------------------------------------
log "generating $SIZE_MIB MiB + $VIM_MIB MiB + 1 MiB of text and a $FILES-file tree in $W"
python3 - "$SRC" "$SIZE_MIB" "$VIM_MIB" "$FILES" <<'PY'
import os, random, sys
src, size_mib, vim_mib, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(4)
latin = ["the", "of", "and", "archive", "letter", "write", "append", "file", "mount",
         "between", "system", "value", "page", "number", "reader", "Straße", "naïve",
         "café", "données", "über", "año", "zürich", "façade", "Ångström"]
other = ["λόγος", "καλημέρα", "ελληνικά", "κόσμε", "привет", "словарь",
         "日本語", "文字化け", "漢字", "中文字符", "한국어", "😀", "🎉", "emoji🚀"]
def line():
    n = rnd.randint(5, 16)
    return " ".join(rnd.choice(other) if rnd.random() < 0.12 else rnd.choice(latin)
                    for _ in range(n)) + "\n"
block = "".join(line() for _ in range(60000)).encode()      # ~4 MiB, UTF-8
def make(path, mib):
    left = mib << 20
    with open(path, "wb") as f:
        while left >= len(block):
            f.write(block)
            left -= len(block)
        f.write(block[:block.rfind(b"\n", 0, left) + 1])
make(os.path.join(src, "big.txt"), size_mib)
make(os.path.join(src, "vim.txt"), vim_mib)
make(os.path.join(src, "small.txt"), 1)
tree = os.path.join(src, "tree")
for i in range(files):
    d = os.path.join(tree, "d%02d" % (i % 40))
    os.makedirs(d, exist_ok=True)
    start = rnd.randrange(0, len(block) - 40000)
    chunk = block[start:start + rnd.randint(4000, 28000)]
    chunk = chunk[chunk.find(b"\n") + 1:chunk.rfind(b"\n") + 1]
    with open(os.path.join(d, "f%04d.txt" % i), "wb") as f:
        f.write(chunk)
PY
tar -cf "$SRC/tree.tar" -C "$SRC" tree
rm -rf "$SRC/tree"

cat > "$SRC/append.py" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
line = "appended line: café λόγος 日本語 🎉 and some ASCII to make it longer\n"
for i in range(n):
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
PY

# --- mounts -----------------------------------------------------------------
gocryptfs -q -init -extpass 'echo pw' "$W/gocryptfs-cipher" >/dev/null
mount_all() {
    bindfs -o big_writes "$W/bindfs-back" "$W/bindfs"
    gocryptfs -q -nosyslog -extpass 'echo pw' "$W/gocryptfs-cipher" "$W/gocryptfs"
    "$CUTF8FS" "$W/cutf8fs-back" "$W/cutf8fs"
}
mount_all
for m in bindfs gocryptfs cutf8fs; do
    mountpoint -q "$W/$m" || { echo "bench-write: $m did not mount" >&2; exit 1; }
done

# --- timing helpers ---------------------------------------------------------
cold_src() { # sync, drop caches, then bring the sources back into the page cache
    sync
    echo 3 > /proc/sys/vm/drop_caches
    cat "$@" >/dev/null
}
secs() { # run "$@" quietly, print elapsed seconds
    local s e
    s=$(date +%s.%N)
    if ! "$@" >/dev/null 2>"$W/err"; then
        echo "bench-write: failed: $* ($(sort -u "$W/err" | head -2 | tr '\n' ' '))" >&2
        echo fail
        return 0
    fi
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'
}
median() { # "fail" if any run failed
    case " $* " in *" fail "*) echo fail; return ;; esac
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

export LC_ALL=C.UTF-8
vim_open() { vim -Nu NONE -n -es -c 'q' "$1"; }
vim_save() { vim -Nu NONE -n -es -c 'normal Gox' -c 'wq' "$1"; }

# one_run CASE DIR REP: prepare (untimed), then print the time of one run
one_run() {
    local c=$1 d=$2 r=$3
    case $c in
        cp)
            rm -f "$d/cp.txt"; cold_src "$SRC/big.txt"
            secs cp "$SRC/big.txt" "$d/cp.txt" ;;
        dd)
            rm -f "$d/dd.txt"; cold_src "$SRC/big.txt"
            secs dd if="$SRC/big.txt" of="$d/dd.txt" bs=1M conv=fsync ;;
        tar)
            # A fresh directory each time, all removed after the case: on an
            # ext4 without journal, creating files right after deleting
            # thousands scans the recently deleted inodes (recently_deleted()),
            # which would swamp the numbers.
            mkdir "$d/tar$r"; cold_src "$SRC/tree.tar"
            secs tar -xf "$SRC/tree.tar" -C "$d/tar$r" ;;
        app-1M)
            [ -f "$d/app-1M.txt" ] || cp "$SRC/small.txt" "$d/app-1M.txt"
            cold_src "$SRC/append.py"
            secs python3 "$SRC/append.py" "$d/app-1M.txt" "$APPENDS" ;;
        app-big)
            [ -f "$d/app-big.txt" ] || cp "$SRC/big.txt" "$d/app-big.txt"
            cold_src "$SRC/append.py"
            secs python3 "$SRC/append.py" "$d/app-big.txt" "$APPENDS" ;;
        vim-open)
            [ -f "$d/vim.txt" ] || cp "$SRC/vim.txt" "$d/vim.txt"
            cold_src /usr/bin/vim.basic
            secs vim_open "$d/vim.txt" ;;
        vim-save)
            [ -f "$d/vim.txt" ] || cp "$SRC/vim.txt" "$d/vim.txt"
            cold_src /usr/bin/vim.basic
            secs vim_save "$d/vim.txt" ;;
    esac
}

declare -A T
START=$(date +%s)
for c in $CASES; do
    for t in $TARGETS; do
        runs=()
        for ((r = 1; r <= REPS; r++)); do
            runs+=("$(one_run "$c" "$W/$t" "$r")")
        done
        T[$c,$t]=$(median "${runs[@]}")
        log "$c $t: ${runs[*]} -> median ${T[$c,$t]} s"
        # Large files are not needed once their case is done.
        case $c in
            cp) rm -f "$W/$t/cp.txt" ;;
            dd) rm -f "$W/$t/dd.txt" ;;
            app-big) rm -f "$W/$t/app-big.txt" ;;
        esac
    done
    [ "$c" = tar ] && for t in $TARGETS; do rm -rf "$W/$t"/tar[0-9]*; done
done
ELAPSED=$(( $(date +%s) - START ))

# --- sanity: what cutf8fs left in its backing directory ---------------------
MAGIC_HEX="efb79dedb2ae000a"
magic_of() { head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n'; }
enc_of() { [ "$(magic_of "$1")" = "$MAGIC_HEX" ] && echo corrected || echo raw; }
CHECK=""
if [[ " $TARGETS " == *" cutf8fs "* ]]; then
    for f in app-1M.txt vim.txt; do
        [ -f "$W/cutf8fs-back/$f" ] && CHECK+="$f $(enc_of "$W/cutf8fs-back/$f"); "
    done
    # A fresh copy, checked end to end (read back through the mount).
    cp "$SRC/small.txt" "$W/cutf8fs/check.txt"
    CHECK+="new file $(enc_of "$W/cutf8fs-back/check.txt")"
    cmp -s "$SRC/small.txt" "$W/cutf8fs/check.txt" && CHECK+=" (reads back equal)" || CHECK+=" (READS BACK DIFFERENT)"
fi

# --- table ------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
faster() { # faster of bindfs and gocryptfs among the targets run
    local best="" t
    for t in bindfs gocryptfs; do
        [[ "${T[$1,$t]:-}" =~ ^[0-9.]+$ ]] || continue
        if [ -z "$best" ] || awk -v a="${T[$1,$t]}" -v b="${T[$1,$best]}" 'BEGIN { exit !(a < b) }'; then
            best=$t
        fi
    done
    echo "$best"
}
{
    echo "cutf8fs write benchmark ($(date -u +%Y-%m-%d), $(uname -r), $(nproc) CPUs, $(bindfs --version | head -1), $(gocryptfs --version | cut -d';' -f1))"
    echo "big file $SIZE_MIB MiB, vim file $VIM_MIB MiB, tree $FILES files ($(( $(stat -c %s "$SRC/tree.tar") >> 20 )) MiB tar), $APPENDS appends; median of $REPS; ${ELAPSED} s in all"
    echo "times in seconds; ratio = cutf8fs / faster peer (below 1: cutf8fs is faster); ulimit -n $(ulimit -n)"
    [ -n "$CHECK" ] && echo "cutf8fs backing: $CHECK"
    echo
    printf '| case |'; for t in $TARGETS; do printf ' %s |' "$t"; done; echo ' faster peer | ratio |'
    printf '|---|'; for t in $TARGETS; do printf -- '---|'; done; echo '---|---|'
    for c in $CASES; do
        printf '| %s |' "$c"
        for t in $TARGETS; do printf ' %s |' "${T[$c,$t]:-}"; done
        p=$(faster "$c")
        if [ -n "$p" ] && [ -n "${T[$c,cutf8fs]:-}" ]; then
            printf ' %s | %s |\n' "$p" "$(ratio "${T[$c,cutf8fs]}" "${T[$c,$p]}")"
        else
            echo ' | |'
        fi
    done
} | tee "$PARENT/cutf8fs-bench-write.md"
