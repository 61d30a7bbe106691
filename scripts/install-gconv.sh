#!/usr/bin/env bash
# Install CORRECTED-UTF-8 for glibc's iconv, and the file(1) magic entry.
#
#   scripts/install-gconv.sh PREFIX            # private: PREFIX/lib/cutf8fs/gconv
#   scripts/install-gconv.sh PREFIX --system   # also register it system-wide
#
# Private install: use it with  GCONV_PATH=PREFIX/lib/cutf8fs/gconv  (iconv,
# git, vim, any program calling iconv_open). --system also copies the module
# into glibc's gconv directory, writes gconv-modules.d/cutf8fs.conf there and
# runs iconvconfig, so no GCONV_PATH is needed (root only). Undo: remove
# CORRECTED-UTF-8.so and gconv-modules.d/cutf8fs.conf there, run iconvconfig.
# The magic(5) entry goes to PREFIX/share/cutf8fs/magic (file -m it); with
# --system it is also appended to /etc/magic, marked, once. Also installed:
# PREFIX/share/cutf8fs/corrected-utf-8.vim (vim recipe) and
# PREFIX/bin/cutf8-lessopen (LESSOPEN preprocessor). See docs/charset.md.
#
# CUTF8_GCONV_SO=path skips the build and installs that module file.
# Called from scripts/install.sh as: scripts/install-gconv.sh "$PREFIX"
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

prefix=${1:?usage: scripts/install-gconv.sh PREFIX [--system]}
system=no
[[ ${2:-} == --system ]] && system=yes

so=${CUTF8_GCONV_SO:-}
if [[ -z $so ]]; then
    cargo build --release -p cutf8-gconv
    so=$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/libcutf8_gconv.so
fi
[[ -f $so ]] || { echo "install-gconv: $so: no such module (build failed?)" >&2; exit 1; }

dir=$prefix/lib/cutf8fs/gconv
install -d "$dir" "$prefix/share/cutf8fs" "$prefix/bin"
install -m 0644 "$so" "$dir/CORRECTED-UTF-8.so.new"
strip --strip-debug "$dir/CORRECTED-UTF-8.so.new" 2>/dev/null || true
mv -f "$dir/CORRECTED-UTF-8.so.new" "$dir/CORRECTED-UTF-8.so"
install -m 0644 gconv/gconv-modules "$dir/gconv-modules"
install -m 0644 gconv/cutf8.magic "$prefix/share/cutf8fs/magic"
install -m 0644 gconv/corrected-utf-8.vim "$prefix/share/cutf8fs/corrected-utf-8.vim"
install -m 0755 gconv/cutf8-lessopen "$prefix/bin/cutf8-lessopen"
install -d "$prefix/share/man/man7"
install -m 0644 man/cutf8-gconv.7 "$prefix/share/man/man7/cutf8-gconv.7"
echo "installed $dir (use: GCONV_PATH=$dir iconv -f CORRECTED-UTF-8 -t UTF-8 FILE)"

if [[ $system == yes ]]; then
    # glibc's own module directory: where its UTF-16 module lives.
    sysdir=$(dirname "$(find /usr/lib /usr/lib64 /lib -maxdepth 3 -name UTF-16.so \
        -path '*gconv*' 2>/dev/null | head -1)")
    [[ -d $sysdir ]] || { echo "install-gconv: glibc gconv directory not found" >&2; exit 1; }
    install -d "$sysdir/gconv-modules.d"
    # The module goes next to glibc's own: iconvconfig's cache only
    # records modules of the gconv directory itself.
    install -m 0644 "$dir/CORRECTED-UTF-8.so" "$sysdir/CORRECTED-UTF-8.so"
    install -m 0644 gconv/gconv-modules "$sysdir/gconv-modules.d/cutf8fs.conf"
    iconvconfig
    echo "registered in $sysdir/gconv-modules.d/cutf8fs.conf (iconvconfig run)"
    if ! grep -q 'cutf8fs magic begin' /etc/magic 2>/dev/null; then
        { echo '# cutf8fs magic begin'; cat gconv/cutf8.magic; echo '# cutf8fs magic end'; } >>/etc/magic
        echo "appended the Corrected UTF-8 entry to /etc/magic"
    fi
fi
