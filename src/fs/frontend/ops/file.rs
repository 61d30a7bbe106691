//! Regular files through handles: open and create (the class and index of
//! the file learned under its content lock, on the scan threads for a large
//! file), read (raw bytes or the view, through `crate::io`, read again if
//! BACKING changed the file meanwhile), write and fallocate (`crate::fs::state::write`),
//! flush, release, fsync and lseek. Each handle holds one descriptor,
//! taken from its opener's share (`share`) before it is opened.

use super::*;

use std::sync::atomic::Ordering;

impl CutFs {
    /// Opens a regular file: at once, or, when a long scan would be needed
    /// first, as `Opened::Later` for the scan threads to finish
    /// (`Opener::finish`), so no FUSE worker waits for a scan.
    pub(in crate::fs) fn open_handle(&self, ino: u64, flags: i32, uid: u32) -> Result<Opened> {
        let inode = self.inodes.get(ino)?;
        if !inode.is_reg() {
            // Devices, fifos and sockets are opened by the kernel itself;
            // anything else reaching here is not a file we serve.
            return Err(not_a_file(&inode));
        }
        let ticket = self.ticket(uid, &inode, "open")?;
        let file = Arc::new(self.open_file(&inode, flags)?);
        // Attached at once: a file unlinked while open is reached through
        // this descriptor.
        let later = Later::new(inode, file, ticket)?;
        if self.open_needs_scan(&later.inode, &later.file)? {
            return Ok(Opened::Later(later));
        }
        self.new_file_handle(later, flags)
            .map(|(fh, fl)| Opened::Now(fh, fl))
    }

    /// Whether opening `file` would scan it at length: large, corrected,
    /// and its index neither in the handle state nor in the cache. (A
    /// write-only descriptor that cannot show its head is opened at once.)
    pub(in crate::fs) fn open_needs_scan(
        &self,
        inode: &Inode,
        file: &std::fs::File,
    ) -> Result<bool> {
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        if st.st_size as u64 <= content::SCAN_INLINE {
            return Ok(false);
        }
        let stamp = Stamp::of(&st);
        if matches!(inode.seen().lock().class(&stamp), Some(Class::Raw))
            || self.cache.get(&stamp).is_some()
        {
            return Ok(false);
        }
        let fresh = inode.open_state().is_some_and(|state| {
            let content = state.content.read();
            matches!(&content.view, Some((s, _)) if *s == stamp)
        });
        Ok(!fresh && content::has_magic(file).unwrap_or(false))
    }

    /// What `finish` needs of the filesystem, for the scan threads.
    pub(in crate::fs) fn opener(&self) -> Opener {
        Opener {
            handles: self.handles.clone(),
            cache: self.cache.clone(),
            noatime: self.noatime,
            strictatime: self.strictatime,
        }
    }

    pub(in crate::fs) fn open_file(&self, inode: &Inode, flags: i32) -> Result<std::fs::File> {
        // O_APPEND is the daemon's: each WRITE carries the flag and goes
        // to the end as it is then (`write_file`); the backing descriptor
        // writes at the offsets we choose (a view offset is not a disk
        // offset, and a rewrite starts at 0).
        let strip = libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOCTTY
            | libc::O_DIRECT
            | libc::O_NOFOLLOW
            | libc::O_APPEND;
        let flags = flags & !strip;
        if flags & libc::O_ACCMODE == libc::O_WRONLY {
            // A readable descriptor lets the view (and the write path) read too.
            let rw = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            if let Ok(f) = inode.open(rw) {
                return Ok(f);
            }
        }
        inode.open(flags)
    }

    pub(in crate::fs) fn new_file_handle(
        &self,
        later: Later,
        flags: i32,
    ) -> Result<(u64, FopenFlags)> {
        self.opener().finish(later, flags)
    }

    pub(in crate::fs) fn create_file(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64, FopenFlags)> {
        if is_journal(parent, name) {
            return Err(Refused::Reserved.into());
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        let strip = libc::O_NOCTTY | libc::O_DIRECT | libc::O_APPEND;
        let asked = (flags & !strip) | libc::O_CREAT | libc::O_NOFOLLOW;
        // Write-only becomes read-write, so the view (and the write path) can read.
        let upgraded = asked & libc::O_ACCMODE == libc::O_WRONLY;
        let oflags = if upgraded {
            (asked & !libc::O_ACCMODE) | libc::O_RDWR
        } else {
            asked
        };
        let ticket = self.ticket(req.uid(), &dir, "create")?;
        let dir_fd = dir.fd()?;
        let fd = {
            let _mask = with_umask(umask)?;
            let _as = act_as(req)?;
            let mode = mode & 0o7777;
            match sys::openat(dir_fd.as_fd(), &cname, oflags, mode) {
                // An existing file the caller may write but not read.
                Err(e) if upgraded && e.raw_os_error() == Some(libc::EACCES) => {
                    sys::openat(dir_fd.as_fd(), &cname, asked, mode).map_err(io)?
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    let path = dir.path_of(name).to_string();
                    crate::ratelog::warn("out-of-descriptors", &path, || {
                        format!(
                            "{path}: cannot create or open: out of file descriptors ({e}); \
                             close files open through the mount, or raise the daemon's \
                             limit (ulimit -n)"
                        )
                    });
                    return Err(io(e));
                }
                r => r.map_err(io)?,
            }
        };
        drop(dir_fd);
        let file = std::fs::File::from(fd);
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let inode = self.inodes.insert(&file, &st, &dir, &cname);
        let ino = inode.ino;
        let attr = self.entry(inode.clone(), &st)?;
        let handle = Later::new(inode, Arc::new(file), ticket)
            .and_then(|later| self.new_file_handle(later, flags));
        match handle {
            Ok((fh, fl)) => Ok((attr, fh, fl)),
            Err(e) => {
                self.inodes.forget(ino, 1);
                Err(e)
            }
        }
    }

    /// Reads through a handle: the view while the file is corrected, its
    /// bytes otherwise. The per-file state, not the handle, says which: a
    /// write through any handle may change it (an empty file filled with
    /// text becomes corrected; content W cannot store makes it raw).
    ///
    /// A change made in BACKING behind the mount's back is seen here: the
    /// view is served only through the index of the file's current stamp,
    /// and a view read that raced with such a change (the stamp moved
    /// during it) is read again, so it returns bytes of one version. A
    /// read whose bytes disagree with the index although the stamp did not
    /// move (changed in place without moving ctime, as writes through a
    /// shared mapping can: `crate::io::Viewed::Stale`) has the index built
    /// again, once, and is read again.
    ///
    /// `h` is a handle of the caller's, or in `-o archive` the daemon's own
    /// (`read_handle`).
    pub(in crate::fs) fn read_file(
        &self,
        h: &FileHandle,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>> {
        use crate::io::Viewed;
        self.settle(&h.inode, &h.state)?;
        let mut rebuilt = false;
        for _ in 0..4 {
            let (content, stamp, view) = self.current(h)?;
            let Some(index) = view else {
                return crate::io::read_raw(&h.file, offset, size as usize).map_err(io);
            };
            let data = crate::io::read_view_checked(&h.file, &index, stamp, offset, size as usize);
            drop(content);
            match data.map_err(io)? {
                Viewed::Read(data) => {
                    self.stats.view_read(data.len() as u64);
                    return Ok(data);
                }
                Viewed::Changed => {}
                // Built from these very bytes: they are changing now, as
                // under a writer on a native filesystem.
                Viewed::Stale(data) if rebuilt => {
                    self.stats.view_read(data.len() as u64);
                    return Ok(data);
                }
                Viewed::Stale(_) => {
                    rebuilt = true;
                    let name = self.name_of(&h.inode);
                    crate::ratelog::warn("stale-index", &name, || {
                        format!(
                            "{name}: its bytes no longer match its offset index although its \
                             size and times did not change (written through a shared \
                             mapping?); the index is built again"
                        )
                    });
                    h.state
                        .rebuild(h.inode.seen(), &self.cache, &h.file, stamp, || {
                            h.inode
                                .open(libc::O_RDONLY)
                                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
                        })?;
                }
            }
        }
        let name = self.name_of(&h.inode);
        crate::ratelog::warn("keeps-changing", &name, || {
            format!(
                "{name}: changes in BACKING faster than it can be read; the read fails with EIO"
            )
        });
        Err(Refused::KeepsChanging.into())
    }

    /// Whether a READ through handle `h` (numbered `fh` in the handle
    /// table; 0: the daemon's own, `crate::fs::frontend::archive`) answered short
    /// (`got` bytes of `size` at `offset`) must fail so the kernel asks
    /// again (see `inflight`); if not, the kernel takes its end as the
    /// file's end.
    pub(in crate::fs) fn short_read_fails(
        &self,
        h: &FileHandle,
        fh: u64,
        reading: &crate::fs::coherence::inflight::Reading<'_>,
        (offset, size): (u64, u32),
        got: usize,
        flags: fuser::OpenFlags,
    ) -> bool {
        let told = &h.state.told;
        let was = told.load(Ordering::Relaxed);
        let reads = self.kernel.reads();
        let fails = reads.refuse_short(reading, (offset, size), (got, was), || {
            flags.0 & libc::O_DIRECT != 0 || h.append || self.passthrough.by_kernel(fh)
        });
        let end = offset + got as u64;
        if !fails && end < was {
            // The kernel takes the smaller size if this READ was sent
            // after the last change of its attributes, and that moves
            // them on again: READs sent before are now suspect too.
            told.fetch_min(end, Ordering::Relaxed);
            reads.lowered(h.inode.ino);
        }
        fails
    }

    /// The file's current state through handle `h` (see `OpenFile::current`).
    pub(in crate::fs) fn current<'a>(
        &self,
        h: &'a FileHandle,
    ) -> Result<(
        parking_lot::RwLockReadGuard<'a, content::Content>,
        Stamp,
        Option<Arc<crate::view::OffsetIndex>>,
    )> {
        h.state.current(h.inode.seen(), &self.cache, &h.file, || {
            h.inode
                .open(libc::O_RDONLY)
                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
        })
    }

    /// A write through a handle, under the limits of the caller of `req`
    /// (`sys::Limits`); `kill`: a writer without CAP_FSETID, so set-id
    /// bits and capabilities go first, as natively (`kill_privs`).
    pub(in crate::fs) fn write_handle(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        req: &Request,
        kill: bool,
        append: bool,
    ) -> Result<u32> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Refused::IsDir.into());
        };
        if kill {
            self.kill_privs(&h.inode, Some(&h.state), &h.file, req, true)?;
        }
        // Kept for this caller's next write on this thread (the rest of
        // this request touches no file of the daemon's).
        limits_kept(req)?;
        let (n, moved) = self.write_file(h, offset, data, append)?;
        if moved {
            // An append the kernel placed at its stale size went to the
            // real end: the kernel copied it into its pages at `offset`
            // and counts a size of its own, so both go; after this
            // reply, which the kernel waits for holding those pages.
            log::debug!(
                "{}: an append the kernel sent for {offset} went to the file's end",
                self.name_of(&h.inode)
            );
            self.kernel.pages_later(h.inode.ino);
        }
        // The kernel's size grows to the write's end (`inflight`).
        h.state
            .told
            .fetch_max(offset + u64::from(n), Ordering::Relaxed);
        Ok(n)
    }

    /// close(2) of a handle open for writing: writes what is held back for
    /// the file (`write::Held`) and reports the backing file's error at
    /// close, as a native filesystem's close(2) would (`close(dup(fd))`,
    /// as libfuse's passthrough_hp does: a network filesystem reports its
    /// write-back errors there). The handle stays open until release.
    pub(in crate::fs) fn flush_handle(&self, fh: u64, req: &Request) -> Result<()> {
        let h = self.handles.get(fh)?;
        let Handle::File(f) = &*h else {
            return Ok(());
        };
        if !f.write {
            // Settled all the same; a reader's close reports nothing.
            let _ = self.settle(&f.inode, &f.state);
            return Ok(());
        }
        // Held bytes written now are the closing caller's.
        let settled = limits(req).and_then(|_limits| self.settle_for(f));
        let name = || self.name_of(&f.inode);
        self.passthrough.closing_writer(fh, f.file.as_fd(), &name);
        let closed = sys::close_dup(f.file.as_fd()).map_err(io);
        settled?;
        closed
    }

    /// Writes what is held for handle `f`'s file (`settle`), and reports
    /// to `f` any loss of held bytes since it last asked, whoever's request
    /// met it (`errseq`), before any error of the settling itself.
    fn settle_for(&self, f: &FileHandle) -> Result<()> {
        let settled = self.settle(&f.inode, &f.state);
        if let Some(code) = f.lost.take(f.state.content.read().lost) {
            return Err(kept(code));
        }
        settled
    }

    pub(in crate::fs) fn close_handle(&self, fh: u64) {
        if let Ok(h) = self.handles.get(fh) {
            if let Handle::File(f) = &*h {
                // Logged there; a release cannot fail (a close that could
                // report it came first, as FLUSH).
                let _ = self.settle(&f.inode, &f.state);
            }
        }
        release_handle(&self.handles, fh)
    }

    pub(in crate::fs) fn sync_handle(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handles.get(fh)?;
        let fd = match &*h {
            Handle::File(f) => {
                self.settle_for(f)?;
                f.file.as_fd()
            }
            Handle::Dir(d) => d.dir.as_fd(),
        };
        sys::fsync(fd, datasync).map_err(io)
    }

    /// fallocate: see `write::fallocate_file` (every mode on the view of
    /// a corrected file; as in BACKING for raw ones), by the caller of
    /// `req` (`kill_privs` first, as natively).
    pub(in crate::fs) fn allocate_handle(
        &self,
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
        req: &Request,
    ) -> Result<()> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Refused::IsDir.into());
        };
        self.kill_privs(&h.inode, Some(&h.state), &h.file, req, false)?;
        let _limits = limits(req)?;
        self.fallocate_file(h, offset, length, mode)
    }

    pub(in crate::fs) fn seek_handle(&self, fh: u64, offset: i64, whence: i32) -> Result<i64> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Refused::IsDir.into());
        };
        // Bytes held back at the end are part of the file's data.
        self.settle(&h.inode, &h.state)?;
        let (_content, _, view) = self.current(h)?;
        let Some(index) = view else {
            return sys::lseek(&h.file, offset, whence).map_err(io);
        };
        let len = i64::try_from(index.view_len()).unwrap_or(i64::MAX);
        // A view has no holes.
        match whence {
            _ if offset < 0 => Err(Refused::BadSeek.into()),
            _ if offset >= len => Err(Refused::PastEnd.into()),
            libc::SEEK_DATA => Ok(offset),
            libc::SEEK_HOLE => Ok(len),
            _ => Err(Refused::BadSeek.into()),
        }
    }
}

/// The result of `CutFs::open`.
pub(in crate::fs) enum Opened {
    /// A file handle and its open flags.
    Now(u64, FopenFlags),
    /// To be finished on the scan threads: `Opener::finish`.
    Later(Later),
}

/// An open file on its way to becoming a handle: its descriptor, already
/// attached to the inode, and the share it is counted in.
pub(in crate::fs) struct Later {
    pub inode: Arc<Inode>,
    pub file: crate::fs::state::inodes::Fd,
    state: Arc<content::OpenFile>,
    attached: crate::fs::state::inodes::Attached,
    ticket: Ticket,
}

impl Later {
    pub(in crate::fs) fn new(
        inode: Arc<Inode>,
        file: crate::fs::state::inodes::Fd,
        ticket: Ticket,
    ) -> Result<Later> {
        let attached = inode.attach(Some(&file));
        let state = attached
            .state()
            .cloned()
            .ok_or_else(|| not_a_file(&inode))?;
        Ok(Later {
            inode,
            file,
            state,
            attached,
            ticket,
        })
    }
}

/// The parts of the filesystem that give an open file its handle, shared
/// with the scan threads.
pub(in crate::fs) struct Opener {
    handles: Arc<crate::fs::state::handles::HandleTable>,
    cache: Arc<content::IndexCache>,
    noatime: bool,
    strictatime: bool,
}

impl Opener {
    /// Gives the open `file` of `inode` a file handle: learns whether it is
    /// corrected and its index (the long part for a large file), under the
    /// content lock.
    pub(in crate::fs) fn finish(&self, later: Later, flags: i32) -> Result<(u64, FopenFlags)> {
        let Later {
            inode,
            file,
            state,
            attached,
            ticket,
        } = later;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if self.noatime {
            sys::set_noatime(file.as_fd()).map_err(io)?;
        }
        let mut content = state.content.write();
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let stamp = Stamp::of(&st);
        // A write-only descriptor (the caller may not read) cannot show us
        // the content: look through a second, read-only one.
        let second;
        let mut reader: &std::fs::File = &file;
        // Known for exactly this stamp (a write changes the ctime, which no
        // one but the kernel sets), the class needs no read of the head: a
        // warm open makes no system call for it.
        let fresh = matches!(&content.view, Some((s, _)) if *s == stamp);
        // A corrected file's index looked up once, found or not (`Some`):
        // kept for the view below, a miss not looked up again before the scan.
        let mut lookup = None;
        let known = if fresh {
            Some(true)
        } else {
            let class = inode.seen().lock().class(&stamp);
            match class {
                Some(Class::Raw) => Some(false),
                // Its index at hand too: nothing to read with `reader`.
                Some(Class::Corrected { .. }) => {
                    let found = self.cache.get(&stamp);
                    let known = found.is_some().then_some(true);
                    lookup = Some(found);
                    known
                }
                None => None,
            }
        };
        let corrected = if let Some(known) = known {
            known
        } else {
            (st.st_size as u64) >= MAGIC.len() as u64
                && match content::has_magic(&file) {
                    Ok(m) => m,
                    Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                        second = inode.open_quiet(libc::O_RDONLY)?;
                        reader = &second;
                        content::has_magic(reader).map_err(io)?
                    }
                    Err(e) => return Err(io(e)),
                }
        };
        if corrected {
            if !fresh {
                let index = match lookup {
                    Some(Some(index)) => index,
                    Some(None) => content::scan_index(&self.cache, reader, stamp)?,
                    None => content::index_for(&self.cache, reader, stamp)?,
                };
                inode.seen().lock().remember(
                    stamp,
                    Class::Corrected {
                        view_len: index.view_len(),
                        lossless: index.lossless(),
                    },
                );
                content.view = Some((stamp, index));
            }
            // The exception to lossless reading (docs/format.md): the view cannot be written
            // back unchanged, so the file opens for writing with an error.
            if write && matches!(&content.view, Some((_, i)) if !i.lossless()) {
                crate::fs::observe::explain::read_only_view(&inode.path());
                return Err(crate::view::Error::ReadOnly.into());
            }
        } else {
            content.view = None;
            if (st.st_size as u64) >= MAGIC.len() as u64 {
                inode.seen().lock().remember(stamp, Class::Raw);
            }
        }
        content.open += 1;
        let lost = crate::fs::state::errseq::ErrorsTold::at(content.lost);
        let keep = inode.seen().lock().opened_at(stamp) && !self.strictatime;
        drop(content);
        let append = write && flags & libc::O_APPEND != 0;
        let fh = self.handles.insert(Handle::File(FileHandle {
            inode,
            file,
            write,
            append,
            state,
            lost,
            _attached: attached,
            _ticket: ticket,
        }));
        let mut fopen = FopenFlags::empty();
        if keep {
            fopen |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if append {
            // Each write(2) of an appender is one WRITE (up to 1 MiB),
            // which lands whole at the file's end (`write_file`): through
            // the page cache the kernel would split one at the first page
            // it has not cached, and another appender's bytes could come
            // between the parts. Nor does it cache the bytes at the offset
            // its stale size gave.
            fopen |= FopenFlags::FOPEN_DIRECT_IO;
        }
        // No FOPEN_NOFLUSH, not even for a read-only handle: the FLUSH of
        // every close(2) is what releases the closing owner's record locks
        // (`crate::fs::locks`), passthrough handles included
        // (`kernel_flags`).
        Ok((fh, fopen))
    }
}

/// Closes handle `fh` (release, or an open the kernel must not get; the
/// scan threads call it too).
pub(in crate::fs) fn release_handle(handles: &crate::fs::state::handles::HandleTable, fh: u64) {
    if let Some(h) = handles.remove(fh) {
        handle_closed(h);
    }
}

/// What closing handle `h` (out of the handle table) leaves: the file's
/// state forgets its index once no handle has it open; the descriptor and
/// its share go with the last reference to `h`.
pub(in crate::fs) fn handle_closed(h: Arc<Handle>) {
    if let Handle::File(h) = &*h {
        let mut content = h.state.content.write();
        content.open = content.open.saturating_sub(1);
        if content.open == 0 {
            // The cache keeps it (within its bound) for the next open.
            content.view = None;
        }
    }
}

impl CutFs {
    /// The handle a READ of `ino` with file handle `fh` goes through: the
    /// caller's, or with none (`-o archive`) the daemon's own.
    pub(in crate::fs) fn read_handle(&self, ino: u64, fh: u64) -> Result<Arc<Handle>> {
        match (&self.archive, fh) {
            (Some(readers), 0) => self.archive_handle(readers, ino),
            _ => self.handles.file(fh),
        }
    }

    /// A READ with no file handle (`-o archive`, `crate::fs::frontend::archive`):
    /// through the daemon's own handle of `ino`, opened now if it has none.
    fn archive_handle(
        &self,
        readers: &crate::fs::frontend::archive::Readers<Arc<Handle>>,
        ino: u64,
    ) -> Result<Arc<Handle>> {
        let inode = self.inodes.get(ino)?;
        let current =
            |h: &Arc<Handle>| matches!(&**h, Handle::File(f) if Arc::ptr_eq(&f.inode, &inode));
        if let Some(h) = readers.get(ino, current) {
            return Ok(h);
        }
        // Root's share: these descriptors are the daemon's, kept a moment
        // for whoever reads next, not the reader's.
        let fh = match self.open_handle(ino, libc::O_RDONLY, 0)? {
            Opened::Now(fh, _) => fh,
            Opened::Later(later) => self.opener().finish(later, libc::O_RDONLY)?.0,
        };
        let h = self.handles.remove(fh).ok_or(fuser::Errno::EBADF)?;
        for old in readers.put(ino, h.clone()) {
            handle_closed(old);
        }
        Ok(h)
    }
}
