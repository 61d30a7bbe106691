//! Thin, safe wrappers over the Linux system calls the mirror makes.
//!
//! Every call that names a file takes a directory descriptor and one
//! component (`*at` calls) or an `O_PATH` descriptor with `AT_EMPTY_PATH`,
//! and never follows a symlink (`AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW`): a name
//! from the kernel is one component (the kernel resolves paths itself and
//! never sends "/" inside a name), so no call here can leave BACKING. Calls
//! that have no `*at` form on an `O_PATH` descriptor (open, chmod, truncate,
//! xattrs) go through `/proc/self/fd/N`, which the kernel resolves to the
//! inode the descriptor holds, not by a path walk, and so is rename-safe too.
//!
//! This module knows nothing of FUSE; `inodes`, `handles` and `mod` call it.
//! Each `unsafe` block is a libc call on pointers borrowed for its duration.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_ssize(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// A single path component from the kernel as a C string. Refuses what is
/// not one component ("", ".", "..", anything with "/" or NUL): the kernel
/// never sends those for a lookup, so they can only be an attack or a bug.
pub fn component(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Any C string (a symlink target may hold "/" and "..": it is stored, not
/// followed).
pub fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

const EMPTY: &CStr = c"";

/// `/proc/self/fd/N` for a descriptor.
pub fn proc_path(fd: BorrowedFd<'_>) -> CString {
    // A decimal number never holds NUL.
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string for the duration of the call.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just returned by openat and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `O_PATH` descriptor for `name` in `dir`, not following a final symlink.
pub fn open_path(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
}

/// Opens the inode behind an `O_PATH` descriptor for I/O.
pub fn reopen(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<File> {
    let path = proc_path(fd);
    // SAFETY: `path` is a valid C string for the duration of the call.
    let raw = cvt(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })?;
    // SAFETY: `raw` was just returned by open and is owned by no one else.
    Ok(unsafe { File::from_raw_fd(raw) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; an empty name stats `dir`.
pub fn statat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    // SAFETY: `st` is a writable stat buffer; `name` a valid C string.
    cvt(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The attributes of the inode behind any descriptor (`O_PATH` included).
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    statat(fd, EMPTY)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: valid C string for the duration of the call.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    mode: libc::mode_t,
    rdev: libc::dev_t,
) -> io::Result<()> {
    // SAFETY: valid C string for the duration of the call.
    cvt(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, rdev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings for the duration of the call.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: valid C string for the duration of the call.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

pub fn renameat2(
    olddir: BorrowedFd<'_>,
    old: &CStr,
    newdir: BorrowedFd<'_>,
    new: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    // SAFETY: valid C strings for the duration of the call.
    cvt(unsafe {
        libc::renameat2(
            olddir.as_raw_fd(),
            old.as_ptr(),
            newdir.as_raw_fd(),
            new.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// A new name in `dir` for the inode behind an `O_PATH` descriptor.
pub fn linkat(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings for the duration of the call.
    let r = cvt(unsafe {
        libc::linkat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    });
    match r {
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link does not.
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::EPERM) =>
        {
            let path = proc_path(fd);
            // SAFETY: valid C strings for the duration of the call.
            cvt(unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            })
            .map(drop)
        }
        r => r.map(drop),
    }
}

/// The target of the symlink behind an `O_PATH` descriptor.
pub fn readlink(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for its length.
    let n = cvt_ssize(unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })?;
    buf.truncate(n);
    Ok(buf)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`;
/// `u32::MAX` leaves an id unchanged.
pub fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid C string for the duration of the call.
    cvt(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// chmod of the inode behind an `O_PATH` descriptor (not a symlink).
pub fn chmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C string for the duration of the call.
    cvt(unsafe { libc::chmod(path.as_ptr(), mode) }).map(drop)
}

/// utimensat on the inode itself (symlinks included), times as given
/// (`UTIME_NOW`/`UTIME_OMIT` allowed).
pub fn utimens(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> io::Result<()> {
    // SAFETY: `times` points at two timespecs; valid C string.
    let r = cvt(unsafe {
        libc::utimensat(
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            times.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    });
    match r {
        // Kernels without AT_EMPTY_PATH for utimensat: the /proc link.
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOENT) =>
        {
            let path = proc_path(fd);
            // SAFETY: as above.
            cvt(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })
                .map(drop)
        }
        r => r.map(drop),
    }
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<libc::statvfs> {
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `st` is a writable statvfs buffer.
    cvt(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstatvfs succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

pub fn fallocate(fd: RawFd, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let off = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on an fd we own.
    cvt(unsafe { libc::fallocate(fd, mode, off, len) }).map(drop)
}

pub fn lseek(fd: RawFd, offset: i64, whence: libc::c_int) -> io::Result<i64> {
    // SAFETY: plain syscall on an fd we own.
    let r = unsafe { libc::lseek(fd, offset, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn fsync(fd: RawFd, datasync: bool) -> io::Result<()> {
    // SAFETY: plain syscall on an fd we own.
    cvt(unsafe {
        if datasync {
            libc::fdatasync(fd)
        } else {
            libc::fsync(fd)
        }
    })
    .map(drop)
}

/// getxattr through the /proc link; `buf` empty asks for the size.
pub fn getxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: `buf` is writable for its length; valid C strings.
    cvt_ssize(unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

pub fn listxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: `buf` is writable for its length; valid C string.
    cvt_ssize(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub fn setxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: `value` readable for its length; valid C strings.
    cvt(unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

pub fn removexattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: valid C strings for the duration of the call.
    cvt(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) }).map(drop)
}

/// The calling thread's filesystem identity, for creating files as the
/// caller (owner and group of new files, SPEC §3: a root daemon never lends
/// its rights). Linux keeps fsuid, fsgid and the group list per thread when
/// set by the raw system calls (glibc's wrappers would change every thread).
pub struct Identity {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

impl Identity {
    /// The identity of process `pid` (its supplementary groups from
    /// /proc/PID/status; none if the process is gone).
    pub fn of(uid: u32, gid: u32, pid: u32) -> Identity {
        let groups = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Groups:").map(str::to_owned))
            })
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Identity { uid, gid, groups }
    }

    pub fn has_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// While alive, this thread acts as an [`Identity`]; dropping it returns to
/// the daemon's own. Does nothing unless the daemon runs as root.
pub struct ActAs {
    saved_groups: Option<Vec<libc::gid_t>>,
}

fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is readable for its length.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl ActAs {
    pub fn new(id: &Identity) -> io::Result<ActAs> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 || id.uid == 0 {
            return Ok(ActAs { saved_groups: None });
        }
        let mut saved = vec![0 as libc::gid_t; 256];
        // SAFETY: `saved` is writable for 256 entries.
        let n = unsafe { libc::getgroups(saved.len() as libc::c_int, saved.as_mut_ptr()) };
        saved.truncate(usize::try_from(n).unwrap_or(0));
        set_thread_groups(&id.groups)?;
        let guard = ActAs {
            saved_groups: Some(saved),
        };
        // SAFETY: per-thread identity switch; restored in Drop.
        unsafe {
            libc::syscall(libc::SYS_setfsgid, id.gid);
            libc::syscall(libc::SYS_setfsuid, id.uid);
        }
        Ok(guard)
    }
}

impl Drop for ActAs {
    fn drop(&mut self) {
        if let Some(groups) = self.saved_groups.take() {
            // SAFETY: per-thread identity switch back to root's.
            unsafe {
                libc::syscall(libc::SYS_setfsuid, 0);
                libc::syscall(libc::SYS_setfsgid, 0);
            }
            if let Err(e) = set_thread_groups(&groups) {
                log::error!("cannot restore the daemon's groups: {e}");
            }
        }
    }
}

/// Sets O_NOATIME on an open descriptor (the daemon is root, or owns the
/// file: permitted), so reads through it leave the access time alone.
pub fn set_noatime(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl with F_GETFL/F_SETFL only reads and sets status flags
    // of a descriptor borrowed for the call.
    let fl = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NOATIME) }).map(drop)
}

/// One entry of [`read_dir`]: inode number, `d_type` (DT_*), name.
pub struct RawDirEntry {
    pub ino: u64,
    pub d_type: u8,
    pub name: std::ffi::OsString,
}

/// Lists the directory open as `dir` through a fresh descriptor of it that
/// carries `dir`'s O_NOATIME, so `-o noatime`/`nodiratime` hold for
/// listings too ("." and ".." are left out).
pub fn read_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<RawDirEntry>> {
    // SAFETY: F_GETFL only reads the status flags of a borrowed descriptor.
    let fl = cvt(unsafe { libc::fcntl(dir.as_raw_fd(), libc::F_GETFL) })?;
    let d = reopen(
        dir,
        libc::O_RDONLY | libc::O_DIRECTORY | (fl & libc::O_NOATIME),
    )?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`,
        // which is writable for the call; the descriptor is owned by `d`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                d.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(out);
        }
        let n = n as usize;
        let mut at = 0;
        // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type,
        // NUL-terminated name; records are laid end to end.
        while at + 19 <= n {
            let ino = u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap_or_default());
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let d_type = buf[at + 18];
            if reclen == 0 || at + reclen > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                out.push(RawDirEntry {
                    ino,
                    d_type,
                    name: OsStr::from_bytes(name).to_owned(),
                });
            }
            at += reclen;
        }
    }
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
