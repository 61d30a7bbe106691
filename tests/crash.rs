//! Crash safety (docs/behaviour.md, "The mount", "Crash safety"): a child process storms a mount with appends, shifting in-place
//! rewrites (journaled), encoding switches (corrected → raw → emptied →
//! corrected), a hard-linked file and write-then-rename replacements; the
//! daemon gets SIGKILL at a random moment; the dead mount is detached
//! lazily and BACKING mounted again. Then, for every file:
//!
//! * its view (read through the new mount, and computed from the backing
//!   bytes with the codec) is a state the writer's operations could leave:
//!   appends may lose a tail of bytes (a byte prefix of what was written),
//!   a rewrite that shifts text or changes the encoding is all or nothing
//!   for each request (a pwrite the kernel cut at a page boundary may be
//!   found with its first piece only, in whole characters: `torn`), a
//!   renamed file is one whole version;
//! * what was fsynced is there (the state is at least the last fsynced one);
//! * no file is half-converted: a backing file with the magic number is
//!   strict Corrected UTF-8, one without is raw content the writer wrote;
//! * hard links are still one inode with two names, and
//!   `.cutf8fs-journal` is empty (and hidden in the mount).
//!
//! The writer is this test binary run again (`crash_writer_process`, which
//! does nothing unless `CUTF8FS_CRASH_WRITER` is set). It logs each step
//! (start, done, synced) to a file outside the mount; the checker replays
//! the same deterministic plan from the seed. Several rounds kill and
//! remount the same BACKING; files of earlier rounds must not change.
//! `CUTF8FS_SEED` replays a run (the seed is printed on failure).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::mount::expected_view;
use crate::support::mount::Mount;
use crate::support::write::{corrected_file, first_difference};
use cutf8::{self, MAGIC};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROUNDS: u64 = 4;

/// One step of a file's plan.
#[derive(Debug, Clone)]
enum Op {
    /// write(2) on an O_APPEND descriptor.
    Append(Vec<u8>),
    /// pwrite(2) at a view offset.
    Pwrite(u64, Vec<u8>),
    /// ftruncate(2).
    Truncate(u64),
    /// fsync(2): everything before it is durable once it returns.
    Fsync,
    /// Write version `n` to `NAME.tmp`, fsync, close, rename over NAME;
    /// then fsync the directory when `sync_dir`.
    Replace { text: Vec<u8>, sync_dir: bool },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Appends of text of every kind to a corrected file.
    Appends,
    /// In-place rewrites that always shift the text on disk (3-byte slots
    /// of ASCII ↔ one U+0800–U+089F character: 3 view bytes, 2 or 3 disk
    /// bytes): the journaled path. `linked`: a second name in BACKING.
    Shifts { linked: bool },
    /// Like `Shifts`, with now and then a C1 control (the file turns raw),
    /// then truncation to zero and fresh text (corrected again).
    Switches,
    /// Whole versions written to a temporary name and renamed over it.
    Renames,
}

struct Plan {
    name: String,
    kind: Kind,
    initial: Vec<u8>,
    ops: Vec<Op>,
}

fn random_text(rng: &mut StdRng, chars: usize) -> String {
    (0..chars)
        .map(|_| match rng.gen_range(0..10) {
            0..=3 => rng.gen_range(b'a'..=b'z') as char,
            4 => '\n',
            5 => char::from_u32(rng.gen_range(0xA0..0x250)).unwrap(),
            6 => char::from_u32(rng.gen_range(0x4E00..0x9FFF)).unwrap(),
            7 => char::from_u32(rng.gen_range(0x1F300..0x1F650)).unwrap(),
            8 => char::from_u32(rng.gen_range(0x800..0x8A0)).unwrap(),
            _ => char::from_u32(rng.gen_range(0x10000..0x110A0)).unwrap(),
        })
        .collect()
}

fn slot_text(rng: &mut StdRng, ascii: bool) -> String {
    if ascii {
        (0..3).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
    } else {
        char::from_u32(rng.gen_range(0x800..0x8A0))
            .unwrap()
            .to_string()
    }
}

const SLOTS: usize = 6000;

/// Shifting pwrites over `slots` (true = ASCII slot): a run of slots of one
/// kind toggled to the other, so the disk length always changes.
fn shift_op(rng: &mut StdRng, slots: &mut [bool]) -> Op {
    let s = rng.gen_range(0..slots.len());
    let kind = slots[s];
    let mut e = s;
    let max = rng.gen_range(1..40);
    while e < slots.len() && slots[e] == kind && e - s < max {
        e += 1;
    }
    let mut data = String::new();
    for slot in &mut slots[s..e] {
        *slot = !kind;
        data.push_str(&slot_text(rng, !kind));
    }
    Op::Pwrite(3 * s as u64, data.into_bytes())
}

fn plans(seed: u64, round: u64) -> Vec<Plan> {
    let mut out = Vec::new();
    let kinds = [
        ("append0", Kind::Appends),
        ("append1", Kind::Appends),
        ("shift0", Kind::Shifts { linked: true }),
        ("shift1", Kind::Shifts { linked: false }),
        ("switch0", Kind::Switches),
        ("rename0", Kind::Renames),
        ("rename1", Kind::Renames),
    ];
    for (k, (name, kind)) in kinds.into_iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(seed ^ (round << 32) ^ (k as u64) << 8);
        let name = format!("r{round}-{name}.txt");
        let mut ops = Vec::new();
        let initial;
        match kind {
            Kind::Appends => {
                initial = corrected_file(&random_text(&mut rng, 200));
                for _ in 0..3000 {
                    if rng.gen_ratio(1, 12) {
                        ops.push(Op::Fsync);
                    }
                    let n = rng.gen_range(1..600);
                    ops.push(Op::Append(random_text(&mut rng, n).into_bytes()));
                }
            }
            Kind::Shifts { .. } | Kind::Switches => {
                let mut slots = vec![true; SLOTS];
                let text: String = slots.iter().map(|&a| slot_text(&mut rng, a)).collect();
                initial = corrected_file(&text);
                for _ in 0..3000 {
                    if rng.gen_ratio(1, 8) {
                        ops.push(Op::Fsync);
                    }
                    if kind == Kind::Switches && rng.gen_ratio(1, 15) {
                        // A C1 control in an ASCII slot: the file turns raw.
                        let s = loop {
                            let s = rng.gen_range(0..SLOTS);
                            if slots[s] {
                                break s;
                            }
                        };
                        ops.push(Op::Pwrite(3 * s as u64, b"\xc2\x85z".to_vec()));
                        // Emptied, then fresh text: corrected again.
                        ops.push(Op::Truncate(0));
                        slots.iter_mut().for_each(|s| *s = rng.gen_bool(0.5));
                        let fresh: String = slots.iter().map(|&a| slot_text(&mut rng, a)).collect();
                        ops.push(Op::Pwrite(0, fresh.into_bytes()));
                    } else {
                        ops.push(shift_op(&mut rng, &mut slots));
                    }
                }
            }
            Kind::Renames => {
                initial = corrected_file("version 0\n");
                for v in 1..2000 {
                    let n = rng.gen_range(1..3000);
                    let text = format!("version {v}\n{}", random_text(&mut rng, n));
                    ops.push(Op::Replace {
                        text: text.into_bytes(),
                        sync_dir: rng.gen_ratio(1, 4),
                    });
                }
            }
        }
        out.push(Plan {
            name,
            kind,
            initial,
            ops,
        });
    }
    out
}

// ---------------------------------------------------------------- writer

/// The writer child: runs the plans of one round, interleaved, logging
/// `NAME I start|done|synced` lines (one write(2) each) until killed or an
/// operation fails.
#[test]
fn crash_writer_process() {
    let Ok(spec) = std::env::var("CUTF8FS_CRASH_WRITER") else {
        return; // only as the child of `kill_9_during_a_storm_of_writes_and_renames`
    };
    let parts: Vec<&str> = spec.split('\t').collect();
    let (mnt, log, seed, round) = (
        PathBuf::from(parts[0]),
        parts[1],
        parts[2].parse::<u64>().unwrap(),
        parts[3].parse::<u64>().unwrap(),
    );
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .unwrap();
    let mut say = |s: String| {
        log.write_all(format!("{s}\n").as_bytes()).unwrap();
    };
    let plans = plans(seed, round);
    say("ready".into());
    let mut handles: HashMap<String, File> = HashMap::new();
    let mut next = vec![0usize; plans.len()];
    let mut rng = StdRng::seed_from_u64(seed ^ round);
    loop {
        let live: Vec<usize> = (0..plans.len())
            .filter(|&k| next[k] < plans[k].ops.len())
            .collect();
        if live.is_empty() {
            say("all done".into());
            return;
        }
        let k = live[rng.gen_range(0..live.len())];
        let p = &plans[k];
        let i = next[k];
        next[k] += 1;
        let path = mnt.join(&p.name);
        say(format!("{} {i} start", p.name));
        let r: std::io::Result<bool> = (|| {
            if !handles.contains_key(&p.name) && !matches!(p.ops[i], Op::Replace { .. }) {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .append(p.kind == Kind::Appends)
                    .open(&path)?;
                handles.insert(p.name.clone(), f);
            }
            match &p.ops[i] {
                Op::Append(d) => (&handles[&p.name]).write_all(d)?,
                Op::Pwrite(o, d) => handles[&p.name].write_all_at(d, *o)?,
                Op::Truncate(n) => handles[&p.name].set_len(*n)?,
                Op::Fsync => {
                    handles[&p.name].sync_all()?;
                    return Ok(true);
                }
                Op::Replace { text, sync_dir } => {
                    let tmp = mnt.join(format!("{}.tmp", p.name));
                    let mut f = File::create(&tmp)?;
                    f.write_all(text)?;
                    f.sync_all()?;
                    drop(f);
                    fs::rename(&tmp, &path)?;
                    if *sync_dir {
                        File::open(&mnt)?.sync_all()?;
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        })();
        match r {
            Ok(synced) => {
                say(format!("{} {i} done", p.name));
                if synced {
                    say(format!("{} {i} synced", p.name));
                }
            }
            Err(e) => {
                say(format!("error {} {i} {e}", p.name));
                std::process::exit(3);
            }
        }
    }
}

// ---------------------------------------------------------------- checker

/// Progress of one file according to the writer's log.
#[derive(Default, Debug)]
struct Progress {
    /// Ops started: the state may include ops 0..started.
    started: usize,
    /// Ops certainly in the state: all up to the last synced one.
    synced: usize,
}

fn read_log(log: &str) -> (HashMap<String, Progress>, Vec<String>) {
    let mut p: HashMap<String, Progress> = HashMap::new();
    let mut errors = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "error" {
            errors.push(line.to_string());
            continue;
        }
        if f.len() != 3 {
            continue;
        }
        let i: usize = f[1].parse().unwrap();
        let e = p.entry(f[0].to_string()).or_default();
        match f[2] {
            "start" => e.started = e.started.max(i + 1),
            "synced" => e.synced = e.synced.max(i + 1),
            _ => {}
        }
    }
    (p, errors)
}

fn view_of_initial(p: &Plan) -> Vec<u8> {
    expected_view(&p.initial)
}

fn apply(view: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Append(d) => view.extend_from_slice(d),
        Op::Pwrite(o, d) => {
            let o = *o as usize;
            if view.len() < o + d.len() {
                view.resize(o + d.len(), 0);
            }
            view[o..o + d.len()].copy_from_slice(d);
        }
        Op::Truncate(n) => view.resize(*n as usize, 0),
        Op::Fsync => {}
        Op::Replace { text, .. } => *view = text.clone(),
    }
}

/// What the op in flight at the kill may have left of `state` besides
/// nothing and everything: the kernel sends a pwrite that crosses a page
/// boundary of a page not cached as two requests (more past the largest
/// request), and the daemon may have done only the first. The first piece
/// is written in whole characters, of the new text and of the old: from
/// where the cut falls inside either, the bytes wait in the daemon for the
/// rest (`HeldBytes`), so they are not written at all.
fn torn(state: &[u8], op: &Op) -> Vec<Vec<u8>> {
    const PAGE: u64 = 4096;
    let Op::Pwrite(o, d) = op else {
        return Vec::new();
    };
    let cont = |b: Option<&u8>| b.is_some_and(|&b| cutf8::unit::is_cont(b));
    let mut out = Vec::new();
    let mut cut = (o / PAGE + 1) * PAGE;
    while cut < o + d.len() as u64 {
        let mut k = (cut - o) as usize;
        while k > 0 && (cont(d.get(k)) || cont(state.get(*o as usize + k))) {
            k -= 1;
        }
        let mut s = state.to_vec();
        apply(&mut s, &Op::Pwrite(*o, d[..k].to_vec()));
        out.push(s);
        cut += PAGE;
    }
    out
}

/// The one window docs/behaviour.md leaves: the kernel stops a write on
/// SIGKILL between two pages, so a daemon killed inside its own write to
/// BACKING that extends a file (an append, a new file's text) may leave
/// part of it, cut at a page of BACKING, maybe inside a character. For a
/// corrected file that ends so (strict decoding fails only in its last,
/// truncated character, and its length is a multiple of 4096): the view
/// of its whole characters, for the caller to check as a prefix of what
/// was written.
fn torn_at_page(bytes: &[u8]) -> Option<Vec<u8>> {
    if !cutf8::has_magic(bytes) || !bytes.len().is_multiple_of(4096) {
        return None;
    }
    let data = &bytes[MAGIC.len()..];
    let e = cutf8::decode_strict(data).err()?;
    let at_end = e.offset + e.malformed.len as u64 == data.len() as u64;
    (at_end && matches!(e.problem(), cutf8::Problem::Truncated { .. }))
        .then(|| cutf8::decode_strict(&data[..e.offset as usize]).ok())
        .flatten()
}

/// Checks one file's backing bytes against its plan and progress; returns
/// its view.
fn check_file(back: &Path, p: &Plan, prog: &Progress, what: &str) -> Vec<u8> {
    let path = back.join(&p.name);
    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{what}: {} lost: {e}", p.name));
    // Never half-converted: corrected means strict Corrected UTF-8 here
    // (everything the writer wrote into corrected files is valid text).
    // Of a torn append (below): its whole characters.
    let mut whole = None;
    let view = if cutf8::has_magic(&bytes) {
        let data = &bytes[MAGIC.len()..];
        cutf8::decode_strict(data).unwrap_or_else(|e| {
            whole = (p.kind == Kind::Appends)
                .then(|| torn_at_page(&bytes))
                .flatten();
            if whole.is_none() {
                panic!(
                    "{what}: {} is not strict Corrected UTF-8 after the crash: {e}",
                    p.name
                )
            }
            cutf8::decode_lossless(data)
        })
    } else {
        bytes.clone()
    };
    let mut state = view_of_initial(p);
    let ok = match p.kind {
        Kind::Appends => {
            // A byte prefix of everything started, at least what was synced.
            let mut min = state.len();
            for (i, op) in p.ops[..prog.started].iter().enumerate() {
                apply(&mut state, op);
                if i < prog.synced {
                    min = state.len();
                }
            }
            let whole = whole.as_ref().unwrap_or(&view);
            let ok = whole.len() >= min && state.starts_with(whole);
            if !ok {
                panic!(
                    "{what}: {} is not a prefix of what was appended (at least {min} bytes synced; started {} ops): {}",
                    p.name,
                    prog.started,
                    first_difference(whole, &state[..whole.len().min(state.len())])
                );
            }
            ok
        }
        _ => {
            // One whole state between the last synced and the last started.
            let mut found = prog.synced == 0 && view == state;
            for (i, op) in p.ops[..prog.started].iter().enumerate() {
                if i + 1 == prog.started && i >= prog.synced {
                    found |= torn(&state, op).contains(&view);
                }
                apply(&mut state, op);
                if i + 1 >= prog.synced && view == state {
                    found = true;
                    break;
                }
            }
            found
        }
    };
    assert!(
        ok,
        "{what}: {} ({} bytes, {}) is none of the states its writes could leave (ops {}..={} of {:?}; raw {:02X?}…)",
        p.name,
        view.len(),
        if cutf8::has_magic(&bytes) { "corrected" } else { "raw" },
        prog.synced,
        prog.started,
        p.kind,
        &bytes[..bytes.len().min(24)]
    );
    // A leftover temporary file holds a prefix of the version being written.
    if p.kind == Kind::Renames {
        let tmp = back.join(format!("{}.tmp", p.name));
        if let Ok(t) = fs::read(&tmp) {
            let v = torn_at_page(&t).unwrap_or_else(|| expected_view(&t));
            let Some(Op::Replace { text, .. }) = p.ops.get(prog.started.saturating_sub(1)) else {
                panic!("{what}: {}.tmp exists but no replacement started", p.name);
            };
            assert!(
                text.starts_with(&v),
                "{what}: {}.tmp is not a prefix of the version being written",
                p.name
            );
        }
    }
    view
}

/// Every path under `dir` (depth first), without following symlinks.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

fn seed() -> u64 {
    std::env::var("CUTF8FS_SEED")
        .ok()
        .map(|s| s.trim().parse().expect("CUTF8FS_SEED must be a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

struct SeedOnFailure(u64);

impl Drop for SeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash test failed; replay with CUTF8FS_SEED={}", self.0);
        }
    }
}

#[test]
fn kill_9_during_a_storm_of_writes_and_renames() {
    let seed = seed();
    let _guard = SeedOnFailure(seed);
    eprintln!("crash: seed {seed}");
    let mut dir = tempfile::tempdir().unwrap();
    // CUTF8FS_KEEP keeps the directory, with BACKING as each kill left it
    // (`backing-before-N`), for a look after a failure.
    let keep = std::env::var_os("CUTF8FS_KEEP").is_some();
    dir.disable_cleanup(keep);
    if keep {
        eprintln!("crash: kept in {}", dir.path().display());
    }
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    let daemon_log = dir.path().join("daemon.log");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let all: Vec<Vec<Plan>> = (0..ROUNDS).map(|r| plans(seed, r)).collect();
    for plans in &all {
        for p in plans {
            fs::write(backing.join(&p.name), &p.initial).unwrap();
            if p.kind == (Kind::Shifts { linked: true }) {
                fs::hard_link(
                    backing.join(&p.name),
                    backing.join(format!("{}.link", p.name)),
                )
                .unwrap();
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut d = Mount::with(&[]).on(&backing, &mnt, &daemon_log);
    let mut earlier: Vec<(String, Vec<u8>)> = Vec::new();
    for round in 0..ROUNDS {
        let what = format!("seed {seed} round {round}");
        let wlog = dir.path().join(format!("writer-{round}.log"));
        let mut writer = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash::crash_writer_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "CUTF8FS_CRASH_WRITER",
                format!("{}\t{}\t{seed}\t{round}", mnt.display(), wlog.display()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Let the storm run (once the writer has made its plans), then kill
        // the daemon and, before the mount is detached, the writer (so it
        // cannot write into the bare directory).
        crate::support::mount::wait_for(60.0, || {
            fs::read_to_string(&wlog).is_ok_and(|l| l.contains("ready"))
                || writer.try_wait().ok().flatten().is_some()
        });
        // On a loaded machine the writer may start slowly: kill only once it
        // is under way (some operations started), at a random moment after.
        crate::support::mount::wait_for(60.0, || {
            fs::read_to_string(&wlog).is_ok_and(|l| l.matches(" start").count() > 25)
                || writer.try_wait().ok().flatten().is_some()
        });
        // A random moment of the storm: the kill's timing is what varies.
        std::thread::sleep(Duration::from_millis(rng.gen_range(100..1000)));
        let early = writer.try_wait().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(d.pid() as i32, libc::SIGKILL) };
        let daemon = d.pid();
        crate::support::mount::wait_until("the killed daemon's end", 30.0, || {
            crate::support::mount::ended(daemon)
        });
        let _ = writer.kill();
        let _ = writer.wait();
        d.kill9();
        let log = fs::read_to_string(&wlog).unwrap_or_default();
        let (progress, errors) = read_log(&log);
        if let Some(st) = early.filter(|st| !st.success()) {
            panic!(
                "{what}: the writer ended before the kill ({st}): {errors:?}\nlast log lines:\n{}",
                log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
            );
        }
        // Remount the same BACKING: the journal is replayed. (What it holds
        // now is printed if the test fails.)
        let jdir = backing.join(".cutf8fs-journal");
        if jdir.exists() {
            let mut seen = Vec::new();
            for e in walk(&jdir) {
                let m = fs::symlink_metadata(&e).unwrap();
                seen.push(format!(
                    "{} ({} bytes, {} links, mode {:o})",
                    e.strip_prefix(&backing).unwrap().display(),
                    m.len(),
                    m.nlink(),
                    m.mode()
                ));
            }
            eprintln!("{what}: journal before remount: {seen:?}");
        }
        if keep {
            let copy = dir.path().join(format!("backing-before-{round}"));
            let st = Command::new("cp")
                .arg("-a")
                .arg(&backing)
                .arg(&copy)
                .status()
                .unwrap();
            assert!(st.success(), "cp -a {}", backing.display());
        }
        d.remount();
        let left = crate::support::write::journal_entries(&backing);
        assert!(
            left.is_empty(),
            "{what}: journal not empty after remount: {left:?}"
        );
        let owners: Vec<_> = fs::read_dir(&jdir)
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(
            !owners
                .iter()
                .any(|n: &std::ffi::OsString| n.to_string_lossy().ends_with(".owner")),
            "{what}: the killed daemon's owner file is left: {owners:?}"
        );
        assert!(
            !fs::read_dir(&mnt)
                .unwrap()
                .any(|e| e.unwrap().file_name() == ".cutf8fs-journal"),
            "{what}: the journal directory shows in the mount"
        );
        let mut ops_seen = 0;
        for p in &all[round as usize] {
            let prog = progress
                .get(&p.name)
                .map_or(Progress::default(), |g| Progress {
                    started: g.started,
                    synced: g.synced,
                });
            ops_seen += prog.started;
            let view = check_file(&backing, p, &prog, &what);
            let through = fs::read(mnt.join(&p.name)).unwrap_or_else(|e| {
                panic!(
                    "{what}: {} cannot be read through the new mount: {e}; mount lists {:?}",
                    p.name,
                    fs::read_dir(&mnt).map(|d| d.count())
                )
            });
            assert!(
                through == view,
                "{what}: {} reads differently through the new mount: {}",
                p.name,
                first_difference(&through, &view)
            );
            if p.kind == (Kind::Shifts { linked: true }) {
                let a = fs::metadata(backing.join(&p.name)).unwrap();
                let b = fs::metadata(backing.join(format!("{}.link", p.name))).unwrap();
                assert_eq!(a.ino(), b.ino(), "{what}: hard link split");
                assert_eq!(a.nlink(), 2, "{what}: {} has {} links", p.name, a.nlink());
            }
            earlier.push((p.name.clone(), view));
        }
        assert!(
            ops_seen > 20,
            "{what}: the writer did only {ops_seen} operations"
        );
        eprintln!("crash: round {round}: {ops_seen} operations started before the kill");
        // Files of earlier rounds did not change.
        for (name, view) in &earlier {
            let now = expected_view(&fs::read(backing.join(name)).unwrap());
            assert!(now == *view, "{what}: {name} changed after its round");
        }
    }
    d.unmount();
}

/// The checker itself: an append torn inside a character is accepted only
/// where the kernel can tear the daemon's write, at a page of BACKING, and
/// a pwrite cut only at a page of the view, in whole characters.
#[test]
fn the_checker_accepts_a_torn_write_only_where_the_kernel_tears() {
    use cutf8::unit::is_cont;
    let dir = tempfile::tempdir().unwrap();
    let plans = plans(7, 0);
    let check = |p: &Plan, bytes: &[u8], prog: &Progress| {
        fs::write(dir.path().join(&p.name), bytes).unwrap();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_file(dir.path(), p, prog, "checker")
        }))
        .is_ok()
    };
    // An append file after all its ops, cut inside a character.
    let p = plans.iter().find(|p| p.kind == Kind::Appends).unwrap();
    let mut state = view_of_initial(p);
    p.ops.iter().for_each(|op| apply(&mut state, op));
    let all = corrected_file(std::str::from_utf8(&state).unwrap());
    let inside = |from: usize| {
        (from..all.len())
            .find(|&n| n >= 8 && is_cont(all[n]) && is_cont(all[n - 1]))
            .unwrap()
    };
    let prog = Progress {
        started: p.ops.len(),
        synced: 0,
    };
    assert!(check(p, &all, &prog));
    let at_page = (1..).map(|k| k * 4096).find(|&n| is_cont(all[n])).unwrap();
    assert!(check(p, &all[..at_page], &prog), "torn at a page");
    assert!(!check(p, &all[..inside(5000)], &prog), "torn elsewhere");
    // A shifting file: its first pwrite across a page of the view, cut
    // there, in whole characters (of the new text and the old), or not.
    let p = plans
        .iter()
        .find(|p| p.kind == Kind::Shifts { linked: false })
        .unwrap();
    let mut before = view_of_initial(p);
    let (i, o, d) = p
        .ops
        .iter()
        .enumerate()
        .find_map(|(i, op)| match op {
            Op::Pwrite(o, d) if o / 4096 != (o + d.len() as u64 - 1) / 4096 => Some((i, *o, d)),
            _ => {
                apply(&mut before, op);
                None
            }
        })
        .unwrap();
    let prog = Progress {
        started: i + 1,
        synced: 0,
    };
    let cut_at = |k: usize| {
        let mut v = before.clone();
        apply(&mut v, &Op::Pwrite(o, d[..k].to_vec()));
        corrected_file(std::str::from_utf8(&v).unwrap())
    };
    let page = ((o / 4096 + 1) * 4096 - o) as usize;
    let starts = |k: usize| !is_cont(d[k]) && !is_cont(before[o as usize + k]);
    let first = (0..=page).rev().find(|&k| starts(k)).unwrap();
    assert!(first > 0, "a plan whose first piece is not empty");
    assert!(check(p, &cut_at(first), &prog), "first piece");
    assert!(check(p, &cut_at(d.len()), &prog), "whole");
    let elsewhere = (1..d.len()).find(|&k| k != first && starts(k)).unwrap();
    assert!(!check(p, &cut_at(elsewhere), &prog), "cut elsewhere");
}
