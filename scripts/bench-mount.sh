#!/usr/bin/env bash
# Benchmark of the cutf8fs read path. Reports, never asserts.
#
# The same text is stored twice: as Corrected UTF-8 (served by cutf8fs, which
# converts it on the fly) and as plain UTF-8 (served by bindfs, a plain FUSE
# mirror that converts nothing, and read natively beside both). Measured,
# cold (caches dropped, both mounts remounted, so cutf8fs also rebuilds its
# index) and warm (best of 3):
#   seq    sequential read of one BENCH_SIZE_MB (256) MiB file
#   rand   BENCH_PREADS (20000) random 4 KiB preads in that file
#   grep   grep -r over a tree of BENCH_FILES (2000) files
#   stat   stat of every file of that tree (find -printf %s)
#   tarc   tar -cf - of a mixed tree piped to wc -c (not to /dev/null: GNU
#          tar then skips reading the files): that text tree (Corrected
#          UTF-8 under cutf8fs) beside raw files: BENCH_MIXED_RAW_MB (192)
#          MiB of random bytes in 400 small (1-64 KiB) and some large
#          (1-16 MiB) files, a copy of this repository's .git/objects and the
#          release binaries; >= 2000 files and >= 200 MiB at the defaults
#          (the table's header line gives both). Also run on cutf8fs with
#          -o passthrough=off (a line under the table), and checked once
#          after timing (same archive size as native, diff -r equal; a wrong
#          tree shows as "fail").
# and prints a table with the cutf8fs/bindfs time ratios (< 1: cutf8fs is
# faster). Then the index database part, on BENCH_INDEX_FILES
# (10000) files of ~BENCH_INDEX_MB (1024) MiB in all plus one file of that
# size, medians of 3 cold runs (caches dropped, all remounted):
#   lsR    ls -lR of the tree          statall  stat of every file (find)
#   cat    sequential read of the big file
#   find   find -size +1k | wc -l
# for native, bindfs, cutf8fs with its index database (the tree was
# converted by `cutf8 migrate`, which records what it writes) and cutf8fs
# with -o index_db=none (every size learned by reading the file), and
# `ls -lR` right after a fresh `cutf8 migrate` of the tree (one run).
# Raw files (FUSE passthrough), on a raw (binary) file of BENCH_RAW_MB (1024)
# MiB, median of 3 warm: rawseq (sequential read), rawrand (BENCH_RAW_PREADS
# (200000) random 4 KiB preads), rawmmap (mmap, one byte read from every 4 KiB
# page), where cutf8fs also runs with -o passthrough=off (column "no-pt"), and
# the kernel's own stacking is measured beside it: a read-only overlayfs whose
# only layer is the native directory ("overlay": the same backing-file read
# path passthrough uses, without FUSE; the floor for any stacked file);
# BENCH_TESTS picks
# the read part's tests. Then the freshness part ("fresh"), on
# BENCH_FRESH_FILES (10000) small text files in 100 directories, for native,
# bindfs, cutf8fs (default options: BACKING watched, long caches) and cutf8fs
# -o watch=off (1 s caches), medians of 3: cold (caches dropped, remounted)
# and warm (after one warm-up) runs of
#   lsR    ls -lR        find   find -size +1k | wc -l
#   stat   stat of every file (find -printf with size, mode, owner, mtime)
#   grep   grep -r over every file
# and "busy" warm runs: before each, a native writer changes BACKING (appends
# a token to BENCH_FRESH_CHANGES (100) files, creates as many, deletes as
# many, renames as many), and after each the change is checked through the
# mount (every appended token found by grep -r, created names present,
# deleted and renamed-away ones absent; a miss shows as "stale N").
# The freshness part runs cutf8fs -o archive too (column "archive": no OPEN,
# FLUSH or RELEASE per file), counts the requests of one warm grep -r on the
# default mount and the archive, and, when the read part's raw.bin exists,
# reads it warm through both (archive has no passthrough).
# BENCH_CUTF8FS=PATH measures another cutf8fs binary (an older build, for
# A/B runs alternated with the current one).
# Then the big directory part ("bigdir"): cold ls -l of one directory of
# BENCH_BIGDIR_FILES (100000) files, native, bindfs, cutf8fs and -o archive,
# with the requests per entry.
# BENCH_PARTS="read index bigdir fresh" (default) picks the parts. Needs root (to drop caches and mount), bindfs (installed with
# apt-get if missing), cc and python3. Usage:
#   scripts/bench-mount.sh [WORKDIR]     (default /var/tmp/cutf8fs-bench)
# WORKDIR must be on a disk filesystem (not tmpfs) for cold numbers to mean
# anything; the generated data is kept there for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

W=${1:-${BENCH_DIR:-/var/tmp/cutf8fs-bench}}
SIZE_MB=${BENCH_SIZE_MB:-256}
FILES=${BENCH_FILES:-2000}
PREADS=${BENCH_PREADS:-20000}
RAW_PREADS=${BENCH_RAW_PREADS:-200000}
PARTS=${BENCH_PARTS:-read index bigdir fresh}
RAW_MB=${BENCH_RAW_MB:-1024}
MIXED_RAW_MB=${BENCH_MIXED_RAW_MB:-192}
TESTS=${BENCH_TESTS:-seq rand grep stat tarc rawseq rawrand rawmmap}

[ "$(id -u)" -eq 0 ] || { echo "bench-mount: run as root (drops caches, mounts)" >&2; exit 1; }
command -v bindfs >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bindfs >/dev/null
}
cargo build --release --bins --quiet
CUTF8=$REPO/target/release/cutf8
CUTF8FS=${BENCH_CUTF8FS:-$REPO/target/release/cutf8fs}

mkdir -p "$W"
W=$(cd "$W" && pwd)
NAT=$W/native CORR=$W/corrected MC=$W/mnt-cutf8fs MB=$W/mnt-bindfs MN=$W/mnt-cutf8fs-nopt
MO=$W/mnt-overlay
mkdir -p "$NAT" "$CORR" "$MC" "$MB" "$MN" "$MO" "$W/empty-lower"

# The middle of three numbers, one per line.
median3() { sort -g | sed -n 2p; }
# Unmounts each FUSE mount point given that is mounted.
fuse_umount() {
    for m; do
        if mountpoint -q "$m"; then fusermount3 -u "$m" || umount -l "$m"; fi
    done
}
umount_all() {
    fuse_umount "$MC" "$MB" "$MN"
    if mountpoint -q "$MO"; then umount "$MO" || umount -l "$MO"; fi
}
trap umount_all EXIT
umount_all

# --- data -------------------------------------------------------------------
STAMP="$SIZE_MB-$FILES-v2"
if [[ " $PARTS " == *" read "* ]] && [ "$(cat "$W/.data" 2>/dev/null)" != "$STAMP" ]; then
    echo "bench-mount: generating $SIZE_MB MiB and $FILES files in $W ..." >&2
    rm -rf "${NAT:?}"/* "${CORR:?}"/*
    python3 - "$NAT" "$SIZE_MB" "$FILES" <<'PY'
import os, random, sys
nat, size_mb, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(1)
# Mostly text that keeps its length in Corrected UTF-8 (Latin, Greek,
# Cyrillic, CJK, emoji), with a sprinkle of the length-changing ranges
# (U+0800-U+089F, U+10000-U+1109F) so the offset index has work to do.
words = ["the", "archive", "letter", "Straße", "naïve", "café", "λόγος", "καλημέρα",
         "привет", "словарь", "日本語", "文字化け", "漢字", "한국어", "emoji😀", "🎉",
         "données", "über", "año", "zürich", "ελληνικά", "κόσμε"]
rare = ["\u0800", "\u0840", "\u089f", "\U00010330", "\U00010000", "\U0001109f"]
def line():
    n = rnd.randint(4, 16)
    ws = [rnd.choice(words) for _ in range(n)]
    if rnd.random() < 0.05:
        ws.insert(rnd.randint(0, n), rnd.choice(rare))
    return " ".join(ws) + "\n"
block = "".join(line() for _ in range(60000)).encode()   # ~4 MiB
with open(os.path.join(nat, "big.txt"), "wb") as f:
    left = size_mb << 20
    while left > 0:
        part = block if left >= len(block) else block[:block.rfind(b"\n", 0, left) + 1]
        f.write(part); left -= len(block)
tree = os.path.join(nat, "tree")
for i in range(files):
    d = os.path.join(tree, "d%02d" % (i % 40))
    os.makedirs(d, exist_ok=True)
    start = rnd.randrange(0, len(block) - 40000)
    n = rnd.randint(4000, 28000)
    chunk = block[start:start + n]
    chunk = chunk[chunk.find(b"\n") + 1:chunk.rfind(b"\n") + 1]
    with open(os.path.join(d, "f%04d.txt" % i), "wb") as f:
        f.write(chunk)
PY
    (cd "$NAT" && find . -type d) | while read -r d; do mkdir -p "$CORR/$d"; done
    (cd "$NAT" && find . -type f) | while read -r f; do
        "$CUTF8" encode -o "$CORR/$f" "$NAT/$f"
    done
    echo "$STAMP" > "$W/.data"
fi
# The raw file: the same random bytes in both trees (no magic number, so
# cutf8fs serves it raw), separate inodes so each has its own page cache.
if [ "$(stat -c %s "$NAT/raw.bin" 2>/dev/null)" != $((RAW_MB << 20)) ]; then
    echo "bench-mount: generating a $RAW_MB MiB raw file ..." >&2
    head -c $((RAW_MB << 20)) /dev/urandom > "$NAT/raw.bin"
    cp "$NAT/raw.bin" "$CORR/raw.bin"
fi

# The mixed tree (tarc): the text tree, Corrected UTF-8 under CORR, beside
# raw files that are the same bytes in both trees.
MSTAMP="$STAMP-$MIXED_RAW_MB-v1"
if [[ " $PARTS " == *" read "* && " $TESTS " == *" tarc "* ]] \
        && [ "$(cat "$W/.mixed-data" 2>/dev/null)" != "$MSTAMP" ]; then
    echo "bench-mount: generating the mixed tree ($MIXED_RAW_MB MiB of random bytes, .git objects, binaries) ..." >&2
    rm -rf "$NAT/mixed" "$CORR/mixed"
    mkdir -p "$NAT/mixed/raw" "$NAT/mixed/bin"
    cp -a "$NAT/tree" "$NAT/mixed/text"
    python3 - "$NAT/mixed/raw" "$MIXED_RAW_MB" <<'PY'
import os, random, sys
raw, mb = sys.argv[1], int(sys.argv[2])
rnd = random.Random(3)
left = mb << 20
os.makedirs(os.path.join(raw, "small"))
os.makedirs(os.path.join(raw, "large"))
for i in range(400):
    n = min(left, rnd.randint(1 << 10, 64 << 10))
    with open(os.path.join(raw, "small", "r%03d.bin" % i), "wb") as f:
        f.write(rnd.randbytes(n))
    left -= n
i = 0
while left > 0:
    n = min(left, rnd.randint(1 << 20, 16 << 20))
    with open(os.path.join(raw, "large", "r%03d.bin" % i), "wb") as f:
        f.write(rnd.randbytes(n))
    left -= n
    i += 1
PY
    cp -a "$(git -C "$REPO" rev-parse --path-format=absolute --git-common-dir)/objects" "$NAT/mixed/git-objects"
    cp -a "$CUTF8" "$CUTF8FS" "$NAT/mixed/bin/"
    # CORR: the same raw files, the text tree as already encoded above.
    mkdir -p "$CORR/mixed"
    for d in raw bin git-objects; do cp -a "$NAT/mixed/$d" "$CORR/mixed/$d"; done
    cp -a "$CORR/tree" "$CORR/mixed/text"
    echo "$MSTAMP" > "$W/.mixed-data"
fi

# --- tools ------------------------------------------------------------------
PREAD=$W/pread4k
if [ ! -x "$PREAD" ]; then
    cat > "$W/pread4k.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
/* pread4k FILE N: N preads of 4 KiB at pseudo-random 4 KiB-aligned offsets. */
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror("open"); return 1; }
    struct stat st;
    fstat(fd, &st);
    long n = atol(argv[2]), blocks = st.st_size / 4096 - 1;
    unsigned long long s = 88172645463325252ULL;
    char buf[4096];
    long long total = 0;
    for (long i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        ssize_t r = pread(fd, buf, sizeof buf, (off_t)(s % blocks) * 4096);
        if (r < 0) { perror("pread"); return 1; }
        total += r;
    }
    printf("%lld\n", total);
    return 0;
}
C
    cc -O2 -o "$PREAD" "$W/pread4k.c"
fi

MMAPREAD=$W/mmapread
if [ ! -x "$MMAPREAD" ]; then
    cat > "$W/mmapread.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
/* mmapread FILE: maps FILE and reads one byte of every 4 KiB page, in order. */
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) { perror("open"); return 1; }
    struct stat st;
    fstat(fd, &st);
    const volatile unsigned char *p = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned long sum = 0;
    for (off_t o = 0; o < st.st_size; o += 4096) sum += p[o];
    printf("%lu\n", sum);
    return 0;
}
C
    cc -O2 -o "$MMAPREAD" "$W/mmapread.c"
fi

mount_all() {
    # The default options: passthrough (auto) is on for this read-write
    # mount as for a read-only one.
    "$CUTF8FS" "$CORR" "$MC"
    "$CUTF8FS" "$CORR" "$MN" -o passthrough=off
    bindfs "$NAT" "$MB"
    # A read-only overlay of the native tree: lower layers only (the
    # kernel wants two without an upper one; the second is empty).
    mount -t overlay overlay -o ro,lowerdir="$NAT:$W/empty-lower" "$MO"
}
mount_all

cold() {
    umount_all
    sync
    echo 3 > /proc/sys/vm/drop_caches
    mount_all
}

secs() { # run "$@" quietly, print elapsed seconds
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f", e - s }'
}

min3() { # best of three
    local a b c
    a=$(secs "$@"); b=$(secs "$@"); c=$(secs "$@")
    printf '%s\n%s\n%s\n' "$a" "$b" "$c" | sort -g | head -1
}

med3() { # median of three
    local a b c
    a=$(secs "$@"); b=$(secs "$@"); c=$(secs "$@")
    printf '%s\n%s\n%s\n' "$a" "$b" "$c" | sort -g | sed -n 2p
}

export LC_ALL=C
run_seq() { cat "$1/big.txt"; }
run_rand() { "$PREAD" "$1/big.txt" "$PREADS"; }
run_grep() { grep -rc "no such words here" "$1/tree"; }
run_stat() { find "$1/tree" -type f -printf '%s\n'; }
run_tarc() { tar -cf - -C "$1" mixed | wc -c; }
run_rawseq() { cat "$1/raw.bin"; }
run_rawrand() { "$PREAD" "$1/raw.bin" "$RAW_PREADS"; }
run_rawmmap() { "$MMAPREAD" "$1/raw.bin"; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
declare -A T
if [[ " $PARTS " == *" read "* ]]; then
for test in $TESTS; do
    targets="native bindfs cutf8fs" warm=min3
    case $test in
        raw*) targets="native overlay bindfs cutf8fs no-pt" warm=med3 ;;
        tarc) targets="native bindfs cutf8fs no-pt" ;;
    esac
    for target in $targets; do
        case $target in
            native) dir=$NAT ;;
            overlay) dir=$MO ;;
            bindfs) dir=$MB ;;
            cutf8fs) dir=$MC ;;
            no-pt) dir=$MN ;;
        esac
        cold
        T[$test,$target,cold]=$(secs "run_$test" "$dir")
        T[$test,$target,warm]=$($warm "run_$test" "$dir")
        echo "bench-mount: $test $target cold ${T[$test,$target,cold]} s, warm ${T[$test,$target,warm]} s" >&2
    done
done

# tarc, checked once after timing: the archive from each mount is as long as
# native's and the trees are equal; if not, that mount's times are "fail".
TARC_NOTE=""
if [[ " $TESTS " == *" tarc "* ]]; then
    nat_bytes=$(run_tarc "$NAT")
    TARC_NOTE="tarc: $(find "$NAT/mixed" -type f | wc -l) files, $(du -sm "$NAT/mixed" | cut -f1) MiB ($(find "$NAT/mixed/text" -type f | wc -l) text files, Corrected UTF-8 under cutf8fs; raw: $MIXED_RAW_MB MiB of random bytes, .git objects, binaries); archive $nat_bytes bytes"
    for target in bindfs cutf8fs no-pt; do
        case $target in bindfs) dir=$MB ;; cutf8fs) dir=$MC ;; no-pt) dir=$MN ;; esac
        bytes=$(run_tarc "$dir" 2>/dev/null || echo "error")
        if [ "$bytes" != "$nat_bytes" ] || ! diff -r "$NAT/mixed" "$dir/mixed" >/dev/null 2>&1; then
            echo "bench-mount: tarc: $target gives a wrong tree (archive $bytes bytes, native $nat_bytes; or diff -r differs)" >&2
            T[tarc,$target,cold]=fail T[tarc,$target,warm]=fail
            TARC_NOTE+="; $target WRONG"
        fi
    done
    [[ "$TARC_NOTE" == *WRONG* ]] || TARC_NOTE+=", the same from every mount, diff -r equal"
fi

big_mb=$(( $(stat -c %s "$NAT/big.txt") >> 20 ))
view_mb=$(( $(stat -c %s "$MC/big.txt") >> 20 ))
{
    echo "cutf8fs read benchmark ($(date -u +%Y-%m-%d), $(uname -r), $(nproc) CPUs)"
    echo "big.txt: $big_mb MiB UTF-8 (view $view_mb MiB); tree: $FILES files; rand: $PREADS x 4 KiB preads"
    echo "times in seconds; ratio = cutf8fs / bindfs (below 1: cutf8fs faster)"
    echo
    echo "| test | native cold | native warm | bindfs cold | bindfs warm | cutf8fs cold | cutf8fs warm | ratio cold | ratio warm |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for test in $TESTS; do
        case $test in raw*) continue ;; esac
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$test" \
            "${T[$test,native,cold]}" "${T[$test,native,warm]}" \
            "${T[$test,bindfs,cold]}" "${T[$test,bindfs,warm]}" \
            "${T[$test,cutf8fs,cold]}" "${T[$test,cutf8fs,warm]}" \
            "$(ratio "${T[$test,cutf8fs,cold]}" "${T[$test,bindfs,cold]}")" \
            "$(ratio "${T[$test,cutf8fs,warm]}" "${T[$test,bindfs,warm]}")"
    done
    if [ -n "$TARC_NOTE" ]; then
        echo
        echo "$TARC_NOTE"
        echo "tarc cutf8fs -o passthrough=off: cold ${T[tarc,no-pt,cold]}, warm ${T[tarc,no-pt,warm]}; cutf8fs / native: cold $(ratio "${T[tarc,cutf8fs,cold]}" "${T[tarc,native,cold]}"), warm $(ratio "${T[tarc,cutf8fs,warm]}" "${T[tarc,native,warm]}")"
    fi
    case " $TESTS " in *" raw"*)
        echo
        echo "raw.bin: $RAW_MB MiB of random bytes; cutf8fs reads it by passthrough, no-pt is"
        echo "cutf8fs -o passthrough=off, overlay a read-only overlayfs of the native tree;"
        echo "rawrand: $RAW_PREADS preads; warm = median of 3; ratios = time / native time"
        echo
        echo "| test | native cold | native warm | overlay cold | overlay warm | bindfs cold | bindfs warm | cutf8fs cold | cutf8fs warm | no-pt cold | no-pt warm | cutf8fs/native cold | cutf8fs/native warm | overlay/native cold | overlay/native warm | no-pt/native warm | bindfs/native warm |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for test in $TESTS; do
            case $test in raw*) ;; *) continue ;; esac
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$test" \
                "${T[$test,native,cold]}" "${T[$test,native,warm]}" \
                "${T[$test,overlay,cold]}" "${T[$test,overlay,warm]}" \
                "${T[$test,bindfs,cold]}" "${T[$test,bindfs,warm]}" \
                "${T[$test,cutf8fs,cold]}" "${T[$test,cutf8fs,warm]}" \
                "${T[$test,no-pt,cold]}" "${T[$test,no-pt,warm]}" \
                "$(ratio "${T[$test,cutf8fs,cold]}" "${T[$test,native,cold]}")" \
                "$(ratio "${T[$test,cutf8fs,warm]}" "${T[$test,native,warm]}")" \
                "$(ratio "${T[$test,overlay,cold]}" "${T[$test,native,cold]}")" \
                "$(ratio "${T[$test,overlay,warm]}" "${T[$test,native,warm]}")" \
                "$(ratio "${T[$test,no-pt,warm]}" "${T[$test,native,warm]}")" \
                "$(ratio "${T[$test,bindfs,warm]}" "${T[$test,native,warm]}")"
        done ;;
    esac
} | tee "$W/results.md"
fi

# --- index database --------------------------------------------------------
if [[ " $PARTS " == *" index "* ]]; then
umount_all
IFILES=${BENCH_INDEX_FILES:-10000}
IMB=${BENCH_INDEX_MB:-1024}
INAT=$W/index-native ICORR=$W/index-corrected MN=$W/mnt-nodb
mkdir -p "$INAT" "$MN"
ISTAMP="$IMB-$IFILES-v1"
if [ "$(cat "$W/.index-data" 2>/dev/null)" != "$ISTAMP" ]; then
    echo "bench-mount: generating $IFILES files ($IMB MiB) and a $IMB MiB file in $INAT ..." >&2
    rm -rf "${INAT:?}"/* "$ICORR"
    python3 - "$INAT" "$IMB" "$IFILES" <<'PY'
import os, random, sys
nat, mb, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(2)
words = ["the", "archive", "letter", "Straße", "naïve", "café", "λόγος", "привет",
         "日本語", "漢字", "한국어", "emoji😀", "données", "über", "año"]
rare = ["\u0800", "\u0840", "\U00010330", "\U0001109f"]
def line():
    ws = [rnd.choice(words) for _ in range(rnd.randint(4, 16))]
    if rnd.random() < 0.05:
        ws.insert(0, rnd.choice(rare))
    return " ".join(ws) + "\n"
block = "".join(line() for _ in range(60000)).encode()   # ~4 MiB
def write(path, size):
    with open(path, "wb") as f:
        while size > 0:
            part = block[:size]
            f.write(part); size -= len(part)
write(os.path.join(nat, "big.txt"), mb << 20)
avg = (mb << 20) // files
for i in range(files):
    d = os.path.join(nat, "tree", "d%02d" % (i % 100))
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "f%05d.txt" % i), rnd.randint(avg // 2, avg * 3 // 2))
PY
    echo "$ISTAMP" > "$W/.index-data"
fi
fresh_migrated() { # $1: a fresh converted copy of the tree, recorded by migrate
    rm -rf "$1"
    cp -a "$INAT" "$1"
    "$CUTF8" migrate --no-progress -q "$1" >/dev/null
}
[ -d "$ICORR" ] || fresh_migrated "$ICORR"

imount() {
    "$CUTF8FS" "$ICORR" "$MC"
    "$CUTF8FS" -o index_db=none "$ICORR" "$MN"
    bindfs "$INAT" "$MB"
}
iumount() { fuse_umount "$MC" "$MN" "$MB"; }
trap iumount EXIT
icold() { iumount; sync; echo 3 > /proc/sys/vm/drop_caches; imount; }
run_lsR() { ls -lR "$1/tree"; }
run_statall() { find "$1/tree" -type f -printf '%s\n'; }
run_cat() { cat "$1/big.txt"; }
run_find() { find "$1/tree" -size +1k | wc -l; }
declare -A I
for test in lsR statall cat find; do
    for target in native bindfs cutf8fs nodb; do
        case $target in
            native) dir=$INAT ;; bindfs) dir=$MB ;; cutf8fs) dir=$MC ;; nodb) dir=$MN ;;
        esac
        I[$test,$target]=$(for _ in 1 2 3; do icold >&2; secs "run_$test" "$dir"; echo; done | median3)
        echo "bench-mount: index $test $target ${I[$test,$target]} s" >&2
    done
done
iumount
# Right after a migration: a fresh copy, migrated, caches dropped, mounted.
fresh_migrated "$W/index-fresh"
sync; echo 3 > /proc/sys/vm/drop_caches
"$CUTF8FS" "$W/index-fresh" "$MC"
after_migrate=$(secs run_lsR "$MC")
fusermount3 -u "$MC"
rm -rf "$W/index-fresh"
tree_mb=$(( $(du -sm "$INAT/tree" | cut -f1) ))
{
    echo "cutf8fs index database benchmark ($(date -u +%Y-%m-%d), $(uname -r), $(nproc) CPUs)"
    echo "tree: $IFILES files, $tree_mb MiB on disk; big.txt: $IMB MiB; medians of 3 cold runs (s)"
    echo "ratio = cutf8fs (with its index database) / bindfs; nodb = cutf8fs -o index_db=none"
    echo
    echo "| test | native | bindfs | cutf8fs | nodb | ratio | ratio to native |"
    echo "|---|---|---|---|---|---|---|"
    for test in lsR statall cat find; do
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$test" \
            "${I[$test,native]}" "${I[$test,bindfs]}" "${I[$test,cutf8fs]}" "${I[$test,nodb]}" \
            "$(ratio "${I[$test,cutf8fs]}" "${I[$test,bindfs]}")" \
            "$(ratio "${I[$test,cutf8fs]}" "${I[$test,native]}")"
    done
    echo
    echo "ls -lR right after cutf8 migrate of the tree (cold, one run): $after_migrate s"
} | tee "$W/results-index.md"
fi

# --- one big directory ------------------------------------------------------
# Cold `ls -l` of one directory of BENCH_BIGDIR_FILES (100000) small
# corrected files (converted by `cutf8 migrate`, so sizes come from the index
# database), medians of 3 cold runs (caches dropped, remounted), for native,
# bindfs, cutf8fs and cutf8fs -o archive, and the requests per entry of one
# cold `ls -l` through cutf8fs (the daemon's counters).
if [[ " $PARTS " == *" bigdir "* ]]; then
umount_all
BFILES=${BENCH_BIGDIR_FILES:-100000}
BNAT=$W/bigdir-native BCORR=$W/bigdir-corrected MA=$W/mnt-archive
mkdir -p "$MA"
BSTAMP="$BFILES-v1"
if [ "$(cat "$W/.bigdir-data" 2>/dev/null)" != "$BSTAMP" ]; then
    echo "bench-mount: generating $BFILES files in one directory ..." >&2
    rm -rf "$BNAT" "$BCORR"
    python3 - "$BNAT" "$BFILES" <<'PY'
import os, sys
d, files = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for i in range(files):
    with open(os.path.join(d, "f%06d.txt" % i), "w") as f:
        f.write("Grüße, naïve café %d\n" % i)
PY
    cp -a "$BNAT" "$BCORR"
    "$CUTF8" migrate --no-progress -q "$BCORR" >/dev/null
    echo "$BSTAMP" > "$W/.bigdir-data"
fi
bmount() { "$CUTF8FS" "$BCORR" "$MC"; "$CUTF8FS" -o archive "$BCORR" "$MA"; bindfs "$BNAT" "$MB"; }
bumount() { fuse_umount "$MC" "$MA" "$MB"; }
bcold() { bumount; sync; echo 3 > /proc/sys/vm/drop_caches; bmount; }
trap bumount EXIT
declare -A BD
for target in native bindfs cutf8fs archive; do
    case $target in
        native) dir=$BNAT ;; bindfs) dir=$MB ;; cutf8fs) dir=$MC ;; archive) dir=$MA ;;
    esac
    BD[$target]=$(for _ in 1 2 3; do bcold >&2; secs ls -l "$dir"; echo; done | median3)
    echo "bench-mount: bigdir ls -l $target cold ${BD[$target]} s" >&2
done
bcold >&2
breqs() { "$CUTF8FS" --stats "$MC" 2>/dev/null | awk '/^requests/ { on = 1; next } on && /^  [a-z]/ { print $1, $2; next } { on = 0 }'; }
before=$(breqs); ls -l "$MC" >/dev/null; after=$(breqs)
bspent=$(awk 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; if (d > 0) printf "%s %d (%.3f per entry); ", $1, d, d / n }' n="$BFILES" <(echo "$before") <(echo "$after"))
bumount
trap - EXIT
{
    echo "cutf8fs big directory benchmark ($(date -u +%Y-%m-%d), $(git -C "$REPO" rev-parse --short HEAD), $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
    echo "one directory of $BFILES files; cold ls -l (caches dropped, remounted), medians of 3 (s)"
    echo
    echo "| native | bindfs | cutf8fs | archive | cutf8fs/native | cutf8fs/bindfs | archive/native | bindfs/native |"
    echo "|---|---|---|---|---|---|---|---|"
    echo "| ${BD[native]} | ${BD[bindfs]} | ${BD[cutf8fs]} | ${BD[archive]} | $(ratio "${BD[cutf8fs]}" "${BD[native]}") | $(ratio "${BD[cutf8fs]}" "${BD[bindfs]}") | $(ratio "${BD[archive]}" "${BD[native]}") | $(ratio "${BD[bindfs]}" "${BD[native]}") |"
    echo
    echo "requests of one cold ls -l through cutf8fs: $bspent"
} | tee "$W/results-bigdir.md"
fi

# --- freshness and round trips ----------------------------------------------
[[ " $PARTS " == *" fresh "* ]] || exit 0
umount_all
FFILES=${BENCH_FRESH_FILES:-10000}
FCHANGES=${BENCH_FRESH_CHANGES:-100}
FNAT=$W/fresh-native FCORR=$W/fresh-corrected MW=$W/mnt-nowatch MA=$W/mnt-archive
mkdir -p "$MW" "$MA"
FSTAMP="$FFILES-v1"
if [ "$(cat "$W/.fresh-data" 2>/dev/null)" != "$FSTAMP" ]; then
    echo "bench-mount: generating $FFILES files in $FNAT ..." >&2
    rm -rf "$FNAT" "$FCORR"
    python3 - "$FNAT" "$FFILES" <<'PY'
import os, random, sys
nat, files = sys.argv[1], int(sys.argv[2])
rnd = random.Random(4)
words = ["the", "archive", "letter", "Straße", "naïve", "café", "λόγος", "привет",
         "日本語", "漢字", "한국어", "emoji😀", "données", "über", "año"]
for i in range(files):
    d = os.path.join(nat, "tree", "d%02d" % (i % 100))
    os.makedirs(d, exist_ok=True)
    n = rnd.randint(20, 120)
    text = "".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(4, 12))) + "\n"
                   for _ in range(n))
    with open(os.path.join(d, "f%05d.txt" % i), "w") as f:
        f.write(text)
PY
    cp -a "$FNAT" "$FCORR"
    "$CUTF8" migrate --no-progress -q "$FCORR" >/dev/null
    echo "$FSTAMP" > "$W/.fresh-data"
fi
fmount() {
    "$CUTF8FS" "$FCORR" "$MC"
    "$CUTF8FS" -o watch=off "$FCORR" "$MW"
    "$CUTF8FS" -o archive "$FCORR" "$MA"
    bindfs "$FNAT" "$MB"
}
fumount() { fuse_umount "$MC" "$MW" "$MA" "$MB"; }
trap fumount EXIT
fcold() { fumount; sync; echo 3 > /proc/sys/vm/drop_caches; fmount; }
f_lsR() { ls -lR "$1/tree"; }
f_find() { find "$1/tree" -size +1k | wc -l; }
f_stat() { find "$1/tree" -type f -printf '%s %m %u %T@\n'; }
f_grep() { grep -rc "no such words here" "$1/tree" || true; } # exit 1: no match
# change BACKING ROUND: natively, in the BACKING behind a target.
change() {
    local b=$1 r=$2 i
    for ((i = 0; i < FCHANGES; i++)); do
        local k=$((i * 37 % FFILES))
        printf 'token-%s-%s\n' "$r" "$i" >> "$b/tree/d$(printf %02d $((k % 100)))/f$(printf %05d "$k").txt"
        printf 'new %s\n' "$i" > "$b/tree/d$(printf %02d $((i % 100)))/new-$r-$i.txt"
        rm -f "$b/tree/d$(printf %02d $((i % 100)))/new-$((r - 1))-$i.txt"
        [ -e "$b/tree/d$(printf %02d $((i % 100)))/mv-$((r - 1))-$i.txt" ] &&
            mv "$b/tree/d$(printf %02d $((i % 100)))/mv-$((r - 1))-$i.txt" "$b/tree/d$(printf %02d $((i % 100)))/mv-$r-$i.txt"
        [ -e "$b/tree/d$(printf %02d $((i % 100)))/mv-$r-$i.txt" ] ||
            printf 'moved\n' > "$b/tree/d$(printf %02d $((i % 100)))/mv-$r-$i.txt"
    done
}
# stale DIR ROUND: how many of round ROUND's changes the mount does not show.
stale() {
    local d=$1 r=$2 n=0 i
    n=$((FCHANGES - $(grep -rl "token-$r-" "$d/tree" 2>/dev/null | wc -l)))
    for ((i = 0; i < FCHANGES; i++)); do
        local dd="$d/tree/d$(printf %02d $((i % 100)))"
        [ -e "$dd/new-$r-$i.txt" ] || n=$((n + 1))
        [ -e "$dd/new-$((r - 1))-$i.txt" ] && n=$((n + 1))
        [ -e "$dd/mv-$((r - 1))-$i.txt" ] && n=$((n + 1))
        [ -e "$dd/mv-$r-$i.txt" ] || n=$((n + 1))
    done
    echo "$n"
}
declare -A F
round=0
FTESTS=${BENCH_FRESH_TESTS:-lsR find stat grep}
for test in $FTESTS; do
    for target in native bindfs cutf8fs nowatch archive; do
        case $target in
            native) dir=$FNAT back=$FNAT ;; bindfs) dir=$MB back=$FNAT ;;
            cutf8fs) dir=$MC back=$FCORR ;; nowatch) dir=$MW back=$FCORR ;;
            archive) dir=$MA back=$FCORR ;;
        esac
        F[$test,$target,cold]=$(for _ in 1 2 3; do fcold >&2; secs "f_$test" "$dir"; echo; done | median3)
        secs "f_$test" "$dir" >/dev/null
        F[$test,$target,warm]=$(for _ in 1 2 3; do secs "f_$test" "$dir"; echo; done | median3)
        missed=0
        F[$test,$target,busy]=$(for _ in 1 2 3; do
            round=$((round + 1)); change "$back" "$round"
            secs "f_$test" "$dir"; echo
            s=$(stale "$dir" "$round"); [ "$s" = 0 ] || echo "bench-mount: $target: round $round: $s changes not visible" >&2
            echo "$s" >> "$W/.fresh-stale-$target"
        done | median3)
        echo "bench-mount: fresh $test $target cold ${F[$test,$target,cold]} warm ${F[$test,$target,warm]} busy ${F[$test,$target,busy]} s" >&2
    done
done
for target in native bindfs cutf8fs nowatch archive; do
    F[stale,$target]=$(awk '{ s += $1 } END { print s + 0 }' "$W/.fresh-stale-$target" 2>/dev/null || echo 0)
    rm -f "$W/.fresh-stale-$target"
done
# Requests per entry: a cold ls -lR through cutf8fs, counted by the daemon.
fcold >&2
reqs() { "$CUTF8FS" --stats "${2:-$MC}" 2>/dev/null | awk '/^requests/ { on = 1; next } on && /^  [a-z]/ { print $1, $2; next } { on = 0 }'; }
# spent BEFORE AFTER: the requests between two counts, per file of the tree.
spent() { awk 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; if (d > 0) printf "%s %d (%.2f per file); ", $1, d, d / n }' n="$FFILES" <(echo "$1") <(echo "$2"); }
before=$(reqs)
ls -lR "$MC/tree" >/dev/null
after=$(reqs)
spent=$(spent "$before" "$after")
# Requests of a warm grep -r (after one warm-up), default mount and archive.
for target in cutf8fs archive; do
    dir=$MC; [ $target = archive ] && dir=$MA
    f_grep "$dir" >/dev/null
    before=$(reqs x "$dir"); f_grep "$dir" >/dev/null; after=$(reqs x "$dir")
    F[grepreqs,$target]=$(spent "$before" "$after")
done
fumount
# A large raw file through -o archive (read by the daemon: no passthrough
# without OPEN) against the default mount (passthrough), when the read
# part's data is there: median of 3 warm sequential reads.
ARAW=""
if [ -f "$CORR/raw.bin" ]; then
    "$CUTF8FS" "$CORR" "$MC"; "$CUTF8FS" -o archive "$CORR" "$MA"
    for target in cutf8fs archive; do
        dir=$MC; [ $target = archive ] && dir=$MA
        cat "$dir/raw.bin" >/dev/null
        F[rawseq,$target]=$(for _ in 1 2 3; do secs cat "$dir/raw.bin"; echo; done | median3)
    done
    fuse_umount "$MC" "$MA"
    ARAW="a $(($(stat -c %s "$CORR/raw.bin") >> 20)) MiB raw file read warm (cat, median of 3): default mount ${F[rawseq,cutf8fs]} s, archive ${F[rawseq,archive]} s (archive/default $(ratio "${F[rawseq,archive]}" "${F[rawseq,cutf8fs]}"))"
fi
{
    echo "cutf8fs freshness benchmark ($(date -u +%Y-%m-%d), $(git -C "$REPO" rev-parse --short HEAD), $(uname -r), $(nproc) CPUs)"
    echo "tree: $FFILES files in 100 directories; medians of 3 (s); busy = warm runs, each after a native"
    echo "writer changed $((4 * FCHANGES)) names or files in BACKING; cutf8fs: default options (watched);"
    echo "nowatch: cutf8fs -o watch=off (1 s caches); archive: cutf8fs -o archive; ratios = time / native time"
    echo
    echo "| test | native cold | native warm | native busy | bindfs cold | bindfs warm | bindfs busy | cutf8fs cold | cutf8fs warm | cutf8fs busy | nowatch cold | nowatch warm | nowatch busy | archive cold | archive warm | archive busy | cutf8fs/native cold | cutf8fs/native warm | cutf8fs/native busy | cutf8fs/bindfs cold | cutf8fs/bindfs warm | nowatch/native warm | archive/native cold | archive/native warm | archive/bindfs warm |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for test in $FTESTS; do
        printf '| %s |' "$test"
        for target in native bindfs cutf8fs nowatch archive; do
            printf ' %s | %s | %s |' "${F[$test,$target,cold]}" "${F[$test,$target,warm]}" "${F[$test,$target,busy]}"
        done
        printf ' %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
            "$(ratio "${F[$test,cutf8fs,cold]}" "${F[$test,native,cold]}")" \
            "$(ratio "${F[$test,cutf8fs,warm]}" "${F[$test,native,warm]}")" \
            "$(ratio "${F[$test,cutf8fs,busy]}" "${F[$test,native,busy]}")" \
            "$(ratio "${F[$test,cutf8fs,cold]}" "${F[$test,bindfs,cold]}")" \
            "$(ratio "${F[$test,cutf8fs,warm]}" "${F[$test,bindfs,warm]}")" \
            "$(ratio "${F[$test,nowatch,warm]}" "${F[$test,native,warm]}")" \
            "$(ratio "${F[$test,archive,cold]}" "${F[$test,native,cold]}")" \
            "$(ratio "${F[$test,archive,warm]}" "${F[$test,native,warm]}")" \
            "$(ratio "${F[$test,archive,warm]}" "${F[$test,bindfs,warm]}")"
    done
    echo
    echo "changes not visible right after a busy run (of $((4 * FCHANGES)) per run, 12 runs): native ${F[stale,native]}, bindfs ${F[stale,bindfs]}, cutf8fs ${F[stale,cutf8fs]}, nowatch ${F[stale,nowatch]}, archive ${F[stale,archive]}"
    echo
    echo "requests of one cold ls -lR through cutf8fs (the daemon's counters): $spent"
    echo "requests of one warm grep -r: cutf8fs: ${F[grepreqs,cutf8fs]:-none}; archive: ${F[grepreqs,archive]:-none}"
    [ -z "$ARAW" ] || echo "$ARAW"
} | tee "$W/results-fresh.md"
