//! `cutf8 migrate`: its arguments, and what the terminal shows of a run
//! (verbose lines, errors, the progress bar, the summary) and the
//! `--report` file, as the library's `migrate::Observer`. The conversion
//! itself is `cutf8fs::migrate`.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cutf8fs::migrate::{
    self, report, Direction, Event, Observer, Options, Outcome, Settings, Shard,
};

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
/// left. A file that is not UTF-8 is left as it is, its line saying what
/// it looks like and the command that fixes it (as encode and check say);
/// files that begin with a UTF-8 byte order mark convert, and a note
/// after the summary names them (the mark stays as U+FEFF).
///
/// Exit status: 0 when every file was converted or skipped, 1 when some
/// failed, 2 on a usage error.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Skip reasons (report codes): binary, script, contains-nul, c1-control, \
invalid-utf8, already-corrected, empty, special-file, symlink, linked-outside, \
permission-denied, excluded, other-filesystem, own-report; with --to utf8: not-corrected, not-convertible.\n\n\
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

    /// Print each path's line (-v, --report, and the git warning) as its
    /// file is done, in the order the --jobs workers finish; by default
    /// lines are sorted by path, the same every run.
    #[arg(long)]
    pub completion_order: bool,

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

    /// Convert scripts too.
    ///
    /// By default a file whose first line is #! and an interpreter (as the
    /// kernel reads it; #![ opens Rust source and is not one) is left raw
    /// and reported as a script: run from the tree outside the mount, a
    /// converted script fails with "Exec format error". The cutf8fs mount
    /// keeps new scripts raw by the same rule.
    #[arg(long)]
    pub include_scripts: bool,

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

/// The command line's observer: report file, verbose lines, error
/// messages, progress bar.
struct Cli {
    report: Option<BufWriter<File>>,
    report_error: Option<io::Error>,
    verbose: bool,
    bar: Option<indicatif::ProgressBar>,
    files_done: u64,
    files_total: u64,
    git: GitTrees,
    /// Files left unconverted for what they hold (their reasons carry a
    /// position).
    unconverted: FirstNamed,
    /// Files converted that begin with a UTF-8 byte order mark.
    with_bom: FirstNamed,
}

/// Files named after the summary at most (`--report` lists them all).
const NAMED: usize = 10;

/// The lines of the first [`NAMED`] files of a kind, and how many there
/// were in all.
#[derive(Default)]
struct FirstNamed {
    lines: Vec<String>,
    total: u64,
}

impl FirstNamed {
    /// Counts one more file; keeps its `line` while fewer than [`NAMED`].
    fn add(&mut self, line: impl FnOnce() -> String) {
        self.total += 1;
        if self.lines.len() < NAMED {
            self.lines.push(line());
        }
    }

    fn more_than_named(&self) -> bool {
        self.total as usize > NAMED
    }
}

/// The note after the summary on `n` files that begin with a UTF-8 byte
/// order mark: they convert, and the mark stays (as iconv keeps it).
fn bom_note(n: u64, dry_run: bool) -> String {
    let stays = if dry_run { "would stay" } else { "stays" };
    let begin = if n == 1 { "begins" } else { "begin" };
    format!(
        "note: {} {begin} with a UTF-8 byte order mark (EF BB BF); the mark {stays} as \
         U+FEFF at the start of the text, as iconv keeps it; where it is not wanted, drop \
         it, through the mount or before migrating: sed -i {} FILE",
        migrate::report::count(n, "file"),
        cutf8fs::diagnose::DROP_BOM
    )
}

/// The progress bar's look once the work is counted; before, a spinner
/// says the tree is being counted (a bar over 0 B/0 B would read as done).
const BAR: &str = "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} \
{binary_bytes_per_sec} ETA {eta} {msg}";
const COUNTING: &str = "{spinner} [{elapsed_precise}] counting the files to convert…";

/// Git work trees met by a run that converts to Corrected UTF-8: once a
/// file of one is converted, one warning (per run) says what that means
/// for git outside the mount and the ways forward.
#[derive(Default)]
struct GitTrees {
    /// Roots of the work trees seen: a named PATH inside one, or a `.git`
    /// met by the walk; with the files git tracks there, once asked
    /// (`git ls-files`; None when git cannot say: then every file counts).
    roots: Vec<(PathBuf, Option<Option<std::collections::HashSet<PathBuf>>>)>,
    /// Whether the run converts to Corrected UTF-8 (the other way needs no
    /// warning: git's blobs are UTF-8).
    encode: bool,
    dry_run: bool,
    warned: bool,
}

impl GitTrees {
    /// The work trees that hold the named `paths` (a `.git` directory or
    /// file in the path or above it, on the way to `/`).
    fn around(paths: &[PathBuf], encode: bool, dry_run: bool) -> GitTrees {
        let mut roots = Vec::new();
        for p in paths {
            let Ok(real) = std::fs::canonicalize(p) else {
                continue;
            };
            if let Some(root) = real.ancestors().find(|a| a.join(".git").exists()) {
                roots.push((root.to_path_buf(), None));
            }
        }
        GitTrees {
            roots,
            encode,
            dry_run,
            warned: false,
        }
    }

    /// Looks at one reported path; the warning to print, once.
    fn see(&mut self, path: &std::path::Path, outcome: &Outcome) -> Option<String> {
        if !self.encode || self.warned {
            return None;
        }
        // `.git` itself (excluded), or a file inside it (--include-vcs).
        if let Some(at) = path
            .ancestors()
            .find(|a| a.file_name() == Some(".git".as_ref()))
        {
            if let Some(root) = at.parent() {
                let real = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
                if !self.roots.iter().any(|(r, _)| *r == real) {
                    self.roots.push((real, None));
                }
            }
        }
        if !matches!(
            outcome,
            Outcome::Converted { .. } | Outcome::WouldConvert { .. }
        ) {
            return None;
        }
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let (root, tracked) = self
            .roots
            .iter_mut()
            .filter(|(r, _)| real.starts_with(r))
            .max_by_key(|(r, _)| r.as_os_str().len())?;
        let tracked = tracked.get_or_insert_with(|| tracked_files(root));
        if tracked.as_ref().is_some_and(|t| !t.contains(&real)) {
            return None;
        }
        self.warned = true;
        Some(git_warning(root, self.dry_run))
    }
}

/// The files git tracks in the work tree `root` (absolute paths), or None
/// when git cannot say (not installed, not a repository it can read).
///
/// The work tree may be someone else's (root migrating a user's tree), and
/// a repository's own config can make git run commands (`core.fsmonitor`,
/// read by `ls-files`): git is asked to trust only repositories of the
/// user running it, whatever `safe.directory` root's own config lists (an
/// empty value empties the list), and never to run an fsmonitor. Another
/// user's repository gets no answer, so all its files count.
fn tracked_files(root: &std::path::Path) -> Option<std::collections::HashSet<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let out = std::process::Command::new("git")
        .args(["-c", "safe.directory=", "-c", "core.fsmonitor=false"])
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(
        out.stdout
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| root.join(std::ffi::OsStr::from_bytes(n)))
            .collect(),
    )
}

/// What converting files of the git work tree `root` means, and the ways
/// forward (docs/migrate.md, "Git work trees").
fn git_warning(root: &std::path::Path, dry_run: bool) -> String {
    let root = report::display_path(root);
    let verb = if dry_run { "would convert" } else { "converts" };
    format!(
        "cutf8: migrate: warning: this run {verb} files of the git work tree {root}. \
         git used outside a cutf8fs mount then sees every converted tracked file as \
         modified (and git diff calls it binary), as its repository holds UTF-8. Two ways \
         forward: use git through a cutf8fs mount of the tree, where the files read as \
         UTF-8 again and git status is clean (commit there as usual); or tell git the \
         working tree is Corrected UTF-8, with the CORRECTED-UTF-8 iconv module \
         installed (docs/charset.md), in four steps: (1) cd {root} && printf '%s\\n' \
         '* text working-tree-encoding=CORRECTED-UTF-8' '.gitattributes \
         -working-tree-encoding' >> .gitattributes; (2) for each file this run leaves \
         raw (scripts, binary files and the other skipped ones: --report lists them), \
         add a line 'PATH -text -working-tree-encoding' to .gitattributes; (3) git add \
         --renormalize . (git status shows every converted file modified until then); \
         (4) git add .gitattributes && git commit -m 'Corrected UTF-8 working tree'. \
         git status is then clean, and the repository still holds UTF-8. cutf8 migrate \
         --to utf8 undoes the conversion."
    )
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
            bar.set_style(indicatif::ProgressStyle::with_template(BAR).expect("valid template"));
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
        if let Some(warning) = self.git.see(e.path, e.outcome) {
            self.say(&warning, true);
        }
        let shown = report::display_path(e.path);
        if let Outcome::Skipped(r) = e.outcome {
            if matches!(
                r.code(),
                "invalid-utf8" | "c1-control" | "contains-nul" | "not-convertible"
            ) {
                self.unconverted.add(|| format!("  {shown}: {r}"));
            }
        }
        if e.outcome.has_utf8_bom() && e.link_of.is_none() {
            self.with_bom.add(|| format!("  {shown}"));
        }
        match e.outcome {
            Outcome::Failed(msg) => self.say(&format!("cutf8: migrate: {shown}: {msg}"), true),
            o if self.verbose => {
                let detail = match o {
                    Outcome::Skipped(r) => format!(": {r}"),
                    Outcome::Converted { before, after, .. }
                    | Outcome::WouldConvert { before, after, .. } => {
                        let bom = if o.has_utf8_bom() {
                            "; begins with a UTF-8 byte order mark"
                        } else {
                            ""
                        };
                        format!(
                            " ({} -> {}{bom})",
                            report::size(*before),
                            report::size(*after)
                        )
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

/// On SIGINT (Ctrl-C): say that nothing is half-converted and how to
/// finish, then exit 130. Only async-signal-safe calls in the handler.
fn say_how_to_resume_on_ctrl_c() {
    cutf8fs::sys::process::exit_on_sigint(
        b"\ncutf8: migrate: interrupted. Every file is either converted or unchanged (none is \
half-converted); run the same command again to finish: it cleans up and resumes.\n",
        130,
    );
}

impl MigrateArgs {
    /// What the library is asked to do.
    fn settings(&self) -> Settings {
        Settings {
            paths: self.paths.clone(),
            direction: match self.to {
                Target::Cutf8 => Direction::Encode,
                Target::Utf8 => Direction::Decode,
            },
            dry_run: self.dry_run,
            jobs: self.jobs.map(|n| n as usize),
            completion_order: self.completion_order,
            exclude: self.exclude.clone(),
            include_vcs: self.include_vcs,
            include_scripts: self.include_scripts,
            shard: self.shard,
            cross_filesystems: self.cross_filesystems,
        }
    }
}

/// Creates (or empties) the `--report` file `p`. Its directory is opened
/// once and the file created in it by name. When someone else may write
/// that directory (a tree's owner, or /tmp), a name planted there must not
/// redirect root's report: a symbolic link is not followed, and an
/// existing file is emptied only when it is this user's regular file with
/// one link (not a hard link to a file of root's, not a FIFO, not a file
/// of theirs that would let them read the report). In a directory only
/// this user (or root) writes, the name is used as given (`/dev/stdout`).
fn create_report(p: &std::path::Path) -> io::Result<File> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let name = p
        .file_name()
        .ok_or_else(|| io::Error::other("not a file name"))?;
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(parent)?;
    let dmd = dir.metadata()?;
    let euid = nix::unistd::geteuid().as_raw();
    let shared = (dmd.uid() != euid && dmd.uid() != 0) || dmd.mode() & 0o022 != 0;
    let mut flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    if shared {
        flags |= OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK;
    }
    let f = File::from(
        openat(&dir, name, flags, Mode::from_bits_truncate(0o644)).map_err(|e| match e {
            nix::errno::Errno::ELOOP => io::Error::other(
                "it is a symbolic link in a directory others may write (not followed)",
            ),
            e => io::Error::from(e),
        })?,
    );
    let md = f.metadata()?;
    if shared && !md.is_file() {
        return Err(io::Error::other(
            "it is not a regular file, in a directory others may write",
        ));
    }
    if shared && md.uid() != euid {
        return Err(io::Error::other(format!(
            "it is owned by uid {}, in a directory others may write",
            md.uid()
        )));
    }
    if shared && md.nlink() != 1 {
        return Err(io::Error::other(format!(
            "it has {} names (hard links), in a directory others may write",
            md.nlink()
        )));
    }
    if md.is_file() {
        f.set_len(0)?;
    }
    Ok(f)
}

/// `cutf8 migrate`: run with `args`, print, return the exit status.
pub fn run(args: &MigrateArgs) -> i32 {
    let mut opts = match Options::new(&args.settings()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cutf8: migrate: {e}");
            return 2;
        }
    };
    if let Err(e) = migrate::preflight(&opts.paths) {
        eprintln!("cutf8: migrate: {e}");
        return 2;
    }
    let report = match &args.report {
        None => None,
        Some(p) => match create_report(p) {
            Ok(f) => {
                // Found by the walk if it lies in a named tree: left alone.
                if let Ok(md) = f.metadata() {
                    use std::os::unix::fs::MetadataExt;
                    opts.own.push((md.dev(), md.ino()));
                }
                Some(BufWriter::new(f))
            }
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
        bar.set_style(indicatif::ProgressStyle::with_template(COUNTING).expect("valid template"));
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
        git: GitTrees::around(
            &opts.paths,
            opts.direction == Direction::Encode,
            opts.dry_run,
        ),
        unconverted: FirstNamed::default(),
        with_bom: FirstNamed::default(),
    };
    if !opts.dry_run {
        say_how_to_resume_on_ctrl_c();
    }
    let started = Instant::now();
    let summary = migrate::run(&opts, &mut cli);
    if let Some(bar) = cli.bar.take() {
        bar.finish_and_clear();
    }
    let mut status = if summary.failed > 0 { 1 } else { 0 };
    if let Some(mut w) = cli.report.take() {
        // A report on a pipe or terminal (`/dev/stdout`) has nothing to sync.
        let durable = |f: &File| match f.metadata() {
            Ok(md) if md.is_file() => f.sync_all(),
            _ => Ok(()),
        };
        if let Err(e) = w.flush().and_then(|_| durable(w.get_ref())) {
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
        if cli.unconverted.total > 0 && !cli.verbose {
            let _ = writeln!(
                out,
                "not converted for what they hold ({}):",
                if cli.unconverted.more_than_named() {
                    format!(
                        "the first {NAMED} of {}; --report FILE lists them all, with \
                         line, column and byte offset",
                        cli.unconverted.total
                    )
                } else {
                    "each with where and why".into()
                }
            );
            for line in &cli.unconverted.lines {
                let _ = writeln!(out, "{line}");
            }
        }
        if cli.with_bom.total > 0 {
            let _ = writeln!(out, "{}", bom_note(cli.with_bom.total, opts.dry_run));
            for line in &cli.with_bom.lines {
                let _ = writeln!(out, "{line}");
            }
            if cli.with_bom.more_than_named() {
                let _ = writeln!(out, "  ... (--report FILE lists them all: note utf8-bom)");
            }
        }
    }
    status
}
