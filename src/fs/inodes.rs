//! The inode table: FUSE inode numbers ↔ backing inodes, with lookup counts.
//!
//! Each entry holds an `O_PATH | O_NOFOLLOW` descriptor of its backing inode,
//! so an entry follows its file through renames, stays valid while the file
//! is unlinked but still known to the kernel, and cannot be swapped for
//! another file by a rename in BACKING. Entries are keyed by the backing
//! (st_dev, st_ino): every hard link of a file is one entry. The FUSE number
//! is the backing st_ino (stable across mounts) for files on BACKING's own
//! filesystem; files on other filesystems mounted inside BACKING get numbers
//! from a private range (stable while the kernel remembers them).
//!
//! Lookup counts follow the kernel's: every reply that hands the kernel an
//! entry (lookup, create, mkdir, mknod, symlink, link, readdirplus) adds
//! one, `forget` subtracts; at zero the entry and its descriptor go. The
//! root is never forgotten.
//!
//! Per-file state for regular files (`content::FileState`: the content lock
//! and what is known of the encoding) hangs off the entry, so every handle
//! of a file shares it. This module knows nothing of encodings or handles.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::content::FileState;
use super::error::{io, Errno, Result};
use super::sys;

/// FUSE's number for the root directory.
pub const ROOT: u64 = 1;

/// Numbers for files on other filesystems start here.
const FOREIGN_BASE: u64 = 1 << 63;

/// A backing inode's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub dev: u64,
    pub ino: u64,
}

impl Key {
    pub fn of(st: &libc::stat) -> Key {
        Key {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// One backing inode known to the kernel.
pub struct Inode {
    /// The FUSE inode number.
    pub ino: u64,
    pub key: Key,
    /// `S_IFMT` bits of the backing file (they never change for an inode).
    pub fmt: libc::mode_t,
    /// `O_PATH` descriptor; never used for I/O directly.
    fd: OwnedFd,
    /// Shared state of a regular file, created on first use.
    state: OnceLock<Arc<FileState>>,
}

impl Inode {
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn is_reg(&self) -> bool {
        self.fmt == libc::S_IFREG
    }

    pub fn is_dir(&self) -> bool {
        self.fmt == libc::S_IFDIR
    }

    /// Fresh attributes of the backing inode.
    pub fn stat(&self) -> Result<libc::stat> {
        sys::fstat(self.fd()).map_err(io)
    }

    /// The per-file state shared by all handles of a regular file.
    pub fn state(&self) -> &Arc<FileState> {
        self.state.get_or_init(|| Arc::new(FileState::new()))
    }
}

struct Entry {
    inode: Arc<Inode>,
    lookups: u64,
}

#[derive(Default)]
struct Tables {
    by_ino: HashMap<u64, Entry>,
    by_key: HashMap<Key, u64>,
    next_foreign: u64,
}

/// The table. One mutex guards both maps; it is held only for map updates,
/// never across a system call that could block on BACKING.
pub struct InodeTable {
    root_key: Key,
    tables: Mutex<Tables>,
}

impl InodeTable {
    /// A table whose root is the directory behind `root` (an `O_PATH`
    /// descriptor of BACKING).
    pub fn new(root: OwnedFd) -> std::io::Result<InodeTable> {
        let st = sys::fstat(root.as_fd())?;
        let key = Key::of(&st);
        let inode = Arc::new(Inode {
            ino: ROOT,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            fd: root,
            state: OnceLock::new(),
        });
        let mut t = Tables {
            next_foreign: FOREIGN_BASE,
            ..Tables::default()
        };
        t.by_ino.insert(ROOT, Entry { inode, lookups: 1 });
        t.by_key.insert(key, ROOT);
        Ok(InodeTable {
            root_key: key,
            tables: Mutex::new(t),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding this lock cannot leave the maps half-updated
        // (each update is one insert/remove pair), so a poisoned lock is fine.
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry for a FUSE number the kernel holds.
    pub fn get(&self, ino: u64) -> Result<Arc<Inode>> {
        self.lock()
            .by_ino
            .get(&ino)
            .map(|e| e.inode.clone())
            .ok_or(Errno::ESTALE)
    }

    /// Looks `name` up in directory `parent` and counts one lookup: the
    /// caller must hand the result to the kernel (or call `forget`).
    /// Returns the entry and the fresh attributes.
    pub fn lookup(&self, parent: &Inode, name: &CStr) -> Result<(Arc<Inode>, libc::stat)> {
        // Known inodes (the common case) cost one fstatat: the stat names an
        // inode we hold open, so it cannot be another file with a reused
        // number.
        let st = sys::statat(parent.fd(), name).map_err(io)?;
        if let Some(inode) = self.count_known(Key::of(&st)) {
            return Ok((inode, st));
        }
        let fd = sys::open_path(parent.fd(), name).map_err(io)?;
        let st = sys::fstat(fd.as_fd()).map_err(io)?;
        Ok((self.insert(fd, &st), st))
    }

    /// Counts one more lookup of an entry already in the table.
    fn count_known(&self, key: Key) -> Option<Arc<Inode>> {
        let mut t = self.lock();
        let ino = *t.by_key.get(&key)?;
        let e = t.by_ino.get_mut(&ino)?;
        e.lookups += 1;
        Some(e.inode.clone())
    }

    /// Enters a descriptor (or counts one more lookup of its existing entry).
    pub fn insert(&self, fd: OwnedFd, st: &libc::stat) -> Arc<Inode> {
        let key = Key::of(st);
        let mut t = self.lock();
        if let Some(&ino) = t.by_key.get(&key) {
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.lookups += 1;
                // The descriptor we hold and `fd` name the same inode (we hold
                // it open, so its number cannot have been reused).
                return e.inode.clone();
            }
        }
        let ino = if key.dev == self.root_key.dev && key.ino > ROOT && key.ino < FOREIGN_BASE {
            key.ino
        } else {
            t.next_foreign += 1;
            t.next_foreign
        };
        let inode = Arc::new(Inode {
            ino,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            fd,
            state: OnceLock::new(),
        });
        t.by_ino.insert(
            ino,
            Entry {
                inode: inode.clone(),
                lookups: 1,
            },
        );
        t.by_key.insert(key, ino);
        inode
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let mut t = self.lock();
        let gone = match t.by_ino.get_mut(&ino) {
            Some(e) => {
                e.lookups = e.lookups.saturating_sub(n);
                (e.lookups == 0).then_some(e.inode.key)
            }
            None => None,
        };
        if let Some(key) = gone {
            t.by_ino.remove(&ino);
            if t.by_key.get(&key) == Some(&ino) {
                t.by_key.remove(&key);
            }
        }
    }
}
