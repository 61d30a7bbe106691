//! No user can flood the daemon's log (docs/behaviour.md, "The mount"; `src/ratelog.rs`): a
//! message a request can cause again and again is written a few times per
//! window, then counted, and one line says how many were held back.
//!
//! Each test runs the daemon with a one-second window
//! (`CUTF8FS_RATELOG_WINDOW_MS=1000`, read by the daemon at start) and
//! keeps an attack up for a few seconds:
//!
//! * BACKING's owner (the real unprivileged `cutf8t-a`) keeps a
//!   `.cutf8fs-journal` of their own in place, and text is written through
//!   the mount so that every write needs the journal (a character of
//!   another length in the middle of a corrected file): every write fails
//!   with EPERM, and the log holds a few lines per window, not one per write;
//! * the daemon's descriptors run out (files held open through the mount)
//!   and opens of other files keep failing with EMFILE.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::time::{Duration, Instant};

use crate::support::mount::{corrected, Mount};
use crate::support::users::user;

/// The window the tests give the daemon, and how long each attack lasts.
const WINDOW_MS: u64 = 1000;
const ATTACK: Duration = Duration::from_secs(3);

/// Lines of one kind a window may hold: the burst per key
/// (`ratelog::BURST`) times the keys, at most `ratelog::KIND_BURST`, plus
/// the summary line.
fn bound(keys: u64) -> u64 {
    let per_window =
        (cutf8fs::ratelog::BURST as u64 * keys).min(cutf8fs::ratelog::KIND_BURST as u64);
    let windows = ATTACK.as_millis() as u64 / WINDOW_MS + 2;
    windows * (per_window + 1)
}

/// Lines held back that the log's summary lines count (the summaries
/// whose text has `marker`).
fn counted(log: &str, marker: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains(" like this (") && l.contains(marker))
        .filter_map(|l| {
            l.split(" more message")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Waits until every line the daemon held back is counted in the log:
/// the last window's summary is written once that window has passed.
fn all_counted(m: &Mount) {
    crate::support::mount::wait_until("the last window's summary in the log", 60.0, || {
        counted(&m.log_text(), "") == m.stats_count("log lines held back")
    });
}

fn lines_with(log: &str, what: &str) -> u64 {
    log.lines().filter(|l| l.contains(what)).count() as u64
}

#[test]
fn an_untrusted_journal_kept_in_place_does_not_flood_the_log() {
    let a = user("cutf8t-a");
    let m = Mount::with(&[])
        .env("CUTF8FS_RATELOG_WINDOW_MS", &WINDOW_MS.to_string())
        .fresh(|b| {
            fs::write(
                b.join("notes.txt"),
                corrected("abcdefgh\n".repeat(1000).as_bytes()),
            )
            .unwrap();
            std::os::unix::fs::chown(b, Some(a.uid), Some(a.gid)).unwrap();
            fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
        });
    // The owner of BACKING takes the journal's name, while mounted.
    let out =
        crate::support::users::sh_as(a, "mkdir \"$1\"/.cutf8fs-journal", &[m.backing.as_os_str()]);
    crate::support::run::succeeded(&out, "command failed");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.m("notes.txt"))
        .unwrap();
    let (mut writes, mut refused) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < ATTACK {
        // U+0800: three bytes in the view, two on disk — the text shifts.
        let r = f
            .write_all_at("\u{800}".as_bytes(), 100)
            .and_then(|()| f.sync_data());
        writes += 1;
        if r.is_err_and(|e| e.raw_os_error() == Some(libc::EPERM)) {
            refused += 1;
        }
    }
    all_counted(&m);
    let log = m.log_text();
    let lines = lines_with(&log, "not the daemon's journal");
    let summaries = lines_with(&log, "more messages like this (journal-untrusted)");
    println!("{writes} writes, {refused} refused with EPERM; {lines} lines and {summaries} counts logged");
    assert!(
        refused > 100 && refused == writes,
        "{writes} writes, {refused} refused"
    );
    assert!(lines >= 1 && lines <= bound(1), "{lines} lines:\n{log}");
    assert!(summaries >= 1, "no count of what was held back:\n{log}");
    // The count adds up: every refused write is a line or counted.
    let counted = counted(&log, "(journal-untrusted)");
    assert_eq!(
        lines + counted,
        refused,
        "lines and counts do not add up:\n{log}"
    );
    // The mount goes on serving.
    assert_eq!(fs::read(m.m("notes.txt")).unwrap().len(), 9000);
}

#[test]
fn running_out_of_descriptors_does_not_flood_the_log() {
    let m = Mount::with(&[])
        .env("CUTF8FS_RATELOG_WINDOW_MS", &WINDOW_MS.to_string())
        .nofile(256)
        .fresh(|b| {
            fs::write(b.join("held"), b"x").unwrap();
            for i in 0..4 {
                fs::write(b.join(format!("f{i}")), b"y").unwrap();
            }
        });
    let (mut h, _, _) = crate::support::run::holder(&m.m("held"), 400);
    let (mut opens, mut failed) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < ATTACK {
        let r = fs::File::open(m.m(&format!("f{}", opens % 4))).and_then(|mut f| {
            let mut b = Vec::new();
            f.read_to_end(&mut b)
        });
        opens += 1;
        if r.is_err_and(|e| e.raw_os_error() == Some(libc::EMFILE)) {
            failed += 1;
        }
    }
    let _ = h.kill();
    let _ = h.wait();
    all_counted(&m);
    let log = m.log_text();
    // One user's opens stop at its share of the daemon's descriptors
    // (man cutf8fs, RESOURCES) before the process runs out: either refusal
    // is a line a user can repeat at will, and each is rate-limited.
    let lines = lines_with(&log, "out of file descriptors")
        + lines_with(&log, "see man cutf8fs, RESOURCES");
    let summaries = lines_with(&log, "more messages like this (out-of-descriptors)")
        + lines_with(&log, "more messages like this (descriptor-share)");
    println!(
        "{opens} opens, {failed} failed with EMFILE; {lines} lines and {summaries} counts logged"
    );
    assert!(
        failed > 100,
        "{opens} opens, {failed} failed: the daemon did not run out"
    );
    assert!(lines >= 1 && lines <= 2 * bound(4), "{lines} lines:\n{log}");
    assert!(summaries >= 1, "no count of what was held back:\n{log}");
    // Once the files are closed, opens work again.
    assert_eq!(fs::read(m.m("f0")).unwrap(), b"y");
}
