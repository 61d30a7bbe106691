//! The operations, as plain functions returning `Result`: what each FUSE
//! request does to BACKING. `mod.rs` wraps each in a thin trait method that
//! only sends the reply.
//!
//! Symlink safety: every operation starts from inode entries (their O_PATH
//! descriptors, found again safely by `inodes`) and one name component, and
//! uses `sys`'s `*at` wrappers,
//! which never follow a symlink; so a symlink in BACKING, or a rename there
//! while a request runs, can never lead the daemon outside BACKING.
//!
//! Files are created as the caller (`sys::ActAs`: fsuid, fsgid and groups of
//! the requesting process), so owners are right and a daemon running as root
//! lends nobody its rights; everything else runs as the daemon after the
//! kernel has checked permissions (`default_permissions` is always on).

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirEntryExt;
use std::sync::{Arc, PoisonError};

use fuser::{FileAttr, FileType, FopenFlags, Request, TimeOrNow};

use crate::codec::MAGIC;

use super::attr;
use super::content::{self, Class, Stamp};
use super::error::{io, Errno, Result, READ_ONLY_VIEW};
use super::handles::{DirEntry, DirHandle, FileHandle, Handle};
use super::inodes::Inode;
use super::sys::{self, ActAs, Identity};
use super::CutFs;

/// Entries of one readdirplus reply prepared (looked up, classified)
/// together; more than a 4 KiB reply holds, fewer than a large one.
const PLUS_BATCH: usize = 48;

/// Threads classifying a batch of cold files at once.
const PLUS_WORKERS: usize = 8;

/// A readdirplus entry after its lookup: None for "." and "..".
type Looked = Option<Result<(Arc<Inode>, libc::stat)>>;

fn caller(req: &Request) -> Identity {
    Identity::of(req.uid(), req.gid(), req.pid())
}

/// The first eight bytes a file would have after writing `data` at
/// `offset` over `head` (its current first bytes); None if shorter than 8.
fn head_after(head: &[u8], offset: u64, data: &[u8]) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    let end = offset.saturating_add(data.len() as u64);
    for (i, b) in out.iter_mut().enumerate() {
        let i64 = i as u64;
        if i64 >= offset && i64 < end {
            *b = data[(i64 - offset) as usize];
        } else if i < head.len() {
            *b = head[i];
        } else if i64 < offset {
            *b = 0; // a hole before the write
        } else {
            return None;
        }
    }
    Some(out)
}

/// Whether `name` in `parent` is the journal directory at the root of
/// BACKING, which the mount neither shows nor lets anyone touch.
fn is_journal(parent: u64, name: &OsStr) -> bool {
    parent == super::inodes::ROOT && name.as_bytes() == crate::edit::JOURNAL_DIR.as_bytes()
}

impl CutFs {
    /// The class of a regular file in state `st` (cached per stamp).
    pub(super) fn class(&self, inode: &Inode, st: &libc::stat) -> Result<Class> {
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) < MAGIC.len() as u64 {
            return Ok(Class::Raw);
        }
        let stamp = Stamp::of(st);
        let state = inode.state();
        if let Some(c) = state.known_class(&stamp) {
            return Ok(c);
        }
        let file = inode
            .open(libc::O_RDONLY | libc::O_NOATIME)
            .or_else(|_| inode.open(libc::O_RDONLY))?;
        let class = if content::has_magic(&file).map_err(io)? {
            let index = content::index_for(&self.cache, &file, stamp)?;
            Class::Corrected {
                view_len: index.view_len(),
                lossless: index.lossless(),
            }
        } else {
            Class::Raw
        };
        state.remember_class(stamp, class);
        Ok(class)
    }

    /// The attributes every reply carries: the view's size for corrected
    /// files, everything else as in BACKING.
    pub(super) fn attr(&self, inode: &Inode, st: &libc::stat) -> Result<FileAttr> {
        let size = match self.class(inode, st)? {
            Class::Raw => st.st_size as u64,
            Class::Corrected { view_len, .. } => view_len,
        };
        let mut a = attr::from_stat(inode.ino, st, size);
        if inode.ino == super::inodes::ROOT {
            a.ino = fuser::INodeNo(super::inodes::ROOT);
        }
        Ok(a)
    }

    pub(super) fn getattr(&self, ino: u64) -> Result<FileAttr> {
        let inode = self.inodes.get(ino)?;
        let st = inode.stat()?;
        self.attr(&inode, &st)
    }

    /// An entry for the kernel: counts one lookup, which is given back if
    /// the attributes cannot be had.
    fn entry(&self, inode: Arc<Inode>, st: &libc::stat) -> Result<FileAttr> {
        self.attr(&inode, st)
            .inspect_err(|_| self.inodes.forget(inode.ino, 1))
    }

    pub(super) fn lookup(&self, parent: u64, name: &OsStr) -> Result<FileAttr> {
        if is_journal(parent, name) {
            return Err(Errno::ENOENT);
        }
        let dir = self.inodes.get(parent)?;
        let name = sys::component(name).map_err(io)?;
        let (inode, st) = self.inodes.lookup(&dir, &name)?;
        self.entry(inode, &st)
    }

    pub(super) fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// Creates `name` in `parent` as the caller with `make`, then enters it.
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        make: impl FnOnce(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr) -> std::io::Result<()>,
    ) -> Result<FileAttr> {
        if is_journal(parent, name) {
            return Err(Errno::EPERM);
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        {
            let _as = ActAs::new(&caller(req)).map_err(io)?;
            make(dir.fd()?.as_fd(), &cname).map_err(io)?;
        }
        let (inode, st) = self.inodes.lookup(&dir, &cname)?;
        self.entry(inode, &st)
    }

    pub(super) fn mkdir(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr> {
        self.make(req, parent, name, |d, n| {
            sys::mkdirat(d, n, mode & !umask & 0o7777)
        })
    }

    pub(super) fn mknod(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr> {
        let mode = (mode & libc::S_IFMT) | (mode & !umask & 0o7777);
        self.make(req, parent, name, |d, n| {
            sys::mknodat(d, n, mode, libc::dev_t::from(rdev))
        })
    }

    pub(super) fn symlink(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        target: &std::path::Path,
    ) -> Result<FileAttr> {
        let target = sys::cstring(target.as_os_str().as_bytes()).map_err(io)?;
        self.make(req, parent, name, |d, n| sys::symlinkat(&target, d, n))
    }

    pub(super) fn link(&self, ino: u64, newparent: u64, newname: &OsStr) -> Result<FileAttr> {
        if is_journal(newparent, newname) {
            return Err(Errno::EPERM);
        }
        let inode = self.inodes.get(ino)?;
        let dir = self.inodes.get(newparent)?;
        let cname = sys::component(newname).map_err(io)?;
        self.keeping_content(&inode, || {
            sys::linkat(inode.fd()?.as_fd(), dir.fd()?.as_fd(), &cname).map_err(io)
        })?;
        let (inode, st) = self.inodes.lookup(&dir, &cname)?;
        self.entry(inode, &st)
    }

    pub(super) fn unlink(&self, parent: u64, name: &OsStr, flags: libc::c_int) -> Result<()> {
        if is_journal(parent, name) {
            return Err(Errno::ENOENT);
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        sys::unlinkat(dir.fd()?.as_fd(), &cname, flags).map_err(io)
    }

    pub(super) fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<()> {
        if is_journal(parent, name) || is_journal(newparent, newname) {
            return Err(Errno::EPERM);
        }
        let from = self.inodes.get(parent)?;
        let to = self.inodes.get(newparent)?;
        let old = sys::component(name).map_err(io)?;
        let new = sys::component(newname).map_err(io)?;
        sys::renameat2(from.fd()?.as_fd(), &old, to.fd()?.as_fd(), &new, flags).map_err(io)?;
        // Reopening by name follows the inodes to their new names.
        self.inodes.renamed(&to, &new);
        if flags & libc::RENAME_EXCHANGE != 0 {
            self.inodes.renamed(&from, &old);
        }
        Ok(())
    }

    pub(super) fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inodes.get(ino)?;
        sys::readlink(inode.fd()?.as_fd()).map_err(io)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<u64>,
    ) -> Result<FileAttr> {
        let inode = self.inodes.get(ino)?;
        if uid.is_some() || gid.is_some() || mode.is_some() {
            self.keeping_content(&inode, || {
                if uid.is_some() || gid.is_some() {
                    sys::chown(
                        inode.fd()?.as_fd(),
                        uid.unwrap_or(u32::MAX),
                        gid.unwrap_or(u32::MAX),
                    )
                    .map_err(io)?;
                }
                if let Some(mode) = mode {
                    if inode.fmt == libc::S_IFLNK {
                        return Err(Errno::EOPNOTSUPP);
                    }
                    sys::chmod(inode.fd()?.as_fd(), mode & 0o7777).map_err(io)?;
                }
                Ok(())
            })?;
        }
        if let Some(size) = size {
            self.truncate(&inode, size, fh)?;
        }
        if atime.is_some() || mtime.is_some() {
            self.keeping_content(&inode, || {
                sys::utimens(
                    inode.fd()?.as_fd(),
                    &[attr::timespec(atime), attr::timespec(mtime)],
                )
                .map_err(io)
            })?;
        }
        let st = inode.stat()?;
        self.attr(&inode, &st)
    }

    fn truncate(&self, inode: &Inode, size: u64, fh: Option<u64>) -> Result<()> {
        if !inode.is_reg() {
            return Err(if inode.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        }
        let state = inode.state().clone();
        let handle = fh.and_then(|fh| self.handles.file(fh).ok());
        match handle.as_deref() {
            Some(Handle::File(h)) if h.write => self.set_size(&state, &h.file, size),
            _ => {
                let file = inode.open(libc::O_RDWR)?;
                self.set_size(&state, &file, size)
            }
        }
    }

    /// Opens a regular file.
    pub(super) fn open(&self, ino: u64, flags: i32) -> Result<(u64, FopenFlags)> {
        let inode = self.inodes.get(ino)?;
        if !inode.is_reg() {
            // Devices, fifos and sockets are opened by the kernel itself;
            // anything else reaching here is not a file we serve.
            return Err(if inode.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        }
        // Pinned first: a file unlinked while open keeps its descriptor.
        let pin = inode.pin()?;
        let file = self.open_file(&inode, flags)?;
        self.new_file_handle(inode, pin, file, flags)
    }

    fn open_file(&self, inode: &Inode, flags: i32) -> Result<std::fs::File> {
        // O_APPEND stays with the kernel, which sends appends at the end of
        // the view; the backing descriptor writes at the offsets we choose
        // (a view offset is not a disk offset, and a rewrite starts at 0).
        let strip = libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOCTTY
            | libc::O_DIRECT
            | libc::O_NOFOLLOW
            | libc::O_APPEND;
        let flags = flags & !strip;
        if flags & libc::O_ACCMODE == libc::O_WRONLY {
            // A readable descriptor lets the view (and issue 4) read too.
            let rw = (flags & !libc::O_ACCMODE) | libc::O_RDWR;
            if let Ok(f) = inode.open(rw) {
                return Ok(f);
            }
        }
        inode.open(flags)
    }

    fn new_file_handle(
        &self,
        inode: Arc<Inode>,
        pin: super::inodes::Pinned,
        file: std::fs::File,
        flags: i32,
    ) -> Result<(u64, FopenFlags)> {
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let state = inode.state().clone();
        let mut content = state
            .content
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let stamp = Stamp::of(&st);
        // A write-only descriptor (the caller may not read) cannot show us
        // the content: look through a second, read-only one.
        let second;
        let mut reader = &file;
        let corrected = (st.st_size as u64) >= MAGIC.len() as u64
            && match content::has_magic(&file) {
                Ok(m) => m,
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    second = inode.open(libc::O_RDONLY)?;
                    reader = &second;
                    content::has_magic(reader).map_err(io)?
                }
                Err(e) => return Err(io(e)),
            };
        if corrected {
            let fresh = matches!(&content.view, Some((s, _)) if *s == stamp);
            if !fresh {
                let index = content::index_for(&self.cache, reader, stamp)?;
                state.remember_class(
                    stamp,
                    Class::Corrected {
                        view_len: index.view_len(),
                        lossless: index.lossless(),
                    },
                );
                content.view = Some((stamp, index));
            }
            // SPEC invariant 1's exempt class: the view cannot be written
            // back unchanged, so the file opens for writing with an error.
            if write && matches!(&content.view, Some((_, i)) if !i.lossless()) {
                return Err(READ_ONLY_VIEW);
            }
        } else {
            content.view = None;
        }
        content.open += 1;
        let keep = state.opened_at(stamp);
        drop(content);
        let fh = self.handles.insert(Handle::File(FileHandle {
            inode,
            file,
            write,
            _pin: pin,
        }));
        let mut flags = FopenFlags::empty();
        if keep {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if !write {
            // Nothing is buffered here and locks are the kernel's: a close
            // of a read-only handle need not wait for a FLUSH round trip.
            flags |= FopenFlags::FOPEN_NOFLUSH;
        }
        Ok((fh, flags))
    }

    pub(super) fn create(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(FileAttr, u64, FopenFlags)> {
        if is_journal(parent, name) {
            return Err(Errno::EPERM);
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        let strip = libc::O_NOCTTY | libc::O_DIRECT | libc::O_APPEND;
        let asked = (flags & !strip) | libc::O_CREAT | libc::O_NOFOLLOW;
        // Write-only becomes read-write, so the view (and issue 4) can read.
        let upgraded = asked & libc::O_ACCMODE == libc::O_WRONLY;
        let oflags = if upgraded {
            (asked & !libc::O_ACCMODE) | libc::O_RDWR
        } else {
            asked
        };
        let dir_fd = dir.fd()?;
        let fd = {
            let _as = ActAs::new(&caller(req)).map_err(io)?;
            let mode = mode & !umask & 0o7777;
            match sys::openat(dir_fd.as_fd(), &cname, oflags, mode) {
                // An existing file the caller may write but not read.
                Err(e) if upgraded && e.raw_os_error() == Some(libc::EACCES) => {
                    sys::openat(dir_fd.as_fd(), &cname, asked, mode).map_err(io)?
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    log::warn!(
                        "{}: cannot create or open: out of file descriptors ({e}); close \
                         files open through the mount, or raise the daemon's limit (ulimit -n)",
                        dir.path_of(name)
                    );
                    return Err(io(e));
                }
                r => r.map_err(io)?,
            }
        };
        drop(dir_fd);
        let file = std::fs::File::from(fd);
        let path_fd = sys::reopen(file.as_fd(), libc::O_PATH).map_err(io)?;
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let inode = self.inodes.insert(path_fd.into(), &st, &dir, &cname);
        let ino = inode.ino;
        let attr = self.entry(inode.clone(), &st)?;
        let handle = inode
            .pin()
            .and_then(|pin| self.new_file_handle(inode, pin, file, flags));
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
    pub(super) fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        let state = h.inode.state();
        let content = state.content.read().unwrap_or_else(PoisonError::into_inner);
        match &content.view {
            Some((_, index)) => content::read_view(&h.file, index, offset, size as usize),
            None => content::read_raw(&h.file, offset, size as usize),
        }
    }

    /// Refuses a change that would make a raw file begin with the magic
    /// number (SPEC §3: it would read back as something else).
    pub(super) fn guard_magic(h: &FileHandle, offset: u64, data: &[u8]) -> Result<()> {
        if offset >= MAGIC.len() as u64 {
            return Ok(());
        }
        let head = content::read_raw(&h.file, 0, MAGIC.len()).or_else(|e| {
            let r = h.inode.open(libc::O_RDONLY)?;
            content::read_raw(&r, 0, MAGIC.len()).map_err(|_| e)
        })?;
        match head_after(&head, offset, data) {
            Some(h) if h == MAGIC => Err(Errno::EILSEQ),
            _ => Ok(()),
        }
    }

    pub(super) fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        self.write_file(h, offset, data)
    }

    pub(super) fn release(&self, fh: u64) {
        if let Some(h) = self.handles.remove(fh) {
            if let Handle::File(h) = &*h {
                let state = h.inode.state();
                let mut content = state
                    .content
                    .write()
                    .unwrap_or_else(PoisonError::into_inner);
                content.open = content.open.saturating_sub(1);
                if content.open == 0 {
                    // The cache keeps it (within its bound) for the next open.
                    content.view = None;
                }
            }
        }
    }

    pub(super) fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handles.get(fh)?;
        let fd = match &*h {
            Handle::File(f) => f.file.as_raw_fd(),
            Handle::Dir(d) => d.dir.as_raw_fd(),
        };
        sys::fsync(fd, datasync).map_err(io)
    }

    /// fallocate: as in BACKING for raw files. For a corrected file only
    /// what makes sense for a view: plain allocation (mode 0 or
    /// KEEP_SIZE), which extends the view with zeros like a truncate when
    /// it reaches past the end; hole punching and zeroing ranges of a view
    /// are EOPNOTSUPP.
    pub(super) fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        let state = h.inode.state();
        let view_len = {
            let content = state.content.read().unwrap_or_else(PoisonError::into_inner);
            content.view.as_ref().map(|(_, i)| i.view_len())
        };
        if let Some(view_len) = view_len {
            return match mode {
                0 if offset.saturating_add(length) > view_len => {
                    self.set_size(state, &h.file, offset + length)
                }
                0 | libc::FALLOC_FL_KEEP_SIZE => Ok(()),
                _ => Err(Errno::EOPNOTSUPP),
            };
        }
        let _content = state
            .content
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            let zeros = vec![0u8; length.min(MAGIC.len() as u64) as usize];
            Self::guard_magic(h, offset, &zeros)?;
        }
        sys::fallocate(h.file.as_raw_fd(), mode, offset, length).map_err(io)
    }

    pub(super) fn lseek(&self, fh: u64, offset: i64, whence: i32) -> Result<i64> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        let state = h.inode.state();
        let content = state.content.read().unwrap_or_else(PoisonError::into_inner);
        let Some((_, index)) = &content.view else {
            return sys::lseek(h.file.as_raw_fd(), offset, whence).map_err(io);
        };
        let len = i64::try_from(index.view_len()).unwrap_or(i64::MAX);
        // A view has no holes.
        match whence {
            _ if offset < 0 => Err(Errno::EINVAL),
            _ if offset >= len => Err(Errno::ENXIO),
            libc::SEEK_DATA => Ok(offset),
            libc::SEEK_HOLE => Ok(len),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Opens a directory. The kernel may cache its listing; the cache is
    /// kept across opens only while the directory's stamp is unchanged, so
    /// a change in BACKING is listed on the next opendir (changes through
    /// the mount invalidate the kernel's cache themselves).
    pub(super) fn opendir(&self, ino: u64) -> Result<(u64, FopenFlags)> {
        let inode = self.inodes.get(ino)?;
        // Pinned: a directory removed while open still answers fstat.
        let pin = inode.pin()?;
        let dir = inode.open(libc::O_RDONLY | libc::O_DIRECTORY)?;
        let st = sys::fstat(dir.as_fd()).map_err(io)?;
        let mut flags = FopenFlags::FOPEN_CACHE_DIR;
        if inode.state().opened_at(Stamp::of(&st)) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        let fh = self.handles.insert(Handle::Dir(DirHandle {
            inode,
            dir,
            entries: Default::default(),
            _pin: pin,
        }));
        Ok((fh, flags))
    }

    /// Reads the directory listing afresh (at offset 0: opendir or rewind).
    fn list(h: &DirHandle) -> Result<Vec<DirEntry>> {
        let path = sys::proc_path(h.dir.as_fd());
        let path = std::path::Path::new(OsStr::from_bytes(path.as_bytes()));
        let mut out = vec![
            DirEntry {
                ino: h.inode.ino,
                kind: FileType::Directory,
                name: ".".into(),
            },
            DirEntry {
                ino: h.inode.ino,
                kind: FileType::Directory,
                name: "..".into(),
            },
        ];
        for e in std::fs::read_dir(path).map_err(io)? {
            let e = e.map_err(io)?;
            if is_journal(h.inode.ino, &e.file_name()) {
                continue;
            }
            let kind = match e.file_type() {
                Ok(t) => FileType::from_std(t).unwrap_or(FileType::RegularFile),
                Err(_) => FileType::RegularFile,
            };
            out.push(DirEntry {
                ino: e.ino(),
                kind,
                name: e.file_name(),
            });
        }
        Ok(out)
    }

    pub(super) fn dir_handle(&self, fh: u64) -> Result<Arc<Handle>> {
        let h = self.handles.get(fh)?;
        match &*h {
            Handle::Dir(_) => Ok(h),
            Handle::File(_) => Err(Errno::ENOTDIR),
        }
    }

    /// Calls `add(offset_of_next, entry)` from `offset` on until it says
    /// the reply is full.
    pub(super) fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, &DirEntry) -> bool,
    ) -> Result<()> {
        let h = self.dir_handle(fh)?;
        let Handle::Dir(d) = &*h else {
            return Err(Errno::ENOTDIR);
        };
        let mut entries = d.entries();
        // A new handle may be asked for a later offset first (the kernel
        // served the start from its cache of the listing): list it then
        // too, or the listing would end early. "." and ".." make a listed
        // directory never empty.
        if offset == 0 || entries.is_empty() {
            *entries = self.listed(d)?;
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in entries.iter().enumerate().skip(start) {
            if add(i as u64 + 1, e) {
                break;
            }
        }
        Ok(())
    }

    /// readdirplus: like `readdir`, but `add(next, entry, attr)` also gets
    /// the entry's attributes (None for "." and "..", which the kernel does
    /// not enter). Every attribute sent counts one lookup; when `add` says
    /// the reply is full, that lookup and those of entries prepared but not
    /// sent are given back here.
    ///
    /// No entry is dropped silently: a name gone since the listing was read
    /// (ENOENT) is left out, as readdir racing an unlink would; any other
    /// failure (out of descriptors or memory, EIO, …) is logged with the
    /// path and ends the reply before that entry, so the kernel asks again
    /// from there and the caller gets the errno (at once if it is the first
    /// entry of a reply).
    pub(super) fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, &DirEntry, Option<&FileAttr>) -> bool,
    ) -> Result<()> {
        let h = self.dir_handle(fh)?;
        let Handle::Dir(d) = &*h else {
            return Err(Errno::ENOTDIR);
        };
        let mut entries = d.entries();
        // A new handle may be asked for a later offset first (the kernel
        // served the start from its cache of the listing): list it then
        // too, or the listing would end early. "." and ".." make a listed
        // directory never empty.
        if offset == 0 || entries.is_empty() {
            *entries = self.listed(d)?;
        }
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(entries.len());
        let end = start.saturating_add(PLUS_BATCH).min(entries.len());
        let mut prepared = self.plus_batch(&d.inode, &entries[start..end]).into_iter();
        let mut sent = 0usize;
        let mut failed = None;
        for (i, e) in entries.iter().enumerate().skip(start) {
            let r = match prepared.next() {
                Some(r) => r,
                None => self.plus_entry(&d.inode, e),
            };
            let attr = match r {
                None => None,
                Some(Ok(a)) => Some(a),
                Some(Err(Errno::ENOENT)) => continue,
                Some(Err(err)) => {
                    log::warn!(
                        "{}: listing with attributes failed ({}); the listing ends \
                         there with that error{}",
                        d.inode.path_of(&e.name),
                        std::io::Error::from_raw_os_error(err.code()),
                        if matches!(err, Errno::EMFILE | Errno::ENFILE) {
                            ": out of file descriptors — close files open through the \
                             mount, or raise the daemon's limit (ulimit -n)"
                        } else {
                            ""
                        }
                    );
                    failed = Some(err);
                    break;
                }
            };
            if add(i as u64 + 1, e, attr.as_ref()) {
                if let Some(a) = attr {
                    self.inodes.forget(a.ino.0, 1);
                }
                break;
            }
            sent += 1;
        }
        for r in prepared {
            if let Some(Ok(a)) = r {
                self.inodes.forget(a.ino.0, 1);
            }
        }
        match failed {
            Some(err) if sent == 0 => Err(err),
            _ => Ok(()),
        }
    }

    /// The listing of a directory handle, read afresh; a failure is logged
    /// with the path when it is for want of descriptors or memory.
    fn listed(&self, d: &DirHandle) -> Result<Vec<DirEntry>> {
        Self::list(d).inspect_err(|err| {
            if matches!(*err, Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM) {
                log::warn!(
                    "{}: cannot read the directory: {} (out of file descriptors or \
                     memory; close files open through the mount, or raise the daemon's \
                     limit with ulimit -n)",
                    d.inode.path(),
                    std::io::Error::from_raw_os_error(err.code())
                );
            }
        })
    }

    /// Looks a batch of entries up; the regular files whose class is not
    /// known yet (a cold cache: each needs its first bytes read and maybe an
    /// index built) are classified on a few threads at once, so a cold
    /// `ls -l` or `find` waits for the disk in parallel, not file by file.
    fn plus_batch(&self, dir: &Arc<Inode>, batch: &[DirEntry]) -> Vec<Option<Result<FileAttr>>> {
        let looked: Vec<Looked> = batch
            .iter()
            .map(|e| {
                let b = e.name.as_bytes();
                if b == b"." || b == b".." {
                    return None;
                }
                Some(
                    sys::component(&e.name)
                        .map_err(io)
                        .and_then(|n| self.inodes.lookup(dir, &n)),
                )
            })
            .collect();
        let unknown: Vec<&(Arc<Inode>, libc::stat)> = looked
            .iter()
            .filter_map(|r| match r {
                Some(Ok(x)) => Some(x),
                _ => None,
            })
            .filter(|(inode, st)| {
                inode.is_reg()
                    && (st.st_size as u64) >= MAGIC.len() as u64
                    && inode.state().known_class(&Stamp::of(st)).is_none()
            })
            .collect();
        if unknown.len() >= 2 {
            let workers = unknown.len().min(PLUS_WORKERS);
            let per = unknown.len().div_ceil(workers);
            std::thread::scope(|s| {
                for chunk in unknown.chunks(per) {
                    s.spawn(move || {
                        for (inode, st) in chunk {
                            // Errors resurface below, per entry.
                            let _ = self.class(inode, st);
                        }
                    });
                }
            });
        }
        looked
            .into_iter()
            .map(|r| r.map(|r| r.and_then(|(inode, st)| self.entry(inode, &st))))
            .collect()
    }

    /// The entry for one name in `dir` (counting one lookup), or None for
    /// "." and "..".
    fn plus_entry(&self, dir: &Arc<Inode>, e: &DirEntry) -> Option<Result<FileAttr>> {
        let b = e.name.as_bytes();
        if b == b"." || b == b".." {
            return None;
        }
        Some(
            sys::component(&e.name)
                .map_err(io)
                .and_then(|n| self.inodes.lookup(dir, &n))
                .and_then(|(inode, st)| self.entry(inode, &st)),
        )
    }

    pub(super) fn dir_attr(&self, dir: &Inode) -> Result<FileAttr> {
        let st = dir.stat()?;
        self.attr(dir, &st)
    }

    pub(super) fn releasedir(&self, fh: u64) {
        self.handles.remove(fh);
    }

    pub(super) fn statfs(&self) -> Result<libc::statvfs> {
        let root = self.inodes.get(super::inodes::ROOT)?;
        sys::fstatvfs(root.fd()?.as_fd()).map_err(io)
    }

    pub(super) fn setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            sys::setxattr(inode.fd()?.as_fd(), &name, value, flags).map_err(io)
        })
    }

    /// getxattr/listxattr protocol: size 0 asks for the length.
    fn xattr_reply(
        size: u32,
        mut call: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    ) -> Result<XattrReply> {
        if size == 0 {
            let n = call(&mut []).map_err(io)?;
            return Ok(XattrReply::Size(
                u32::try_from(n).map_err(|_| Errno::E2BIG)?,
            ));
        }
        let mut buf = vec![0u8; size as usize];
        let n = call(&mut buf).map_err(io)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    pub(super) fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrReply> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        let fd = inode.fd()?;
        Self::xattr_reply(size, |buf| sys::getxattr(fd.as_fd(), &name, buf))
    }

    pub(super) fn listxattr(&self, ino: u64, size: u32) -> Result<XattrReply> {
        let inode = self.inodes.get(ino)?;
        let fd = inode.fd()?;
        Self::xattr_reply(size, |buf| sys::listxattr(fd.as_fd(), buf))
    }

    pub(super) fn removexattr(&self, ino: u64, name: &OsStr) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            sys::removexattr(inode.fd()?.as_fd(), &name).map_err(io)
        })
    }

    /// Runs a change of metadata only (`change` must not touch content)
    /// on `inode` and carries what is known of a regular file's content
    /// over to its new stamp (ctime moves, the bytes do not).
    fn keeping_content<T>(&self, inode: &Inode, change: impl FnOnce() -> Result<T>) -> Result<T> {
        if !inode.is_reg() {
            return change();
        }
        let state = inode.state();
        let mut content = state
            .content
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let before = inode.stat().map(|st| Stamp::of(&st));
        let r = change()?;
        if let (Ok(old), Ok(st)) = (before, inode.stat()) {
            state.carry(&mut content, &self.cache, old, Stamp::of(&st));
        }
        Ok(r)
    }

    /// access(2) by mode bits (the kernel normally checks itself, since
    /// `default_permissions` is always on).
    pub(super) fn access(&self, req: &Request, ino: u64, mask: i32) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let st = inode.stat()?;
        if mask == libc::F_OK {
            return Ok(());
        }
        let mode = st.st_mode;
        let want = (mask & 7) as u32;
        if req.uid() == 0 {
            let exec_ok =
                mask & libc::X_OK == 0 || mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
            return if exec_ok { Ok(()) } else { Err(Errno::EACCES) };
        }
        let bits = if st.st_uid == req.uid() {
            (mode >> 6) & 7
        } else if st.st_gid == req.gid() || caller(req).has_group(st.st_gid) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        if bits & want == want {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }
}

pub(super) enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_after_writes() {
        let m = MAGIC;
        assert_eq!(head_after(&[], 0, &m), Some(m));
        assert_eq!(head_after(&m[..4], 4, &m[4..]), Some(m));
        // A hole before the write reads as zeros.
        let mut holed = m;
        holed[4] = 0;
        assert_eq!(head_after(&m[..4], 5, &m[5..]), Some(holed));
        assert_eq!(head_after(b"abc", 1, b"x"), None);
        assert_eq!(head_after(b"abcdefghij", 2, b"XY"), Some(*b"abXYefgh"));
    }
}
