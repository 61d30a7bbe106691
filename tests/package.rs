//! Installing like a system package: `scripts/package-deb.sh` builds the
//! Debian package from the binaries this test run built; `apt install` of
//! it gives stripped binaries, man pages, completions, docs, the mount
//! helper, the iconv charset registered with glibc and the file(1) entry;
//! the installed `cutf8fs` mounts (directly and through `mount -t
//! fuse.cutf8fs`), the installed `iconv` converts, the README's quick
//! start runs as written; `apt remove` and `apt purge` leave every file of
//! the system as it was, purge removing what the package's daemons made
//! and nothing that others made (the rule in debian/postrm). lintian finds
//! nothing against the package. And `scripts/install.sh --uninstall`
//! undoes `scripts/install.sh`.
//!
//! The package is installed on this machine as seen through an overlay of
//! its root filesystem, in a mount namespace of the test's own: apt, dpkg,
//! iconvconfig and the daemon run for real, on the machine's own files,
//! while the tests running beside this one (which use their own builds of
//! the same programs) see nothing change. The test starts from whatever
//! dpkg records on this machine: a cutf8fs that `apt remove` left (or one
//! installed) is purged in the copy first, and the machine's own dpkg
//! record is the same after the test as before.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The iconv module as this test run builds it (as tests/gconv.rs does).
fn gconv_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let mut build = Command::new(env!("CARGO"));
    build.current_dir(ROOT).args(["build", "-p", "cutf8-gconv"]);
    if profile_dir.file_name().unwrap() == "release" {
        build.arg("--release");
    }
    assert!(
        build.status().unwrap().success(),
        "cargo build -p cutf8-gconv"
    );
    profile_dir.join("libcutf8_gconv.so")
}

/// `scripts/package-deb.sh OUT` over this run's binaries; the .deb.
fn build_deb(out: &Path) -> PathBuf {
    let bins = Path::new(crate::support::mount::BIN).parent().unwrap();
    let run = Command::new(format!("{ROOT}/scripts/package-deb.sh"))
        .arg(out)
        .env("CUTF8_BIN_DIR", bins)
        .env("CUTF8_GCONV_SO", gconv_so())
        .output()
        .unwrap();
    crate::support::run::succeeded(&run, "package-deb.sh");
    let deb = PathBuf::from(String::from_utf8_lossy(&run.stdout).trim().to_string());
    let version = env!("CARGO_PKG_VERSION");
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("cutf8fs_{version}_")) && name.ends_with(".deb"),
        "{name}"
    );
    assert!(deb.is_file());
    deb
}

/// The scenario, run as root inside the overlay's chroot. Prints `ok`
/// last; any failure stops it with a message.
const SCENARIO: &str = r#"
set -euo pipefail
fail() { echo "FAIL: $*"; exit 1; }
snapshot() {
    # Every file, link and directory of the system, with the content of
    # what packages and iconvconfig write; what tests beside us or apt's
    # own bookkeeping change is left out.
    find /usr /etc /var/lib/dpkg/info /var/log /var/cache $(ls -d /var/lib/cutf8fs 2>/dev/null) -xdev \
        -path /var/cache/apt -prune -o -path /var/log/apt -prune -o \
        -path /var/log/dpkg.log -prune -o -path /var/cache/debconf -prune -o \
        -path /var/cache/ldconfig -prune -o -path /etc/ld.so.cache -prune -o \
        -path /var/cache/man -prune -o \
        -printf '%y %p %l\n' |
        grep -Ev '^. /etc/(passwd|group|shadow|gshadow|subuid|subgid)-? |^. /etc/\.pwd\.lock ' |
        sort
    md5sum /usr/lib/*/gconv/gconv-modules.cache /etc/magic 2>/dev/null
}
export DEBIAN_FRONTEND=noninteractive
# Whatever dpkg records here: a cutf8fs left by `apt remove` (or still
# installed) is purged in this copy, so the package installs afresh.
if dpkg-query -W cutf8fs >/dev/null 2>&1; then
    echo "dpkg records cutf8fs: $(dpkg-query -W -f='${Status}' cutf8fs); purged in the sandbox first"
    dpkg --purge cutf8fs >"$T/dpkg-purge-first.log" 2>&1 || { cat "$T/dpkg-purge-first.log"; fail "purging the recorded cutf8fs"; }
fi
# What earlier runs of the daemon left on this machine (and tests beside
# this one may add to it meanwhile) is hidden; in its place, what a
# cutf8fs installed from source made before the package came, and a file
# of another name: purge must leave all three.
rm -rf /var/log/cutf8fs /var/cache/cutf8fs /var/lib/cutf8fs
mkdir -p /var/log/cutf8fs /var/cache/cutf8fs
echo 'from source' >/var/log/cutf8fs/srv-other.log
echo 'not a daemon log' >/var/log/cutf8fs/notes.txt
echo 'from source' >/var/cache/cutf8fs/index-other-0123456789abcdef.sqlite
snapshot >"$T/before"
apt-get install -y -q "$DEB" >"$T/apt-install.log" 2>&1 || { cat "$T/apt-install.log"; fail "apt install"; }
dpkg -s cutf8fs | grep -q '^Status: install ok installed' || fail "not installed"

# What the package holds.
for f in /usr/bin/cutf8 /usr/bin/cutf8fs /usr/sbin/mount.fuse.cutf8fs \
         /usr/share/man/man1/cutf8.1.gz /usr/share/man/man1/cutf8fs.1.gz \
         /usr/share/man/man7/cutf8-gconv.7.gz \
         /usr/share/bash-completion/completions/cutf8fs \
         /usr/share/doc/cutf8fs/README.md /usr/share/doc/cutf8fs/copyright \
         /usr/share/cutf8fs/magic; do
    [ -e "$f" ] || fail "$f missing"
done
for b in /usr/bin/cutf8 /usr/bin/cutf8fs; do
    file "$b" | grep -q ', stripped' || fail "$b not stripped: $(file "$b")"
    [ "$(stat -c %s "$b")" -lt 10000000 ] || fail "$b: $(stat -c %s "$b") bytes"
done
[ "$(readlink -f /usr/sbin/mount.fuse.cutf8fs)" = /usr/bin/cutf8fs ] || fail "mount helper"
man -w cutf8fs >/dev/null || fail "man cutf8fs"
/usr/bin/cutf8fs -V | grep -q codec || fail "cutf8fs -V"

# iconv knows the charset without GCONV_PATH.
printf 'h\303\251llo\n' >"$T/plain"
iconv -f UTF-8 -t CORRECTED-UTF-8 "$T/plain" >"$T/coded" || fail "iconv -t CORRECTED-UTF-8"
/usr/bin/cutf8 encode "$T/plain" | cmp -s - "$T/coded" || fail "iconv differs from cutf8 encode"
iconv -f CORRECTED-UTF-8 -t UTF-8 "$T/coded" | cmp -s - "$T/plain" || fail "iconv -f CORRECTED-UTF-8"
file -m /usr/share/cutf8fs/magic -b "$T/coded" | grep -q 'Corrected UTF-8' || fail "file -m"

# The installed daemon mounts, in the background (logging to its default
# file: no syslog here) and through mount(8) and the helper.
mkdir -p "$T/b" "$T/m" "$T/m2"
cp "$T/coded" "$T/b/notes.txt"
/usr/bin/cutf8fs "$T/b" "$T/m" 2>"$T/mount.err" || { cat "$T/mount.err"; fail "cutf8fs mount"; }
cmp -s "$T/m/notes.txt" "$T/plain" || fail "the view through the installed cutf8fs"
printf 'neu: \303\244\n' >"$T/m/new.txt"
head -c 8 "$T/b/new.txt" | od -An -tx1 | tr -d ' \n' | grep -q '^efb79dedb2ae000a$' || fail "write"
fusermount3 -u "$T/m"
mount -t fuse.cutf8fs -o ro "$T/b" "$T/m2" || fail "mount -t fuse.cutf8fs"
cmp -s "$T/m2/notes.txt" "$T/plain" || fail "the view through mount -t fuse.cutf8fs"
umount "$T/m2"
for i in $(seq 50); do pgrep -x cutf8fs >/dev/null || break; sleep 0.1; done
pgrep -x cutf8fs >/dev/null && fail "a daemon is still running"

# The README's quick start, as written (its /tmp paths are this copy's).
rm -rf /tmp/archive /tmp/view
(cd /root && bash -e "$T/quickstart.sh") >"$T/quickstart.out" 2>&1 || { cat "$T/quickstart.out"; fail "the README's quick start"; }
grep -q 'Café crème' "$T/quickstart.out" || { cat "$T/quickstart.out"; fail "quick start: no café-menu.txt as UTF-8"; }
grep -q 'Μοῦσα' "$T/quickstart.out" || { cat "$T/quickstart.out"; fail "quick start: grep found nothing"; }
mountpoint -q /tmp/view && fail "quick start left /tmp/view mounted"
rm -rf /tmp/archive /tmp/view
for i in $(seq 50); do pgrep -x cutf8fs >/dev/null || break; sleep 0.1; done
# The package's daemons logged (no syslog here): what purge is to remove.
[ -f /var/log/cutf8fs/tmp-view.log ] || fail "no daemon log: $(ls /var/log/cutf8fs)"

apt-get remove -y -q cutf8fs >"$T/apt-remove.log" 2>&1 || { cat "$T/apt-remove.log"; fail "apt remove"; }
iconv -f UTF-8 -t CORRECTED-UTF-8 "$T/plain" >/dev/null 2>&1 && fail "CORRECTED-UTF-8 still known after remove"
# remove keeps the daemons' logs and caches, postinst's list of what was
# there before and dpkg's record of the package until purge (Debian's rule
# for a package with a postrm); nothing else.
keep='^. /var/log/cutf8fs|^. /var/cache/cutf8fs|^. /var/lib/cutf8fs|^. /var/lib/dpkg/info/cutf8fs\.(list|postrm) '
snapshot | grep -Ev "$keep" >"$T/after-remove"
grep -Ev "$keep" "$T/before" >"$T/before-nolog"
diff "$T/before-nolog" "$T/after-remove" >"$T/diff-remove" || { cat "$T/diff-remove"; fail "remove left the system changed"; }
apt-get purge -y -q cutf8fs >"$T/apt-purge.log" 2>&1 || { cat "$T/apt-purge.log"; fail "apt purge"; }
dpkg-query -W cutf8fs >/dev/null 2>&1 && fail "dpkg still records cutf8fs after purge"
snapshot >"$T/after-purge"
diff "$T/before" "$T/after-purge" >"$T/diff-purge" || { cat "$T/diff-purge"; fail "purge left the system changed"; }

# Beside a cutf8fs installed from source, whose daemons write the same
# names, purge cannot tell whose a log is: it keeps them all.
apt-get install -y -q "$DEB" >"$T/apt-install2.log" 2>&1 || { cat "$T/apt-install2.log"; fail "apt install, again"; }
mkdir -p "$T/m3"
/usr/bin/cutf8fs "$T/b" "$T/m3" 2>"$T/mount3.err" || { cat "$T/mount3.err"; fail "cutf8fs mount, again"; }
fusermount3 -u "$T/m3"
for i in $(seq 50); do pgrep -x cutf8fs >/dev/null || break; sleep 0.1; done
cp /usr/bin/cutf8fs /usr/local/bin/cutf8fs
apt-get purge -y -q cutf8fs >"$T/apt-purge2.log" 2>&1 || { cat "$T/apt-purge2.log"; fail "apt purge, again"; }
ls /var/log/cutf8fs/*m3.log >/dev/null 2>&1 || fail "purge removed a log while another cutf8fs was installed"
grep -q '/usr/local/bin/cutf8fs is installed too' "$T/apt-purge2.log" || { cat "$T/apt-purge2.log"; fail "purge did not say why it kept the logs"; }
rm -f /usr/local/bin/cutf8fs /var/log/cutf8fs/*m3.log
snapshot >"$T/after-purge2"
diff "$T/before" "$T/after-purge2" >"$T/diff-purge2" || { cat "$T/diff-purge2"; fail "the second purge left the system changed"; }
echo ok
"#;

#[test]
fn the_debian_package_installs_works_and_removes_cleanly() {
    // The scenario lists the host's files through an overlay: no other
    // test may install the mount helper meanwhile.
    let _sbin = crate::support::mount::SBIN_HELPER
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let t = tempfile::Builder::new()
        .prefix("cutf8fs-package-")
        .tempdir()
        .unwrap();
    let deb = build_deb(&t.path().join("deb"));
    let work = t.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let ovl = t.path().join("ovl");
    std::fs::create_dir(&ovl).unwrap();
    std::fs::write(work.join("scenario.sh"), SCENARIO).unwrap();
    std::fs::write(work.join("quickstart.sh"), readme_quick_start()).unwrap();
    let record_before = dpkg_record();
    // The overlay: the machine's root read-only below, the changes in a
    // tmpfs above; /dev (for /dev/fuse), /proc and /sys as they are.
    let setup = r#"
        set -eu
        mount --make-rprivate /
        mount -t tmpfs tmpfs "$OVL"
        mkdir "$OVL/upper" "$OVL/work" "$OVL/root"
        mount -t overlay overlay -o "lowerdir=/,upperdir=$OVL/upper,workdir=$OVL/work" "$OVL/root"
        mount --rbind /dev "$OVL/root/dev"
        mount -t proc proc "$OVL/root/proc"
        mount --rbind /sys "$OVL/root/sys"
        mount -t tmpfs tmpfs "$OVL/root/run"
        exec chroot "$OVL/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            LANG=C.UTF-8 T="$T" DEB="$DEB" bash "$T/scenario.sh"
    "#;
    let out = Command::new("unshare")
        .args(["-m", "-p", "--fork", "--mount-proc", "bash", "-c", setup])
        .env("OVL", &ovl)
        .env("T", &work)
        .env("DEB", &deb)
        .output()
        .expect("unshare (util-linux; the tests run as root)");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim_end().ends_with("ok"),
        "the package scenario failed ({:?}):\n{said}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        dpkg_record(),
        record_before,
        "this machine's dpkg record of cutf8fs changed"
    );
}

/// The shell block under the README's "Quick start" heading, verbatim.
fn readme_quick_start() -> String {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Quick start"))
        .expect("README.md has a \"## Quick start\" section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the quick start has a ```sh block");
    block.to_string()
}

/// What dpkg on this machine (not the test's copy) records of cutf8fs:
/// its status line and its files in /var/lib/dpkg/info. The test must
/// change neither (other packages may come and go meanwhile).
fn dpkg_record() -> (String, Vec<String>) {
    let q = Command::new("dpkg-query")
        .args(["-W", "-f=${Status} ${Version}", "cutf8fs"])
        .output()
        .unwrap();
    let mut info: Vec<String> = std::fs::read_dir("/var/lib/dpkg/info")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cutf8fs."))
        .collect();
    info.sort();
    (String::from_utf8_lossy(&q.stdout).into_owned(), info)
}

/// Debian's own checker has nothing to say against the package: no
/// error and no warning (the maintainer, changelog, copyright and a man
/// page for every program are what it checks most).
#[test]
fn lintian_finds_no_error_or_warning_in_the_package() {
    let t = tempfile::Builder::new()
        .prefix("cutf8fs-lintian-")
        .tempdir()
        .unwrap();
    let deb = build_deb(&t.path().join("deb"));
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
        .arg(&deb)
        .output()
        .expect("lintian (scripts/setup.sh installs it)");
    let said = String::from_utf8_lossy(&out.stdout);
    let complaints: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("W: "))
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "lintian {} ({:?}):\n{said}\n{}",
        deb.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `scripts/install.sh --uninstall PREFIX` removes exactly what
/// `scripts/install.sh PREFIX` installed (also after installing twice),
/// and nothing that was there before.
#[test]
fn install_sh_uninstall_removes_exactly_what_it_installed() {
    let prefix = tempfile::tempdir().unwrap();
    let bins = Path::new(crate::support::mount::BIN).parent().unwrap();
    std::fs::create_dir_all(prefix.path().join("bin")).unwrap();
    std::fs::write(prefix.path().join("bin/mine"), b"keep me").unwrap();
    std::fs::create_dir_all(prefix.path().join("share/doc/other")).unwrap();
    let install = |args: &[&str]| {
        let out = Command::new(format!("{ROOT}/scripts/install.sh"))
            .args(args)
            .arg(prefix.path())
            .env("CUTF8_BIN_DIR", bins)
            .output()
            .unwrap();
        assert!(out.status.success(), "install.sh {args:?}: {out:?}");
    };
    install(&[]);
    install(&[]);
    let cutf8fs = prefix.path().join("bin/cutf8fs");
    assert!(cutf8fs.is_file());
    let strip = Command::new("file").arg(&cutf8fs).output().unwrap();
    assert!(
        String::from_utf8_lossy(&strip.stdout).contains(", stripped"),
        "installed binaries keep their debug info: {strip:?}"
    );
    install(&["--uninstall"]);
    let left: Vec<String> = walk(prefix.path())
        .into_iter()
        .map(|p| p.strip_prefix(prefix.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        left,
        ["bin", "bin/mine", "share", "share/doc", "share/doc/other"],
        "left after --uninstall"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
    }
    out.sort();
    out
}
