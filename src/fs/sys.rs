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
//! Identity: [`ActAs`] makes the calling thread act as a request's caller
//! (fsuid, fsgid, groups: per-thread raw system calls, checked to have
//! taken) and [`Umask`] gives it the caller's umask (the thread unshares its
//! fs attributes once), so that BACKING creates files as natively.
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

/// A field of `/proc/PID/status` (None if the process is gone).
fn proc_status_field(pid: u32, field: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_owned()))
}

impl Identity {
    /// The identity of process `pid` (its supplementary groups from
    /// /proc/PID/status; none if the process is gone).
    pub fn of(uid: u32, gid: u32, pid: u32) -> Identity {
        let groups = proc_status_field(pid, "Groups:")
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

/// Whether process `pid` (with fsuid `uid`) has CAP_SYS_ADMIN in its
/// effective set in the daemon's user namespace, which is what lets a
/// process see `trusted.*` names natively. A process in another user
/// namespace is capable only there: no. A process already gone (or a pid
/// from another pid namespace, sent as 0): uid 0 decides.
pub fn has_sys_admin(pid: u32, uid: u32) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/user")).ok();
    if pid == 0 {
        return uid == 0;
    }
    let Some(eff) = proc_status_field(pid, "CapEff:") else {
        return uid == 0;
    };
    match (ns(&pid.to_string()), ns("self")) {
        (Some(theirs), Some(ours)) if theirs == ours => {}
        (None, _) => return uid == 0, // gone meanwhile
        _ => return false,
    }
    u64::from_str_radix(&eff, 16).is_ok_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// While alive, this thread acts as an [`Identity`] (fsuid, fsgid and
/// supplementary groups, root callers included: a root caller with a
/// non-root gid creates with that gid); dropping it returns to the
/// daemon's own. Does nothing unless the daemon runs as root (it cannot
/// switch otherwise, and then everything is its own anyway).
pub struct ActAs {
    saved: Option<Saved>,
}

struct Saved {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is readable for its length; the raw system call
    // changes this thread only.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets this thread's fsuid (`uid`) or fsgid (`gid`) and checks that it
/// took: setfsuid/setfsgid report no error, only the previous value, so
/// the second call (same value) must report the value just set. Returns
/// the value before.
fn set_fs_id(nr: libc::c_long, id: u32, what: &str) -> io::Result<u32> {
    // SAFETY: setfsuid/setfsgid take one integer and change this thread
    // only; they cannot fail other than by not taking, checked below.
    let before = unsafe { libc::syscall(nr, id) } as u32;
    // SAFETY: as above.
    let now = unsafe { libc::syscall(nr, id) } as u32;
    if now != id {
        return Err(io::Error::other(format!(
            "{what}({id}) did not take effect (still {now})"
        )));
    }
    Ok(before)
}

impl ActAs {
    /// Switches this thread to `id`. An error (the switch did not take)
    /// leaves the thread as it was.
    pub fn new(id: &Identity) -> io::Result<ActAs> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(ActAs { saved: None });
        }
        // SAFETY: a count of 0 only asks how many groups there are.
        let n = cvt(unsafe { libc::getgroups(0, std::ptr::null_mut()) })?;
        let mut groups = vec![0 as libc::gid_t; n as usize];
        // SAFETY: `groups` is writable for `n` entries.
        let n = cvt(unsafe { libc::getgroups(n, groups.as_mut_ptr()) })?;
        groups.truncate(n as usize);
        // SAFETY: getfsuid/getfsgid do not exist; setfs*(-1) changes
        // nothing (an invalid id) and returns the current value.
        let (uid, gid) = unsafe {
            (
                libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32,
                libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32,
            )
        };
        let guard = ActAs {
            saved: Some(Saved { uid, gid, groups }),
        };
        // Groups and gid first: once fsuid is not 0 the thread has lost
        // the capabilities it needs to change them.
        set_thread_groups(&id.groups)?;
        set_fs_id(libc::SYS_setfsgid, id.gid, "setfsgid")?;
        set_fs_id(libc::SYS_setfsuid, id.uid, "setfsuid")?;
        Ok(guard)
    }
}

impl Drop for ActAs {
    fn drop(&mut self) {
        if let Some(s) = self.saved.take() {
            let back = set_fs_id(libc::SYS_setfsuid, s.uid, "setfsuid")
                .and_then(|_| set_fs_id(libc::SYS_setfsgid, s.gid, "setfsgid"))
                .and_then(|_| set_thread_groups(&s.groups));
            if let Err(e) = back {
                log::error!("cannot return to the daemon's own identity: {e}");
            }
        }
    }
}

thread_local! {
    /// Whether this thread has its own umask (and cwd/root): `Umask`
    /// unshares them from the other threads the first time.
    static OWN_FS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, this thread's umask is the caller's, so that BACKING's own
/// filesystem applies it exactly as natively: only when the new file's
/// directory has no default ACL (with one, the ACL decides and the umask is
/// ignored). The kernel leaves the umask to us because the daemon asks for
/// POSIX ACLs (and FUSE_DONT_MASK); virtiofsd does the same.
pub struct Umask {
    old: libc::mode_t,
}

impl Umask {
    pub fn set(mask: u32) -> io::Result<Umask> {
        if !OWN_FS.with(|o| o.get()) {
            // SAFETY: unshare(CLONE_FS) gives this thread its own copy of
            // umask, cwd and root; no memory is involved.
            cvt(unsafe { libc::unshare(libc::CLONE_FS) })?;
            OWN_FS.with(|o| o.set(true));
        }
        // SAFETY: umask cannot fail; after the unshare it is this thread's.
        let old = unsafe { libc::umask((mask & 0o777) as libc::mode_t) };
        Ok(Umask { old })
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { libc::umask(self.old) };
    }
}

/// A file handle from `name_to_handle_at`: names an inode of one
/// filesystem (number and generation), not a path.
#[derive(Clone, PartialEq, Eq)]
pub struct BackingHandle {
    ty: libc::c_int,
    bytes: Box<[u8]>,
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct HandleBuf {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; libc::MAX_HANDLE_SZ as usize],
}

/// The handle of `name` in `dir` (of `dir` itself if `name` is empty), not
/// following a final symlink, and the id of the mount it lies on.
pub fn name_to_handle(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<(BackingHandle, i32)> {
    let mut buf = HandleBuf {
        handle_bytes: libc::MAX_HANDLE_SZ as libc::c_uint,
        handle_type: 0,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    let mut mnt: libc::c_int = 0;
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        0
    };
    // SAFETY: `buf` is a file_handle with MAX_HANDLE_SZ bytes of room, as
    // its handle_bytes says; `mnt` is writable; `name` a valid C string.
    cvt(unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            name.as_ptr(),
            (&mut buf as *mut HandleBuf).cast(),
            &mut mnt,
            flags,
        )
    })?;
    let n = (buf.handle_bytes as usize).min(buf.f_handle.len());
    Ok((
        BackingHandle {
            ty: buf.handle_type,
            bytes: buf.f_handle[..n].into(),
        },
        mnt,
    ))
}

/// Opens the inode a handle names, on the filesystem of `mount` (any
/// descriptor on it). Needs CAP_DAC_READ_SEARCH (EPERM without it); ESTALE
/// if the inode is gone. A handle never resolves a path, so no symlink is
/// followed (with `O_PATH` a symlink is opened itself).
pub fn open_by_handle(
    mount: BorrowedFd<'_>,
    h: &BackingHandle,
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    let mut buf = HandleBuf {
        handle_bytes: h.bytes.len() as libc::c_uint,
        handle_type: h.ty,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    buf.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `buf` is a file_handle whose handle_bytes fit its array.
    let fd = cvt(unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&mut buf as *mut HandleBuf).cast(),
            flags | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by open_by_handle_at and is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The soft limit on open descriptors.
pub fn fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
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
