//! The inode table: FUSE inode numbers ↔ backing inodes, with lookup counts,
//! and how each backing inode is reached again — without holding on to it.
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
//! **Nothing is pinned.** The kernel may remember millions of inodes, and
//! an administrator may delete any of them in BACKING at any moment; a
//! descriptor the daemon kept of a deleted file would keep its blocks
//! allocated (`df` stays full) and BACKING's filesystem busy (`mount -o
//! remount,ro` fails) for as long as the kernel remembers the inode. So an
//! entry keeps no descriptor of a regular file (or symlink, device…) that
//! is not open through the mount, only a way back to it, used for each
//! request that needs the inode (and closed when that request is done).
//! Directories, which every lookup and creation starts from, keep theirs
//! while they are in use: a descriptor not used for a second is closed
//! (`SWEEP`), and at most `cap` are kept (an eighth of the open-file limit,
//! between 16 and 4096; evicted by CLOCK: one used since the hand last
//! passed gets a second chance). A directory removed in BACKING is thus let
//! go within about a second, a file at once (or, right after its extended
//! attributes were read, within half a second: `crate::fs::state::recent`). The way
//! back, as in virtiofsd and libfuse's passthrough_hp:
//!
//! * a **file handle** (`name_to_handle_at`), reopened with
//!   `open_by_handle_at` against a descriptor of its filesystem (BACKING's
//!   root, or the root of a filesystem mounted inside it: one descriptor
//!   per filesystem). A handle names the inode and its generation, not a
//!   path: a rename anywhere cannot make it name another file, a deleted
//!   file's handle fails with ESTALE, and no path is walked, so no symlink
//!   is followed. This needs CAP_DAC_READ_SEARCH (a root daemon); it is
//!   probed once at start.
//! * otherwise (a daemon without that capability, a filesystem without
//!   handles — a FUSE BACKING counts as one: bindfs or sshfs make handles
//!   they refuse once their inode is evicted —, or
//!   `CUTF8FS_NO_FILE_HANDLES=1` in the environment, for tests):
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
//! Reopening by name cannot tell a file deleted in BACKING from a new file
//! that got its number (no generation without an open file); the kernel,
//! which sees the same FUSE number for both, cannot either: the entry moves
//! to the new file, and the content's stamps keep the old file's bytes
//! from being served for it. By handle, a lookup that finds a known number
//! takes the handle of the file now there.
//!
//! **Open inodes.** While an inode is open through the mount, the
//! descriptor of one of its handles serves as the inode's own ([`Attached`],
//! held by each file and directory handle): one descriptor per open file,
//! and a file unlinked (or a directory removed) while open still answers
//! fstat, fchmod and the like, as natively.
//!
//! Per-file state for regular files lives here too, in two parts: what is
//! known of the content under a stamp (`content::KnownContent`, 32 bytes, kept
//! while the kernel remembers the inode), and, only while the file is open
//! or being changed by the mount, `content::OpenFile` (the content lock,
//! the offset index, held bytes), shared by every handle.
//!
//! **Memory.** An entry is one allocation of 120 bytes (136 with its
//! `Arc` counts: glibc's 144-byte chunk; `tests::an_entry_stays_small`)
//! plus a slot of 8 bytes and a control byte in one hash set (9 to 18
//! bytes an entry, as the set's power-of-two size falls): with a listing's
//! 12 bytes and name (`crate::fs::state::handles::Listing`) while its directory is
//! open, under 200 bytes for an inode the kernel remembers
//! (`scripts/bench-inodes.sh` measures it whole, docs/performance.md). To
//! stay that small, a file handle of up to 16 bytes is kept inline (24
//! bytes of anchor), a name only when reopening by name and behind one
//! pointer; the lookup count, the file type and the CLOCK bit share one
//! word; and the descriptors an entry may hold (a cached directory's, the
//! open handles') and a regular file's open state lie in one box that an
//! entry allocates only while it holds one. When the kernel forgets
//! entries by the thousand, the set shrinks and the freed memory is given
//! back to the system.
//!
//! This module knows nothing of encodings or handles' meaning.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::hash::{BuildHasher, Hash, Hasher};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::fs::export::{self, Nodes, Record};
use crate::fs::frontend::error::{io, Errno, Result};
use crate::fs::state::content::{KnownContent, OpenFile};
use crate::fs::sys::{self, BackingHandle};

/// FUSE's number for the root directory.
pub const ROOT: u64 = 1;

/// `statfs`'s `f_type` of a FUSE filesystem.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// Numbers for files on other filesystems start here.
const FOREIGN_BASE: u64 = 1 << 63;

/// Bounds of the cache of directory descriptors.
const CAP_MIN: usize = 16;
const CAP_MAX: usize = 4096;

/// How often the cache lets go of the directory descriptors not used since
/// it last looked (so one is kept from one to two of these after its last
/// use).
const SWEEP: std::time::Duration = std::time::Duration::from_millis(500);

/// After this many entries are forgotten, the table gives memory back
/// (once the kernel's round of forgetting is over: `give_back_memory`).
const TRIM_AFTER: usize = 4096;

/// A descriptor of a backing inode, shared by whoever uses it (an `O_PATH`
/// one, or an open handle's).
pub type Fd = Arc<File>;

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

/// Handles up to this many bytes, of a type below 256 (ext4, xfs, tmpfs:
/// 8 to 16 bytes, types 1 to 0x81), are kept in the entry itself.
const INLINE: usize = 16;

/// How to find a backing inode again without a descriptor (24 bytes: the
/// name of an inode reopened by name, the rare case, lies behind one
/// pointer).
enum Anchor {
    /// BACKING's root (always open).
    Root,
    /// A file handle on the filesystem with mount id `mnt`.
    Small {
        ty: u8,
        len: u8,
        mnt: i32,
        bytes: [u8; INLINE],
    },
    /// A larger file handle (btrfs, overlayfs), or one of a larger type.
    Large {
        mnt: i32,
        handle: Box<BackingHandle>,
    },
    /// The directory and name it was last seen under.
    Name(Box<Named>),
}

/// Where an inode reopened by name was last seen.
struct Named {
    parent: Arc<Inode>,
    name: Box<CStr>,
}

impl Anchor {
    fn named(parent: &Arc<Inode>, name: &CStr) -> Anchor {
        Anchor::Name(Box::new(Named {
            parent: parent.clone(),
            name: name.into(),
        }))
    }

    fn handle(h: &BackingHandle, mnt: i32) -> Anchor {
        let b = h.bytes();
        if let (true, Ok(ty)) = (b.len() <= INLINE, u8::try_from(h.ty())) {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Anchor::Small {
                ty,
                len: b.len() as u8,
                mnt,
                bytes,
            }
        } else {
            Anchor::Large {
                mnt,
                handle: Box::new(h.clone()),
            }
        }
    }

    /// (type, bytes, mount id) of a handle anchor.
    fn parts(&self) -> Option<(i32, &[u8], i32)> {
        match self {
            Anchor::Small {
                ty,
                mnt,
                len,
                bytes,
            } => Some((i32::from(*ty), &bytes[..usize::from(*len)], *mnt)),
            Anchor::Large { mnt, handle } => Some((handle.ty(), handle.bytes(), *mnt)),
            _ => None,
        }
    }

    fn same_handle(&self, h: &BackingHandle, mnt: i32) -> bool {
        self.parts() == Some((h.ty(), h.bytes(), mnt))
    }

    /// The generation the kernel is given (`export::generation`; 0 for
    /// the root and for inodes reopened by name).
    fn generation(&self) -> u64 {
        match self.parts() {
            Some((ty, bytes, _)) => export::generation(ty, bytes),
            None => 0,
        }
    }

    /// How the inode is found again after the kernel forgot it
    /// (`export`): None for the root, and for a name in a directory of
    /// another filesystem.
    fn record(&self) -> Option<Record> {
        match self {
            Anchor::Root => None,
            Anchor::Name(n) => (n.parent.ino < FOREIGN_BASE).then(|| Record::Name {
                parent: n.parent.ino,
                name: n.name.as_ref().into(),
            }),
            a => a.parts().map(|(ty, bytes, _)| Record::Handle {
                ty,
                bytes: bytes.to_vec(),
            }),
        }
    }
}

/// What the entry holds while a directory's descriptor is cached, or the
/// inode is open (or its content is being changed) through the mount;
/// most entries hold nothing, and no allocation.
#[derive(Default)]
struct EntryFds {
    /// A cached descriptor: the root's, or a directory's.
    cached: Option<Fd>,
    /// Handles and other users attached ([`Attached`]).
    users: u32,
    /// The descriptors of the open handles (each also held by its handle):
    /// the first serves as the inode's.
    fds: Vec<Fd>,
    /// A regular file's shared state.
    state: Option<Arc<OpenFile>>,
}

struct Inner {
    anchor: Anchor,
    held: Option<Box<EntryFds>>,
}

impl Inner {
    /// Takes the cached descriptor out (to be closed outside the lock).
    fn take_cached(&mut self) -> Option<Fd> {
        let h = self.held.as_mut()?;
        let fd = h.cached.take();
        if h.users == 0 {
            self.held = None;
        }
        fd
    }
}

/// `Inode::word`: the lookups the kernel holds (low bits), the file type
/// (`S_IFMT >> 12`, which never changes for an inode) and the CLOCK bit
/// (the cached descriptor was used since the hand last passed), in one
/// word so that an entry stays small.
const LOOKUPS: u64 = (1 << 48) - 1;
const FMT_SHIFT: u32 = 48;
const USED: u64 = 1 << 63;

/// One backing inode known to the kernel.
pub struct Inode {
    /// The FUSE inode number.
    pub ino: u64,
    pub key: Key,
    /// Lookups, file type and CLOCK bit (see [`LOOKUPS`]); lookups change
    /// under the table's lock.
    word: AtomicU64,
    shared: Arc<Shared>,
    inner: Mutex<Inner>,
    /// What is known of a regular file's content (`content::KnownContent`); for a
    /// directory, the stamp its listing was last opened at.
    seen: Mutex<KnownContent>,
}

/// While alive, keeps an inode's open state: the per-file state of a
/// regular file and, for a handle, its descriptor as one the inode can be
/// reached by (see the module doc).
pub struct Attached {
    inode: Arc<Inode>,
    fd: Option<Fd>,
    state: Option<Arc<OpenFile>>,
}

impl Attached {
    /// The shared state of the regular file (None for a directory).
    pub fn state(&self) -> Option<&Arc<OpenFile>> {
        self.state.as_ref()
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let gone = {
            let mut i = self.inode.inner.lock();
            let Some(held) = i.held.as_mut() else {
                return;
            };
            if let Some(fd) = &self.fd {
                if let Some(k) = held.fds.iter().position(|f| Arc::ptr_eq(f, fd)) {
                    held.fds.swap_remove(k);
                }
            }
            held.users = held.users.saturating_sub(1);
            if held.users > 0 {
                None
            } else if held.cached.is_none() {
                i.held.take().map(|h| h.state)
            } else {
                Some(held.state.take())
            }
        };
        // The state (and its index) goes here, outside the lock.
        drop(gone);
    }
}

fn is_resource(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

fn stale() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ESTALE)
}

fn errno_io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.code())
}

impl Inode {
    /// A descriptor of the backing inode: an open handle's, a cached one,
    /// or one reopened now (closed when the caller drops it).
    pub fn fd(self: &Arc<Self>) -> Result<Fd> {
        if let Some(fd) = self.held_fd() {
            return Ok(fd);
        }
        let (file, _) =
            self.shared
                .retrying(|| self.reopen(libc::O_PATH), || self.path(), "reopen")?;
        let fd = Arc::new(file);
        if self.cacheable() {
            let mut i = self.inner.lock();
            let held = i.held.get_or_insert_with(Box::default);
            if let Some(other) = &held.cached {
                return Ok(other.clone());
            }
            held.cached = Some(fd.clone());
            drop(i);
            self.mark_used();
            self.shared.register(Arc::downgrade(self));
        }
        Ok(fd)
    }

    /// The descriptor the entry holds now, if any (an open handle's first,
    /// then a cached one).
    fn held_fd(&self) -> Option<Fd> {
        let i = self.inner.lock();
        let held = i.held.as_ref()?;
        if let Some(fd) = held.fds.first() {
            return Some(fd.clone());
        }
        let fd = held.cached.clone()?;
        drop(i);
        self.mark_used();
        Some(fd)
    }

    /// The word of a new entry for a file in state `st`.
    fn word(st: &libc::stat, lookups: u64) -> u64 {
        (u64::from(st.st_mode & libc::S_IFMT) >> 12 << FMT_SHIFT) | lookups.min(LOOKUPS) | USED
    }

    /// Sets the CLOCK bit (if not set: the common case costs a load).
    fn mark_used(&self) {
        if self.word.load(Ordering::Relaxed) & USED == 0 {
            self.word.fetch_or(USED, Ordering::Relaxed);
        }
    }

    /// Clears the CLOCK bit; whether it was set.
    fn take_used(&self) -> bool {
        self.word.fetch_and(!USED, Ordering::Relaxed) & USED != 0
    }

    /// Counts `n` more lookups.
    fn add_lookups(&self, n: u64) {
        let _ = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                Some((w & !LOOKUPS) | ((w & LOOKUPS).saturating_add(n).min(LOOKUPS)))
            });
    }

    /// Counts `n` lookups fewer; the lookups left.
    fn sub_lookups(&self, n: u64) -> u64 {
        let old = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                Some((w & !LOOKUPS) | (w & LOOKUPS).saturating_sub(n))
            })
            .unwrap_or_else(|w| w);
        (old & LOOKUPS).saturating_sub(n)
    }

    /// Sets the lookups counted.
    fn set_lookups(&self, n: u64) {
        let _ = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                Some((w & !LOOKUPS) | n.min(LOOKUPS))
            });
    }

    /// `S_IFMT` bits of the backing file.
    pub fn fmt(&self) -> libc::mode_t {
        (((self.word.load(Ordering::Relaxed) >> FMT_SHIFT) & 0xf) as libc::mode_t) << 12
    }

    /// Whether a reopened descriptor is kept (for about a second, see the
    /// module doc): directories', the parents names are looked up in.
    fn cacheable(&self) -> bool {
        self.is_dir()
    }

    /// Finds the backing inode again (see the module doc) and opens it with
    /// `flags` (O_PATH, or for I/O); ESTALE if it is gone or its name now
    /// leads to another file. Returns the descriptor and its fresh stat.
    fn reopen(&self, flags: libc::c_int) -> std::io::Result<(File, libc::stat)> {
        enum Way {
            /// Type, mount id, length and bytes of the handle.
            Handle(i32, i32, usize, [u8; libc::MAX_HANDLE_SZ as usize]),
            Name(Arc<Inode>, Box<CStr>),
        }
        let way = {
            let i = self.inner.lock();
            match &i.anchor {
                Anchor::Root => return Err(stale()),
                Anchor::Name(n) => Way::Name(n.parent.clone(), n.name.clone()),
                a => {
                    let (ty, bytes, mnt) = a.parts().ok_or_else(stale)?;
                    let mut buf = [0u8; libc::MAX_HANDLE_SZ as usize];
                    let len = bytes.len().min(buf.len());
                    buf[..len].copy_from_slice(&bytes[..len]);
                    Way::Handle(ty, mnt, len, buf)
                }
            }
        };
        let fd: OwnedFd = match way {
            Way::Handle(ty, mnt, len, bytes) => {
                let mount = self
                    .shared
                    .mounts
                    .lock()
                    .get(&mnt)
                    .cloned()
                    .ok_or_else(stale)?;
                sys::open_by_handle_parts(mount.as_fd(), ty, &bytes[..len], flags)?
            }
            Way::Name(parent, name) => {
                let dir = parent.fd().map_err(errno_io)?;
                let path =
                    sys::open_path(dir.as_fd(), &name).map_err(|e| match e.raw_os_error() {
                        Some(libc::ENOENT | libc::ENOTDIR) => stale(),
                        _ => e,
                    })?;
                if flags == libc::O_PATH {
                    path
                } else {
                    let st = sys::fstat(path.as_fd())?;
                    if Key::of(&st) != self.key {
                        return Err(stale());
                    }
                    sys::reopen(path.as_fd(), flags)?.into()
                }
            }
        };
        let st = sys::fstat(fd.as_fd())?;
        if Key::of(&st) != self.key {
            return Err(stale());
        }
        Ok((File::from(fd), st))
    }

    /// Attaches a user of the inode's open state: a handle whose descriptor
    /// is `fd` (it then also serves as the inode's), or a change made
    /// without one (`fd` None). A regular file gets its shared state.
    pub fn attach(self: &Arc<Self>, fd: Option<&Fd>) -> Attached {
        let mut i = self.inner.lock();
        let open = i.held.get_or_insert_with(Box::default);
        open.users += 1;
        if let Some(fd) = fd {
            open.fds.push(fd.clone());
        }
        if self.is_reg() && open.state.is_none() {
            open.state = Some(Arc::new(OpenFile::new()));
        }
        let state = open.state.clone();
        drop(i);
        Attached {
            inode: self.clone(),
            fd: fd.cloned(),
            state,
        }
    }

    /// The shared state of a regular file while it is open or being
    /// changed (None otherwise: then nothing is held back for it).
    pub fn open_state(&self) -> Option<Arc<OpenFile>> {
        self.inner.lock().held.as_ref()?.state.clone()
    }

    /// Whether a handle has the inode open.
    pub fn is_open(&self) -> bool {
        self.inner
            .lock()
            .held
            .as_ref()
            .is_some_and(|o| !o.fds.is_empty())
    }

    pub fn is_reg(&self) -> bool {
        self.fmt() == libc::S_IFREG
    }

    pub fn is_dir(&self) -> bool {
        self.fmt() == libc::S_IFDIR
    }

    /// What is known of the content (see `content::KnownContent`).
    pub fn seen(&self) -> &Mutex<KnownContent> {
        &self.seen
    }

    /// Fresh attributes of the backing inode.
    pub fn stat(&self) -> Result<libc::stat> {
        if let Some(fd) = self.held_fd() {
            return sys::fstat(fd.as_fd()).map_err(io);
        }
        self.shared
            .retrying(|| self.reopen(libc::O_PATH), || self.path(), "reopen")
            .map(|(_, st)| st)
    }

    /// Opens the backing inode for I/O (`flags` as for open(2)).
    pub fn open(&self, flags: libc::c_int) -> Result<File> {
        self.open_with(flags, sys::reopen)
    }

    /// [`Inode::open`] for the daemon's own reads (classifying, a write's
    /// neighbourhood), which a native filesystem would not count as
    /// accesses: with O_NOATIME where permitted (`sys::reopen_quiet`).
    pub fn open_quiet(&self, flags: libc::c_int) -> Result<File> {
        match self.open_with(flags | libc::O_NOATIME, sys::reopen) {
            Err(Errno::EPERM) => self.open(flags),
            r => r,
        }
    }

    fn open_with(
        &self,
        flags: libc::c_int,
        reopen: fn(std::os::fd::BorrowedFd<'_>, libc::c_int) -> std::io::Result<File>,
    ) -> Result<File> {
        match self.held_fd() {
            Some(fd) => self
                .shared
                .retrying(|| reopen(fd.as_fd(), flags), || self.path(), "open"),
            None => self
                .shared
                .retrying(|| self.reopen(flags), || self.path(), "open")
                .map(|(f, _)| f),
        }
    }

    /// The path relative to BACKING this inode is at (by handle: where the
    /// kernel finds it now; by name: where it was last seen), for messages
    /// and for policies that look at names ("." for the root).
    pub fn path(&self) -> String {
        let mut parts = Vec::new();
        let mut next: Option<Arc<Inode>> = None;
        loop {
            let i = match &next {
                Some(n) => n.inner.lock(),
                None => self.inner.lock(),
            };
            let up = match &i.anchor {
                Anchor::Root => break,
                Anchor::Name(n) => {
                    parts.push(n.name.to_string_lossy().into_owned());
                    n.parent.clone()
                }
                _ => {
                    drop(i);
                    let above = match &next {
                        Some(n) => n.path_by_kernel(),
                        None => self.path_by_kernel(),
                    };
                    if above != "." {
                        parts.push(above);
                    }
                    break;
                }
            };
            drop(i);
            next = Some(up);
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

    /// The path of the inode as the kernel names its descriptor, relative
    /// to BACKING's root.
    fn path_by_kernel(&self) -> String {
        let unknown = || format!("inode {}", self.key.ino);
        let fd = match self.held_fd() {
            Some(fd) => fd,
            None => match self.reopen(libc::O_PATH) {
                Ok((f, _)) => Arc::new(f),
                Err(_) => return unknown(),
            },
        };
        let (Ok(me), Ok(root)) = (
            sys::fd_path(fd.as_fd()),
            sys::fd_path(self.shared.root.as_fd()),
        ) else {
            return unknown();
        };
        match me.strip_prefix(&root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => unknown(),
        }
    }

    /// The path of `name` in this directory, for messages.
    pub fn path_of(&self, name: &OsStr) -> String {
        let name = name.to_string_lossy();
        match self.path().as_str() {
            "." => name.into_owned(),
            p => format!("{p}/{name}"),
        }
    }

    /// Records `name` in `parent` as where this inode was last seen (kept
    /// only by entries reopened by name; the node record follows).
    fn seen_as(&self, parent: &Arc<Inode>, name: &CStr) {
        let mut i = self.inner.lock();
        if let Anchor::Name(n) = &mut i.anchor {
            if !Arc::ptr_eq(&n.parent, parent) || *n.name != *name {
                n.parent = parent.clone();
                n.name = name.into();
                let record = i.anchor.record();
                drop(i);
                self.shared.record(self.ino, record);
            }
        }
    }

    /// The generation the kernel is given for this inode (`export`).
    pub fn generation(&self) -> u64 {
        self.inner.lock().anchor.generation()
    }

    #[cfg(test)]
    fn has_cached_fd(&self) -> bool {
        self.inner
            .lock()
            .held
            .as_ref()
            .is_some_and(|h| h.cached.is_some())
    }
}

/// What every inode shares: how to reopen, and the cache of directory
/// descriptors reached by name.
///
/// Lock order in this module: `Shared::clock` before `Inode::inner`
/// (eviction takes descriptors out of the entries on the ring);
/// `InodeTable::tables`, `Inode::inner` otherwise and `Shared::mounts` are
/// each held alone, for a field or map update, never across a call that
/// could block on BACKING.
struct Shared {
    /// `open_by_handle_at` works here.
    by_handle: bool,
    /// The mount id of BACKING's root, whose descriptor in `mounts` opens
    /// the handles of node records (`export`).
    root_mnt: Option<i32>,
    /// Node records (`export`), once the filesystem has set them.
    nodes: OnceLock<Arc<Nodes>>,
    /// BACKING's root.
    root: Fd,
    /// A descriptor on each filesystem seen, by mount id, for
    /// `open_by_handle_at`.
    mounts: Mutex<HashMap<i32, Fd>>,
    cap: usize,
    clock: Mutex<Clock>,
    /// A trim of freed memory is pending.
    trimming: AtomicBool,
}

#[derive(Default)]
struct Clock {
    /// The inodes whose descriptor is cached.
    ring: Vec<Weak<Inode>>,
    hand: usize,
}

impl Shared {
    /// Records how node `ino` is found again, if it has a number of
    /// BACKING's own filesystem.
    fn record(&self, ino: u64, record: Option<Record>) {
        if let (Some(nodes), Some(r)) = (self.nodes.get(), record) {
            if ino > ROOT && ino < FOREIGN_BASE {
                nodes.record(ino, &r);
            }
        }
    }

    /// Enters an inode that just got its cached descriptor; evicts another
    /// (whose descriptor closes when no request uses it any more) if the
    /// cache is full. Recently used inodes are passed over; if all are, the
    /// oldest candidate goes anyway.
    fn register(&self, me: Weak<Inode>) {
        let mut closing = Vec::new();
        {
            let mut c = self.clock.lock();
            if c.ring.len() < self.cap {
                c.ring.push(me);
                return;
            }
            let mut placed = false;
            let steps = 2 * c.ring.len() + 1;
            for _ in 0..steps {
                let h = c.hand % c.ring.len();
                c.hand = h + 1;
                if let Some(v) = c.ring[h].upgrade() {
                    if v.take_used() {
                        continue;
                    }
                    closing.push(v.inner.lock().take_cached());
                }
                c.ring[h] = me.clone();
                placed = true;
                break;
            }
            if !placed {
                let h = c.hand % c.ring.len();
                if let Some(v) = c.ring[h].upgrade() {
                    closing.push(v.inner.lock().take_cached());
                }
                c.ring[h] = me;
            }
        }
        // The descriptors close here, outside the lock.
        drop(closing);
    }

    /// Lets go of the descriptors not used since the last sweep (called
    /// every `SWEEP`).
    fn sweep(&self) {
        let mut closing = Vec::new();
        let mut c = self.clock.lock();
        c.ring.retain(|w| {
            let Some(v) = w.upgrade() else {
                return false;
            };
            if v.take_used() {
                return true;
            }
            closing.push(v.inner.lock().take_cached());
            false
        });
        c.hand = 0;
        drop(c);
        drop(closing);
    }

    /// Under descriptor pressure: lets go of half the cached descriptors,
    /// used or not.
    fn shrink(&self) -> usize {
        let mut closing = Vec::new();
        let mut c = self.clock.lock();
        let target = c.ring.len().div_ceil(2);
        while closing.len() < target {
            let Some(w) = c.ring.pop() else { break };
            if let Some(v) = w.upgrade() {
                closing.push(v.inner.lock().take_cached());
            }
        }
        drop(c);
        closing.len()
    }

    /// Runs `open`; when it fails for want of descriptors, shrinks the
    /// cache and tries once more; if that fails too, logs a line naming the
    /// path (rate-limited) and returns the errno.
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
                                "{path}: cannot {what}: out of file descriptors or memory ({e}); \
                                 the daemon's descriptors are those of files open through the \
                                 mount (each user's share is bounded, man cutf8fs: RESOURCES): \
                                 close some, or raise the daemon's limit (ulimit -n)"
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

/// A table entry, found by its FUSE number.
struct Entry(Arc<Inode>);

impl Borrow<u64> for Entry {
    fn borrow(&self) -> &u64 {
        &self.0.ino
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.0.ino == other.0.ino
    }
}

impl Eq for Entry {}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.ino.hash(h)
    }
}

/// Hashes inode numbers: they are the backing filesystem's (a user cannot
/// choose them), so a fast mix of the bits serves, where SipHash would
/// cost more than the rest of a lookup in the table.
#[derive(Clone, Copy, Default)]
struct InoHash;

struct InoHasher(u64);

impl Hasher for InoHasher {
    fn finish(&self) -> u64 {
        // splitmix64's finaliser.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

impl BuildHasher for InoHash {
    type Hasher = InoHasher;
    fn build_hasher(&self) -> InoHasher {
        InoHasher(0)
    }
}

#[derive(Default)]
struct Tables {
    by_ino: HashSet<Entry, InoHash>,
    /// Numbers given to inodes of other filesystems.
    foreign: HashMap<Key, u64>,
    next_foreign: u64,
    /// Entries forgotten since memory was last given back.
    forgotten: usize,
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
    /// descriptor of BACKING); it caches the descriptors of at most an
    /// eighth of the open-file limit of directories.
    pub fn new(root: OwnedFd) -> std::io::Result<InodeTable> {
        let cap = usize::try_from(sys::fd_limit() / 8)
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
            Ok((mnt, dir))
        });
        // A FUSE filesystem encodes handles of whatever its kernel side
        // remembers, but may refuse them once that is evicted (bindfs,
        // sshfs: no export support), which a probe of the root cannot see.
        let fuse =
            sys::fanotify::filesystem_type(root.as_fd()).is_ok_and(|t| t == FUSE_SUPER_MAGIC);
        if fuse && by_handle {
            log::debug!("BACKING is a FUSE filesystem: inodes are reopened by name");
        }
        let by_handle = by_handle && !fuse;
        let mut mounts = HashMap::new();
        let mut root_mnt = None;
        let by_handle = match probe {
            Ok((mnt, dir)) if by_handle => {
                mounts.insert(mnt, Arc::new(File::from(dir)));
                root_mnt = Some(mnt);
                true
            }
            Ok(_) => false,
            Err(e) => {
                log::debug!("file handles unusable ({e}); inodes are reopened by name");
                false
            }
        };
        let root = Arc::new(File::from(root));
        if by_handle {
            log::info!(
                "inodes: reopened by file handle; no descriptor is kept of any inode not \
                 open through the mount"
            );
        } else {
            log::info!("inodes: reopened by name; at most {cap} directory descriptors are cached");
        }
        let shared = Arc::new(Shared {
            by_handle,
            root_mnt,
            nodes: OnceLock::new(),
            root: root.clone(),
            mounts: Mutex::new(mounts),
            cap,
            clock: Mutex::new(Clock::default()),
            trimming: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("inode-cache".into())
            .spawn(move || loop {
                std::thread::sleep(SWEEP);
                match weak.upgrade() {
                    Some(shared) => shared.sweep(),
                    None => break,
                }
            })?;
        let inode = Arc::new(Inode {
            ino: ROOT,
            key,
            word: AtomicU64::new(Inode::word(&st, 1)),
            shared: shared.clone(),
            inner: Mutex::new(Inner {
                anchor: Anchor::Root,
                held: Some(Box::new(EntryFds {
                    cached: Some(root),
                    ..EntryFds::default()
                })),
            }),
            seen: Mutex::new(KnownContent::default()),
        });
        let mut t = Tables {
            next_foreign: FOREIGN_BASE,
            ..Tables::default()
        };
        t.by_ino.insert(Entry(inode));
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
            .map(|e| e.0.clone())
            .ok_or(Errno::ESTALE)
    }

    /// Looks `name` up in directory `parent` and counts one lookup: the
    /// caller must hand the result to the kernel (or call `forget`).
    /// Returns the entry and the fresh attributes. No descriptor is opened
    /// for it (by name: a directory's is opened when first needed).
    pub fn lookup(&self, parent: &Arc<Inode>, name: &CStr) -> Result<(Arc<Inode>, libc::stat)> {
        let dir = parent.fd()?;
        // Known inodes (the common case) cost one fstatat, and by handle
        // one name_to_handle_at: the number may belong to a new file now,
        // whose handle is taken (the old one would be ESTALE).
        let st = sys::statat(dir.as_fd(), name).map_err(io)?;
        if let Some(inode) = self.count_known(Key::of(&st)) {
            if self.shared.by_handle && !inode.is_open() {
                if let Ok((h, mnt)) = sys::name_to_handle(dir.as_fd(), name) {
                    let mut i = inode.inner.lock();
                    if matches!(i.anchor, Anchor::Small { .. } | Anchor::Large { .. })
                        && !i.anchor.same_handle(&h, mnt)
                        && self.shared.mounts.lock().contains_key(&mnt)
                    {
                        i.anchor = Anchor::handle(&h, mnt);
                        let record = i.anchor.record();
                        drop(i);
                        self.shared.record(inode.ino, record);
                    }
                }
            }
            inode.seen_as(parent, name);
            return Ok((inode, st));
        }
        let anchor = self.anchor_at(dir.as_fd(), name, &st, parent);
        Ok((self.enter(&st, anchor), st))
    }

    /// How to find `name` in `dir` (state `st`, in `parent`) again: its
    /// handle, when its filesystem's handles can be opened (a filesystem
    /// mounted inside BACKING is entered by its root, a directory, whose
    /// descriptor then serves its handles); else its parent and name.
    fn anchor_at(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &CStr,
        st: &libc::stat,
        parent: &Arc<Inode>,
    ) -> Anchor {
        let by_name = || Anchor::named(parent, name);
        if !self.shared.by_handle {
            return by_name();
        }
        let Ok((h, mnt)) = sys::name_to_handle(dir, name) else {
            return by_name();
        };
        if !self.shared.mounts.lock().contains_key(&mnt) {
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return by_name();
            }
            let opened = sys::openat(
                dir,
                name,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .and_then(|fd| sys::fstat(fd.as_fd()).map(|s| (fd, s)));
            match opened {
                Ok((fd, s)) if Key::of(&s) == Key::of(st) => {
                    self.shared
                        .mounts
                        .lock()
                        .entry(mnt)
                        .or_insert_with(|| Arc::new(File::from(fd)));
                }
                _ => return by_name(),
            }
        }
        Anchor::handle(&h, mnt)
    }

    /// Counts one more lookup of an entry already in the table.
    fn count_known(&self, key: Key) -> Option<Arc<Inode>> {
        let t = self.tables.lock();
        let ino = self.number_of(&t, key)?;
        let e = t.by_ino.get(&ino)?;
        if e.0.key != key {
            return None;
        }
        e.0.add_lookups(1);
        Some(e.0.clone())
    }

    /// The FUSE number of a backing inode, if it has one.
    fn number_of(&self, t: &Tables, key: Key) -> Option<u64> {
        if self.own_number(key) {
            Some(key.ino)
        } else {
            t.foreign.get(&key).copied()
        }
    }

    /// Whether the backing inode number serves as the FUSE number.
    fn own_number(&self, key: Key) -> bool {
        key.dev == self.root_key.dev && key.ino > ROOT && key.ino < FOREIGN_BASE
    }

    /// Enters the inode in state `st` with `anchor` (or counts one more
    /// lookup of its existing entry, entered by another thread meanwhile).
    fn enter(&self, st: &libc::stat, anchor: Anchor) -> Arc<Inode> {
        let key = Key::of(st);
        let mut t = self.tables.lock();
        if let Some(ino) = self.number_of(&t, key) {
            if let Some(e) = t.by_ino.get(&ino) {
                if e.0.key == key {
                    e.0.add_lookups(1);
                    return e.0.clone();
                }
            }
        }
        let ino = if self.own_number(key) {
            key.ino
        } else {
            t.next_foreign += 1;
            let n = t.next_foreign;
            t.foreign.insert(key, n);
            n
        };
        let record = anchor.record();
        let inode = self.make(ino, st, anchor, 1);
        // A stale entry with this number (a deleted file's, whose number a
        // new file got while the kernel still held the old one) is
        // replaced: the kernel gets the same number for the new file (and
        // a new generation, so it takes it for a new inode).
        t.by_ino.replace(Entry(inode.clone()));
        drop(t);
        self.shared.record(ino, record);
        inode
    }

    /// A new entry (not in the table yet) with `lookups` counted.
    fn make(&self, ino: u64, st: &libc::stat, anchor: Anchor, lookups: u64) -> Arc<Inode> {
        Arc::new(Inode {
            ino,
            key: Key::of(st),
            word: AtomicU64::new(Inode::word(st, lookups)),
            shared: self.shared.clone(),
            inner: Mutex::new(Inner { anchor, held: None }),
            seen: Mutex::new(KnownContent::default()),
        })
    }

    /// Enters the file just created and open as `file` under `name` in
    /// `parent` (or counts one more lookup of its existing entry).
    pub fn insert(
        &self,
        file: &File,
        st: &libc::stat,
        parent: &Arc<Inode>,
        name: &CStr,
    ) -> Arc<Inode> {
        if let Some(inode) = self.count_known(Key::of(st)) {
            inode.seen_as(parent, name);
            return inode;
        }
        let anchor = match sys::name_to_handle(file.as_fd(), c"") {
            Ok((h, mnt))
                if self.shared.by_handle && self.shared.mounts.lock().contains_key(&mnt) =>
            {
                Anchor::handle(&h, mnt)
            }
            _ => Anchor::named(parent, name),
        };
        self.enter(st, anchor)
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
            self.number_of(&t, Key::of(&st))
                .and_then(|ino| t.by_ino.get(&ino))
                .map(|e| e.0.clone())
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
        let (gone, trim) = {
            let mut t = self.tables.lock();
            let gone = match t.by_ino.get(&ino) {
                Some(e) => e.0.sub_lookups(n) == 0,
                None => false,
            };
            let gone = gone.then(|| t.by_ino.take(&ino)).flatten();
            if let Some(e) = &gone {
                if !self.own_number(e.0.key) {
                    t.foreign.remove(&e.0.key);
                }
                t.forgotten += 1;
            }
            // A table that emptied gives its slots back (and then the
            // allocator its pages, below).
            let cap = t.by_ino.capacity();
            if cap > 1024 && t.by_ino.len() < cap / 8 {
                let len = t.by_ino.len();
                t.by_ino.shrink_to(len * 2);
            }
            let trim = t.forgotten >= TRIM_AFTER;
            if trim {
                t.forgotten = 0;
            }
            (gone, trim)
        };
        // The entry goes here, outside the lock; how to find it again is
        // kept (`export`).
        if let Some(e) = &gone {
            if let (Some(nodes), true) = (self.shared.nodes.get(), self.own_number(e.0.key)) {
                if let Some(r) = e.0.inner.lock().anchor.record() {
                    nodes.forgotten(e.0.ino, r);
                }
            }
        }
        drop(gone);
        if trim {
            self.give_back_memory();
        }
    }

    /// How many inodes the kernel holds now (for `--stats`).
    pub fn known(&self) -> usize {
        self.tables.lock().by_ino.len()
    }

    /// Where node records are kept (`export`); set once, before the
    /// kernel sends its first request.
    pub fn set_nodes(&self, nodes: Arc<Nodes>) {
        let _ = self.shared.nodes.set(nodes);
    }

    /// The generation of node `ino` for a reply (0 if the kernel no
    /// longer holds it: then the reply is not sent anyway).
    pub fn generation(&self, ino: u64) -> u64 {
        let entry = self.tables.lock().by_ino.get(&ino).map(|e| e.0.clone());
        entry.map_or(0, |e| e.generation())
    }

    /// LOOKUP of "." in node `ino`: the kernel decodes a file handle of a
    /// node it may have forgotten (`export`). Counts one lookup. ESTALE if
    /// the node's file is gone or cannot be found again.
    pub fn revive(&self, ino: u64) -> Result<(Arc<Inode>, libc::stat)> {
        let known = {
            let t = self.tables.lock();
            t.by_ino.get(&ino).map(|e| {
                e.0.add_lookups(1);
                e.0.clone()
            })
        };
        if let Some(inode) = known {
            return match inode.stat() {
                Ok(st) => Ok((inode, st)),
                Err(e) => {
                    self.forget(ino, 1);
                    Err(e)
                }
            };
        }
        let inode = self.find_node(ino, 0)?;
        let st = inode.stat()?;
        Ok((self.adopt(inode, &st)?, st))
    }

    /// LOOKUP of ".." in directory `ino` (the kernel reconnecting a
    /// directory it decoded from a handle): its parent, counted once; the
    /// root is its own parent. By name, the parent the directory was seen
    /// in; by handle, the directory's ".." if that lies under BACKING.
    pub fn parent_of(&self, ino: u64) -> Result<(Arc<Inode>, libc::stat)> {
        let dir = self.get(ino)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let recorded = match &dir.inner.lock().anchor {
            Anchor::Name(n) => Some(n.parent.clone()),
            _ => None,
        };
        let parent = match recorded {
            Some(p) => p,
            None if dir.key == self.root_key => self.get(ROOT)?,
            None => {
                let fd = dir.fd()?;
                let st = sys::statat(fd.as_fd(), c"..").map_err(io)?;
                let known = if Key::of(&st) == self.root_key {
                    Some(self.get(ROOT)?)
                } else {
                    let t = self.tables.lock();
                    self.number_of(&t, Key::of(&st))
                        .and_then(|n| t.by_ino.get(&n))
                        .filter(|e| e.0.key == Key::of(&st))
                        .map(|e| e.0.clone())
                };
                match known {
                    Some(p) => p,
                    None => {
                        let up = sys::openat(
                            fd.as_fd(),
                            c"..",
                            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                            0,
                        )
                        .map_err(io)?;
                        if !self.own_number(Key::of(&st)) || !self.inside(up.as_fd())? {
                            return Err(Errno::ESTALE);
                        }
                        let (h, mnt) = sys::name_to_handle(up.as_fd(), c"").map_err(io)?;
                        if !self.shared.mounts.lock().contains_key(&mnt) {
                            return Err(Errno::ESTALE);
                        }
                        self.make(st.st_ino, &st, Anchor::handle(&h, mnt), 0)
                    }
                }
            }
        };
        let st = parent.stat()?;
        Ok((self.adopt(parent, &st)?, st))
    }

    /// Enters `inode` (state `st`, found again outside the table) with one
    /// lookup, or counts one more of the entry another thread entered
    /// meanwhile for the same backing inode.
    fn adopt(&self, inode: Arc<Inode>, st: &libc::stat) -> Result<Arc<Inode>> {
        if Key::of(st) != inode.key {
            return Err(Errno::ESTALE);
        }
        let mut t = self.tables.lock();
        if let Some(e) = t.by_ino.get(&inode.ino) {
            if e.0.key == inode.key {
                e.0.add_lookups(1);
                return Ok(e.0.clone());
            }
        }
        inode.set_lookups(1);
        t.by_ino.replace(Entry(inode.clone()));
        Ok(inode)
    }

    /// Node `ino` found from its record (`export`), not entered in the
    /// table: the entry if the table has it, else one made from the
    /// record — by handle on BACKING's filesystem, or by name in its
    /// parent, found the same way (`depth` parents up so far). The file
    /// found must have number `ino`, and a directory lie under BACKING.
    fn find_node(&self, ino: u64, depth: usize) -> Result<Arc<Inode>> {
        if let Ok(inode) = self.get(ino) {
            return Ok(inode);
        }
        if ino <= ROOT || ino >= FOREIGN_BASE || depth > 4096 {
            return Err(Errno::ESTALE);
        }
        let record = self
            .shared
            .nodes
            .get()
            .and_then(|n| n.find(ino))
            .ok_or(Errno::ESTALE)?;
        let stale = |e: std::io::Error| match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::EINVAL | libc::ESTALE) => Errno::ESTALE,
            _ => io(e),
        };
        let (fd, anchor) = match record {
            Record::Handle { ty, bytes } => {
                let mnt = self.shared.root_mnt.ok_or(Errno::ESTALE)?;
                let mount = self.shared.mounts.lock().get(&mnt).cloned();
                let mount = mount.ok_or(Errno::ESTALE)?;
                let fd = sys::open_by_handle_parts(mount.as_fd(), ty, &bytes, libc::O_PATH)
                    .map_err(stale)?;
                let h = sys::name_to_handle(fd.as_fd(), c"").map_err(stale)?.0;
                (fd, Anchor::handle(&h, mnt))
            }
            Record::Name { parent, name } => {
                let up = self.find_node(parent, depth + 1)?;
                let dir = up.fd()?;
                let fd = sys::open_path(dir.as_fd(), &name).map_err(stale)?;
                (fd, Anchor::named(&up, &name))
            }
        };
        let st = sys::fstat(fd.as_fd()).map_err(io)?;
        if st.st_dev != self.root_key.dev || st.st_ino != ino {
            return Err(Errno::ESTALE);
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR && !self.inside(fd.as_fd())? {
            return Err(Errno::ESTALE);
        }
        Ok(self.make(ino, &st, anchor, 0))
    }

    /// Whether the directory behind `dir` lies under BACKING's root: its
    /// ".." chain reaches the root before its filesystem's top.
    fn inside(&self, dir: std::os::fd::BorrowedFd<'_>) -> Result<bool> {
        let mut at = dir.try_clone_to_owned().map_err(io)?;
        for _ in 0..4096 {
            let st = sys::fstat(at.as_fd()).map_err(io)?;
            if Key::of(&st) == self.root_key {
                return Ok(true);
            }
            let up = sys::openat(
                at.as_fd(),
                c"..",
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(io)?;
            if Key::of(&sys::fstat(up.as_fd()).map_err(io)?) == Key::of(&st) {
                return Ok(false);
            }
            at = up;
        }
        Ok(false)
    }

    /// The FUSE number of the backing inode in state `st`, if the kernel
    /// holds it now (for the watch of BACKING, which learns of changes by
    /// backing inode).
    pub fn number(&self, st: &libc::stat) -> Option<u64> {
        let key = Key::of(st);
        if key == self.root_key {
            return Some(ROOT);
        }
        let t = self.tables.lock();
        let ino = self.number_of(&t, key)?;
        t.by_ino
            .get(&ino)
            .filter(|e| e.0.key == key)
            .map(|e| e.0.ino)
    }

    /// The FUSE number of the inode of BACKING's own filesystem whose
    /// backing number is `ino` and whose file handle is (`ty`, `bytes`),
    /// told by the handle alone (no descriptor opened): Some(None) if the
    /// kernel holds no such inode, None if the table cannot tell (entries
    /// not reached by handle).
    pub fn number_by_handle(&self, ino: u64, ty: i32, bytes: &[u8]) -> Option<Option<u64>> {
        if !self.shared.by_handle {
            return None;
        }
        let entry = self.tables.lock().by_ino.get(&ino).map(|e| e.0.clone());
        let Some(e) = entry else {
            return Some(None);
        };
        let inner = e.inner.lock();
        let (t, b, _) = inner.anchor.parts()?;
        Some((t == ty && b == bytes).then_some(e.ino))
    }

    /// The FUSE numbers the kernel holds now.
    pub fn numbers(&self) -> Vec<u64> {
        self.tables.lock().by_ino.iter().map(|e| e.0.ino).collect()
    }

    /// Whether `ino` is the number of an inode on another filesystem than
    /// BACKING's own (one mounted inside BACKING).
    pub fn is_foreign(ino: u64) -> bool {
        ino >= FOREIGN_BASE
    }

    /// Returns freed memory to the system, once the kernel's current round
    /// of forgetting (thousands of entries within milliseconds) is over.
    fn give_back_memory(&self) {
        if self.shared.trimming.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("trim".into())
            .spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                sys::process::release_free_memory();
                shared.trimming.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.shared.trimming.store(false, Ordering::Release);
        }
    }

    /// The most descriptors the table keeps of inodes not open through the
    /// mount.
    pub fn cache_bound(&self) -> usize {
        self.shared.cap
    }

    /// Entries in the table (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tables.lock().by_ino.len()
    }

    /// Descriptors the cache holds now (for tests).
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.shared
            .clock
            .lock()
            .ring
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|i| i.has_cached_fd())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn table(dir: &std::path::Path, cap: usize, by_handle: bool) -> InodeTable {
        let root = crate::fs::CutFs::open_backing(dir).unwrap();
        InodeTable::with(root, cap, by_handle).unwrap()
    }

    fn cname(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    /// Descriptors of this process whose target lies under `dir`.
    fn fds_under(dir: &std::path::Path) -> Vec<String> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.starts_with(dir) && t != dir)
            .map(|t| t.display().to_string())
            .collect()
    }

    /// Many inodes in many directories: every one reopens; the table holds
    /// no file's descriptor, directories' only (at most `cap`) and only
    /// until they go unused.
    fn many_inodes(by_handle: bool) {
        let d = tempfile::tempdir().unwrap();
        for s in 0..40 {
            std::fs::create_dir(d.path().join(format!("sub{s}"))).unwrap();
            for i in 0..5 {
                std::fs::write(d.path().join(format!("sub{s}/f{i}")), format!("{s}.{i}")).unwrap();
            }
        }
        let t = table(d.path(), 16, by_handle);
        if by_handle && !t.shared.by_handle {
            eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
            return;
        }
        let root = t.get(ROOT).unwrap();
        let mut all = Vec::new();
        for s in 0..40 {
            let (sub, _) = t.lookup(&root, &cname(&format!("sub{s}"))).unwrap();
            for i in 0..5 {
                let (inode, st) = t.lookup(&sub, &cname(&format!("f{i}"))).unwrap();
                assert_eq!(inode.ino, st.st_ino);
                all.push((format!("sub{s}/f{i}"), format!("{s}.{i}"), inode));
            }
            assert!(t.cached() <= 16, "{} cached", t.cached());
        }
        for (path, want, inode) in &all {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut inode.open(libc::O_RDONLY).unwrap(), &mut s)
                .unwrap();
            assert_eq!(&s, want);
            assert_eq!(&inode.path(), path);
            assert!(!inode.has_cached_fd(), "a file's descriptor is kept");
        }
        let kept = fds_under(d.path());
        assert!(kept.len() <= 16, "{kept:?}");
        assert!(kept.iter().all(|p| !p.contains("/f")), "{kept:?}");
        t.shared.sweep();
        t.shared.sweep();
        let kept = fds_under(d.path());
        assert!(kept.is_empty(), "unused descriptors kept: {kept:?}");
        assert_eq!(t.len(), 1 + 40 * 6);
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
        assert_eq!(std::fs::read(p.join("a2")).unwrap(), b"a");
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"a");
        assert_eq!(x.fd().err(), Some(Errno::ESTALE));
        assert_eq!(x.open(libc::O_RDONLY).err(), Some(Errno::ESTALE));
        std::fs::rename(p.join("link"), p.join("x")).unwrap();
        assert_eq!(x.fd().err(), Some(Errno::ESTALE));
        assert_eq!(x.stat().err(), Some(Errno::ESTALE));
    }

    /// By handle: renames anywhere are followed; a deleted file is ESTALE;
    /// a file deleted natively is not held open by the table.
    #[test]
    fn by_handle_follows_renames_and_lets_deleted_files_go() {
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
        g.stat().unwrap();
        std::fs::rename(p.join("d/a"), p.join("moved")).unwrap();
        std::fs::remove_file(p.join("gone")).unwrap();
        let kept = fds_under(p);
        assert!(kept.iter().all(|f| !f.contains("gone")), "{kept:?}");
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"a");
        assert_eq!(a.path(), "moved");
        assert_eq!(g.fd().err(), Some(Errno::ESTALE));
        // A new file that got the deleted one's number is the entry's file
        // after the next lookup (its handle is taken then).
        std::fs::write(p.join("new"), b"n").unwrap();
        let (n, _) = t.lookup(&root, &cname("new")).unwrap();
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut n.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"n");
    }

    /// An open handle's descriptor serves as the inode's: a file unlinked
    /// (by name, the hardest case) while open still answers, through the
    /// handle's own descriptor, and no second one is opened; once the last
    /// handle detaches the inode is gone.
    #[test]
    fn open_files_answer_after_unlink_through_their_own_descriptor() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("open"), b"o").unwrap();
        for by_handle in [false, true] {
            let t = table(p, 16, by_handle);
            let root = t.get(ROOT).unwrap();
            let (o, _) = t.lookup(&root, &cname("open")).unwrap();
            let fd = Arc::new(o.open(libc::O_RDONLY).unwrap());
            let first = o.attach(Some(&fd));
            let second_fd = Arc::new(o.open(libc::O_RDONLY).unwrap());
            let second = o.attach(Some(&second_fd));
            assert!(first.state().is_some() && o.open_state().is_some());
            let n = fds_under(p).len();
            assert_eq!(n, 2, "one descriptor per open handle");
            if by_handle {
                std::fs::rename(p.join("open"), p.join("moved")).unwrap();
            }
            std::fs::remove_file(p.join(if by_handle { "moved" } else { "open" })).unwrap();
            // The first handle closes; the second's descriptor takes over.
            drop(first);
            drop(fd);
            assert_eq!(o.stat().unwrap().st_nlink, 0);
            assert_eq!(fds_under(p).len(), 1);
            drop(second);
            drop(second_fd);
            assert!(o.open_state().is_none(), "the state outlived the handles");
            assert!(o.stat().is_err());
            assert!(fds_under(p).is_empty());
            std::fs::write(p.join("open"), b"o").unwrap();
        }
    }

    /// A directory removed in BACKING is let go within two sweeps (about a
    /// second), though the kernel still remembers it and it was in use.
    #[test]
    fn removed_directories_are_let_go_within_a_second() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("gone/sub")).unwrap();
        for by_handle in [true, false] {
            let t = table(p, 16, by_handle);
            let root = t.get(ROOT).unwrap();
            let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
            t.lookup(&g, &cname("sub")).unwrap();
            assert!(g.has_cached_fd());
            std::fs::remove_dir(p.join("gone/sub")).unwrap();
            std::fs::remove_dir(p.join("gone")).unwrap();
            t.shared.sweep();
            t.shared.sweep();
            let kept = fds_under(p);
            assert!(kept.is_empty(), "{kept:?}");
            assert_eq!(g.fd().err(), Some(Errno::ESTALE));
            std::fs::create_dir_all(p.join("gone/sub")).unwrap();
        }
    }

    /// Forgotten entries leave the table, which shrinks once it emptied.
    #[test]
    fn forget_lets_go_and_the_table_shrinks() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..3000 {
            std::fs::write(d.path().join(format!("f{i}")), b"").unwrap();
        }
        let t = table(d.path(), 16, true);
        let root = t.get(ROOT).unwrap();
        let mut inos = Vec::new();
        for i in 0..3000 {
            let (inode, _) = t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
            t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
            inos.push(inode.ino);
        }
        let full = t.tables.lock().by_ino.capacity();
        for &ino in &inos {
            t.forget(ino, 1);
        }
        assert_eq!(t.len(), 3001, "one lookup each is still held");
        for &ino in &inos {
            t.forget(ino, 1);
        }
        assert_eq!(t.len(), 1);
        assert!(t.get(ROOT).is_ok());
        assert!(t.get(inos[0]).is_err());
        let now = t.tables.lock().by_ino.capacity();
        assert!(now <= 1024 && now < full, "capacity {full} → {now}");
    }

    /// Nodes the kernel forgot are found again from their records
    /// (`export`): the same file, generation and parent; a deleted one,
    /// or a number never handed out, is ESTALE.
    #[test]
    fn forgotten_nodes_are_found_again_and_deleted_ones_are_stale() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/f"), b"x").unwrap();
        for by_handle in [true, false] {
            std::fs::write(p.join("gone"), b"g").unwrap();
            let t = table(p, 16, by_handle);
            if by_handle && !t.shared.by_handle {
                eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
                continue;
            }
            t.set_nodes(Arc::new(Nodes::new(None)));
            let root = t.get(ROOT).unwrap();
            let (sub, _) = t.lookup(&root, &cname("sub")).unwrap();
            let (f, _) = t.lookup(&sub, &cname("f")).unwrap();
            let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
            let (sub_ino, f_ino, g_ino) = (sub.ino, f.ino, g.ino);
            let f_gen = f.generation();
            assert_eq!(f_gen == 0, !by_handle);
            drop((sub, f, g));
            for ino in [f_ino, sub_ino, g_ino] {
                t.forget(ino, 1);
                assert!(t.get(ino).is_err());
            }
            let (f, st) = t.revive(f_ino).unwrap();
            assert_eq!((f.ino, st.st_ino, f.generation()), (f_ino, f_ino, f_gen));
            let mut s = Vec::new();
            std::io::Read::read_to_end(&mut f.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
            assert_eq!(s, b"x");
            assert_eq!(t.parent_of(f_ino).err(), Some(Errno::ENOTDIR));
            let (sub, _) = t.revive(sub_ino).unwrap();
            assert!(sub.is_dir());
            let (up, _) = t.parent_of(sub_ino).unwrap();
            assert_eq!(up.ino, ROOT);
            assert_eq!(t.parent_of(ROOT).unwrap().0.ino, ROOT);
            std::fs::remove_file(p.join("gone")).unwrap();
            assert_eq!(t.revive(g_ino).err(), Some(Errno::ESTALE));
            assert_eq!(t.revive(g_ino + 1_000_000).err(), Some(Errno::ESTALE));
            assert_eq!(t.revive(FOREIGN_BASE + 5).err(), Some(Errno::ESTALE));
        }
    }

    /// The lookups, the file type and the CLOCK bit share one word: none
    /// of them changes another, and lookups never wrap into the type.
    #[test]
    fn the_word_keeps_lookups_type_and_clock_apart() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("f"), b"").unwrap();
        let t = table(d.path(), 16, true);
        let root = t.get(ROOT).unwrap();
        let (sub, _) = t.lookup(&root, &cname("sub")).unwrap();
        let (f, _) = t.lookup(&root, &cname("f")).unwrap();
        assert!(sub.is_dir() && !sub.is_reg() && f.is_reg() && !f.is_dir());
        assert_eq!(root.fmt(), libc::S_IFDIR);
        f.add_lookups(u64::MAX);
        assert!(f.is_reg());
        assert!(f.take_used() && !f.take_used());
        assert_eq!(f.sub_lookups(LOOKUPS - 1), 1, "the count saturated");
        assert_eq!(f.sub_lookups(1), 0);
        assert!(f.is_reg() && !f.take_used());
        f.mark_used();
        f.set_lookups(2);
        assert_eq!(f.sub_lookups(1), 1);
        assert!(f.is_reg() && f.take_used());
        t.forget(f.ino, 1);
        assert!(t.get(f.ino).is_err());
        t.forget(sub.ino, 1);
        assert!(t.get(sub.ino).is_err());
    }

    /// What an entry costs (see the module doc; measured as a whole by
    /// scripts/bench-inodes.sh).
    #[test]
    fn an_entry_stays_small() {
        let size = std::mem::size_of::<Inode>();
        println!(
            "Inode: {size} bytes (Anchor {}, KnownContent {}), in an Arc: {}",
            std::mem::size_of::<Anchor>(),
            std::mem::size_of::<KnownContent>(),
            size + 16
        );
        // 120 bytes, 136 in an Arc: glibc's 144-byte chunk (152 would
        // take the 160-byte one).
        assert!(size <= 120, "an inode entry takes {size} bytes");
        assert!(std::mem::size_of::<Anchor>() <= 24);
        assert!(std::mem::size_of::<Inner>() <= 32);
    }
}
