//! The `cutf8fs` command line tells the truth where the user sees it:
//! ignored options are said on the terminal (the daemon's log does not
//! exist yet when options are read); a value that is almost right gets the
//! right answer; `-V` says what this build and this machine can do;
//! `-o <TAB>` completes option names; the man page's STOPPING is what
//! fusermount3, umount and signals do here; both man pages have EXAMPLES.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::mount::{is_mounted, wait_for, BIN};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

use crate::support::run::dirs;

fn unmount(m: &Path) {
    let _ = Command::new("fusermount3").arg("-u").arg(m).status();
    wait_for(5.0, || !is_mounted(m));
}

/// `-o uid=1000` is ignored, and the user is told so on the terminal:
/// when daemonizing, before the daemon detaches; in the foreground, on
/// stderr before the mount.
#[test]
fn ignored_options_are_said_on_the_terminal() {
    let (_d, b, m) = dirs();
    let out = Command::new(BIN)
        .arg(&b)
        .arg(&m)
        .args(["-o", "uid=1000,gid=1000"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mounted = is_mounted(&m);
    unmount(&m);
    crate::support::run::succeeded(&out, "command failed");
    assert!(mounted);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uid=1000") && err.contains("ignored"),
        "the ignored option is not said:\n{err}"
    );
    assert!(err.contains("gid=1000"), "{err}");

    let child = Command::new(BIN)
        .arg("-f")
        .arg(&b)
        .arg(&m)
        .args(["-o", "uid=1000"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(10.0, || is_mounted(&m)));
    unmount(&m);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("uid=1000") && err.contains("ignored"), "{err}");
}

/// `passthrough=yes` means on (and `no` off); a value that is not one of
/// the option's gets the option's values, not "did you mean 'passthrough'".
#[test]
fn almost_right_values_get_the_right_answer() {
    let (_d, b, m) = dirs();
    let out = Command::new(BIN)
        .arg(&b)
        .arg(&m)
        .args(["-o", "passthrough=yes"])
        .output()
        .unwrap();
    let mounted = is_mounted(&m);
    unmount(&m);
    assert!(out.status.success() && mounted, "{out:?}");
    for bad in ["passthrough=maybe", "newfiles=utf8", "blksize=3"] {
        let out = Command::new(BIN)
            .arg(&b)
            .arg(&m)
            .args(["-o", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(!err.contains("did you mean"), "{bad}: {err}");
        assert!(err.contains("allowed"), "{bad}: {err}");
    }
}

/// `cutf8fs -V` says more than the version: the codec's vector path on
/// this CPU and what the kernel's FUSE offers, as `cutf8 --version` does.
#[test]
fn version_says_what_this_build_and_machine_can_do() {
    for flag in ["-V", "--version"] {
        let out = Command::new(BIN).arg(flag).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
        assert!(text.contains("codec"), "{flag}: {text}");
        assert!(text.contains("fuser"), "{flag}: {text}");
        assert!(text.contains("kernel"), "{flag}: {text}");
        assert!(text.contains("passthrough"), "{flag}: {text}");
    }
}

/// bash completes `cutf8fs -o <TAB>` with option names, not file names.
#[test]
fn dash_o_tab_completes_option_names() {
    let script = Command::new(BIN)
        .args(["--generate-completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("cutf8fs.bash");
    fs::write(&file, &script.stdout).unwrap();
    fs::write(t.path().join("allow_a_file"), b"").unwrap();
    for (cur, want) in [("", "allow_other"), ("ind", "index_cache=")] {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source '{}'; COMP_WORDS=(cutf8fs -o '{cur}'); COMP_CWORD=2; \
                 COMP_LINE='cutf8fs -o {cur}'; COMP_POINT=${{#COMP_LINE}}; \
                 _cutf8fs cutf8fs '{cur}' -o; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                file.display()
            ))
            .current_dir(t.path())
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        assert!(
            got.lines().any(|l| l.trim() == want),
            "-o {cur:?}<TAB> offers {got:?}, not {want}"
        );
        assert!(!got.contains("allow_a_file"), "file names offered: {got}");
    }
}

/// What the man page's STOPPING says, checked here: `fusermount3 -u` and
/// `umount` refuse a busy mount (EBUSY) and leave it mounted; SIGTERM
/// detaches it lazily, and the daemon ends with status 0 once its last
/// user is gone.
#[test]
fn stopping_a_busy_mount_is_as_the_man_page_says() {
    let (_d, b, m) = dirs();
    fs::write(b.join("f"), b"x").unwrap();
    let mut child = Command::new(BIN)
        .arg("-f")
        .arg(&b)
        .arg(&m)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(10.0, || is_mounted(&m)));
    let busy = fs::File::open(m.join("f")).unwrap();
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(&m)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("busy"),
        "{out:?}"
    );
    assert!(is_mounted(&m), "fusermount3 -u unmounted a busy mount");
    let out = Command::new("umount").arg(&m).output().unwrap();
    assert!(!out.status.success() && is_mounted(&m), "{out:?}");
    // SIGTERM: detached at once, the daemon serves its last user, then ends.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(wait_for(5.0, || !is_mounted(&m)), "SIGTERM did not detach");
    // Detached, it still answers its last user (statfs always reaches it).
    nix::sys::statfs::fstatfs(&busy).expect("the detached daemon answers its last user");
    assert!(child.try_wait().unwrap().is_none(), "ended while in use");
    drop(busy);
    let mut status = None;
    wait_for(10.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    assert_eq!(status.and_then(|s| s.code()), Some(0));

    let page = fs::read_to_string(format!("{ROOT}/man/cutf8fs.1")).unwrap();
    let stopping = page
        .split(".SH STOPPING")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .expect("a STOPPING section");
    assert!(
        stopping.contains("EBUSY"),
        "STOPPING does not say fusermount3 -u fails on a busy mount:\n{stopping}"
    );
    assert!(stopping.contains("\\-uz"), "{stopping}");
}

#[test]
fn both_man_pages_have_examples() {
    for page in ["man/cutf8fs.1", "man/cutf8.1"] {
        let text = fs::read_to_string(format!("{ROOT}/{page}")).unwrap();
        let examples = text
            .split(".SH EXAMPLES")
            .nth(1)
            .and_then(|s| s.split("\n.SH ").next())
            .unwrap_or_else(|| panic!("{page} has no EXAMPLES section"));
        assert!(
            examples.matches("cutf8").count() >= 4,
            "{page}: too few examples:\n{examples}"
        );
    }
}
