//! Access-time options: `noatime`, `nodiratime`, `relatime` and
//! `strictatime` are either honoured — reads through the mount change access
//! times exactly as reads on a native mount with that option do — or
//! refused at mount time with a message saying why. Never accepted and
//! ignored.
//!
//! Each case is run twice: on a native tmpfs mounted with the option (the
//! model) and through cutf8fs over a BACKING tmpfs mounted as the case says
//! (the daemon cannot change how BACKING's own mount updates access times,
//! so the worst BACKING for each option is used). The observable result —
//! whether `cat` of a corrected file, `cat` of a raw file, a second `cat`
//! of the same unchanged file and `ls` of a directory changed the access
//! time shown — must be the same.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::mount::{wait_for, Mount, BIN};
use cutf8::{self, MAGIC};

/// A tmpfs of our own, mounted with `opts`, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(opts: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("cutf8fs-atime-")
            .tempdir()
            .unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount -t tmpfs -o {opts} failed");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sets atime (and mtime when given) of `p`, in seconds.
fn set_times(p: &Path, atime: i64, mtime: Option<i64>) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = |s: Option<i64>| libc::timespec {
        tv_sec: s.unwrap_or(0),
        tv_nsec: if s.is_some() { 0 } else { libc::UTIME_OMIT },
    };
    let times = [ts(Some(atime)), ts(mtime)];
    // SAFETY: `c` is a valid C string and `times` two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", p.display());
}

fn atime(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

fn cat(p: &Path) {
    let out = Command::new("cat").arg(p).output().unwrap();
    assert!(out.status.success(), "cat {}", p.display());
}

fn ls(p: &Path) {
    let out = Command::new("ls").arg("-a").arg(p).output().unwrap();
    assert!(out.status.success(), "ls {}", p.display());
}

/// The files every case uses, in `dir` (BACKING, or the native model).
fn populate(dir: &Path) {
    let mut f = MAGIC.to_vec();
    f.extend(cutf8::encode_strict("café 中文 😀\n".repeat(100).as_bytes()).unwrap());
    fs::write(dir.join("corrected"), &f).unwrap();
    fs::write(dir.join("raw"), [0xFFu8, 0, 1, 2, 3]).unwrap();
    fs::create_dir(dir.join("d")).unwrap();
    fs::write(dir.join("d/x"), b"x\n").unwrap();
}

/// Runs the steps of a case: `setup` is the directory whose files get their
/// times set (BACKING, or the native tmpfs), `view` where they are read.
/// Returns, per step, whether the atime seen in `view` changed.
fn steps(setup: &Path, view: &Path) -> Vec<(&'static str, bool)> {
    let mut out = Vec::new();
    let t = now();
    for (name, a) in [("stale", t - 3600), ("future", t + 3600)] {
        for f in ["corrected", "raw"] {
            set_times(&setup.join(f), a, Some(t - 7200));
            // Let the mount see the new times (attr_timeout=0 below).
            let before = atime(&view.join(f));
            cat(&view.join(f));
            let after = atime(&view.join(f));
            out.push((leak(format!("cat {f}, {name} atime")), before != after));
        }
        set_times(&setup.join("d"), a, Some(t - 7200));
        let before = atime(&view.join("d"));
        ls(&view.join("d"));
        let after = atime(&view.join("d"));
        out.push((leak(format!("ls d, {name} atime")), before != after));
    }
    // Read the same unchanged file twice: strictatime updates both times.
    set_times(&setup.join("corrected"), t - 3600, Some(t - 7200));
    cat(&view.join("corrected"));
    let first = atime(&view.join("corrected"));
    // The clock moves past the timestamp's granularity: no event to wait for.
    std::thread::sleep(Duration::from_millis(50));
    cat(&view.join("corrected"));
    let second = atime(&view.join("corrected"));
    out.push(("second cat of an unchanged file", first != second));
    out
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The model: the same steps on a native tmpfs mounted with `opt`.
fn native(opt: &str) -> Vec<(&'static str, bool)> {
    let t = Tmpfs::new(opt);
    populate(t.path());
    steps(t.path(), t.path())
}

/// The same steps through cutf8fs `-o opt` over a BACKING tmpfs mounted
/// with `backing_opt`.
fn through_mount(opt: &str, backing_opt: &str) -> Vec<(&'static str, bool)> {
    let t = Tmpfs::new(backing_opt);
    let m = Mount::new_in(t.path(), &[opt, "attr_timeout=0"], populate);
    let r = steps(&m.backing, &m.mnt);
    drop(m);
    r
}

fn assert_same(opt: &str, backing_opt: &str) {
    let want = native(opt);
    let got = through_mount(opt, backing_opt);
    eprintln!("-o {opt} over a BACKING mounted {backing_opt}:");
    for (w, g) in want.iter().zip(&got) {
        eprintln!(
            "  {:40} native changed: {:5}  mount changed: {}",
            w.0, w.1, g.1
        );
    }
    assert_eq!(
        got, want,
        "-o {opt} (BACKING mounted {backing_opt}): access times through the mount differ from a native mount with {opt}"
    );
}

#[test]
fn noatime_is_honoured_over_a_strictatime_backing() {
    assert_same("noatime", "strictatime");
}

#[test]
fn nodiratime_is_honoured_over_a_strictatime_backing() {
    assert_same("nodiratime,strictatime", "strictatime");
}

#[test]
fn strictatime_is_honoured_over_a_strictatime_backing() {
    assert_same("strictatime", "strictatime");
}

#[test]
fn relatime_is_honoured_over_a_relatime_backing() {
    assert_same("relatime", "relatime");
}

/// Starts cutf8fs with `opt` over a BACKING mounted `backing_opt` and
/// expects it to refuse, naming the option; returns its message.
fn refused(opt: &str, backing_opt: &str) -> String {
    let t = Tmpfs::new(backing_opt);
    let backing = t.path().join("backing");
    let mnt: PathBuf = t.path().join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(BIN)
        .arg("-f")
        .arg(&backing)
        .arg(&mnt)
        .args(["-o", opt])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_for(15.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
        let _ = child.kill();
        let _ = child.wait();
        panic!("-o {opt} over a BACKING mounted {backing_opt} was accepted (and would be ignored)");
    }
    let out = child.wait_with_output().unwrap();
    let msg =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        msg.contains(opt) && msg.contains(backing_opt) && msg.contains("BACKING"),
        "the refusal of -o {opt} does not say why: {msg}"
    );
    eprintln!("-o {opt} over {backing_opt}: {msg}");
    msg
}

#[test]
fn atime_rules_backing_cannot_follow_are_refused_clearly() {
    refused("strictatime", "relatime");
    refused("strictatime", "noatime");
    refused("relatime", "strictatime");
    refused("relatime", "noatime");
}
