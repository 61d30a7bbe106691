//! The directories a run walks, and descriptors of them: every directory is
//! reached from its parent's descriptor by one name, never by a path
//! resolved again (`crate::trust` holds the argument).
//!
//! The walk records each directory it enters as a [`Dirs`] node: its
//! parent's node, its name there and its `(st_dev, st_ino)`. A descriptor
//! is opened when the walk or a worker needs one ([`Dirs::open`]) and kept
//! in a small cache ([`CACHE`] descriptors, least recently used out), so a
//! tree of any size costs a bounded number of descriptors; files are taken
//! in walk order, so the cache nearly always holds their directory. A
//! directory not in the cache is opened again from the nearest ancestor
//! that is, one name at a time (`O_DIRECTORY | O_NOFOLLOW`), each step's
//! identity compared with the node's: a directory renamed, replaced or
//! swapped for a symlink since the walk saw it is never entered ("moved or
//! replaced during the run"). A named root is opened at the path the
//! administrator gave, once; if it must be opened again, its identity is
//! checked the same way.
//!
//! Used by `crate::migrate`'s walk (which adds the nodes) and by its
//! workers and index database step (which only open).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::trust;

/// Directory descriptors kept open at most.
pub const CACHE: usize = 64;

/// Index of a directory in [`Dirs`].
pub type DirId = u32;

struct Node {
    /// The parent's node; None for a named root.
    parent: Option<DirId>,
    /// The name in the parent, or a named root's path as given.
    name: OsString,
    id: (u64, u64),
    /// A root whose path's last component may be a symlink (the directory
    /// of a named file).
    follow: bool,
}

/// Why a directory cannot be had.
#[derive(Debug)]
pub enum Lost {
    /// It (or a directory above it) is not the one the walk saw.
    Replaced,
    /// The system said no.
    Io(io::Error),
}

impl Lost {
    /// What an error reaching a directory by its name means: gone, or now
    /// a symlink or a file, is not the one the walk saw.
    fn of(e: io::Error) -> Lost {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR) => Lost::Replaced,
            _ => Lost::Io(e),
        }
    }
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Replaced => f.write_str("it was moved or replaced during the run"),
            Lost::Io(e) => e.fmt(f),
        }
    }
}

#[derive(Default)]
struct Cache {
    /// (node, descriptor, last use), at most [`CACHE`].
    open: Vec<(DirId, Arc<File>, u64)>,
    tick: u64,
}

impl Cache {
    fn get(&mut self, d: DirId) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        self.open.iter_mut().find(|e| e.0 == d).map(|e| {
            e.2 = tick;
            Arc::clone(&e.1)
        })
    }

    fn put(&mut self, d: DirId, f: Arc<File>) {
        self.tick += 1;
        if self.open.len() >= CACHE {
            if let Some(i) = (0..self.open.len()).min_by_key(|&i| self.open[i].2) {
                self.open.swap_remove(i);
            }
        }
        self.open.push((d, f, self.tick));
    }
}

fn open_root(path: &std::path::Path, follow: bool) -> io::Result<File> {
    if follow {
        crate::sys::open(path, libc::O_RDONLY | libc::O_DIRECTORY).map(File::from)
    } else {
        crate::sys::open_dir(path)
    }
}

/// The walked directories; see the module doc.
#[derive(Default)]
pub struct Dirs {
    nodes: Vec<Node>,
    cache: Mutex<Cache>,
}

impl Dirs {
    /// Opens a named root at `path` (a directory, resolved as given; its
    /// last component is not followed if it is a symlink, unless `follow`:
    /// the directory of a named file) and records it.
    pub fn add_root(
        &mut self,
        path: PathBuf,
        follow: bool,
    ) -> io::Result<(DirId, Arc<File>, (u64, u64))> {
        let f = open_root(&path, follow)?;
        let st = nix::sys::stat::fstat(&f).map_err(io::Error::from)?;
        let id = (st.st_dev, st.st_ino);
        let d = self.push(None, path.into_os_string(), id);
        self.nodes[d as usize].follow = follow;
        let f = Arc::new(f);
        self.cache.lock().put(d, Arc::clone(&f));
        Ok((d, f, id))
    }

    /// Records directory `name` of `parent` with the identity the walk saw
    /// (it is checked when the directory is opened).
    pub fn add(&mut self, parent: DirId, name: OsString, id: (u64, u64)) -> DirId {
        self.push(Some(parent), name, id)
    }

    fn push(&mut self, parent: Option<DirId>, name: OsString, id: (u64, u64)) -> DirId {
        let d = DirId::try_from(self.nodes.len()).expect("fewer than 2^32 directories");
        self.nodes.push(Node {
            parent,
            name,
            id,
            follow: false,
        });
        d
    }

    /// The `(st_dev, st_ino)` the walk saw.
    #[cfg(test)]
    pub fn id(&self, d: DirId) -> (u64, u64) {
        self.nodes[d as usize].id
    }

    /// A descriptor of directory `d`, the one the walk saw (see the module
    /// doc).
    pub fn open(&self, d: DirId) -> Result<Arc<File>, Lost> {
        let mut cache = self.cache.lock();
        if let Some(f) = cache.get(d) {
            return Ok(f);
        }
        // Up to the nearest ancestor held (or a root), then down again.
        let mut chain = vec![d];
        let mut base = None;
        while let Some(parent) = self.nodes[*chain.last().unwrap_or(&d) as usize].parent {
            if let Some(f) = cache.get(parent) {
                base = Some(f);
                break;
            }
            chain.push(parent);
        }
        let mut at = match base {
            Some(f) => f,
            None => {
                let top = chain.pop().unwrap_or(d);
                let node = &self.nodes[top as usize];
                let f =
                    open_root(std::path::Path::new(&node.name), node.follow).map_err(Lost::Io)?;
                let st = nix::sys::stat::fstat(&f).map_err(|e| Lost::Io(e.into()))?;
                if (st.st_dev, st.st_ino) != node.id {
                    return Err(Lost::Replaced);
                }
                let f = Arc::new(f);
                cache.put(top, Arc::clone(&f));
                f
            }
        };
        while let Some(next) = chain.pop() {
            let node = &self.nodes[next as usize];
            let (fd, st) = trust::enter_dir(at.as_fd(), &node.name).map_err(Lost::of)?;
            if (st.st_dev, st.st_ino) != node.id {
                return Err(Lost::Replaced);
            }
            let f = Arc::new(File::from(fd));
            cache.put(next, Arc::clone(&f));
            at = f;
        }
        Ok(at)
    }

    /// Whether directory `d` is still where the walk saw it: each link of
    /// its chain, from `d` up to its named root, checked by one `fstatat`
    /// of its name in its parent's descriptor (no symlink followed), and
    /// the root by its path as given; every `(st_dev, st_ino)` must be the
    /// one the walk recorded. A descriptor held (the cache's, a worker's)
    /// stays on a directory wherever it is moved: this is what tells a
    /// worker that the directory has left the named tree. Callers check
    /// right before each change they make in it (creating a temporary
    /// file, renaming into place, writing a journal); a move between the
    /// check and that one system call is not seen.
    pub fn still_there(&self, d: DirId) -> Result<(), Lost> {
        let mut at = d;
        loop {
            let node = &self.nodes[at as usize];
            let seen = match node.parent {
                Some(parent) => {
                    let pf = self.open(parent)?;
                    crate::sys::statat(&*pf, &node.name).map(|st| (st.st_dev, st.st_ino))
                }
                None => {
                    use std::os::unix::fs::MetadataExt;
                    let path = std::path::Path::new(&node.name);
                    let md = if node.follow {
                        std::fs::metadata(path)
                    } else {
                        std::fs::symlink_metadata(path)
                    };
                    md.map(|m| (m.dev(), m.ino()))
                }
            };
            if seen.map_err(Lost::of)? != node.id {
                return Err(Lost::Replaced);
            }
            match node.parent {
                Some(parent) => at = parent,
                None => return Ok(()),
            }
        }
    }

    /// Descriptors held in the cache now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.cache.lock().open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn id(p: &std::path::Path) -> (u64, u64) {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    #[test]
    fn a_deep_tree_costs_a_bounded_number_of_descriptors() {
        let t = tempfile::tempdir().unwrap();
        let mut dirs = Dirs::default();
        let (root, _, _) = dirs.add_root(t.path().to_path_buf(), false).unwrap();
        let mut path = t.path().to_path_buf();
        let mut parent = root;
        let mut all = Vec::new();
        for i in 0..300 {
            path.push(format!("d{i}"));
            std::fs::create_dir(&path).unwrap();
            parent = dirs.add(parent, format!("d{i}").into(), id(&path));
            all.push(parent);
        }
        for &d in all.iter().rev().chain(all.iter()) {
            let f = dirs.open(d).unwrap();
            let m = f.metadata().unwrap();
            assert_eq!((m.dev(), m.ino()), dirs.id(d));
            assert!(dirs.held() <= CACHE);
        }
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_is_never_entered() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::create_dir_all(outside.path().join("b")).unwrap();
        let mut dirs = Dirs::default();
        let (root, _, _) = dirs.add_root(t.path().to_path_buf(), false).unwrap();
        let a = dirs.add(root, "a".into(), id(&t.path().join("a")));
        let b = dirs.add(a, "b".into(), id(&t.path().join("a/b")));
        // Nothing of `a` or `b` is held yet; `a` becomes a symlink to a
        // directory that has a `b` too.
        std::fs::rename(t.path().join("a"), t.path().join("a.old")).unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("a")).unwrap();
        assert!(matches!(dirs.open(b), Err(Lost::Replaced)));
        assert!(matches!(dirs.open(a), Err(Lost::Replaced)));
        // A directory of the same name in its place is not it either.
        std::fs::remove_file(t.path().join("a")).unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        assert!(matches!(dirs.open(b), Err(Lost::Replaced)));
        // Put back, it is found again.
        std::fs::remove_dir_all(t.path().join("a")).unwrap();
        std::fs::rename(t.path().join("a.old"), t.path().join("a")).unwrap();
        assert!(dirs.open(b).is_ok());
    }
}
