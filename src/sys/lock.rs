//! Locks on a descriptor and what waiting for one needs: open file
//! description locks (`F_OFD_SETLK`, `F_OFD_SETLKW`, `F_OFD_GETLK`),
//! `flock(2)`, and the signal that wakes a thread blocked in either.
//!
//! OFD locks belong to the open file description, not to the process, so a
//! daemon holding many of them for many owners never loses one when it
//! closes some other descriptor of the same file (a process lock would).
//! A waiting call is cut short by [`wake`]: the wake signal has a handler
//! that does nothing and no `SA_RESTART`, so the call returns EINTR; every
//! thread but the waiting ones keeps it blocked ([`block_wake_signal`]).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::fcntl::{self, FcntlArg};
use nix::sys::pthread::Pthread;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::from_nix;

/// A byte range as the kernel's lock calls take it: `start` to `end`
/// inclusive; `end == i64::MAX` means "to the end of the file, however it
/// grows" (a length of 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

/// The largest offset a lock can name (the kernel's OFFSET_MAX).
pub const OFFSET_MAX: u64 = i64::MAX as u64;

impl Range {
    fn to_flock(self, typ: i32) -> libc::flock {
        libc::flock {
            l_type: typ as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: i64::try_from(self.start).unwrap_or(i64::MAX),
            l_len: if self.end >= OFFSET_MAX {
                0
            } else {
                i64::try_from(self.end - self.start + 1).unwrap_or(0)
            },
            // Ignored on the way in; F_OFD_* want 0.
            l_pid: 0,
        }
    }

    fn from_flock(fl: &libc::flock) -> Range {
        let start = u64::try_from(fl.l_start).unwrap_or(0);
        let end = if fl.l_len <= 0 {
            OFFSET_MAX
        } else {
            start.saturating_add(fl.l_len as u64 - 1).min(OFFSET_MAX)
        };
        Range { start, end }
    }
}

/// A lock that stands in the way, as `F_OFD_GETLK` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub range: Range,
    /// `F_RDLCK` or `F_WRLCK`.
    pub typ: i32,
    /// The holder's process id for a process (POSIX) lock, -1 for an open
    /// file description lock (whose holder is no one process).
    pub pid: i32,
}

/// Sets (`F_RDLCK`, `F_WRLCK`) or clears (`F_UNLCK`) an OFD lock on
/// `range` of the file `fd` is open on; `wait`: block until it can be
/// had (EINTR when [`wake`]d), else EAGAIN at once if it cannot.
pub fn ofd_setlk(fd: impl AsFd, range: Range, typ: i32, wait: bool) -> io::Result<()> {
    let fl = range.to_flock(typ);
    let arg = if wait {
        FcntlArg::F_OFD_SETLKW(&fl)
    } else {
        FcntlArg::F_OFD_SETLK(&fl)
    };
    fcntl::fcntl(fd.as_fd(), arg).map(drop).map_err(from_nix)
}

/// The first lock that would stand in the way of an OFD lock of type
/// `typ` on `range` through `fd`, or `None`.
pub fn ofd_getlk(fd: impl AsFd, range: Range, typ: i32) -> io::Result<Option<Conflict>> {
    let mut fl = range.to_flock(typ);
    fcntl::fcntl(fd.as_fd(), FcntlArg::F_OFD_GETLK(&mut fl)).map_err(from_nix)?;
    if i32::from(fl.l_type) == libc::F_UNLCK {
        return Ok(None);
    }
    Ok(Some(Conflict {
        range: Range::from_flock(&fl),
        typ: i32::from(fl.l_type),
        pid: fl.l_pid,
    }))
}

/// `flock(2)` on `fd`: `typ` `F_RDLCK` (shared), `F_WRLCK` (exclusive) or
/// `F_UNLCK`; `wait` as for [`ofd_setlk`] (EWOULDBLOCK when it cannot be
/// had at once).
#[allow(deprecated)]
pub fn flock(fd: impl AsFd, typ: i32, wait: bool) -> io::Result<()> {
    use fcntl::FlockArg::*;
    let arg = match (typ, wait) {
        (libc::F_RDLCK, true) => LockShared,
        (libc::F_RDLCK, false) => LockSharedNonblock,
        (libc::F_WRLCK, true) => LockExclusive,
        (libc::F_WRLCK, false) => LockExclusiveNonblock,
        (libc::F_UNLCK, _) => Unlock,
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    fcntl::flock(fd.as_fd().as_raw_fd(), arg).map_err(from_nix)
}

/// The signal that cuts a waiting lock call short.
const WAKE: Signal = Signal::SIGUSR2;

fn wake_set() -> SigSet {
    let mut set = SigSet::empty();
    set.add(WAKE);
    set
}

/// Installs the wake signal's handler (which does nothing) and blocks the
/// signal in the calling thread and in every thread it starts later: only
/// a waiting thread, between [`unblock_wake_signal`] and its end, takes
/// it. Call once, before other threads start.
pub fn block_wake_signal() -> io::Result<()> {
    extern "C" fn nothing(_: libc::c_int) {}
    wake_set().thread_block().map_err(from_nix)?;
    let sa = SigAction::new(
        SigHandler::Handler(nothing),
        // No SA_RESTART: the interrupted lock call returns EINTR.
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing at all, so it is async-signal-safe
    // and touches no state another thread could be changing.
    unsafe { nix::sys::signal::sigaction(WAKE, &sa) }
        .map(drop)
        .map_err(from_nix)
}

/// Lets the calling thread take the wake signal (a thread about to wait
/// for a lock; it ends when the wait does).
pub fn unblock_wake_signal() -> io::Result<()> {
    wake_set().thread_unblock().map_err(from_nix)
}

/// The calling thread, for [`wake`].
pub fn this_thread() -> Pthread {
    nix::sys::pthread::pthread_self()
}

/// Sends the wake signal to `thread`, which must still be running (the
/// caller knows it is: it has not yet said it is done).
pub fn wake(thread: Pthread) -> io::Result<()> {
    nix::sys::pthread::pthread_kill(thread, WAKE).map_err(from_nix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_round_trip_through_flock() {
        for r in [
            Range {
                start: 0,
                end: OFFSET_MAX,
            },
            Range { start: 5, end: 5 },
            Range { start: 10, end: 19 },
            Range {
                start: 1 << 30,
                end: OFFSET_MAX,
            },
        ] {
            assert_eq!(Range::from_flock(&r.to_flock(libc::F_WRLCK)), r);
        }
    }

    #[test]
    fn ofd_locks_of_two_open_files_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let a = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let b = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let r = Range { start: 2, end: 4 };
        ofd_setlk(&a, r, libc::F_WRLCK, false).unwrap();
        let e = ofd_setlk(&b, Range { start: 4, end: 8 }, libc::F_RDLCK, false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        let c = ofd_getlk(
            &b,
            Range {
                start: 0,
                end: OFFSET_MAX,
            },
            libc::F_RDLCK,
        )
        .unwrap()
        .unwrap();
        assert_eq!((c.range, c.typ, c.pid), (r, libc::F_WRLCK, -1));
        // The same open file converts and splits its own locks.
        ofd_setlk(&a, Range { start: 3, end: 3 }, libc::F_UNLCK, false).unwrap();
        ofd_setlk(&b, Range { start: 3, end: 3 }, libc::F_WRLCK, false).unwrap();
        assert!(ofd_getlk(&a, Range { start: 2, end: 2 }, libc::F_WRLCK)
            .unwrap()
            .is_none());
        drop(a);
        ofd_setlk(
            &b,
            Range {
                start: 0,
                end: OFFSET_MAX,
            },
            libc::F_WRLCK,
            false,
        )
        .unwrap();
    }
}
