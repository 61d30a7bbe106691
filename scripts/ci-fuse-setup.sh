#!/usr/bin/env bash
# Installs what the cutf8fs mount tests and scripts/bench-mount.sh need on a
# Debian machine with Rust: FUSE 3 (fusermount3, mount.fuse3), bindfs (the
# benchmark's peer), attr (getfattr/setfattr), util-linux (setpriv, mount),
# a C compiler (the benchmark's pread tool), and the peer suites pjdfstest
# and fsx from crates.io. Idempotent: installs only what is missing.
# The mount tests run as root and fail (never skip) when FUSE is missing.
#   scripts/ci-fuse-setup.sh
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need=()
for pkg in fuse3 bindfs attr util-linux gcc python3; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
for tool in pjdfstest fsx; do
    command -v "$tool" >/dev/null 2>&1 || cargo install --locked --quiet "$tool"
done

if [ ! -c /dev/fuse ]; then
    $SUDO modprobe fuse 2>/dev/null || true
fi
if [ ! -c /dev/fuse ]; then
    echo "ci-fuse-setup: /dev/fuse is missing; the mount tests will fail" >&2
    exit 1
fi
echo "ci-fuse-setup: fuse3 $(fusermount3 -V 2>&1 | awk '{print $NF}'), bindfs, pjdfstest, fsx ready"
