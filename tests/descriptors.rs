//! The daemon's descriptors on real mounts: its open
//! descriptors stay bounded whatever the number of inodes the kernel
//! remembers, and running out of descriptors reaches the caller as an errno
//! (and the log), never as a silently shortened listing.
//!
//! Every test runs the daemon with its descriptor limit at 1024 (soft and
//! hard), set for that daemon alone by the mount guard (the daemon raises its
//! soft limit to the hard one, so both are set). They run one at a time
//! (`SERIAL`): each builds and walks thousands of files.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Instant;

use crate::support::mount::*;

/// The daemon's descriptor limit in these tests.
const LIMIT: u64 = 1024;

/// The most descriptors the daemon may hold while no file is open through
/// the mount: the inode table's cache of directories when reopening by name
/// (an eighth of the limit; none by handle) and a few fixed ones (FUSE
/// device clones per worker, log, journal, BACKING).
const IDLE_BOUND: usize = (LIMIT as usize) / 8 + 64;

static SERIAL: Mutex<()> = Mutex::new(());

/// One of these tests at a time (each builds and walks thousands of files).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A mount whose daemon runs under the [`LIMIT`] (that daemon only: the
/// tests share one process).
fn mount(opts: &[&str]) -> Start {
    Mount::with(opts).nofile(LIMIT)
}

fn sh(script: &str, args: &[&Path]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg("sh");
    for a in args {
        c.arg(a);
    }
    c.output().expect("sh")
}

fn show(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let mut lines: Vec<&str> = err.lines().take(10).collect();
    if err.lines().count() > 10 {
        lines.push("…");
    }
    format!("{} (stderr: {})", o.status, lines.join(" | "))
}

/// Descriptors the daemon holds now.
fn daemon_fds(m: &Mount) -> usize {
    fs::read_dir(format!("/proc/{}/fd", m.pid()))
        .expect("daemon's /proc/PID/fd")
        .count()
}

/// The descriptor limit the daemon runs with (from /proc/PID/limits).
fn daemon_limit(m: &Mount) -> String {
    let l = fs::read_to_string(format!("/proc/{}/limits", m.pid())).unwrap_or_default();
    l.lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or("")
        .to_string()
}

/// Content of file `i` of a generated tree: every seventh is corrected
/// (with characters whose view is longer than their disk bytes).
fn content(i: usize) -> Vec<u8> {
    let text = format!("file {i}\n");
    if i.is_multiple_of(7) {
        let mut disk = text.into_bytes();
        disk.extend(enc(0x3042 + (i as u32 % 64)));
        disk.extend(enc(0x1F600));
        disk.push(b'\n');
        corrected(&disk)
    } else {
        text.into_bytes()
    }
}

/// `dirs` directories of `per` files each under `root/prefix`: the disk
/// bytes (for BACKING), or the view (for a tar written through the mount,
/// which stores UTF-8 text corrected itself).
fn make_tree(root: &Path, prefix: &str, dirs: usize, per: usize) {
    make_tree_as(root, prefix, dirs, per, false)
}

fn make_tree_as(root: &Path, prefix: &str, dirs: usize, per: usize, view: bool) {
    for d in 0..dirs {
        let dir = root.join(format!("{prefix}/d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..per {
            let i = d * per + f;
            let bytes = if view {
                expected_view(&content(i))
            } else {
                content(i)
            };
            fs::write(dir.join(format!("f{f:05}")), bytes).unwrap();
        }
    }
}

fn rel(prefix: &str, per: usize, i: usize) -> String {
    format!("{prefix}/d{:03}/f{:05}", i / per, i % per)
}

/// `ls -l` of a 3 000-file directory under a 1024-descriptor limit lists
/// every entry (today: 1 015 lines, exit 0, nothing logged).
#[test]
fn ls_l_of_3000_files_lists_every_entry() {
    let _g = serial();
    let m = mount(&[]).fresh(|b| make_tree(b, "big", 1, 3000));
    assert!(daemon_limit(&m).contains("1024"), "{}", daemon_limit(&m));
    for round in 0..2 {
        let o = sh("ls -l \"$1\"", &[&m.m("big/d000")]);
        let lines = String::from_utf8_lossy(&o.stdout).lines().count();
        assert!(o.status.success(), "round {round}: ls -l: {}", show(&o));
        // "total N" and one line per file.
        assert_eq!(lines, 3001, "round {round}: ls -l printed {lines} lines");
    }
    let fds = daemon_fds(&m);
    println!("daemon descriptors after ls -l of 3000 files: {fds}");
    assert!(fds <= IDLE_BOUND, "the daemon holds {fds} descriptors");
}

/// Whether one line of the daemon's log holds both `a` and `b`.
fn logged(m: &Mount, a: &str, b: &str) -> bool {
    m.log_text().lines().any(|l| l.contains(a) && l.contains(b))
}

/// `ls -l` of a 3 000-entry directory: exit 0 with every entry, or a
/// failure that says why — never exit 0 with fewer lines.
fn ls_l_complete_or_loud(m: &Mount, when: &str) -> bool {
    let o = sh("ls -l \"$1\"", &[&m.m("big/d000")]);
    let lines = String::from_utf8_lossy(&o.stdout).lines().count();
    println!("ls -l {when}: {lines} lines, {}", show(&o));
    if o.status.success() {
        assert_eq!(
            lines, 3001,
            "ls -l {when} exited 0 but printed {lines} lines"
        );
        return true;
    }
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Too many open files"),
        "ls -l {when} failed without saying why: {}",
        show(&o)
    );
    assert!(
        logged(m, "big", "descriptors"),
        "ls -l {when} failed and the daemon did not log why:\n{}",
        m.log_text()
    );
    false
}

/// While a user holds its whole share of the daemon's descriptors (files
/// open through the mount), its next open fails with EMFILE and a log line
/// naming the file, and its listings list every entry or fail with the
/// errno (and a log line); once the files are closed, listings work again.
/// (Other users carry on meanwhile: `resources`.)
#[test]
fn exhausted_descriptors_fail_loudly_never_shorten_a_listing() {
    let _g = serial();
    let m = mount(&[]).fresh(|b| {
        make_tree(b, "big", 1, 3000);
        fs::write(b.join("held"), b"x").unwrap();
    });
    // Two processes (each may hold 1024): the daemon refuses first.
    let (mut a, na, err_a) = crate::support::run::holder(&m.m("held"), 900);
    let (mut b, nb, err_b) = crate::support::run::holder(&m.m("held"), 900);
    println!(
        "opened {na} + {nb} files through the mount ({}); the daemon holds {}",
        (err_a + &err_b).trim(),
        daemon_fds(&m)
    );
    assert!(
        na + nb < 1800,
        "the daemon served more opens than its limit"
    );
    assert!(err_b.contains("Too many open files"), "{err_b}");
    assert!(
        logged(&m, "] held: ", "descriptors"),
        "the refused open is not in the log:\n{}",
        m.log_text()
    );
    ls_l_complete_or_loud(&m, "with no descriptor left");
    let _ = b.kill();
    let _ = b.wait();
    ls_l_complete_or_loud(&m, &format!("with {nb} descriptors free"));
    let _ = a.kill();
    let _ = a.wait();
    assert!(ls_l_complete_or_loud(&m, "after closing the files"));
    assert!(ls_l_complete_or_loud(&m, "again"));
}

/// A 100 000-file `tar -x` into an empty mount, then `ls -lR`, `du -a` and
/// `find` over 200 000 files (the extracted tree and as many made directly
/// in BACKING): no error, every entry listed, every sampled file right, and
/// the daemon's descriptors stay bounded while the kernel remembers the
/// inodes.
#[test]
fn tar_x_100k_files_then_walk_200k() {
    let _g = serial();
    const DIRS: usize = 100;
    const PER: usize = 1000;
    const N: usize = DIRS * PER;
    let t = Instant::now();
    let stage = tempfile::tempdir().unwrap();
    make_tree_as(stage.path(), "tar", DIRS, PER, true);
    let tarball = stage.path().join("t.tar");
    let o = sh(
        "cd \"$1\" && tar -cf \"$2\" tar",
        &[stage.path(), tarball.as_path()],
    );
    assert!(o.status.success(), "tar -c: {}", show(&o));
    let m = mount(&[]).fresh(|b| make_tree(b, "direct", DIRS, PER));
    println!("made both trees in {:.1?}", t.elapsed());

    let t = Instant::now();
    let o = sh("tar -xf \"$1\" -C \"$2\"", &[tarball.as_path(), &m.mnt]);
    println!("tar -x of {N} files: {:.1?}", t.elapsed());
    assert!(o.status.success(), "tar -x: {}", show(&o));
    assert!(o.stderr.is_empty(), "tar -x: {}", show(&o));
    let fds = daemon_fds(&m);
    println!("daemon descriptors after tar -x: {fds}");
    assert!(fds <= IDLE_BOUND, "after tar -x the daemon holds {fds}");

    // Sample: through the mount (the view) and in BACKING (the bytes).
    for i in (0..N).step_by(997).chain([N - 1]) {
        let r = rel("tar", PER, i);
        let want = content(i);
        let view = fs::read(m.m(&r)).unwrap_or_else(|e| panic!("read {r}: {e}"));
        assert_eq!(view, expected_view(&want), "{r} through the mount");
        let disk = fs::read(m.b(&r)).unwrap();
        assert_eq!(expected_view(&disk), expected_view(&want), "{r} in BACKING");
        if i % 7 == 0 {
            assert!(cutf8::has_magic(&disk), "{r} is not stored corrected");
        }
        let direct = rel("direct", PER, i);
        let view = fs::read(m.m(&direct)).unwrap_or_else(|e| panic!("read {direct}: {e}"));
        assert_eq!(view, expected_view(&want), "{direct} through the mount");
    }

    let walks: [(&str, &str, usize); 3] = [
        // Each file line of `ls -lR` starts with its mode ("-rw-…").
        ("ls -lR", "ls -lR \"$1\" | grep -c '^-'", 2 * N),
        ("du -a", "du -a \"$1\" | wc -l", 2 * N + 2 * DIRS + 3),
        ("find", "find \"$1\" -type f | wc -l", 2 * N),
    ];
    for (what, script, want) in walks {
        let t = Instant::now();
        let script = format!("set -o pipefail 2>/dev/null; {script}");
        let o = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .arg("bash")
            .arg(&m.mnt)
            .output()
            .unwrap();
        let fds = daemon_fds(&m);
        println!(
            "{what} over {} entries: {:.1?}, daemon descriptors after: {fds}",
            2 * N,
            t.elapsed()
        );
        assert!(o.status.success(), "{what}: {}", show(&o));
        assert!(o.stderr.is_empty(), "{what}: {}", show(&o));
        let got: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        if got != want {
            // Which entries are missing, and what stat says of them.
            let o = sh(
                "du -a \"$1\" | cut -f2 | sort > /tmp/rfds-du; find \"$1\" | sort > /tmp/rfds-find; \
                 comm -13 /tmp/rfds-du /tmp/rfds-find | head -5 | while read f; do stat \"$f\"; done; \
                 comm -13 /tmp/rfds-du /tmp/rfds-find | wc -l; \
                 comm -13 /tmp/rfds-du /tmp/rfds-find | cut -d/ -f1-7 | uniq -c | head",
                &[&m.mnt],
            );
            println!("{}", String::from_utf8_lossy(&o.stdout));
        }
        assert_eq!(got, want, "{what} listed {got} entries, not {want}");
        assert!(fds <= IDLE_BOUND, "after {what} the daemon holds {fds}");
    }
    // The kernel still remembers the inodes: a second walk finds them all.
    let o = sh("find \"$1\" | wc -l", &[&m.mnt]);
    let got: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert_eq!(got, 2 * N + 2 * DIRS + 3);
}

/// A file unlinked and a directory removed while open through the mount
/// keep working (fstat, read) after far more inodes than the daemon's
/// descriptor cache holds have been used since.
#[test]
fn open_files_survive_unlink_and_cache_churn() {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let _g = serial();
    // Reopening by name (as a daemon without CAP_DAC_READ_SEARCH does),
    // where a gone name cannot lead back; no attribute cache, so fstat
    // reaches the daemon.
    let m = mount(&["attr_timeout=0"])
        .env("CUTF8FS_NO_FILE_HANDLES", "1")
        .fresh(|b| {
            make_tree(b, "many", 2, 1000);
            fs::write(b.join("f"), corrected(b"open and gone\n")).unwrap();
            fs::create_dir(b.join("d")).unwrap();
        });
    assert!(
        m.log_text().contains("reopened by name"),
        "{}",
        m.log_text()
    );
    let mut f = fs::File::open(m.m("f")).unwrap();
    let d = fs::File::open(m.m("d")).unwrap();
    fs::remove_file(m.m("f")).unwrap();
    fs::remove_dir(m.m("d")).unwrap();
    // Churn: 2 000 inodes through the daemon (its cache holds 128
    // directories).
    let o = sh("ls -lR \"$1\" | grep -c '^-'", &[&m.m("many")]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "2000",
        "{}",
        show(&o)
    );
    let st = f.metadata().unwrap();
    assert_eq!(st.nlink(), 0);
    let mut s = Vec::new();
    f.read_to_end(&mut s).unwrap();
    assert_eq!(s, expected_view(&corrected(b"open and gone\n")));
    assert!(d.metadata().unwrap().is_dir());
}
