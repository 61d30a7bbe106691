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
//! from being served for it. A lookup or create that finds a known number
//! on another file than its entry's (another type, or by handle another
//! handle) gives the number a new entry (`InodeTable::renew`), so nothing
//! of the deleted file (its type, a cached descriptor, what was known of
//! its content) is used for the new one.
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
//! This module knows nothing of encodings or handles' meaning. Its rooms:
//! `anchor` (the way back to an inode, and its path), `dirfds` (the cache
//! of directory descriptors), `open` (what handles attach), `slots` (the
//! hash set); export's reconnection of forgotten nodes is
//! `crate::fs::export::reconnect`.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, OsStr};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::fs::export::{self, Nodes, Record};
use crate::fs::frontend::error::{io, Errno, Result};
use crate::fs::state::content::{KnownContent, OpenFile};
use crate::sys::{self, BackingHandle};

mod anchor;
mod dirfds;
mod open;
mod slots;

use anchor::Anchor;
use dirfds::{Clock, CAP_MAX, CAP_MIN, SWEEP};
pub use open::Attached;
use slots::{Entry, InoHash};

/// FUSE's number for the root directory.
pub const ROOT: u64 = 1;

/// `statfs`'s `f_type` of a FUSE filesystem.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// Numbers for files on other filesystems start here.
const FOREIGN_BASE: u64 = 1 << 63;

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

impl Inode {
    /// The word of a new entry for a file in state `st`.
    fn word(st: &libc::stat, lookups: u64) -> u64 {
        (u64::from(st.st_mode & libc::S_IFMT) >> 12 << FMT_SHIFT) | lookups.min(LOOKUPS) | USED
    }

    /// Counts `n` more lookups.
    fn add_lookups(&self, n: u64) {
        let _ = self
            .word
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                Some((w & !LOOKUPS) | ((w & LOOKUPS).saturating_add(n).min(LOOKUPS)))
            });
    }

    /// The lookups counted.
    fn lookups(&self) -> u64 {
        self.word.load(Ordering::Relaxed) & LOOKUPS
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

    /// The generation the kernel is given for this inode (`export`).
    pub fn generation(&self) -> u64 {
        self.inner.lock().anchor.generation()
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
            // An open entry's descriptors keep its backing inode, so its
            // number cannot have gone to another file: no handle asked.
            let handle = (self.shared.by_handle && !inode.is_open())
                .then(|| sys::name_to_handle(dir.as_fd(), name).ok())
                .flatten();
            if self.another_file(&inode, &st, handle.as_ref()) {
                let anchor = self.anchor_at(dir.as_fd(), name, &st, parent);
                return Ok((self.renew(&inode, &st, anchor), st));
            }
            inode.seen_as(parent, name);
            return Ok((inode, st));
        }
        let anchor = self.anchor_at(dir.as_fd(), name, &st, parent);
        Ok((self.enter(&st, anchor), st))
    }

    /// Counts one more lookup of an entry already in the table.
    fn count_known(&self, key: Key) -> Option<Arc<Inode>> {
        let t = self.tables.lock();
        let inode = self.known_in(&t, key)?;
        // Under the table's lock, so that a `forget` cannot take the entry
        // out between the lookup and the count.
        inode.add_lookups(1);
        Some(inode.clone())
    }

    /// The entry of the backing inode `key` in `t`, if the kernel holds it.
    fn known_in<'t>(&self, t: &'t Tables, key: Key) -> Option<&'t Arc<Inode>> {
        let ino = self.number_of(t, key)?;
        t.by_ino.get(&ino).map(|e| &e.0).filter(|i| i.key == key)
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
    pub(in crate::fs) fn own_number(&self, key: Key) -> bool {
        key.dev == self.root_key.dev && key.ino > ROOT && key.ino < FOREIGN_BASE
    }

    /// Enters the inode in state `st` with `anchor` (or counts one more
    /// lookup of its existing entry, entered by another thread meanwhile).
    fn enter(&self, st: &libc::stat, anchor: Anchor) -> Arc<Inode> {
        let key = Key::of(st);
        let mut t = self.tables.lock();
        if let Some(inode) = self.known_in(&t, key) {
            inode.add_lookups(1);
            return inode.clone();
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
        let handle = sys::name_to_handle(file.as_fd(), c"").ok();
        let anchor = || match &handle {
            Some((h, mnt))
                if self.shared.by_handle && self.shared.mounts.lock().contains_key(mnt) =>
            {
                Anchor::handle(h, *mnt)
            }
            _ => Anchor::named(parent, name),
        };
        if let Some(inode) = self.count_known(Key::of(st)) {
            let by_handle = handle.as_ref().filter(|_| self.shared.by_handle);
            if self.another_file(&inode, st, by_handle) {
                return self.renew(&inode, st, anchor());
            }
            inode.seen_as(parent, name);
            return inode;
        }
        self.enter(st, anchor())
    }

    /// Whether the file in state `st` (with backing handle `handle`, when
    /// the table reopens by handle) is another file than the one entry
    /// `inode` was made for, though it has its number: a file or directory
    /// deleted while the kernel still held it, whose number a new one got
    /// (ext4 gives a freed number to the next new inode of its group at
    /// once). Told by the file type, and by the handle, whose generation
    /// differs.
    fn another_file(
        &self,
        inode: &Inode,
        st: &libc::stat,
        handle: Option<&(sys::BackingHandle, i32)>,
    ) -> bool {
        if inode.fmt() != st.st_mode & libc::S_IFMT {
            return true;
        }
        let Some((h, mnt)) = handle else {
            return false;
        };
        let i = inode.inner.lock();
        matches!(i.anchor, Anchor::Small { .. } | Anchor::Large { .. })
            && !i.anchor.same_handle(h, *mnt)
            && self.shared.mounts.lock().contains_key(mnt)
    }

    /// Gives the number of entry `old` to another file that got it (in
    /// state `st`, found by `anchor`; see [`InodeTable::another_file`]): a
    /// new entry, with the lookups counted on the old one (the kernel's
    /// FORGETs of its old inode and of the new one both come to this
    /// number), the new file's type, and none of the old one's
    /// descriptors: a deleted directory's cached descriptor, or an open
    /// deleted file's, would otherwise serve the new file. Handles still
    /// open on the old file keep the old entry (the kernel has marked
    /// that inode bad once it saw the new generation).
    fn renew(&self, old: &Arc<Inode>, st: &libc::stat, anchor: Anchor) -> Arc<Inode> {
        let record = anchor.record();
        let mut t = self.tables.lock();
        let lookups = match t.by_ino.get(&old.ino) {
            Some(e) if Arc::ptr_eq(&e.0, old) => old.lookups(),
            // Renewed by another lookup first, with this one's count.
            Some(e) => return e.0.clone(),
            None => 1,
        };
        let inode = self.make(old.ino, st, anchor, lookups);
        t.by_ino.replace(Entry(inode.clone()));
        drop(t);
        self.shared.record(inode.ino, record);
        inode
    }

    /// After a rename through the mount: the inode now at `name` in `dir`
    /// (if the kernel knows it) is found there from now on.
    pub fn renamed(&self, dir: &Arc<Inode>, name: &CStr) {
        let Ok(fd) = dir.fd() else { return };
        let Ok(st) = sys::statat(fd.as_fd(), name) else {
            return;
        };
        if let Some(inode) = self.entry_of(Key::of(&st)) {
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

    /// Enters `inode` (state `st`, found again outside the table) with one
    /// lookup, or counts one more of the entry another thread entered
    /// meanwhile for the same backing inode.
    pub(in crate::fs) fn adopt(&self, inode: Arc<Inode>, st: &libc::stat) -> Result<Arc<Inode>> {
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
}

/// What export's reconnection of forgotten nodes
/// (`crate::fs::export::reconnect`) asks of the table.
impl InodeTable {
    /// BACKING's root's identity.
    pub(in crate::fs) fn root_key(&self) -> Key {
        self.root_key
    }

    /// The entry of FUSE number `ino` with one more lookup counted, if the
    /// kernel holds it.
    pub(in crate::fs) fn count_lookup(&self, ino: u64) -> Option<Arc<Inode>> {
        let t = self.tables.lock();
        t.by_ino.get(&ino).map(|e| {
            e.0.add_lookups(1);
            e.0.clone()
        })
    }

    /// The entry of the backing inode `key`, if the kernel holds it.
    pub(in crate::fs) fn entry_of(&self, key: Key) -> Option<Arc<Inode>> {
        self.known_in(&self.tables.lock(), key).cloned()
    }

    /// Whether file handles of the filesystem with mount id `mnt` can be
    /// opened (one of its directories was entered).
    pub(in crate::fs) fn opens_handles_of(&self, mnt: i32) -> bool {
        self.shared.mounts.lock().contains_key(&mnt)
    }

    /// BACKING's own filesystem: its mount id and the descriptor that
    /// opens its handles (None when inodes are reopened by name).
    pub(in crate::fs) fn root_mount(&self) -> Option<(i32, Fd)> {
        let mnt = self.shared.root_mnt?;
        let fd = self.shared.mounts.lock().get(&mnt).cloned()?;
        Some((mnt, fd))
    }

    /// Reads ahead the records of the entries numbered `inos` of a
    /// directory on device `dev`, about to be looked up (`Nodes::prefetch`):
    /// the index records of those in `files`, and the node records of
    /// those the kernel does not hold yet (the lookup will record them).
    pub(in crate::fs) fn prefetch(&self, dev: u64, files: &[u64], inos: &[u64]) {
        let Some(n) = self.shared.nodes.get() else {
            return;
        };
        let nodes: Vec<u64> = if dev == self.root_key.dev {
            let t = self.tables.lock();
            inos.iter()
                .copied()
                .filter(|&ino| ino > ROOT && ino < FOREIGN_BASE && !t.by_ino.contains(&ino))
                .collect()
        } else {
            Vec::new()
        };
        n.prefetch(dev, files, &nodes);
    }

    /// How node `ino` was recorded to be found again, if it was.
    pub(in crate::fs) fn node_record(&self, ino: u64) -> Option<Record> {
        self.shared.nodes.get().and_then(|n| n.find(ino))
    }

    /// [`InodeTable::node_record`] once no daemon of this BACKING is
    /// closing (`Nodes::find_after_closing`): for a record found stale.
    pub(in crate::fs) fn node_record_after_closing(&self, ino: u64) -> Option<Record> {
        self.shared
            .nodes
            .get()
            .and_then(|n| n.find_after_closing(ino))
    }

    /// An entry for the backing inode in state `st` found by handle `h` on
    /// mount `mnt`, numbered `ino`, not entered in the table (no lookup
    /// counted: `adopt` enters it).
    pub(in crate::fs) fn outside_by_handle(
        &self,
        ino: u64,
        st: &libc::stat,
        h: &BackingHandle,
        mnt: i32,
    ) -> Arc<Inode> {
        self.make(ino, st, Anchor::handle(h, mnt), 0)
    }

    /// As [`InodeTable::outside_by_handle`], for an inode found as `name`
    /// in `parent`.
    pub(in crate::fs) fn outside_by_name(
        &self,
        ino: u64,
        st: &libc::stat,
        parent: &Arc<Inode>,
        name: &CStr,
    ) -> Arc<Inode> {
        self.make(ino, st, Anchor::named(parent, name), 0)
    }

    /// The FUSE number of the backing inode in state `st`, if the kernel
    /// holds it now (for the watch of BACKING, which learns of changes by
    /// backing inode).
    pub fn number(&self, st: &libc::stat) -> Option<u64> {
        let key = Key::of(st);
        if key == self.root_key {
            return Some(ROOT);
        }
        self.known_in(&self.tables.lock(), key).map(|i| i.ino)
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
}

#[cfg(test)]
mod tests;
