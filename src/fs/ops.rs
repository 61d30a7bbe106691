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
//! Permissions (man page, PERMISSIONS): the kernel checks every request
//! itself before it reaches us (`default_permissions` is always on), mode
//! bits and POSIX ACLs alike: the daemon negotiates FUSE_POSIX_ACL, and the
//! kernel reads ACLs through `getxattr` here. So a daemon running as root
//! lends nobody its rights, and decides nothing about them itself.
//! Files are created as the caller (`sys::ActAs`: fsuid, fsgid and groups of
//! the requesting process, root callers included) under the caller's umask
//! (`sys::Umask`; FUSE_DONT_MASK leaves it to us), so BACKING gives them the
//! owner, group, mode and default ACL it would give them natively; xattrs
//! (ACLs included) are changed as the caller too. Everything else runs as
//! the daemon, after the kernel's check. `listxattr` hides `trusted.*` from
//! callers without CAP_SYS_ADMIN, as the kernel does natively.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, PoisonError};

use fuser::{FileAttr, FileType, FopenFlags, Request, TimeOrNow};

use cutf8::MAGIC;

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

/// A readdirplus entry's attributes. `provisional`: the file is large, its
/// class not known yet and only a long scan can tell; rather than scan on a
/// FUSE worker, the entry goes out with the backing size and no validity
/// (the kernel asks again, by lookup or getattr, before it uses them, and
/// those finish on the scan threads) while a scan starts in the background.
pub(super) struct PlusAttr {
    pub attr: FileAttr,
    pub provisional: bool,
}

fn caller(req: &Request) -> Identity {
    Identity::of(req.uid(), req.gid(), req.pid())
}

/// This thread acts as the caller of `req` until the guard drops. A switch
/// that did not take fails the request with EIO (and a log line) rather
/// than doing anything with the daemon's own rights.
fn act_as(req: &Request) -> Result<ActAs> {
    ActAs::new(&caller(req)).map_err(|e| {
        log::error!(
            "cannot act as uid {} gid {} (pid {}): {e}; request refused with EIO",
            req.uid(),
            req.gid(),
            req.pid()
        );
        Errno::EIO
    })
}

/// This thread's umask is `umask` until the guard drops (EIO and a log
/// line if the thread cannot have its own).
fn with_umask(umask: u32) -> Result<sys::Umask> {
    sys::Umask::set(umask).map_err(|e| {
        log::error!("cannot give this thread its own umask: {e}; request refused with EIO");
        Errno::EIO
    })
}

/// Whether `name` is one of the two xattrs that hold POSIX ACLs.
fn is_acl_name(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
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

/// Whether `name` in `parent` is one of the mount's own files at the root
/// of BACKING (the journal, `crate::journal::is_internal`), which the mount
/// neither shows nor lets anyone touch.
fn is_journal(parent: u64, name: &OsStr) -> bool {
    parent == super::inodes::ROOT && crate::journal::is_internal(name)
}

/// The class of a regular file in state `st` (cached per stamp); a free
/// function so that the scan threads can run it.
pub(super) fn classify(
    cache: &content::IndexCache,
    inode: &Inode,
    st: &libc::stat,
) -> Result<Class> {
    if !inode.is_reg() || (st.st_size as u64) < MAGIC.len() as u64 {
        return Ok(Class::Raw);
    }
    inode
        .state()
        .classify(cache, st, || open_to_classify(inode))
}

/// Opens `inode` for the daemon's own read of its content (classifying,
/// indexing): without touching its access time where permitted.
fn open_to_classify(inode: &Inode) -> std::io::Result<std::fs::File> {
    inode
        .open_quiet(libc::O_RDONLY)
        .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
}

/// FUSE attributes of `inode` in state `st` and class `class`.
pub(super) fn attr_with(inode: &Inode, st: &libc::stat, class: Class) -> FileAttr {
    let size = match class {
        Class::Raw => st.st_size as u64,
        Class::Corrected { view_len, .. } => view_len,
    };
    let mut a = attr::from_stat(inode.ino, st, size);
    if inode.ino == super::inodes::ROOT {
        a.ino = fuser::INodeNo(super::inodes::ROOT);
    }
    a
}

impl CutFs {
    /// The class of a regular file in state `st` (cached per stamp).
    pub(super) fn class(&self, inode: &Inode, st: &libc::stat) -> Result<Class> {
        classify(&self.cache, inode, st)
    }

    /// The attributes every reply carries: the view's size for corrected
    /// files, everything else as in BACKING.
    pub(super) fn attr(&self, inode: &Inode, st: &libc::stat) -> Result<FileAttr> {
        Ok(attr_with(inode, st, self.class(inode, st)?))
    }

    /// Whether classifying this file may take long (a scan of a large
    /// corrected file whose index is not cached): then the reply is sent
    /// from the scan threads. Large raw files are told by their head here.
    pub(super) fn needs_scan(&self, inode: &Inode, st: &libc::stat) -> Result<bool> {
        if !inode.is_reg()
            || st.st_size as u64 <= content::SCAN_INLINE
            || inode.state().known_class(&Stamp::of(st)).is_some()
        {
            return Ok(false);
        }
        let known = inode
            .state()
            .peek(&self.cache, st, || open_to_classify(inode))?;
        Ok(known.is_none())
    }

    /// An entry for the kernel: counts one lookup, which is given back if
    /// the attributes cannot be had.
    pub(super) fn entry(&self, inode: Arc<Inode>, st: &libc::stat) -> Result<FileAttr> {
        self.attr(&inode, st)
            .inspect_err(|_| self.inodes.forget(inode.ino, 1))
    }

    /// A name for logs: the path relative to BACKING under which the inode
    /// table last saw `inode` (`Inode::path`).
    pub(super) fn name_of(&self, inode: &Inode) -> String {
        inode.path()
    }

    /// `name_of` by FUSE inode number.
    pub(super) fn name_of_ino(&self, ino: u64) -> String {
        match self.inodes.get(ino) {
            Ok(inode) => self.name_of(&inode),
            Err(_) => format!("inode {ino}"),
        }
    }

    /// The first half of a lookup: the entry, counted, without its class.
    pub(super) fn lookup_inode(
        &self,
        parent: u64,
        name: &OsStr,
    ) -> Result<(Arc<Inode>, libc::stat)> {
        if is_journal(parent, name) {
            return Err(Errno::ENOENT);
        }
        let dir = self.inodes.get(parent)?;
        let name = sys::component(name).map_err(io)?;
        self.inodes.lookup(&dir, &name)
    }

    pub(super) fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// Creates `name` in `parent` with `make` as the caller, under the
    /// caller's `umask` (None: none applies, a symlink), then enters it.
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        umask: Option<u32>,
        make: impl FnOnce(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr) -> std::io::Result<()>,
    ) -> Result<FileAttr> {
        if is_journal(parent, name) {
            return Err(Errno::EPERM);
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        {
            let _mask = umask.map(with_umask).transpose()?;
            let _as = act_as(req)?;
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
        self.make(req, parent, name, Some(umask), |d, n| {
            sys::mkdirat(d, n, mode & 0o7777)
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
        let mode = mode & (libc::S_IFMT | 0o7777);
        self.make(req, parent, name, Some(umask), |d, n| {
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
        self.make(req, parent, name, None, |d, n| {
            sys::symlinkat(&target, d, n)
        })
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
                let file = inode.open_quiet(libc::O_RDWR)?;
                self.set_size(&state, &file, size)
            }
        }
    }

    /// Opens a regular file: at once, or, when a long scan would be needed
    /// first, as `Opened::Later` for the scan threads to finish
    /// (`Opener::finish`), so no FUSE worker waits for a scan.
    pub(super) fn open(&self, ino: u64, flags: i32) -> Result<Opened> {
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
        if self.open_needs_scan(&inode, &file)? {
            return Ok(Opened::Later(inode, pin, file));
        }
        self.new_file_handle(inode, pin, file, flags)
            .map(|(fh, fl)| Opened::Now(fh, fl))
    }

    /// Whether opening `file` would scan it at length: large, corrected,
    /// and its index neither in the handle state nor in the cache. (A
    /// write-only descriptor that cannot show its head is opened at once.)
    fn open_needs_scan(&self, inode: &Inode, file: &std::fs::File) -> Result<bool> {
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        if st.st_size as u64 <= content::SCAN_INLINE {
            return Ok(false);
        }
        let stamp = Stamp::of(&st);
        if matches!(inode.state().known_class(&stamp), Some(Class::Raw))
            || self.cache.get(&stamp).is_some()
        {
            return Ok(false);
        }
        let fresh = {
            let content = inode
                .state()
                .content
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            matches!(&content.view, Some((s, _)) if *s == stamp)
        };
        Ok(!fresh && content::has_magic(file).unwrap_or(false))
    }

    /// What `finish` needs of the filesystem, for the scan threads.
    pub(super) fn opener(&self) -> Opener {
        Opener {
            handles: self.handles.clone(),
            cache: self.cache.clone(),
            noatime: self.noatime,
            strictatime: self.strictatime,
        }
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
        self.opener().finish(inode, pin, file, flags)
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
            let _mask = with_umask(umask)?;
            let _as = act_as(req)?;
            let mode = mode & 0o7777;
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
    ///
    /// A change made in BACKING behind the mount's back is seen here: the
    /// view is served only through the index of the file's current stamp,
    /// and a view read that raced with such a change (the stamp moved
    /// during it) is read again, so it returns bytes of one version.
    pub(super) fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        for _ in 0..4 {
            let (content, stamp, view) = self.current(h)?;
            let Some(index) = view else {
                return content::read_raw(&h.file, offset, size as usize);
            };
            let data = content::read_view(&h.file, &index, offset, size as usize)?;
            let after = sys::fstat(h.file.as_fd()).map_err(io)?;
            drop(content);
            if Stamp::of(&after) == stamp {
                return Ok(data);
            }
        }
        log::warn!(
            "{}: changes in BACKING faster than it can be read; the read fails with EIO",
            self.name_of(&h.inode)
        );
        Err(Errno::EIO)
    }

    /// The file's current state through handle `h` (see `FileState::current`).
    fn current<'a>(
        &self,
        h: &'a FileHandle,
    ) -> Result<(
        std::sync::RwLockReadGuard<'a, content::Content>,
        Stamp,
        Option<Arc<crate::index::OffsetIndex>>,
    )> {
        h.inode.state().current(&self.cache, &h.file, || {
            h.inode
                .open(libc::O_RDONLY)
                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
        })
    }

    /// Refuses a change that would make a raw file begin with the magic
    /// number (SPEC §3: it would read back as something else).
    pub(super) fn guard_magic(h: &FileHandle, offset: u64, data: &[u8]) -> Result<()> {
        if offset >= MAGIC.len() as u64 {
            return Ok(());
        }
        let head = content::read_raw(&h.file, 0, MAGIC.len()).or_else(|e| {
            let r = h.inode.open_quiet(libc::O_RDONLY)?;
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
        release_handle(&self.handles, fh)
    }

    pub(super) fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handles.get(fh)?;
        let fd = match &*h {
            Handle::File(f) => f.file.as_raw_fd(),
            Handle::Dir(d) => d.dir.as_raw_fd(),
        };
        sys::fsync(fd, datasync).map_err(io)
    }

    /// fallocate: see `write::fallocate_file` (every mode on the view of
    /// a corrected file; as in BACKING for raw ones).
    pub(super) fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        self.fallocate_file(h, offset, length, mode)
    }

    pub(super) fn lseek(&self, fh: u64, offset: i64, whence: i32) -> Result<i64> {
        let h = self.handles.file(fh)?;
        let Handle::File(h) = &*h else {
            return Err(Errno::EISDIR);
        };
        let (_content, _, view) = self.current(h)?;
        let Some(index) = view else {
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
        if self.nodiratime {
            sys::set_noatime(dir.as_fd()).map_err(io)?;
        }
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
        for e in sys::read_dir(h.dir.as_fd()).map_err(io)? {
            if is_journal(h.inode.ino, &e.name) {
                continue;
            }
            let kind = match e.d_type {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                libc::DT_BLK => FileType::BlockDevice,
                libc::DT_CHR => FileType::CharDevice,
                libc::DT_FIFO => FileType::NamedPipe,
                libc::DT_SOCK => FileType::Socket,
                libc::DT_REG => FileType::RegularFile,
                // A filesystem that does not say: ask.
                _ => match sys::component(&e.name).and_then(|c| sys::statat(h.dir.as_fd(), &c)) {
                    Ok(st) => attr::kind(st.st_mode),
                    Err(_) => FileType::RegularFile,
                },
            };
            out.push(DirEntry {
                ino: e.ino,
                kind,
                name: e.name,
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
        mut add: impl FnMut(u64, &DirEntry, Option<&PlusAttr>) -> bool,
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
                    self.inodes.forget(a.attr.ino.0, 1);
                }
                break;
            }
            sent += 1;
        }
        for r in prepared {
            if let Some(Ok(a)) = r {
                self.inodes.forget(a.attr.ino.0, 1);
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
    fn plus_batch(&self, dir: &Arc<Inode>, batch: &[DirEntry]) -> Vec<Option<Result<PlusAttr>>> {
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
        // Which entries only a long scan can class (asked once each).
        let long: Vec<bool> = looked
            .iter()
            .map(|r| match r {
                Some(Ok((inode, st))) => self.needs_scan(inode, st).unwrap_or(false),
                _ => false,
            })
            .collect();
        let unknown: Vec<&(Arc<Inode>, libc::stat)> = looked
            .iter()
            .zip(&long)
            .filter_map(|(r, &long)| match r {
                Some(Ok(x)) if !long => Some(x),
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
            .zip(long)
            .map(|(r, long)| r.map(|r| r.and_then(|(inode, st)| self.plus_attr(inode, &st, long))))
            .collect()
    }

    /// The attributes of a looked-up entry for readdirplus (its lookup is
    /// counted and given back if they cannot be had): final ones, or, for a
    /// file only a long scan can class (`needs_scan`), provisional ones
    /// while the scan runs on the scan threads (see `PlusAttr`).
    fn plus_attr(&self, inode: Arc<Inode>, st: &libc::stat, needs_scan: bool) -> Result<PlusAttr> {
        if !needs_scan {
            return Ok(PlusAttr {
                attr: self.entry(inode, st)?,
                provisional: false,
            });
        }
        let attr = attr_with(&inode, st, Class::Raw);
        // Warms the class for the lookup or getattr that follows; an error
        // resurfaces there.
        self.attr_on_scan_threads("readdirplus", inode, *st, drop);
        Ok(PlusAttr {
            attr,
            provisional: true,
        })
    }

    /// The entry for one name in `dir` (counting one lookup), or None for
    /// "." and "..".
    fn plus_entry(&self, dir: &Arc<Inode>, e: &DirEntry) -> Option<Result<PlusAttr>> {
        let b = e.name.as_bytes();
        if b == b"." || b == b".." {
            return None;
        }
        Some(
            sys::component(&e.name)
                .map_err(io)
                .and_then(|n| self.inodes.lookup(dir, &n))
                .and_then(|(inode, st)| {
                    let long = self
                        .needs_scan(&inode, &st)
                        .inspect_err(|_| self.inodes.forget(inode.ino, 1))?;
                    self.plus_attr(inode, &st, long)
                }),
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

    /// Sets an xattr as the caller (the kernel has checked the caller may;
    /// as the caller, BACKING also applies its own side effects, e.g. an ACL
    /// set by an owner outside the file's group clears its setgid bit).
    pub(super) fn setxattr(
        &self,
        req: &Request,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            let _as = act_as(req)?;
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

    /// getxattr. The kernel reads POSIX ACLs through here to check
    /// permissions; on a BACKING without ACL support they are absent
    /// (ENODATA), not an error that would refuse every access.
    pub(super) fn getxattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrReply> {
        let inode = self.inodes.get(ino)?;
        let acl = is_acl_name(name.as_bytes());
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        let fd = inode.fd()?;
        Self::xattr_reply(size, |buf| sys::getxattr(fd.as_fd(), &name, buf)).map_err(|e| {
            if acl && e == Errno::EOPNOTSUPP {
                Errno::ENODATA
            } else {
                e
            }
        })
    }

    /// listxattr: the names BACKING lists, less `trusted.*` for a caller
    /// who would not see them natively (the daemon, as root, always does):
    /// one without CAP_SYS_ADMIN.
    pub(super) fn listxattr(&self, req: &Request, ino: u64, size: u32) -> Result<XattrReply> {
        let inode = self.inodes.get(ino)?;
        let fd = inode.fd()?;
        if sys::has_sys_admin(req.pid(), req.uid()) {
            return Self::xattr_reply(size, |buf| sys::listxattr(fd.as_fd(), buf));
        }
        let mut all = Vec::new();
        loop {
            let n = sys::listxattr(fd.as_fd(), &mut []).map_err(io)?;
            all.resize(n, 0);
            match sys::listxattr(fd.as_fd(), &mut all) {
                Ok(n) => {
                    all.truncate(n);
                    break;
                }
                // Grown since the size was asked: again.
                Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
                Err(e) => return Err(io(e)),
            }
        }
        let shown: Vec<u8> = all
            .split_inclusive(|&b| b == 0)
            .filter(|n| !n.starts_with(b"trusted."))
            .flatten()
            .copied()
            .collect();
        let len = u32::try_from(shown.len()).map_err(|_| Errno::E2BIG)?;
        match size {
            0 => Ok(XattrReply::Size(len)),
            s if s < len => Err(Errno::ERANGE),
            _ => Ok(XattrReply::Data(shown)),
        }
    }

    /// removexattr, as the caller (see `setxattr`).
    pub(super) fn removexattr(&self, req: &Request, ino: u64, name: &OsStr) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            let _as = act_as(req)?;
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

    /// access(2) by mode bits. Never called in practice: with
    /// `default_permissions` (always on) the kernel answers access(2)
    /// itself, ACLs included.
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

/// Closes handle `fh` (release, or an open the kernel must not get).
pub(super) fn release_handle(handles: &super::handles::HandleTable, fh: u64) {
    if let Some(h) = handles.remove(fh) {
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

/// The result of `CutFs::open`.
pub(super) enum Opened {
    /// A file handle and its open flags.
    Now(u64, FopenFlags),
    /// To be finished on the scan threads: `Opener::finish`.
    Later(Arc<Inode>, super::inodes::Pinned, std::fs::File),
}

/// The parts of the filesystem that give an open file its handle, shared
/// with the scan threads.
pub(super) struct Opener {
    handles: Arc<super::handles::HandleTable>,
    cache: Arc<content::IndexCache>,
    noatime: bool,
    strictatime: bool,
}

impl Opener {
    /// Gives the open `file` of `inode` a file handle: learns whether it is
    /// corrected and its index (the long part for a large file), under the
    /// content lock.
    pub(super) fn finish(
        &self,
        inode: Arc<Inode>,
        pin: super::inodes::Pinned,
        file: std::fs::File,
        flags: i32,
    ) -> Result<(u64, FopenFlags)> {
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if self.noatime {
            sys::set_noatime(file.as_fd()).map_err(io)?;
        }
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
                    second = inode.open_quiet(libc::O_RDONLY)?;
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
        let keep = state.opened_at(stamp) && !self.strictatime;
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
