//! Open file and directory handles: FUSE `fh` numbers → open descriptors.
//!
//! A handle lives from open/create/opendir to release/releasedir. Numbers
//! only grow and are never reused, so a stale number from the kernel can
//! only miss (EBADF), never reach another file. A file handle holds its
//! inode's entry (`Arc<Inode>`), so the per-file state it shares with the
//! other handles of the same file (`content::FileState`) outlives it.
//!
//! This module only stores handles; what they mean is decided in `mod.rs`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::error::{Errno, Result};
use super::inodes::Inode;

pub struct FileHandle {
    pub inode: Arc<Inode>,
    pub file: File,
    /// Open for writing (O_WRONLY/O_RDWR from the caller).
    pub write: bool,
    /// Keeps the inode's descriptor open while the file is (`inodes`).
    pub _pin: super::inodes::Pinned,
}

/// One directory entry as read at opendir (or at a rewind).
pub struct DirEntry {
    pub ino: u64,
    pub kind: fuser::FileType,
    pub name: OsString,
}

pub struct DirHandle {
    pub inode: Arc<Inode>,
    pub dir: File,
    /// The listing served to readdir; offsets are positions in it plus one.
    pub entries: Mutex<Vec<DirEntry>>,
    /// Keeps the inode's descriptor open while the directory is.
    pub _pin: super::inodes::Pinned,
}

impl DirHandle {
    pub fn entries(&self) -> MutexGuard<'_, Vec<DirEntry>> {
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
