//! Several daemons over one BACKING (standing in for several hosts over a
//! shared filesystem): a daemon that starts while another is in the middle
//! of journaled rewrites leaves that daemon's journal entries alone (its
//! rewrites go on succeeding); after the other is killed with -9, the one
//! still running finishes the killed daemon's entries (the file is one
//! whole version) and removes its owner file, and keeps serving, reads and
//! journaled rewrites of its own included; the next mount finds nothing
//! left and leaves the live daemon's owner file.
//!
//! A daemon killed in the middle of a journaled rewrite (right after the
//! commit, the tail partly copied: `CUTF8FS_TEST_KILL_AFTER_COMMIT`) is
//! finished at once by a live daemon of the same BACKING, which shows the
//! file whole within a bounded time; what it writes after that is never
//! undone by a later mount.
//! Changes racing through two daemons fail with no EIO.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::mount::{ended, wait_for, Mount};
use crate::support::write::{corrected_file, journal_entries};

/// Big enough that each rewrite of its tail takes a while.
const LEN: usize = 24 << 20;

fn body() -> String {
    body_of(LEN)
}

fn body_of(len: usize) -> String {
    let line = "the quick brown fox jumps over the lazy dog 0123456789\n";
    line.repeat(len / line.len())
}

/// Whether process `pid` waits for a `flock` on the inode numbered `ino`
/// (a `->` line of /proc/locks).
fn waits_for_flock(pid: u32, ino: u64) -> bool {
    let locks = fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.get(1) == Some(&"->")
            && w.get(2) == Some(&"FLOCK")
            && w.get(5) == Some(&pid.to_string().as_str())
            && w.get(6).is_some_and(|d| d.ends_with(&format!(":{ino}")))
    })
}

/// The names in BACKING's journal directory.
fn journal_names(b: &Path) -> Vec<String> {
    fs::read_dir(b.join(".cutf8fs-journal"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The owner id of an entry name (`ID-SEQ...`).
fn id_of(entry: &str) -> Option<&str> {
    entry.split_once('-').map(|(id, _)| id)
}

#[test]
fn a_live_daemons_journal_is_left_to_it_and_a_killed_ones_finished_by_the_next_mount() {
    let text = body();
    let mut a = Mount::new(&[], |b| {
        fs::write(b.join("big.txt"), corrected_file(&text)).unwrap();
        fs::write(b.join("other.txt"), corrected_file("other \u{3b1}\n")).unwrap();
    });
    let backing = a.backing.clone();
    // Daemon A rewrites big.txt's whole tail again and again: "\u{800}"
    // (two bytes in BACKING) and "the" (three) in turn at the start.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, done) = (stop.clone(), done.clone());
        let path = a.m("big.txt");
        std::thread::spawn(move || -> Option<std::io::Error> {
            let f = fs::OpenOptions::new().write(true).open(path).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let head: &[u8] = if n.is_multiple_of(2) {
                    "\u{800}".as_bytes()
                } else {
                    b"the"
                };
                if let Err(e) = f.write_at(head, 0) {
                    return Some(e);
                }
                n += 1;
                done.store(n, Ordering::Relaxed);
            }
            None
        })
    };
    // Once A has an entry in the journal, daemon B starts on the same
    // BACKING.
    let mut a_id = None;
    assert!(
        wait_for(60.0, || {
            a_id = journal_names(&backing)
                .iter()
                .find_map(|n| id_of(n).map(str::to_owned));
            a_id.is_some()
        }),
        "daemon A wrote no journal entry"
    );
    let a_id = a_id.unwrap();
    let mnt_b = a.dir().join("mnt-b");
    fs::create_dir(&mnt_b).unwrap();
    let b = Mount::with(&[]).on(&backing, &mnt_b, &a.dir().join("daemon-b.log"));
    // A's rewrites go on succeeding: B left its entries alone.
    let before = done.load(Ordering::Relaxed);
    let t0 = Instant::now();
    while done.load(Ordering::Relaxed) < before + 3 && !writer.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "daemon A's rewrites stopped after B started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !writer.is_finished(),
        "daemon A's rewrite failed once B started: {:?}",
        writer.join()
    );
    // Kill A in the middle of a committed rewrite (or of one being
    // written).
    assert!(
        wait_for(60.0, || journal_names(&backing).iter().any(|n| n
            .starts_with(&format!("{a_id}-"))
            && n.ends_with(".commit"))),
        "no committed entry of A seen"
    );
    a.kill9();
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    let left: Vec<String> = journal_names(&backing)
        .into_iter()
        .filter(|n| n.starts_with(&format!("{a_id}-")))
        .collect();
    // B finishes A's entries and removes A's owner file, at once.
    assert!(
        wait_for(60.0, || !journal_names(&backing).iter().any(|n| n
            .starts_with(&format!("{a_id}-"))
            || n == &format!("{a_id}.owner"))),
        "B did not finish the killed A's entries: {:?}\nB's log:\n{}",
        journal_names(&backing),
        b.log_text()
    );

    // B keeps serving: reads, and a journaled rewrite of its own.
    assert_eq!(
        fs::read_to_string(b.m("other.txt")).unwrap(),
        "other \u{3b1}\n"
    );
    let f = fs::OpenOptions::new()
        .write(true)
        .open(b.m("other.txt"))
        .unwrap();
    f.write_at("\u{800}".as_bytes(), 0).unwrap();
    drop(f);
    assert_eq!(
        fs::read_to_string(b.m("other.txt")).unwrap(),
        "\u{800}er \u{3b1}\n"
    );
    let names = journal_names(&backing);
    let b_owner: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with(".owner") && !n.starts_with(&format!("{a_id}.")))
        .cloned()
        .collect();
    assert_eq!(b_owner.len(), 1, "B's owner file: {names:?}");

    // The next mount finds nothing left; B's owner file stays.
    a.remount();
    assert!(
        journal_entries(&backing).is_empty(),
        "entries left after the next mount: {:?}",
        journal_names(&backing)
    );
    let names = journal_names(&backing);
    assert!(
        !names.contains(&format!("{a_id}.owner")),
        "A's owner file left: {names:?}"
    );
    assert!(
        names.contains(&b_owner[0]),
        "B's owner file removed: {names:?}"
    );
    let logs = a.log_text() + &b.log_text();
    assert!(
        logs.contains("finished an interrupted rewrite")
            || left.iter().all(|n| !n.ends_with(".commit")),
        "the committed entry was not finished:\n{logs}"
    );
    let view = fs::read(a.m("big.txt")).unwrap();
    let tail = &text.as_bytes()[3..];
    let ok = [("\u{800}".as_bytes()), (b"the".as_slice())]
        .iter()
        .any(|h| view.len() == h.len() + tail.len() && view.starts_with(h) && view.ends_with(tail));
    assert!(
        ok,
        "big.txt is not one whole version after the kill (len {})",
        view.len()
    );
    drop(b);
}

/// Two daemons changing one corrected file at the same moment: one
/// shifts its text again and again (a length-changing write at its
/// start), the other truncates it. Each change applies to the file as it
/// is at that moment (last writer wins); none fails with an EIO the
/// backing filesystem never gave (it did, a few hundred in 45 000, when a
/// change was planned from an index the other daemon had just made
/// stale).
#[test]
fn changes_racing_through_two_daemons_never_fail_with_eio() {
    let text = format!("aaa{}", format!("{}\n", "x".repeat(100)).repeat(50));
    let a = Mount::new(&[], |b| {
        fs::write(b.join("f.txt"), corrected_file(&text)).unwrap()
    });
    let mnt_b = a.dir().join("mnt-b");
    fs::create_dir(&mnt_b).unwrap();
    let b = Mount::with(&[]).on(&a.backing, &mnt_b, &a.dir().join("daemon-b.log"));
    let stop = Arc::new(AtomicBool::new(false));
    let shifter = {
        let (stop, path) = (stop.clone(), a.m("f.txt"));
        std::thread::spawn(move || -> Vec<String> {
            let f = fs::OpenOptions::new().write(true).open(path).unwrap();
            let mut errors = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let head: &[u8] = if n.is_multiple_of(2) {
                    "\u{800}".as_bytes()
                } else {
                    b"aaa"
                };
                if let Err(e) = f.write_at(head, 0) {
                    errors.push(e.to_string());
                }
                n += 1;
            }
            errors
        })
    };
    let mut errors = Vec::new();
    let mut done = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(b.m("f.txt"))
            .unwrap();
        if let Err(e) = f.set_len(150 + done % 2) {
            errors.push(e.to_string());
        }
        done += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let shifts = shifter.join().unwrap();
    assert!(
        errors.is_empty() && shifts.is_empty(),
        "of {done} truncates {} failed ({:?}), and {} shifting writes ({:?})",
        errors.len(),
        errors.first(),
        shifts.len(),
        shifts.first()
    );
}

#[test]
fn a_killed_daemons_committed_rewrite_is_finished_at_once_by_a_live_one() {
    use std::os::unix::fs::MetadataExt;
    let text = body_of(8 << 20);
    // A kills itself at its second journaled rewrite, right after the
    // commit, with the first MiB of the new tail copied.
    let mut a = Mount::with(&[])
        .env("CUTF8FS_TEST_KILL_AFTER_COMMIT", "2")
        .fresh(|b| {
            fs::write(b.join("big.txt"), corrected_file(&text)).unwrap();
            fs::write(b.join("small.txt"), corrected_file("small \u{3b1}\n")).unwrap();
        });
    let backing = a.backing.clone();
    let mnt_b = a.dir().join("mnt-b");
    fs::create_dir(&mnt_b).unwrap();
    let b = Mount::with(&[]).on(&backing, &mnt_b, &a.dir().join("daemon-b.log"));
    // B has the file open: the replay must reach what this handle reads.
    let held = fs::File::open(b.m("big.txt")).unwrap();
    // A's first journaled rewrite makes the journal and A's owner file.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(a.m("small.txt"))
        .unwrap();
    f.write_at("\u{800}".as_bytes(), 0).unwrap();
    drop(f);
    let owner = journal_names(&backing)
        .into_iter()
        .find(|n| n.ends_with(".owner"))
        .expect("A's owner file");
    let owner_ino = fs::metadata(backing.join(".cutf8fs-journal").join(&owner))
        .unwrap()
        .ino();
    // Let B see A's owner file first, so the kill is learned from the
    // lock B waits for (a daemon that dies before B looked is found
    // unlocked at B's next look instead).
    wait_for(20.0, || waits_for_flock(b.pid(), owner_ino));
    // The shifting overwrite at big.txt's start: A dies mid-copy.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(a.m("big.txt"))
        .unwrap();
    let _ = f.write_at("\u{800}".as_bytes(), 0);
    drop(f);
    let a_pid = a.pid();
    assert!(
        wait_for(20.0, || ended(a_pid)),
        "A did not kill itself after the commit; its log:\n{}",
        a.log_text()
    );
    a.kill9();
    let old = text.as_bytes().to_vec();
    let new = ["\u{800}".as_bytes(), &text.as_bytes()[3..]].concat();
    let mut seen = Vec::new();
    let whole = wait_for(30.0, || {
        seen = fs::read(b.m("big.txt")).unwrap_or_default();
        seen == old || seen == new
    });
    assert!(
        whole,
        "30 s after A was killed, B still shows big.txt neither old nor new (len {}, \
         old {}, new {}, first difference from new at {:?}); journal: {:?}\nB's log:\n{}",
        seen.len(),
        old.len(),
        new.len(),
        seen.iter().zip(&new).position(|(x, y)| x != y),
        journal_names(&backing),
        b.log_text()
    );
    assert!(
        b.log_text().contains("finished its 1 interrupted rewrite"),
        "B did not finish A's rewrite; B's log:\n{}",
        b.log_text()
    );
    let mut through_held = Vec::new();
    std::io::Read::read_to_end(&mut &held, &mut through_held).unwrap();
    assert!(
        through_held == seen,
        "the handle B held reads another version (len {})",
        through_held.len()
    );
    // B's append, then a mount starting: the append stays.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(b.m("big.txt"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"appended through B\n").unwrap();
    drop(f);
    let want = [seen.as_slice(), b"appended through B\n"].concat();
    a.remount();
    for (who, m) in [("A", &a), ("B", &b)] {
        let got = fs::read(m.m("big.txt")).unwrap();
        assert!(
            got == want,
            "after the next mount, {who} shows big.txt with B's append undone \
             (len {}, want {}); A's log:\n{}",
            got.len(),
            want.len(),
            a.log_text()
        );
    }
    assert!(
        journal_entries(&backing).is_empty(),
        "entries left: {:?}",
        journal_names(&backing)
    );
    drop(held);
    drop(b);
}
