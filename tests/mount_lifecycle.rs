//! Mounting and unmounting as a user meets them: a second mount on the
//! same mount point is refused (never stacked), a stale mount point after
//! kill -9 says what to run, `auto_unmount` leaves none, and `-o log=FILE`
//! keeps a background daemon's log.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::mount::Mount;

use cutf8::MAGIC;

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
    crate::support::run::succeeded(&out, "command failed");
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
