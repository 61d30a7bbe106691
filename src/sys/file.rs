//! Calls that name files. Every call takes a directory descriptor and one
//! component (`*at` calls) or an `O_PATH` descriptor with `AT_EMPTY_PATH`,
//! and never follows a symlink (`AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW` where
//! the caller asks): a name from the kernel is one component (it resolves
//! paths itself and never sends "/" inside a name), so no call here can
//! leave the directory it is given. Calls that have no `*at` form on an
//! `O_PATH` descriptor (open, chmod) go through `/proc/self/fd/N`, which
//! the kernel resolves to the inode the descriptor holds, not by a path
//! walk, and so is rename-safe too.

use std::ffi::{CStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::dir::{Dir, Type};
use nix::fcntl::{self, AtFlags, FallocateFlags, FcntlArg, OFlag, RenameFlags};
use nix::sys::stat::{self, FchmodatFlags, Mode, SFlag};
use nix::unistd::{self, Gid, Uid, UnlinkatFlags, Whence};

use super::{from_nix, proc_path, Name};

const EMPTY: &CStr = c"";

fn oflag(flags: libc::c_int) -> OFlag {
    OFlag::from_bits_retain(flags)
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat<P: ?Sized + Name>(
    dir: impl AsFd,
    name: &P,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    name.with_cstr(|name| {
        fcntl::openat(
            dir,
            name,
            oflag(flags | libc::O_CLOEXEC),
            Mode::from_bits_retain(mode),
        )
        .map_err(from_nix)
    })
}

/// `open(path, flags | O_CLOEXEC)` of an absolute path (a directory to
/// start a walk from, say).
pub fn open<P: ?Sized + Name>(path: &P, flags: libc::c_int) -> io::Result<OwnedFd> {
    path.with_cstr(|path| {
        fcntl::open(path, oflag(flags | libc::O_CLOEXEC), Mode::empty()).map_err(from_nix)
    })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)` as a
/// `File`: never follows a symlink (ELOOP if `name` is one).
pub fn open_at<P: ?Sized + Name>(
    dir: impl AsFd,
    name: &P,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<File> {
    openat(dir, name, flags | libc::O_NOFOLLOW, mode).map(File::from)
}

/// [`open_at`] for reading (and writing, if `write`) without touching the
/// access time where the kernel allows that (O_NOATIME needs ownership or
/// CAP_FOWNER), and without blocking on a FIFO.
pub fn open_quiet_at<P: ?Sized + Name>(dir: impl AsFd, name: &P, write: bool) -> io::Result<File> {
    let base = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_NONBLOCK;
    let dir = dir.as_fd();
    match open_at(dir, name, base | libc::O_NOATIME, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open_at(dir, name, base, 0),
        r => r,
    }
}

/// Opens the directory `path` read-only without following a symlink in
/// its last component (a walk's starting point).
pub fn open_dir(path: &std::path::Path) -> io::Result<File> {
    open(path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW).map(File::from)
}

/// An `O_PATH` descriptor for `name` in `dir`, not following a final symlink.
pub fn open_path(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
}

/// Closes a duplicate of `fd`, so the file's close-time work runs (a
/// network filesystem writes back and reports its errors there, as
/// close(2) would) while `fd` stays open: that close's error.
pub fn close_dup(fd: BorrowedFd<'_>) -> io::Result<()> {
    let dup = fd.try_clone_to_owned()?;
    unistd::close(dup).map_err(from_nix)
}

/// The path the kernel gives for the file behind `fd` (the target of
/// `/proc/self/fd/N`: where it was reached from, " (deleted)" after an
/// unlink), for messages and for policies that look at names.
pub fn fd_path(fd: BorrowedFd<'_>) -> io::Result<std::path::PathBuf> {
    std::fs::read_link(std::ffi::OsStr::from_bytes(proc_path(fd).as_bytes()))
}

/// Opens the inode behind an `O_PATH` descriptor for I/O.
pub fn reopen(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<File> {
    open(proc_path(fd).as_c_str(), flags).map(File::from)
}

/// [`reopen`] for the daemon's own reads (classifying, a write's
/// neighbourhood), which a native filesystem would not count as accesses:
/// with O_NOATIME where permitted.
pub fn reopen_quiet(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<File> {
    match reopen(fd, flags | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => reopen(fd, flags),
        r => r,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; an empty name stats `dir`.
pub fn statat<P: ?Sized + Name>(dir: impl AsFd, name: &P) -> io::Result<libc::stat> {
    name.with_cstr(|name| {
        let flags = if name.is_empty() {
            AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW
        } else {
            AtFlags::AT_SYMLINK_NOFOLLOW
        };
        stat::fstatat(dir, name, flags).map_err(from_nix)
    })
}

/// The attributes of the inode behind any descriptor (`O_PATH` included).
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    statat(fd, EMPTY)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    stat::mkdirat(dir, name, Mode::from_bits_retain(mode)).map_err(from_nix)
}

/// `mknodat`; `mode` holds the file type and the permission bits.
pub fn mknodat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    mode: libc::mode_t,
    rdev: libc::dev_t,
) -> io::Result<()> {
    let kind = SFlag::from_bits_retain(mode & libc::S_IFMT);
    let perm = Mode::from_bits_retain(mode & !libc::S_IFMT);
    stat::mknodat(dir, name, kind, perm, rdev).map_err(from_nix)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    unistd::symlinkat(target, dir, name).map_err(from_nix)
}

/// `unlinkat(dir, name, flags)`: `flags` is 0 or `AT_REMOVEDIR`.
pub fn unlinkat<P: ?Sized + Name>(dir: impl AsFd, name: &P, flags: libc::c_int) -> io::Result<()> {
    let how = if flags & libc::AT_REMOVEDIR != 0 {
        UnlinkatFlags::RemoveDir
    } else {
        UnlinkatFlags::NoRemoveDir
    };
    name.with_cstr(|name| unistd::unlinkat(dir, name, how).map_err(from_nix))
}

pub fn renameat2<P: ?Sized + Name, Q: ?Sized + Name>(
    olddir: impl AsFd,
    old: &P,
    newdir: impl AsFd,
    new: &Q,
    flags: libc::c_uint,
) -> io::Result<()> {
    let flags = RenameFlags::from_bits_retain(flags);
    old.with_cstr(|old| {
        new.with_cstr(|new| fcntl::renameat2(olddir, old, newdir, new, flags).map_err(from_nix))
    })
}

/// A new name in `dir` for the inode behind an `O_PATH` descriptor.
pub fn linkat(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    match unistd::linkat(fd, EMPTY, dir, name, AtFlags::AT_EMPTY_PATH) {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link does not.
        Err(nix::Error::ENOENT | nix::Error::EPERM) => unistd::linkat(
            fcntl::AT_FDCWD,
            proc_path(fd).as_c_str(),
            dir,
            name,
            AtFlags::AT_SYMLINK_FOLLOW,
        )
        .map_err(from_nix),
        r => r.map_err(from_nix),
    }
}

/// The target of the symlink behind an `O_PATH` descriptor.
pub fn readlink(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    fcntl::readlinkat(fd, EMPTY)
        .map(OsString::into_vec)
        .map_err(from_nix)
}

use std::os::unix::ffi::OsStringExt;

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`;
/// `u32::MAX` leaves an id unchanged.
pub fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    let uid = (uid != u32::MAX).then(|| Uid::from_raw(uid));
    let gid = (gid != u32::MAX).then(|| Gid::from_raw(gid));
    unistd::fchownat(
        fd,
        EMPTY,
        uid,
        gid,
        AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(from_nix)
}

/// chmod of the inode behind an `O_PATH` descriptor (not a symlink).
pub fn chmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    stat::fchmodat(
        fcntl::AT_FDCWD,
        proc_path(fd).as_c_str(),
        Mode::from_bits_retain(mode),
        FchmodatFlags::FollowSymlink,
    )
    .map_err(from_nix)
}

/// Appends `data` to `file` at its end as it is when the write lands
/// (`pwritev2` with `RWF_APPEND`: one step against every other appender
/// of the filesystem, as an O_APPEND write(2) is, other daemons and
/// programs in BACKING included), and returns how much was written and
/// where it began. Short only when the filesystem (or the caller's size
/// limit) stopped it after some bytes. The descriptor's own offset moves
/// past what was written: the callers read and write at explicit offsets
/// only, one writer of a file at a time.
pub fn append(file: BorrowedFd<'_>, data: &[u8]) -> io::Result<(usize, u64)> {
    let iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    loop {
        // SAFETY: `iov` describes `data`, which lives, unchanged, for the
        // call; the kernel only reads it. Offset -1 with RWF_APPEND: write
        // at the end and move the descriptor's offset past the bytes.
        let r = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, -1, libc::RWF_APPEND) };
        if r >= 0 {
            let n = r as usize;
            let end = lseek(file, 0, libc::SEEK_CUR)?;
            return Ok((n, end as u64 - n as u64));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// utimensat on the inode itself (symlinks included), times as given
/// (`UTIME_NOW`/`UTIME_OMIT` allowed). `nix` offers no `AT_EMPTY_PATH`
/// here, and the /proc link would follow a symlink: raw `libc`.
pub fn utimens(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: `times` points at two timespecs and EMPTY is a C string, both
    // live for the duration of the call.
    let r = unsafe {
        libc::utimensat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        return Ok(());
    }
    match nix::Error::last() {
        // Kernels without AT_EMPTY_PATH for utimensat: the /proc link.
        nix::Error::EINVAL | nix::Error::ENOENT => stat::utimensat(
            fcntl::AT_FDCWD,
            proc_path(fd).as_c_str(),
            &times[0].into(),
            &times[1].into(),
            stat::UtimensatFlags::FollowSymlink,
        )
        .map_err(from_nix),
        e => Err(from_nix(e)),
    }
}

/// What `statvfs` says of a filesystem (the fields of `struct statvfs`
/// that the programs use, under the same names).
#[derive(Clone, Copy, Debug)]
pub struct StatVfs {
    pub f_bsize: u64,
    pub f_frsize: u64,
    pub f_blocks: u64,
    pub f_bfree: u64,
    pub f_bavail: u64,
    pub f_files: u64,
    pub f_ffree: u64,
    pub f_namemax: u64,
    /// `ST_*` flags.
    pub f_flag: u64,
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<StatVfs> {
    let s = nix::sys::statvfs::fstatvfs(fd).map_err(from_nix)?;
    Ok(StatVfs {
        f_bsize: s.block_size(),
        f_frsize: s.fragment_size(),
        f_blocks: s.blocks(),
        f_bfree: s.blocks_free(),
        f_bavail: s.blocks_available(),
        f_files: s.files(),
        f_ffree: s.files_free(),
        f_namemax: s.name_max(),
        f_flag: s.flags().bits(),
    })
}

pub fn fallocate(fd: impl AsFd, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    fcntl::fallocate(fd, FallocateFlags::from_bits_retain(mode), off, len).map_err(from_nix)
}

/// `lseek(fd, offset, whence)` with `whence` a `SEEK_*` constant
/// (`SEEK_DATA` and `SEEK_HOLE` included).
pub fn lseek(fd: impl AsFd, offset: i64, whence: libc::c_int) -> io::Result<i64> {
    let whence = match whence {
        libc::SEEK_SET => Whence::SeekSet,
        libc::SEEK_CUR => Whence::SeekCur,
        libc::SEEK_END => Whence::SeekEnd,
        libc::SEEK_DATA => Whence::SeekData,
        libc::SEEK_HOLE => Whence::SeekHole,
        _ => return Err(super::einval()),
    };
    unistd::lseek(fd, offset, whence).map_err(from_nix)
}

pub fn fsync(fd: impl AsFd, datasync: bool) -> io::Result<()> {
    if datasync {
        unistd::fdatasync(fd).map_err(from_nix)
    } else {
        unistd::fsync(fd).map_err(from_nix)
    }
}

/// `posix_fadvise(fd, 0, 0, advice)` for the whole file: only a hint, so
/// an error is ignored.
pub fn fadvise(fd: impl AsFd, advice: libc::c_int) {
    use fcntl::PosixFadviseAdvice as A;
    let advice = match advice {
        libc::POSIX_FADV_SEQUENTIAL => A::POSIX_FADV_SEQUENTIAL,
        libc::POSIX_FADV_RANDOM => A::POSIX_FADV_RANDOM,
        libc::POSIX_FADV_WILLNEED => A::POSIX_FADV_WILLNEED,
        libc::POSIX_FADV_DONTNEED => A::POSIX_FADV_DONTNEED,
        libc::POSIX_FADV_NOREUSE => A::POSIX_FADV_NOREUSE,
        _ => A::POSIX_FADV_NORMAL,
    };
    let _ = fcntl::posix_fadvise(fd, 0, 0, advice);
}

/// `syncfs(fd)`: write out everything dirty on `fd`'s filesystem and wait.
pub fn syncfs(fd: impl AsFd) -> io::Result<()> {
    unistd::syncfs(fd).map_err(from_nix)
}

/// `flock(fd, LOCK_EX)`, held until every descriptor of this open file is
/// closed. (`nix::fcntl::Flock` would take the file and unlock on drop,
/// which is not what the callers want; the plain call is kept.)
#[allow(deprecated)]
pub fn lock_exclusive(f: &File) -> io::Result<()> {
    fcntl::flock(f.as_raw_fd(), fcntl::FlockArg::LockExclusive).map_err(from_nix)
}

/// `flock(fd, LOCK_SH)`, held like [`lock_exclusive`]'s.
#[allow(deprecated)]
pub fn lock_shared(f: &File) -> io::Result<()> {
    fcntl::flock(f.as_raw_fd(), fcntl::FlockArg::LockShared).map_err(from_nix)
}

/// `flock(fd, LOCK_EX | LOCK_NB)`: false when another open file holds a
/// lock on it (EWOULDBLOCK); held like [`lock_exclusive`]'s.
#[allow(deprecated)]
pub fn try_lock_exclusive(f: &File) -> io::Result<bool> {
    match fcntl::flock(f.as_raw_fd(), fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(from_nix(e)),
    }
}

/// Sets O_NOATIME on an open descriptor (the daemon is root, or owns the
/// file: permitted), so reads through it leave the access time alone.
pub fn set_noatime(fd: BorrowedFd<'_>) -> io::Result<()> {
    let fl = fcntl::fcntl(fd, FcntlArg::F_GETFL).map_err(from_nix)?;
    fcntl::fcntl(fd, FcntlArg::F_SETFL(oflag(fl | libc::O_NOATIME)))
        .map(drop)
        .map_err(from_nix)
}

fn d_type(t: Option<Type>) -> u8 {
    match t {
        Some(Type::Fifo) => libc::DT_FIFO,
        Some(Type::CharacterDevice) => libc::DT_CHR,
        Some(Type::Directory) => libc::DT_DIR,
        Some(Type::BlockDevice) => libc::DT_BLK,
        Some(Type::File) => libc::DT_REG,
        Some(Type::Symlink) => libc::DT_LNK,
        Some(Type::Socket) => libc::DT_SOCK,
        None => libc::DT_UNKNOWN,
    }
}

/// Lists the directory open as `dir` through a fresh descriptor of it that
/// carries `dir`'s O_NOATIME, so `-o noatime`/`nodiratime` hold for
/// listings too ("." and ".." are left out): `each(ino, d_type, name)` for
/// every entry, as it is read (nothing is copied for the whole directory).
pub fn read_dir(
    dir: BorrowedFd<'_>,
    mut each: impl FnMut(u64, u8, &std::ffi::OsStr) -> io::Result<()>,
) -> io::Result<()> {
    let fl = fcntl::fcntl(dir, FcntlArg::F_GETFL).map_err(from_nix)?;
    let d = reopen(
        dir,
        libc::O_RDONLY | libc::O_DIRECTORY | (fl & libc::O_NOATIME),
    )?;
    let mut d = Dir::from_fd(d.into()).map_err(from_nix)?;
    for e in d.iter() {
        let e = e.map_err(from_nix)?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            each(
                e.ino(),
                d_type(e.file_type()),
                std::ffi::OsStr::from_bytes(name),
            )?;
        }
    }
    Ok(())
}
