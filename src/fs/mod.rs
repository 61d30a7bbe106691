//! The `cutf8fs` FUSE filesystem: a mirror of BACKING in which corrected
//! files (those beginning with the magic number) appear as their UTF-8 view.
//!
//! How a request flows:
//!
//! * [`CutFs`]'s `Filesystem` methods (this file) are thin: each calls one
//!   function in `ops` and ends in one `match` — `Ok` becomes the reply,
//!   `Err` an errno (decided in `error`, nowhere else).
//! * `ops` (one file per concern: names, meta, file, dir, xattr) does the
//!   work on BACKING through `inodes` (FUSE inode ↔ backing inode, found
//!   again by file handle or name for each request: no descriptor is kept
//!   of a file not open, so nothing deleted in BACKING is held; lookup
//!   counts), `handles` (fh ↔ open descriptor, one per handle, counted in
//!   its user's share by `share`) and `crate::sys` (symlink-safe `*at`
//!   system calls). `invalidate` tells the kernel what the daemon changed
//!   behind its caches (set-id bits it removed, say).
//! * For regular files, `content` decides raw or corrected (by the magic
//!   number, under a stamp of size/mtime/ctime/inode so nothing stale is
//!   served), keeps the per-file state (content lock, offset index) and the
//!   bounded index cache. Reads go through `crate::io` (raw bytes, or the
//!   view as `crate::view` plans it: view offset → disk offset, then V).
//! * `passthrough` decides which opens the kernel serves itself (FUSE
//!   passthrough: raw files opened read-only, read straight from BACKING)
//!   and keeps their backing ids; every other open is served as above.
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
//!
//! Size: this file is the `fuser::Filesystem` impl, about 40 handlers of
//! a few lines each (plus the scan-thread replies): long, but each handler
//! is thin by rule, and splitting one trait impl across files would hide
//! the one-request-one-`ops`-call shape this file exists to show.

mod attr;
mod content;
mod daemon;
mod error;
mod explain;
mod failure;
mod handles;
mod inodes;
mod invalidate;
mod locks;
mod mount;
mod ops;
pub mod options;
mod passthrough;
mod privs;
mod progress;
mod rawnew;
mod share;
pub mod stats;
use crate::sys;
mod write;

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
    /// Threads that classify large files, so FUSE workers stay free.
    scans: content::ScanPool,
    /// Rewrites that must be all-or-nothing (`BACKING/.cutf8fs-journal`,
    /// created on first use, never on a read-only mount).
    journal: crate::redo::RedoJournal,
    newfiles: options::NewFiles,
    /// `-o blksize`: the preferred I/O size regular files show.
    blksize: Option<u32>,
    /// New files that stay raw, and file names for the log.
    raw: rawnew::RawPolicy,
    attr_ttl: Duration,
    entry_ttl: Duration,
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
}

const GEN: Generation = Generation(0);

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
        let journal =
            crate::redo::RedoJournal::open(std::os::fd::AsFd::as_fd(&root), opts.read_only())?;
        // What earlier mounts learned of file sizes (never fails the mount).
        let db = crate::indexdb::IndexDb::open(
            std::os::fd::AsFd::as_fd(&root),
            &opts.index_db,
            opts.read_only(),
        );
        // By default only a read-only mount hands raw files to the kernel:
        // there no writer can be refused for meeting a passthrough reader.
        let backing_ro = sys::fstatvfs(std::os::fd::AsFd::as_fd(&root))
            .is_ok_and(|v| v.f_flag & libc::ST_RDONLY != 0);
        let passthrough = Arc::new(passthrough::Passthrough::new(
            opts.passthrough,
            opts.read_only() || backing_ro,
            std::os::fd::AsFd::as_fd(&root),
        ));
        let inodes = Arc::new(InodeTable::new(root)?);
        let shares = share::Shares::new(descriptor_policy(&inodes, opts.threads));
        let kernel = Arc::<invalidate::Invalidator>::default();
        let locks = locks::Locks::new(kernel.clone(), shares.clone());
        Ok(CutFs {
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
            cache: Arc::new(IndexCache::with_db(opts.index_cache, db)),
            scans: content::ScanPool::new(SCAN_THREADS)?,
            attr_ttl: opts.attr_timeout,
            entry_ttl: opts.entry_timeout,
        })
    }

    /// The kernel notifier's slot, for the daemon to connect once the
    /// session is up.
    pub fn invalidator(&self) -> Arc<invalidate::Invalidator> {
        self.kernel.clone()
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
            Ok(a) => reply.entry_with_ttls(&self.attr_ttl, &self.entry_ttl, &a, GEN),
            Err(e) => reply.error(e),
        }
    }
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
        stats::request(op);
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
        let (attr_ttl, entry_ttl) = (self.attr_ttl, self.entry_ttl);
        let ino = inode.ino;
        self.attr_on_scan_threads("lookup", inode, st, move |r| match r {
            Ok(a) => reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, GEN),
            Err(e) => {
                inodes.forget(ino, 1);
                reply.error(e)
            }
        });
    }

    /// Finishes a getattr whose file needs a long scan on the scan threads.
    fn attr_later(&self, inode: Arc<inodes::Inode>, st: libc::stat, reply: ReplyAttr) {
        let ttl = self.attr_ttl;
        self.attr_on_scan_threads("getattr", inode, st, move |r| match r {
            Ok(a) => reply.attr(&ttl, &a),
            Err(e) => reply.error(e),
        });
    }
}

/// Answers an open of handle `fh`: through the kernel when `passthrough`
/// says so (see there), else as the daemon's; a refused open loses its
/// handle.
fn reply_open(
    passthrough: &passthrough::Passthrough,
    handles: &HandleTable,
    name: &dyn Fn() -> String,
    fh: u64,
    flags: fuser::FopenFlags,
    reply: ReplyOpen,
) {
    let mode = match handles.file(fh) {
        Ok(h) => match &*h {
            handles::Handle::File(f) => {
                let ask = passthrough::Ask {
                    ino: f.inode.ino,
                    fh,
                    write: f.write,
                    file: std::os::fd::AsFd::as_fd(&f.file),
                    name,
                };
                passthrough.open(&ask, |fd| reply.open_backing(fd))
            }
            handles::Handle::Dir(_) => Err(fuser::Errno::EISDIR),
        },
        Err(e) => Err(e),
    };
    match mode {
        Ok(passthrough::Mode::Daemon) => reply.opened(FileHandle(fh), flags),
        Ok(passthrough::Mode::Kernel(id)) => {
            // The kernel takes no caching flags with passthrough. Its
            // close(2) needs no daemon either (FOPEN_NOFLUSH: a read-only
            // handle holds nothing back), so a record lock taken through
            // it goes at its open file's last close, not at any close by
            // its owner (man cutf8fs, LOCKS).
            let _ = flags;
            let flags = fuser::FopenFlags::FOPEN_NOFLUSH;
            reply.opened_passthrough(FileHandle(fh), flags, &id)
        }
        Err(e) => {
            ops::release_handle(handles, fh);
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

impl Filesystem for CutFs {
    fn destroy(&mut self) {
        // Commit the index database's last records before the daemon exits.
        self.cache.db.close();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Not FUSE_ATOMIC_O_TRUNC: with it the daemon would truncate at open,
        // before the kernel's own checks (ETXTBSY for a running program).
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_CACHE_SYMLINKS,
        ] {
            if let Err(missing) = config.add_capabilities(cap) {
                log::debug!("kernel lacks {missing:?}");
            }
        }
        // POSIX ACLs: the kernel checks them with the mode bits (it reads
        // them through getxattr), and leaves the umask to us, which lets
        // BACKING apply a directory's default ACL instead (man page,
        // PERMISSIONS).
        if let Err(missing) =
            config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK)
        {
            log::warn!("kernel lacks {missing:?}: POSIX ACLs in BACKING are not honoured");
        }
        // The daemon, not the kernel, takes set-id bits and capabilities
        // from a file written or truncated by a caller without CAP_FSETID
        // (`kill_privs`; chown through BACKING's own chown). The kernel
        // then stops asking for security.capability before every write of
        // an inode it has checked once: one round trip less per write.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            log::debug!("kernel lacks {missing:?}");
        }
        // Locks go to BACKING (`locks`): POSIX and OFD locks, and flock.
        if let Err(missing) =
            config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS | InitFlags::FUSE_FLOCK_LOCKS)
        {
            log::warn!("kernel lacks {missing:?}: locks through the mount stay in the mount");
        }
        self.passthrough.init(config);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.guard("lookup", parent.0, || {
            let (inode, st) = self.lookup_inode(parent.0, name)?;
            if self
                .needs_scan(&inode, &st)
                .inspect_err(|_| self.inodes.forget(inode.ino, 1))?
            {
                return Ok(Err((inode, st)));
            }
            Ok(Ok(self.entry(inode, &st)?))
        });
        match r {
            Ok(Err((inode, st))) => self.entry_later(inode, st, reply),
            Ok(Ok(a)) => self.reply_entry(Ok(a), reply),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = self.guard("forget", ino.0, || {
            CutFs::forget_lookups(self, ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self.guard("getattr", ino.0, || {
            let inode = self.inodes.get(ino.0)?;
            let st = inode.stat()?;
            if self.needs_scan(&inode, &st)? {
                return Ok(Err((inode, st)));
            }
            Ok(Ok(self.attr(&inode, &st)?))
        });
        match r {
            Ok(Err((inode, st))) => self.attr_later(inode, st, reply),
            Ok(Ok(a)) => reply.attr(&self.attr_ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let fh = fh.map(|f| f.0);
        // fuser does not pass FATTR_KILL_SUIDGID on: a truncate reads what
        // the kernel decides it from (the caller's CAP_FSETID) itself.
        match self.guard("setattr", ino.0, || {
            CutFs::set_attr(self, ino.0, mode, uid, gid, size, atime, mtime, fh, req)
        }) {
            Ok(a) => reply.attr(&self.attr_ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.guard("readlink", ino.0, || CutFs::link_target(self, ino.0)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.reply_entry(
            self.guard("mknod", parent.0, || {
                CutFs::make_node(self, req, parent.0, name, mode, umask, rdev)
            }),
            reply,
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.reply_entry(
            self.guard("mkdir", parent.0, || {
                CutFs::make_dir(self, req, parent.0, name, mode, umask)
            }),
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            self.guard("unlink", parent.0, || {
                CutFs::remove_entry(self, parent.0, name, 0)
            }),
            reply,
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            self.guard("rmdir", parent.0, || {
                CutFs::remove_entry(self, parent.0, name, libc::AT_REMOVEDIR)
            }),
            reply,
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.reply_entry(
            self.guard("symlink", parent.0, || {
                CutFs::make_symlink(self, req, parent.0, link_name, target)
            }),
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            self.guard("rename", parent.0, || {
                CutFs::move_entry(self, parent.0, name, newparent.0, newname, flags.bits())
            }),
            reply,
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.reply_entry(
            self.guard("link", ino.0, || {
                CutFs::make_link(self, ino.0, newparent.0, newname)
            }),
            reply,
        );
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.guard("open", ino.0, || {
            CutFs::open_handle(self, ino.0, flags.0, req.uid())
        }) {
            Ok(ops::Opened::Now(fh, fl)) => {
                let name = || self.name_of_ino(ino.0);
                reply_open(&self.passthrough, &self.handles, &name, fh, fl, reply)
            }
            Ok(ops::Opened::Later(later)) => {
                // A long scan first: on the scan threads, not on this worker.
                let opener = self.opener();
                let (passthrough, handles) = (self.passthrough.clone(), self.handles.clone());
                self.scans.run(move || {
                    let named = later.inode.clone();
                    let r = error::guard("open", || named.path(), || opener.finish(later, flags.0));
                    match r {
                        Ok((fh, fl)) => {
                            let name = || named.path();
                            reply_open(&passthrough, &handles, &name, fh, fl, reply)
                        }
                        Err(e) => reply.error(e),
                    }
                });
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.guard("read", ino.0, || {
            CutFs::read_handle(self, fh.0, offset, size)
        }) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Set by the kernel when the writer lacks CAP_FSETID (see `init`).
        let kill = write_flags
            .contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            .then_some(req);
        match self.guard("write", ino.0, || {
            CutFs::write_handle(self, fh.0, offset, data, kill)
        }) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Sent at every close(2) of a descriptor through the mount (and at
        // exit; no handle is FOPEN_NOFLUSH, for the locks' sake): what the
        // daemon still holds for the file is written now, and its error, or
        // the backing file's own at close, is close(2)'s (`flush_handle`);
        // then the closing owner's record locks on the file go, as natively
        // — after the write, so the next holder reads it.
        stats::request("flush");
        let r = self.guard("flush", ino.0, || CutFs::flush_handle(self, fh.0));
        let _ = self.guard("flush", ino.0, || {
            self.locks.flush(ino.0, lock_owner.0);
            Ok(())
        });
        empty(r, reply);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _ = self.guard("release", ino.0, || {
            // The open file's last close: its flock and OFD locks go.
            self.locks.release(ino.0, fh.0);
            CutFs::close_handle(self, fh.0);
            self.passthrough.release(fh.0);
            Ok(())
        });
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(
            self.guard("fsync", ino.0, || CutFs::sync_handle(self, fh.0, datasync)),
            reply,
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.guard("opendir", ino.0, || CutFs::open_dir(self, ino.0, req.uid())) {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.guard("readdir", ino.0, || {
            CutFs::list_dir(self, fh.0, offset, |next, e| {
                reply.add(INodeNo(e.ino), next, e.kind, e.name)
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let dir = match self.dir_handle(fh.0) {
            Ok(h) => match &*h {
                handles::Handle::Dir(d) => d.inode.clone(),
                handles::Handle::File(_) => return reply.error(fuser::Errno::ENOTDIR),
            },
            Err(e) => return reply.error(e),
        };
        let dir_attr = match self.dir_attr(&dir) {
            Ok(a) => a,
            Err(e) => return reply.error(e),
        };
        let r = self.guard("readdirplus", ino.0, || {
            CutFs::list_dir_plus(self, fh.0, offset, |next, e, attr| match attr {
                None => reply.add(
                    INodeNo(dir.ino),
                    next,
                    e.name,
                    &self.attr_ttl,
                    &dir_attr,
                    GEN,
                ),
                Some(p) => {
                    let ttl = if p.provisional {
                        Duration::ZERO
                    } else {
                        self.entry_ttl
                    };
                    reply.add(p.attr.ino, next, e.name, &ttl, &p.attr, GEN)
                }
            })
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _ = self.guard("releasedir", ino.0, || {
            CutFs::close_dir(self, fh.0);
            Ok(())
        });
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(
            self.guard("fsyncdir", ino.0, || {
                CutFs::sync_handle(self, fh.0, datasync)
            }),
            reply,
        );
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.guard("statfs", ino.0, || CutFs::fs_stats(self)) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        empty(
            self.guard("setxattr", ino.0, || {
                CutFs::set_xattr(self, req, ino.0, name, value, flags)
            }),
            reply,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.guard("getxattr", ino.0, || {
            CutFs::get_xattr(self, ino.0, name, size)
        }) {
            Ok(ops::XattrReply::Size(n)) => reply.size(n),
            Ok(ops::XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.guard("listxattr", ino.0, || {
            CutFs::list_xattrs(self, req, ino.0, size)
        }) {
            Ok(ops::XattrReply::Size(n)) => reply.size(n),
            Ok(ops::XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            self.guard("removexattr", ino.0, || {
                CutFs::remove_xattr(self, req, ino.0, name)
            }),
            reply,
        );
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        empty(
            self.guard("access", ino.0, || {
                CutFs::check_access(self, req, ino.0, mask.bits())
            }),
            reply,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.guard("create", parent.0, || {
            let (a, fh, fl) = CutFs::create_file(self, req, parent.0, name, mode, umask, flags)?;
            self.passthrough
                .daemon_handle(a.ino.0, fh)
                .inspect_err(|_| CutFs::close_handle(self, fh))?;
            Ok((a, fh, fl))
        }) {
            Ok((a, fh, fl)) => reply.created(&self.entry_ttl, &a, GEN, FileHandle(fh), fl),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // fallocate(2) takes set-id bits and capabilities natively (the
        // backing filesystem's `file_modified`); the daemon's own call, as
        // root, would not, and the kernel leaves it to us (see `init`).
        empty(
            self.guard("fallocate", ino.0, || {
                CutFs::allocate_handle(self, fh.0, offset, length, mode, req)
            }),
            reply,
        );
    }

    /// No ioctl is supported: ENOTTY (what isatty() expects), quietly.
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        stats::request("ioctl");
        log::debug!("ioctl {cmd:#x} on inode {}: not supported (ENOTTY)", ino.0);
        reply.error(fuser::Errno::ENOTTY);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match self.guard("lseek", ino.0, || {
            CutFs::seek_handle(self, fh.0, offset, whence)
        }) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let range = sys::lock::Range { start, end };
        match self.guard("getlk", ino.0, || {
            let (h, a) = self.lock_asker(req, ino, fh, lock_owner, pid)?;
            match &*h {
                handles::Handle::File(f) => self.locks.test(a, &f.file, range, typ),
                handles::Handle::Dir(_) => Err(fuser::Errno::EISDIR),
            }
        }) {
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Ok(Some(c)) => reply.locked(c.range.start, c.range.end, c.typ, c.pid.max(0) as u32),
            Err(e) => reply.error(e),
        }
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let want = locks::Want {
            kind: locks::Kind::Record,
            range: sys::lock::Range { start, end },
            typ,
            sleep,
        };
        self.lock(req, (ino, fh, lock_owner, pid), want, reply);
    }

    fn flock(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let want = locks::Want {
            kind: locks::Kind::Flock,
            range: sys::lock::Range {
                start: 0,
                end: sys::lock::OFFSET_MAX,
            },
            typ,
            sleep,
        };
        self.lock(req, (ino, fh, lock_owner, pid), want, reply);
    }

    /// The caller of request `unique` got a signal: a lock wait for it
    /// ends with EINTR (`locks`); other requests finish as they are.
    fn interrupt(
        &self,
        _req: &Request,
        unique: RequestId,
    ) -> std::result::Result<(), fuser::Errno> {
        self.locks.interrupt(unique.0);
        Ok(())
    }
}
