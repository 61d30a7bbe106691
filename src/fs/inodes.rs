//! The inode table: FUSE inode numbers ↔ backing inodes, with lookup counts,
//! and the bounded cache of open descriptors behind them.
//!
//! **Identity.** Entries are keyed by the backing (st_dev, st_ino): every
//! hard link of a file is one entry. The FUSE number is the backing st_ino
//! (stable across mounts) for files on BACKING's own filesystem; files on
//! other filesystems mounted inside BACKING get numbers from a private range
//! (stable while the kernel remembers them). Lookup counts follow the
//! kernel's: every reply that hands the kernel an entry (lookup, create,
//! mkdir, mknod, symlink, link, readdirplus) adds one, `forget` subtracts;
//! at zero the entry goes. The root is never forgotten.
//!
//! **Descriptors, bounded.** The kernel may remember millions of inodes; the
//! daemon may hold only so many descriptors. So an entry does not keep its
//! file open: it keeps a way back to it, and an `O_PATH` descriptor only
//! while that sits in a cache of at most `cap` descriptors (a quarter of the
//! soft open-file limit, between 16 and 16 384), evicted by CLOCK (a
//! descriptor used since the hand last passed gets a second chance). The
//! way back, as in virtiofsd and libfuse's passthrough_hp:
//!
//! * a **file handle** (`name_to_handle_at`), reopened with
//!   `open_by_handle_at` against a descriptor of its filesystem (BACKING's
//!   root, or the root of a filesystem mounted inside it: one descriptor
//!   per filesystem). A
//!   handle names the inode and its generation, not a path: a rename
//!   anywhere cannot make it name another file, a deleted file's handle
//!   fails with ESTALE, and no path is walked, so no symlink is followed.
//!   This needs CAP_DAC_READ_SEARCH (a root daemon); it is probed once at
//!   start.
//! * otherwise (a daemon without that capability, a filesystem without
//!   handles, or `CUTF8FS_NO_FILE_HANDLES=1` in the environment, for tests):
//!   the **(parent entry, name)** the inode was last looked up, created or
//!   renamed through the mount as, reopened with `openat(parent, name,
//!   O_PATH | O_NOFOLLOW)` and accepted only if it is still the same
//!   (st_dev, st_ino); anything else — the name gone, or now another file
//!   after a rename in BACKING — is ESTALE, and the kernel looks the name up
//!   again. Each step is one component from a parent verified the same way,
//!   up to the root descriptor, never following a symlink, so nothing
//!   outside BACKING can be reached. (A file unlinked by the recorded name
//!   but still linked elsewhere is ESTALE until looked up again.)
//!
//! While the cache holds an inode's descriptor, its number cannot be reused
//! by a new file; when it does not, a lookup of a known number checks the
//! handle and takes the new file's if the old one is gone. Reopening by
//! name cannot tell a file deleted in BACKING from a new file that got its
//! number (no generation without an open file); the kernel, which sees the
//! same FUSE number for both, cannot either: the entry moves to the new
//! file, and the content cache's stamps keep the old file's bytes from
//! being served for it.
//!
//! **Pinned.** An inode open through the mount keeps its descriptor
//! (`Pinned`, held by each file and directory handle), so a file unlinked
//! (or a directory removed) while open still answers fstat, fchmod and the
//! like. Open file handles hold one
//! more descriptor each (`handles`); the kernel protocol has no bound on
//! them. So the daemon holds at most `cap` + 2 × (open files) + open
//! directories + a few for the session. At the limit, an open or lookup
//! first empties half the cache and tries again; if that is not enough the
//! caller gets EMFILE/ENFILE and the log a line naming the path.
//!
//! Per-file state for regular files (`content::FileState`: the content lock
//! and what is known of the encoding) hangs off the entry, so every handle
//! of a file shares it. This module knows nothing of encodings or handles.
//!
//! (About 700 lines before its tests: one data structure, whose invariants
//! — lookup counts, anchors, the CLOCK ring, pins — hold across all of it,
//! so it is kept in one file rather than split along its impl blocks.)

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use super::content::FileState;
use super::error::{io, Errno, Result};
use super::sys::{self, BackingHandle};

/// FUSE's number for the root directory.
pub const ROOT: u64 = 1;

/// Numbers for files on other filesystems start here.
const FOREIGN_BASE: u64 = 1 << 63;

/// Bounds of the descriptor cache.
const CAP_MIN: usize = 16;
const CAP_MAX: usize = 16_384;

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

/// How to find a backing inode again without an open descriptor.
struct Anchor {
    /// Its file handle and the id of the mount it lies on.
    handle: Option<(BackingHandle, i32)>,
    /// The directory and name it was last seen under (None for the root).
    parent: Option<Arc<Inode>>,
    name: CString,
}

/// One backing inode known to the kernel.
pub struct Inode {
    /// The FUSE inode number.
    pub ino: u64,
    pub key: Key,
    /// `S_IFMT` bits of the backing file (they never change for an inode).
    pub fmt: libc::mode_t,
    me: Weak<Inode>,
    shared: Arc<Shared>,
    anchor: Mutex<Anchor>,
    /// The cached `O_PATH` descriptor (never used for I/O directly). Held
    /// in the cache's ring while Some, except the root's (always open).
    fd: Mutex<Option<Arc<OwnedFd>>>,
    /// Used since the CLOCK hand last passed.
    used: AtomicBool,
    /// File handles open on this inode (and 1 for the root): not evicted.
    pins: AtomicUsize,
    /// Shared state of a regular file, created on first use.
    state: OnceLock<Arc<FileState>>,
}

/// Keeps an inode's descriptor open while alive (see the module doc).
pub struct Pinned(Arc<Inode>);

impl Drop for Pinned {
    fn drop(&mut self) {
        self.0.pins.fetch_sub(1, Ordering::SeqCst);
    }
}

fn is_resource(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

impl Inode {
    /// The backing inode's `O_PATH` descriptor, reopened if the cache let
    /// it go. The `Arc` keeps it open while the caller uses it, even if the
    /// cache evicts it meanwhile.
    pub fn fd(&self) -> Result<Arc<OwnedFd>> {
        if let Some(fd) = &*self.fd.lock() {
            self.used.store(true, Ordering::Relaxed);
            return Ok(fd.clone());
        }
        let fd = Arc::new(
            self.shared
                .retrying(|| self.reopen(), || self.path(), "reopen")?,
        );
        {
            let mut slot = self.fd.lock();
            if let Some(other) = &*slot {
                return Ok(other.clone());
            }
            *slot = Some(fd.clone());
        }
        self.shared.register(self.me.clone());
        Ok(fd)
    }

    /// Finds the backing inode again (see the module doc); ESTALE if it is
    /// gone or its name now leads to another file.
    fn reopen(&self) -> std::io::Result<OwnedFd> {
        let stale = || std::io::Error::from_raw_os_error(libc::ESTALE);
        let (handle, parent, name) = {
            let a = self.anchor.lock();
            (a.handle.clone(), a.parent.clone(), a.name.clone())
        };
        let mount = match &handle {
            Some((_, mnt)) if self.shared.by_handle => self.shared.mounts.lock().get(mnt).cloned(),
            _ => None,
        };
        let fd = match (handle, mount) {
            (Some((h, _)), Some(mount)) => sys::open_by_handle(mount.as_fd(), &h, libc::O_PATH)?,
            _ => {
                let parent = parent.ok_or_else(stale)?;
                let dir = parent
                    .fd()
                    .map_err(|e| std::io::Error::from_raw_os_error(e.code()))?;
                sys::open_path(dir.as_fd(), &name).map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOENT | libc::ENOTDIR) => stale(),
                    _ => e,
                })?
            }
        };
        let st = sys::fstat(fd.as_fd())?;
        if Key::of(&st) != self.key {
            return Err(stale());
        }
        Ok(fd)
    }

    /// Pins the inode's descriptor for an open file handle.
    pub fn pin(&self) -> Result<Pinned> {
        let me = self.me.upgrade().ok_or(Errno::ESTALE)?;
        self.pins.fetch_add(1, Ordering::SeqCst);
        let pinned = Pinned(me);
        self.fd()?;
        Ok(pinned)
    }

    pub fn is_reg(&self) -> bool {
        self.fmt == libc::S_IFREG
    }

    pub fn is_dir(&self) -> bool {
        self.fmt == libc::S_IFDIR
    }

    /// Fresh attributes of the backing inode.
    pub fn stat(&self) -> Result<libc::stat> {
        sys::fstat(self.fd()?.as_fd()).map_err(io)
    }

    /// Opens the backing inode for I/O (`flags` as for open(2)).
    pub fn open(&self, flags: libc::c_int) -> Result<std::fs::File> {
        let fd = self.fd()?;
        self.shared
            .retrying(|| sys::reopen(fd.as_fd(), flags), || self.path(), "open")
    }

    /// [`Inode::open`] for the daemon's own reads (classifying, a write's
    /// neighbourhood), which a native filesystem would not count as
    /// accesses: with O_NOATIME where permitted (`sys::reopen_quiet`).
    pub fn open_quiet(&self, flags: libc::c_int) -> Result<std::fs::File> {
        let fd = self.fd()?;
        self.shared.retrying(
            || sys::reopen_quiet(fd.as_fd(), flags),
            || self.path(),
            "open",
        )
    }

    /// The per-file state shared by all handles of a regular file.
    pub fn state(&self) -> &Arc<FileState> {
        self.state.get_or_init(|| Arc::new(FileState::new()))
    }

    /// The path relative to BACKING this inode was last seen under, for
    /// messages ("." for the root).
    pub fn path(&self) -> String {
        let mut parts = Vec::new();
        let mut next = {
            let a = self.anchor.lock();
            if a.parent.is_some() {
                parts.push(a.name.to_string_lossy().into_owned());
            }
            a.parent.clone()
        };
        while let Some(dir) = next {
            let a = dir.anchor.lock();
            if a.parent.is_some() {
                parts.push(a.name.to_string_lossy().into_owned());
            }
            next = a.parent.clone();
            if parts.len() > 4096 {
                break;
            }
        }
        if parts.is_empty() {
            return ".".into();
        }
        parts.reverse();
        parts.join("/")
    }

    /// The path of `name` in this directory, for messages.
    pub fn path_of(&self, name: &std::ffi::OsStr) -> String {
        let name = name.to_string_lossy();
        match self.path().as_str() {
            "." => name.into_owned(),
            p => format!("{p}/{name}"),
        }
    }

    /// Records `name` in `parent` as where this inode was last seen.
    fn seen_as(&self, parent: &Arc<Inode>, name: &CStr) {
        let mut a = self.anchor.lock();
        let same = a.parent.as_ref().is_some_and(|p| Arc::ptr_eq(p, parent)) && *a.name == *name;
        if !same && self.ino != ROOT {
            a.parent = Some(parent.clone());
            a.name = name.to_owned();
        }
    }

    fn has_fd(&self) -> bool {
        self.fd.lock().is_some()
    }
}

/// What every inode shares: how to reopen, and the descriptor cache.
///
/// Lock order in this module: `Shared::clock` before `Inode::fd` (eviction
/// takes descriptors out of the entries on the ring); `InodeTable::tables`,
/// `Inode::anchor`, `Inode::fd` otherwise and `Shared::mounts` are each held
/// alone, for a field or map update, never across a call that could block
/// on BACKING.
struct Shared {
    /// `open_by_handle_at` works here.
    by_handle: bool,
    /// A descriptor on each filesystem seen, by mount id, for
    /// `open_by_handle_at`.
    mounts: Mutex<HashMap<i32, Arc<OwnedFd>>>,
    cap: usize,
    clock: Mutex<Clock>,
}

#[derive(Default)]
struct Clock {
    /// The inodes whose descriptor is cached.
    ring: Vec<Weak<Inode>>,
    hand: usize,
}

impl Shared {
    /// Enters an inode that just got its descriptor; evicts another (whose
    /// descriptor closes when no request uses it any more) if the cache is
    /// full. Pinned and recently used inodes are passed over; if all are,
    /// the ring grows past `cap` (by at most the pinned ones) and shrinks
    /// back on later calls.
    fn register(&self, inode: Weak<Inode>) {
        let mut closing = Vec::new();
        {
            let mut c = self.clock.lock();
            if c.ring.len() < self.cap {
                c.ring.push(inode);
                return;
            }
            let mut placed = false;
            let steps = 2 * c.ring.len() + 1;
            for _ in 0..steps {
                if c.ring.len() <= self.cap && placed {
                    break;
                }
                let h = c.hand % c.ring.len();
                c.hand = h + 1;
                if let Some(v) = c.ring[h].upgrade() {
                    if v.pins.load(Ordering::SeqCst) > 0 || v.used.swap(false, Ordering::Relaxed) {
                        continue;
                    }
                    let fd = v.fd.lock().take();
                    closing.push((fd, v));
                }
                if placed {
                    c.ring.swap_remove(h);
                } else {
                    c.ring[h] = inode.clone();
                    placed = true;
                }
            }
            if !placed {
                c.ring.push(inode);
            }
        }
        // The descriptors close here, outside the lock.
        drop(closing);
    }

    /// Under descriptor pressure: lets go of half the cache's unpinned
    /// descriptors, used or not.
    fn shrink(&self) -> usize {
        let mut closing = Vec::new();
        let mut c = self.clock.lock();
        let target = c.ring.len() / 2;
        let mut i = 0;
        while i < c.ring.len() && closing.len() < target.max(1) {
            match c.ring[i].upgrade() {
                Some(v) if v.pins.load(Ordering::SeqCst) > 0 => i += 1,
                Some(v) => {
                    let fd = v.fd.lock().take();
                    closing.push((fd, v));
                    c.ring.swap_remove(i);
                }
                None => {
                    c.ring.swap_remove(i);
                }
            }
        }
        drop(c);
        closing.len()
    }

    /// Runs `open`; when it fails for want of descriptors, shrinks the
    /// cache and tries once more; if that fails too, logs a line naming the
    /// path and returns the errno.
    fn retrying<T>(
        &self,
        mut open: impl FnMut() -> std::io::Result<T>,
        path: impl Fn() -> String,
        what: &str,
    ) -> Result<T> {
        match open() {
            Err(e) if is_resource(&e) => {
                self.shrink();
                open().map_err(|e| {
                    if is_resource(&e) {
                        let path = path();
                        crate::ratelog::warn("out-of-descriptors", &path, || {
                            format!(
                                "{path}: cannot {what}: out of file descriptors or memory \
                                 ({e}); the daemon caches at most {} inode descriptors, the \
                                 rest are files open through the mount: close some, or \
                                 raise the daemon's limit (ulimit -n)",
                                self.cap
                            )
                        });
                    }
                    io(e)
                })
            }
            r => r.map_err(io),
        }
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
    shared: Arc<Shared>,
    tables: Mutex<Tables>,
}

impl InodeTable {
    /// A table whose root is the directory behind `root` (an `O_PATH`
    /// descriptor of BACKING), caching a quarter of the open-file limit.
    pub fn new(root: OwnedFd) -> std::io::Result<InodeTable> {
        let cap = usize::try_from(sys::fd_limit() / 4)
            .unwrap_or(CAP_MAX)
            .clamp(CAP_MIN, CAP_MAX);
        let by_handle = std::env::var_os("CUTF8FS_NO_FILE_HANDLES").is_none_or(|v| v != "1");
        Self::with(root, cap, by_handle)
    }

    fn with(root: OwnedFd, cap: usize, by_handle: bool) -> std::io::Result<InodeTable> {
        let st = sys::fstat(root.as_fd())?;
        let key = Key::of(&st);
        // Handles are used only if one of the root reopens here. The
        // filesystem's descriptor must not be O_PATH (the kernel ignores
        // those for open_by_handle_at).
        let probe = sys::name_to_handle(root.as_fd(), c"").and_then(|(h, mnt)| {
            let dir: OwnedFd =
                sys::reopen(root.as_fd(), libc::O_RDONLY | libc::O_DIRECTORY)?.into();
            sys::open_by_handle(dir.as_fd(), &h, libc::O_PATH)?;
            Ok((h, mnt, dir))
        });
        let mut mounts = HashMap::new();
        let (by_handle, handle) = match probe {
            Ok((h, mnt, dir)) if by_handle => {
                mounts.insert(mnt, Arc::new(dir));
                (true, Some((h, mnt)))
            }
            Ok(_) => (false, None),
            Err(e) => {
                log::debug!("file handles unusable ({e}); inodes are reopened by name");
                (false, None)
            }
        };
        let root = Arc::new(root);
        log::info!(
            "inodes: at most {cap} cached descriptors, reopened {}",
            if by_handle {
                "by file handle"
            } else {
                "by name"
            }
        );
        let shared = Arc::new(Shared {
            by_handle,
            mounts: Mutex::new(mounts),
            cap,
            clock: Mutex::new(Clock::default()),
        });
        let inode = Arc::new_cyclic(|me| Inode {
            ino: ROOT,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            me: me.clone(),
            shared: shared.clone(),
            anchor: Mutex::new(Anchor {
                handle,
                parent: None,
                name: CString::default(),
            }),
            fd: Mutex::new(Some(root)),
            used: AtomicBool::new(true),
            pins: AtomicUsize::new(1),
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
            shared,
            tables: Mutex::new(t),
        })
    }

    /// The entry for a FUSE number the kernel holds.
    pub fn get(&self, ino: u64) -> Result<Arc<Inode>> {
        self.tables
            .lock()
            .by_ino
            .get(&ino)
            .map(|e| e.inode.clone())
            .ok_or(Errno::ESTALE)
    }

    /// Looks `name` up in directory `parent` and counts one lookup: the
    /// caller must hand the result to the kernel (or call `forget`).
    /// Returns the entry and the fresh attributes.
    pub fn lookup(&self, parent: &Arc<Inode>, name: &CStr) -> Result<(Arc<Inode>, libc::stat)> {
        let dir = parent.fd()?;
        // Known inodes (the common case) cost one fstatat.
        let st = sys::statat(dir.as_fd(), name).map_err(io)?;
        if let Some(inode) = self.count_known(Key::of(&st)) {
            // Not held open, the number may belong to a new file now: take
            // its handle (the old one would be ESTALE).
            if self.shared.by_handle && !inode.has_fd() {
                if let Ok(h) = sys::name_to_handle(dir.as_fd(), name) {
                    let mut a = inode.anchor.lock();
                    if a.handle.as_ref() != Some(&h) {
                        a.handle = Some(h);
                    }
                }
            }
            inode.seen_as(parent, name);
            return Ok((inode, st));
        }
        let fd = self.shared.retrying(
            || sys::open_path(dir.as_fd(), name),
            || parent.path_of(std::ffi::OsStr::from_bytes(name.to_bytes())),
            "look up",
        )?;
        let st = sys::fstat(fd.as_fd()).map_err(io)?;
        Ok((self.insert(fd, &st, parent, name), st))
    }

    /// Counts one more lookup of an entry already in the table.
    fn count_known(&self, key: Key) -> Option<Arc<Inode>> {
        let mut t = self.tables.lock();
        let ino = *t.by_key.get(&key)?;
        let e = t.by_ino.get_mut(&ino)?;
        e.lookups += 1;
        Some(e.inode.clone())
    }

    /// Enters `fd`, just opened as `name` in `parent` (or counts one more
    /// lookup of its existing entry).
    pub fn insert(
        &self,
        fd: OwnedFd,
        st: &libc::stat,
        parent: &Arc<Inode>,
        name: &CStr,
    ) -> Arc<Inode> {
        let key = Key::of(st);
        if let Some(inode) = self.count_known(key) {
            inode.seen_as(parent, name);
            return inode;
        }
        let handle = if self.shared.by_handle {
            sys::name_to_handle(fd.as_fd(), c"").ok()
        } else {
            None
        };
        // A filesystem mounted inside BACKING is entered by its root, a
        // directory: its descriptor serves that filesystem's handles. (A
        // handle on a filesystem without one is reopened by name.)
        if let Some((_, mnt)) = &handle {
            let known = self.shared.mounts.lock().contains_key(mnt);
            if !known && st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                if let Ok(dir) = sys::reopen(fd.as_fd(), libc::O_RDONLY | libc::O_DIRECTORY) {
                    self.shared
                        .mounts
                        .lock()
                        .entry(*mnt)
                        .or_insert_with(|| Arc::new(dir.into()));
                }
            }
        }
        let fd = Arc::new(fd);
        let mut t = self.tables.lock();
        if let Some(&ino) = t.by_key.get(&key) {
            // Entered by another thread meanwhile.
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.lookups += 1;
                return e.inode.clone();
            }
        }
        let ino = if key.dev == self.root_key.dev && key.ino > ROOT && key.ino < FOREIGN_BASE {
            key.ino
        } else {
            t.next_foreign += 1;
            t.next_foreign
        };
        let inode = Arc::new_cyclic(|me| Inode {
            ino,
            key,
            fmt: st.st_mode & libc::S_IFMT,
            me: me.clone(),
            shared: self.shared.clone(),
            anchor: Mutex::new(Anchor {
                handle,
                parent: Some(parent.clone()),
                name: name.to_owned(),
            }),
            fd: Mutex::new(Some(fd)),
            used: AtomicBool::new(true),
            pins: AtomicUsize::new(0),
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
        drop(t);
        self.shared.register(Arc::downgrade(&inode));
        inode
    }

    /// After a rename through the mount: the inode now at `name` in `dir`
    /// (if the kernel knows it) is found there from now on.
    pub fn renamed(&self, dir: &Arc<Inode>, name: &CStr) {
        let Ok(fd) = dir.fd() else { return };
        let Ok(st) = sys::statat(fd.as_fd(), name) else {
            return;
        };
        let inode = {
            let t = self.tables.lock();
            t.by_key
                .get(&Key::of(&st))
                .and_then(|ino| t.by_ino.get(ino))
                .map(|e| e.inode.clone())
        };
        if let Some(inode) = inode {
            inode.seen_as(dir, name);
        }
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let gone = {
            let mut t = self.tables.lock();
            let gone = match t.by_ino.get_mut(&ino) {
                Some(e) => {
                    e.lookups = e.lookups.saturating_sub(n);
                    (e.lookups == 0).then_some(e.inode.key)
                }
                None => None,
            };
            gone.and_then(|key| {
                if t.by_key.get(&key) == Some(&ino) {
                    t.by_key.remove(&key);
                }
                t.by_ino.remove(&ino)
            })
        };
        // The entry (and its descriptor, unless a request still uses it)
        // goes here, outside the lock.
        drop(gone);
    }

    /// How many inodes the kernel holds now (for `--stats`).
    pub fn known(&self) -> usize {
        self.tables.lock().by_ino.len()
    }

    /// Descriptors the cache holds now (for tests and messages).
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.shared
            .clock
            .lock()
            .ring
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|i| i.has_fd())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(dir: &std::path::Path, cap: usize, by_handle: bool) -> InodeTable {
        let root = super::super::CutFs::open_backing(dir).unwrap();
        InodeTable::with(root, cap, by_handle).unwrap()
    }

    fn cname(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    /// Many more inodes than the cache holds: every one still reopens, and
    /// the cache never holds more than its bound.
    fn many_inodes(by_handle: bool) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        for i in 0..200 {
            std::fs::write(d.path().join(format!("sub/f{i}")), format!("{i}")).unwrap();
        }
        let t = table(d.path(), 16, by_handle);
        let root = t.get(ROOT).unwrap();
        let (sub, _) = t.lookup(&root, &cname("sub")).unwrap();
        let mut all = Vec::new();
        for i in 0..200 {
            let (inode, st) = t.lookup(&sub, &cname(&format!("f{i}"))).unwrap();
            assert_eq!(inode.ino, st.st_ino);
            all.push(inode);
            assert!(t.cached() <= 16, "{} cached", t.cached());
        }
        for (i, inode) in all.iter().enumerate() {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut inode.open(libc::O_RDONLY).unwrap(), &mut s)
                .unwrap();
            assert_eq!(s, i.to_string());
            assert_eq!(inode.path(), format!("sub/f{i}"));
        }
        assert!(t.cached() <= 16);
    }

    #[test]
    fn many_inodes_by_handle() {
        many_inodes(true);
    }

    #[test]
    fn many_inodes_by_name() {
        many_inodes(false);
    }

    /// Reopening by name: a rename through the mount is followed; a rename
    /// in BACKING that puts another file (or a symlink) at the recorded
    /// name is ESTALE, never the other file.
    #[test]
    fn by_name_is_rename_safe_and_symlink_safe() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("a"), b"a").unwrap();
        std::fs::write(p.join("b"), b"b").unwrap();
        std::fs::write(p.join("x"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("link")).unwrap();
        let t = table(p, 16, false);
        let root = t.get(ROOT).unwrap();
        let (a, _) = t.lookup(&root, &cname("a")).unwrap();
        let (x, _) = t.lookup(&root, &cname("x")).unwrap();
        // Through the mount: a → a2.
        std::fs::rename(p.join("a"), p.join("a2")).unwrap();
        t.renamed(&root, &cname("a2"));
        // Behind its back: b takes x's name; then the symlink takes it. (The
        // old x is kept alive: a deleted inode's number may be reused by a
        // new file, which reopening by name cannot tell from the old one —
        // nor can the kernel, which sees the same number.)
        let _alive = std::fs::File::open(p.join("x")).unwrap();
        std::fs::rename(p.join("b"), p.join("x")).unwrap();
        // Evict everything.
        for i in 0..40 {
            std::fs::write(p.join(format!("f{i}")), b"").unwrap();
            t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
        }
        for _ in 0..100 {
            t.shared.shrink();
        }
        assert!(!a.has_fd() && !x.has_fd());
        assert_eq!(std::fs::read(p.join("a2")).unwrap(), b"a");
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"a");
        assert_eq!(x.fd().err(), Some(Errno::ESTALE));
        std::fs::rename(p.join("link"), p.join("x")).unwrap();
        assert_eq!(x.fd().err(), Some(Errno::ESTALE));
    }

    /// By handle: renames anywhere are followed; a deleted file is ESTALE.
    #[test]
    fn by_handle_follows_renames_and_sees_deletion() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("d/a"), b"a").unwrap();
        std::fs::write(p.join("gone"), b"g").unwrap();
        let t = table(p, 16, true);
        if !t.shared.by_handle {
            eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
            return;
        }
        let root = t.get(ROOT).unwrap();
        let (dd, _) = t.lookup(&root, &cname("d")).unwrap();
        let (a, _) = t.lookup(&dd, &cname("a")).unwrap();
        let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
        std::fs::rename(p.join("d/a"), p.join("moved")).unwrap();
        std::fs::remove_file(p.join("gone")).unwrap();
        for _ in 0..100 {
            t.shared.shrink();
        }
        assert!(!a.has_fd() && !g.has_fd());
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"a");
        assert_eq!(g.fd().err(), Some(Errno::ESTALE));
    }

    /// A pinned inode (a file open through the mount) keeps its descriptor
    /// through any amount of eviction, so it works after unlink.
    #[test]
    fn pinned_survive_eviction_and_unlink() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("open"), b"o").unwrap();
        let t = table(p, 16, false);
        let root = t.get(ROOT).unwrap();
        let (o, _) = t.lookup(&root, &cname("open")).unwrap();
        let pin = o.pin().unwrap();
        std::fs::remove_file(p.join("open")).unwrap();
        for i in 0..100 {
            std::fs::write(p.join(format!("f{i}")), b"").unwrap();
            t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
        }
        t.shared.shrink();
        assert_eq!(o.stat().unwrap().st_nlink, 0);
        drop(pin);
        for _ in 0..100 {
            t.shared.shrink();
        }
        assert_eq!(o.stat().err(), Some(Errno::ESTALE));
    }
}
