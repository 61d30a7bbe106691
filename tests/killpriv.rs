//! Issue 12: the daemon, not the kernel, takes set-user-ID and
//! set-group-ID bits and file capabilities from files that are written or
//! truncated (`FUSE_HANDLE_KILLPRIV_V2`, which saves a round trip per
//! write). The daemon writes as root, which natively keeps them, so a
//! mistake here would let any user with write access keep a set-id bit on
//! a file they changed.
//!
//! Differential, as `security_acl`: the same fixture is made natively in
//! `BACKING/nat` and through the mount in `MOUNT/via` (raw and corrected
//! files), the same command runs on both as the same identity — a real
//! unprivileged user, root, and root without CAP_FSETID — and the modes
//! and capabilities afterwards must be equal, read from BACKING and, for
//! the mount, also through it (the kernel's cached mode must not keep a
//! bit BACKING lost).
//!
//! Needs root (real users through `setpriv`, `setcap`), FUSE and a BACKING
//! with security xattrs (ext4, xfs, tmpfs): a failure, never a skip.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use crate::support::mount::Mount;
use crate::support::users::{sh_as, shared_gid, user, User};

const A: &str = "cutf8t-a";

/// The files of one fixture: (name, mode, content is text, capability).
const FILES: &[(&str, u32, bool, bool)] = &[
    ("suid.bin", 0o4777, false, false),
    ("suid.txt", 0o4777, true, false),
    ("sgidx.bin", 0o2777, false, false),
    ("sgidx.txt", 0o2777, true, false),
    // Set-group-ID without group execute: taken natively only from a
    // writer outside the file's group (root's group here).
    ("sgid.txt", 0o2767, true, false),
    // The same in a group the test user is in (`fixture` sets it): kept.
    ("sgidgrp.txt", 0o2767, true, false),
    ("both.bin", 0o6777, false, false),
    ("caps.bin", 0o0777, false, true),
    ("caps.txt", 0o0777, true, true),
];

fn mount() -> Mount {
    user(A);
    Mount::new(&["allow_other"], |b| {
        let top = b.parent().unwrap();
        fs::set_permissions(top, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    })
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Makes the fixture in `dir` (`BACKING/nat` natively or `MOUNT/via`):
/// the text files hold non-ASCII text, so through the mount they are
/// stored as Corrected UTF-8.
fn fixture(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).unwrap();
    for &(name, mode, text, caps) in FILES {
        let p = dir.join(name);
        let body: &[u8] = if text {
            "text é ünï 漢字 line\nsecond line ελληνικά\n".as_bytes()
        } else {
            b"\x7fELF\x00\x01\x02\xff binary \x00\x00 not text"
        };
        fs::write(&p, body).unwrap();
        if caps {
            run(Command::new("setcap").arg("cap_net_raw+ep").arg(&p));
        }
        if name == "sgidgrp.txt" {
            std::os::unix::fs::chown(&p, None, Some(shared_gid())).unwrap();
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Mode bits (07777) and whether `security.capability` is set, of every
/// fixture file in `dir`.
fn state(dir: &Path) -> Vec<(String, String, bool)> {
    FILES
        .iter()
        .map(|&(name, ..)| {
            let p = dir.join(name);
            let mode = fs::metadata(&p).unwrap().mode() & 0o7777;
            let out = Command::new("getfattr")
                .args(["--absolute-names", "-n", "security.capability"])
                .arg(&p)
                .output()
                .expect("getfattr");
            (name.to_string(), format!("{mode:o}"), out.status.success())
        })
        .collect()
}

/// Who runs a command.
#[derive(Clone, Copy, Debug)]
enum Who {
    User(User),
    Root,
    /// Root without CAP_FSETID in its bounding set (so not in its
    /// effective set either): as a container's root may be.
    RootNoFsetid,
}

fn sh(who: Who, script: &str, dir: &Path) -> Output {
    match who {
        Who::User(u) => sh_as(u, script, &[dir.as_os_str()]),
        Who::Root => Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(dir)
            .output()
            .expect("sh"),
        Who::RootNoFsetid => Command::new("setpriv")
            .args(["--bounding-set=-fsetid", "--inh-caps=-fsetid", "--"])
            .args(["sh", "-c", script, "sh"])
            .arg(dir)
            .output()
            .expect("setpriv"),
    }
}

/// What each command does to every fixture file ($1 is the directory).
const OPS: &[(&str, &str)] = &[
    (
        "append",
        "for f in \"$1\"/*; do printf 'more é\\n' >> \"$f\"; done",
    ),
    (
        "write in place",
        "for f in \"$1\"/*; do printf 'T' | dd of=\"$f\" bs=1 seek=2 conv=notrunc status=none; done",
    ),
    ("truncate", "for f in \"$1\"/*; do truncate -s 5 \"$f\"; done"),
    ("open O_TRUNC", "for f in \"$1\"/*; do : > \"$f\"; done"),
    (
        "fallocate",
        "for f in \"$1\"/*; do fallocate -o 0 -l 4096 \"$f\"; done",
    ),
];

/// One command, as one identity, on a fresh native and a fresh mounted
/// fixture: the outcomes, and the modes and capabilities after, equal.
fn differential(who: Who, op: &str, script: &str) {
    let m = mount();
    let nat = m.b("nat");
    let via = m.m("via");
    fixture(&nat);
    fixture(&via);
    assert_ne!(
        fs::read(m.b("via/suid.txt")).unwrap(),
        fs::read(m.m("via/suid.txt")).unwrap(),
        "the mounted text fixture should be stored as Corrected UTF-8"
    );
    assert_eq!(state(&nat), state(&via), "fixtures differ before {op}");
    let n = sh(who, script, &nat);
    let v = sh(who, script, &via);
    assert_eq!(
        (
            n.status.success(),
            String::from_utf8_lossy(&n.stderr).replace(&*nat.to_string_lossy(), "D")
        ),
        (
            v.status.success(),
            String::from_utf8_lossy(&v.stderr).replace(&*via.to_string_lossy(), "D")
        ),
        "{op} as {who:?}: outcomes differ"
    );
    let native = state(&nat);
    assert_eq!(
        native,
        state(&m.b("via")),
        "{op} as {who:?}: BACKING differs from native"
    );
    assert_eq!(
        native,
        state(&via),
        "{op} as {who:?}: the mount shows other modes than native"
    );
    // The file contents went through too (not refused on the way).
    for &(name, ..) in FILES {
        assert_eq!(
            fs::read(nat.join(name)).unwrap(),
            fs::read(via.join(name)).unwrap(),
            "{op} as {who:?}: {name} reads differently"
        );
    }
}

fn all_ops(who: Who) {
    for (op, script) in OPS {
        differential(who, op, script);
    }
}

#[test]
fn unprivileged_writer_loses_setid_bits_and_caps_as_natively() {
    all_ops(Who::User(user(A)));
}

#[test]
fn root_writer_keeps_setid_bits_as_natively() {
    all_ops(Who::Root);
}

#[test]
fn root_without_fsetid_loses_setid_bits_as_natively() {
    all_ops(Who::RootNoFsetid);
}

/// chown by root takes set-id bits and capabilities natively; through the
/// mount BACKING's own chown does it.
#[test]
fn chown_takes_setid_bits_and_caps_as_natively() {
    differential(
        Who::Root,
        "chown",
        "for f in \"$1\"/*; do chown 0:0 \"$f\"; done",
    );
    let u = user(A);
    differential(
        Who::Root,
        "chown to a user",
        &format!(
            "for f in \"$1\"/*; do chown {}:{} \"$f\"; done",
            u.uid, u.gid
        ),
    );
}

/// What this guards against: a user who may write a
/// set-user-ID root program must not be able to keep the bit while
/// changing the program. Checked on the BACKING file, which is what
/// executes outside the mount.
#[test]
fn user_cannot_plant_code_in_a_setuid_root_file() {
    let m = mount();
    fs::write(m.b("prog"), b"\x7fELF original").unwrap();
    fs::set_permissions(m.b("prog"), fs::Permissions::from_mode(0o4777)).unwrap();
    let out = sh_as(
        user(A),
        "printf '\\177ELF planted' > \"$1\"",
        &[m.m("prog").as_os_str()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (Emptied by the O_TRUNC, the file took the encoding of its first
    // write: read it back through the mount.)
    assert_eq!(fs::read(m.m("prog")).unwrap(), b"\x7fELF planted");
    let mode = fs::metadata(m.b("prog")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o777, "set-user-ID survived an unprivileged rewrite");
}

/// The kernel caches a file's attributes; the daemon removes set-id bits
/// itself, so it must tell the kernel, or `stat -c %A` (which asks only
/// for the mode, and so is answered from the kernel's cache) shows the
/// old mode right after the write. Each command, by the owner (a real
/// user, without CAP_FSETID), on a set-user-ID and set-group-ID file of
/// its own group: through the mount, right after, the mode is BACKING's.
#[test]
fn stat_right_after_a_write_shows_the_mode_backing_has() {
    let m = mount();
    let a = user(A);
    let ops: &[(&str, &str, &str)] = &[
        ("append", "printf 'x\\n' >> \"$1\"", "-rw-r-Sr--"),
        (
            "write in place",
            "printf T | dd of=\"$1\" bs=1 seek=1 conv=notrunc status=none",
            "-rw-r-Sr--",
        ),
        ("fallocate", "fallocate -l 8192 \"$1\"", "-rw-r-Sr--"),
        (
            "fallocate, keeping the size",
            "fallocate -n -l 65536 \"$1\"",
            "-rw-r-Sr--",
        ),
        ("truncate", "truncate -s 3 \"$1\"", "-rw-r-Sr--"),
    ];
    for (i, &(op, script, want)) in ops.iter().enumerate() {
        for text in [false, true] {
            let name = format!("f{i}{}", if text { ".txt" } else { ".bin" });
            let b = m.b(&name);
            let body: &[u8] = if text {
                "é text\nline two\n".as_bytes()
            } else {
                b"\x7fELF\x00 bin"
            };
            fs::write(&b, body).unwrap();
            std::os::unix::fs::chown(&b, Some(a.uid), Some(a.gid)).unwrap();
            fs::set_permissions(&b, fs::Permissions::from_mode(0o6644)).unwrap();
            let out = sh_as(
                a,
                &format!("stat -c %A \"$1\"; {script}; stat -c %A \"$1\""),
                &[m.m(&name).as_os_str()],
            );
            let shown = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{op} on {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let lines: Vec<&str> = shown.lines().collect();
            assert_eq!(
                lines.first(),
                Some(&"-rwSr-Sr--"),
                "{op} on {name}: {shown}"
            );
            let native = Command::new("stat")
                .args(["-c", "%A"])
                .arg(&b)
                .output()
                .unwrap();
            let native = String::from_utf8_lossy(&native.stdout).trim().to_string();
            assert_eq!(native, want, "{op} on {name}: BACKING");
            assert_eq!(
                lines.get(1),
                Some(&native.as_str()),
                "{op} on {name}: right after, the mount shows another mode than BACKING"
            );
        }
    }
}
