#!/usr/bin/env bash
# Benchmark of the cutf8fs write path. Reports, never asserts.
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
# Cases (times in seconds, median of REPS=3 runs; the runs go round the targets,
# each round starting one target later, so none always runs first or last):
#   cp       cp of a SIZE_MIB (1024) MiB text file into the target
#   dd       dd if=that file of=TARGET bs=1M conv=fsync
#   tar      tar -x of a FILES (2000) file text tree (tarball made outside)
#   app-1M   APPENDS (10000) appends of one line, open/append/close each, to
#            a 1 MiB file
#   app-big  the same on a SIZE_MIB file (cutf8fs should be flat in size)
#   vim-open vim -es loading the VIM_MIB (100) MiB file and quitting
#   vim-save vim -es loading it, adding a line and saving (:wq)
#   cp-dense cp of a DENSE_MIB (512) MiB file of text that changes script at
#            every character, a fifth of them in the ranges whose length
#            differs between disk and view (U+0800-U+089F, U+10000-U+1109F):
#            its offset index has a step per 4 KiB block
#   cp-dense-q the same with a quarter of that size: with cp-dense, the
#            footer gives time per MiB at the large size over the small one
#            (1.0: linear in the size; the write path once copied the whole
#            index per write, which made this 3.5 at 512 MiB)
# and the metadata-heavy cases, on real data:
#   tar-src  tar -x of a real source tree: whole crate directories of the Rust
#            dependency sources (${CARGO_HOME:-~/.cargo}/registry/src/*/,
#            every machine that built this project has them), taken in
#            sorted order of their names until SRC_FILES (5000) files; the
#            output's header says how many files and MiB (fails with a
#            message if the registry holds fewer files)
#   rsync    rsync -a of that same tree, extracted natively, into the target
#   sqlite-rb  sqlite3 TARGET/db < SQL: a new database, SQL_ROWS (10000)
#            inserts (one indexed table) in SQL_TXNS (100) transactions,
#            PRAGMA journal_mode=DELETE (rollback journal), default synchronous
#   sqlite-wal the same with PRAGMA journal_mode=WAL
#   git-co   git checkout -q A then git checkout -q B (timed together), in a
#            clone of GIT_REPO (default: this repository) whose work tree is
#            in the target, checked out at B before the run: B = GIT_B
#            (default the clone's HEAD), A = GIT_A (default the oldest commit
#            that has crates/, else B~40 or the root if the history is
#            shorter or shallow); the header names both and their diff size
# The SQL, the tarball and the clone are made once, untimed, outside every
# target. These cases are checked after every run, and a run whose result is
# wrong shows as "fail", never as a time: tar-src and rsync by diff -r
# against the native tree, sqlite by PRAGMA integrity_check, count(*) and
# the journal mode, git-co by HEAD = B and an empty git status --porcelain.
# git-co's setup (untimed): copy of the clone's .git, checkout of B, index
# refreshed; then caches are dropped and the repository is read back (git
# status, its pack) so the run measures the checkout's writes.
# Before each timed run: sync, drop caches, then read the source back into
# the page cache, so the run measures the target's write path and not the
# source disk. The table gives the cutf8fs / faster-peer ratio (faster of
# bindfs and gocryptfs; below 1: cutf8fs is faster).
#
# A failed run shows as "fail" in the table instead of stopping the
# benchmark. (The cutf8fs daemon holds one descriptor per inode the kernel
# remembers and lifts its soft open-file limit to the hard one at start, so
# a 2000-file tar -x works under a login shell's `ulimit -Sn 1024`.)
# Needs root (mounts, drops caches), bindfs, gocryptfs, vim, python3, and
# for the cases that use them tar, rsync, sqlite3, git.
# Usage: scripts/bench-write.sh [WORKDIR_PARENT]   (default /var/tmp)
# Env: SIZE_MIB (1024), DENSE_MIB (512), VIM_MIB (100), FILES (2000), APPENDS (10000), REPS (3),
#      SRC_FILES (5000), SQL_ROWS (10000), SQL_TXNS (100), GIT_REPO, GIT_A,
#      GIT_B, TARGETS ("native bindfs gocryptfs cutf8fs"), CASES (all of the
#      above), e.g. CASES="tar-src rsync" SIZE_MIB=8 VIM_MIB=1 REPS=1;
#      CUTF8FS (the binary; default target/release/cutf8fs).
# The work directory (a fresh mktemp -d under WORKDIR_PARENT, which should be
# a disk filesystem, not tmpfs) is unmounted and removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

PARENT=${1:-/var/tmp}
SIZE_MIB=${SIZE_MIB:-1024}
DENSE_MIB=${DENSE_MIB:-512}
VIM_MIB=${VIM_MIB:-100}
FILES=${FILES:-2000}
APPENDS=${APPENDS:-10000}
REPS=${REPS:-3}
TARGETS=${TARGETS:-native bindfs gocryptfs cutf8fs}
SRC_FILES=${SRC_FILES:-5000}
SQL_ROWS=${SQL_ROWS:-10000}
SQL_TXNS=${SQL_TXNS:-100}
GIT_REPO=${GIT_REPO:-$REPO}
CASES=${CASES:-cp cp-dense-q cp-dense dd tar app-1M app-big vim-open vim-save tar-src rsync sqlite-rb sqlite-wal git-co}
has_case() { local c; for c in "$@"; do [[ " $CASES " == *" $c "* ]] && return 0; done; return 1; }

[ "$(id -u)" -eq 0 ] || { echo "bench-write: run as root (drops caches, mounts)" >&2; exit 1; }
for t in bindfs gocryptfs vim python3 fusermount3; do
    command -v "$t" >/dev/null || { echo "bench-write: needs $t (apt-get install -y bindfs gocryptfs vim)" >&2; exit 1; }
done
for t in "tar tar-src" "rsync rsync" "sqlite3 sqlite-rb sqlite-wal" "git git-co"; do
    read -r tool cases <<<"$t"
    # shellcheck disable=SC2086 # the cases that need the tool, one word each
    if has_case $cases; then
        command -v "$tool" >/dev/null || { echo "bench-write: needs $tool for $cases (apt-get install -y $tool)" >&2; exit 1; }
    fi
done
cargo build --release --bins --quiet
# CUTF8FS names another build to measure (the code before a change, say).
CUTF8FS=${CUTF8FS:-$REPO/target/release/cutf8fs}

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
# (only what the chosen CASES use: the others' sizes are 0)
ZEROED=""
has_case cp dd app-big || { SIZE_MIB=0 ZEROED=" (0: not needed by these CASES)"; }
has_case vim-open vim-save || { VIM_MIB=0 ZEROED=" (0: not needed by these CASES)"; }
has_case tar || { FILES=0 ZEROED=" (0: not needed by these CASES)"; }
has_case cp-dense cp-dense-q || { DENSE_MIB=0 ZEROED=" (0: not needed by these CASES)"; }
log "generating $SIZE_MIB MiB + $DENSE_MIB MiB + $VIM_MIB MiB + 1 MiB of text and a $FILES-file tree in $W"
python3 - "$SRC" "$SIZE_MIB" "$VIM_MIB" "$FILES" "$DENSE_MIB" <<'PY'
import os, random, sys
src, size_mib, vim_mib, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dense_mib = int(sys.argv[5])
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
def dense_char():
    r = rnd.random()
    if r < 0.1:
        return chr(rnd.randrange(0x800, 0x8A0))
    if r < 0.2:
        return chr(rnd.randrange(0x10000, 0x110A0))
    return rnd.choice("abcdefghij \néжλ中字😀→")
dense = "".join(dense_char() for _ in range(1_500_000)).encode()  # ~4 MiB
for name, mib in (("dense.txt", dense_mib), ("dense-q.txt", dense_mib // 4)):
    with open(os.path.join(src, name), "wb") as f:
        left = mib << 20
        while left >= len(dense):
            f.write(dense)
            left -= len(dense)
        f.write(dense[:dense.rfind(b"\n", 0, left) + 1])
tree = os.path.join(src, "tree")
os.makedirs(tree, exist_ok=True)
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

# A real source tree (tar-src, rsync): whole crate directories of the Rust
# dependency sources, sorted by name (a crate in two registries counts once),
# until SRC_FILES regular files.
if has_case tar-src rsync; then
    REG=${CARGO_HOME:-$HOME/.cargo}/registry/src
    mkdir "$SRC/srctree"
    n=0
    while IFS=$'\t' read -r _ dir; do
        [ "$n" -ge "$SRC_FILES" ] && break
        cp -a "$dir" "$SRC/srctree/"
        n=$(( n + $(find "$dir" -type f | wc -l) ))
    done < <(for d in "$REG"/*/*/; do d=${d%/}; printf '%s\t%s\n' "${d##*/}" "$d"; done \
             | LC_ALL=C sort -t$'\t' -k1,1 -u)
    if [ "$n" -lt "$SRC_FILES" ]; then
        echo "bench-write: tar-src/rsync need $SRC_FILES files of crate sources under $REG/*/, found $n (build this project with cargo first, or set SRC_FILES lower)" >&2
        exit 1
    fi
    SRC_TREE_FILES=$n
    SRC_TREE_DIRS=$(find "$SRC/srctree" -mindepth 1 -maxdepth 1 -type d | wc -l)
    tar -cf "$SRC/srctree.tar" -C "$SRC" srctree
    SRC_TREE_MIB=$(( $(stat -c %s "$SRC/srctree.tar") >> 20 ))
    log "source tree: $SRC_TREE_FILES files of $SRC_TREE_DIRS crates, $SRC_TREE_MIB MiB tar"
fi

# SQL for sqlite-rb / sqlite-wal: one table with an index, SQL_ROWS rows in
# SQL_TXNS transactions; only the journal mode differs.
if has_case sqlite-rb sqlite-wal; then
    python3 - "$SRC" "$SQL_ROWS" "$SQL_TXNS" <<'PY'
import os, random, sys
src, rows, txns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(5)
words = ["the", "archive", "letter", "Straße", "naïve", "café", "λόγος", "привет",
         "日本語", "漢字", "한국어", "emoji😀", "données", "über", "año", "value", "page"]
body = ["CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, body TEXT NOT NULL);",
        "CREATE INDEX t_name ON t(name);"]
for k in range(txns):
    body.append("BEGIN;")
    for i in range(k * rows // txns, (k + 1) * rows // txns):
        name = "%s-%d" % (rnd.choice(words), rnd.randrange(1 << 30))
        text = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 40)))
        body.append("INSERT INTO t(id, name, body) VALUES (%d, '%s', '%s');" % (i + 1, name, text))
    body.append("COMMIT;")
for mode in ("DELETE", "WAL"):
    with open(os.path.join(src, "sqlite-%s.sql" % mode.lower()), "w", encoding="utf-8") as f:
        f.write("PRAGMA journal_mode=%s;\n" % mode)
        f.write("\n".join(body) + "\n")
PY
fi

# A clone of GIT_REPO (git-co), by the git transport so its objects are one
# pack as in any fresh clone; A and B as the header comment says.
if has_case git-co; then
    git clone -q --no-checkout --no-local "$GIT_REPO" "$SRC/gitrepo"
    G() { git -c core.quotePath=false -C "$SRC/gitrepo" "$@"; }
    GIT_B=$(G rev-parse --verify -q "${GIT_B:-HEAD}^{commit}") || { echo "bench-write: git-co: no commit ${GIT_B:-HEAD} in a clone of $GIT_REPO" >&2; exit 1; }
    if [ -n "${GIT_A:-}" ]; then
        GIT_A=$(G rev-parse --verify -q "$GIT_A^{commit}") || { echo "bench-write: git-co: no commit $GIT_A in a clone of $GIT_REPO" >&2; exit 1; }
        GIT_A_WHY="GIT_A"
    else
        GIT_A=$(G rev-list --reverse "$GIT_B" -- crates | sed -n 1p)  # not head: SIGPIPE
        GIT_A_WHY="the oldest commit with crates/"
        if [ -z "$GIT_A" ] || [ "$(G rev-list --count "$GIT_A..$GIT_B")" -lt 10 ]; then
            GIT_A=$(G rev-list --max-count=41 "$GIT_B" | tail -1)
            GIT_A_WHY="B~$(( $(G rev-list --count "$GIT_A..$GIT_B") ))"
        fi
    fi
    [ "$GIT_A" != "$GIT_B" ] || { echo "bench-write: git-co: A = B = $GIT_B (history too short; set GIT_A)" >&2; exit 1; }
    # Files that begin with the magic number (this repository's sample/ holds
    # Corrected UTF-8 files as they are on disk) cannot be written through a
    # cutf8fs mount: a new file whose first write starts with the magic is
    # refused (EILSEQ, docs/behaviour.md, "The mount"), so git would fail there. Unless
    # GIT_SKIP_MAGIC=0, a sparse checkout leaves them out, on every target.
    GIT_SKIPPED=0
    if [ "${GIT_SKIP_MAGIC:-1}" = 1 ]; then
        MAGIC_HEX="efb79dedb2ae000a"
        skip=()
        while read -r _ _ obj path; do
            [ "$(G cat-file blob "$obj" | head -c 8 | od -An -tx1 | tr -d ' \n')" = "$MAGIC_HEX" ] \
                && skip+=("!/$path")
        done < <({ G ls-tree -r "$GIT_A"; G ls-tree -r "$GIT_B"; } | awk '$2 == "blob"' | sort -u)
        if [ "${#skip[@]}" -gt 0 ]; then
            # by hand: `git sparse-checkout set` would check out files here
            G config core.sparseCheckout true
            printf '%s\n' '/*' "${skip[@]}" > "$SRC/gitrepo/.git/info/sparse-checkout"
            GIT_SKIPPED=$(printf '%s\n' "${skip[@]}" | sort -u | wc -l)
        fi
    fi
    GIT_DESC="A $(G rev-parse --short "$GIT_A") ($GIT_A_WHY, $(G ls-tree -r "$GIT_A" | wc -l) files), B $(G rev-parse --short "$GIT_B") ($(G ls-tree -r "$GIT_B" | wc -l) files), $(G rev-list --count "$GIT_A..$GIT_B") commits apart,$(G diff --shortstat "$GIT_A" "$GIT_B"); $GIT_SKIPPED paths left out (begin with the magic number)"
    log "git-co: $GIT_DESC"
fi

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

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm_tree() { # read a tree's files and metadata into the page cache
    find "$1" -type f -exec cat {} + >/dev/null
}
# checked TIME CMD...: print TIME, or "fail" if it is one or CMD says the
# result is wrong (a wrong result must not report a time)
checked() {
    local t=$1; shift
    [ "$t" = fail ] && { echo fail; return 0; }
    if ! "$@" >"$W/chk" 2>&1; then
        echo "bench-write: wrong result, check failed: $* ($(head -3 "$W/chk" | tr '\n' ' '))" >&2
        echo fail
        return 0
    fi
    echo "$t"
}
sql_run() { sqlite3 -bail "$1" < "$2"; }
sql_check() { # DB MODE: intact, SQL_ROWS rows, the journal mode asked for
    local got
    got=$(sqlite3 -bail "$1" 'PRAGMA integrity_check; SELECT count(*) FROM t; PRAGMA journal_mode;' | tr '\n' ' ')
    [ "$got" = "ok $SQL_ROWS $2 " ] || { echo "got: $got, want: ok $SQL_ROWS $2"; return 1; }
}
git_co() { git -C "$1" checkout -q "$GIT_A" && git -C "$1" checkout -q "$GIT_B"; }
git_check() { # REPO: at B, nothing changed, nothing untracked
    local head st
    head=$(git -C "$1" rev-parse HEAD) && st=$(git -C "$1" status --porcelain) || return 1
    [ "$head" = "$GIT_B" ] || { echo "HEAD $head, want $GIT_B"; return 1; }
    [ -z "$st" ] || { echo "git status: $st"; return 1; }
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
        cp-dense|cp-dense-q)
            local f=${c#cp-}.txt
            rm -f "$d/$f"; cold_src "$SRC/$f"
            secs cp "$SRC/$f" "$d/$f" ;;
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
        tar-src)
            mkdir "$d/tarsrc$r"; cold_src "$SRC/srctree.tar"
            checked "$(secs tar -xf "$SRC/srctree.tar" -C "$d/tarsrc$r")" \
                diff -r "$SRC/srctree" "$d/tarsrc$r/srctree" ;;
        rsync)
            drop_caches; warm_tree "$SRC/srctree"; rsync --version >/dev/null
            checked "$(secs rsync -a "$SRC/srctree/" "$d/rsync$r/")" \
                diff -r "$SRC/srctree" "$d/rsync$r" ;;
        sqlite-rb|sqlite-wal)
            local mode=${c#sqlite-} db=$d/$c-$r.db
            [ "$mode" = rb ] && mode=delete
            rm -f "$db" "$db-journal" "$db-wal" "$db-shm"
            cold_src "$SRC/sqlite-$mode.sql"; sqlite3 :memory: 'SELECT 1' >/dev/null
            checked "$(secs sql_run "$db" "$SRC/sqlite-$mode.sql")" sql_check "$db" "$mode" ;;
        git-co)
            # Untimed: the clone's .git copied in, B checked out, the index
            # refreshed (stat data of this filesystem); then caches dropped
            # and the repository read back.
            local g=$d/git$r
            if ! { mkdir "$g" && cp -a "$SRC/gitrepo/.git" "$g/" && git -C "$g" checkout -q "$GIT_B" \
                    && git -C "$g" update-index -q --refresh; }; then
                log "git-co: setup failed in $g"; echo fail; return 0
            fi
            drop_caches; cat "$(command -v git)" "$g"/.git/objects/pack/* >/dev/null
            git -C "$g" status --porcelain >/dev/null
            checked "$(secs git_co "$g")" git_check "$g" ;;
    esac
}

# rotated K WORD...: the words, starting at the K-th (cyclically).
rotated() {
    local k=$1; shift
    local -a w=("$@")
    local i
    for ((i = 0; i < ${#w[@]}; i++)); do printf '%s\n' "${w[(i + k) % ${#w[@]}]}"; done
}

declare -A T
START=$(date +%s)
read -r -a TARGET_LIST <<< "$TARGETS"
for c in $CASES; do
    # Repetitions go round the targets, each round starting one target
    # later, so that no target always runs first or last: the machine's
    # state moves during a case (on an ext4 without journal, creating
    # files soon after thousands were deleted scans the recently deleted
    # inodes, recently_deleted(), for a minute; the page cache fills).
    declare -A RUNS=()
    for ((r = 1; r <= REPS; r++)); do
        while read -r t; do
            RUNS[$t]+="$(one_run "$c" "$W/$t" "$r") "
        done < <(rotated $((r - 1)) "${TARGET_LIST[@]}")
    done
    for t in $TARGETS; do
        read -r -a runs <<< "${RUNS[$t]}"
        T[$c,$t]=$(median "${runs[@]}")
        log "$c $t: ${runs[*]} -> median ${T[$c,$t]} s"
        # Large files are not needed once their case is done.
        case $c in
            cp) rm -f "$W/$t/cp.txt" ;;
            cp-dense|cp-dense-q) rm -f "$W/$t/${c#cp-}.txt" ;;
            dd) rm -f "$W/$t/dd.txt" ;;
            app-big) rm -f "$W/$t/app-big.txt" ;;
        esac
    done
    case $c in
        tar) for t in $TARGETS; do rm -rf "$W/$t"/tar[0-9]*; done ;;
        tar-src) for t in $TARGETS; do rm -rf "$W/$t"/tarsrc[0-9]*; done ;;
        rsync) for t in $TARGETS; do rm -rf "$W/$t"/rsync[0-9]*; done ;;
        sqlite-*) for t in $TARGETS; do rm -f "$W/$t/$c"-[0-9]*.db*; done ;;
        git-co) for t in $TARGETS; do rm -rf "$W/$t"/git[0-9]*; done ;;
    esac
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
    echo "median of $REPS; ${ELAPSED} s in all"
    has_case cp dd tar app-1M app-big vim-open vim-save \
        && echo "big file $SIZE_MIB MiB, vim file $VIM_MIB MiB, tree $FILES files ($(( $(stat -c %s "$SRC/tree.tar") >> 20 )) MiB tar), $APPENDS appends$ZEROED"
    has_case tar-src rsync && echo "tar-src, rsync: $SRC_TREE_FILES files of $SRC_TREE_DIRS crates from ${CARGO_HOME:-~/.cargo}/registry/src ($SRC_TREE_MIB MiB tar)"
    has_case sqlite-rb sqlite-wal && echo "sqlite-rb, sqlite-wal: $SQL_ROWS inserts in $SQL_TXNS transactions, journal_mode DELETE resp. WAL, synchronous default ($(sqlite3 --version | cut -d' ' -f1))"
    has_case git-co && echo "git-co: checkout A then B in a clone of $( [ "$GIT_REPO" = "$REPO" ] && echo 'this repository' || echo "$GIT_REPO"): $GIT_DESC"
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
    if has_case cp-dense && has_case cp-dense-q; then
        echo
        printf 'cp-dense scaling (time per MiB at %s MiB / at %s MiB; 1.0 is linear):' "$DENSE_MIB" $((DENSE_MIB / 4))
        for t in $TARGETS; do
            printf ' %s %s' "$t" "$(awk -v a="${T[cp-dense,$t]:-}" -v b="${T[cp-dense-q,$t]:-}" \
                'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / (4 * b); else print "n/a" }')"
        done
        echo
    fi
} | tee "$PARENT/cutf8fs-bench-write.md"
