//! `cutf8 migrate` run by root while the tree's owner keeps working in it
//! (man/cutf8.1 SECURITY, "Files changed during the run"): every write the
//! owner's write(2) reported done is in the file afterwards, and a
//! directory the owner moves out of the named tree is not written in.
//!
//! The owner is the real unprivileged `cutf8t-a` (`migrate_security`'s
//! fixture).
//!
//! * Appenders: one process per file opens it with O_APPEND, writes one
//!   numbered line and closes it, in a loop, while root converts the tree
//!   back and forth; a line missing from the sequence is a write lost
//!   (renamed over, or rolled back over). Run for hard-linked files
//!   (converted in place under the undo journal) and single-link files
//!   (converted by temporary file and rename).
//! * A directory moved out: once the run has converted the first files
//!   of a large directory, the owner renames the directory out of the
//!   tree; no file in it is converted after that, and its remaining files
//!   are reported failed.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::migrate_security::Fixture;
use crate::support::cli::BIN;
use crate::support::users::User;

/// Line numbers of the `line N` lines of `bytes`, in file order.
fn numbers(bytes: &[u8]) -> Vec<u64> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| l.strip_prefix(b"line "))
        .filter_map(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .collect()
}

/// The first number missing from `0, 1, 2, …` in `nums` (which must be
/// that sequence, as one appender writes them in turn), if any.
fn first_gap(nums: &[u64]) -> Option<u64> {
    nums.iter()
        .enumerate()
        .find(|&(i, &n)| n != i as u64)
        .map(|(i, _)| i as u64)
}

/// Starts the owner's appender on `file`: open O_APPEND, write one line,
/// close, until `stop` exists; then writes how many lines it wrote to
/// `count`.
fn appender(a: User, file: &Path, stop: &Path, count: &Path) -> Child {
    let script = "n=0; while [ ! -e \"$2\" ]; do echo \"line $n\" >> \"$1\" || exit 1; \
                  n=$((n+1)); done; echo $n > \"$3\"";
    Command::new("setpriv")
        .args([
            &format!("--reuid={}", a.uid),
            &format!("--regid={}", a.gid),
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args([file.as_os_str(), stop.as_os_str(), count.as_os_str()])
        .stdin(Stdio::null())
        .spawn()
        .expect("start an appender")
}

/// Root converts the tree back and forth while the owner appends to each
/// of `names` (created by the owner, and hard-linked if `links`); no
/// appended line is ever missing. Stops at the first loss or after the
/// bound.
fn appends_survive(links: bool) {
    let f = Fixture::new();
    let names: Vec<String> = (0..6).map(|i| format!("g{i}.txt")).collect();
    for n in &names {
        let link = if links {
            format!("ln {n} h{n}")
        } else {
            String::new()
        };
        f.as_a_checked(&format!("echo 'start é' > {n}; {link}"), &[]);
    }
    // The appenders' own directory, beside the tree.
    let own = f.dir.path().join("appenders");
    fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(f.a.uid), Some(f.a.gid)).unwrap();
    let stop = own.join("stop");
    let count = |n: &str| own.join(format!("{n}.count"));
    let mut apps: Vec<Child> = names
        .iter()
        .map(|n| appender(f.a, &f.tree.join(n), &stop, &count(n)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut lost = None;
    let mut runs = 0;
    while lost.is_none() && Instant::now() < deadline {
        let to = if runs % 2 == 0 { "cutf8" } else { "utf8" };
        runs += 1;
        let out = Command::new(BIN)
            .args(["migrate", "-q", "--no-progress", "--to", to])
            .arg(&f.tree)
            .stdin(Stdio::null())
            .output()
            .expect("run cutf8");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        for n in &names {
            let nums = numbers(&fs::read(f.tree.join(n)).unwrap());
            if let Some(gap) = first_gap(&nums) {
                lost = Some(format!(
                    "run {runs} (--to {to}): {n} lacks line {gap} of {} written; \
                     migrate said: {stderr}",
                    nums.len()
                ));
                break;
            }
        }
    }
    fs::write(&stop, b"").unwrap();
    for a in &mut apps {
        a.wait().unwrap();
    }
    if let Some(msg) = lost {
        panic!("an append that write(2) reported done was lost: {msg}");
    }
    for n in &names {
        let written: u64 = fs::read_to_string(count(n))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let nums = numbers(&fs::read(f.tree.join(n)).unwrap());
        assert_eq!(first_gap(&nums), None, "{n}: a line is missing");
        assert_eq!(nums.len() as u64, written, "{n}: lines written and found");
    }
    assert!(runs >= 2, "migrate ran {runs} times in the bound");
}

#[test]
#[ignore = "known window: in place, an append can still be lost (1 full run in 4 on 7b23cf4)"]
fn appends_to_hard_linked_files_during_migrate_are_never_lost() {
    appends_survive(true);
}

#[test]
fn appends_to_single_link_files_during_migrate_are_never_lost() {
    appends_survive(false);
}

#[test]
fn a_directory_moved_out_of_the_tree_is_not_written_in() {
    let f = Fixture::new();
    let away = f.dir.path().join("away");
    fs::create_dir(&away).unwrap();
    std::os::unix::fs::chown(&away, Some(f.a.uid), Some(f.a.gid)).unwrap();
    // 3000 files of 15 kB of text, made in one process.
    let src = f.dir.path().join("big.src");
    fs::write(&src, "é中😀 text line\n".repeat(3000 * 700)).unwrap();
    crate::migrate_security::chmod(&src, 0o644);
    f.as_a_checked(
        "mkdir big && split -l 700 -a 4 -d --additional-suffix=.txt \"$2\" big/f",
        &[src.as_os_str()],
    );
    // The owner's mover waits on a FIFO, so that it moves the directory
    // the moment it is told to.
    let go = away.join("go");
    nix::unistd::mkfifo(&go, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::os::unix::fs::chown(&go, Some(f.a.uid), Some(f.a.gid)).unwrap();
    let mover = std::thread::spawn({
        let (a, tree, away, go) = (f.a, f.tree.clone(), away.clone(), go.clone());
        move || {
            crate::support::users::sh_as(
                a,
                "read x < \"$3\" && mv \"$1\"/big \"$2\"/big",
                &[tree.as_os_str(), away.as_os_str(), go.as_os_str()],
            )
        }
    });
    let first = f.tree.join("big/f0000.txt");
    let magic = &cutf8::MAGIC[..];
    let mut run = Command::new(BIN)
        .args(["migrate", "--no-progress", "-j1"])
        .arg(&f.tree)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cutf8");
    // Wait for the first file converted (the walk is done, the worker is
    // in the directory), bounded; then have the owner move it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fs::read(&first).unwrap_or_default().starts_with(magic) {
        assert!(
            Instant::now() < deadline,
            "the first file was never converted"
        );
        assert!(run.try_wait().unwrap().is_none(), "migrate ended early");
        std::thread::yield_now();
    }
    fs::write(&go, b"go\n").unwrap();
    let moved = mover.join().unwrap();
    crate::support::run::succeeded(&moved, "the owner's mv");
    // A file renamed into place gets a later change time than this.
    let moved_at = fs::symlink_metadata(away.join("big")).unwrap();
    let moved_at = (moved_at.ctime(), moved_at.ctime_nsec());
    assert!(
        run.try_wait().unwrap().is_none(),
        "migrate ended before the move: the race was not run"
    );
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (mut after, mut left) = (Vec::new(), 0);
    for e in fs::read_dir(away.join("big")).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        if (md.ctime(), md.ctime_nsec()) > moved_at {
            after.push(e.file_name());
        }
        if !fs::read(e.path()).unwrap().starts_with(magic) {
            left += 1;
        }
    }
    assert!(
        after.is_empty(),
        "{} files changed in {} after it left the tree, e.g. {:?}",
        after.len(),
        away.join("big").display(),
        &after[..after.len().min(3)]
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let failed = stderr.matches("moved or replaced").count();
    assert!(
        left > 0 && failed >= left,
        "{left} files left as they were, {failed} reported: {stderr}"
    );
}
