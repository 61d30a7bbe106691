//! `cutf8 migrate`: convert whole trees in place to Corrected UTF-8 and
//! back (SPEC §4), safely, in parallel, resumably.
//!
//! The flow of one run:
//!
//! 1. [`walk`] lists the regular files of the named trees (this shard's
//!    part of them), reporting what it skips on sight and cleaning up after
//!    a killed run;
//! 2. `--jobs` worker threads take files from that list; [`file`] converts
//!    each one all-or-nothing (temp file + verify + rename, or a journal for
//!    hard links), using [`transcode`] for the bytes;
//! 3. the main thread collects outcomes into the `--report`, the progress
//!    bar and the [`report::Summary`].
//!
//! Called by `src/bin/cutf8.rs` through [`MigrateArgs`] and [`run_cli`];
//! stands on [`cutf8`] only.

mod file;
mod journal;
pub mod report;
mod sys;
mod transcode;
mod walk;

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};

pub use report::{Outcome, Reason, Summary};
pub use transcode::Direction;
pub use walk::Shard;

/// Name prefix of migrate's temporary files (`.cutf8-tmp.<key>.<pid>-<n>`).
pub const TMP_PREFIX: &str = ".cutf8-tmp.";
/// Name prefix of migrate's journals (`.cutf8-journal.<key>`).
pub const JOURNAL_PREFIX: &str = ".cutf8-journal.";

/// Which encoding `--to` converts into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Corrected UTF-8 with the magic number.
    Cutf8,
    /// Standard UTF-8, magic number dropped.
    Utf8,
}

/// Convert text files in place to Corrected UTF-8 (or back with --to utf8).
///
/// Walks each PATH (never following symlinks, never leaving it, by default
/// never crossing into another filesystem) and replaces every text file by
/// its verified conversion, keeping mode, owner, times, xattrs and hard
/// links. Everything else is left byte for byte alone and reported with the
/// reason, except the mount's own files (`.cutf8fs-*`), which are neither
/// entered nor reported. Re-running is safe and finishes what a killed run
/// left.
///
/// Exit status: 0 when every file was converted or skipped, 1 when some
/// failed, 2 on a usage error.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Skip reasons (report codes): binary, contains-nul, c1-control, \
invalid-utf8, already-corrected, empty, special-file, symlink, permission-denied, \
excluded, other-filesystem; with --to utf8: not-corrected, not-convertible.\n\n\
Split a large archive over N machines or jobs: run `cutf8 migrate --shard K/N PATH` \
for K = 1..N with the same PATH (see docs/migrate.md)."
)]
pub struct MigrateArgs {
    /// Files and directories to convert. Names beginning with .cutf8fs-
    /// (the cutf8fs mount's own files, such as its journal) are never
    /// entered, converted or reported, at any level.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Target encoding: cutf8 (default) or utf8 (convert back).
    #[arg(long, value_enum, default_value = "cutf8", value_name = "ENCODING")]
    pub to: Target,

    /// Say what would change, change nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,

    /// Convert N files at a time [default: number of CPUs].
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,

    /// Write one JSON object per path to FILE (JSON lines).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Leave paths matching GLOB alone (matched against the path below the
    /// named PATH and against the file name; repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Convert inside version-control metadata (.git, .hg, .svn) too.
    ///
    /// By default those directories are not entered (reported as excluded):
    /// git, hg and svn read them outside any mount, and a converted .git
    /// stops working.
    #[arg(long)]
    pub include_vcs: bool,

    /// Take only the K-th of N deterministic slices of the files (1 <= K <= N).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,

    /// Do not cross into other filesystems (the default).
    #[arg(long, overrides_with = "cross_filesystems")]
    pub one_file_system: bool,

    /// Descend into directories on other filesystems too.
    #[arg(long, overrides_with = "one_file_system")]
    pub cross_filesystems: bool,

    /// Print one line per path (what was done or why not).
    #[arg(short, long)]
    pub verbose: bool,

    /// Print no summary.
    #[arg(short, long)]
    pub quiet: bool,

    /// Never show a progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

/// A run's settings, validated.
pub struct Options {
    pub paths: Vec<PathBuf>,
    pub direction: Direction,
    pub dry_run: bool,
    pub jobs: usize,
    pub exclude: GlobSet,
    pub shard: Shard,
    pub one_file_system: bool,
}

impl Options {
    /// Validate `args`; `Err` is a usage error.
    pub fn from_args(args: &MigrateArgs) -> Result<Options, String> {
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
            Some(n) => n as usize,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Ok(Options {
            paths: args.paths.clone(),
            direction: match args.to {
                Target::Cutf8 => Direction::ToCutf8,
                Target::Utf8 => Direction::ToUtf8,
            },
            dry_run: args.dry_run,
            jobs,
            exclude,
            shard: args.shard.unwrap_or(Shard::ALL),
            one_file_system: !args.cross_filesystems,
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
    /// Called for every reported path, in the order outcomes arrive.
    fn event(&mut self, e: &Event);
    /// Called after each file a worker finished (its size).
    fn advance(&mut self, _bytes: u64) {}
}

/// Run migrate; every outcome goes to `observer`. Returns the summary.
pub fn run(opts: &Options, observer: &mut dyn Observer) -> Summary {
    let mut summary = Summary::default();
    let mut emit = |path: &Path, outcome: Outcome, size: Option<u64>| {
        summary.add(&outcome, true);
        observer.event(&Event {
            path,
            outcome: &outcome,
            size,
            link_of: None,
        });
    };
    let walk_opts = walk::WalkOptions {
        exclude: &opts.exclude,
        shard: opts.shard,
        one_file_system: opts.one_file_system,
        dry_run: opts.dry_run,
    };
    let mut walker = walk::Walker::new(walk_opts, &mut emit);
    for p in &opts.paths {
        walker.root(p);
    }
    let files = std::mem::take(&mut walker.files);
    drop(walker);
    observer.start(files.len() as u64, files.iter().map(|f| f.size).sum());

    let job = file::Job {
        direction: opts.direction,
        dry_run: opts.dry_run,
    };
    let next = AtomicUsize::new(0);
    let batch_files = batch_files(opts.jobs);
    let (tx, rx) = mpsc::channel::<(usize, Outcome)>();
    let (close_tx, close_rx) = mpsc::sync_channel::<File>(CLOSE_QUEUE);
    let close_rx = std::sync::Mutex::new(close_rx);
    let mut sync_errors = Vec::new();
    let mut written = Vec::new();
    std::thread::scope(|s| {
        for _ in 0..CLOSERS {
            let close_rx = &close_rx;
            s.spawn(move || loop {
                let next = close_rx.lock().map(|rx| rx.recv());
                match next {
                    Ok(Ok(file)) => drop(file),
                    _ => break,
                }
            });
        }
        let mut workers = Vec::new();
        for _ in 0..opts.jobs.clamp(1, files.len().max(1)) {
            let tx = tx.clone();
            let close_tx = close_tx.clone();
            let (files, next, job) = (&files, &next, &job);
            workers.push(s.spawn(move || -> io::Result<()> {
                let mut bufs = transcode::Buffers::default();
                let mut batch = file::Batch::new(close_tx);
                let mut send = |i: usize, outcome: Outcome| {
                    let _ = tx.send((i, outcome));
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = files.get(i) else { break };
                    match file::process(job, entry, &mut bufs) {
                        file::Step::Done(outcome) => send(i, outcome),
                        file::Step::Pending(p) => {
                            batch.push(i, *p);
                            if batch.is_full(batch_files) {
                                batch.flush(&mut send);
                            }
                        }
                    }
                }
                batch.flush(&mut send);
                batch.finish()
            }));
        }
        drop(tx);
        drop(close_tx);
        for (i, outcome) in rx {
            let entry = &files[i];
            if matches!(outcome, Outcome::Converted { .. }) {
                written.push(i);
            }
            summary.add(&outcome, true);
            observer.event(&Event {
                path: &entry.path,
                outcome: &outcome,
                size: Some(entry.size),
                link_of: None,
            });
            for link in &entry.links {
                summary.add(&outcome, false);
                observer.event(&Event {
                    path: link,
                    outcome: &outcome,
                    size: Some(entry.size),
                    link_of: Some(&entry.path),
                });
            }
            observer.advance(entry.size);
        }
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => sync_errors.push(e.to_string()),
                Err(_) => sync_errors.push("a worker panicked".into()),
            }
        }
    });
    if opts.direction == transcode::Direction::ToCutf8 && !opts.dry_run {
        record_in_index_db(opts, &files, &written);
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

/// Records the files just converted in each tree root's index database
/// (`crate::indexdb`), so that the first mount of that root is warm.
fn record_in_index_db(opts: &Options, files: &[walk::Entry], written: &[usize]) {
    for root in &opts.paths {
        let under: Vec<&Path> = written
            .iter()
            .map(|&i| files[i].path.as_path())
            .filter(|p| p.starts_with(root))
            .collect();
        crate::indexdb::record_written(root, &under);
    }
}

/// Threads that close replaced originals (see `file::Batch`).
const CLOSERS: usize = 4;
/// Replaced originals waiting to be closed, at most.
const CLOSE_QUEUE: usize = 256;

/// How many pending files a worker may hold (each keeps its directory and
/// the original open): at most 64, and within the open-file limit, which is
/// raised to its hard maximum first.
fn batch_files(jobs: usize) -> usize {
    // SAFETY: an all-zero rlimit is a valid value; getrlimit/setrlimit
    // only read and write it.
    let soft = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max.min(1 << 20),
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = want.rlim_cur;
            }
        }
        r.rlim_cur
    };
    let spare = soft.saturating_sub(64 + CLOSE_QUEUE as u64 + CLOSERS as u64);
    let per_worker = (spare / 2) as usize / jobs.max(1);
    per_worker.clamp(1, 64)
}

/// The command line's observer: report file, verbose lines, error
/// messages, progress bar.
struct Cli {
    report: Option<BufWriter<File>>,
    report_error: Option<io::Error>,
    verbose: bool,
    bar: Option<indicatif::ProgressBar>,
    files_done: u64,
    files_total: u64,
}

impl Cli {
    fn say(&self, line: &str, to_stderr: bool) {
        let print = || {
            if to_stderr {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
}

impl Observer for Cli {
    fn start(&mut self, files: u64, bytes: u64) {
        self.files_total = files;
        if let Some(bar) = &self.bar {
            bar.set_length(bytes);
            bar.set_message(format!("0/{files} files"));
            // The walk that counted the work is over: rate, ETA and
            // elapsed time count from the first conversion, not from the
            // bar's creation (which made the rate read low).
            bar.reset_elapsed();
            bar.reset_eta();
        }
    }

    fn event(&mut self, e: &Event) {
        let shown = report::display_path(e.path);
        match e.outcome {
            Outcome::Failed(msg) => self.say(&format!("cutf8: migrate: {shown}: {msg}"), true),
            o if self.verbose => {
                let detail = match o {
                    Outcome::Skipped(r) => format!(": {r}"),
                    Outcome::Converted { before, after }
                    | Outcome::WouldConvert { before, after } => {
                        format!(" ({} -> {})", report::size(*before), report::size(*after))
                    }
                    _ => String::new(),
                };
                self.say(&format!("{} {shown}{detail}", o.action()), false)
            }
            _ => {}
        }
        if let Some(w) = &mut self.report {
            let link = e.link_of.map(report::display_path);
            let line = report::json_line(e.path, e.outcome, e.size, link.as_deref());
            if let Err(err) = writeln!(w, "{line}") {
                self.report_error.get_or_insert(err);
            }
        }
    }

    fn advance(&mut self, bytes: u64) {
        self.files_done += 1;
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
            bar.set_message(format!("{}/{} files", self.files_done, self.files_total));
        }
    }
}

/// Check the named PATHs before touching anything: each must exist, and
/// none may be on a cutf8fs mount (its files already read as UTF-8 there
/// and are written back as Corrected UTF-8 by the mount: migrating through
/// it would fail on every file). The first problem, with its remedy.
fn preflight(paths: &[PathBuf]) -> Result<(), String> {
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
                mnt.display()
            ));
        }
    }
    Ok(())
}

/// On SIGINT (Ctrl-C): say that nothing is half-converted and how to
/// finish, then exit 130. Only async-signal-safe calls in the handler.
fn say_how_to_resume_on_ctrl_c() {
    extern "C" fn on_sigint(_: libc::c_int) {
        const MSG: &[u8] = b"\ncutf8: migrate: interrupted. Every file is either converted or \
unchanged (none is half-converted); run the same command again to finish: it cleans up \
and resumes.\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG is static.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(130);
        }
    }
    // SAFETY: a zeroed sigaction with a plain handler and an empty mask is
    // valid; the handler only makes async-signal-safe calls.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// `cutf8 migrate`: run with `args`, print, return the exit status.
pub fn run_cli(args: &MigrateArgs) -> i32 {
    let opts = match Options::from_args(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cutf8: migrate: {e}");
            return 2;
        }
    };
    if let Err(e) = preflight(&opts.paths) {
        eprintln!("cutf8: migrate: {e}");
        return 2;
    }
    let report = match &args.report {
        None => None,
        Some(p) => match File::create(p) {
            Ok(f) => Some(BufWriter::new(f)),
            Err(e) => {
                eprintln!(
                    "cutf8: migrate: cannot create the report {}: {e}",
                    report::display_path(p)
                );
                return 2;
            }
        },
    };
    let bar = (!args.no_progress && !args.quiet && io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
            )
            .expect("valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    });
    let mut cli = Cli {
        report,
        report_error: None,
        verbose: args.verbose || args.dry_run,
        bar,
        files_done: 0,
        files_total: 0,
    };
    if !opts.dry_run {
        say_how_to_resume_on_ctrl_c();
    }
    let started = Instant::now();
    let summary = run(&opts, &mut cli);
    if let Some(bar) = cli.bar.take() {
        bar.finish_and_clear();
    }
    let mut status = if summary.failed > 0 { 1 } else { 0 };
    if let Some(mut w) = cli.report.take() {
        if let Err(e) = w.flush().and_then(|_| w.get_ref().sync_all()) {
            cli.report_error.get_or_insert(e);
        }
    }
    if let Some(e) = cli.report_error {
        eprintln!("cutf8: migrate: cannot write the report: {e}");
        status = 1;
    }
    if !args.quiet {
        let mut out = io::stdout().lock();
        let _ = summary.write(&mut out, started.elapsed(), opts.dry_run);
    }
    status
}
