//! The `cutf8fs` FUSE filesystem: a mirror of BACKING in which corrected
//! files (those beginning with the magic number) appear as their UTF-8 view.
//!
//! How a request flows:
//!
//! * [`CutFs`]'s `Filesystem` methods (this file) are thin: each calls one
//!   function in `ops` and ends in one `match` — `Ok` becomes the reply,
//!   `Err` an errno (decided in `error`, nowhere else).
//! * `ops` does the work on BACKING through `inodes` (FUSE inode ↔ backing
//!   `O_PATH` descriptor, lookup counts), `handles` (fh ↔ open descriptor)
//!   and `sys` (symlink-safe `*at` system calls).
//! * For regular files, `content` decides raw or corrected (by the magic
//!   number, under a stamp of size/mtime/ctime/inode so nothing stale is
//!   served), keeps the per-file state (content lock, offset index) and the
//!   bounded index cache, and reads: raw bytes by `pread`, the view through
//!   `crate::index` (view offset → disk offset) and `crate::codec` (V).
//! * `attr` turns a backing `stat` into FUSE attributes; `CutFs::attr` is
//!   the one place that puts the view's length in st_size, for every reply
//!   that carries attributes.
//! * `daemon` (daemonizing, logging, signals) and `mount` (mount(2) or
//!   fusermount3) start and stop all this; `options` parses `-o`.
//!
//! * `write` is the write path: under the file's content lock (held alone)
//!   it decides from what the file is now — empty, raw or corrected — and
//!   sends view writes through `crate::edit` (in-place patches, appends,
//!   rewrites under the journal in `BACKING/.cutf8fs-journal`, which this
//!   layer hides).
//!
//! POSIX and BSD locks are
//! left to the kernel (the daemon does not ask for FUSE_POSIX_LOCKS or
//! FUSE_FLOCK_LOCKS), so they work between processes using this mount, not
//! with processes using BACKING directly.

mod attr;
mod content;
mod daemon;
mod error;
mod handles;
mod inodes;
mod mount;
mod ops;
pub mod options;
mod rawnew;
mod sys;
mod write;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

pub use daemon::{run, Config, Failure};

use content::IndexCache;
use error::Result;
use handles::HandleTable;
use inodes::InodeTable;
use options::Options;

/// The filesystem: shared by all worker threads (every field is `Sync`).
pub struct CutFs {
    inodes: InodeTable,
    handles: HandleTable,
    cache: IndexCache,
    /// Rewrites that must be all-or-nothing (`BACKING/.cutf8fs-journal`).
    journal: crate::edit::Journal,
    newfiles: options::NewFiles,
    /// New files that stay raw, and file names for the log.
    raw: rawnew::RawPolicy,
    attr_ttl: Duration,
    entry_ttl: Duration,
}

const GEN: Generation = Generation(0);

impl CutFs {
    /// A filesystem serving the directory behind `root` (an `O_PATH`
    /// descriptor of BACKING).
    pub fn new(root: std::os::fd::OwnedFd, opts: &Options) -> std::io::Result<CutFs> {
        // The journal is reached through the root descriptor, so a rename
        // of BACKING itself cannot misdirect it; opening it replays what a
        // killed daemon left half done.
        let at = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&root));
        let journal = crate::edit::Journal::open(Path::new(&at))?;
        Ok(CutFs {
            journal,
            newfiles: opts.newfiles,
            raw: rawnew::RawPolicy::new(std::os::fd::AsFd::as_fd(&root), &opts.rawdirs),
            inodes: InodeTable::new(root)?,
            handles: HandleTable::default(),
            cache: IndexCache::new(opts.index_cache),
            attr_ttl: opts.attr_timeout,
            entry_ttl: opts.entry_timeout,
        })
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

fn empty(r: Result<()>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for CutFs {
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
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.reply_entry(self.lookup(parent.0, name), reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        CutFs::forget(self, ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match CutFs::getattr(self, ino.0) {
            Ok(a) => reply.attr(&self.attr_ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        match CutFs::setattr(self, ino.0, mode, uid, gid, size, atime, mtime, fh) {
            Ok(a) => reply.attr(&self.attr_ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match CutFs::readlink(self, ino.0) {
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
            CutFs::mknod(self, req, parent.0, name, mode, umask, rdev),
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
        self.reply_entry(CutFs::mkdir(self, req, parent.0, name, mode, umask), reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(CutFs::unlink(self, parent.0, name, 0), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            CutFs::unlink(self, parent.0, name, libc::AT_REMOVEDIR),
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
            CutFs::symlink(self, req, parent.0, link_name, target),
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
            CutFs::rename(self, parent.0, name, newparent.0, newname, flags.bits()),
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
        self.reply_entry(CutFs::link(self, ino.0, newparent.0, newname), reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match CutFs::open(self, ino.0, flags.0) {
            Ok((fh, fl)) => reply.opened(FileHandle(fh), fl),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match CutFs::read(self, fh.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match CutFs::write(self, fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes go straight to BACKING; nothing is buffered here.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        CutFs::release(self, fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(CutFs::fsync(self, fh.0, datasync), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match CutFs::opendir(self, ino.0) {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = CutFs::readdir(self, fh.0, offset, |next, e| {
            reply.add(INodeNo(e.ino), next, e.kind, &e.name)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
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
        let r = CutFs::readdirplus(self, fh.0, offset, |next, e, attr| match attr {
            None => reply.add(
                INodeNo(dir.ino),
                next,
                &e.name,
                &self.attr_ttl,
                &dir_attr,
                GEN,
            ),
            Some(Ok(a)) => reply.add(a.ino, next, &e.name, &self.entry_ttl, &a, GEN),
            // Gone since the listing was read: skip it.
            Some(Err(_)) => false,
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        CutFs::releasedir(self, fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(CutFs::fsync(self, fh.0, datasync), reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match CutFs::statfs(self) {
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
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        empty(CutFs::setxattr(self, ino.0, name, value, flags), reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match CutFs::getxattr(self, ino.0, name, size) {
            Ok(ops::XattrReply::Size(n)) => reply.size(n),
            Ok(ops::XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match CutFs::listxattr(self, ino.0, size) {
            Ok(ops::XattrReply::Size(n)) => reply.size(n),
            Ok(ops::XattrReply::Data(d)) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(CutFs::removexattr(self, ino.0, name), reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        empty(CutFs::access(self, req, ino.0, mask.bits()), reply);
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
        match CutFs::create(self, req, parent.0, name, mode, umask, flags) {
            Ok((a, fh, fl)) => reply.created(&self.entry_ttl, &a, GEN, FileHandle(fh), fl),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(CutFs::fallocate(self, fh.0, offset, length, mode), reply);
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match CutFs::lseek(self, fh.0, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }
}
