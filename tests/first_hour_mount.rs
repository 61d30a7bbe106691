//! The first hour of a new user (issue 13), on real mounts: text written
//! through the mount that tools outside it must still read (git's
//! metadata, `#!` scripts), a corrected file copied into the mount, and
//! `cutf8 migrate` pointed at a mount.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::support::mount::Mount;

const MAGIC: [u8; 8] = [0xEF, 0xB7, 0x9D, 0xED, 0xB2, 0xAE, 0x00, 0x0A];

#[track_caller]
fn run(dir: &Path, prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?} in {}: {}\n{}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const GIT_ID: [&str; 4] = [
    "-c",
    "user.name=New User",
    "-c",
    "user.email=new@example.org",
];

fn git(dir: &Path, args: &[&str]) -> String {
    let mut v = GIT_ID.to_vec();
    v.extend_from_slice(args);
    run(dir, "git", &v)
}

#[test]
fn git_init_inside_the_mount_leaves_a_repository_git_reads_in_backing() {
    let m = Mount::new(&[], |_| {});
    let mnt = m.m("");
    git(&mnt, &["init", "-q", "-b", "main"]);
    fs::write(m.m("notes.txt"), "café\n").unwrap();
    git(&mnt, &["add", "notes.txt"]);
    git(&mnt, &["commit", "-q", "-m", "first"]);
    // git on BACKING: the metadata is raw, the worktree file corrected.
    let head = fs::read(m.b(".git/HEAD")).unwrap();
    assert_eq!(head, b"ref: refs/heads/main\n", "{}", m.log_text());
    assert!(!fs::read(m.b(".git/config")).unwrap().starts_with(&MAGIC));
    assert!(fs::read(m.b("notes.txt")).unwrap().starts_with(&MAGIC));
    let log = git(&m.backing, &["log", "--format=%s"]);
    assert_eq!(log, "first\n");
    // The blob git stored is the view, as committed through the mount.
    assert_eq!(git(&m.backing, &["show", "HEAD:notes.txt"]), "café\n");
    // And git through the mount still works after the fact.
    assert_eq!(git(&mnt, &["status", "--porcelain"]), "");
}

#[test]
fn rawdirs_changes_the_list() {
    let m = Mount::new(&["rawdirs=meta"], |b| {
        fs::create_dir(b.join("meta")).unwrap();
        fs::create_dir(b.join(".git")).unwrap();
    });
    fs::write(m.m("meta/a.txt"), "a\n").unwrap();
    fs::write(m.m(".git/b.txt"), "b\n").unwrap();
    assert_eq!(fs::read(m.b("meta/a.txt")).unwrap(), b"a\n");
    assert!(fs::read(m.b(".git/b.txt")).unwrap().starts_with(&MAGIC));
}

#[test]
fn a_script_written_through_the_mount_runs_from_backing() {
    let m = Mount::new(&[], |_| {});
    fs::write(m.m("hello.sh"), "#!/bin/sh\necho \"héllo from $0\"\n").unwrap();
    fs::set_permissions(m.m("hello.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.m("plain.txt"), "#not a script\n").unwrap();
    assert!(fs::read(m.b("hello.sh"))
        .unwrap()
        .starts_with(b"#!/bin/sh\n"));
    let out = run(&m.backing, "./hello.sh", &[]);
    assert_eq!(out, "héllo from ./hello.sh\n");
    // Other new text files are still stored corrected.
    assert!(fs::read(m.b("plain.txt")).unwrap().starts_with(&MAGIC));
}

#[test]
fn copying_a_corrected_file_into_the_mount_says_what_to_do() {
    let m = Mount::new(&[], |_| {});
    let src = m.dir().join("x.cu8");
    let mut disk = MAGIC.to_vec();
    disk.extend_from_slice(b"text\n");
    fs::write(&src, &disk).unwrap();
    let out = Command::new("cp").arg(&src).arg(m.m("")).output().unwrap();
    assert!(!out.status.success(), "cp must fail");
    let log = m.log_text();
    assert!(
        log.contains("x.cu8: refused a write (EILSEQ)")
            && log.contains("copy it into BACKING directly, or decode it first"),
        "the log names the file and the remedy:\n{log}"
    );
}

#[test]
fn migrate_refuses_a_path_on_a_mount() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("a.txt"), "a\n").unwrap();
    });
    let out = Command::new(crate::support::cli::BIN)
        .arg("migrate")
        .arg(m.m("a.txt"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is on a cutf8fs mount") && err.contains(&*m.backing.to_string_lossy()),
        "names the mount and BACKING: {err}"
    );
    assert_eq!(fs::read(m.b("a.txt")).unwrap(), b"a\n", "nothing converted");
    // The same file, named in BACKING, converts.
    let out = Command::new(crate::support::cli::BIN)
        .args(["migrate", "-q"])
        .arg(m.b("a.txt"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// Runs `cutf8fs -f BACKING MNT opts...`, which must fail; its stderr.
fn mount_fails(m: &Mount, opts: &[&str]) -> String {
    let mut cmd = Command::new(crate::support::mount::BIN);
    cmd.arg("-f").arg(&m.backing).arg(&m.mnt);
    for o in opts {
        cmd.arg("-o").arg(o);
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run cutf8fs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "must not mount: {err}");
    err
}

fn mounts_at(mnt: &Path) -> usize {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_string_lossy().replace(' ', "\\040");
    info.lines()
        .filter(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .count()
}

#[test]
fn mounting_twice_says_already_mounted_and_never_stacks() {
    let m = Mount::new(&[], |_| {});
    for opts in [&[][..], &["nonempty"][..]] {
        let err = mount_fails(&m, opts);
        assert!(
            err.contains("is already mounted")
                && err.contains(&format!("fusermount3 -u {}", m.mnt.display())),
            "{err}"
        );
    }
    assert_eq!(mounts_at(&m.mnt), 1, "one mount, not stacked");
}

#[test]
fn a_stale_mountpoint_after_kill_9_says_what_to_run() {
    let mut m = Mount::new(&[], |_| {});
    let mut child = m.take_child().expect("daemon");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let err = mount_fails(&m, &[]);
    let _ = Command::new("fusermount3").arg("-u").arg(&m.mnt).status();
    if crate::support::mount::is_mounted(&m.mnt) {
        let _ = Command::new("umount").arg("-l").arg(&m.mnt).status();
    }
    assert!(
        err.contains("stale FUSE mount") && err.contains("fusermount3 -u"),
        "{err}"
    );
}

#[test]
fn auto_unmount_leaves_no_stale_mount_after_kill_9() {
    let mut m = Mount::new(&["auto_unmount"], |d| {
        fs::write(
            d.join("f.txt"),
            crate::support::mount::corrected(b"hello\n"),
        )
        .unwrap();
    });
    assert_eq!(fs::read(m.m("f.txt")).unwrap(), b"hello\n");
    let mut child = m.take_child().expect("daemon");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        crate::support::mount::wait_for(10.0, || !crate::support::mount::is_mounted(&m.mnt)),
        "the mount outlived its daemon (kill -9) despite auto_unmount"
    );
    // A plain directory again: mounting there works at once.
    let mut again = Command::new(crate::support::mount::BIN)
        .arg("-f")
        .arg(&m.backing)
        .arg(&m.mnt)
        .spawn()
        .unwrap();
    let up = crate::support::mount::wait_for(20.0, || crate::support::mount::is_mounted(&m.mnt));
    assert!(up, "could not mount again after the watchdog unmounted");
    assert_eq!(fs::read(m.m("f.txt")).unwrap(), b"hello\n");
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&m.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    again.wait().unwrap();
}

#[test]
fn log_file_option_keeps_the_background_daemons_log() {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mnt) = (dir.path().join("b"), dir.path().join("m"));
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let log = dir.path().join("cutf8fs.log");
    // A log file that cannot be opened is reported before detaching.
    let out = Command::new(crate::support::mount::BIN)
        .arg(&backing)
        .arg(&mnt)
        .arg("-o")
        .arg(format!(
            "log={}",
            dir.path().join("no/such/dir/log").display()
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("log="),
        "{out:?}"
    );
    assert!(!crate::support::mount::is_mounted(&mnt));
    // In the background (no -f), the log goes to FILE.
    let out = Command::new(crate::support::mount::BIN)
        .arg(&backing)
        .arg(&mnt)
        .arg("-o")
        .arg(format!("log={}", log.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut bad = MAGIC.to_vec();
    bad.extend_from_slice(b"x\n");
    let refused = fs::write(mnt.join("in.cu8"), &bad);
    let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
    assert!(refused.is_err());
    let text = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("in.cu8: refused a write"),
        "log file: {text:?}"
    );
}
