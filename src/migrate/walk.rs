//! What migrate's walk (`crate::walk`, the one walk of trees others
//! write) finds, turned into migrate's report, and what a killed run left.
//!
//! The walk lists the regular files of the named paths (this shard's part
//! of them), each inode once with all its names; what it passes by
//! (symlinks, special files, `--exclude`, other filesystems, unreadable or
//! replaced directories) is reported right here as skipped or failed.
//! Before a directory's files are looked at, what a killed run left in it
//! is dealt with: journals rolled back (only those migrate wrote,
//! `super::undo`), temporary files removed. A named path into the mount's
//! own files (`crate::trust::is_internal`) is left alone, silently.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::path::Path;

use nix::sys::stat::SFlag;

use super::report::{Outcome, Reason};
use super::undo::{self, Recovered};
use crate::sys;
use crate::walk::{is_denied, stat_at, Passed, Shard, Visitor, WalkOptions, Walker};

pub use crate::walk::{Entry, Root};

/// Reports per-path outcomes decided during the walk: (path, outcome, size).
pub type Emit<'e> = dyn FnMut(&Path, Outcome, Option<u64>) + 'e;

/// What the walk found: the files, the directories they are reached
/// through, and the named roots.
pub struct Found {
    pub files: Vec<Entry>,
    pub dirs: crate::walk::Dirs,
    pub roots: Vec<Root>,
}

/// Walks `paths` with `opts` (leaving what a killed run left behind alone
/// if `dry_run`); what is passed by goes to `emit`.
pub fn walk(
    paths: &[std::path::PathBuf],
    opts: WalkOptions,
    dry_run: bool,
    emit: &mut Emit,
) -> Found {
    let mut sight = Sight {
        emit,
        dry_run,
        shard: opts.shard,
    };
    let mut walker = Walker::new(opts);
    for p in paths {
        // A path into the mount's own files is left alone, silently.
        if p.components()
            .any(|c| crate::trust::is_internal(c.as_os_str()))
        {
            continue;
        }
        walker.root(p, &mut sight);
    }
    Found {
        files: walker.files,
        dirs: walker.dirs,
        roots: walker.roots,
    }
}

/// migrate's [`Visitor`]: reports, and a killed run's leftovers.
struct Sight<'s, 'e> {
    emit: &'s mut Emit<'e>,
    dry_run: bool,
    shard: Shard,
}

impl Visitor for Sight<'_, '_> {
    fn passed(&mut self, path: &Path, what: Passed) {
        let outcome = match what {
            Passed::Symlink => Outcome::Skipped(Reason::Symlink),
            Passed::Special(kind) => Outcome::Skipped(Reason::Special(kind)),
            Passed::Excluded => Outcome::Skipped(Reason::Excluded),
            Passed::OtherFilesystem => Outcome::Skipped(Reason::OtherFilesystem),
            Passed::Unstatable(e) if is_denied(&e) => {
                Outcome::Skipped(Reason::PermissionDenied("cannot stat".into()))
            }
            Passed::Unstatable(e) => Outcome::Failed(e.to_string()),
            Passed::Unlistable(e) if is_denied(&e) => {
                Outcome::Skipped(Reason::PermissionDenied("cannot list the directory".into()))
            }
            Passed::Unlistable(e) => Outcome::Failed(format!("cannot list the directory: {e}")),
            Passed::Replaced => Outcome::Failed(
                "the directory was moved or replaced during the walk; not entered".into(),
            ),
            Passed::Failed(msg) => Outcome::Failed(msg),
        };
        (self.emit)(path, outcome, None);
    }

    fn own(&mut self, dirf: &File, dir: &Path, name: &OsStr) -> bool {
        self.leftover(dirf, dir, name)
    }
}

impl Sight<'_, '_> {
    /// Whether `name` in the directory `dirf` (at `dir`) is a killed run's
    /// journal or temporary file; if this shard owns it and this is no dry
    /// run, deal with it.
    fn leftover(&mut self, dirf: &File, dir: &Path, name: &OsStr) -> bool {
        let (jkey, tkey) = (
            key_of(name, super::JOURNAL_PREFIX),
            key_of(name, super::TMP_PREFIX),
        );
        let key = match jkey.or(tkey) {
            Some(k) => k,
            None => return false,
        };
        // A run never makes a directory under such a name: a user's
        // directory is walked as any other (not failed at every run).
        // Anything else is judged below (a planted symlink journal is
        // refused and reported).
        if stat_at(dirf, name)
            .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
        {
            return false;
        }
        if self.dry_run || !self.shard.owns(key) {
            return true;
        }
        let path = dir.join(name);
        if jkey.is_some() {
            match undo::recover(dirf, name, &path) {
                Ok(Recovered::Incomplete) => (self.emit)(&path, Outcome::Cleaned, None),
                Ok(Recovered::RolledBack(target)) => {
                    (self.emit)(&dir.join(target), Outcome::RolledBack, None)
                }
                Ok(Recovered::Gone) => {}
                Err(msg) => (self.emit)(&path, Outcome::Failed(msg), None),
            }
        } else {
            // One name in a directory held: removes nothing its owner
            // could not remove.
            match sys::unlinkat(dirf, name, 0) {
                Ok(()) => (self.emit)(&path, Outcome::Cleaned, None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => (self.emit)(&path, Outcome::Failed(format!("cannot remove: {e}")), None),
            }
        }
        true
    }
}

/// Whether a name in a directory is the given prefix followed by a shard
/// key in hex; returns the key.
pub fn key_of(name: &OsStr, prefix: &str) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let rest = name.as_bytes().strip_prefix(prefix.as_bytes())?;
    let hex = std::str::from_utf8(rest.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}
