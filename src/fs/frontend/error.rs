//! The one place where an error becomes an errno.
//!
//! Every helper in `fs` returns [`Result`]; every FUSE method ends in one
//! `match` that sends `Ok` as a reply and `Err` through [`Errno`]. Backing
//! filesystem errors keep their errno unchanged (docs/behaviour.md, "The
//! mount": EACCES, ENOSPC, EIO, … reach the caller as they are); errors without an OS code (bad
//! bytes on disk, a bug) become EIO and are logged here, never a panic.
//! The view's domain errors (`crate::view::Error`: content that cannot be
//! stored, a raw file that would begin with the magic number, a read-only
//! view) get their errno here too ([`view_errno`]), so `?` on a
//! `crate::io` result gives the right one.

use std::cell::{Cell, RefCell};
use std::io;

pub use fuser::Errno;

use crate::view::Error as ViewError;

/// What every `fs` helper returns.
pub type Result<T> = std::result::Result<T, Errno>;

/// The errno for an I/O error: the OS code when there is one, else EIO
/// (logged, since it means bad data or a bug rather than a backing error).
pub fn errno(e: &io::Error) -> Errno {
    match e.raw_os_error() {
        Some(code) if code > 0 => Errno::from_i32(code),
        _ => match e.kind() {
            io::ErrorKind::NotFound => Errno::ENOENT,
            io::ErrorKind::PermissionDenied => Errno::EACCES,
            io::ErrorKind::AlreadyExists => Errno::EEXIST,
            io::ErrorKind::InvalidInput => Errno::EINVAL,
            io::ErrorKind::OutOfMemory => Errno::ENOMEM,
            io::ErrorKind::Unsupported => Errno::EOPNOTSUPP,
            _ => {
                crate::ratelog::error("eio-without-errno", "", || {
                    format!("I/O error without errno, reported as EIO: {e}")
                });
                Errno::EIO
            }
        },
    }
}

/// An errno kept from an earlier failure (`errseq`), reported as it was.
pub fn kept(code: i32) -> Errno {
    Errno::from_i32(code)
}

/// `?`-friendly conversion: `io_result.map_err(io)?`.
pub fn io(e: io::Error) -> Errno {
    errno(&e)
}

/// The errno of each reason a change of a view fails (docs/behaviour.md,
/// "The mount").
pub fn view_errno(e: ViewError) -> Errno {
    match e {
        // W cannot store it / it would read back as something else.
        ViewError::Unstorable { .. } | ViewError::MagicOnRaw => Errno::EILSEQ,
        ViewError::ReadOnly => Errno::EROFS,
        ViewError::TooLarge => Errno::EFBIG,
        ViewError::Unsupported => Errno::EOPNOTSUPP,
        ViewError::Changed => {
            crate::ratelog::warn("changed-underneath", "", || {
                format!("{e}; the request fails with EIO (the next one sees the new content)")
            });
            Errno::EIO
        }
    }
}

/// Why the mount refuses a request itself — not the backing filesystem's
/// reason (its errno passes through) nor the view's ([`ViewError`]). The
/// operations (`ops`) name the reason; this is where it becomes an errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A directory where a regular file is needed (a file handle that is
    /// a directory's, open or truncate of a directory).
    IsDir,
    /// A file handle where a directory handle is needed.
    NotDir,
    /// Not a regular file or directory (devices, fifos and sockets are the
    /// kernel's to open).
    NotRegular,
    /// A name the mount keeps for itself (the journal): it cannot be made.
    Reserved,
    /// A name the mount keeps for itself, looked up or removed: it is not
    /// there, as far as anyone through the mount can tell.
    Hidden,
    /// The file changed in BACKING faster than it could be read.
    KeepsChanging,
    /// A mode change of a symbolic link (Linux has no lchmod).
    SymlinkMode,
    /// access(2) denies the asked bits.
    Denied,
    /// lseek: a negative offset or an unknown `whence`.
    BadSeek,
    /// lseek SEEK_DATA/SEEK_HOLE at or past the end.
    PastEnd,
    /// An xattr reply larger than the protocol can carry.
    TooBig,
    /// An xattr reply larger than the caller's buffer.
    BufferTooSmall,
    /// An ACL xattr on a BACKING without ACL support: absent, not an error.
    NoAcl,
    /// `security.selinux` on a file that has none, asked of the daemon
    /// (so no security module answered it): not supported, which tools
    /// such as `ls -l` remember for the whole mount (`ops/xattr.rs`).
    NoLabel,
    /// The request could not take the caller's identity or umask (logged
    /// where it happened): refused rather than done with the daemon's.
    NoIdentity,
    /// A change of a virtual attribute (`cutf8fs.*`): it is read-only.
    Virtual,
    /// A virtual attribute this inode does not have.
    NoVirtual,
    /// The caller's user holds its share of the daemon's descriptors
    /// (`share`): as a process at its own open-file limit.
    OverShare,
    /// The daemon's descriptors for open files are all taken.
    NoDescriptors,
    /// A lock the caller's share of the daemon's lock descriptors or
    /// waiting threads has no room for (`fs::locks`): as a full lock table.
    NoLockRoom,
    /// A wait for a lock cut short by a signal to the waiting caller.
    Interrupted,
}

impl From<Refused> for Errno {
    fn from(r: Refused) -> Errno {
        match r {
            Refused::IsDir => Errno::EISDIR,
            Refused::NotDir => Errno::ENOTDIR,
            Refused::NotRegular | Refused::BadSeek => Errno::EINVAL,
            Refused::Reserved | Refused::Virtual => Errno::EPERM,
            Refused::Hidden => Errno::ENOENT,
            Refused::KeepsChanging | Refused::NoIdentity => Errno::EIO,
            Refused::SymlinkMode => Errno::EOPNOTSUPP,
            Refused::Denied => Errno::EACCES,
            Refused::PastEnd => Errno::ENXIO,
            Refused::TooBig => Errno::E2BIG,
            Refused::BufferTooSmall => Errno::ERANGE,
            Refused::NoAcl | Refused::NoVirtual => Errno::ENODATA,
            Refused::NoLabel => Errno::EOPNOTSUPP,
            Refused::OverShare => Errno::EMFILE,
            Refused::NoDescriptors => Errno::ENFILE,
            Refused::NoLockRoom => Errno::ENOLCK,
            Refused::Interrupted => Errno::EINTR,
        }
    }
}

impl From<ViewError> for Errno {
    fn from(e: ViewError) -> Errno {
        view_errno(e)
    }
}

impl From<crate::io::Error> for Errno {
    fn from(e: crate::io::Error) -> Errno {
        match e {
            crate::io::Error::Os(e) => errno(&e),
            crate::io::Error::View(e) => view_errno(e),
        }
    }
}

thread_local! {
    /// Whether this thread runs a request under [`guard`].
    static IN_REQUEST: Cell<bool> = const { Cell::new(false) };
    /// The message of a panic caught by [`guard`], with its location.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The last line of defence: runs one request's `work`; a panic in it (a
/// bug) answers the request EIO and logs one line, `BUG: <op> <path>:
/// <panic message>`, and the session goes on. `name` gives the path (it is
/// only called then).
///
/// Every request but a write starts with the daemon's own ids and rights
/// (`sys::own_rights`): a thread keeps the last writer's limits on space
/// only from one write to the next (`sys::Limits::kept`), never into
/// other work; EIO if it cannot return.
pub fn guard<T>(
    op: &str,
    name: impl FnOnce() -> String,
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if op != "write" {
        if let Err(e) = crate::sys::own_rights() {
            crate::ratelog::error("no-identity", "own", || {
                format!("cannot return to the daemon's own identity: {e}; {op} refused with EIO")
            });
            return Err(Errno::EIO);
        }
    }
    let outer = IN_REQUEST.with(|c| c.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
    IN_REQUEST.with(|c| c.set(outer));
    match r {
        Ok(r) => r,
        Err(payload) => {
            let msg = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| {
                    payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "panic".into())
                });
            // A request that panics can be sent again and again.
            let name = name();
            crate::ratelog::error("bug", op, || {
                format!("BUG: {op} {name}: {msg} (the request failed with EIO; the mount goes on)")
            });
            Err(Errno::EIO)
        }
    }
}

/// For the panic hook: true when [`guard`] will report this panic (its
/// message is kept for that), false when the hook must log it itself.
pub fn stash_panic(info: &std::panic::PanicHookInfo<'_>) -> bool {
    if !IN_REQUEST.with(Cell::get) {
        return false;
    }
    let msg = info.to_string().replace('\n', " ");
    LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_request_is_eio_and_the_thread_goes_on() {
        let r: Result<()> = guard("read", || "a/b.txt".into(), || panic!("boom"));
        assert_eq!(r.unwrap_err().code(), libc::EIO);
        let r = guard("read", || unreachable!(), || Ok(7));
        assert_eq!(r.unwrap(), 7);
        assert!(!IN_REQUEST.with(Cell::get));
    }

    #[test]
    fn os_codes_pass_through() {
        for code in [libc::EACCES, libc::ENOSPC, libc::EIO, libc::ENOTEMPTY] {
            assert_eq!(errno(&io::Error::from_raw_os_error(code)).code(), code);
        }
    }

    #[test]
    fn view_errors_have_their_errno() {
        let unstorable = ViewError::Unstorable {
            problem: cutf8::Problem::C1Control(0x85),
            offset: 3,
        };
        assert_eq!(Errno::from(unstorable).code(), libc::EILSEQ);
        assert_eq!(Errno::from(ViewError::MagicOnRaw).code(), libc::EILSEQ);
        assert_eq!(Errno::from(ViewError::ReadOnly).code(), libc::EROFS);
        let os = crate::io::Error::Os(io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(Errno::from(os).code(), libc::ENOSPC);
    }

    #[test]
    fn no_os_code_is_eio_or_kind() {
        let e = io::Error::new(io::ErrorKind::InvalidData, "bad bytes");
        assert_eq!(errno(&e).code(), libc::EIO);
        let e = io::Error::new(io::ErrorKind::NotFound, "x");
        assert_eq!(errno(&e).code(), libc::ENOENT);
    }
}
