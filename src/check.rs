//! `cutf8 check`: lint Corrected UTF-8 files against docs/format.md's document
//! rules, one finding per line in the form compilers use.
//!
//! A file is read in fixed-size chunks through the strict [`Decoder`], which
//! reports every malformed unit and goes on after it; the decoded text is
//! scanned for the characters the rules name. Memory stays constant whatever
//! the file size. Positions are those of `cutf8 decode`: lines and columns
//! (in characters) from 1 in the text after the magic number, each malformed
//! unit counting as one character.
//!
//! The rules and their default levels ([`Rule::default_level`]):
//!
//! | rule | default | finding |
//! |---|---|---|
//! | `missing-magic` | warning | the file does not begin with the magic number |
//! | `nul` | error | U+0000 outside the magic number |
//! | `no-final-newline` | warning | the last character is not U+000A |
//! | `carriage-return` | warning | U+000D |
//! | `tab` | warning | U+0009 (a C0 control, but often wanted: its own rule) |
//! | `control` | warning | any other C0 control (U+0001–U+001F but TAB, LF, CR) |
//! | `line-separator` | warning | U+2028 |
//! | `paragraph-separator` | warning | U+2029 |
//! | `stray-byte` | error | a continuation byte where no sequence is open |
//! | `truncated-sequence` | error | a lead byte without all its continuation bytes |
//! | `reserved-unit` | warning | FE/FF and its continuation bytes: valid (reserved for future use), but without a standard UTF-8 form |
//! | `beyond-unicode` | warning | a code point above U+10FFFF: valid, but without a standard UTF-8 form |
//!
//! Built for whole archives: every error is printed, but a warning that
//! repeats in a file is printed for its first [`CheckOptions::max_per_rule`]
//! occurrences only (one by default); a note then says how many more there
//! were, and when any were held back the summary counts each rule's
//! findings over all files. An empty file has nothing to check and draws
//! no finding. A path on a cutf8fs mount is not checked: the mount shows
//! the view (UTF-8, no magic number), not what is stored; the message
//! names the file in BACKING instead (as `cutf8 migrate` does).
//!
//! The module knows nothing of argument parsing; the `cutf8` binary builds
//! [`CheckOptions`] and prints what [`run`] hands to its callbacks.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::convert::{
    io_message, read_chunk, read_prefix, Direction, Input, Position, Tracker, DEFAULT_BUFFER_SIZE,
};
use crate::shown::display_path;
use cutf8::{has_magic, DecodeMagic, Decoder, Problem, Status, MIN_DST};

/// One document rule of docs/format.md (or a malformation of its format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// The file does not begin with the magic number (default: warning).
    MissingMagic,
    /// U+0000 outside the magic number (default: error).
    Nul,
    /// The last character is not U+000A (default: warning).
    NoFinalNewline,
    /// U+000D, CARRIAGE RETURN (default: warning).
    CarriageReturn,
    /// U+0009, TAB (default: warning).
    Tab,
    /// A C0 control other than TAB, LF and CR (default: warning).
    Control,
    /// U+2028, LINE SEPARATOR (default: warning).
    LineSeparator,
    /// U+2029, PARAGRAPH SEPARATOR (default: warning).
    ParagraphSeparator,
    /// A continuation byte where no sequence is open (default: error).
    StrayByte,
    /// A lead byte without all its continuation bytes (default: error).
    TruncatedSequence,
    /// A reserved FE/FF unit: valid, but no UTF-8 form (default: warning).
    ReservedUnit,
    /// A code point above U+10FFFF: valid, but no UTF-8 form (default: warning).
    BeyondUnicode,
}

impl Rule {
    /// Every rule, in the order of the table in the module doc.
    pub const ALL: [Rule; 12] = [
        Rule::MissingMagic,
        Rule::Nul,
        Rule::NoFinalNewline,
        Rule::CarriageReturn,
        Rule::Tab,
        Rule::Control,
        Rule::LineSeparator,
        Rule::ParagraphSeparator,
        Rule::StrayByte,
        Rule::TruncatedSequence,
        Rule::ReservedUnit,
        Rule::BeyondUnicode,
    ];

    /// The name used in output and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Rule::MissingMagic => "missing-magic",
            Rule::Nul => "nul",
            Rule::NoFinalNewline => "no-final-newline",
            Rule::CarriageReturn => "carriage-return",
            Rule::Tab => "tab",
            Rule::Control => "control",
            Rule::LineSeparator => "line-separator",
            Rule::ParagraphSeparator => "paragraph-separator",
            Rule::StrayByte => "stray-byte",
            Rule::TruncatedSequence => "truncated-sequence",
            Rule::ReservedUnit => "reserved-unit",
            Rule::BeyondUnicode => "beyond-unicode",
        }
    }

    /// What the rule finds, in a line (the command line's help for it).
    pub fn description(self) -> &'static str {
        match self {
            Rule::MissingMagic => {
                "The file does not begin with the magic number (default: warning)"
            }
            Rule::Nul => "U+0000 outside the magic number (default: error)",
            Rule::NoFinalNewline => "The last character is not U+000A (default: warning)",
            Rule::CarriageReturn => "U+000D, CARRIAGE RETURN (default: warning)",
            Rule::Tab => "U+0009, TAB (default: warning)",
            Rule::Control => "A C0 control other than TAB, LF and CR (default: warning)",
            Rule::LineSeparator => "U+2028, LINE SEPARATOR (default: warning)",
            Rule::ParagraphSeparator => "U+2029, PARAGRAPH SEPARATOR (default: warning)",
            Rule::StrayByte => "A continuation byte where no sequence is open (default: error)",
            Rule::TruncatedSequence => {
                "A lead byte without all its continuation bytes (default: error)"
            }
            Rule::ReservedUnit => {
                "A reserved FE/FF unit: valid, but no UTF-8 form (default: warning)"
            }
            Rule::BeyondUnicode => {
                "A code point above U+10FFFF: valid, but no UTF-8 form (default: warning)"
            }
        }
    }

    /// MUST rules and malformed bytes are errors, SHOULD rules warnings.
    pub fn default_level(self) -> Level {
        match self {
            Rule::Nul | Rule::StrayByte | Rule::TruncatedSequence => Level::Error,
            _ => Level::Warning,
        }
    }

    /// Position in [`Rule::ALL`] (the declaration order, as tested).
    fn index(self) -> usize {
        self as usize
    }
}

/// How a rule's findings count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Not reported.
    Allow,
    /// Reported; does not change the exit status.
    Warning,
    /// Reported; exit status 1.
    Error,
}

/// What `cutf8 check` was asked to do.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    levels: [Level; Rule::ALL.len()],
    /// Warnings printed per rule per file (default 1; 0 = no limit).
    /// Errors are always printed, every one.
    pub max_per_rule: u64,
    /// Input chunk size (default [`DEFAULT_BUFFER_SIZE`]).
    pub buffer_size: usize,
    /// Print findings and notes as JSON lines (`--format json`).
    pub json: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            levels: Rule::ALL.map(Rule::default_level),
            max_per_rule: 1,
            buffer_size: DEFAULT_BUFFER_SIZE,
            json: false,
        }
    }
}

impl CheckOptions {
    /// Set one rule's level.
    pub fn set(&mut self, rule: Rule, level: Level) {
        self.levels[rule.index()] = level;
    }

    /// Turn every warning into an error (`--deny-warnings`).
    pub fn deny_warnings(&mut self) {
        for l in &mut self.levels {
            if *l == Level::Warning {
                *l = Level::Error;
            }
        }
    }

    pub fn level(&self, rule: Rule) -> Level {
        self.levels[rule.index()]
    }
}

/// One finding, printed as `file:line:col: level: message [rule]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    pub line: u64,
    pub column: u64,
    pub level: Level,
    pub rule: Rule,
    pub message: String,
}

impl Finding {
    /// The finding as one JSON object (`--format json`).
    pub fn json(&self) -> String {
        serde_json::json!({
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "level": if self.level == Level::Error { "error" } else { "warning" },
            "rule": self.rule.name(),
            "message": self.message,
        })
        .to_string()
    }
}

/// A note (not a finding) in the chosen output format.
fn note(json: bool, file: &str, message: &str) -> String {
    if json {
        serde_json::json!({"file": file, "level": "note", "message": message}).to_string()
    } else {
        format!("{file}: note: {message}")
    }
}

/// Directory names `check` does not descend into (as `cutf8 migrate`):
/// version-control metadata, which is not text for people.
pub const VCS_DIRS: [&str; 3] = [".git", ".hg", ".svn"];

/// One file to check: named on the command line (opened as given, as
/// `cat` would), or found under a named directory.
enum Item {
    Named(Input),
    /// Found under a named directory: the directory's descriptor (opened
    /// once, as named), the file's path below it, and its full path for
    /// messages.
    Found(std::rc::Rc<OwnedFd>, PathBuf, PathBuf),
}

impl Item {
    fn name(&self) -> String {
        match self {
            Item::Named(i) => i.name(),
            Item::Found(_, _, full) => display_path(full),
        }
    }

    fn open(&self) -> std::io::Result<Box<dyn Read>> {
        match self {
            Item::Named(i) => i.open(),
            Item::Found(root, rel, _) => Ok(Box::new(open_found(root, rel)?)),
        }
    }
}

/// Opens `rel` below `root` the way the walk found it: no symbolic link
/// followed in any component, nothing outside `root`, and only a regular
/// file (reached as `O_PATH` and checked with `fstat` first, so a FIFO or
/// device put in a file's place is never opened: `trust::reach` and
/// `trust::open_reached`, as migrate opens files). What the walk listed
/// may have been replaced since by whoever writes the tree.
fn open_found(root: &OwnedFd, rel: &Path) -> std::io::Result<std::fs::File> {
    let (Some(dir), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let dir = beneath(root, dir, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
    let reached = crate::trust::reach(dir.as_fd(), name)?;
    if reached.1.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(std::io::Error::other(
            "not a regular file any more (replaced during the run): not opened",
        ));
    }
    crate::trust::open_reached(
        dir.as_fd(),
        name,
        &reached,
        libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
        false,
    )
}

/// `openat2` of `rel` below `root` (`RESOLVE_BENEATH`,
/// `RESOLVE_NO_SYMLINKS`); an empty `rel` is `root` itself.
fn beneath(root: &OwnedFd, rel: &Path, flags: OFlag) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{openat2, OpenHow, ResolveFlag};
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    // openat2 refuses flags that O_PATH ignores (O_NOCTTY among them).
    let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    Ok(openat2(root, rel, how)?)
}

/// The named inputs with each directory replaced by the regular files
/// under it (recursively, sorted by name, symlinks and special files left
/// out, [`VCS_DIRS`] and the mount's own files not entered). A named
/// directory is opened once, as named; below it every directory is listed
/// and every file opened by its path from that descriptor with no symbolic
/// link followed ([`open_found`]), so a tree its owner changes during the
/// run cannot lead the check outside it or onto a FIFO. A directory that
/// cannot be listed is reported to `diag` and counted in `unreadable`.
fn expand(inputs: &[Input], diag: &mut dyn FnMut(&str), unreadable: &mut usize) -> Vec<Item> {
    let mut files = Vec::new();
    for input in inputs {
        match input {
            Input::Path(p) if p.is_dir() => {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                match nix::fcntl::open(p.as_path(), flags, nix::sys::stat::Mode::empty()) {
                    Ok(fd) => {
                        let root = std::rc::Rc::new(fd);
                        walk_dir(&root, p, Path::new(""), &mut files, diag, unreadable);
                    }
                    Err(e) => {
                        diag(&format!("{}: {}", display_path(p), io_message(&e.into())));
                        *unreadable += 1;
                    }
                }
            }
            other => files.push(Item::Named(other.clone())),
        }
    }
    files
}

fn walk_dir(
    root: &std::rc::Rc<OwnedFd>,
    top: &Path,
    rel: &Path,
    files: &mut Vec<Item>,
    diag: &mut dyn FnMut(&str),
    unreadable: &mut usize,
) {
    // Listed in full and closed before descending: one descriptor at a
    // time however deep the tree.
    let listed = beneath(root, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .and_then(|fd| Ok(nix::dir::Dir::from_fd(fd)?))
        .and_then(|mut dir| {
            let mut v = Vec::new();
            for e in dir.iter() {
                let e = e?;
                let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
                if name != "." && name != ".." {
                    v.push((name, e.file_type()));
                }
            }
            // A filesystem that gives no type in its listing: asked by
            // name, without following a symbolic link.
            for (name, kind) in v.iter_mut().filter(|(_, k)| k.is_none()) {
                let st = nix::sys::stat::fstatat(
                    &dir,
                    name.as_os_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                );
                *kind = st.ok().map(|st| match st.st_mode & libc::S_IFMT {
                    libc::S_IFDIR => nix::dir::Type::Directory,
                    libc::S_IFREG => nix::dir::Type::File,
                    _ => nix::dir::Type::Symlink,
                });
            }
            Ok(v)
        });
    let mut entries = match listed {
        Ok(v) => v,
        Err(e) => {
            let shown = if rel.as_os_str().is_empty() {
                top.to_path_buf()
            } else {
                top.join(rel)
            };
            diag(&format!("{}: {}", display_path(&shown), io_message(&e)));
            *unreadable += 1;
            return;
        }
    };
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in entries {
        // The mount's own files (its journal) are not the user's text.
        if crate::trust::is_internal(&name) {
            continue;
        }
        let path = rel.join(&name);
        match kind {
            Some(nix::dir::Type::Directory) if !VCS_DIRS.iter().any(|v| name == *v) => {
                walk_dir(root, top, &path, files, diag, unreadable);
            }
            Some(nix::dir::Type::File) => {
                let full = top.join(&path);
                files.push(Item::Found(root.clone(), path, full));
            }
            _ => {}
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = if self.level == Level::Error {
            "error"
        } else {
            "warning"
        };
        write!(
            f,
            "{}:{}:{}: {level}: {} [{}]",
            self.file,
            self.line,
            self.column,
            self.message,
            self.rule.name()
        )
    }
}

/// What [`FileCheck::scan`] did with one input.
enum Scanned {
    Checked,
    /// Skipped as binary.
    Binary,
    /// Skipped as a script migrate leaves raw.
    Script,
}

/// Totals over all files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckSummary {
    pub files: usize,
    pub errors: u64,
    pub warnings: u64,
    /// Files that could not be read (or were not checked: on a mount).
    pub unreadable: usize,
    /// Files skipped as binary (one note each).
    pub binary: usize,
    /// Scripts `cutf8 migrate` leaves raw on purpose, not checked (one
    /// note each; neither a warning nor an error).
    pub scripts: usize,
    /// Per rule (in [`Rule::ALL`] order): findings, and files with any.
    pub per_rule: [(u64, usize); Rule::ALL.len()],
    /// Whether any finding was held back (not printed).
    pub held_back: bool,
}

impl CheckSummary {
    /// One line per rule with findings (`tab: 1000 warnings in 3 files`),
    /// for the end of a run where findings were held back; none otherwise
    /// (every finding is on the screen then).
    pub fn rule_lines(&self, opts: &CheckOptions) -> Vec<String> {
        if !self.held_back {
            return Vec::new();
        }
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        Rule::ALL
            .iter()
            .filter(|r| self.per_rule[r.index()].0 > 0)
            .map(|&r| {
                let (n, files) = self.per_rule[r.index()];
                let what = if opts.level(r) == Level::Error {
                    "error"
                } else {
                    "warning"
                };
                format!(
                    "  {}: {} in {}",
                    r.name(),
                    plural(n, what),
                    plural(files as u64, "file")
                )
            })
            .collect()
    }
}

impl std::fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        write!(
            f,
            "checked {}: {}, {}",
            plural(self.files as u64, "file"),
            plural(self.errors, "error"),
            plural(self.warnings, "warning")
        )?;
        if self.binary > 0 {
            write!(
                f,
                ", {} skipped as binary",
                plural(self.binary as u64, "file")
            )?;
        }
        if self.scripts > 0 {
            write!(
                f,
                ", {} left raw as {} by cutf8 migrate",
                plural(self.scripts as u64, "file"),
                if self.scripts == 1 {
                    "a script"
                } else {
                    "scripts"
                }
            )?;
        }
        if self.unreadable > 0 {
            write!(f, ", {} unreadable", self.unreadable)?;
        }
        Ok(())
    }
}

/// Check `inputs` in order. Each printed line (finding or note) goes to
/// `out`; read errors go to `diag`.
pub fn run(
    opts: &CheckOptions,
    inputs: &[Input],
    out: &mut dyn FnMut(&str),
    diag: &mut dyn FnMut(&str),
) -> CheckSummary {
    let mut summary = CheckSummary::default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut named = Vec::new();
    for input in inputs {
        match on_mount(&mounts, input) {
            Some(why) => {
                diag(&why);
                summary.unreadable += 1;
            }
            None => named.push(input.clone()),
        }
    }
    let inputs = &expand(&named, diag, &mut summary.unreadable)[..];
    let mut input_buf = vec![0u8; opts.buffer_size.max(1)];
    let mut output_buf = vec![0u8; cutf8::max_view_len(input_buf.len()).max(MIN_DST)];
    for input in inputs {
        let name = input.name();
        let mut file = FileCheck::new(opts, name.clone(), out);
        let result = input
            .open()
            .and_then(|mut r| file.scan(&mut r, &mut input_buf, &mut output_buf));
        let counted = file.finish();
        summary.errors += counted.errors;
        summary.warnings += counted.warnings;
        summary.held_back |= counted.held_back;
        for (k, &n) in counted.per_rule.iter().enumerate() {
            if n > 0 {
                summary.per_rule[k].0 += n;
                summary.per_rule[k].1 += 1;
            }
        }
        match result {
            Ok(Scanned::Checked) => summary.files += 1,
            Ok(Scanned::Binary) => summary.binary += 1,
            Ok(Scanned::Script) => summary.scripts += 1,
            Err(e) => {
                diag(&format!("{name}: {}", io_message(&e)));
                summary.unreadable += 1;
            }
        }
    }
    summary
}

/// Why `input` is not checked when it is on a cutf8fs mount: the mount
/// shows the view, so every corrected file would lack its magic number.
fn on_mount(mounts: &str, input: &Input) -> Option<String> {
    let Input::Path(p) = input else {
        return None;
    };
    let real = std::fs::canonicalize(p).ok()?;
    let (mnt, source) = crate::mountinfo::cutf8fs_mount_of(mounts, &real)?;
    let shown = display_path(p);
    let stored = real
        .strip_prefix(&mnt)
        .ok()
        .filter(|_| source.starts_with('/'))
        .map(|rel| std::path::Path::new(&source).join(rel));
    let instead = match stored {
        Some(b) => format!("check {} instead", display_path(&b)),
        None => format!("check it in the mount's BACKING ({source}) instead"),
    };
    Some(format!(
        "{shown}: on a cutf8fs mount ({}), which shows files as UTF-8 without their \
         magic number, not as they are stored: not checked; {instead}",
        display_path(&mnt)
    ))
}

/// What one file's check counted.
struct Counted {
    errors: u64,
    warnings: u64,
    per_rule: [u64; Rule::ALL.len()],
    held_back: bool,
}

/// How much of a file the binary test looks at (git's number).
const BINARY_PROBE: usize = 8000;

/// The state of checking one file.
struct FileCheck<'a> {
    opts: &'a CheckOptions,
    name: String,
    out: &'a mut dyn FnMut(&str),
    /// Byte offsets and the bytes of malformed units (input side).
    pos: Tracker,
    /// Line and column of the next character of the text, counted on the
    /// decoded side so a sequence cut by a chunk edge counts once (its
    /// offset counts decoded bytes and is not reported).
    text_at: Position,
    /// Findings per rule, reported or not.
    counts: [u64; Rule::ALL.len()],
    /// Whether any character (or malformed unit) was seen, and whether the
    /// last one was U+000A.
    any_text: bool,
    ends_with_newline: bool,
}

impl<'a> FileCheck<'a> {
    fn new(opts: &'a CheckOptions, name: String, out: &'a mut dyn FnMut(&str)) -> Self {
        FileCheck {
            opts,
            name,
            out,
            pos: Tracker::default(),
            text_at: Position::default(),
            counts: [0; Rule::ALL.len()],
            any_text: false,
            ends_with_newline: false,
        }
    }

    fn report(&mut self, rule: Rule, line: u64, column: u64, message: impl FnOnce() -> String) {
        let level = self.opts.level(rule);
        if level == Level::Allow {
            return;
        }
        let k = rule.index();
        self.counts[k] += 1;
        if level == Level::Error
            || self.opts.max_per_rule == 0
            || self.counts[k] <= self.opts.max_per_rule
        {
            let f = Finding {
                file: self.name.clone(),
                line,
                column,
                level,
                rule,
                message: message(),
            };
            let line = if self.opts.json {
                f.json()
            } else {
                f.to_string()
            };
            (self.out)(&line);
        }
    }

    /// Check one input, unless it is binary (a NUL byte in the first
    /// [`BINARY_PROBE`] bytes and no magic number: git's and `cutf8
    /// migrate`'s rule) or a script `cutf8 migrate` leaves raw on purpose
    /// (`crate::migrate::leaves_script_raw`, migrate's own rule): then one
    /// note says so.
    fn scan(
        &mut self,
        r: &mut dyn Read,
        input: &mut [u8],
        output: &mut [u8],
    ) -> std::io::Result<Scanned> {
        // The magic number is dropped if there; its absence is a finding,
        // and the text is checked from the first byte either way.
        let mut dec = Decoder::strict()
            .with_magic(DecodeMagic::Strip)
            .with_simd_level(crate::codec::level());
        let mut probe = vec![0u8; BINARY_PROBE];
        let n = read_prefix(r, &mut probe, input.len())?;
        if n == 0 {
            // Nothing to check: no magic number is missing from no text.
            return Ok(Scanned::Checked);
        }
        let magic = has_magic(&probe[..n]);
        if !magic && probe[..n].contains(&0) {
            (self.out)(&note(
                self.opts.json,
                &self.name,
                "binary (a NUL byte in the first 8000 bytes and no magic number): not checked",
            ));
            return Ok(Scanned::Binary);
        }
        if crate::migrate::leaves_script_raw(&probe[..n]) {
            (self.out)(&note(
                self.opts.json,
                &self.name,
                "a script (#! and an interpreter): cutf8 migrate leaves scripts raw on \
                 purpose, so that they still run outside the mount; not checked \
                 (cutf8 migrate --include-scripts converts it, for a script run only \
                 through the mount)",
            ));
            return Ok(Scanned::Script);
        }
        if !magic {
            self.report(Rule::MissingMagic, 1, 1, || {
                "no Corrected UTF-8 magic number at the start".to_string()
            });
            // Not UTF-8 either: what it looks like, and the fix
            // (`crate::diagnose`, the judgement encode and migrate make).
            let head = &probe[..n];
            if let Some(bom) = crate::diagnose::utf8_bom(head, Some(&self.name)) {
                (self.out)(&note(self.opts.json, &self.name, &bom));
            }
            if let Err(e) = std::str::from_utf8(head) {
                if e.error_len().is_some() {
                    let at = e.valid_up_to();
                    let guess = crate::diagnose::guess(
                        head,
                        Problem::StrayContinuation(head[at]),
                        &head[at..],
                    );
                    if guess != crate::diagnose::Guess::MostlyUtf8 {
                        let fix = crate::diagnose::suggestion_for(
                            crate::diagnose::Fix::Migrate,
                            guess,
                            Some(&self.name),
                        );
                        (self.out)(&note(self.opts.json, &self.name, &fix));
                    }
                }
            }
        }
        let mut eof = n < probe.len();
        self.feed(&mut dec, &probe[..n], eof, output);
        while !eof {
            let n = read_chunk(r, input)?;
            eof = n == 0;
            self.feed(&mut dec, &input[..n], eof, output);
        }
        if self.any_text && !self.ends_with_newline {
            let (line, col) = (self.text_at.line, self.text_at.column);
            self.report(Rule::NoFinalNewline, line, col, || {
                "no newline (U+000A) at the end of the file".to_string()
            });
        }
        Ok(Scanned::Checked)
    }

    fn feed(&mut self, dec: &mut Decoder, src: &[u8], last: bool, dst: &mut [u8]) {
        let mut i = 0;
        loop {
            let (status, read, written) = dec.convert(&src[i..], dst, last);
            self.text(&dst[..written]);
            let consumed = &src[i..i + read];
            i += read;
            match status {
                Status::InputEmpty => {
                    self.pos.advance(consumed);
                    return;
                }
                Status::OutputFull => self.pos.advance(consumed),
                Status::Malformed(m) => {
                    let at = self.pos.locate(consumed, m);
                    let rule = match m.problem {
                        Problem::StrayContinuation(_) => Rule::StrayByte,
                        Problem::Truncated { .. } => Rule::TruncatedSequence,
                        Problem::Reserved(_) => Rule::ReservedUnit,
                        // A second magic number holds U+0000.
                        Problem::MagicNumber => Rule::Nul,
                        _ => Rule::BeyondUnicode,
                    };
                    let (line, col) = (self.text_at.line, self.text_at.column);
                    self.report(rule, line, col, || {
                        format!(
                            "{} (byte offset {})",
                            at.describe(Direction::Decode),
                            at.pos.offset
                        )
                    });
                    // The unit itself: one character, never a newline.
                    self.text_at.column += 1;
                    self.any_text = true;
                    self.ends_with_newline = false;
                }
            }
        }
    }

    /// Look at decoded text for the characters the rules name, counting
    /// lines and columns. The decoder never splits a character between two
    /// outputs.
    fn text(&mut self, text: &[u8]) {
        if text.is_empty() {
            return;
        }
        self.any_text = true;
        self.ends_with_newline = text[text.len() - 1] == b'\n';
        let mut at = self.text_at;
        let mut k = 0;
        while k < text.len() {
            let Some(j) = text[k..].iter().position(|&b| b < 0x20 || b == 0xE2) else {
                break;
            };
            at.advance(&text[k..k + j]);
            k += j;
            let b = text[k];
            let found = match b {
                b'\n' => None,
                0x00 => Some((
                    Rule::Nul,
                    "U+0000 (NUL) outside the magic number".to_string(),
                )),
                b'\t' => Some((Rule::Tab, "tab (U+0009)".to_string())),
                b'\r' => Some((Rule::CarriageReturn, "carriage return (U+000D)".to_string())),
                0xE2 if text[k + 1..].starts_with(&[0x80, 0xA8]) => {
                    Some((Rule::LineSeparator, "line separator (U+2028)".to_string()))
                }
                0xE2 if text[k + 1..].starts_with(&[0x80, 0xA9]) => Some((
                    Rule::ParagraphSeparator,
                    "paragraph separator (U+2029)".to_string(),
                )),
                0xE2 => None,
                _ => Some((Rule::Control, format!("C0 control U+{b:04X}"))),
            };
            if let Some((rule, message)) = found {
                self.report(rule, at.line, at.column, || message);
            }
            at.advance(&text[k..=k]);
            k += 1;
        }
        at.advance(&text[k..]);
        self.text_at = at;
    }

    /// Print the notes for capped rules; what was counted.
    fn finish(self) -> Counted {
        let (mut errors, mut warnings, mut held_back) = (0, 0, false);
        for rule in Rule::ALL {
            let n = self.counts[rule.index()];
            let level = self.opts.level(rule);
            match level {
                Level::Error => errors += n,
                Level::Warning => warnings += n,
                Level::Allow => {}
            }
            if level == Level::Warning && self.opts.max_per_rule > 0 && n > self.opts.max_per_rule {
                held_back = true;
                let message = format!(
                    "{} more [{}] findings not shown",
                    n - self.opts.max_per_rule,
                    rule.name()
                );
                (self.out)(&note(self.opts.json, &self.name, &message));
            }
        }
        Counted {
            errors,
            warnings,
            per_rule: self.counts,
            held_back,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_the_position_in_all() {
        for (k, rule) in Rule::ALL.iter().enumerate() {
            assert_eq!(rule.index(), k);
        }
    }

    #[test]
    fn deny_warnings_leaves_allowed_rules_alone() {
        let mut o = CheckOptions::default();
        o.set(Rule::Tab, Level::Allow);
        o.deny_warnings();
        assert_eq!(o.level(Rule::Tab), Level::Allow);
        assert_eq!(o.level(Rule::CarriageReturn), Level::Error);
    }
}
