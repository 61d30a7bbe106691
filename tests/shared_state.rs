//! Several daemons on one archive at the same moment, sharing the index
//! database (`src/indexdb`): two mounts listing at once each size files
//! from it (the bytes each daemon reads, against one mount alone); file
//! handles survive a restart of one daemon beside a busy other, and
//! `umount && mount` at once (xfstests generic/477's shape) twenty times
//! in a row, also when new files took deleted ones' numbers; idle daemons leave BACKING's filesystem free to be remounted
//! read-only, and unmounted once the views' daemons ended; a daemon
//! killed mid-write costs the other nothing.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::disk::Ext4;
use crate::support::handles::{drop_caches, handle_of, open_by_handle, read_by_handle, Handle};
use crate::support::mount::{is_mounted, wait_for, wait_until, Mount};
use crate::support::write::corrected_file;

/// The racy margin of these daemons (`CUTF8FS_RACY_MARGIN_MS`).
const MARGIN_MS: u64 = 300;

/// Waits out the margin since the last change in BACKING: the daemon's
/// rule is a time window, so time passing is the event itself.
fn settle() {
    std::thread::sleep(Duration::from_millis(MARGIN_MS + 100));
}

/// A text whose view is longer than its bytes: its size through the
/// mount needs the whole file read, or the index database.
fn text(i: usize, len: usize) -> String {
    let mut s = format!("file {i}: ");
    while s.len() < len {
        s.push_str("\u{800}\u{10000}caf\u{e9} ");
    }
    s
}

/// A BACKING of `n` corrected files of about `len` bytes in `dirs`
/// directories; their names.
fn archive(b: &Path, n: usize, len: usize, dirs: usize) -> Vec<String> {
    let mut names = Vec::new();
    for d in 0..dirs {
        fs::create_dir_all(b.join(format!("d{d}"))).unwrap();
    }
    for i in 0..n {
        let name = format!("d{}/f{i}.txt", i % dirs);
        fs::write(b.join(&name), corrected_file(&text(i, len))).unwrap();
        names.push(name);
    }
    names
}

/// A place holding a BACKING and its mount points.
struct Site {
    dir: tempfile::TempDir,
    n: std::cell::Cell<u32>,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::Builder::new()
            .prefix("cutf8fs-shared-")
            .tempdir()
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Site {
            dir,
            n: std::cell::Cell::new(0),
        }
    }

    fn backing(&self) -> PathBuf {
        let b = self.dir.path().join("backing");
        fs::create_dir_all(&b).unwrap();
        b
    }

    /// A daemon of `backing` on a fresh mount point.
    fn mount(&self, backing: &Path) -> Mount {
        self.n.set(self.n.get() + 1);
        let mnt = self.dir.path().join(format!("mnt{}", self.n.get()));
        fs::create_dir(&mnt).unwrap();
        Mount::with(&[])
            .env("CUTF8FS_RACY_MARGIN_MS", &MARGIN_MS.to_string())
            .on(backing, &mnt, &mnt.with_extension("log"))
    }
}

/// Stats every name through `m` (a cold `ls -l`); the bytes its daemon
/// read meanwhile.
fn list(m: &Mount, names: &[String]) -> u64 {
    let before = m.rchar();
    for n in names {
        fs::symlink_metadata(m.m(n)).unwrap();
    }
    m.rchar() - before
}

/// Lists `names` through a first mount of `b` (the database learns every
/// size), then through one mount alone, then `rounds` times through two
/// mounts at the same moment: each of the two must read at most twice
/// what the one alone read (the database's pages and the files' heads),
/// not the files. `what` names the case in a failure.
fn two_at_once_read_as_one_alone(
    site: &Site,
    b: &Path,
    names: &[String],
    rounds: usize,
    what: &str,
) {
    let tree: u64 = names
        .iter()
        .map(|n| fs::metadata(b.join(n)).unwrap().len())
        .sum();
    settle();
    let mut first = site.mount(b);
    list(&first, names);
    first.unmount();
    let mut alone = site.mount(b);
    let read_alone = list(&alone, names);
    alone.unmount();
    for round in 0..rounds {
        let a = site.mount(b);
        let c = site.mount(b);
        let (ra, rc) = std::thread::scope(|s| {
            let ta = s.spawn(|| list(&a, names));
            let tc = s.spawn(|| list(&c, names));
            (ta.join().unwrap(), tc.join().unwrap())
        });
        let bound = 2 * read_alone + (256 << 10);
        assert!(
            ra <= bound && rc <= bound,
            "{what}, round {round}: listing at once, the daemons read {ra} and {rc} bytes, \
             one alone {read_alone}, of a tree of {tree}:\n{}\n{}",
            a.log_text(),
            c.log_text()
        );
    }
}

/// Two mounts listing at the same moment each size the files from the
/// database, as one mount alone does: with an exclusive database, the
/// one that found it held read half the tree's bytes to size the files.
#[test]
fn two_mounts_listing_at_once_both_size_files_from_the_database() {
    let site = Site::new();
    let b = site.backing();
    let names = archive(&b, 800, 12_000, 8);
    two_at_once_read_as_one_alone(&site, &b, &names, 3, "a local BACKING");
}

/// Handles of files just looked up through a mount open after that mount
/// is unmounted and mounted again at once, while a second daemon of the
/// same BACKING keeps its database busy (listing and storing records):
/// every node record is written, however busy the other daemon is.
#[test]
fn handles_survive_a_restart_beside_a_busy_second_daemon() {
    let site = Site::new();
    let b = site.backing();
    let busy_names = archive(&b, 3000, 2_000, 30);
    let mut a = site.mount(&b);
    let other = site.mount(&b);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Set however the rounds end: a failed round must not leave the
        // scope waiting for the busy thread forever.
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            // The other daemon: cold listings (node records) and new files
            // (index records), round after round.
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                drop_caches();
                for n in &busy_names {
                    let _ = fs::symlink_metadata(other.m(n));
                }
                k += 1;
                let _ = fs::write(other.m(&format!("d0/new{k}.txt")), text(k, 70_000));
            }
        });
        for round in 0..6 {
            let dir = format!("r{round}");
            fs::create_dir(a.m(&dir)).unwrap();
            let mut hs: Vec<(String, Handle)> = Vec::new();
            for i in 0..40 {
                let rel = format!("{dir}/g{i}.txt");
                fs::write(a.m(&rel), text(i, 300)).unwrap();
                hs.push((rel.clone(), handle_of(&a.m(&rel))));
            }
            // Varied timing: at once, or a moment later (the timing is
            // what varies, no event).
            std::thread::sleep(Duration::from_millis([0, 0, 30, 120, 0, 400][round]));
            a.unmount();
            a.remount();
            drop_caches();
            for (rel, h) in &hs {
                let want = text(hs.iter().position(|x| &x.0 == rel).unwrap(), 300);
                let got = match open_by_handle(&a.mnt, h, libc::O_RDONLY) {
                    Ok(mut f) => {
                        let mut v = Vec::new();
                        std::io::Read::read_to_end(&mut f, &mut v).unwrap();
                        v
                    }
                    Err(e) => panic!(
                        "round {round}: {rel} after a restart: {}\n--- this daemon ---\n{}\n--- the busy one ---\n{}",
                        std::io::Error::from_raw_os_error(e),
                        a.log_text(),
                        other.log_text()
                    ),
                };
                assert_eq!(got, want.as_bytes(), "round {round}: {rel}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

/// xfstests generic/477's shape: files made and their handles taken
/// through the mount, `umount && mount` at once (the old daemon still
/// exiting while the new one answers), the handles opened right after,
/// with the kernel's caches emptied. Twenty times in a row.
#[test]
fn umount_and_mount_at_once_keep_every_handle_twenty_times() {
    let site = Site::new();
    let b = site.backing();
    let mut m = site.mount(&b);
    let mut all: Vec<(String, Vec<u8>, Handle)> = Vec::new();
    for round in 0..20 {
        for i in 0..25 {
            let rel = format!("t{round}-{i}");
            let body = text(round * 100 + i, 200 + i);
            fs::write(m.m(&rel), &body).unwrap();
            all.push((rel.clone(), body.into_bytes(), handle_of(&m.m(&rel))));
        }
        cycle_and_open(&mut m, round, &all);
    }
}

/// xfstests generic/477's other half: each round deletes the last round's
/// directory and makes its files again, so the new files take the numbers
/// of the deleted ones, whose node records the database still holds until
/// the old daemon's last batch replaces them. `umount && mount` at once;
/// the new files' handles must open through the new daemon (it waits for
/// the closing one rather than trust the stale record it found first), and
/// the deleted files' handles must be stale.
#[test]
fn handles_of_files_on_reused_numbers_survive_umount_and_mount_at_once() {
    let disk = Ext4::new(64);
    let site = Site::new();
    let b = disk.path("backing");
    fs::create_dir_all(&b).unwrap();
    let mut m = site.mount(&b);
    let mut seen = std::collections::HashSet::new();
    let mut reused = 0;
    let mut before: Vec<Handle> = Vec::new();
    for round in 0..8 {
        let d = m.m("d");
        let _ = fs::remove_dir_all(&d);
        fs::create_dir(&d).unwrap();
        let mut now = Vec::new();
        for i in 0..10 {
            let rel = format!("d/f{i}");
            let body = text(round * 100 + i, 100 + i);
            fs::write(m.m(&rel), &body).unwrap();
            if !seen.insert(fs::metadata(m.b(&rel)).unwrap().ino()) {
                reused += 1;
            }
            now.push((rel.clone(), body.into_bytes(), handle_of(&m.m(&rel))));
        }
        cycle_and_open(&mut m, round, &now);
        for h in &before {
            assert_eq!(
                open_by_handle(&m.mnt, h, libc::O_RDONLY).err(),
                Some(libc::ESTALE),
                "round {round}: a deleted file's handle"
            );
        }
        before = now.into_iter().map(|(_, _, h)| h).collect();
    }
    assert!(
        reused >= 10,
        "ext4 reused {reused} numbers: the test proves nothing"
    );
}

/// `umount && mount` of `m` at once (no wait for the old daemon to
/// exit), then every handle of `files` opened and read through the new
/// daemon, with the kernel's caches emptied; waits for the old daemon.
fn cycle_and_open(m: &mut Mount, round: usize, files: &[(String, Vec<u8>, Handle)]) {
    // (Another test's child, forked with our descriptors, can keep the
    // mount busy a moment under the suite's load: then a lazy unmount,
    // which detaches it at once all the same.)
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&m.mnt)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    if !st.success() {
        crate::support::mount::lazy_unmount(&m.mnt);
    }
    assert!(
        wait_for(10.0, || !is_mounted(&m.mnt)),
        "round {round}: umount"
    );
    let mut old = m.take_child();
    m.remount();
    drop_caches();
    for (rel, want, h) in files {
        if let Err(e) = open_by_handle(&m.mnt, h, libc::O_RDONLY) {
            panic!(
                "round {round}: {rel}: errno {e}; the daemons' log:\n{}",
                m.log_text()
            );
        }
        assert_eq!(
            &read_by_handle(&m.mnt, h, &format!("round {round}: {rel}")),
            want
        );
    }
    if let Some(c) = old.as_mut() {
        let _ = c.wait();
    }
}

/// Sets its flag when dropped (also while a failed assertion unwinds).
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The daemon's descriptors of files in `dir` open for writing.
fn writable_fds_in(pid: u32, dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(it) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in it.flatten() {
        let Ok(target) = fs::read_link(e.path()) else {
            continue;
        };
        if !target.starts_with(dir) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            e.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        if flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32 {
            out.push(target);
        }
    }
    out
}

/// Two idle daemons over a loop-mounted BACKING hold nothing open for
/// writing: `mount -o remount,ro` of BACKING's filesystem works while
/// they run, and once the views are unmounted their daemons end and leave
/// BACKING's filesystem free to unmount.
#[test]
fn idle_daemons_let_backing_be_remounted_read_only_and_unmounted() {
    let disk = Ext4::new(64);
    let b = disk.path("archive");
    let names = archive(&b, 300, 8_000, 3);
    settle();
    let site = Site::new();
    let one = site.mount(&b);
    let two = site.mount(&b);
    for m in [&one, &two] {
        list(m, &names);
        fs::write(m.m("d0/written.txt"), text(1, 5_000)).unwrap();
        fs::read(m.m("d0/written.txt")).unwrap();
    }
    // Idle: each lets go of what it wrote within a few seconds.
    for m in [&one, &two] {
        let pid = m.pid();
        assert!(
            wait_for(10.0, || writable_fds_in(pid, &disk.dir).is_empty()),
            "an idle daemon still holds {:?} open for writing",
            writable_fds_in(pid, &disk.dir)
        );
    }
    disk.remount("ro")
        .unwrap_or_else(|e| panic!("remount,ro with idle daemons: {e}"));
    // Still served, read-only.
    assert_eq!(
        fs::metadata(one.m(&names[5])).unwrap().len(),
        text(5, 8_000).len() as u64
    );
    disk.remount("rw").unwrap();
    // The views go.
    let mut one = one;
    let mut two = two;
    let (mut c1, mut c2) = (one.take_child(), two.take_child());
    for m in [&one, &two] {
        let st = Command::new("fusermount3")
            .arg("-u")
            .arg(&m.mnt)
            .status()
            .unwrap();
        assert!(st.success());
    }
    // The daemons end on their own once unmounted (the deadline is for a
    // hang), and then hold nothing of BACKING's filesystem.
    for c in [c1.as_mut(), c2.as_mut()].into_iter().flatten() {
        wait_until("a view's daemon ending after its unmount", 30.0, || {
            c.try_wait().unwrap().is_some()
        });
    }
    let st = Command::new("umount").arg(&disk.dir).output().unwrap();
    assert!(
        st.status.success(),
        "BACKING's filesystem still busy after the views' daemons ended: {st:?}"
    );
    assert!(!is_mounted(&disk.dir));
}

/// A daemon killed with SIGKILL in the middle of writes (its database
/// connection open, records queued) costs the daemon beside it nothing:
/// it goes on serving right sizes, the database is not damaged, and what
/// the survivor stored is there for the next mount.
#[test]
fn a_daemon_killed_mid_write_costs_the_other_nothing() {
    let site = Site::new();
    let b = site.backing();
    let names = archive(&b, 600, 6_000, 6);
    settle();
    let survivor = site.mount(&b);
    let mut victim = site.mount(&b);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for n in names.iter().skip(k % 7).step_by(7) {
                    let _ = fs::symlink_metadata(victim.m(n));
                }
                let _ = fs::write(victim.m(&format!("d1/v{k}.txt")), text(k, 100_000));
                k += 1;
                rounds.store(k, std::sync::atomic::Ordering::Relaxed);
            }
        });
        // The victim's threads are busy in the loop above: a few rounds
        // of lookups and writes done, more under way.
        wait_until("the victim's first rounds of work", 60.0, || {
            rounds.load(std::sync::atomic::Ordering::Relaxed) >= 3
        });
        let pid = victim.pid() as i32;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = w.join();
    });
    victim.kill9();
    // The survivor serves every size right, from its listing.
    drop_caches();
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            fs::metadata(survivor.m(n)).unwrap().len(),
            text(i, 6_000).len() as u64,
            "{n}"
        );
    }
    let log = survivor.log_text();
    assert!(!log.contains("damaged"), "{log}");
    let mut survivor = survivor;
    survivor.unmount();
    // The next mount sizes everything from the database.
    let next = site.mount(&b);
    let read = list(&next, &names);
    let tree: u64 = names
        .iter()
        .map(|n| fs::metadata(b.join(n)).unwrap().len())
        .sum();
    assert!(
        read < tree / 10,
        "the next mount read {read} bytes of {tree} to size the files:\n{}",
        next.log_text()
    );
    assert!(!next.log_text().contains("damaged"), "{}", next.log_text());
}

/// Over a BACKING that is itself a FUSE mount (bindfs, standing for NFS,
/// SMB or CephFS: no shared memory between hosts), the database is kept
/// in rollback-journal mode, not WAL, and two mounts listing at once still
/// both size the files from it.
#[test]
fn over_a_fuse_backing_two_mounts_share_it_in_rollback_journal_mode() {
    let site = Site::new();
    let real = site.backing();
    let names = archive(&real, 300, 10_000, 3);
    let bind = site.dir.path().join("bind");
    fs::create_dir(&bind).unwrap();
    let bindfs = crate::backing_fuse::Bindfs::mount(&real, &bind);
    two_at_once_read_as_one_alone(&site, &bind, &names, 1, "over bindfs");
    let mode = Command::new("sqlite3")
        .arg(real.join(".cutf8fs-index/index.sqlite"))
        .arg("PRAGMA journal_mode;")
        .output()
        .expect("sqlite3 (scripts/setup.sh)");
    assert_eq!(
        String::from_utf8_lossy(&mode.stdout).trim(),
        "delete",
        "the database over a FUSE BACKING is not in rollback-journal mode"
    );
    drop(bindfs);
}
