//! Open file and directory handles: FUSE `fh` numbers → open descriptors.
//!
//! A handle lives from open/create/opendir to release/releasedir. Numbers
//! only grow and are never reused, so a stale number from the kernel can
//! only miss (EBADF), never reach another file. A handle is attached to
//! its inode (`inodes::Attached`): its descriptor serves as the inode's
//! while it is open, and a file handle shares the per-file state
//! (`content::OpenFile`) with the other handles of the same file. It
//! holds one descriptor, counted against its user's share (`share::Ticket`).
//!
//! This module only stores handles; what they mean is decided in `mod.rs`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::fs::frontend::error::{Errno, Result};
use crate::fs::state::content::OpenFile;
use crate::fs::state::inodes::{Attached, Fd, Inode};
use crate::fs::state::share::Ticket;

pub struct FileHandle {
    pub inode: Arc<Inode>,
    pub file: Fd,
    /// Open for writing (O_WRONLY/O_RDWR from the caller).
    pub write: bool,
    /// Open for appending: answered with FOPEN_DIRECT_IO, so the kernel
    /// keeps no page cache for its reads and writes (`finish`).
    pub append: bool,
    /// The file's state, shared with its other handles.
    pub state: Arc<OpenFile>,
    /// The file's lost writes this handle was told of (`errseq`).
    pub lost: crate::fs::state::errseq::ErrorsTold,
    /// Attached to the inode: keeps `state`, and `file` as its descriptor.
    pub _attached: Attached,
    /// The descriptor counted against the opener's share.
    pub _ticket: Ticket,
}

/// One directory entry as read at opendir (or at a rewind).
#[derive(Clone, Copy)]
pub struct DirEntry<'a> {
    pub ino: u64,
    pub kind: fuser::FileType,
    pub name: &'a OsStr,
}

/// A directory listing, compact: the names in one buffer, and per entry
/// its inode number and where its name ends (12 bytes an entry besides its
/// name).
#[derive(Default)]
pub struct Listing {
    names: Vec<u8>,
    inos: Vec<u64>,
    /// Where each name ends in `names` (it starts where the last one
    /// ended; low [`END_BITS`] bits) and the entry's file type (above).
    ends: Vec<u32>,
    /// Entries before this position had their records read ahead from the
    /// index database (readdirplus: `CutFs::read_ahead`).
    pub read_ahead: usize,
}

/// Bits of `Listing::ends` that say where a name ends: a listing's names
/// take at most 256 MiB (a million names of the longest, 255 bytes, fit).
const END_BITS: u32 = 28;

const KINDS: [fuser::FileType; 7] = [
    fuser::FileType::RegularFile,
    fuser::FileType::Directory,
    fuser::FileType::Symlink,
    fuser::FileType::NamedPipe,
    fuser::FileType::CharDevice,
    fuser::FileType::BlockDevice,
    fuser::FileType::Socket,
];

impl Listing {
    /// Adds an entry; false (and nothing added) when the names would
    /// exceed 256 MiB.
    pub fn push(&mut self, ino: u64, kind: fuser::FileType, name: &OsStr) -> bool {
        let end = self.names.len() + name.len();
        if end >= 1 << END_BITS {
            return false;
        }
        let k = KINDS.iter().position(|&t| t == kind).unwrap_or(0) as u32;
        self.names.extend_from_slice(name.as_bytes());
        self.inos.push(ino);
        self.ends.push(end as u32 | (k << END_BITS));
        true
    }

    pub fn len(&self) -> usize {
        self.inos.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inos.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<DirEntry<'_>> {
        let mask = (1 << END_BITS) - 1;
        let ino = *self.inos.get(i)?;
        let e = *self.ends.get(i)?;
        let start = match i {
            0 => 0,
            _ => (self.ends[i - 1] & mask) as usize,
        };
        Some(DirEntry {
            ino,
            kind: KINDS[(e >> END_BITS) as usize % KINDS.len()],
            name: OsStr::from_bytes(&self.names[start..(e & mask) as usize]),
        })
    }

    /// The entries from position `start` on.
    pub fn from(&self, start: usize) -> impl Iterator<Item = (usize, DirEntry<'_>)> {
        (start..self.len()).filter_map(|i| self.get(i).map(|e| (i, e)))
    }

    /// Frees what the buffers hold beyond their contents.
    pub fn shrink(&mut self) {
        self.names.shrink_to_fit();
        self.inos.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

pub struct DirHandle {
    pub inode: Arc<Inode>,
    pub dir: Fd,
    /// The listing served to readdir; offsets are positions in it plus one.
    pub entries: Mutex<Listing>,
    /// Attached to the inode: `dir` serves as its descriptor.
    pub _attached: Attached,
    /// The descriptor counted against the opener's share.
    pub _ticket: Ticket,
}

impl DirHandle {
    pub fn entries(&self) -> MutexGuard<'_, Listing> {
        self.entries.lock()
    }
}

pub enum Handle {
    File(FileHandle),
    Dir(DirHandle),
}

/// Lock order: `map` is a leaf (held for one map update); a directory
/// handle's `entries` is taken after the handle is out of the map.
pub struct HandleTable {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<Handle>>>,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            next: AtomicU64::new(1),
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl HandleTable {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.map.lock()
    }

    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, Arc::new(h));
        fh
    }

    pub fn get(&self, fh: u64) -> Result<Arc<Handle>> {
        self.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    pub fn file(&self, fh: u64) -> Result<Arc<Handle>> {
        let h = self.get(fh)?;
        match *h {
            Handle::File(_) => Ok(h),
            Handle::Dir(_) => Err(Errno::EISDIR),
        }
    }

    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        self.lock().remove(&fh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry reads back as pushed: number, type and name, at every
    /// position, the empty first name and the longest included.
    #[test]
    fn a_listing_gives_back_what_it_was_given() {
        let mut l = Listing::default();
        let long = "n".repeat(255);
        let mut want = Vec::new();
        for (i, &kind) in KINDS.iter().cycle().take(40).enumerate() {
            let name = match i {
                3 => long.clone(),
                _ => format!("e{i}"),
            };
            let ino = u64::MAX - i as u64;
            assert!(l.push(ino, kind, OsStr::new(&name)));
            want.push((ino, kind, name));
        }
        l.shrink();
        assert_eq!(l.len(), want.len());
        for (i, e) in l.from(0) {
            let (ino, kind, name) = &want[i];
            assert_eq!((e.ino, e.kind, e.name), (*ino, *kind, OsStr::new(name)));
        }
        assert!(l.get(want.len()).is_none());
    }
}
