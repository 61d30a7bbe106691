//! File leases (`fcntl(F_SETLEASE)`, fcntl(2) "Leases"): how migrate
//! learns, without a race, that someone opened a file it is converting.
//!
//! A read lease is granted on a descriptor open for reading only when no
//! one has the file open for writing; a write lease, on any descriptor,
//! only when no one else has the file open at all. From then on, an
//! `open(2)` that conflicts (for writing; for a write lease, any) and a
//! `truncate(2)` wait in the kernel until the holder gives the lease up
//! or `/proc/sys/fs/lease-break-time` seconds (45 by default) pass, and
//! from the moment such a call starts to wait, `F_GETLEASE` no longer
//! reports the lease whole ([`intact`] is false): a lease that is still
//! whole proves no conflicting open was even attempted since it was
//! granted. Root may take a lease on anyone's file (CAP_LEASE), others on
//! their own.
//!
//! The kernel signals the holder when a lease is broken (SIGIO, which
//! would end the process); [`take`] has it send SIGURG instead, whose
//! default action is to be ignored and which nothing in this program
//! handles: the holder asks [`intact`] at the moments that matter.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Which lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// Broken by an open for writing or a truncate.
    Read,
    /// Broken by any open or a truncate.
    Write,
}

impl Lease {
    fn raw(self) -> libc::c_int {
        match self {
            Lease::Read => libc::F_RDLCK,
            Lease::Write => libc::F_WRLCK,
        }
    }
}

/// `F_SETSIG` (fcntl(2); the same on every Linux architecture), which the
/// libc crate does not name.
const F_SETSIG: libc::c_int = 10;

fn fcntl(f: &File, cmd: libc::c_int, arg: libc::c_int) -> io::Result<libc::c_int> {
    // SAFETY: F_SETSIG, F_SETLEASE and F_GETLEASE take an int argument and
    // touch no memory of ours; the descriptor is borrowed from `f`, open
    // for the whole call.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), cmd, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Takes `lease` on the file open as `f`. EAGAIN: the file is open
/// elsewhere in a way that conflicts; EINVAL (or ENOSYS): its filesystem
/// grants no leases.
pub fn take(f: &File, lease: Lease) -> io::Result<()> {
    fcntl(f, F_SETSIG, libc::SIGURG)?;
    fcntl(f, libc::F_SETLEASE, lease.raw()).map(|_| ())
}

/// Whether `lease`, taken on `f` by [`take`], is still whole: no
/// conflicting open or truncate has been attempted since it was granted.
pub fn intact(f: &File, lease: Lease) -> bool {
    fcntl(f, libc::F_GETLEASE, 0).is_ok_and(|t| t == lease.raw())
}

/// Gives the lease on `f` up: whoever waits for it goes on.
pub fn release(f: &File) {
    let _ = fcntl(f, libc::F_SETLEASE, libc::F_UNLCK);
}

/// Whether an error from [`take`] means the filesystem grants no leases
/// (rather than that the file is in use).
pub fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}
