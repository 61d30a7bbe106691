#!/usr/bin/env bash
# The main job on the sample archive shipped in sample/archive: build, check
# the archive, mount a copy of it with cutf8fs, show a corrected file with cat
# and grep through the mount, unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo uses: FUSE (fusermount3) and a Rust toolchain.
if ! command -v fusermount3 >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq fuse3 >/dev/null
fi
cargo build --release --bins
bin=target/release

work=$(mktemp -d)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
cp -a sample/archive "$work/backing"
mkdir "$work/mnt"

echo "== on disk, notes/café-menu.txt is Corrected UTF-8 (magic number first):"
head -c 48 "$work/backing/notes/café-menu.txt" | od -An -tx1 | head -3
echo "== cutf8 check over the archive:"
"$bin/cutf8" check "$work/backing" || true

echo "== mount: cutf8fs $work/backing $work/mnt"
"$bin/cutf8fs" "$work/backing" "$work/mnt"
echo "== cat notes/café-menu.txt through the mount:"
cat "$work/mnt/notes/café-menu.txt"
echo "== grep -rn 'Μοῦσα\|蛙\|𐀀' through the mount:"
grep -rn 'Μοῦσα\|蛙\|𐀀' "$work/mnt"
echo "== unmount"
fusermount3 -u "$work/mnt"
echo "demo: ok"
