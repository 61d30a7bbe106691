//! Find the files a run (or its shard) converts.
//!
//! Walks each named path without following symlinks, without leaving it
//! and, unless asked, without crossing into another filesystem, by
//! descriptors (`crate::walk`, `crate::trust`): each directory is entered
//! from its parent's descriptor by one name (`O_DIRECTORY | O_NOFOLLOW`),
//! checked to be the directory its parent's listing showed, and listed
//! through that descriptor; each entry is looked at with `fstatat` relative
//! to it. Nothing is ever reached through a path resolved again, so a
//! directory swapped for a symlink during the walk leads nowhere. Skips
//! decided from the directory entry alone (symlinks, special files,
//! `--exclude`, other filesystems, unreadable directories) are reported
//! right here. The mount's own files (names `crate::trust::is_internal`
//! claims, such as `.cutf8fs-journal`, at any level) are neither entered
//! nor reported; regular files are returned, each inode once with all its
//! names, by their directory's node and name. Before a directory's files
//! are looked at, what a killed run left in it is dealt with: journals
//! rolled back (only those migrate wrote, `super::undo`), temporary
//! files removed.
//!
//! Sharding ([`Shard`], `crate::walk`): every path has a key that depends
//! on nothing but the tree; a shard takes the files whose key it owns.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use globset::GlobSet;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::report::{Outcome, Reason};
use super::undo::{self, Recovered};
use crate::sys;
use crate::walk::{inode_key, path_key, stat_at, DirId, Dirs, Lost, Shard};

/// A regular file to convert.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The path as the user would write it (named root joined with the
    /// names below it), for reports only: the file is reached by `dir`
    /// and `name`.
    pub path: PathBuf,
    /// Its directory (a node of the walk's [`Dirs`]), and the named root
    /// it was found under.
    pub dir: DirId,
    pub root: DirId,
    pub name: OsString,
    pub size: u64,
    pub key: u64,
    /// Further names of the same inode (hard links) found in the walk.
    pub links: Vec<Link>,
}

/// Another name of an [`Entry`]'s inode, found in the walk.
#[derive(Debug, Clone)]
pub struct Link {
    /// For reports only, as [`Entry::path`].
    pub path: PathBuf,
    pub dir: DirId,
    pub name: OsString,
}

/// How to walk.
pub struct WalkOptions<'a> {
    pub exclude: &'a GlobSet,
    pub shard: Shard,
    pub one_file_system: bool,
    /// Leave what a killed run left behind alone (`--dry-run`).
    pub dry_run: bool,
}

/// Reports per-path outcomes decided during the walk: (path, outcome, size).
pub type Emit<'e> = dyn FnMut(&Path, Outcome, Option<u64>) + 'e;

/// A named root: its directory node, and whether it was named as a
/// directory (rather than a file in it).
#[derive(Debug, Clone, Copy)]
pub struct Root {
    pub dir: DirId,
    pub named_dir: bool,
}

/// The walk's state across named roots.
pub struct Walker<'a, 'e> {
    opts: WalkOptions<'a>,
    emit: &'e mut Emit<'e>,
    pub files: Vec<Entry>,
    /// Every directory entered (the workers reach files through it).
    pub dirs: Dirs,
    pub roots: Vec<Root>,
    /// (dev, ino) of multiply linked files → index in `files`.
    inodes: HashMap<(u64, u64), usize>,
    /// (dev, ino) of the singly linked files taken, so that overlapping
    /// named paths do not hand one file to two workers.
    seen: HashSet<(u64, u64)>,
}

fn join_rel(rel: &[u8], name: &OsStr) -> Vec<u8> {
    let mut r = rel.to_vec();
    if !r.is_empty() {
        r.push(b'/');
    }
    r.extend_from_slice(name.as_bytes());
    r
}

fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

impl<'a, 'e> Walker<'a, 'e> {
    pub fn new(opts: WalkOptions<'a>, emit: &'e mut Emit<'e>) -> Self {
        Walker {
            opts,
            emit,
            files: Vec::new(),
            dirs: Dirs::default(),
            roots: Vec::new(),
            inodes: HashMap::new(),
            seen: HashSet::new(),
        }
    }

    fn excluded(&self, rel: &[u8], name: &OsStr) -> bool {
        !self.opts.exclude.is_empty()
            && (self
                .opts
                .exclude
                .is_match(Path::new(OsStr::from_bytes(rel)))
                || self.opts.exclude.is_match(Path::new(name)))
    }

    /// Report `outcome` for a path with key `rel`, if this shard owns it.
    fn report(&mut self, path: &Path, rel: &[u8], outcome: Outcome, size: Option<u64>) {
        if self.opts.shard.owns(path_key(rel)) {
            (self.emit)(path, outcome, size);
        }
    }

    /// Walk one named path.
    pub fn root(&mut self, root: &Path) {
        // A path into the mount's own files is left alone, silently.
        if root
            .components()
            .any(|c| crate::trust::is_internal(c.as_os_str()))
        {
            return;
        }
        let md = match std::fs::symlink_metadata(root) {
            Ok(md) => md,
            Err(e) if is_denied(&e) => {
                let r = Reason::PermissionDenied("cannot stat".into());
                (self.emit)(root, Outcome::Skipped(r), None);
                return;
            }
            Err(e) => {
                (self.emit)(root, Outcome::Failed(e.to_string()), None);
                return;
            }
        };
        if md.is_dir() {
            match self.dirs.add_root(root.to_path_buf(), false) {
                Ok((d, _, id)) => {
                    self.roots.push(Root {
                        dir: d,
                        named_dir: true,
                    });
                    self.dir(d, root.to_path_buf(), Vec::new(), id.0);
                }
                Err(e) => self.cannot_open(root, &[], e),
            }
            return;
        }
        // A named file: its key is its name, its directory its parent.
        let name = match root.file_name() {
            Some(n) => n.to_owned(),
            None => {
                (self.emit)(root, Outcome::Failed("not a file name".into()), None);
                return;
            }
        };
        let parent = match root.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (d, dirf) = match self.dirs.add_root(parent, true) {
            Ok((d, f, _)) => (d, f),
            Err(e) => {
                (self.emit)(root, Outcome::Failed(format!("its directory: {e}")), None);
                return;
            }
        };
        self.roots.push(Root {
            dir: d,
            named_dir: false,
        });
        let st = match stat_at(&dirf, &name) {
            Ok(st) => st,
            Err(e) => {
                (self.emit)(root, Outcome::Failed(e.to_string()), None);
                return;
            }
        };
        let rel = name.as_bytes().to_vec();
        self.entry(root.to_path_buf(), d, d, name, rel, &st);
    }

    /// Reports a directory that cannot be opened or listed.
    fn cannot_open(&mut self, path: &Path, rel: &[u8], e: io::Error) {
        if is_denied(&e) {
            let r = Reason::PermissionDenied("cannot list the directory".into());
            self.report(path, rel, Outcome::Skipped(r), None);
        } else {
            let msg = format!("cannot list the directory: {e}");
            self.report(path, rel, Outcome::Failed(msg), None);
        }
    }

    /// A non-directory entry, in directory `dir` under named root `root`.
    fn entry(
        &mut self,
        path: PathBuf,
        dir: DirId,
        root: DirId,
        name: OsString,
        rel: Vec<u8>,
        st: &FileStat,
    ) {
        let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => None,
            SFlag::S_IFLNK => Some(Reason::Symlink),
            SFlag::S_IFIFO => Some(Reason::Special("fifo")),
            SFlag::S_IFSOCK => Some(Reason::Special("socket")),
            SFlag::S_IFBLK => Some(Reason::Special("block device")),
            SFlag::S_IFCHR => Some(Reason::Special("character device")),
            _ => Some(Reason::Special("unknown type")),
        };
        if let Some(reason) = kind {
            self.report(&path, &rel, Outcome::Skipped(reason), None);
            return;
        }
        let id = (st.st_dev, st.st_ino);
        let multiply = st.st_nlink > 1;
        let key = if multiply {
            inode_key(st.st_ino)
        } else {
            path_key(&rel)
        };
        if !self.opts.shard.owns(key) {
            return;
        }
        if multiply {
            if let Some(&i) = self.inodes.get(&id) {
                self.files[i].links.push(Link { path, dir, name });
                return;
            }
            self.inodes.insert(id, self.files.len());
        } else if !self.seen.insert(id) {
            return;
        }
        self.files.push(Entry {
            path,
            dir,
            root,
            name,
            size: st.st_size as u64,
            key,
            links: Vec::new(),
        });
    }

    /// Walk a directory tree, depth first, without recursion.
    fn dir(&mut self, top: DirId, top_path: PathBuf, top_rel: Vec<u8>, dev: u64) {
        let root = top;
        let mut stack = vec![(top, top_path, top_rel)];
        while let Some((d, path, rel)) = stack.pop() {
            let dirf = match self.dirs.open(d) {
                Ok(f) => f,
                Err(Lost::Replaced) => {
                    let msg = "the directory was moved or replaced during the walk; not entered";
                    self.report(&path, &rel, Outcome::Failed(msg.into()), None);
                    continue;
                }
                Err(Lost::Io(e)) => {
                    self.cannot_open(&path, &rel, e);
                    continue;
                }
            };
            let mut names = match list(&dirf) {
                Ok(n) => n,
                Err(e) => {
                    self.cannot_open(&path, &rel, e);
                    continue;
                }
            };
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            // The mount's own files (its journal…) are never entered,
            // converted or reported, at any level.
            names.retain(|n| !crate::trust::is_internal(n));
            names.retain(|n| !self.leftover(&dirf, &path, n));
            let mut subdirs = Vec::new();
            for name in names {
                let child = path.join(&name);
                let crel = join_rel(&rel, &name);
                if self.excluded(&crel, &name) {
                    self.report(&child, &crel, Outcome::Skipped(Reason::Excluded), None);
                    continue;
                }
                let st = match stat_at(&dirf, &name) {
                    Ok(st) => st,
                    Err(e) if is_denied(&e) => {
                        let r = Reason::PermissionDenied("cannot stat".into());
                        self.report(&child, &crel, Outcome::Skipped(r), None);
                        continue;
                    }
                    // Gone since listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.report(&child, &crel, Outcome::Failed(e.to_string()), None);
                        continue;
                    }
                };
                if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                    if self.opts.one_file_system && st.st_dev != dev {
                        let r = Outcome::Skipped(Reason::OtherFilesystem);
                        self.report(&child, &crel, r, None);
                    } else {
                        let sub = self.dirs.add(d, name, (st.st_dev, st.st_ino));
                        subdirs.push((sub, child, crel));
                    }
                } else {
                    self.entry(child, d, root, name, crel, &st);
                }
            }
            // Pop in name order.
            stack.extend(subdirs.into_iter().rev());
        }
    }

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
        if self.opts.dry_run || !self.opts.shard.owns(key) {
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

/// The names in the directory open as `dir` (through its own descriptor
/// of `.`: the same directory, never a path).
fn list(dir: &File) -> io::Result<Vec<OsString>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut d = nix::dir::Dir::openat(dir.as_fd(), ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_owned());
        }
    }
    Ok(names)
}

/// Whether a name in a directory is the given prefix followed by a shard
/// key in hex; returns the key.
pub fn key_of(name: &OsStr, prefix: &str) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let rest = name.as_bytes().strip_prefix(prefix.as_bytes())?;
    let hex = std::str::from_utf8(rest.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}
