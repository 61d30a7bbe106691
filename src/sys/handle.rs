//! File handles (`name_to_handle_at`, `open_by_handle_at`): names of
//! inodes, not paths, so an inode is found again after a rename and a
//! handle never resolves a symlink. `nix` has no wrapper for them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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
    // its handle_bytes says; `mnt` is writable; `name` is a C string; all
    // live for the duration of the call.
    let r = unsafe {
        libc::name_to_handle_at(
            dir.as_raw_fd(),
            name.as_ptr(),
            (&mut buf as *mut HandleBuf).cast(),
            &mut mnt,
            flags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (buf.handle_bytes as usize).min(buf.f_handle.len());
    Ok((
        BackingHandle {
            ty: buf.handle_type,
            bytes: buf.f_handle[..n].into(),
        },
        mnt,
    ))
}

impl BackingHandle {
    /// The handle's type (`handle_type`), as the filesystem chose it.
    pub fn ty(&self) -> libc::c_int {
        self.ty
    }

    /// The handle's bytes (`f_handle`).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
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
    open_by_handle_parts(mount, h.ty, &h.bytes, flags)
}

/// [`open_by_handle`] for a handle kept as its type and bytes (EINVAL if
/// they cannot be a handle).
pub fn open_by_handle_parts(
    mount: BorrowedFd<'_>,
    ty: libc::c_int,
    bytes: &[u8],
    flags: libc::c_int,
) -> io::Result<OwnedFd> {
    if bytes.len() > libc::MAX_HANDLE_SZ as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = HandleBuf {
        handle_bytes: bytes.len() as libc::c_uint,
        handle_type: ty,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    buf.f_handle[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `buf` is a file_handle whose handle_bytes fit its array; a
    // descriptor it returns is new and owned by no one else.
    unsafe {
        let fd = libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&mut buf as *mut HandleBuf).cast(),
            flags | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
