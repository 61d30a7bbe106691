//! What a write, truncate or fallocate by a caller without CAP_FSETID
//! takes from a regular file natively — the set-user-ID and set-group-ID
//! bits and file capabilities — found and removed by the mount itself,
//! because with `FUSE_HANDLE_KILLPRIV_V2` the kernel leaves it to the
//! daemon, whose own calls as root would keep them. Called by the
//! operations that change content (`ops::meta`'s `kill_privs`).

use std::ffi::CStr;
use std::io;
use std::os::fd::BorrowedFd;

use crate::sys;

/// The `security.capability` attribute, which a write or truncate removes.
const CAPS: &CStr = c"security.capability";

/// What a write or truncate by a caller without CAP_FSETID takes from a
/// regular file natively (the VFS's `file_remove_privs` and
/// `setattr_should_drop_sgid`): the set-user-ID bit, the set-group-ID bit
/// when group execute is set too or the caller is not in the file's group,
/// and file capabilities.
/// With `FUSE_HANDLE_KILLPRIV_V2` the kernel leaves this to the daemon,
/// whose own writes (as root) would keep them. See [`privs`] and [`kill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privs {
    /// The mode without the bits to kill, if it differs from the file's.
    mode: Option<libc::mode_t>,
    /// `security.capability` is set.
    caps: bool,
}

/// What [`kill`] would remove from the file behind `fd` when a caller
/// without CAP_FSETID writes or truncates it (`in_group`: whether that
/// caller is in a group, asked only for a set-group-ID file without group
/// execute): None when nothing (the common case, found with two syscalls
/// and no change).
pub fn privs(fd: BorrowedFd<'_>, in_group: impl FnOnce(u32) -> bool) -> io::Result<Option<Privs>> {
    let st = sys::fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(None);
    }
    let old = st.st_mode & 0o7777;
    let mut mode = old & !libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group(st.st_gid)) {
        mode &= !libc::S_ISGID;
    }
    let caps = match sys::getxattr(fd, CAPS, &mut []) {
        Ok(_) => true,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => false,
        Err(e) => return Err(e),
    };
    let mode = (mode != old).then_some(mode);
    Ok((mode.is_some() || caps).then_some(Privs { mode, caps }))
}

/// Removes what [`privs`] found (capabilities first, as the VFS does).
pub fn kill(fd: BorrowedFd<'_>, privs: Privs) -> io::Result<()> {
    if privs.caps {
        match sys::removexattr(fd, CAPS) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => return Err(e),
            _ => {}
        }
    }
    match privs.mode {
        Some(mode) => sys::chmod(fd, mode),
        None => Ok(()),
    }
}
