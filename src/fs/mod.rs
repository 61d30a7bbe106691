//! The `cutf8fs` FUSE filesystem: a mirror of BACKING in which corrected
//! files (those beginning with the magic number) appear as their UTF-8 view.
//!
//! Its rooms: `frontend` (requests in, replies out: the fuser trait, the
//! operations, errno, options, the daemon's and the mount's life), `state`
//! (what is kept per inode and per open file: the inode table, handles,
//! content, the write path, per-user shares), `coherence` (the kernel's
//! caches kept true against changes in BACKING), `locks` (locks forwarded
//! to BACKING), `export` (file handles that outlive the kernel's memory)
//! and `observe` (counters, progress, explanations in the log). This file
//! holds [`CutFs`], what they share.
//!
//! How a request flows:
//!
//! * [`CutFs`]'s `Filesystem` methods (`requests`) are thin: each calls one
//!   function in `ops` and ends in one `match` — `Ok` becomes the reply,
//!   `Err` an errno (decided in `error`, nowhere else).
//! * `ops` (one file per concern: names, meta, file, dir, xattr) does the
//!   work on BACKING through `inodes` (FUSE inode ↔ backing inode, found
//!   again by file handle or name for each request: no descriptor is kept
//!   of a file not open, so nothing deleted in BACKING is held; lookup
//!   counts), `handles` (fh ↔ open descriptor, one per handle, counted in
//!   its user's share by `share`) and `crate::sys` (symlink-safe `*at`
//!   system calls). `invalidate` tells the kernel what the daemon changed
//!   behind its caches (set-id bits it removed, say), and `watch` what
//!   others changed in BACKING; while the watch runs, the kernel caches
//!   names and attributes for minutes (`watch::Timeouts`). `inflight`
//!   weighs every short READ against those invalidations, so that the
//!   kernel never fills a read with zeros under a size it kept.
//! * For regular files, `content` decides raw or corrected (by the magic
//!   number, under a stamp of size/mtime/ctime/inode so nothing stale is
//!   served), keeps the per-file state (content lock, offset index) and the
//!   bounded index cache. Reads go through `crate::io` (raw bytes, or the
//!   view as `crate::view` plans it: view offset → disk offset, then V).
//! * `passthrough` decides which opens the kernel serves itself (FUSE
//!   passthrough: large raw files, read straight from BACKING; their
//!   writers' writes still come here) and keeps their backing ids; every
//!   other open is served as above.
//! * `attr` turns a backing `stat` into FUSE attributes; `CutFs::attr` is
//!   the one place that puts the view's length in st_size, for every reply
//!   that carries attributes.
//! * `daemon` (daemonizing, logging, signals) and `mount` (mount(2) or
//!   fusermount3) start and stop all this (`daemon` uses `mount`, never
//!   the other way; both report a `Failure`); `options` parses `-o`.
//!
//! * `write` is the write path: under the file's content lock (held alone)
//!   it decides from what the file is now — empty, raw or corrected — and
//!   sends view writes through `crate::io::write`, which carries out the
//!   plans of `crate::view::write` (in-place patches, appends, rewrites
//!   under `crate::redo` in `BACKING/.cutf8fs-journal`). The
//!   journal is opened from BACKING's root descriptor when the mount
//!   starts: it is trusted only if the daemon's user owns it (else the
//!   start is refused), and a read-only mount (`-o ro`, or a read-only
//!   BACKING) writes nothing to BACKING. `ops` hides every root name that
//!   `crate::trust::is_internal` claims and refuses to create them.
//!
//! * `locks` takes every lock asked for through the mount (`flock`, POSIX
//!   record locks, OFD locks) on the backing file, on a descriptor it keeps
//!   for the lock's owner, and waits for the ones that must wait on threads
//!   of its own; FLUSH and RELEASE tell it when an owner's locks go.

mod coherence;
mod export;
mod frontend;
mod locks;
mod observe;
mod state;
use crate::sys;

use coherence::{invalidate, watch};
pub use frontend::options;
use frontend::{archive, daemon, error, failure, ops, remount};
pub use observe::stats;
use state::{content, handles, inodes, passthrough, rawnew, recent, share};

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, Generation, INodeNo, InitFlags, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, RequestId, TimeOrNow, WriteFlags,
};

pub use daemon::{run, Config};
pub use failure::Failure;

use content::IndexCache;
use error::Result;
use handles::HandleTable;
use inodes::InodeTable;
use options::Options;

/// The filesystem: shared by all worker threads (every field is `Sync`).
pub struct CutFs {
    /// Shared with the scan threads (`scans`), as is `cache`.
    inodes: Arc<InodeTable>,
    /// Shared with the scan threads, which finish some opens.
    handles: Arc<HandleTable>,
    cache: Arc<IndexCache>,
    /// The mount's counters (`cutf8fs --stats`), shared with `cache`.
    stats: Arc<stats::Stats>,
    /// Threads that classify large files, so FUSE workers stay free.
    scans: content::ScanPool,
    /// Rewrites that must be all-or-nothing (`BACKING/.cutf8fs-journal`,
    /// created on first use, never on a read-only mount); shared with the
    /// journal's thread that finishes dead peers' rewrites.
    journal: Arc<crate::redo::RedoJournal>,
    newfiles: options::NewFiles,
    /// `-o blksize`: the preferred I/O size regular files show.
    blksize: Option<u32>,
    /// New files that stay raw, and file names for the log.
    raw: rawnew::RawPolicy,
    /// How long the kernel may cache each inode's attributes and names.
    ttl: watch::Timeouts,
    /// `-o noatime`: file handles read with O_NOATIME.
    noatime: bool,
    /// `-o noatime`/`nodiratime`: directory listings too.
    nodiratime: bool,
    /// `-o strictatime`: every open reads BACKING (no kept page cache), so
    /// BACKING's strictatime mount sees the access.
    strictatime: bool,
    /// Which opens the kernel serves itself (raw files read-only).
    passthrough: Arc<passthrough::Passthrough>,
    /// Each user's share of the descriptors for open files.
    shares: Arc<share::Shares>,
    /// Tells the kernel what the daemon changed behind its caches.
    kernel: Arc<invalidate::Invalidator>,
    /// Every lock taken through the mount, on the backing files.
    locks: locks::Locks,
    /// Descriptors xattr reads opened, kept for a moment.
    recent: recent::RecentFds,
    /// `-o archive`: the handles READs without one are served through.
    archive: Option<Arc<archive::Readers<Arc<handles::Handle>>>>,
    /// `-o ro` or `-o archive`: changes are refused here too, not only by
    /// the kernel's flag, which `mount -o remount,rw` can clear (`remount`).
    read_only: bool,
}

/// Threads scanning large files whose class is not known yet: at most this
/// many scans run at once; more wait in a queue, not in FUSE workers.
const SCAN_THREADS: usize = 2;

/// Refuses an access-time option the mount could not honour: the daemon
/// reads BACKING through BACKING's own mount, which decides when a read
/// updates an access time, and setting access times itself would change
/// ctime. So `relatime` and `strictatime` need BACKING's mount to follow
/// that rule already; `noatime`/`nodiratime` (O_NOATIME) need root, as the
/// daemon reads files it does not own.
fn check_atime(root: &std::os::fd::OwnedFd, opts: &Options) -> std::io::Result<()> {
    use options::Atime;
    use std::os::fd::AsFd;
    let f = sys::fstatvfs(root.as_fd())?.f_flag;
    let backing = if f & libc::ST_NOATIME != 0 {
        "noatime"
    } else if f & libc::ST_RELATIME != 0 {
        "relatime"
    } else {
        "strictatime"
    };
    let asked = match opts.atime() {
        Atime::Strict => "strictatime",
        Atime::Relative => "relatime",
        Atime::No | Atime::Backing => {
            if opts.nodiratime() && !sys::is_root() {
                return Err(std::io::Error::other(
                    "-o noatime and -o nodiratime need the daemon to run as root \
                     (it reads with O_NOATIME files it does not own); leave them out \
                     to follow BACKING's own mount",
                ));
            }
            return Ok(());
        }
    };
    if asked == backing {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "-o {asked}: BACKING is mounted {backing}, and only BACKING's own mount can \
         update access times as the daemon reads (setting them itself would change \
         ctime); remount BACKING with {asked}, or leave the option out to follow \
         BACKING's mount"
    )))
}

impl CutFs {
    /// A filesystem serving the directory behind `root` (an `O_PATH`
    /// descriptor of BACKING).
    pub fn new(root: std::os::fd::OwnedFd, opts: &Options) -> std::io::Result<CutFs> {
        check_atime(&root, opts)?;
        // First: it blocks a signal in this thread and every thread the
        // filesystem starts later (the scan threads, the FUSE workers).
        locks::Locks::block_wake_signal()?;
        // The journal is reached only through the root descriptor (never
        // a path resolved later); opening it checks it is the daemon's own
        // and replays what a killed daemon left half done, or refuses.
        let journal = Arc::new(crate::redo::RedoJournal::open(
            std::os::fd::AsFd::as_fd(&root),
            opts.read_only(),
        )?);
        // The cache directory of index databases, tidied by every daemon
        // as it starts (never fails the mount).
        crate::indexdb::tidy_cache(std::os::fd::AsFd::as_fd(&root), opts.index_db_cache);
        // What earlier mounts learned of file sizes (never fails the mount).
        let db = crate::indexdb::IndexDb::open(
            std::os::fd::AsFd::as_fd(&root),
            &opts.index_db,
            opts.read_only(),
        );
        // An archive opens no handle of the caller's: nothing to pass through.
        let passthrough = Arc::new(passthrough::Passthrough::new(
            if opts.archive {
                Some(false)
            } else {
                opts.passthrough
            },
            std::os::fd::AsFd::as_fd(&root),
        ));
        // Armed before the inode table takes the root: from here on every
        // change in BACKING is queued for the watch's thread.
        let watch = watch::arm(std::os::fd::AsFd::as_fd(&root), opts.watch);
        let inodes = Arc::new(InodeTable::new(root)?);
        let stats = Arc::<stats::Stats>::default();
        let cache = Arc::new(IndexCache::with_db(opts.index_cache, db, stats.clone()));
        inodes.set_nodes(Arc::new(export::Nodes::new(Some(cache.clone()))));
        let shares = share::Shares::new(descriptor_policy(&inodes, most_threads(opts.threads)));
        let kernel = Arc::<invalidate::Invalidator>::default();
        let ttl = watch::Timeouts::new(opts.attr_timeout, opts.entry_timeout);
        match watch {
            Ok(w) => {
                w.spawn(inodes.clone(), kernel.clone(), &ttl)?;
                log::info!(
                    "watching BACKING's filesystem: changes made beside the mount show at \
                     once; names and attributes are cached for {} s by default",
                    options::LONG_TIMEOUT.as_secs()
                );
            }
            Err(why) => log::info!(
                "no watch of BACKING ({why}): changes made beside the mount show within \
                 the timeouts, {} s by default",
                options::SHORT_TIMEOUT.as_secs()
            ),
        }
        let locks = locks::Locks::new(kernel.clone(), shares.clone());
        // Another daemon of this BACKING killed mid-rewrite is finished at
        // once, not at the next mount (`crate::redo`'s peer watch).
        journal.watch_peers(Arc::new(coherence::peers::Finishing {
            inodes: inodes.clone(),
            cache: cache.clone(),
            kernel: kernel.clone(),
        }))?;
        let archive = match opts.archive {
            true => {
                let readers = Arc::new(archive::Readers::default());
                archive::Readers::spawn_sweeper(&readers, ops::handle_closed)?;
                Some(readers)
            }
            false => None,
        };
        Ok(CutFs {
            stats,
            archive,
            locks,
            passthrough,
            shares,
            kernel,
            noatime: opts.atime() == options::Atime::No,
            nodiratime: opts.nodiratime(),
            strictatime: opts.atime() == options::Atime::Strict,
            journal,
            newfiles: opts.newfiles,
            blksize: opts.blksize,
            raw: rawnew::RawPolicy::new(&opts.rawdirs),
            inodes,
            handles: Arc::new(HandleTable::default()),
            cache,
            scans: content::ScanPool::new(SCAN_THREADS)?,
            ttl,
            recent: recent::RecentFds::new(),
            read_only: opts.read_only(),
        })
    }

    /// The kernel notifier's slot, for the daemon to connect once the
    /// session is up.
    pub fn invalidator(&self) -> Arc<invalidate::Invalidator> {
        self.kernel.clone()
    }

    /// The mount's counters, for the threads that outlive a request.
    pub(crate) fn stats(&self) -> Arc<stats::Stats> {
        self.stats.clone()
    }

    /// Opens BACKING for serving (an `O_PATH` descriptor of the directory).
    pub fn open_backing(backing: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(backing)?;
        Ok(dir.into())
    }

    fn reply_entry(&self, r: Result<fuser::FileAttr>, reply: ReplyEntry) {
        match r {
            Ok(a) => {
                let ino = a.ino.0;
                let gen = Generation(self.inodes.generation(ino));
                reply.entry_with_ttls(&self.ttl.attr(ino), &self.ttl.entry(ino), &a, gen)
            }
            Err(e) => reply.error(e),
        }
    }
}

/// Threads the request loop may add, above `-o threads`, while every
/// thread has been inside one request for a second (`fuser::STALL`: a
/// request waiting for a stalled filesystem mounted inside BACKING holds
/// its thread); they stay until the unmount (man cutf8fs, "Filesystems
/// mounted inside BACKING").
const STALLED_THREADS: usize = 32;

/// The most threads serving requests with `-o threads=threads`.
pub fn most_threads(threads: usize) -> usize {
    threads + STALLED_THREADS
}

/// Each user's share of the descriptors (`share`): the limit in force,
/// less the daemon's own — those open now (BACKING, journal, index
/// database, log), one FUSE device clone per worker, a few for each thread
/// that works at once, and the inode table's cache.
fn descriptor_policy(inodes: &InodeTable, threads: usize) -> share::Policy {
    let limit = usize::try_from(sys::fd_limit()).unwrap_or(usize::MAX);
    let working = threads + SCAN_THREADS + ops::PLUS_WORKERS;
    let own = sys::process::open_fds()
        + threads
        + share::PER_THREAD * working
        + inodes.cache_bound()
        + 16;
    let p = share::Policy::new(limit, own);
    log::info!(
        "descriptors: limit {limit}, {own} for the daemon's own work, {} for open files: \
         each user at most {}; the last {} only for users holding fewer than {}",
        p.pool,
        p.share,
        p.reserve,
        p.floor
    );
    p
}

impl CutFs {
    /// Runs one request's work under `error::guard`: a panic answers EIO
    /// and is logged with `op` and the path of `ino`; the session goes on.
    fn guard<T>(&self, op: &str, ino: u64, work: impl FnOnce() -> Result<T>) -> Result<T> {
        self.stats.request(op);
        if self.read_only && remount::changes(op) {
            return Err(error::Errno::EROFS);
        }
        error::guard(op, || self.name_of_ino(ino), work)
    }

    /// Classifies `inode` (state `st`) on the scan threads, for request
    /// `op`, and hands its attributes to `done` there (a panic is EIO).
    fn attr_on_scan_threads(
        &self,
        op: &'static str,
        inode: Arc<inodes::Inode>,
        st: libc::stat,
        done: impl FnOnce(Result<fuser::FileAttr>) + Send + 'static,
    ) {
        let (cache, blksize) = (self.cache.clone(), self.blksize);
        self.scans.run(move || {
            done(error::guard(
                op,
                || inode.path(),
                || {
                    ops::classify(&cache, &inode, &st)
                        .map(|c| ops::attr_with(&inode, &st, c, blksize))
                },
            ))
        });
    }

    /// Finishes a lookup whose file needs a long scan on the scan threads.
    fn entry_later(&self, inode: Arc<inodes::Inode>, st: libc::stat, reply: ReplyEntry) {
        let inodes = self.inodes.clone();
        let ino = inode.ino;
        let gen = Generation(inode.generation());
        let (attr_ttl, entry_ttl) = (self.ttl.attr(ino), self.ttl.entry(ino));
        self.attr_on_scan_threads("lookup", inode, st, move |r| match r {
            Ok(a) => reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, gen),
            Err(e) => {
                inodes.forget(ino, 1);
                reply.error(e)
            }
        });
    }

    /// Finishes a getattr whose file needs a long scan on the scan threads.
    fn attr_later(&self, inode: Arc<inodes::Inode>, st: libc::stat, reply: ReplyAttr) {
        let ttl = self.ttl.attr(inode.ino);
        self.attr_on_scan_threads("getattr", inode, st, move |r| match r {
            Ok(a) => reply.attr(&ttl, &a),
            Err(e) => reply.error(e),
        });
    }
}

/// How handle `fh` is served (`passthrough::Passthrough::open`);
/// `open_backing` registers a backing file with the kernel for the reply.
fn serve(
    passthrough: &passthrough::Passthrough,
    handles: &HandleTable,
    name: &dyn Fn() -> String,
    fh: u64,
    open_backing: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<fuser::BackingId>,
) -> Result<passthrough::Mode> {
    let h = handles.file(fh)?;
    match &*h {
        handles::Handle::File(f) => {
            let ask = passthrough::Ask {
                ino: f.inode.ino,
                fh,
                write: f.write,
                file: std::os::fd::AsFd::as_fd(&f.file),
                name,
            };
            passthrough.open(&ask, open_backing)
        }
        handles::Handle::Dir(_) => Err(fuser::Errno::EISDIR),
    }
}

/// The open flags of a handle in the kernel's passthrough mode: the kernel
/// takes no caching flags with passthrough. A writer's reads and writes
/// still come to the daemon (FOPEN_DIRECT_IO). Not FOPEN_NOFLUSH, though a
/// reader's close has nothing to write: FLUSH, sent at every close(2) with
/// the closer's lock owner, is the only way the kernel tells the daemon to
/// release that owner's record locks on the file (`locks`), and POSIX
/// releases them at the close of any of its descriptors of the file, this
/// one included (xfstests generic/478). No per-handle choice can be exact:
/// a lock taken after the open by the same owner, through this descriptor
/// or another, is released by this descriptor's close, and at the open the
/// daemon cannot know it will be. A mount with no close to tell of at all
/// is `-o archive`, where the kernel keeps the locks itself (`archive`).
fn kernel_flags(writer: bool) -> fuser::FopenFlags {
    if writer {
        fuser::FopenFlags::FOPEN_DIRECT_IO
    } else {
        fuser::FopenFlags::empty()
    }
}

/// Answers an open of handle `fh`: in the kernel's passthrough mode when
/// `passthrough` says so (see there), else as the daemon's; a refused open
/// loses its handle.
fn reply_open(
    passthrough: &passthrough::Passthrough,
    handles: &HandleTable,
    name: &dyn Fn() -> String,
    fh: u64,
    flags: fuser::FopenFlags,
    reply: ReplyOpen,
) {
    match serve(passthrough, handles, name, fh, |fd| reply.open_backing(fd)) {
        Ok(passthrough::Mode::Daemon) => reply.opened(FileHandle(fh), flags),
        Ok(passthrough::Mode::Kernel { id, writer }) => {
            reply.opened_passthrough(FileHandle(fh), kernel_flags(writer), &id)
        }
        Err(e) => {
            ops::release_handle(handles, fh);
            reply.error(e)
        }
    }
}

/// Answers a create that opened handle `fh` of the file `attr` describes,
/// as `reply_open` answers an open (an existing file may be open in
/// passthrough already).
fn reply_create(
    fs: &CutFs,
    (attr, fh, flags): (fuser::FileAttr, u64, fuser::FopenFlags),
    reply: ReplyCreate,
) {
    let ino = attr.ino.0;
    let name = || fs.name_of_ino(ino);
    let ttl = fs.ttl.entry(ino);
    let gen = Generation(fs.inodes.generation(ino));
    match serve(&fs.passthrough, &fs.handles, &name, fh, |fd| {
        reply.open_backing(fd)
    }) {
        Ok(passthrough::Mode::Daemon) => reply.created(&ttl, &attr, gen, FileHandle(fh), flags),
        Ok(passthrough::Mode::Kernel { id, writer }) => {
            reply.created_passthrough(&ttl, &attr, gen, FileHandle(fh), kernel_flags(writer), &id)
        }
        Err(e) => {
            // The kernel never learns of this handle, nor of the lookup
            // the create's entry would have counted.
            fs.close_handle(fh);
            fs.inodes.forget(ino, 1);
            reply.error(e)
        }
    }
}

impl CutFs {
    /// Who asks for a lock through handle `fh` (for `locks`), and the
    /// handle, whose backing file the lock's holder is opened from.
    fn lock_asker(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        owner: LockOwner,
        pid: u32,
    ) -> Result<(Arc<handles::Handle>, locks::Asker)> {
        let h = self.handles.file(fh.0)?;
        let a = locks::Asker {
            ino: ino.0,
            fh: fh.0,
            owner: owner.0,
            uid: req.uid(),
            pid,
            unique: req.unique().0,
        };
        Ok((h, a))
    }

    /// Sets or clears a lock of `kind` through handle `fh` (see `locks`);
    /// the reply may come later, from the thread that waits for it.
    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        req: &Request,
        (ino, fh, owner, pid): (INodeNo, FileHandle, LockOwner, u32),
        want: locks::Want,
        reply: ReplyEmpty,
    ) {
        match self.guard("setlk", ino.0, || self.lock_asker(req, ino, fh, owner, pid)) {
            Ok((h, a)) => match &*h {
                handles::Handle::File(f) => {
                    self.locks.set(a, want, &f.file, move |r| empty(r, reply))
                }
                handles::Handle::Dir(_) => reply.error(fuser::Errno::EISDIR),
            },
            Err(e) => reply.error(e),
        }
    }
}

fn empty(r: Result<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}
