#!/bin/sh
# Install cutf8 and cutf8fs from source with their man pages and docs, the
# CORRECTED-UTF-8 iconv module and the file(1) magic entry; or remove them:
#   scripts/install.sh [PREFIX]                (default /usr/local)
#   scripts/install.sh --uninstall [PREFIX]
# (The Debian package, scripts/package-deb.sh, is the other way: docs/install.md.)
# Binaries go to PREFIX/bin (stripped), man pages to PREFIX/share/man/man1,
# docs to PREFIX/share/doc/cutf8fs, shell completions to
# PREFIX/share/bash-completion, zsh/site-functions and
# fish/vendor_completions.d. As root with PREFIX /usr/local, also links
# /sbin/mount.fuse.cutf8fs so that mount(8) and fstab find the helper.
# Every file and directory made is recorded in
# PREFIX/share/cutf8fs/installed-files; --uninstall removes exactly those
# (directories only when left empty), nothing else.
# CUTF8_BIN_DIR=DIR installs already-built binaries from DIR (no cargo).
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = --uninstall ]; then
    prefix=${2:-/usr/local}
    manifest="$prefix/share/cutf8fs/installed-files"
    [ -f "$manifest" ] || {
        echo "install.sh: $manifest: not found (nothing installed in $prefix by this script)" >&2
        exit 1
    }
    # Files and links first, then the directories made, deepest first.
    grep '^f ' "$manifest" | cut -c3- | while IFS= read -r f; do
        if [ "$f" = /sbin/mount.fuse.cutf8fs ]; then
            # Only our own link.
            if [ "$(readlink "$f" 2>/dev/null)" = "$prefix/bin/cutf8fs" ]; then rm -f "$f"; fi
        elif [ -f "$f" ] || [ -L "$f" ]; then
            rm -f "$f"
        fi
    done
    dirs=$(grep '^d ' "$manifest" | cut -c3- | sort -r)
    rm -f "$manifest"
    printf '%s\n' "$dirs" | while IFS= read -r d; do
        [ -n "$d" ] && rmdir "$d" 2>/dev/null || true
    done
    echo "removed cutf8fs from $prefix"
    exit 0
fi
prefix=${1:-/usr/local}
bin=${CUTF8_BIN_DIR:-}
if [ -z "$bin" ]; then
    cargo build --release --locked --bins
    bin=target/release
fi
listing() { find "$prefix" \( -type f -o -type l \) -printf 'f %p\n' -o -type d -printf 'd %p\n' 2>/dev/null | sort; }
install -d "$prefix"
before=$(mktemp)
listing >"$before"

install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/doc/cutf8fs"
install -s -m 755 "$bin/cutf8" "$bin/cutf8fs" "$prefix/bin/"
install -m 644 man/cutf8.1 man/cutf8fs.1 "$prefix/share/man/man1/"
comp="$prefix/share/bash-completion/completions"
install -d "$comp" "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
for b in cutf8 cutf8fs; do
    "$bin/$b" --generate-completions bash > "$comp/$b"
    "$bin/$b" --generate-completions zsh > "$prefix/share/zsh/site-functions/_$b"
    "$bin/$b" --generate-completions fish > "$prefix/share/fish/vendor_completions.d/$b.fish"
done
install -m 644 README.md docs/format.md docs/behaviour.md docs/migrate.md docs/performance.md docs/install.md \
    "$prefix/share/doc/cutf8fs/"
# The CORRECTED-UTF-8 iconv module and the file(1) magic entry
# (PREFIX/lib/cutf8fs/gconv, PREFIX/share/cutf8fs/magic; docs/charset.md).
if [ -z "${CUTF8_BIN_DIR:-}" ]; then
    scripts/install-gconv.sh "$prefix"
elif [ -f "$bin/libcutf8_gconv.so" ]; then
    CUTF8_GCONV_SO="$bin/libcutf8_gconv.so" scripts/install-gconv.sh "$prefix"
fi
install -m 644 docs/charset.md "$prefix/share/doc/cutf8fs/"
install -d "$prefix/share/cutf8fs"
manifest="$prefix/share/cutf8fs/installed-files"
link=
if [ "$(id -u)" = 0 ] && [ "$prefix" = /usr/local ] && [ -d /sbin ]; then
    ln -sf "$prefix/bin/cutf8fs" /sbin/mount.fuse.cutf8fs
    link="f /sbin/mount.fuse.cutf8fs"
fi
# What this run made, added to what earlier runs recorded (the manifest
# itself is not listed: --uninstall removes it last).
after=$(mktemp)
listing >"$after"
{
    if [ -f "$manifest" ]; then cat "$manifest"; fi
    comm -13 "$before" "$after" | grep -v "^f $manifest\$" || true
    if [ -n "$link" ]; then echo "$link"; fi
} | sort -u >"$manifest.new"
mv "$manifest.new" "$manifest"
rm -f "$before" "$after"
echo "installed into $prefix (man cutf8fs, man cutf8; scripts/install.sh --uninstall $prefix removes it)"
