//! Extended attributes of the inode behind a descriptor. `O_PATH`
//! descriptors have no `f*xattr` calls, so every call goes through
//! `/proc/self/fd/N` (resolved to the inode the descriptor holds, not by a
//! path walk), which works for any descriptor. `nix` has no xattr calls:
//! these four are raw `libc` on buffers borrowed for the call.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::BorrowedFd;

use super::proc_path;

fn size(r: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// getxattr through the /proc link; `buf` empty asks for the size.
pub fn getxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: `buf` is writable for its length; both names are C strings
    // that outlive the call.
    size(unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// listxattr through the /proc link; `buf` empty asks for the size.
pub fn listxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let path = proc_path(fd);
    // SAFETY: `buf` is writable for its length; `path` is a C string.
    size(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })
}

pub fn setxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: `value` is readable for its length; both names are C strings.
    let r = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    size(r as libc::ssize_t).map(drop)
}

pub fn removexattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let path = proc_path(fd);
    // SAFETY: both names are C strings that outlive the call.
    let r = unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) };
    size(r as libc::ssize_t).map(drop)
}

/// Calls `get` with a buffer that grows until the value fits (ERANGE).
fn grow(mut get: impl FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        match get(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
                let want = get(&mut []).unwrap_or(0).max(buf.len() * 4);
                buf.resize(want, 0);
            }
            Err(e) => return Err(e),
        }
    }
}

/// All extended attributes of `fd` as (name, value) pairs; none where the
/// filesystem has no xattrs. One removed since it was listed is left out.
pub fn all(fd: BorrowedFd<'_>) -> io::Result<Vec<(CString, Vec<u8>)>> {
    let names = match grow(|b| listxattr(fd, b)) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        r => r?,
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = super::cstring(name)?;
        match grow(|b| getxattr(fd, &name, b)) {
            Ok(value) => out.push((name, value)),
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Sets each (name, value) pair on `fd`; an error names the attribute.
pub fn set_all(fd: BorrowedFd<'_>, attrs: &[(CString, Vec<u8>)]) -> io::Result<()> {
    for (name, value) in attrs {
        setxattr(fd, name, value, 0).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot keep xattr {}: {e}", name.to_string_lossy()),
            )
        })?;
    }
    Ok(())
}
