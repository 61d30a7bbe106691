//! Learns what changed in BACKING behind the daemon's back, and tells the
//! kernel at once (`invalidate`), so that the kernel may cache names and
//! attributes for minutes (`options`: the long timeouts apply only while
//! this watch runs).
//!
//! **How.** One fanotify group marks BACKING's whole filesystem
//! (`crate::sys::fanotify`: file handles and names, no descriptors; a
//! filesystem mark reports that one filesystem's events only). Each
//! event names a directory entry (directory handle + name: created,
//! removed, moved in or out) or an inode (handle: contents or attributes
//! changed). The inode table finds the inode by its handle (which, for
//! ext4, xfs and tmpfs, holds the inode's number: `Layout`; on other
//! filesystems the handle is opened `O_PATH` and stat'ed) and says whether
//! the kernel holds it; only then is the kernel told: `inval_entry(directory,
//! name)` for a name, `inval_inode` of contents (pages, attributes, ACLs)
//! for a write, append or truncate, of attributes for chmod, chown, times,
//! links, xattrs and ACLs, and for an inode renamed (a rename moves the
//! renamed inode's change time, which no entry event carries). Events the
//! daemon caused itself (its process id) are skipped: every change made
//! through the mount reaches the kernel in the reply that made it, or
//! through `invalidate` from the handler.
//!
//! The daemon's own state needs nothing: what it knows of a file's content
//! (class, offset index) is kept under the file's stamp (size, mtime,
//! ctime, inode) and every read compares the stamp with a fresh `fstat`
//! (`content`), so no index outlives a change.
//!
//! **Bounded.** Events are read in batches of at most [`BUFFER`] bytes,
//! gathered for [`GATHER`] after each batch, and coalesced (one
//! notification per name or inode and batch); the kernel
//! queues at most 16384 events, and past that drops them and says so (an
//! overflow). After an overflow every name the kernel caches is looked up
//! again before its next use (`FUSE_NOTIFY_INC_EPOCH`) and every inode it
//! holds has its contents and attributes dropped: memory stays what the
//! queue and one batch take, and the work is one notification per inode
//! the kernel holds. Logged once per window (`crate::ratelog`).
//!
//! **When there is no watch** the kernel's caches expire after the short
//! timeouts (1 s), as before, and the log says why once: `-o watch=off`;
//! a daemon without CAP_SYS_ADMIN and CAP_DAC_READ_SEARCH (fanotify on a
//! filesystem, file handles); a BACKING on a network or FUSE filesystem
//! (NFS, CIFS/SMB, Ceph, 9p, AFS, Lustre, GlusterFS, FUSE: other hosts
//! change it unseen); a filesystem fanotify cannot mark with file handles.
//! Files on other filesystems mounted inside BACKING are never watched:
//! their names and attributes always get the short timeouts (`CutFs`).
//! Two kinds of write raise no event (as with inotify): through a shared
//! writable mapping in BACKING, and by a loop device whose backing file
//! lies in BACKING (the kernel writes it from inside). Both move the
//! file's times, so they show at the file's next open through the mount,
//! which finds the stamp moved and drops the kernel's pages; a descriptor
//! open through the mount before reads them from then on.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::sys;
use crate::sys::fanotify::{self, Event, Fanotify, Fid};

use crate::fs::coherence::invalidate::Invalidator;
use crate::fs::frontend::options::{LONG_TIMEOUT, SHORT_TIMEOUT};
use crate::fs::state::inodes::InodeTable;

/// Bytes read from the group at once: about 1500 events of a short name.
const BUFFER: usize = 64 << 10;

/// How long the watch lets events gather after a batch before it reads
/// again. A read returns as soon as one event is queued, so on a busy
/// filesystem (any process writing anywhere on it: the mark is the whole
/// filesystem's) the watch would wake for nearly every event, one read
/// each; waiting this long after each batch makes the next one hold all
/// that came meanwhile, so the watch wakes at most 200 times a second
/// whatever the rate. A change that finds the watch asleep in its read is
/// still told at once; one that comes during the wait, within 5 ms.
const GATHER: Duration = Duration::from_millis(5);

/// The events watched.
const MASK: u64 = fanotify::MODIFY
    | fanotify::ATTRIB
    | fanotify::MOVE_SELF
    | fanotify::CREATE
    | fanotify::DELETE
    | fanotify::MOVED_FROM
    | fanotify::MOVED_TO
    | fanotify::ONDIR;

/// Entry changes.
const NAMES: u64 = fanotify::CREATE | fanotify::DELETE | fanotify::MOVED_FROM | fanotify::MOVED_TO;

/// Filesystems whose other hosts (or another daemon) change files no
/// local watch sees, by `statfs` type.
const REMOTE: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x517B, "SMB"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x0BD0_0BD0, "Lustre"),
    (0x6573_5546, "FUSE"),
    (0x7461_636F, "OCFS2"),
    (0x0116_1970, "GFS2"),
];

/// The timeouts each reply gives the kernel: the options' if given;
/// otherwise long while the watch runs, short for files of other
/// filesystems mounted inside BACKING (never watched) and when it does not.
#[derive(Clone)]
pub struct Timeouts {
    attr: Option<Duration>,
    entry: Option<Duration>,
    watching: Arc<AtomicBool>,
}

impl Timeouts {
    pub fn new(attr: Option<Duration>, entry: Option<Duration>) -> Timeouts {
        Timeouts {
            attr,
            entry,
            watching: Arc::default(),
        }
    }

    fn default_for(&self, ino: u64) -> Duration {
        if self.watching.load(Ordering::Acquire) && !InodeTable::is_foreign(ino) {
            LONG_TIMEOUT
        } else {
            SHORT_TIMEOUT
        }
    }

    /// How long the kernel may keep the attributes of `ino`.
    pub fn attr(&self, ino: u64) -> Duration {
        self.attr.unwrap_or_else(|| self.default_for(ino))
    }

    /// How long the kernel may keep a name of `ino`.
    pub fn entry(&self, ino: u64) -> Duration {
        self.entry.unwrap_or_else(|| self.default_for(ino))
    }
}

/// An armed watch: the group has its mark, events queue from now on.
pub struct Watch {
    fan: Fanotify,
    dev: u64,
    /// BACKING's root, opened for `open_by_handle_at` (not `O_PATH`).
    handles: OwnedFd,
    /// BACKING's root's handle (its FUSE number is 1, not its own).
    root: (i32, Box<[u8]>),
    /// Where this filesystem's handles hold the inode number, if it is a
    /// layout [`Layout::probe`] recognised.
    layout: Option<Layout>,
}

/// Where a handle holds its inode's number, for the common layouts (ext4,
/// xfs and tmpfs handles without a parent). Read this way, an event's
/// inode is found in the table by its handle alone, and no descriptor of
/// it is opened: a file deleted in BACKING is never held open (its space
/// not freed) by the watch, even for a moment.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// Type 1, 8 bytes: 32-bit number, generation (ext4, xfs).
    Ino32Gen,
    /// Type 1, 12 bytes: generation, number's low and high 32 bits (tmpfs).
    GenIno64,
    /// Type 0x81, 12 bytes: 64-bit number, generation (xfs).
    Ino64Gen,
}

impl Layout {
    fn of(ty: i32, len: usize) -> Option<Layout> {
        match (ty, len) {
            (1, 8) => Some(Layout::Ino32Gen),
            (1, 12) => Some(Layout::GenIno64),
            (0x81, 12) => Some(Layout::Ino64Gen),
            _ => None,
        }
    }

    fn ino(self, b: &[u8]) -> Option<u64> {
        let u32_at = |at: usize| -> Option<u64> {
            Some(u64::from(u32::from_ne_bytes(
                b.get(at..at + 4)?.try_into().ok()?,
            )))
        };
        match self {
            Layout::Ino32Gen => u32_at(0),
            Layout::GenIno64 => Some(u32_at(4)? | u32_at(8)? << 32),
            Layout::Ino64Gen => Some(u32_at(0)? | u32_at(4)? << 32),
        }
    }

    /// The layout of `root`'s handle, if it reads back as `root`'s number.
    fn probe(ty: i32, bytes: &[u8], ino: u64) -> Option<Layout> {
        Layout::of(ty, bytes.len()).filter(|l| l.ino(bytes) == Some(ino))
    }
}

/// Arms the watch of the filesystem of BACKING's root `root`, or says why
/// there is none (`wanted` false: `-o watch=off`).
pub fn arm(root: BorrowedFd<'_>, wanted: bool) -> Result<Watch, String> {
    if !wanted {
        return Err("-o watch=off".into());
    }
    let ftype =
        fanotify::filesystem_type(root).map_err(|e| format!("statfs of BACKING failed: {e}"))?;
    if let Some((_, name)) = REMOTE.iter().find(|(t, _)| *t == ftype) {
        return Err(format!(
            "BACKING is on {name}, where changes made elsewhere raise no event here"
        ));
    }
    let fan = Fanotify::new().map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => "the daemon is not root (fanotify on a whole filesystem needs \
                              CAP_SYS_ADMIN)"
            .to_string(),
        _ => format!("fanotify is unavailable: {e}"),
    })?;
    let handles: OwnedFd = sys::reopen(root, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| format!("BACKING cannot be reopened: {e}"))?
        .into();
    // File handles of this filesystem must open again here.
    let (h, _) = sys::name_to_handle(root, c"")
        .map_err(|e| format!("BACKING's filesystem gives no file handles: {e}"))?;
    sys::open_by_handle(handles.as_fd(), &h, libc::O_PATH)
        .map_err(|e| format!("file handles of BACKING's filesystem do not reopen: {e}"))?;
    fan.mark_filesystem(handles.as_fd(), MASK)
        .map_err(|e| format!("fanotify cannot mark BACKING's filesystem: {e}"))?;
    let st = sys::fstat(root).map_err(|e| format!("stat of BACKING failed: {e}"))?;
    let layout = Layout::probe(h.ty(), h.bytes(), st.st_ino);
    log::debug!("watch: file handles of type {} read as {layout:?}", h.ty());
    Ok(Watch {
        fan,
        dev: st.st_dev,
        handles,
        root: (h.ty(), h.bytes().into()),
        layout,
    })
}

impl Watch {
    /// Serves the watch on a thread of its own until the process ends (or
    /// the group fails: then `active` turns false, so replies go back to
    /// the short timeouts, and the kernel is told to forget everything).
    pub fn spawn(
        self,
        inodes: Arc<InodeTable>,
        kernel: Arc<Invalidator>,
        timeouts: &Timeouts,
    ) -> std::io::Result<()> {
        let active = timeouts.watching.clone();
        active.store(true, Ordering::Release);
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                let own = i32::try_from(std::process::id()).unwrap_or(-1);
                let mut buf = vec![0u8; BUFFER];
                loop {
                    let n = match self.fan.read(&mut buf) {
                        Ok(n) => n,
                        Err(e) => {
                            active.store(false, Ordering::Release);
                            log::error!(
                                "the watch of BACKING failed ({e}); the kernel's caches now \
                                 expire after the short timeouts"
                            );
                            kernel.everything();
                            return;
                        }
                    };
                    let mut batch = Batch::default();
                    for e in fanotify::events(&buf[..n]) {
                        batch.add(e, own);
                    }
                    batch.apply(&self, &inodes, &kernel);
                    std::thread::sleep(GATHER);
                }
            })?;
        Ok(())
    }

    /// The FUSE number of the inode `fid` names, if the kernel holds it:
    /// by the handle alone where its layout is known, else by opening it.
    fn number(&self, fid: &Fid, inodes: &InodeTable) -> Option<u64> {
        if fid.ty == self.root.0 && fid.handle == self.root.1 {
            return Some(crate::fs::state::inodes::ROOT);
        }
        if let Some(ino) = self.layout.and_then(|l| l.ino(&fid.handle)) {
            if let Some(known) = inodes.number_by_handle(ino, fid.ty, &fid.handle) {
                return known;
            }
        }
        let fd = sys::open_by_handle_parts(self.handles.as_fd(), fid.ty, &fid.handle, libc::O_PATH)
            .ok()?;
        let st = sys::fstat(fd.as_fd()).ok()?;
        if st.st_dev != self.dev {
            return None;
        }
        inodes.number(&st)
    }
}

/// One read's events, coalesced.
#[derive(Default)]
struct Batch {
    names: HashSet<(Fid, Box<[u8]>)>,
    contents: HashSet<Fid>,
    attributes: HashSet<Fid>,
    overflow: bool,
}

impl Batch {
    fn add(&mut self, e: Event, own: i32) {
        if e.mask & fanotify::OVERFLOW != 0 {
            self.overflow = true;
            return;
        }
        if e.pid == own {
            return;
        }
        if e.mask & NAMES != 0 {
            if let Some((dir, name)) = e.dir.clone().filter(|(_, n)| !n.is_empty()) {
                self.names.insert((dir, name));
            }
        }
        // An event on a directory itself reports the directory as its
        // DFID record with the name "." and no FID record.
        let object = e.object.or_else(|| {
            e.dir
                .as_ref()
                .filter(|(_, n)| n.is_empty() || **n == *b".")
                .map(|(d, _)| d.clone())
        });
        let Some(object) = object else {
            return;
        };
        if e.mask & fanotify::MODIFY != 0 {
            self.attributes.remove(&object);
            self.contents.insert(object);
        } else if e.mask & (fanotify::ATTRIB | fanotify::MOVE_SELF) != 0
            && !self.contents.contains(&object)
        {
            self.attributes.insert(object);
        }
    }

    /// Tells the kernel; returns how many notifications were sent.
    fn apply(self, w: &Watch, inodes: &InodeTable, kernel: &Invalidator) -> u64 {
        if self.overflow {
            let epoch = kernel.everything();
            let all = inodes.numbers();
            crate::ratelog::warn("watch-overflow", "", || {
                format!(
                    "BACKING changed faster than its watch could follow (events were lost): \
                     the kernel {} and drops what it holds of {} inodes",
                    if epoch {
                        "looks every name up again"
                    } else {
                        "(too old to be told to look every name up again)"
                    },
                    all.len()
                )
            });
            for &ino in &all {
                kernel.contents(ino);
            }
            return all.len() as u64 + u64::from(epoch);
        }
        let mut seen: HashMap<&Fid, Option<u64>> = HashMap::new();
        let mut number = |fid| *seen.entry(fid).or_insert_with(|| w.number(fid, inodes));
        let mut sent = 0;
        for (dir, name) in &self.names {
            if let Some(p) = number(dir) {
                kernel.entry(p, OsStr::from_bytes(name));
                sent += 1;
            }
        }
        for fid in &self.contents {
            if let Some(i) = number(fid) {
                kernel.contents(i);
                sent += 1;
            }
        }
        for fid in &self.attributes {
            if let Some(i) = number(fid) {
                kernel.attributes(i);
                sent += 1;
            }
        }
        sent
    }
}
