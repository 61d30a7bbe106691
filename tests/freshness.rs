//! Changes made in BACKING beside the mount (natively, by other programs)
//! show through the mount at once with the default options, although the
//! kernel then caches names and attributes for minutes: the daemon watches
//! BACKING and tells the kernel (man page, CACHING). Each kind of change is
//! made after the mount's view of the file was read (so the kernel holds
//! it), and must show within [`AT_ONCE`], far below even the short 1 s
//! timeouts. Without the watch and with the same long timeouts the same
//! changes stay invisible (the control test), so the first test measures
//! the watch and nothing else. Also: the fallback without a watch (short
//! timeouts, said in the log), a BACKING on FUSE (never watched), and a
//! flood of native changes that leaves the daemon's memory bounded and
//! the mount right.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::mount::{corrected, expected_view, Mount};

/// "At once": well below the short timeouts (1 s) the kernel falls back to.
const AT_ONCE: Duration = Duration::from_millis(200);

/// Polls `ok` until it holds or `within` passes.
pub(crate) fn shows(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub(crate) fn read(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap_or_default()
}

fn text(s: &str) -> Vec<u8> {
    corrected(s.as_bytes())
}

fn populate(b: &Path) {
    for f in [
        "write", "append", "truncate", "rename", "delete", "chmod", "chown", "times", "link",
        "replaced",
    ] {
        fs::write(b.join(f), format!("{f}: raw \u{0} bytes, first version\n")).unwrap();
    }
    fs::create_dir(b.join("d")).unwrap();
    fs::write(b.join("d/inside"), "in d\n").unwrap();
    fs::write(b.join("corr.txt"), text("Grüße, first version — ")).unwrap();
}

/// Every kind of native change, each after the mount's view was read;
/// returns the kinds that did not show within `within`.
fn native_changes(m: &Mount, within: Duration) -> Vec<&'static str> {
    let mut missed = Vec::new();
    let mut check = |what: &'static str, ok: &mut dyn FnMut() -> bool| {
        if !shows(within, ok) {
            missed.push(what);
        }
    };
    // Warm: names, attributes, pages and the listing in the kernel.
    let warm = |rel: &str| {
        let _ = fs::metadata(m.m(rel));
        let _ = fs::read(m.m(rel));
        let _ = fs::read(m.m(rel)); // the second open keeps the pages
        let _ = names(&m.mnt);
    };

    warm("write");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.b("write"))
        .unwrap();
    f.write_all(b"WRITE").unwrap();
    drop(f);
    let want = read(&m.b("write"));
    check("write in place", &mut || read(&m.m("write")) == want);

    warm("append");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.b("append"))
        .unwrap();
    f.write_all(b"appended line\n").unwrap();
    drop(f);
    let want = read(&m.b("append"));
    check("append", &mut || {
        read(&m.m("append")) == want
            && fs::metadata(m.m("append")).map(|a| a.len()).ok() == Some(want.len() as u64)
    });

    warm("truncate");
    fs::OpenOptions::new()
        .write(true)
        .open(m.b("truncate"))
        .unwrap()
        .set_len(3)
        .unwrap();
    check("truncate", &mut || {
        fs::metadata(m.m("truncate")).map(|a| a.len()).ok() == Some(3)
            && read(&m.m("truncate")) == b"tru"
    });

    warm("rename");
    warm("renamed");
    fs::rename(m.b("rename"), m.b("renamed")).unwrap();
    check("rename", &mut || {
        !m.m("rename").exists()
            && m.m("renamed").exists()
            && names(&m.mnt).contains(&"renamed".to_string())
    });

    warm("created");
    fs::write(m.b("created"), "new\n").unwrap();
    check("create", &mut || {
        read(&m.m("created")) == b"new\n" && names(&m.mnt).contains(&"created".to_string())
    });

    warm("delete");
    fs::remove_file(m.b("delete")).unwrap();
    check("delete", &mut || {
        !m.m("delete").exists() && !names(&m.mnt).contains(&"delete".to_string())
    });

    warm("chmod");
    fs::set_permissions(m.b("chmod"), fs::Permissions::from_mode(0o600)).unwrap();
    check("chmod", &mut || {
        fs::metadata(m.m("chmod")).map(|a| a.mode() & 0o7777).ok() == Some(0o600)
    });

    warm("d");
    let _ = names(&m.m("d"));
    fs::set_permissions(m.b("d"), fs::Permissions::from_mode(0o750)).unwrap();
    check("chmod of a directory", &mut || {
        fs::metadata(m.m("d")).map(|a| a.mode() & 0o7777).ok() == Some(0o750)
    });

    warm("chown");
    std::os::unix::fs::chown(m.b("chown"), Some(4242), Some(4343)).unwrap();
    check("chown", &mut || {
        fs::metadata(m.m("chown")).map(|a| (a.uid(), a.gid())).ok() == Some((4242, 4343))
    });

    warm("times");
    let old = fs::File::open(m.b("times")).unwrap();
    old.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    drop(old);
    check("mtime set", &mut || {
        fs::metadata(m.m("times")).map(|a| a.mtime()).ok() == Some(1_000_000)
    });

    warm("link");
    fs::hard_link(m.b("link"), m.b("link2")).unwrap();
    check("hard link", &mut || {
        fs::metadata(m.m("link")).map(|a| a.nlink()).ok() == Some(2) && m.m("link2").exists()
    });

    warm("replaced");
    let before = fs::metadata(m.m("replaced")).unwrap().ino();
    fs::write(m.b(".replaced.tmp"), "the new version, saved by rename\n").unwrap();
    fs::rename(m.b(".replaced.tmp"), m.b("replaced")).unwrap();
    check("file replaced by rename", &mut || {
        read(&m.m("replaced")) == b"the new version, saved by rename\n"
            && fs::metadata(m.m("replaced")).map(|a| a.ino()).ok() != Some(before)
    });

    warm("d/inside");
    let _ = names(&m.m("d"));
    fs::rename(m.b("d"), m.b("e")).unwrap();
    check("directory renamed", &mut || {
        !m.m("d").exists()
            && !m.m("d/inside").exists()
            && read(&m.m("e/inside")) == b"in d\n"
            && names(&m.m("e")) == ["inside"]
    });

    warm("corr.txt");
    let new = text("Grüße, second and longer version — ÄÖÜ äöü ß € 😀\n");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.b("corr.txt"))
        .unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(&new).unwrap();
    drop(f);
    let view = expected_view(&new);
    check("corrected file rewritten", &mut || {
        fs::metadata(m.m("corr.txt")).map(|a| a.len()).ok() == Some(view.len() as u64)
            && read(&m.m("corr.txt")) == view
    });

    missed
}

/// Fails unless every change showed (`missed` is empty) within `within`
/// on `m`, whose log must say its watch runs (so that no pass comes from a
/// timeout).
#[track_caller]
pub(crate) fn all_shown_by_the_watch(m: &Mount, missed: &[&str], within: Duration) {
    assert!(
        missed.is_empty(),
        "not visible through the mount within {within:?}: {missed:?}"
    );
    assert!(
        m.log_text().contains("watching BACKING's filesystem"),
        "{}",
        m.log_text()
    );
}

/// Fails unless each of `kinds` stayed hidden in a run without the watch
/// (`run`: a fresh mount, the changes, what did not show): for those
/// kinds, a pass with the watch measures the watch. Up to three runs, a
/// kind hidden in any of them counting: a kernel that drops its caches
/// (other tests drop them, or memory runs short) shows a change early.
#[track_caller]
pub(crate) fn all_hidden_without_the_watch(
    mut run: impl FnMut() -> Vec<&'static str>,
    kinds: &[&str],
) {
    let mut hidden = std::collections::HashSet::new();
    for _ in 0..3 {
        let missed = run();
        eprintln!("hidden without the watch: {missed:?}");
        hidden.extend(missed);
        if kinds.iter().all(|k| hidden.contains(k)) {
            return;
        }
    }
    for kind in kinds {
        assert!(
            hidden.contains(kind),
            "{kind} showed without a watch in three runs: the test above would not \
             measure the watch (hidden: {hidden:?})"
        );
    }
}

#[test]
fn every_native_change_shows_at_once_with_the_default_options() {
    let m = Mount::new(&[], populate);
    all_shown_by_the_watch(&m, &native_changes(&m, AT_ONCE), AT_ONCE);
}

/// The control: with the same long timeouts and no watch, the kernel's
/// caches hide the changes, so the test above fails without the watch.
#[test]
fn without_the_watch_long_timeouts_hide_native_changes() {
    let run = || {
        let m = Mount::new(
            &["watch=off", "attr_timeout=300", "entry_timeout=300"],
            populate,
        );
        native_changes(&m, AT_ONCE)
    };
    // (A write, an append, a new name and a replaced file show anyway: the
    // next open finds the file's stamp moved and the directory's listing
    // is read again; the rest waits for the timeouts.)
    all_hidden_without_the_watch(
        run,
        &[
            "truncate",
            "rename",
            "delete",
            "chmod",
            "chown",
            "hard link",
            "directory renamed",
            "corrected file rewritten",
        ],
    );
}

/// Without a watch the short timeouts stay: a change shows within about
/// a second, and the log says why there is no watch.
#[test]
fn without_a_watch_changes_show_within_the_short_timeouts() {
    let m = Mount::new(&["watch=off"], populate);
    let _ = fs::metadata(m.m("chmod")).unwrap();
    fs::set_permissions(m.b("chmod"), fs::Permissions::from_mode(0o640)).unwrap();
    assert!(shows(Duration::from_secs(3), || {
        fs::metadata(m.m("chmod")).map(|a| a.mode() & 0o7777).ok() == Some(0o640)
    }));
    let log = m.log_text();
    assert!(log.contains("no watch of BACKING (-o watch=off)"), "{log}");
}

/// A BACKING on FUSE (here another cutf8fs mount) can be changed where no
/// watch of this host sees it: not watched, short timeouts, said once.
#[test]
fn a_backing_on_fuse_is_not_watched() {
    let inner = Mount::new(&[], populate);
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let outer = Mount::with(&[]).on(&inner.mnt, &mnt, &dir.path().join("log"));
    let _ = fs::metadata(outer.m("chmod")).unwrap();
    // Changed in the innermost BACKING: the outer daemon's filesystem (FUSE)
    // raises no event for it.
    fs::set_permissions(inner.b("chmod"), fs::Permissions::from_mode(0o604)).unwrap();
    assert!(shows(Duration::from_secs(3), || {
        fs::metadata(outer.m("chmod"))
            .map(|a| a.mode() & 0o7777)
            .ok()
            == Some(0o604)
    }));
    let log = outer.log_text();
    assert!(
        log.contains("no watch of BACKING (BACKING is on FUSE"),
        "{log}"
    );
    drop(outer);
}

fn rss_kib(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// 100 000 files created natively in a directory the kernel holds, then
/// removed: the daemon's memory stays bounded (the watch coalesces, and on
/// a queue overflow invalidates everything instead of remembering), the
/// mount lists exactly what BACKING holds, and the watch still works.
#[test]
fn a_flood_of_native_changes_keeps_memory_bounded_and_the_mount_right() {
    const N: usize = 100_000;
    let m = Mount::new(&[], |b| fs::create_dir(b.join("flood")).unwrap());
    assert!(names(&m.m("flood")).is_empty());
    let before = rss_kib(m.pid());
    for i in 0..N {
        fs::File::create(m.b(&format!("flood/f{i:06}"))).unwrap();
    }
    assert!(
        shows(Duration::from_secs(10), || names(&m.m("flood")).len() == N),
        "the mount lists {} of {N} files",
        names(&m.m("flood")).len()
    );
    let full = rss_kib(m.pid());
    for i in (0..N).step_by(2) {
        fs::remove_file(m.b(&format!("flood/f{i:06}"))).unwrap();
    }
    assert!(
        shows(Duration::from_secs(10), || names(&m.m("flood")).len()
            == N / 2),
        "after removing half, the mount lists {}",
        names(&m.m("flood")).len()
    );
    let after = rss_kib(m.pid());
    // The listing itself has the kernel look up (and the daemon remember)
    // every file: that is the inode table's cost (under 200 bytes each),
    // not the watch's; the bound leaves room for it and nothing more.
    let grown = after.max(full).saturating_sub(before);
    let log = m.log_text();
    eprintln!(
        "flood of {N}: RSS {before} → {full} → {after} KiB; overflowed: {}",
        log.contains("faster than its watch could follow")
    );
    assert!(
        grown < 64 * 1024,
        "RSS grew by {grown} KiB over a flood of {N} files ({before} → {full} → {after} KiB)"
    );
    // Still watching.
    let _ = fs::metadata(m.m("flood/f000001")).unwrap();
    fs::set_permissions(m.b("flood/f000001"), fs::Permissions::from_mode(0o600)).unwrap();
    assert!(shows(AT_ONCE, || {
        fs::metadata(m.m("flood/f000001"))
            .map(|a| a.mode() & 0o7777)
            .ok()
            == Some(0o600)
    }));
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Events lost: the daemon is stopped while BACKING changes by far more
/// than the kernel queues (16384 events), so the watch meets an overflow
/// when it runs again. Nothing the kernel held may stay stale: it is told
/// to look every name up again and to drop every inode's attributes and
/// pages, and the log says so.
#[test]
fn lost_events_leave_nothing_stale() {
    let m = Mount::new(&[], |b| {
        fs::create_dir(b.join("many")).unwrap();
        fs::write(b.join("victim"), "victim\n").unwrap();
        fs::write(b.join("gone"), "gone\n").unwrap();
        fs::create_dir(b.join("sub")).unwrap();
        fs::write(b.join("sub/old"), "old\n").unwrap();
    });
    for rel in ["victim", "gone", "sub/old"] {
        let _ = fs::read(m.m(rel)).unwrap();
        let _ = fs::read(m.m(rel)).unwrap();
    }
    assert!(names(&m.m("many")).is_empty());
    let _ = names(&m.mnt);
    let _ = names(&m.m("sub"));
    let before = rss_kib(m.pid());
    signal(m.pid(), "-STOP");
    // The queue fills first, so the changes after it are lost.
    for i in 0..40_000 {
        fs::File::create(m.b(&format!("many/f{i:05}"))).unwrap();
    }
    fs::set_permissions(m.b("victim"), fs::Permissions::from_mode(0o604)).unwrap();
    fs::write(m.b("victim"), "victim, rewritten\n").unwrap();
    fs::remove_file(m.b("gone")).unwrap();
    fs::rename(m.b("sub/old"), m.b("sub/new")).unwrap();
    signal(m.pid(), "-CONT");
    let ok = shows(Duration::from_secs(1), || {
        fs::metadata(m.m("victim")).map(|a| a.mode() & 0o7777).ok() == Some(0o604)
            && read(&m.m("victim")) == b"victim, rewritten\n"
            && !m.m("gone").exists()
            && names(&m.m("sub")) == ["new"]
    });
    assert!(ok, "stale after lost events: {}", m.log_text());
    assert_eq!(names(&m.m("many")).len(), 40_000);
    assert!(
        shows(Duration::from_secs(2), || {
            m
            .log_text()
            .contains("faster than its watch could follow (events were lost): the kernel looks every name up again")
        }),
        "{}",
        m.log_text()
    );
    let after = rss_kib(m.pid());
    eprintln!("lost events: RSS {before} → {after} KiB");
    assert!(
        after.saturating_sub(before) < 32 * 1024,
        "{before} → {after} KiB"
    );
}
