#!/usr/bin/env bash
# Build the Debian package: target/debian/cutf8fs_<version>_<arch>.deb.
#
#   scripts/package-deb.sh [OUTDIR]        (default target/debian)
#
# Builds the release binaries and the iconv module (cargo build --release),
# strips them (their debug info is split off into OUTDIR/debug/*.debug,
# not shipped) and lays out, as Debian's own packages do:
#   /usr/bin/cutf8, /usr/bin/cutf8fs, /usr/bin/cutf8-lessopen
#   /usr/sbin/mount.fuse.cutf8fs -> ../bin/cutf8fs (mount -t fuse.cutf8fs, fstab)
#   /usr/share/man/man1/cutf8.1.gz, cutf8fs.1.gz, cutf8-lessopen.1.gz,
#   man7/cutf8-gconv.7.gz, man8/mount.fuse.cutf8fs.8.gz
#   shell completions for bash, zsh and fish
#   /usr/share/doc/cutf8fs/ (README, docs/*.md, changelog.gz, copyright,
#   examples/archive: the sample archive of the README's quick start)
#   /usr/share/cutf8fs/magic (file -m), corrected-utf-8.vim
#   /usr/lib/<multiarch>/gconv/CORRECTED-UTF-8.so and
#   gconv-modules.d/cutf8fs.conf: registered with glibc's iconv by
#   iconvconfig in postinst, unregistered by iconvconfig in postrm.
# Nothing else on the system is changed: /etc/magic (libmagic's conffile)
# is left alone; docs/install.md says how to use the magic entry. purge
# also removes the logs and index caches the package's daemons made, by
# the rule in debian/postrm (docs/install.md, "Removing").
# Install: apt install ./target/debian/cutf8fs_*.deb
#
# debian/ holds the files written by hand: changelog (its first entry's
# version must be Cargo.toml's), copyright (DEP-5), postinst, postrm.
# Maintainer: "$DEBFULLNAME <$DEBEMAIL>" when DEBEMAIL is set, else the
# first of Cargo.toml's authors.
#
# CUTF8_BIN_DIR=DIR takes cutf8 and cutf8fs from DIR, CUTF8_GCONV_SO=FILE
# the module, instead of building them (the tests package what they built).
# Needs dpkg-deb, objcopy and strip (binutils), gzip.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

out=${1:-target/debian}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
if [[ -n ${DEBEMAIL:-} ]]; then
    maintainer="${DEBFULLNAME:-$DEBEMAIL} <$DEBEMAIL>"
else
    maintainer=$(sed -n 's/^authors = \["\([^"]*\)".*/\1/p' Cargo.toml | head -1)
fi
[[ $maintainer == *' <'*@*.*'>' ]] || {
    echo "package-deb: no maintainer: set DEBFULLNAME and DEBEMAIL, or authors in Cargo.toml" >&2
    exit 1
}
changed=$(sed -n '1s/^cutf8fs (\(.*\)) .*/\1/p' debian/changelog)
[[ $changed == "$version" ]] || {
    echo "package-deb: debian/changelog's first entry is $changed, Cargo.toml says $version" >&2
    exit 1
}

bin=${CUTF8_BIN_DIR:-}
so=${CUTF8_GCONV_SO:-}
if [[ -z $bin ]]; then
    cargo build --release --locked --bins -p cutf8fs
    bin=target/release
fi
if [[ -z $so ]]; then
    cargo build --release --locked -p cutf8-gconv
    so=target/release/libcutf8_gconv.so
fi
for f in "$bin/cutf8" "$bin/cutf8fs" "$so"; do
    [[ -f $f ]] || { echo "package-deb: $f: missing (build failed?)" >&2; exit 1; }
done

# glibc's own gconv directory (/usr/lib/<multiarch>/gconv): where the
# module must live for iconvconfig's cache to record it.
gconv=$(dirname "$(find /usr/lib /usr/lib64 -maxdepth 3 -name UTF-16.so -path '*gconv*' \
    2>/dev/null | head -1)")
[[ $gconv == /usr/lib* ]] || { echo "package-deb: glibc's gconv directory not found" >&2; exit 1; }

root=$out/root
rm -rf "$root" "$out/debug"
mkdir -p "$root/DEBIAN" "$out/debug"

# Stripped copies; the debug info goes to OUTDIR/debug, linked by name.
ship() { # ship SRC DEST MODE
    local name
    name=$(basename "$2")
    install -D -m "$3" "$1" "$2"
    objcopy --only-keep-debug "$2" "$out/debug/$name.debug"
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$2"
    objcopy --add-gnu-debuglink="$out/debug/$name.debug" "$2"
}
ship "$bin/cutf8" "$root/usr/bin/cutf8" 0755
ship "$bin/cutf8fs" "$root/usr/bin/cutf8fs" 0755
ship "$so" "$root$gconv/CORRECTED-UTF-8.so" 0644
install -D -m 0644 gconv/gconv-modules "$root$gconv/gconv-modules.d/cutf8fs.conf"
install -D -m 0755 gconv/cutf8-lessopen "$root/usr/bin/cutf8-lessopen"
install -d "$root/usr/sbin"
ln -s ../bin/cutf8fs "$root/usr/sbin/mount.fuse.cutf8fs"

# A man page for every program shipped.
man=$root/usr/share/man
for page in man/cutf8.1 man/cutf8fs.1 man/cutf8-lessopen.1 man/cutf8-gconv.7 \
    man/mount.fuse.cutf8fs.8; do
    install -d "$man/man${page##*.}"
    gzip -9n <"$page" >"$man/man${page##*.}/$(basename "$page").gz"
done

comp=$root/usr/share
install -d "$comp/bash-completion/completions" "$comp/zsh/vendor-completions" \
    "$comp/fish/vendor_completions.d"
for b in cutf8 cutf8fs; do
    "$bin/$b" --generate-completions bash >"$comp/bash-completion/completions/$b"
    "$bin/$b" --generate-completions zsh >"$comp/zsh/vendor-completions/_$b"
    "$bin/$b" --generate-completions fish >"$comp/fish/vendor_completions.d/$b.fish"
done

doc=$root/usr/share/doc/cutf8fs
install -d "$doc" "$root/usr/share/cutf8fs"
install -m 0644 README.md docs/format.md docs/behaviour.md docs/migrate.md docs/charset.md docs/install.md docs/design.md \
    docs/performance.md "$doc/"
install -m 0644 debian/copyright "$doc/copyright"
gzip -9n <debian/changelog >"$doc/changelog.gz"
install -d "$doc/examples"
cp -r sample/archive "$doc/examples/archive"
find "$doc/examples" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
install -m 0644 gconv/cutf8.magic "$root/usr/share/cutf8fs/magic"
install -m 0644 gconv/corrected-utf-8.vim "$root/usr/share/cutf8fs/corrected-utf-8.vim"

# Depends: the libraries the binaries link, at the newest glibc symbol
# version they use; fuse3 for fusermount3 and mount.fuse3.
needed=$(for f in "$root/usr/bin/cutf8" "$root/usr/bin/cutf8fs" "$root$gconv/CORRECTED-UTF-8.so"; do
    objdump -p "$f" | awk '/NEEDED/ {print $2}'
done | sort -u)
glibc=$(for f in "$root/usr/bin/cutf8" "$root/usr/bin/cutf8fs" "$root$gconv/CORRECTED-UTF-8.so"; do
    objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' || true
done | sed 's/GLIBC_//' | sort -uV | tail -1)
depends="libc6 (>= $glibc)"
for lib in $needed; do
    case $lib in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux*) ;;
    libgcc_s.so.1) depends="$depends, libgcc-s1" ;;
    *) echo "package-deb: linked against $lib: add its package to Depends" >&2; exit 1 ;;
    esac
done
depends="$depends, fuse3"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: cutf8fs
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Section: utils
Priority: optional
Description: Corrected UTF-8 archives that every legacy tool can read
 Corrected UTF-8 keeps UTF-8's byte structure but gives every character
 exactly one encoding and none to overlong forms, C1 controls and
 surrogates. cutf8fs mounts a directory (FUSE) and shows its Corrected
 UTF-8 files as standard UTF-8, writing them back as Corrected UTF-8;
 cutf8 converts files and whole trees and checks them. Also the
 CORRECTED-UTF-8 charset for glibc's iconv (iconv(1), git, vim) and a
 file(1) magic entry.
EOF
install -m 0755 debian/postinst debian/postrm "$root/DEBIAN/"
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"

deb=$out/cutf8fs_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
rm -rf "$root"
echo "$deb"
