//! `cutf8 migrate`: convert whole trees in place to Corrected UTF-8 and
//! back (docs/behaviour.md, "The converter"), safely, in parallel, resumably.
//!
//! The flow of one run:
//!
//! 1. `walk` lists the regular files of the named trees (this shard's
//!    part of them), reporting what it skips on sight and cleaning up after
//!    a killed run; it records every directory it enters in `dirs`, through
//!    which everything is reached again by descriptor, never by path
//!    (`crate::trust`: run as root over a tree users write, migrate lends
//!    no rights);
//! 2. `--jobs` worker threads take files from that list; `file` converts
//!    each one all-or-nothing (temp file + verify + rename, or a journal for
//!    hard links), using `transcode` for the bytes;
//! 3. the main thread collects outcomes into the [`report::Summary`] and
//!    hands each to the caller's [`Observer`].
//!
//! The library knows no command line and no terminal: the `cutf8` binary
//! (`src/bin/cutf8/migrate.rs`) parses arguments into [`Settings`], checks
//! them with [`preflight`], and shows progress, the `--report` file and
//! the summary through its [`Observer`]. Stands on [`cutf8`],
//! `crate::sys` and `crate::trust`.

mod file;
pub mod report;
mod undo;

mod transcode;
mod walk;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use globset::{Glob, GlobSet, GlobSetBuilder};

pub use crate::walk::Shard;
pub use report::{Outcome, Reason, Summary};
pub use transcode::{leaves_script_raw, Direction};

/// Name prefix of migrate's temporary files (`.cutf8-tmp.<key>.<pid>-<n>`).
pub const TMP_PREFIX: &str = ".cutf8-tmp.";
/// Name prefix of migrate's journals (`.cutf8-journal.<key>`).
pub const JOURNAL_PREFIX: &str = ".cutf8-journal.";

/// What a caller asks of a run, before validation (the `cutf8` binary
/// fills it from its command line).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Files and directories to convert.
    pub paths: Vec<PathBuf>,
    /// Which way to convert (encode: UTF-8 → Corrected UTF-8).
    pub direction: Direction,
    /// Say what would change, change nothing.
    pub dry_run: bool,
    /// Files converted at a time (None: one per CPU).
    pub jobs: Option<usize>,
    /// Report each path as its file is done, not sorted by path.
    pub completion_order: bool,
    /// Globs of paths to leave alone.
    pub exclude: Vec<String>,
    /// Enter .git, .hg and .svn too.
    pub include_vcs: bool,
    /// Convert scripts (`#!` and an interpreter) too.
    pub include_scripts: bool,
    /// Only this slice of the files (None: all).
    pub shard: Option<Shard>,
    /// Descend into directories on other filesystems too.
    pub cross_filesystems: bool,
}

/// A run's settings, validated.
pub struct Options {
    pub paths: Vec<PathBuf>,
    pub direction: Direction,
    pub dry_run: bool,
    pub include_scripts: bool,
    pub jobs: usize,
    /// Report in completion order (else sorted by path: [`run`]).
    pub completion_order: bool,
    pub exclude: GlobSet,
    pub shard: Shard,
    pub one_file_system: bool,
    /// Files the run writes itself, by device and inode (the `--report`
    /// file): skipped as `own-report` if the walk finds them.
    pub own: Vec<(u64, u64)>,
}

impl Options {
    /// Validate `args`; `Err` is a usage error.
    pub fn new(args: &Settings) -> Result<Options, String> {
        let mut b = GlobSetBuilder::new();
        if !args.include_vcs {
            for vcs in crate::check::VCS_DIRS {
                b.add(Glob::new(vcs).map_err(|e| e.to_string())?);
            }
        }
        for g in &args.exclude {
            b.add(Glob::new(g).map_err(|e| format!("--exclude {g:?}: {e}"))?);
        }
        let exclude = b.build().map_err(|e| e.to_string())?;
        let jobs = match args.jobs {
            Some(n) => n.max(1),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Ok(Options {
            paths: args.paths.clone(),
            direction: args.direction,
            dry_run: args.dry_run,
            include_scripts: args.include_scripts,
            jobs,
            completion_order: args.completion_order,
            exclude,
            shard: args.shard.unwrap_or(Shard::ALL),
            one_file_system: !args.cross_filesystems,
            own: Vec::new(),
        })
    }
}

/// One reported path.
pub struct Event<'a> {
    pub path: &'a Path,
    pub outcome: &'a Outcome,
    /// The file's size, where the outcome does not carry it.
    pub size: Option<u64>,
    /// For a further name of a multiply linked file: its first name.
    pub link_of: Option<&'a Path>,
}

/// Progress as the workers go: files and bytes done of the totals.
pub trait Observer {
    /// Called once the walk is done.
    fn start(&mut self, _files: u64, _bytes: u64) {}
    /// Called for every reported path: sorted by path (`Path`'s order,
    /// component by component: each directory's entries by name, before
    /// the names that follow the directory's), a further name of a
    /// multiply linked file right after its first; with
    /// [`Options::completion_order`], in the order outcomes arrive.
    fn event(&mut self, e: &Event);
    /// Called after each file a worker finished (its size).
    fn advance(&mut self, _bytes: u64) {}
}

/// Run migrate; every outcome goes to `observer`, sorted by path unless
/// [`Options::completion_order`] (workers finish files in any order: a
/// file's outcome waits until those before it are reported). Returns the
/// summary.
pub fn run(opts: &Options, observer: &mut dyn Observer) -> Summary {
    let mut summary = Summary::default();
    let ordered = !opts.completion_order;
    // What the walk reports on sight, kept to merge in path order.
    let mut seen: Vec<(PathBuf, Outcome, Option<u64>)> = Vec::new();
    let mut emit = |path: &Path, outcome: Outcome, size: Option<u64>| {
        summary.add(&outcome, true);
        if ordered {
            seen.push((path.to_path_buf(), outcome, size));
            return;
        }
        observer.event(&Event {
            path,
            outcome: &outcome,
            size,
            link_of: None,
        });
    };
    let walk_opts = crate::walk::WalkOptions {
        exclude: &opts.exclude,
        shard: opts.shard,
        one_file_system: opts.one_file_system,
        skip_dirs: &[],
        follow_named: false,
    };
    let walk::Found {
        mut files,
        dirs,
        roots,
    } = walk::walk(&opts.paths, walk_opts, opts.dry_run, &mut emit);
    if ordered {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        seen.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let mut seen = seen.into_iter().peekable();
    let mut pending = std::collections::BTreeMap::new();
    let mut next_out = 0usize;
    observer.start(files.len() as u64, files.iter().map(|f| f.size).sum());

    let job = file::Job {
        direction: opts.direction,
        dry_run: opts.dry_run,
        include_scripts: opts.include_scripts,
        own: opts.own.clone(),
    };
    let next = AtomicUsize::new(0);
    let batch_files = batch_files(opts.jobs);
    let (tx, rx) = mpsc::channel::<(usize, Outcome)>();
    let (close_tx, close_rx) = mpsc::sync_channel::<File>(CLOSE_QUEUE);
    let close_rx = parking_lot::Mutex::new(close_rx);
    let mut sync_errors = Vec::new();
    let mut written = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..CLOSERS {
            let close_rx = &close_rx;
            s.spawn(move || loop {
                let next = close_rx.lock().recv();
                match next {
                    Ok(file) => drop(file),
                    Err(_) => break,
                }
            });
        }
        let mut workers = Vec::new();
        for _ in 0..opts.jobs.clamp(1, files.len().max(1)) {
            let tx = tx.clone();
            let close_tx = close_tx.clone();
            let (files, next, job, dirs) = (&files, &next, &job, &dirs);
            workers.push(s.spawn(move || -> io::Result<()> {
                let mut bufs = transcode::Buffers::default();
                let mut batch = file::Batch::new(close_tx);
                let mut send = |i: usize, outcome: Outcome| {
                    let _ = tx.send((i, outcome));
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = files.get(i) else { break };
                    match file::process(job, dirs, entry, &mut bufs) {
                        file::Step::Done(outcome) => send(i, outcome),
                        file::Step::Pending(p) => {
                            batch.push(i, *p);
                            if batch.is_full(batch_files) {
                                batch.flush(dirs, &mut send);
                            }
                        }
                    }
                }
                batch.flush(dirs, &mut send);
                batch.finish()
            }));
        }
        drop(tx);
        drop(close_tx);
        for (i, outcome) in rx {
            let entry = &files[i];
            if let Outcome::Converted { after, .. } = outcome {
                if after >= crate::indexdb::MIGRATE_MIN {
                    written.push(i);
                }
            }
            summary.add(&outcome, true);
            for _ in &entry.links {
                summary.add(&outcome, false);
            }
            observer.advance(entry.size);
            if !ordered {
                report_file(observer, entry, &outcome);
                continue;
            }
            pending.insert(i, outcome);
            while let Some(outcome) = pending.remove(&next_out) {
                let entry = &files[next_out];
                while let Some((p, o, size)) = seen.next_if(|s| s.0 < entry.path) {
                    report_seen(observer, &p, &o, size);
                }
                report_file(observer, entry, &outcome);
                next_out += 1;
            }
        }
        for (p, o, size) in seen.by_ref() {
            report_seen(observer, &p, &o, size);
        }
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => sync_errors.push(e.to_string()),
                Err(_) => sync_errors.push("a worker panicked".into()),
            }
        }
    });
    if opts.direction == transcode::Direction::Encode && !opts.dry_run {
        record_in_index_db(&dirs, &roots, &files, &written);
    }
    if opts.direction == transcode::Direction::Decode
        && !opts.dry_run
        && opts.shard == Shard::ALL
        && summary.failed == 0
        // Files left corrected still have a use for it.
        && !summary.skipped.contains_key("not-convertible")
    {
        summary.index_db = remove_index_dbs(&opts.paths);
    }
    for e in sync_errors {
        let outcome = Outcome::Failed(format!("cannot sync the filesystem after renaming: {e}"));
        summary.add(&outcome, true);
        observer.event(&Event {
            path: Path::new("."),
            outcome: &outcome,
            size: None,
            link_of: None,
        });
    }
    summary
}

/// Hands what the walk reported on sight to `observer`.
fn report_seen(observer: &mut dyn Observer, path: &Path, outcome: &Outcome, size: Option<u64>) {
    observer.event(&Event {
        path,
        outcome,
        size,
        link_of: None,
    });
}

/// Hands a file's outcome to `observer`, for its first name and then for
/// each further name.
fn report_file(observer: &mut dyn Observer, entry: &walk::Entry, outcome: &Outcome) {
    observer.event(&Event {
        path: &entry.path,
        outcome,
        size: Some(entry.size),
        link_of: None,
    });
    for link in &entry.links {
        observer.event(&Event {
            path: &link.path,
            outcome,
            size: Some(entry.size),
            link_of: Some(&entry.path),
        });
    }
}

/// Records the files just converted in each tree root's index database
/// (`crate::indexdb`), so that the first mount of that root is warm. Each
/// file is reached again through its directory's descriptor, never by its
/// path; a root named as a file records only into a database that exists.
fn record_in_index_db(
    dirs: &crate::walk::Dirs,
    roots: &[walk::Root],
    files: &[walk::Entry],
    written: &[usize],
) {
    let mut done = std::collections::HashSet::new();
    for root in roots {
        if !done.insert(root.dir) {
            continue;
        }
        let mut under = written
            .iter()
            .map(|&i| &files[i])
            .filter(|e| e.root == root.dir)
            .filter_map(|e| {
                use std::os::fd::AsFd;
                let dir = dirs.open(e.dir).ok()?;
                let reached = crate::trust::reach(dir.as_fd(), &e.name).ok()?;
                crate::trust::open_reached(dir.as_fd(), &e.name, &reached, libc::O_RDONLY, true)
                    .ok()
            })
            .peekable();
        if under.peek().is_none() {
            continue;
        }
        let Ok(rootf) = dirs.open(root.dir) else {
            continue;
        };
        crate::indexdb::record_written(
            std::os::fd::AsFd::as_fd(&*rootf),
            !root.named_dir,
            &mut under,
        );
    }
}

/// After `--to utf8` of whole trees with nothing left corrected: removes
/// each tree's index database (`crate::indexdb::remove_unused`, which
/// leaves one that is not this user's own or that a mount uses); what was
/// done, one line each.
fn remove_index_dbs(roots: &[PathBuf]) -> Vec<String> {
    let mut said = Vec::new();
    for root in roots {
        if !std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        match crate::indexdb::remove_unused(root) {
            crate::indexdb::Removal::None => {}
            crate::indexdb::Removal::Removed(p) => said.push(format!(
                "removed {} (the tree holds no corrected file to index)",
                report::display_path(&p)
            )),
            crate::indexdb::Removal::Kept(p, why) => {
                said.push(format!("{} left in place: {why}", report::display_path(&p)))
            }
        }
    }
    said
}

/// Threads that close replaced originals (see `file::Batch`).
const CLOSERS: usize = 4;
/// Replaced originals waiting to be closed, at most.
const CLOSE_QUEUE: usize = 256;

/// How many pending files a worker may hold (each keeps its temporary
/// file, the original and possibly its directory open): at most 64, and
/// within the open-file limit, which is raised to its hard maximum first.
fn batch_files(jobs: usize) -> usize {
    let soft = crate::sys::process::raise_fd_limit(1 << 20);
    let reserved = 64 + crate::walk::CACHE as u64 + CLOSE_QUEUE as u64 + CLOSERS as u64;
    let spare = soft.saturating_sub(reserved);
    let per_worker = (spare / 3) as usize / jobs.max(1);
    per_worker.clamp(1, 64)
}

/// Check the named PATHs before touching anything: each must exist, and
/// none may be on a cutf8fs mount (its files already read as UTF-8 there
/// and are written back as Corrected UTF-8 by the mount: migrating through
/// it would fail on every file). The first problem, with its remedy.
pub fn preflight(paths: &[PathBuf]) -> Result<(), String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for p in paths {
        let shown = report::display_path(p);
        if let Err(e) = std::fs::symlink_metadata(p) {
            return Err(format!(
                "{shown}: {}; nothing was converted",
                crate::convert::io_message(&e)
            ));
        }
        let Ok(real) = std::fs::canonicalize(p) else {
            continue;
        };
        if let Some((mnt, source)) = crate::mountinfo::cutf8fs_mount_of(&mounts, &real) {
            return Err(format!(
                "{shown} is on a cutf8fs mount ({}), where files already read as UTF-8 \
                 and are stored as Corrected UTF-8 by the mount; nothing was converted. \
                 Run migrate on the mount's BACKING directory instead ({source}), or \
                 copy corrected files into BACKING directly.",
                report::display_path(&mnt)
            ));
        }
    }
    Ok(())
}
