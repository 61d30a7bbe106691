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

use super::content::OpenFile;
use super::error::{Errno, Result};
use super::inodes::{Attached, Fd, Inode};
use super::share::Ticket;

pub struct FileHandle {
    pub inode: Arc<Inode>,
    pub file: Fd,
    /// Open for writing (O_WRONLY/O_RDWR from the caller).
    pub write: bool,
    /// The file's state, shared with its other handles.
    pub state: Arc<OpenFile>,
    /// The file's lost writes this handle was told of (`errseq`).
    pub lost: super::errseq::Seen,
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

/// A directory listing, compact: the names in one buffer (a listing of a
/// million entries costs about 16 bytes an entry besides its name).
#[derive(Default)]
pub struct Listing {
    names: Vec<u8>,
    items: Vec<Item>,
}

struct Item {
    ino: u64,
    /// Where the name ends in `names` (it starts where the last one ended).
    end: u32,
    kind: fuser::FileType,
}

impl Listing {
    /// Adds an entry; false (and nothing added) when the names would
    /// exceed 4 GiB.
    pub fn push(&mut self, ino: u64, kind: fuser::FileType, name: &OsStr) -> bool {
        let Ok(end) = u32::try_from(self.names.len() + name.len()) else {
            return false;
        };
        self.names.extend_from_slice(name.as_bytes());
        self.items.push(Item { ino, end, kind });
        true
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<DirEntry<'_>> {
        let it = self.items.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.items[i - 1].end as usize,
        };
        Some(DirEntry {
            ino: it.ino,
            kind: it.kind,
            name: OsStr::from_bytes(&self.names[start..it.end as usize]),
        })
    }

    /// The entries from position `start` on.
    pub fn from(&self, start: usize) -> impl Iterator<Item = (usize, DirEntry<'_>)> {
        (start..self.len()).filter_map(|i| self.get(i).map(|e| (i, e)))
    }

    /// Frees what the buffers hold beyond their contents.
    pub fn shrink(&mut self) {
        self.names.shrink_to_fit();
        self.items.shrink_to_fit();
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
