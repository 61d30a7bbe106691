//! The fuser `Filesystem` trait for [`CutFs`]: each FUSE request is
//! guarded (a panic answers EIO), worked by the operations in `ops` and
//! answered through the reply helpers of the parent module. Nothing is
//! decided here.

use crate::fs::*;

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
            // mmap(2) of a handle answered with FOPEN_DIRECT_IO (an
            // appender's, a passthrough writer's) maps the page cache as
            // any other handle's does, not ENODEV.
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
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
        // Not in an archive, which hears of no close (`archive`): there the
        // kernel keeps them, in the mount.
        if self.archive.is_none() {
            if let Err(missing) =
                config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS | InitFlags::FUSE_FLOCK_LOCKS)
            {
                log::warn!("kernel lacks {missing:?}: locks through the mount stay in the mount");
            }
        }
        // File handles made through the mount outlive the kernel's memory
        // of the inode and the daemon (`export`): the kernel asks for "."
        // and ".." of a node it decodes a handle of.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT) {
            log::warn!("kernel lacks {missing:?}: file handles go stale when inodes are evicted");
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
            Ok(Ok(a)) => reply.attr(&self.ttl.attr(ino.0), &a),
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
            Ok(a) => reply.attr(&self.ttl.attr(ino.0), &a),
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
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            self.guard("rename", parent.0, || {
                CutFs::move_entry(
                    self,
                    req,
                    parent.0,
                    name,
                    newparent.0,
                    newname,
                    flags.bits(),
                )
            }),
            reply,
        );
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.reply_entry(
            self.guard("link", ino.0, || {
                CutFs::make_link(self, req, ino.0, newparent.0, newname)
            }),
            reply,
        );
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.archive.is_some() {
            // The kernel opens every regular file itself from now on, and
            // READs come without a handle (`archive`).
            self.stats.request("open");
            // Once per mount, unless opens raced the first answer: each
            // such OPEN was sent before the kernel learnt not to.
            log::info!(
                "archive: OPEN of {} by pid {} ({}) answered ENOSYS: the kernel opens regular \
                 files itself from now on",
                self.name_of_ino(ino.0),
                req.pid(),
                std::fs::read_to_string(format!("/proc/{}/comm", req.pid()))
                    .map_or_else(|_| "gone".into(), |c| c.trim_end().to_string())
            );
            return reply.error(fuser::Errno::ENOSYS);
        }
        match self.guard("open", ino.0, || {
            if self.read_only && remount::opens_for_change(flags.0) {
                return Err(fuser::Errno::EROFS);
            }
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
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // In flight until the reply is sent (`inflight`).
        let reads = self.kernel.reads();
        let reading = reads.enter(ino.0);
        let r = self.guard("read", ino.0, || {
            let h = self.read_handle(ino.0, fh.0)?;
            let handles::Handle::File(f) = &*h else {
                return Err(fuser::Errno::EISDIR);
            };
            let d = self.read_file(f, offset, size)?;
            Ok((h, d))
        });
        let (h, d) = match r {
            Ok(hd) => hd,
            Err(e) => return reply.error(e),
        };
        let handles::Handle::File(f) = &*h else {
            return reply.error(fuser::Errno::EISDIR);
        };
        if d.len() < size as usize {
            // Decided and answered one at a time per inode, so the kernel
            // has taken one short answer before the next is weighed
            // (`inflight`).
            let _one = reads.answering_short(ino.0);
            if self.short_read_fails(f, fh.0, &reading, (offset, size), d.len(), flags) {
                // Sent, perhaps, before an invalidation: the kernel would
                // keep the old size and show zeros; it asks again.
                reply.error(fuser::Errno::EINTR);
            } else {
                reply.data(&d);
            }
        } else {
            reply.data(&d);
        }
        crate::io::recycle(d);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Set by the kernel when the writer lacks CAP_FSETID (see `init`).
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        // A write(2) through an O_APPEND descriptor (not a shared
        // mapping's page, which has its place): at the end as it is now.
        let append =
            flags.0 & libc::O_APPEND != 0 && !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        match self.guard("write", ino.0, || {
            CutFs::write_handle(self, fh.0, offset, data, req, kill, append)
        }) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Sent at every close(2) of a descriptor through the mount (and at
        // exit; no handle is FOPEN_NOFLUSH, for the locks' sake, except in
        // `-o archive`, which answers ENOSYS here): what the
        // daemon still holds for the file is written now, and its error, or
        // the backing file's own at close, is close(2)'s (`flush_handle`);
        // then the closing owner's record locks on the file go, as natively
        // — after the write, so the next holder reads it.
        // The locks go under a guard of their own (a panic in the write
        // must not keep them), counted once with the request.
        if self.archive.is_some() && fh.0 == 0 {
            // No FLUSH again for this mount: nothing to write, and locks
            // stay in the mount (`archive`).
            self.stats.request("flush");
            return reply.error(fuser::Errno::ENOSYS);
        }
        let r = self.guard("flush", ino.0, || CutFs::flush_handle(self, fh.0, req));
        let _ = error::guard(
            "flush",
            || self.name_of_ino(ino.0),
            || {
                self.locks.flush(ino.0, lock_owner.0);
                Ok(())
            },
        );
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
                    &self.ttl.attr(dir.ino),
                    &dir_attr,
                    Generation(self.inodes.generation(dir.ino)),
                ),
                Some(p) => {
                    let ttl = if p.provisional {
                        Duration::ZERO
                    } else {
                        self.ttl.entry(p.attr.ino.0)
                    };
                    let gen = Generation(self.inodes.generation(p.attr.ino.0));
                    reply.add(p.attr.ino, next, e.name, &ttl, &p.attr, gen)
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
            CutFs::create_file(self, req, parent.0, name, mode, umask, flags)
        }) {
            Ok(created) => reply_create(self, created, reply),
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
        self.stats.request("ioctl");
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
