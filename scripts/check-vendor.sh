#!/usr/bin/env bash
# Checks that vendor/fuser is exactly the published fuser 0.18.0 plus the
# patches in vendor/fuser-patches (in order), then runs fuser's own tests
# on the patched code. vendor/fuser/PATCHED.md says what each patch does.
#
# The published crate is taken from $CUTF8_VENDOR_CACHE (default
# target/vendor-check), else from cargo's registry cache, else downloaded
# from static.crates.io into the first; its sha256 must be the one in
# vendor/fuser-patches/fuser-0.18.0.crate.sha256 (crates.io's own).
#
# Two trees are built from it in a temporary directory:
# - vendored: every patch applied in order, then everything at the top not
#   listed in vendor/fuser-patches/KEEP removed; it must equal vendor/fuser
#   (`diff -r`), vendor/fuser/PATCHED.md (ours, not fuser's) aside.
# - tested: every patch but 0000-* (the Cargo.toml trimmed for vendoring,
#   which drops the dev-dependencies the tests need), nothing removed;
#   `cargo test --all-targets` runs there: fuser's unit tests, its doc
#   tests, and its examples built.
# Not run, and why: fuser's tests/bsd_pjdfs.sh and tests/macos_pjdfs.sh
# (FreeBSD and macOS), and its Docker-based mount, pjdfstest and xfstests
# suites (its Makefile; Docker images and a `fuser-tests` crate that is not
# in the published crate). tests/test_passthrough.sh runs when it can (as
# root in the root user namespace with fuser(1) and /dev/fuse); else this
# says it is skipped and why.
#
# CUTF8_VENDOR_NO_TESTS=1 checks the tree only. Run time: see PATCHED.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

name=fuser-0.18.0
patches=vendor/fuser-patches
cache="${CUTF8_VENDOR_CACHE:-target/vendor-check}"
fail() {
    echo "check-vendor: $*" >&2
    exit 1
}

# The published crate, checked.
want=$(cut -d' ' -f1 "$patches/$name.crate.sha256")
crate="$cache/$name.crate"
if [ ! -f "$crate" ]; then
    mkdir -p "$cache"
    reg=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name.crate" 2>/dev/null | head -n 1 || true)
    if [ -n "$reg" ]; then
        cp "$reg" "$crate.part"
    else
        curl -sSfL -o "$crate.part" "https://static.crates.io/crates/fuser/$name.crate" ||
            fail "cannot download $name.crate (put it in $cache/ by hand)"
    fi
    mv "$crate.part" "$crate"
fi
got=$(sha256sum "$crate" | cut -d' ' -f1)
[ "$got" = "$want" ] ||
    fail "$crate has sha256 $got, not $want ($patches/$name.crate.sha256): not the published $name"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$crate" -C "$tmp"

# apply TREE PATCH...: each patch with `patch -p1`, no fuzz, no offsets
# tolerated silently (a patch that only applies with fuzz is stale).
apply() {
    local tree=$1
    shift
    local p
    for p in "$@"; do
        patch -d "$tree" -p1 --batch --forward --fuzz=0 --no-backup-if-mismatch -s <"$p" ||
            fail "$p does not apply cleanly to $name (in $tree): regenerate it (vendor/fuser/PATCHED.md)"
    done
}

shopt -s nullglob
all=("$patches"/[0-9][0-9][0-9][0-9]-*.patch)
[ ${#all[@]} -gt 0 ] || fail "no patches in $patches"
code=()
for p in "${all[@]}"; do
    case "$(basename "$p")" in
    0000-*) ;;
    *) code+=("$p") ;;
    esac
done

# The vendored tree: pristine + every patch, trimmed to KEEP.
cp -a "$tmp/$name" "$tmp/vendored"
apply "$tmp/vendored" "${all[@]}"
keep=$(grep -v -e '^#' -e '^$' "$patches/KEEP")
for f in "$tmp/vendored"/* "$tmp/vendored"/.[!.]*; do
    grep -qxF "$(basename "$f")" <<<"$keep" || rm -rf "$f"
done
out=$(diff -r "$tmp/vendored" vendor/fuser | grep -vxF "Only in vendor/fuser: PATCHED.md" || true)
if [ -n "$out" ]; then
    echo "$out" | sed "s|$tmp/vendored|<$name + patches>|g" >&2
    fail "vendor/fuser is not $name plus $patches/*.patch (differences above): put each change in a patch"
fi
echo "check-vendor: vendor/fuser is $name plus ${#all[@]} patches (${all[*]##*/})"

[ "${CUTF8_VENDOR_NO_TESTS:-}" = 1 ] && exit 0

# fuser's tests on the patched code, with the toolchain cutf8fs builds with
# (fuser's rust-toolchain file pins 1.85, which this machine need not have),
# its published Cargo.lock, and a target directory kept between runs.
tested="$tmp/tested"
cp -a "$tmp/$name" "$tested"
apply "$tested" "${code[@]}"
if tc=$(rustup show active-toolchain 2>/dev/null | cut -d' ' -f1) && [ -n "$tc" ]; then
    export RUSTUP_TOOLCHAIN="$tc"
fi
mkdir -p "$cache/target"
target=$(cd "$cache/target" && pwd)
# What 0000-* allows for the vendored build: unused ABI structs, upstream's.
export RUSTFLAGS="-A dead_code"
(cd "$tested" && CARGO_TARGET_DIR="$target" cargo test --locked --all-targets --quiet) ||
    fail "fuser's unit tests fail on the patched code"
(cd "$tested" && CARGO_TARGET_DIR="$target" cargo test --locked --doc --quiet) ||
    fail "fuser's doc tests fail on the patched code"

# tests/test_passthrough.sh: the passthrough examples mounted, a file read
# through a kernel passthrough backing file. It calls sudo; as root a shim
# stands for it.
why=""
[ "$(id -u)" = 0 ] || why="not root"
grep -q 4294967295 /proc/self/uid_map || why="not in the root user namespace"
[ -c /dev/fuse ] || why="no /dev/fuse"
command -v fuser >/dev/null || why="no fuser(1) (psmisc)"
if [ -n "$why" ]; then
    echo "check-vendor: SKIPPED fuser's tests/test_passthrough.sh: $why" >&2
else
    mkdir "$tmp/bin"
    printf '#!/bin/sh\nexec "$@"\n' >"$tmp/bin/sudo"
    chmod +x "$tmp/bin/sudo"
    (cd "$tested" && CARGO_TARGET_DIR="$target" cargo build --locked --quiet \
        --example passthrough --example passthrough_fork)
    for ex in passthrough passthrough_fork; do
        (cd "$tested" && PATH="$tmp/bin:$PATH" sh tests/test_passthrough.sh \
            "$target/debug/examples/$ex" >"$tmp/$ex.log" 2>&1) || {
            cat "$tmp/$ex.log" >&2
            fail "fuser's tests/test_passthrough.sh fails with examples/$ex"
        }
        echo "check-vendor: fuser's tests/test_passthrough.sh passes with examples/$ex"
    done
fi
echo "check-vendor: fuser's tests pass on the patched code"
