#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine with
# Rust: FUSE, the peers we measure against (bindfs, gocryptfs), the tools the
# mount tests drive (vim, rsync, git, attr), and the peer test suites
# (pjdfstest, fsx) from crates.io. Idempotent: skips what is already there.
set -euo pipefail

need_apt=()
for pkg in fuse3 bindfs gocryptfs vim rsync attr acl git perl python3 util-linux psmisc; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

for tool in pjdfstest fsx; do
    command -v "$tool" >/dev/null 2>&1 || cargo install --locked --quiet "$tool"
done

# FUSE must work: tests that need it fail (never skip) without it.
if [ ! -c /dev/fuse ]; then
    echo "setup: /dev/fuse is missing; the mount tests will fail" >&2
fi
