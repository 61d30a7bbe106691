//! Permissions through the mount are exactly those of
//! BACKING — POSIX ACLs (deny and grant, user/group/mask, default ACLs),
//! the identities new files get, and which extended attribute names a
//! caller may see.
//!
//! Every check is differential: the same fixture is built twice inside
//! BACKING (`nat/` and `via/`), the same real unprivileged user runs the
//! same command once directly on `BACKING/…/nat` and once through the mount
//! (`-o allow_other`) on `MOUNT/…/via`, and the outcomes (success or the
//! error text), and the resulting trees (names, modes, owners, ACLs), must
//! be equal. The findings of the issue are also asserted as written.
//!
//! Needs root (real users through `setpriv`), FUSE, and a BACKING on a
//! filesystem with POSIX ACLs and trusted/security xattrs (ext4, xfs,
//! tmpfs): a failure, never a skip, without them.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::mount::{wait_for, Mount};
use crate::support::users::{sh_as, sh_with, shared_gid, user};

/// A mount over a BACKING every test user can reach (the users exist
/// before any fixture names them).
fn mount() -> Mount {
    for n in [A, B, C] {
        user(n);
    }
    Mount::new(&["allow_other"], |b| {
        let top = b.parent().unwrap();
        fs::set_permissions(top, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    })
}

/// `sh -c script` as root with `$1` = `dir`; must succeed.
fn root_sh(script: &str, dir: &Path) {
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(dir)
        .output()
        .expect("sh");
    crate::support::run::succeeded(&out, format_args!("set-up `{script}` in {}", dir.display()));
}

/// "ok", or the error text a command printed (its last `: ` field, which
/// is strerror's: "Permission denied", "Operation not permitted", …).
fn outcome(o: &Output) -> String {
    if o.status.success() {
        return "ok".into();
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err.lines().last().unwrap_or("").trim();
    match line.rsplit_once(": ") {
        Some((_, e)) => e.to_string(),
        None if line.is_empty() => format!("failed ({})", o.status),
        None => line.to_string(),
    }
}

/// Names, types, modes, owners, sizes and ACLs of everything under `dir`,
/// relative to it (read from BACKING, never through the mount).
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(dir.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let md = fs::symlink_metadata(dir.join(&r)).unwrap();
            let size = if md.is_file() { md.len() } else { 0 };
            out.push(format!(
                "{} mode={:o} uid={} gid={} size={}",
                r.display(),
                md.mode(),
                md.uid(),
                md.gid(),
                size
            ));
            if md.is_dir() {
                stack.push(r);
            }
        }
    }
    let acl = Command::new("sh")
        .args(["-c", "cd \"$1\" && getfacl -R -p -P . 2>&1", "sh"])
        .arg(dir)
        .output()
        .expect("getfacl");
    out.extend(
        String::from_utf8_lossy(&acl.stdout)
            .lines()
            .map(String::from),
    );
    out
}

/// One differential check.
struct Case {
    name: &'static str,
    /// Run as root with `$1` = a fresh directory (once for `nat`, once for
    /// `via`).
    setup: &'static str,
    who: &'static str,
    /// Run as `who` with `$1` = `BACKING/<case>/nat`, then with `$1` =
    /// `MOUNT/<case>/via`.
    op: &'static str,
    /// What it must give (as [`outcome`] says), if the issue says so.
    expect: Option<&'static str>,
}

/// Runs `cases` on `m`; returns one line per disagreement.
fn run_cases(m: &Mount, cases: &[Case]) -> Vec<String> {
    let mut bad = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let base = format!("c{i:02}");
        for side in ["nat", "via"] {
            let d = m.b(&format!("{base}/{side}"));
            fs::create_dir_all(&d).unwrap();
            fs::set_permissions(d.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
            fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
            root_sh(c.setup, &d);
        }
        let u = user(c.who);
        let nat_dir = m.b(&format!("{base}/nat"));
        let via_dir = m.m(&format!("{base}/via"));
        let nat = outcome(&sh_as(u, c.op, &[nat_dir.as_os_str()]));
        let via = outcome(&sh_as(u, c.op, &[via_dir.as_os_str()]));
        println!(
            "{:<40} {:<10} native: {nat:<25} mount: {via}",
            c.name, c.who
        );
        if nat != via {
            bad.push(format!(
                "{}: `{}` as {}: natively {nat:?}, through the mount {via:?}",
                c.name, c.op, c.who
            ));
        }
        if let Some(e) = c.expect {
            if via != e {
                bad.push(format!(
                    "{}: `{}` as {} through the mount: {via:?}, expected {e:?}",
                    c.name, c.op, c.who
                ));
            }
        }
        let (sn, sv) = (
            snapshot(&m.b(&format!("{base}/nat"))),
            snapshot(&m.b(&format!("{base}/via"))),
        );
        if sn != sv {
            bad.push(format!(
                "{}: trees differ afterwards\n  native: {sn:?}\n  mount:  {sv:?}",
                c.name
            ));
        }
    }
    bad
}

const A: &str = "cutf8t-a";
const B: &str = "cutf8t-b";
const C: &str = "cutf8t-c";

const DENY_A_READ: &str =
    "printf hi > \"$1/f\"; chmod 644 \"$1/f\"; setfacl -m u:cutf8t-a:--- \"$1/f\"";
const DIR_777_A_RX: &str =
    "mkdir \"$1/d\"; chmod 777 \"$1/d\"; printf x > \"$1/d/f\"; setfacl -m u:cutf8t-a:r-x \"$1/d\"";
const B_MAY_READ: &str =
    "printf secret > \"$1/f\"; chmod 600 \"$1/f\"; setfacl -m u:cutf8t-b:r-- \"$1/f\"";
const A_RW_0600: &str =
    "printf hi > \"$1/f\"; chmod 600 \"$1/f\"; setfacl -m u:cutf8t-a:rw- \"$1/f\"";
const A_RW_MASK_R: &str =
    "printf hi > \"$1/f\"; chmod 600 \"$1/f\"; setfacl -m u:cutf8t-a:rw-,m::r-- \"$1/f\"";
const SHARED_R_0600: &str =
    "printf hi > \"$1/f\"; chmod 600 \"$1/f\"; setfacl -m g:cutf8t-shared:r-- \"$1/f\"";
const SHARED_DENY_0666: &str =
    "printf hi > \"$1/f\"; chmod 666 \"$1/f\"; setfacl -m g:cutf8t-shared:--- \"$1/f\"";
const OWNING_GROUP_MASKED: &str = "printf hi > \"$1/f\"; chgrp cutf8t-shared \"$1/f\"; chmod 640 \"$1/f\"; setfacl -m u:cutf8t-c:r--,m::--- \"$1/f\"";
const SCRIPT_A_RX: &str = "printf '#!/bin/sh\\nexit 0\\n' > \"$1/s\"; chmod 644 \"$1/s\"; setfacl -m u:cutf8t-a:r-x \"$1/s\"";
const SCRIPT_A_R: &str = "printf '#!/bin/sh\\nexit 0\\n' > \"$1/s\"; chmod 755 \"$1/s\"; setfacl -m u:cutf8t-a:r-- \"$1/s\"";
const DIR_A_NO_SEARCH: &str =
    "mkdir \"$1/d\"; printf x > \"$1/d/f\"; chmod 755 \"$1/d\"; setfacl -m u:cutf8t-a:r-- \"$1/d\"";
const DIR_A_NOTHING: &str =
    "mkdir \"$1/d\"; printf x > \"$1/d/f\"; chmod 755 \"$1/d\"; setfacl -m u:cutf8t-a:--- \"$1/d\"";
const DIR_A_RWX: &str =
    "mkdir \"$1/d\"; printf x > \"$1/d/f\"; chmod 755 \"$1/d\"; setfacl -m u:cutf8t-a:rwx \"$1/d\"";
const DIR_SHARED_MASKED: &str = "mkdir \"$1/d\"; printf x > \"$1/d/f\"; chgrp cutf8t-shared \"$1/d\"; chmod 775 \"$1/d\"; setfacl -m u:cutf8t-c:rwx,m::r-x \"$1/d\"";
const DIR_SHARED_DENY: &str =
    "mkdir \"$1/d\"; printf x > \"$1/d/f\"; chmod 777 \"$1/d\"; setfacl -m g:cutf8t-shared:r-x \"$1/d\"";
const STICKY_A_RWX: &str = "mkdir \"$1/d\"; chmod 1777 \"$1/d\"; setfacl -m u:cutf8t-a:rwx \"$1/d\"; printf x > \"$1/d/f\"; chown cutf8t-b \"$1/d/f\"; setfacl -m u:cutf8t-a:rw- \"$1/d/f\"";
const TWO_DIRS: &str = "mkdir \"$1/d1\" \"$1/d2\"; chmod 755 \"$1/d1\" \"$1/d2\"; printf x > \"$1/d1/f\"; setfacl -m u:cutf8t-a:rwx \"$1/d1\"";
const OTHER_WITH_ACL: &str =
    "printf hi > \"$1/f\"; chmod 604 \"$1/f\"; setfacl -m u:cutf8t-a:--- \"$1/f\"";
const A_WRITE_ONLY: &str =
    "printf hi > \"$1/f\"; chmod 600 \"$1/f\"; setfacl -m u:cutf8t-a:-w- \"$1/f\"";
const A_OWNS_SETGID_OTHER_GROUP: &str =
    "printf hi > \"$1/f\"; chown cutf8t-a:cutf8t-c \"$1/f\"; chmod 2775 \"$1/f\"";
const A_OWNS: &str = "printf hi > \"$1/f\"; chown cutf8t-a \"$1/f\"; chmod 600 \"$1/f\"";

/// The deny/grant × user/group/mask × operation matrix, native vs mount.
#[test]
fn acl_matrix_matches_backing() {
    let m = mount();
    let cases = [
        // Finding 3, verbatim.
        Case { name: "3a: 0644 with u:A:--- is not readable by A", setup: DENY_A_READ, who: A, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "3b: 0777 dir with u:A:r-x: no unlink", setup: DIR_777_A_RX, who: A, op: "rm -f \"$1/d/f\"", expect: Some("Permission denied") },
        Case { name: "3b: 0777 dir with u:A:r-x: no rename", setup: DIR_777_A_RX, who: A, op: "mv \"$1/d/f\" \"$1/d/g\"", expect: Some("Permission denied") },
        Case { name: "3b: 0777 dir with u:A:r-x: no create", setup: DIR_777_A_RX, who: A, op: ": > \"$1/d/new\"", expect: Some("Permission denied") },
        Case { name: "3c: 0600 with u:B:r-- is readable by B", setup: B_MAY_READ, who: B, op: "cat \"$1/f\"", expect: Some("ok") },
        Case { name: "3c: … but not writable by B", setup: B_MAY_READ, who: B, op: "printf x >> \"$1/f\"", expect: Some("Permission denied") },
        // User entries.
        Case { name: "user grant: write", setup: A_RW_0600, who: A, op: "printf x >> \"$1/f\"", expect: Some("ok") },
        Case { name: "user grant: truncate", setup: A_RW_0600, who: A, op: "truncate -s 1 \"$1/f\"", expect: Some("ok") },
        Case { name: "user grant: touch (now)", setup: A_RW_0600, who: A, op: "touch \"$1/f\"", expect: Some("ok") },
        Case { name: "user grant: no explicit times (not owner)", setup: A_RW_0600, who: A, op: "touch -d 2001-01-01 \"$1/f\"", expect: Some("Operation not permitted") },
        Case { name: "user grant: no chmod (not owner)", setup: A_RW_0600, who: A, op: "chmod 666 \"$1/f\"", expect: Some("Operation not permitted") },
        Case { name: "user grant: not for others", setup: A_RW_0600, who: C, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "user deny, mask --- (the kernel then reads other)", setup: OTHER_WITH_ACL, who: A, op: "cat \"$1/f\"", expect: None },
        Case { name: "user deny: other still reads", setup: OTHER_WITH_ACL, who: C, op: "cat \"$1/f\"", expect: Some("ok") },
        // Mask.
        Case { name: "mask r--: read ok", setup: A_RW_MASK_R, who: A, op: "cat \"$1/f\"", expect: Some("ok") },
        Case { name: "mask r--: write denied", setup: A_RW_MASK_R, who: A, op: "printf x >> \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "mask ---: owning group denied", setup: OWNING_GROUP_MASKED, who: A, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "mask ---: named user denied", setup: OWNING_GROUP_MASKED, who: C, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        // Group entries.
        Case { name: "group grant: member reads", setup: SHARED_R_0600, who: A, op: "cat \"$1/f\"", expect: Some("ok") },
        Case { name: "group grant: member may not write", setup: SHARED_R_0600, who: B, op: "printf x >> \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "group grant: non-member denied", setup: SHARED_R_0600, who: C, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "group deny beats other", setup: SHARED_DENY_0666, who: A, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "group deny: non-member reads", setup: SHARED_DENY_0666, who: C, op: "cat \"$1/f\"", expect: Some("ok") },
        // Exec.
        Case { name: "exec grant on 0644", setup: SCRIPT_A_RX, who: A, op: "\"$1/s\"", expect: Some("ok") },
        Case { name: "exec deny on 0755", setup: SCRIPT_A_R, who: A, op: "\"$1/s\"", expect: Some("Permission denied") },
        Case { name: "exec deny on 0755: others run it", setup: SCRIPT_A_R, who: C, op: "\"$1/s\"", expect: Some("ok") },
        // Directories: search, list, create, unlink, rename.
        Case { name: "dir r-- for A: no search", setup: DIR_A_NO_SEARCH, who: A, op: "cat \"$1/d/f\"", expect: Some("Permission denied") },
        Case { name: "dir --- for A: no listing", setup: DIR_A_NOTHING, who: A, op: "ls \"$1/d\"", expect: Some("Permission denied") },
        Case { name: "dir --- for A: no cd", setup: DIR_A_NOTHING, who: A, op: "cd \"$1/d\" 2>/dev/null", expect: None },
        Case { name: "dir rwx for A: create", setup: DIR_A_RWX, who: A, op: ": > \"$1/d/new\"", expect: Some("ok") },
        Case { name: "dir rwx for A: mkdir", setup: DIR_A_RWX, who: A, op: "mkdir \"$1/d/sub\"", expect: Some("ok") },
        Case { name: "dir rwx for A: unlink", setup: DIR_A_RWX, who: A, op: "rm -f \"$1/d/f\"", expect: Some("ok") },
        Case { name: "dir rwx for A: rename", setup: DIR_A_RWX, who: A, op: "mv \"$1/d/f\" \"$1/d/g\"", expect: Some("ok") },
        Case { name: "dir rwx for A: symlink", setup: DIR_A_RWX, who: A, op: "ln -s f \"$1/d/l\"", expect: Some("ok") },
        Case { name: "dir rwx for A: not for C", setup: DIR_A_RWX, who: C, op: ": > \"$1/d/new\"", expect: Some("Permission denied") },
        Case { name: "dir group mask r-x: member no create", setup: DIR_SHARED_MASKED, who: A, op: ": > \"$1/d/new\"", expect: Some("Permission denied") },
        Case { name: "dir mask r-x: named user no unlink", setup: DIR_SHARED_MASKED, who: C, op: "rm -f \"$1/d/f\"", expect: Some("Permission denied") },
        Case { name: "dir group deny: member no create", setup: DIR_SHARED_DENY, who: A, op: ": > \"$1/d/new\"", expect: Some("Permission denied") },
        Case { name: "dir group deny: non-member creates", setup: DIR_SHARED_DENY, who: C, op: ": > \"$1/d/new\"", expect: Some("ok") },
        Case { name: "sticky dir + ACL: no unlink of B's file", setup: STICKY_A_RWX, who: A, op: "rm -f \"$1/d/f\"", expect: Some("Operation not permitted") },
        Case { name: "sticky dir + ACL: B unlinks own", setup: STICKY_A_RWX, who: B, op: "rm -f \"$1/d/f\"", expect: Some("ok") },
        Case { name: "rename into a dir without grant", setup: TWO_DIRS, who: A, op: "mv \"$1/d1/f\" \"$1/d2/f\"", expect: Some("Permission denied") },
        Case { name: "rename within granted dir", setup: TWO_DIRS, who: A, op: "mv \"$1/d1/f\" \"$1/d1/g\"", expect: Some("ok") },
        // ACLs themselves: only the owner changes them; they read back.
        Case { name: "setfacl by non-owner", setup: A_RW_0600, who: A, op: "setfacl -m u:cutf8t-a:rwx \"$1/f\"", expect: Some("Operation not permitted") },
        Case { name: "setfacl by owner", setup: A_OWNS, who: A, op: "setfacl -m u:cutf8t-b:r--,g:cutf8t-shared:rw- \"$1/f\"", expect: Some("ok") },
        Case { name: "setfacl by owner then grantee reads", setup: A_OWNS, who: A, op: "setfacl -m u:cutf8t-c:r-- \"$1/f\" && getfacl -c \"$1/f\" | grep -q user:cutf8t-c:r--", expect: Some("ok") },
        Case { name: "chmod by owner narrows the mask", setup: A_OWNS, who: A, op: "setfacl -m u:cutf8t-b:rw- \"$1/f\" && chmod 640 \"$1/f\" && getfacl -c \"$1/f\" | grep -qx 'mask::r--'", expect: Some("ok") },
        Case { name: "write-only grant: write", setup: A_WRITE_ONLY, who: A, op: "printf x >> \"$1/f\"", expect: Some("ok") },
        Case { name: "write-only grant: no read", setup: A_WRITE_ONLY, who: A, op: "cat \"$1/f\"", expect: Some("Permission denied") },
        Case { name: "setfacl by owner outside the group clears setgid", setup: A_OWNS_SETGID_OTHER_GROUP, who: A, op: "setfacl -m u:cutf8t-b:r-x \"$1/f\"", expect: Some("ok") },
        Case { name: "getfacl reads the ACL", setup: B_MAY_READ, who: C, op: "getfacl -c \"$1/f\" | grep -q user:cutf8t-b:r--", expect: Some("ok") },
    ];
    let bad = run_cases(&m, &cases);
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A change of ACL made directly in BACKING while mounted counts within
/// the attribute timeout (1 s by default), like a change of mode.
#[test]
fn acl_changed_in_backing_counts_after_attr_timeout() {
    let m = mount();
    let a = user(A);
    fs::write(m.b("f"), "hi").unwrap();
    fs::set_permissions(m.b("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let read = |p: &Path| outcome(&sh_as(a, "cat \"$1\"", &[p.as_os_str()]));
    assert_eq!(read(&m.m("f")), "ok");
    // Each change must count within the attribute timeout: polled up to
    // 1.6 s (the timeout, and slack for a loaded machine).
    let within = |p: &Path, want: &str| wait_for(1.6, || read(p) == want);
    root_sh("setfacl -m u:cutf8t-a:--- \"$1/f\"", &m.backing);
    assert!(
        within(&m.m("f"), "Permission denied"),
        "a deny entry set in BACKING"
    );
    root_sh("setfacl -b \"$1/f\"", &m.backing);
    assert!(within(&m.m("f"), "ok"), "the ACL removed in BACKING");
    // A grant, and a directory that stops being searchable.
    root_sh(
        "mkdir \"$1/d\"; printf x > \"$1/d/g\"; chmod 600 \"$1/d/g\"; chmod 755 \"$1/d\"",
        &m.backing,
    );
    assert_eq!(read(&m.m("d/g")), "Permission denied");
    root_sh("setfacl -m u:cutf8t-a:r-- \"$1/d/g\"", &m.backing);
    assert!(within(&m.m("d/g"), "ok"), "a grant set in BACKING");
    root_sh("setfacl -m u:cutf8t-a:r-- \"$1/d\"", &m.backing);
    assert!(
        within(&m.m("d/g"), "Permission denied"),
        "search taken away in BACKING"
    );
}

/// Default ACLs are inherited by what is created through the mount exactly
/// as natively, and the umask applies only where there is none.
#[test]
fn default_acls_and_umask_as_backing() {
    let m = mount();
    let make =
        "umask 077; : > \"$1/d/f\"; mkdir \"$1/d/sub\"; mkfifo \"$1/d/p\"; : > \"$1/d/sub/g\"; \
                umask 027; : > \"$1/e/f\"; mkdir \"$1/e/sub\"; mkfifo -m 666 \"$1/e/p\"; \
                umask 0; mkdir -m 2777 \"$1/e/s\"; : > \"$1/e/s/x\"";
    let cases = [
        Case {
            name: "default ACL inherited, umask ignored",
            setup: "mkdir \"$1/d\" \"$1/e\"; chmod 777 \"$1/d\" \"$1/e\"; \
                    setfacl -d -m u:cutf8t-b:rwx,g:cutf8t-shared:r-x,o::r-x \"$1/d\"",
            who: A,
            op: make,
            expect: Some("ok"),
        },
        Case {
            name: "default ACL with a mask",
            setup: "mkdir \"$1/d\" \"$1/e\"; chmod 777 \"$1/d\" \"$1/e\"; \
                    setfacl -d -m u:cutf8t-b:rwx,m::r-x \"$1/d\"",
            who: C,
            op: make,
            expect: Some("ok"),
        },
    ];
    let bad = run_cases(&m, &cases);
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
    // And the inheritance is there at all (a broken fixture would make
    // the comparison vacuous).
    let acl = Command::new("getfacl")
        .args(["-c", "-p"])
        .arg(m.b("c00/via/d/f"))
        .output()
        .unwrap();
    let acl = String::from_utf8_lossy(&acl.stdout);
    assert!(
        acl.contains("user:cutf8t-b:rwx"),
        "no inherited entry: {acl}"
    );
    let mode = fs::metadata(m.b("c00/via/e/f")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o640, "umask 027 without a default ACL");
}

/// Files, directories, symlinks and nodes created through the mount get
/// the caller's fsuid/fsgid and group semantics, as natively.
#[test]
fn identities_as_backing() {
    let m = mount();
    let make =
        "umask 022; : > \"$1/d/f\"; mkdir \"$1/d/sub\"; ln -s f \"$1/d/l\"; mkfifo \"$1/d/p\"; \
                mkdir -m 2775 \"$1/d/sg\" 2>/dev/null; true";
    let cases = [
        Case {
            name: "plain dir",
            setup: "mkdir \"$1/d\"; chmod 777 \"$1/d\"",
            who: A,
            op: make,
            expect: Some("ok"),
        },
        Case {
            name: "setgid dir, member",
            setup: "mkdir \"$1/d\"; chgrp cutf8t-shared \"$1/d\"; chmod 2777 \"$1/d\"",
            who: B,
            op: make,
            expect: Some("ok"),
        },
        Case {
            name: "setgid dir, non-member",
            setup: "mkdir \"$1/d\"; chgrp cutf8t-shared \"$1/d\"; chmod 2777 \"$1/d\"",
            who: C,
            op: make,
            expect: Some("ok"),
        },
        Case {
            name: "chgrp to a group one is in",
            setup: A_OWNS,
            who: A,
            op: "chgrp cutf8t-shared \"$1/f\"",
            expect: Some("ok"),
        },
        Case {
            name: "chgrp to a group one is not in",
            setup: A_OWNS,
            who: A,
            op: "chgrp cutf8t-c \"$1/f\"",
            expect: Some("Operation not permitted"),
        },
        Case {
            name: "chown away",
            setup: A_OWNS,
            who: A,
            op: "chown cutf8t-b \"$1/f\"",
            expect: Some("Operation not permitted"),
        },
    ];
    let bad = run_cases(&m, &cases);
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
    let (a, b) = (user(A), user(B));
    let md = fs::symlink_metadata(m.b("c00/via/d/l")).unwrap();
    assert_eq!(
        (md.uid(), md.gid()),
        (a.uid, a.gid),
        "symlink made through the mount"
    );
    let md = fs::metadata(m.b("c01/via/d/sub")).unwrap();
    assert_eq!(md.gid(), shared_gid());
    assert_ne!(md.mode() & 0o2000, 0, "setgid inherited by a subdirectory");
    let md = fs::metadata(m.b("c01/via/d/f")).unwrap();
    assert_eq!((md.uid(), md.gid()), (b.uid, shared_gid()));
}

/// Two users creating at once through the mount (the daemon's worker
/// threads switch identity and umask per request): every file has its
/// creator's owner and its creator's umask, never the other's.
#[test]
fn concurrent_creators_keep_their_own_identity_and_umask() {
    let m = mount();
    root_sh("mkdir \"$1/d\"; chmod 1777 \"$1/d\"", &m.backing);
    let d = m.m("d");
    let script = "umask $2; i=0; while [ $i -lt 150 ]; do : > \"$1/$3$i\" || exit 1; \
                  mkdir \"$1/$3d$i\" || exit 1; i=$((i+1)); done";
    let (a, c) = (user(A), user(C));
    std::thread::scope(|s| {
        let ja = s.spawn(|| sh_as(a, script, &[d.as_os_str(), "077".as_ref(), "a".as_ref()]));
        let jc = s.spawn(|| sh_as(c, script, &[d.as_os_str(), "000".as_ref(), "c".as_ref()]));
        for (who, j) in [("A", ja), ("C", jc)] {
            let out = j.join().unwrap();
            assert_eq!(
                outcome(&out),
                "ok",
                "{who}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    });
    let mut bad = Vec::new();
    for e in fs::read_dir(m.b("d")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let md = e.metadata().unwrap();
        let want = match (name.starts_with('a'), md.is_dir()) {
            (true, false) => (a.uid, a.gid, 0o600),
            (true, true) => (a.uid, a.gid, 0o700),
            (false, false) => (c.uid, c.gid, 0o666),
            (false, true) => (c.uid, c.gid, 0o777),
        };
        let got = (md.uid(), md.gid(), md.mode() & 0o7777);
        if got != want {
            bad.push(format!("{name}: {got:?}, expected {want:?}"));
        }
    }
    assert!(bad.is_empty(), "{} wrong:\n{}", bad.len(), bad.join("\n"));
}

/// Finding 5: a root caller with a non-root gid creates with that gid.
#[test]
fn root_with_a_non_root_gid_creates_with_that_gid() {
    let m = mount();
    let c = user(C);
    let shared = shared_gid();
    let script = "umask 022; : > \"$1/f\"; mkdir \"$1/d\"; ln -s f \"$1/l\"; mkfifo \"$1/p\"; mknod \"$1/n\" c 1 3; : > \"$1/sg/f\"; mkdir \"$1/sg/d\"";
    let runs: [(&str, &[u32]); 2] = [("no groups", &[]), ("shared as supplementary", &[shared])];
    for (i, (what, groups)) in runs.into_iter().enumerate() {
        let (nat, via) = (format!("r{i}/nat"), format!("r{i}/via"));
        for side in [&nat, &via] {
            fs::create_dir_all(m.b(&format!("{side}/sg"))).unwrap();
            root_sh(
                "chgrp cutf8t-shared \"$1/sg\"; chmod 2775 \"$1/sg\"",
                &m.b(side),
            );
        }
        for dir in [m.b(&nat), m.m(&via)] {
            let out = sh_with(0, c.gid, groups, script, &[dir.as_os_str()]);
            assert_eq!(
                outcome(&out),
                "ok",
                "{what} in {}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(snapshot(&m.b(&nat)), snapshot(&m.b(&via)), "{what}");
        for n in ["f", "d", "p", "n"] {
            let md = fs::metadata(m.b(&format!("{via}/{n}"))).unwrap();
            assert_eq!(
                (md.uid(), md.gid()),
                (0, c.gid),
                "finding 5 ({what}): {n} through the mount"
            );
        }
        let md = fs::symlink_metadata(m.b(&format!("{via}/l"))).unwrap();
        assert_eq!(
            (md.uid(), md.gid()),
            (0, c.gid),
            "finding 5 ({what}): symlink through the mount"
        );
        let md = fs::metadata(m.b(&format!("{via}/sg/d"))).unwrap();
        assert_eq!(md.gid(), shared, "{what}: a setgid directory's group wins");
    }
}

/// Finding 4 and friends: which xattr names a caller sees, as natively.
#[test]
fn xattr_names_visible_as_natively() {
    let m = mount();
    let setup = "printf hi > \"$1/f\"; chmod 644 \"$1/f\"; \
                 setfattr -n trusted.secret -v 1 \"$1/f\"; setfattr -n security.label -v 2 \"$1/f\"; \
                 setfattr -n user.note -v 3 \"$1/f\"; setfacl -m u:cutf8t-b:r-- \"$1/f\"";
    for side in ["nat", "via"] {
        let d = m.b(side);
        fs::create_dir(&d).unwrap();
        root_sh(setup, &d);
    }
    let list =
        "/usr/bin/python3 -c 'import os,sys; print(sorted(os.listxattr(sys.argv[1])))' \"$1/f\"";
    let dump = "getfattr -d -m - --absolute-names \"$1/f\" | sed 1d";
    let get_trusted = "getfattr -n trusted.secret --only-values \"$1/f\"";
    let get_security = "getfattr -n security.label --only-values \"$1/f\"";
    let mut bad = Vec::new();
    let mut check = |who: &str, run: &dyn Fn(&str, &Path) -> Output| {
        for (what, script) in [
            ("list", list),
            ("dump", dump),
            ("trusted", get_trusted),
            ("security", get_security),
        ] {
            let nat = run(script, &m.b("nat"));
            let via = run(script, &m.m("via"));
            let (n, v) = (
                (
                    outcome(&nat),
                    String::from_utf8_lossy(&nat.stdout).into_owned(),
                ),
                (
                    outcome(&via),
                    String::from_utf8_lossy(&via.stdout).into_owned(),
                ),
            );
            println!(
                "{who:<24} {what:<9} native: {n:?}\n{:<34} mount:  {v:?}",
                ""
            );
            if n != v {
                bad.push(format!(
                    "{who} {what}: natively {n:?}, through the mount {v:?}"
                ));
            }
        }
    };
    let a = user(A);
    check("user A", &|s, d| sh_as(a, s, &[d.as_os_str()]));
    check("root", &|s, d| sh_with(0, 0, &[], s, &[d.as_os_str()]));
    // Root without CAP_SYS_ADMIN (dropped from the bounding set, so not in
    // its effective set after exec) sees trusted.* natively no more.
    check("root without SYS_ADMIN", &|s, d| {
        Command::new("setpriv")
            .args(["--bounding-set=-sys_admin", "--", "sh", "-c", s, "sh"])
            .arg(d)
            .output()
            .unwrap()
    });
    let out = sh_as(a, list, &[m.m("via").as_os_str()]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!shown.contains("trusted."), "finding 4: {shown}");
    assert!(shown.contains("user.note"), "{shown}");
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// A daemon whose switch of identity does not take (here: root without
/// CAP_SETUID, so setfsuid changes nothing and says nothing) must not
/// create as itself: the request fails with EIO and the log says why.
#[test]
fn an_identity_switch_that_does_not_take_fails_with_eio() {
    for n in [A, B, C] {
        user(n);
    }
    let dir = tempfile::Builder::new()
        .prefix("cutf8fs-test-")
        .tempdir()
        .unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (backing, mnt, log) = (
        dir.path().join("backing"),
        dir.path().join("mnt"),
        dir.path().join("daemon.log"),
    );
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    fs::set_permissions(&backing, fs::Permissions::from_mode(0o777)).unwrap();
    let out = fs::File::create(&log).unwrap();
    let mut child = Command::new("setpriv")
        .args(["--bounding-set=-setuid", "--"])
        .arg(crate::support::mount::BIN)
        .arg("-f")
        .arg(&backing)
        .arg(&mnt)
        .args(["-o", "allow_other"])
        .env("RUST_LOG", "info")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("setpriv cutf8fs");
    let up = crate::support::mount::wait_for(20.0, || crate::support::mount::is_mounted(&mnt));
    let text = || fs::read_to_string(&log).unwrap_or_default();
    let a = user(A);
    let create = sh_as(a, ": > \"$1/f\"", &[mnt.as_os_str()]);
    let mkdir = sh_as(a, "mkdir \"$1/d\"", &[mnt.as_os_str()]);
    let root = sh_with(0, 0, &[], ": > \"$1/r\"", &[mnt.as_os_str()]);
    let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
    let _ = child.wait();
    assert!(up, "the daemon did not mount: {}", text());
    assert_eq!(outcome(&create), "Input/output error", "log: {}", text());
    assert_eq!(outcome(&mkdir), "Input/output error", "log: {}", text());
    assert!(!backing.join("f").exists() && !backing.join("d").exists());
    assert!(
        text().contains("did not take effect"),
        "no log line saying why: {}",
        text()
    );
    // Root's own requests need no switch of user and still work.
    assert_eq!(outcome(&root), "ok", "log: {}", text());
}
