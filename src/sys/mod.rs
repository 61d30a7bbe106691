//! The system calls that need more than one `nix` call: `*at` operations
//! that never follow a symlink, descriptors reopened through
//! `/proc/self/fd/N`, xattrs, file handles, acting as another user,
//! daemonizing — and every call that needs raw `libc` because `nix` has no
//! wrapper (xattrs on a path, file handles, `utimensat` with
//! `AT_EMPTY_PATH`, the per-thread `setgroups`, `fork`, a signal handler, a
//! descriptor received over a socket), each such `unsafe` block with its
//! `// SAFETY:` reason: the crate's only `unsafe` outside the codec. A
//! single `nix` call with a safe signature (an `fstat`, an `openat` with
//! `O_NOFOLLOW`, a `fallocate`) is made where it is needed, with nix's own
//! `Errno` → `io::Error` conversion. Nothing here knows what the callers
//! are for.
//!
//! * [`file`](mod@file): `*at` calls relative to a directory descriptor that never
//!   follow a symlink, `O_PATH` descriptors reopened through
//!   `/proc/self/fd/N`, stat, times, owners, directory listings, locks.
//! * [`xattr`]: extended attributes of the inode behind a descriptor.
//! * [`handle`]: `name_to_handle_at` / `open_by_handle_at`.
//! * [`fanotify`]: a whole filesystem's changes, reported by file handle
//!   and name.
//! * [`ident`]: acting as a request's caller (fsuid, fsgid, groups,
//!   umask, limits on space), checked to have taken effect; capabilities
//!   of a process.
//! * [`caps`]: this thread's effective capabilities (CAP_SYS_RESOURCE).
//! * [`lock`]: open file description locks and `flock(2)` on a
//!   descriptor, and the signal that wakes a thread waiting for one.
//! * [`mount`](mod@mount): a mount's device number read without asking its
//!   filesystem, and a lazy unmount of exactly the mount a descriptor is on.
//! * [`process`]: the open-file limit, daemonizing, stop signals, and the
//!   descriptor fusermount3 sends back.
//! * [`sqlite`]: SQLite opening its files by the names it is given
//!   (`/proc/self/fd/N/NAME`), never resolved again.
//!
//! Errors are `std::io::Error`s carrying the errno, so callers decide what
//! to tell the user (and the FUSE side which errno to answer).

pub mod caps;
pub mod fanotify;
pub mod file;
pub mod handle;
pub mod ident;
pub mod lease;
pub mod lock;
pub mod mount;
pub mod process;
pub mod sqlite;
pub mod xattr;

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

pub use file::*;
pub use handle::{name_to_handle, open_by_handle, open_by_handle_parts, BackingHandle};
pub use ident::{
    has_fsetid, has_sys_admin, is_root, own_rights, ActAs, AsDaemon, Identity, Limits, Umask,
};
pub use process::fd_limit;
pub use xattr::{getxattr, listxattr, removexattr, setxattr};

/// `/proc/self/fd/N` for a descriptor.
pub fn proc_path(fd: BorrowedFd<'_>) -> CString {
    // A decimal number never holds NUL.
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// A `nix` error as the `io::Error` every caller speaks.
fn from_nix(e: nix::Error) -> io::Error {
    io::Error::from(e)
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

/// A single path component as a C string. Refuses what is not one
/// component ("", ".", "..", anything with "/" or NUL): the kernel never
/// sends those for a lookup, so they can only be an attack or a bug.
pub fn component(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(einval());
    }
    CString::new(b).map_err(|_| einval())
}

/// Any C string (a symlink target may hold "/" and "..": it is stored, not
/// followed).
pub fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| einval())
}

/// A name to pass to a `*at` call: `CStr`/`CString` as they are, `OsStr`,
/// `OsString` and `Path` made into a C string (EINVAL if they hold NUL).
pub trait Name {
    /// Calls `f` with the name as a C string.
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T>;
}

impl Name for CStr {
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
        f(self)
    }
}

impl Name for CString {
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
        f(self.as_c_str())
    }
}

impl Name for OsStr {
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
        f(&cstring(self.as_bytes())?)
    }
}

impl Name for OsString {
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
        self.as_os_str().with_cstr(f)
    }
}

impl Name for std::path::Path {
    fn with_cstr<T>(&self, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
        self.as_os_str().with_cstr(f)
    }
}

#[cfg(test)]
mod tests;
