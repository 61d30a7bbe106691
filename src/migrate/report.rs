//! What happened to each path, said three ways: one JSON line per path for
//! machines (`--report FILE`), one human line per path on request, and the
//! summary at the end. Knows nothing of how files are converted.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use cutf8::Problem;

/// Where in a file a problem starts (the converter's [`Position`]).
pub use crate::convert::Position;

/// Why a path was left alone. Every variant leaves its file byte for byte
/// as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// A NUL byte in the first 8000 bytes (git's rule).
    Binary,
    /// A script (`#!` and an interpreter, as the kernel reads it): the
    /// kernel must still run it from the tree (`--include-scripts`
    /// converts it).
    Script,
    /// A NUL byte later on: text W could store, but not a text file.
    Nul(Position),
    /// A C1 control (U+0080–U+009F), which Corrected UTF-8 cannot encode.
    C1Control(u32, Position),
    /// Not well-formed UTF-8 (overlong forms and surrogates included),
    /// with what the file looks like (`crate::diagnose`).
    InvalidUtf8(Problem, Position, Option<crate::diagnose::Guess>),
    /// Begins with the magic number already (`--to cutf8`).
    AlreadyCorrected,
    /// No content: nothing to convert.
    Empty,
    /// A fifo, socket or device.
    Special(&'static str),
    /// A symbolic link: never followed.
    Symlink,
    /// The file or its directory cannot be read or written by this user.
    PermissionDenied(String),
    /// No magic number (`--to utf8`).
    NotCorrected,
    /// Corrected text with no standard UTF-8 form (`--to utf8`).
    NotConvertible(Problem, Position),
    /// Matched an `--exclude` glob.
    Excluded,
    /// A directory on another filesystem (`--one-file-system`, the default).
    OtherFilesystem,
    /// Another shard's file (`--shard K/N`); never reported per path.
    OtherShard,
    /// A multiply linked file with a name the walk did not find in the
    /// named trees (`names` links, `inside` of them found there).
    LinkedOutside { names: u64, inside: u64 },
    /// The run's own `--report` file, found by the walk inside a named tree.
    OwnReport,
}

impl Reason {
    /// A short, stable name for scripts (the report's `code` field and the
    /// summary's keys).
    pub fn code(&self) -> &'static str {
        match self {
            Reason::Binary => "binary",
            Reason::Script => "script",
            Reason::Nul(_) => "contains-nul",
            Reason::C1Control(..) => "c1-control",
            Reason::InvalidUtf8(..) => "invalid-utf8",
            Reason::AlreadyCorrected => "already-corrected",
            Reason::Empty => "empty",
            Reason::Special(_) => "special-file",
            Reason::Symlink => "symlink",
            Reason::PermissionDenied(_) => "permission-denied",
            Reason::NotCorrected => "not-corrected",
            Reason::NotConvertible(..) => "not-convertible",
            Reason::Excluded => "excluded",
            Reason::OtherFilesystem => "other-filesystem",
            Reason::OtherShard => "other-shard",
            Reason::LinkedOutside { .. } => "linked-outside",
            Reason::OwnReport => "own-report",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Binary => write!(f, "binary (NUL byte in the first 8000 bytes)"),
            Reason::Script => write!(
                f,
                "script (#! and an interpreter: it must still run outside the mount; \
                 --include-scripts converts it)"
            ),
            Reason::Nul(p) => write!(f, "contains NUL at {p}"),
            Reason::C1Control(cp, p) => write!(f, "C1 control U+{cp:04X} at {p}"),
            Reason::InvalidUtf8(problem, p, None) => {
                write!(f, "invalid UTF-8 at {p}: {problem}")
            }
            Reason::InvalidUtf8(problem, p, Some(g)) => write!(
                f,
                "invalid UTF-8 at {p}: {problem}; {}",
                crate::diagnose::suggestion_for(crate::diagnose::Fix::Migrate, *g, None)
            ),
            Reason::AlreadyCorrected => write!(f, "already corrected"),
            Reason::Empty => write!(f, "empty"),
            Reason::Special(kind) => write!(f, "special file ({kind})"),
            Reason::Symlink => write!(f, "symbolic link (not followed)"),
            Reason::PermissionDenied(what) => write!(f, "permission denied ({what})"),
            Reason::NotCorrected => write!(f, "not corrected (no magic number)"),
            Reason::NotConvertible(problem, p) => {
                write!(f, "not convertible to UTF-8 at {p}: {problem}")
            }
            Reason::Excluded => write!(f, "excluded"),
            Reason::OtherFilesystem => write!(f, "on another filesystem"),
            Reason::OtherShard => write!(f, "another shard's file"),
            Reason::LinkedOutside { names, inside } => write!(
                f,
                "hard-linked outside the tree ({names} names, {inside} of them here): \
                 converting it in place would change the file under its other names too"
            ),
            Reason::OwnReport => write!(f, "this run's report (--report), written as the run goes"),
        }
    }
}

/// What happened to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Replaced by its verified conversion.
    Converted { before: u64, after: u64, bom: bool },
    /// `--dry-run`: would have been converted to `after` bytes.
    WouldConvert { before: u64, after: u64, bom: bool },
    /// Left alone.
    Skipped(Reason),
    /// Something went wrong; the file is as it was.
    Failed(String),
    /// A stray temporary file of a killed run, removed.
    Cleaned,
    /// A journal of a killed run, rolled back: the file is as it was before
    /// that run (and is converted again now).
    RolledBack,
}

impl Outcome {
    /// The report's `action` field.
    pub fn action(&self) -> &'static str {
        match self {
            Outcome::Converted { .. } => "converted",
            Outcome::WouldConvert { .. } => "would-convert",
            Outcome::Skipped(_) => "skipped",
            Outcome::Failed(_) => "failed",
            Outcome::Cleaned => "cleaned",
            Outcome::RolledBack => "rolled-back",
        }
    }

    /// Whether the file converted (or would) begins with a UTF-8 byte
    /// order mark, kept as U+FEFF (`crate::diagnose::utf8_bom`).
    pub fn has_utf8_bom(&self) -> bool {
        matches!(
            self,
            Outcome::Converted { bom: true, .. } | Outcome::WouldConvert { bom: true, .. }
        )
    }
}

/// `path` safe to print on a terminal (`crate::shown`, shared by every
/// command that prints a file name).
pub use crate::shown::display_path;

/// `path` as one word for a POSIX shell, for commands a message suggests:
/// in single quotes (a quote as `'\''`), or, for a path
/// [`display_path`] escapes, in bash's `$'…'` with those escapes, so that pasting
/// the command acts on exactly that path and runs nothing else.
pub fn shell_word(path: &Path) -> String {
    let shown = display_path(path);
    if shown.as_bytes() == path.as_os_str().as_bytes() {
        format!("'{}'", shown.replace('\'', "'\\''"))
    } else {
        format!("$'{}'", shown.replace('\'', "\\'"))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One line of `--report`.
#[derive(Serialize)]
struct Line<'a> {
    path: String,
    /// Present only when the path is not UTF-8: its exact bytes in hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    path_hex: Option<String>,
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// `utf8-bom` for a converted file that begins with a byte order mark.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    col: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    bytes_before: Option<u64>,
    bytes_after: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    same_inode_as: Option<&'a str>,
}

fn position(reason: &Reason) -> Option<Position> {
    match reason {
        Reason::Nul(p)
        | Reason::C1Control(_, p)
        | Reason::InvalidUtf8(_, p, _)
        | Reason::NotConvertible(_, p) => Some(*p),
        _ => None,
    }
}

/// One JSON object (no newline) describing `outcome` for `path`.
/// `size` is the file's size when the outcome carries none.
pub fn json_line(
    path: &Path,
    outcome: &Outcome,
    size: Option<u64>,
    link_of: Option<&str>,
) -> String {
    let shown = display_path(path);
    let exact = shown.as_bytes() == path.as_os_str().as_bytes();
    let (before, after) = match *outcome {
        Outcome::Converted { before, after, .. } | Outcome::WouldConvert { before, after, .. } => {
            (Some(before), Some(after))
        }
        Outcome::Skipped(_) | Outcome::Failed(_) => (size, size),
        Outcome::Cleaned | Outcome::RolledBack => (size, None),
    };
    let (code, reason) = match outcome {
        Outcome::Skipped(r) => (Some(r.code()), Some(r.to_string())),
        Outcome::Failed(msg) => (None, Some(msg.clone())),
        _ => (None, None),
    };
    let pos = match outcome {
        Outcome::Skipped(r) => position(r),
        _ => None,
    };
    let line = Line {
        path: shown,
        path_hex: (!exact).then(|| hex(path.as_os_str().as_bytes())),
        action: outcome.action(),
        code,
        reason,
        note: outcome.has_utf8_bom().then_some("utf8-bom"),
        line: pos.map(|p| p.line),
        col: pos.map(|p| p.column),
        offset: pos.map(|p| p.offset),
        bytes_before: before,
        bytes_after: after,
        same_inode_as: link_of,
    };
    serde_json::to_string(&line).expect("a report line always serializes")
}

/// Totals for the summary.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub converted: u64,
    pub would_convert: u64,
    pub failed: u64,
    pub cleaned: u64,
    pub rolled_back: u64,
    /// Skipped paths by [`Reason::code`].
    pub skipped: BTreeMap<&'static str, u64>,
    /// Sizes of the converted (or to-be-converted) files, each inode once.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// What became of the trees' index databases (`--to utf8`), one line
    /// each.
    pub index_db: Vec<String>,
}

impl Summary {
    /// Count one path's outcome. `primary` is false for the further names
    /// of an inode already counted, whose bytes must not count twice.
    pub fn add(&mut self, outcome: &Outcome, primary: bool) {
        match outcome {
            Outcome::Converted { before, after, .. }
            | Outcome::WouldConvert { before, after, .. } => {
                if matches!(outcome, Outcome::Converted { .. }) {
                    self.converted += 1;
                } else {
                    self.would_convert += 1;
                }
                if primary {
                    self.bytes_before += before;
                    self.bytes_after += after;
                }
            }
            Outcome::Skipped(r) => *self.skipped.entry(r.code()).or_default() += 1,
            Outcome::Failed(_) => self.failed += 1,
            Outcome::Cleaned => self.cleaned += 1,
            Outcome::RolledBack => self.rolled_back += 1,
        }
    }

    /// The human summary, several lines.
    pub fn write(&self, out: &mut impl Write, elapsed: Duration, dry_run: bool) -> io::Result<()> {
        let skipped: u64 = self.skipped.values().sum();
        if dry_run {
            writeln!(
                out,
                "dry run: {} would be converted",
                count(self.would_convert, "file")
            )?;
        } else {
            writeln!(out, "converted: {}", count(self.converted, "file"))?;
        }
        writeln!(out, "skipped:   {}", count(skipped, "path"))?;
        for (code, n) in &self.skipped {
            writeln!(out, "  {code}: {n}")?;
        }
        writeln!(out, "failed:    {}", count(self.failed, "file"))?;
        if self.cleaned > 0 || self.rolled_back > 0 {
            writeln!(
                out,
                "recovered from an earlier run: {} removed, {} rolled back",
                count(self.cleaned, "temporary file"),
                count(self.rolled_back, "journal")
            )?;
        }
        writeln!(
            out,
            "size:      {} before, {} after",
            size(self.bytes_before),
            size(self.bytes_after)
        )?;
        for line in &self.index_db {
            writeln!(out, "index database: {line}")?;
        }
        writeln!(out, "time:      {:.3} s", elapsed.as_secs_f64())
    }
}

/// `1 file`, `2 files`.
pub fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A size as every human-facing line of migrate shows it (the summary,
/// `--verbose`, the progress bar): binary units, `1.50 MiB`, exact below
/// 1 KiB. The `--report` keeps exact byte counts.
pub fn size(n: u64) -> String {
    const PREFIXES: [&str; 8] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"];
    let mut v = n as f64;
    let mut p = 0;
    while v >= 1024.0 && p < PREFIXES.len() {
        v /= 1024.0;
        p += 1;
    }
    match p {
        0 => format!("{n} B"),
        _ => format!("{v:.2} {}B", PREFIXES[p - 1]),
    }
}

/// Whether `name` is one of migrate's own working files.
pub fn is_own_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b.starts_with(super::TMP_PREFIX.as_bytes()) || b.starts_with(super::JOURNAL_PREFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn sizes_read_as_binary_units() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1.00 KiB");
        assert_eq!(size(1536), "1.50 KiB");
        assert_eq!(size(126_456), "123.49 KiB");
        assert_eq!(size(5 << 30), "5.00 GiB");
        assert_eq!(size(u64::MAX), "16.00 EiB");
    }

    #[test]
    fn non_utf8_paths_are_escaped_reversibly() {
        let p = Path::new(OsStr::from_bytes(b"a\\b\xFFc"));
        assert_eq!(display_path(p), "a\\\\b\\xFFc");
        assert_eq!(display_path(Path::new("a\\b")), "a\\b");
        let line = json_line(p, &Outcome::Skipped(Reason::Empty), Some(0), None);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["path_hex"], "615c62ff63");
        assert_eq!(v["code"], "empty");
    }

    #[test]
    fn control_characters_are_escaped_and_rm_words_quoted() {
        let p = Path::new("a\\\x1b[2J\nb");
        assert_eq!(display_path(p), "a\\\\\\x1B[2J\\x0Ab");
        assert_eq!(display_path(Path::new("\u{202e}x")), "\\xE2\\x80\\xAEx");
        let line = json_line(p, &Outcome::Skipped(Reason::Empty), Some(0), None);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["path_hex"], "615c1b5b324a0a62");
        assert_eq!(shell_word(Path::new("it's")), "'it'\\''s'");
        assert_eq!(shell_word(Path::new("it's\n")), "$'it\\'s\\x0A'");
    }
}
