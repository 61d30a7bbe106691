#!/bin/sh
# Install cutf8 and cutf8fs with their man pages and docs, the
# CORRECTED-UTF-8 iconv module and the file(1) magic entry:
#   scripts/install.sh [PREFIX]        (default /usr/local)
# Binaries go to PREFIX/bin, man pages to PREFIX/share/man/man1, docs to
# PREFIX/share/doc/cutf8fs, shell completions to PREFIX/share/bash-completion,
# zsh/site-functions and fish/vendor_completions.d. As root with PREFIX /usr/local, also links
# /sbin/mount.fuse.cutf8fs so that mount(8) and fstab find the helper.
# CUTF8_BIN_DIR=DIR installs already-built binaries from DIR (no cargo).
set -eu
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
bin=${CUTF8_BIN_DIR:-}
if [ -z "$bin" ]; then
    cargo build --release --locked --bins
    bin=target/release
fi
install -d "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/doc/cutf8fs"
install -m 755 "$bin/cutf8" "$bin/cutf8fs" "$prefix/bin/"
install -m 644 man/cutf8.1 man/cutf8fs.1 "$prefix/share/man/man1/"
comp="$prefix/share/bash-completion/completions"
install -d "$comp" "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
for b in cutf8 cutf8fs; do
    "$bin/$b" --generate-completions bash > "$comp/$b"
    "$bin/$b" --generate-completions zsh > "$prefix/share/zsh/site-functions/_$b"
    "$bin/$b" --generate-completions fish > "$prefix/share/fish/vendor_completions.d/$b.fish"
done
install -m 644 README.md docs/format.md docs/migrate.md docs/performance.md \
    "$prefix/share/doc/cutf8fs/"
# The CORRECTED-UTF-8 iconv module and the file(1) magic entry
# (PREFIX/lib/cutf8fs/gconv, PREFIX/share/cutf8fs/magic; docs/charset.md).
if [ -z "${CUTF8_BIN_DIR:-}" ]; then
    scripts/install-gconv.sh "$prefix"
elif [ -f "$bin/libcutf8_gconv.so" ]; then
    CUTF8_GCONV_SO="$bin/libcutf8_gconv.so" scripts/install-gconv.sh "$prefix"
fi
install -m 644 docs/charset.md "$prefix/share/doc/cutf8fs/"
if [ "$(id -u)" = 0 ] && [ "$prefix" = /usr/local ] && [ -d /sbin ]; then
    ln -sf "$prefix/bin/cutf8fs" /sbin/mount.fuse.cutf8fs
fi
echo "installed into $prefix (man cutf8fs, man cutf8)"
