//! Which files `cutf8 check` reads: the named inputs, each named directory
//! replaced by the regular files the one walk of trees others write
//! (`crate::walk`) finds under it.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::convert::{io_message, Input};
use crate::shown::display_path;
use crate::walk::{DirId, Dirs, Lost, Passed, Shard, Visitor, WalkOptions, Walker};

/// Directory names `check` does not descend into (as `cutf8 migrate`):
/// version-control metadata, which is not text for people.
pub const VCS_DIRS: [&str; 3] = [".git", ".hg", ".svn"];

/// One file to check: named on the command line (opened as given, as
/// `cat` would), or found under a named directory.
pub(super) enum Item {
    Named(Input),
    /// Found under a named directory: the walk's directories, the file's
    /// directory among them and its name there, and its full path for
    /// messages.
    Found(Rc<Dirs>, DirId, OsString, PathBuf),
}

impl Item {
    pub(super) fn name(&self) -> String {
        match self {
            Item::Named(i) => i.name(),
            Item::Found(_, _, _, full) => display_path(full),
        }
    }

    pub(super) fn open(&self) -> std::io::Result<Box<dyn Read>> {
        match self {
            Item::Named(i) => i.open(),
            Item::Found(dirs, dir, name, _) => Ok(Box::new(open_found(dirs, *dir, name)?)),
        }
    }
}

/// Opens `name` in directory `dir` of the walk the way the walk found it:
/// through the descriptor of the directory the walk listed (reached again,
/// if need be, from its parent's by one name, identity checked:
/// [`Dirs::open`]), no symbolic link followed, and only a regular file
/// (reached as `O_PATH` and checked with `fstat` first, so a FIFO or
/// device put in a file's place is never opened: `trust::reach` and
/// `trust::open_reached`, as migrate opens files). What the walk listed
/// may have been replaced since by whoever writes the tree.
fn open_found(dirs: &Dirs, dir: DirId, name: &OsStr) -> std::io::Result<std::fs::File> {
    let dir = dirs.open(dir).map_err(|lost| match lost {
        Lost::Replaced => {
            std::io::Error::other("its directory was moved or replaced during the run: not opened")
        }
        Lost::Io(e) => e,
    })?;
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

/// check's [`Visitor`]: what cannot be read is said and counted;
/// symlinks and special files are left out silently.
struct Unreadable<'d, 'u> {
    diag: &'d mut dyn FnMut(&str),
    count: &'u mut usize,
}

impl Visitor for Unreadable<'_, '_> {
    fn passed(&mut self, path: &Path, what: Passed) {
        let why = match what {
            Passed::Symlink | Passed::Special(_) | Passed::Excluded | Passed::OtherFilesystem => {
                return
            }
            Passed::Unstatable(e) | Passed::Unlistable(e) => io_message(&e),
            Passed::Replaced => {
                "the directory was moved or replaced during the walk; not entered".to_string()
            }
            Passed::Failed(msg) => msg,
        };
        (self.diag)(&format!("{}: {why}", display_path(path)));
        *self.count += 1;
    }
}

/// The named inputs with each directory replaced by the regular files
/// under it (recursively, sorted by path, each name of a multiply linked
/// file in its place, symlinks and special files left out, [`VCS_DIRS`]
/// and the mount's own files not entered). A named directory is opened
/// once, as named; below it the walk goes by descriptor, each directory
/// checked to be the one listed (`crate::walk`), and every file is opened
/// from its directory's descriptor ([`open_found`]), so a tree its owner
/// changes during the run cannot lead the check outside it, onto a FIFO,
/// or to read one directory's files under another's names. A directory
/// that cannot be listed (or was replaced) is reported to `diag` and
/// counted in `unreadable`.
pub(super) fn expand(
    inputs: &[Input],
    diag: &mut dyn FnMut(&str),
    unreadable: &mut usize,
) -> Vec<Item> {
    let none = globset::GlobSet::empty();
    let mut files = Vec::new();
    for input in inputs {
        match input {
            Input::Path(p) if p.is_dir() => {
                let mut walker = Walker::new(WalkOptions {
                    exclude: &none,
                    shard: Shard::ALL,
                    one_file_system: false,
                    skip_dirs: &VCS_DIRS,
                    follow_named: true,
                });
                walker.root(
                    p,
                    &mut Unreadable {
                        diag: &mut *diag,
                        count: &mut *unreadable,
                    },
                );
                let dirs = Rc::new(std::mem::take(&mut walker.dirs));
                let mut found: Vec<Item> = Vec::new();
                for e in walker.files {
                    for l in e.links {
                        found.push(Item::Found(dirs.clone(), l.dir, l.name, l.path));
                    }
                    found.push(Item::Found(dirs.clone(), e.dir, e.name, e.path));
                }
                // `Path`'s order, component by component: each directory's
                // entries by name, as `ls -R` would.
                found.sort_by(|a, b| match (a, b) {
                    (Item::Found(_, _, _, a), Item::Found(_, _, _, b)) => a.cmp(b),
                    _ => std::cmp::Ordering::Equal,
                });
                files.extend(found);
            }
            other => files.push(Item::Named(other.clone())),
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reading each found file gives now, by the name it was found
    /// under: its bytes, or the error's message.
    fn read_all(items: &[Item]) -> Vec<(String, Result<Vec<u8>, String>)> {
        items
            .iter()
            .map(|i| {
                let mut v = Vec::new();
                let r = i
                    .open()
                    .and_then(|mut f| f.read_to_end(&mut v))
                    .map(|_| v)
                    .map_err(|e| e.to_string());
                (i.name(), r)
            })
            .collect()
    }

    fn listed(top: &Path) -> Vec<Item> {
        let (mut said, mut unreadable) = (Vec::new(), 0);
        let items = expand(
            &[Input::Path(top.to_path_buf())],
            &mut |m| said.push(m.to_string()),
            &mut unreadable,
        );
        assert_eq!((unreadable, said), (0, Vec::<String>::new()));
        items
    }

    /// A directory of the tree swapped for a symbolic link to one outside
    /// after the listing: the file listed in it is read from the directory
    /// listed (held, or reached again with its identity checked) or not at
    /// all, never through the link.
    #[test]
    fn a_directory_swapped_for_a_symlink_leads_nowhere() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("sub/f"), "inside\n").unwrap();
        std::fs::write(outside.path().join("f"), "outside\n").unwrap();
        let items = listed(t.path());
        std::fs::rename(t.path().join("sub"), t.path().join("held")).unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("sub")).unwrap();
        let read = read_all(&items);
        assert_eq!(read.len(), 1);
        for (name, r) in read {
            if let Ok(bytes) = r {
                assert_eq!(bytes, b"inside\n", "{name} was read through the symlink");
            }
        }
    }

    /// Two directories of the tree swapped by its owner after the listing:
    /// a file is read as the one found under its name, or not at all
    /// (before, `a/x` was read from what had been `b`, and its findings
    /// printed under `a/x`). With more directories than the walk keeps
    /// open, `a` and `b` are reached again by name, and refused.
    #[test]
    fn a_file_is_read_under_the_name_it_was_found_by_or_not_at_all() {
        for more in [0, crate::walk::CACHE + 6] {
            let t = tempfile::tempdir().unwrap();
            for d in ["a", "b"] {
                std::fs::create_dir(t.path().join(d)).unwrap();
                std::fs::write(t.path().join(d).join("x"), format!("in {d}\n")).unwrap();
            }
            for i in 0..more {
                std::fs::create_dir(t.path().join(format!("m{i:03}"))).unwrap();
            }
            let items = listed(t.path());
            std::fs::rename(t.path().join("a"), t.path().join("c")).unwrap();
            std::fs::rename(t.path().join("b"), t.path().join("a")).unwrap();
            std::fs::rename(t.path().join("c"), t.path().join("b")).unwrap();
            let read = read_all(&items);
            assert_eq!(read.len(), 2);
            let mut refused = 0;
            for (name, r) in read {
                let d = if name.ends_with("a/x") { "a" } else { "b" };
                match r {
                    Ok(bytes) => assert_eq!(bytes, format!("in {d}\n").into_bytes(), "{name}"),
                    Err(e) => {
                        assert!(e.contains("moved or replaced"), "{name}: {e}");
                        refused += 1;
                    }
                }
            }
            if more > 0 {
                assert_eq!(refused, 2, "reached again by name, yet not refused");
            }
        }
    }
}
