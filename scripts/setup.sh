#!/usr/bin/env bash
# Installs what the tests, the demo and the benchmarks need on a fresh Debian
# machine with Rust: FUSE 3 (fusermount3, mount.fuse3), the peers we measure
# against (bindfs, gocryptfs), the tools the mount tests drive (vim, rsync,
# git, perl, python3, attr, acl, util-linux's setpriv and mount), a C
# compiler (the read benchmark's pread tool), the file servers the export
# tests run (Samba, NFS-Ganesha) with their clients, and the peer suites
# pjdfstest and fsx from crates.io. Idempotent: installs only what is missing.
# The mount tests run as root and fail (never skip) when FUSE is missing.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need=()
# libc6-dev (<gconv.h>), binutils (ar), file and less: the gconv module and its recipes.
# The Debian package (scripts/package-deb.sh, tests/package.rs): dpkg-deb,
# binutils (objcopy, strip), apt, man-db (man -w), procps (pgrep), lintian.
# samba, smbclient, nfs-ganesha(-vfs), libnfs-utils and libnfs-dev: the servers and
# clients of the export tests (tests/support/servers.rs starts them itself).
# curl and patch: scripts/check-vendor.sh (psmisc: fuser(1) for fuser's own
# tests/test_passthrough.sh).
for pkg in fuse3 bindfs gocryptfs vim rsync attr acl git perl python3 util-linux psmisc gcc \
    libc6-dev binutils file less e2fsprogs libcap2-bin sqlite3 dpkg apt man-db procps lintian \
    samba smbclient nfs-ganesha nfs-ganesha-vfs libnfs-utils libnfs-dev curl patch; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    # Installing samba and nfs-ganesha must not start their services (the
    # tests start their own, on other ports): a policy-rc.d that refuses
    # every start while apt runs, unless the machine has one already.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
    [ -z "$policy" ] || $SUDO rm -f "$policy"
fi
# Should a service have started all the same (a machine with systemd), stop
# it: the tests need no system-wide smbd, nmbd or ganesha.nfsd.
for svc in smbd nmbd samba-ad-dc nfs-ganesha; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        $SUDO systemctl stop "$svc" || true
        $SUDO systemctl disable "$svc" >/dev/null 2>&1 || true
    fi
done

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
for tool in pjdfstest fsx; do
    command -v "$tool" >/dev/null 2>&1 || cargo install --locked --quiet "$tool"
done

if [ ! -c /dev/fuse ]; then
    $SUDO modprobe fuse 2>/dev/null || true
fi
if [ ! -c /dev/fuse ]; then
    echo "setup: /dev/fuse is missing; the mount tests will fail" >&2
    exit 1
fi
echo "setup: fuse3 $(fusermount3 -V 2>&1 | awk '{print $NF}'), bindfs, gocryptfs, pjdfstest, fsx ready"
