//! The one walk of trees other users write, for `cutf8 check` and `cutf8
//! migrate`: the regular files under named paths, reached by descriptor.
//!
//! Walks each named path without following symlinks below it, without
//! leaving it and, if asked, without crossing into another filesystem:
//! each directory is entered from its parent's descriptor by one name
//! (`O_DIRECTORY | O_NOFOLLOW`, [`Dirs`]), checked to be the directory its
//! parent's listing showed (`(st_dev, st_ino)`), and listed through that
//! descriptor; each entry is looked at with `fstatat(AT_SYMLINK_NOFOLLOW)`
//! relative to it. Nothing is ever reached through a path resolved again.
//! A caller opens a file the same way: its directory's descriptor from
//! [`Dirs::open`] (identity checked again if it must be reopened), then
//! the one name with `crate::trust::reach` and `crate::trust::open_reached`
//! (regular files only). The mount's own files (names
//! `crate::trust::is_internal` claims) are neither entered nor reported,
//! at any level; the names a [`Visitor`] claims as its own are left to it.
//! Regular files are returned, each inode once with all its names
//! ([`Entry::links`]), by their directory's node and name; what the walk
//! passes by (symlinks, special files, excluded names, other filesystems,
//! directories it cannot list or that were replaced) is said to the
//! [`Visitor`] as it goes ([`Passed`]), for this shard's paths only
//! ([`Shard`]).
//!
//! # Why descriptors checked against the listing, and not `openat2`
//!
//! `cutf8 check` used to open every directory and file again from the
//! named root's descriptor by its relative path with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), while `cutf8 migrate` walked
//! as above. Both keep a walk inside the tree and off symlinks; the
//! descriptor walk is the stronger of the two, and now the only one:
//!
//! * **It reaches what was listed, not whatever has that path now.**
//!   `openat2` resolves the path again at each open: beneath the root and
//!   without symlinks, but any directory of the tree will do. A tree's
//!   owner who swaps two directories (or moves one of theirs in) between
//!   the listing and the open had check read one directory's files under
//!   the other's names. Here every directory's identity is compared with
//!   the listing's, and a replaced one is reported ("moved or replaced")
//!   and not entered.
//! * **One component at a time**, from a descriptor held: a name is never
//!   `/`, `.` or `..` (`crate::sys::component`), so there is no path for
//!   a rename to redirect, and an open costs one lookup, not one per
//!   level of the file's depth.
//! * **Plain `openat` and `fstatat`**: `openat2` needs Linux 5.6 and is
//!   refused (ENOSYS) by some container runtimes' seccomp profiles.
//! * **One argument**: `crate::trust` makes the case for descriptors and
//!   identity for the mount's journal, the index database and migrate;
//!   check now stands on that same argument, not on a second one.
//!
//! A tree of any size costs a bounded number of descriptors ([`CACHE`]).
//!
//! Sharding ([`Shard`]): every path has a key that depends on nothing but
//! the tree; a shard takes the files whose key it owns. A walk that is not
//! sharded uses [`Shard::ALL`].

mod dirs;
mod shard;

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use globset::GlobSet;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

pub use dirs::{DirId, Dirs, Lost, CACHE};
pub use shard::{inode_key, path_key, Shard};

/// A regular file found.
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
    /// Globs of paths (relative to the named root) or names passed by as
    /// [`Passed::Excluded`].
    pub exclude: &'a GlobSet,
    pub shard: Shard,
    /// Do not enter directories on another filesystem than their named
    /// root's ([`Passed::OtherFilesystem`]).
    pub one_file_system: bool,
    /// Names of directories neither entered nor reported.
    pub skip_dirs: &'a [&'a str],
    /// A named path that is a symlink is followed (as `cat` and `ls`
    /// follow the paths they are given), not passed by.
    pub follow_named: bool,
}

/// What the walk passed by, told to the [`Visitor`] with its path.
#[derive(Debug)]
pub enum Passed {
    Symlink,
    /// A FIFO, socket or device ("fifo", "socket", "block device",
    /// "character device", "unknown type").
    Special(&'static str),
    /// Matched [`WalkOptions::exclude`].
    Excluded,
    /// A directory on another filesystem ([`WalkOptions::one_file_system`]).
    OtherFilesystem,
    /// A name (or a named path) that cannot be looked at.
    Unstatable(io::Error),
    /// A directory that cannot be opened or listed.
    Unlistable(io::Error),
    /// A directory that is not the one its parent's listing showed any
    /// more (moved, or swapped for another directory or a symlink): not
    /// entered.
    Replaced,
    /// A named path that cannot be walked at all: why.
    Failed(String),
}

/// What a caller of the walk is told as it goes.
pub trait Visitor {
    /// `path` was passed by (and not returned), for `what` reason.
    fn passed(&mut self, path: &Path, what: Passed);
    /// Whether `name`, listed in the directory open as `dir` (at `path`),
    /// is the caller's own business and left out of the walk (migrate:
    /// what a killed run left). Called before anything else is done with
    /// the name. None by default.
    fn own(&mut self, _dir: &File, _path: &Path, _name: &OsStr) -> bool {
        false
    }
}

/// A named root: its directory node, and whether it was named as a
/// directory (rather than a file in it).
#[derive(Debug, Clone, Copy)]
pub struct Root {
    pub dir: DirId,
    pub named_dir: bool,
}

/// The walk's state across named roots.
pub struct Walker<'a> {
    opts: WalkOptions<'a>,
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

impl<'a> Walker<'a> {
    pub fn new(opts: WalkOptions<'a>) -> Self {
        Walker {
            opts,
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

    /// Tell `v` what was passed by at a path with key `rel`, if this shard
    /// owns it.
    fn pass(&self, v: &mut dyn Visitor, path: &Path, rel: &[u8], what: Passed) {
        if self.opts.shard.owns(path_key(rel)) {
            v.passed(path, what);
        }
    }

    /// Walk one named path: a directory's tree, or a named file (found in
    /// its parent directory, which is opened as given).
    pub fn root(&mut self, root: &Path, v: &mut dyn Visitor) {
        let md = if self.opts.follow_named {
            std::fs::metadata(root)
        } else {
            std::fs::symlink_metadata(root)
        };
        let md = match md {
            Ok(md) => md,
            Err(e) => return v.passed(root, Passed::Unstatable(e)),
        };
        if md.is_dir() {
            match self
                .dirs
                .add_root(root.to_path_buf(), self.opts.follow_named)
            {
                Ok((d, _, id)) => {
                    self.roots.push(Root {
                        dir: d,
                        named_dir: true,
                    });
                    self.dir(v, d, root.to_path_buf(), Vec::new(), id.0);
                }
                // Keyed as the root itself (the empty path), as below it.
                Err(e) => self.pass(v, root, &[], Passed::Unlistable(e)),
            }
            return;
        }
        // A named file: its key is its name, its directory its parent.
        let Some(name) = root.file_name().map(OsStr::to_owned) else {
            return v.passed(root, Passed::Failed("not a file name".into()));
        };
        let parent = match root.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (d, dirf) = match self.dirs.add_root(parent, true) {
            Ok((d, f, _)) => (d, f),
            Err(e) => return v.passed(root, Passed::Failed(format!("its directory: {e}"))),
        };
        self.roots.push(Root {
            dir: d,
            named_dir: false,
        });
        let st = match stat_at(&dirf, &name) {
            Ok(st) => st,
            Err(e) => return v.passed(root, Passed::Failed(e.to_string())),
        };
        let rel = name.as_bytes().to_vec();
        self.entry(v, root.to_path_buf(), (d, d), name, rel, &st);
    }

    /// A non-directory entry, in directory `at.0` under named root `at.1`.
    fn entry(
        &mut self,
        v: &mut dyn Visitor,
        path: PathBuf,
        at: (DirId, DirId),
        name: OsString,
        rel: Vec<u8>,
        st: &FileStat,
    ) {
        let (dir, root) = at;
        let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => None,
            SFlag::S_IFLNK => Some(Passed::Symlink),
            _ => Some(Passed::Special(special_kind(st.st_mode))),
        };
        if let Some(what) = kind {
            return self.pass(v, &path, &rel, what);
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
    fn dir(
        &mut self,
        v: &mut dyn Visitor,
        top: DirId,
        top_path: PathBuf,
        top_rel: Vec<u8>,
        dev: u64,
    ) {
        let root = top;
        let mut stack = vec![(top, top_path, top_rel)];
        while let Some((d, path, rel)) = stack.pop() {
            let dirf = match self.dirs.open(d) {
                Ok(f) => f,
                Err(Lost::Replaced) => {
                    self.pass(v, &path, &rel, Passed::Replaced);
                    continue;
                }
                Err(Lost::Io(e)) => {
                    self.pass(v, &path, &rel, Passed::Unlistable(e));
                    continue;
                }
            };
            let mut names = match list(&dirf) {
                Ok(n) => n,
                Err(e) => {
                    self.pass(v, &path, &rel, Passed::Unlistable(e));
                    continue;
                }
            };
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            // The mount's own files (its journal…) are never entered,
            // returned or reported, at any level.
            names.retain(|n| !crate::trust::is_internal(n));
            names.retain(|n| !v.own(&dirf, &path, n));
            let mut subdirs = Vec::new();
            for name in names {
                let child = path.join(&name);
                let crel = join_rel(&rel, &name);
                if self.excluded(&crel, &name) {
                    self.pass(v, &child, &crel, Passed::Excluded);
                    continue;
                }
                let st = match stat_at(&dirf, &name) {
                    Ok(st) => st,
                    // Gone since listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        self.pass(v, &child, &crel, Passed::Unstatable(e));
                        continue;
                    }
                };
                if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                    if self.opts.skip_dirs.iter().any(|s| name == **s) {
                        continue;
                    }
                    if self.opts.one_file_system && st.st_dev != dev {
                        self.pass(v, &child, &crel, Passed::OtherFilesystem);
                    } else {
                        let sub = self.dirs.add(d, name, (st.st_dev, st.st_ino));
                        subdirs.push((sub, child, crel));
                    }
                } else {
                    self.entry(v, child, (d, root), name, crel, &st);
                }
            }
            // Pop in name order.
            stack.extend(subdirs.into_iter().rev());
        }
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

/// The name a report gives a file that is neither regular nor a symlink,
/// by its mode (`st_mode`).
pub fn special_kind(mode: u32) -> &'static str {
    match SFlag::from_bits_truncate(mode) & SFlag::S_IFMT {
        SFlag::S_IFIFO => "fifo",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFCHR => "character device",
        SFlag::S_IFDIR => "directory",
        _ => "unknown type",
    }
}

/// Whether `e` is a refusal for want of permission (EACCES or EPERM).
pub fn is_denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` of one name.
pub fn stat_at(dir: &File, name: &OsStr) -> io::Result<FileStat> {
    let c = crate::sys::component(name)?;
    nix::sys::stat::fstatat(dir, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the walk passed by, as (path below the root, what).
    #[derive(Default)]
    struct Seen(Vec<(String, String)>);

    impl Visitor for Seen {
        fn passed(&mut self, path: &Path, what: Passed) {
            self.0
                .push((path.display().to_string(), format!("{what:?}")));
        }
    }

    fn opts<'a>(none: &'a GlobSet, skip: &'a [&'a str]) -> WalkOptions<'a> {
        WalkOptions {
            exclude: none,
            shard: Shard::ALL,
            one_file_system: false,
            skip_dirs: skip,
            follow_named: false,
        }
    }

    #[test]
    fn files_once_with_all_names_and_the_rest_passed_by() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        std::fs::create_dir_all(p.join("d/.git")).unwrap();
        std::fs::write(p.join("d/.git/config"), "x\n").unwrap();
        std::fs::write(p.join("d/a"), "a\n").unwrap();
        std::fs::hard_link(p.join("d/a"), p.join("b")).unwrap();
        std::fs::write(p.join(".cutf8fs-journal"), "ours\n").unwrap();
        std::os::unix::fs::symlink("/etc", p.join("s")).unwrap();
        nix::unistd::mkfifo(&p.join("f"), Mode::S_IRWXU).unwrap();
        let none = GlobSet::empty();
        let mut w = Walker::new(opts(&none, &[".git"]));
        let mut seen = Seen::default();
        w.root(p, &mut seen);
        let names: Vec<_> = w
            .files
            .iter()
            .map(|e| {
                let mut v = vec![e.path.strip_prefix(p).unwrap().display().to_string()];
                v.extend(
                    e.links
                        .iter()
                        .map(|l| l.path.strip_prefix(p).unwrap().display().to_string()),
                );
                v
            })
            .collect();
        assert_eq!(names, [["b", "d/a"]]);
        let mut passed: Vec<_> = seen
            .0
            .iter()
            .map(|(path, what)| (path.strip_prefix(&*p.to_string_lossy()).unwrap(), &**what))
            .collect();
        passed.sort();
        assert_eq!(
            passed,
            [("/f", "Special(\"fifo\")"), ("/s", "Symlink")],
            "the journal and .git are neither entered nor reported"
        );
    }

    #[test]
    fn a_directory_replaced_before_it_is_listed_is_passed_by() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        std::fs::create_dir_all(p.join("a")).unwrap();
        std::fs::write(p.join("a/x"), "x\n").unwrap();
        let none = GlobSet::empty();
        let mut w = Walker::new(opts(&none, &[]));
        let (root, _, _) = w.dirs.add_root(p.to_path_buf(), false).unwrap();
        // `a` as the listing saw it, then swapped for another directory.
        let st = stat_at(&File::open(p).unwrap(), OsStr::new("a")).unwrap();
        let a = w.dirs.add(root, "a".into(), (st.st_dev, st.st_ino));
        std::fs::rename(p.join("a"), p.join("old")).unwrap();
        std::fs::create_dir(p.join("a")).unwrap();
        std::fs::write(p.join("a/y"), "y\n").unwrap();
        let mut seen = Seen::default();
        w.dir(&mut seen, a, p.join("a"), b"a".to_vec(), st.st_dev);
        assert!(w.files.is_empty(), "{:?}", w.files);
        assert_eq!(seen.0.len(), 1);
        assert_eq!(seen.0[0].1, "Replaced");
    }
}
