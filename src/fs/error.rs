//! The one place where an error becomes an errno.
//!
//! Every helper in `fs` returns [`Result`]; every FUSE method ends in one
//! `match` that sends `Ok` as a reply and `Err` through [`Errno`]. Backing
//! filesystem errors keep their errno unchanged (SPEC §3: EACCES, ENOSPC,
//! EIO, … reach the caller as they are); errors without an OS code (bad
//! bytes on disk, a bug) become EIO and are logged here, never a panic.

use std::io;

pub use fuser::Errno;

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
                log::error!("I/O error without errno, reported as EIO: {e}");
                Errno::EIO
            }
        },
    }
}

/// `?`-friendly conversion: `io_result.map_err(io)?`.
pub fn io(e: io::Error) -> Errno {
    errno(&e)
}

/// Writes to a corrected file are not supported yet (issue 4).
pub const READ_ONLY_VIEW: Errno = Errno::EROFS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_codes_pass_through() {
        for code in [libc::EACCES, libc::ENOSPC, libc::EIO, libc::ENOTEMPTY] {
            assert_eq!(errno(&io::Error::from_raw_os_error(code)).code(), code);
        }
    }

    #[test]
    fn no_os_code_is_eio_or_kind() {
        let e = io::Error::new(io::ErrorKind::InvalidData, "bad bytes");
        assert_eq!(errno(&e).code(), libc::EIO);
        let e = io::Error::new(io::ErrorKind::NotFound, "x");
        assert_eq!(errno(&e).code(), libc::ENOENT);
    }
}
