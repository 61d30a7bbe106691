//! Locks taken on the backing file for each owner: every `flock(2)`, POSIX
//! record lock and OFD lock asked for through the mount is taken on the
//! file in BACKING itself, so that it excludes, and is excluded by,
//! processes using BACKING directly and processes on other mounts of the
//! same BACKING (and, where the backing filesystem carries locks between
//! hosts, on other hosts).
//!
//! The kernel asks for the locks of an *owner* (FUSE_SETLK, FUSE_SETLKW,
//! FUSE_GETLK) and says when an owner's locks go (FLUSH, RELEASE). Each
//! owner's locks on a file live on a *holder*: an open file description of
//! the backing file of its own (opened again from the handle's descriptor,
//! with the handle's access), on which they are taken as open file
//! description locks — which belong to that description alone, so the
//! daemon closing any other descriptor never drops them, and two holders'
//! locks conflict exactly as two processes' do.
//!
//! * POSIX record locks (`fcntl` F_SETLK/F_SETLKW, `lockf`) come with the
//!   caller's file table as owner: one holder per (file, owner), where the
//!   owner's locks merge and split by range as a process's do. Every
//!   close(2) of a descriptor of the file by that owner, and its exit,
//!   sends FLUSH with the owner: [`Locks::flush`] closes the holder, and
//!   every lock the owner had on the file goes, as natively.
//! * OFD locks taken through the mount come the same way, their owner
//!   being the open file: they stay until its last close, whose RELEASE
//!   ([`Locks::release`]) closes the holders used through that handle
//!   alone.
//! * `flock(2)` locks (FUSE_LK_FLOCK) belong to the open file too: one
//!   holder per handle takes them with `flock` on BACKING (BSD and POSIX
//!   locks stay independent, as on a local filesystem), until RELEASE.
//!
//! A lock that must be waited for (F_SETLKW, `flock` without LOCK_NB) waits
//! on a thread of its own ([`Waits`]), never on a FUSE worker: at most
//! [`waits::MAX_WAITS`] at once and [`waits::WAITS_PER_USER`] for one user, the last
//! [`waits::KEPT_WAITS`] only for users with fewer than [`waits::FEW_WAITS`] waiting (a
//! few users cannot take every place), beyond which the request fails
//! with ENOLCK (a full lock table, natively). The
//! kernel's FUSE_INTERRUPT for a waiting request (its caller got a signal)
//! wakes that thread (`crate::sys::lock::wake`) and the request fails with
//! EINTR, which the kernel restarts or returns exactly as for a native
//! wait. Holders are descriptors of the daemon's: each counts in its user's
//! share of them (`share`, as an open handle does), and a lock that would
//! need one beyond it fails with ENOLCK.
//!
//! A granted lock also drops what the kernel has cached of the file (its
//! pages and attributes, through `invalidate`) before the reply, so the
//! holder reads what others wrote before they let go — through BACKING or
//! another mount — as an NFS client does when it gets a lock.
//!
//! Lock offsets are the caller's, passed through unchanged: the same
//! numbers in BACKING (for a corrected file, view offsets, which equal
//! BACKING's wherever its text keeps its length).
//!
//! Lock order: `Table::files`, then `Waits::state`; neither is held while
//! a reply is sent, a lock is waited for, or a holder is opened or closed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::pthread::Pthread;
use parking_lot::{Condvar, Mutex};

use crate::fs::coherence::invalidate::Invalidator;
use crate::fs::frontend::error::{self, io, Errno, Refused, Result};
use crate::fs::state::share::{Refusal, Shares, Ticket};
use crate::sys;
use crate::sys::lock::{Conflict, Range};

mod waits;

use waits::Waits;

/// What kind of lock a request is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A POSIX record lock or an OFD lock: by range, on the owner's holder.
    Record,
    /// A `flock(2)` lock: the whole file, on the handle's holder.
    Flock,
}

/// Who asks, from the FUSE request.
#[derive(Clone, Copy, Debug)]
pub struct Asker {
    pub ino: u64,
    pub fh: u64,
    /// The kernel's lock owner.
    pub owner: u64,
    pub uid: u32,
    /// The calling process (0 for an unlock).
    pub pid: u32,
    /// The request's unique id (what an interrupt names).
    pub unique: u64,
}

/// What a lock request asks for.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub kind: Kind,
    /// The whole file for `Flock`.
    pub range: Range,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
    /// Wait until it can be had (F_SETLKW, flock without LOCK_NB).
    pub sleep: bool,
}

/// One owner's locks on one file: an open file description of its own.
struct Holder {
    kind: Kind,
    /// The lock owner (`Record`) or the file handle (`Flock`).
    key: u64,
    file: File,
    /// The descriptor's place in its user's share.
    _share: Ticket,
    /// The handles locks came through (`Record`; RELEASE of the last one
    /// closes the holder).
    fhs: Mutex<Vec<u64>>,
    /// The process that last took a lock here, for F_GETLK.
    pid: AtomicU32,
}

impl Holder {
    /// Takes or clears a lock of type `typ` on `range` (the whole file for
    /// `Flock`); `wait`: block (EINTR when woken).
    fn apply(&self, range: Range, typ: i32, wait: bool) -> std::io::Result<()> {
        match self.kind {
            Kind::Record => sys::lock::ofd_setlk(&self.file, range, typ, wait),
            Kind::Flock => sys::lock::flock(&self.file, typ, wait),
        }
    }

    /// Clears every lock the holder has, now: its descriptor may outlive
    /// its place in the table for a moment (a request that took a lock
    /// through it drops its reference after it replied), and the owner's
    /// close must not wait for that.
    fn let_go(&self) {
        let whole = Range {
            start: 0,
            end: sys::lock::OFFSET_MAX,
        };
        if let Err(e) = self.apply(whole, libc::F_UNLCK, false) {
            log::debug!("cannot clear a lock holder's locks: {e}");
        }
    }

    /// Whether this holder holds an OFD lock of exactly `c`'s range and
    /// type (read from `/proc/self/fdinfo`, which lists a description's
    /// locks).
    fn holds(&self, c: &Conflict) -> bool {
        let path = format!("/proc/self/fdinfo/{}", self.file.as_raw_fd());
        let Ok(info) = std::fs::read_to_string(path) else {
            return false;
        };
        let typ = if c.typ == libc::F_WRLCK {
            "WRITE"
        } else {
            "READ"
        };
        let end = if c.range.end >= sys::lock::OFFSET_MAX {
            "EOF".to_owned()
        } else {
            c.range.end.to_string()
        };
        info.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // lock: N: OFDLCK ADVISORY WRITE -1 dev:ino START END
            w.len() >= 9
                && w[0] == "lock:"
                && w[2] == "OFDLCK"
                && w[4] == typ
                && w[7] == c.range.start.to_string()
                && w[8] == end
        })
    }
}

#[derive(Default)]
struct Files {
    by_ino: HashMap<u64, Vec<Arc<Holder>>>,
}

impl Files {
    fn find(&self, ino: u64, kind: Kind, key: u64) -> Option<&Arc<Holder>> {
        self.by_ino
            .get(&ino)?
            .iter()
            .find(|h| h.kind == kind && h.key == key)
    }

    fn insert(&mut self, ino: u64, h: Arc<Holder>) {
        self.by_ino.entry(ino).or_default().push(h);
    }

    /// Takes out of the table the holders of `ino` that `gone` says go.
    fn remove(&mut self, ino: u64, mut gone: impl FnMut(&Holder) -> bool) -> Vec<Arc<Holder>> {
        let Some(list) = self.by_ino.get_mut(&ino) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut i = 0;
        while i < list.len() {
            if gone(&list[i]) {
                out.push(list.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if list.is_empty() {
            self.by_ino.remove(&ino);
        }
        out
    }
}

/// Every holder, by inode.
struct Table {
    files: Mutex<Files>,
    /// Each user's share of the daemon's descriptors.
    shares: Arc<Shares>,
}

impl Table {
    fn find(&self, ino: u64, kind: Kind, key: u64) -> Option<Arc<Holder>> {
        self.files.lock().find(ino, kind, key).cloned()
    }

    /// The holder for `kind`/`key` on `a.ino`, opened from the handle's
    /// `file` if there is none yet; remembers the handle and the caller.
    fn get_or_open(&self, a: &Asker, kind: Kind, key: u64, file: &File) -> Result<Arc<Holder>> {
        let known = |files: &Files| {
            files.find(a.ino, kind, key).cloned().inspect(|h| {
                if kind == Kind::Record {
                    let mut fhs = h.fhs.lock();
                    if !fhs.contains(&a.fh) {
                        fhs.push(a.fh);
                    }
                }
                h.pid.store(a.pid, Ordering::Relaxed);
            })
        };
        {
            let files = self.files.lock();
            if let Some(h) = known(&files) {
                return Ok(h);
            }
        }
        let ticket = self.shares.take(a.uid).map_err(|why| {
            let uid = a.uid.to_string();
            let why = match why {
                Refusal::OverShare { held } => format!("the user holds {held}, its share"),
                Refusal::Exhausted => "none is left".to_owned(),
            };
            crate::ratelog::warn("lock-holders", &uid, || {
                format!(
                    "uid {uid}: a lock refused with ENOLCK: it needs a descriptor of the \
                     daemon's, and {why} (see man cutf8fs, RESOURCES and LOCKS)"
                )
            });
            Errno::from(Refused::NoLockRoom)
        })?;
        // Opened outside the table's lock (BACKING may be slow to open).
        let mode = nix::fcntl::fcntl(file.as_fd(), nix::fcntl::FcntlArg::F_GETFL)
            .map_err(|e| io(e.into()))?
            & libc::O_ACCMODE;
        let opened =
            sys::reopen(file.as_fd(), mode | libc::O_CLOEXEC | libc::O_NOCTTY).map_err(io)?;
        let mut files = self.files.lock();
        if let Some(h) = known(&files) {
            return Ok(h);
        }
        let h = Arc::new(Holder {
            kind,
            key,
            file: opened,
            _share: ticket,
            fhs: Mutex::new(vec![a.fh]),
            pid: AtomicU32::new(a.pid),
        });
        files.insert(a.ino, h.clone());
        Ok(h)
    }

    /// After a wait: keeps `h` (or puts it back, if FLUSH took it out
    /// meanwhile: the lock was granted after the close, as natively it
    /// can be); `Some(other)` when the owner has another holder now.
    fn adopt(&self, ino: u64, h: &Arc<Holder>) -> Option<Arc<Holder>> {
        let mut files = self.files.lock();
        match files.find(ino, h.kind, h.key) {
            Some(cur) if Arc::ptr_eq(cur, h) => None,
            Some(cur) => Some(cur.clone()),
            None => {
                files.insert(ino, h.clone());
                None
            }
        }
    }
}

/// The locks of the whole mount.
pub struct Locks {
    table: Arc<Table>,
    waits: Arc<Waits>,
    /// Drops the kernel's cache of a file whose lock is granted.
    kernel: Arc<Invalidator>,
}

impl Locks {
    /// Blocks the signal that wakes a waiting thread in the calling
    /// thread and the threads it starts later: call before the daemon
    /// starts any other thread (and before [`Locks::new`]).
    pub fn block_wake_signal() -> std::io::Result<()> {
        sys::lock::block_wake_signal()
    }

    /// The mount's locks: their descriptors count in `shares`; `kernel`
    /// drops the kernel's cache of a file when a lock on it is granted.
    pub fn new(kernel: Arc<Invalidator>, shares: Arc<Shares>) -> Locks {
        Locks {
            table: Arc::new(Table {
                files: Mutex::new(Files::default()),
                shares,
            }),
            waits: Arc::new(Waits::default()),
            kernel,
        }
    }

    /// Sets or clears (`typ` `F_UNLCK`) a lock for `a` through the handle's
    /// backing `file`, and calls `done` with the outcome: at once, or, for
    /// a lock that must be waited for (`sleep`), from the thread that waits.
    pub fn set(
        &self,
        a: Asker,
        want: Want,
        file: &File,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let Want {
            kind,
            range,
            typ,
            sleep,
        } = want;
        let key = match kind {
            Kind::Record => a.owner,
            Kind::Flock => a.fh,
        };
        if typ == libc::F_UNLCK {
            let r = match self.table.find(a.ino, kind, key) {
                Some(h) => h.apply(range, typ, false).map_err(io),
                // Nothing held, nothing to clear.
                None => Ok(()),
            };
            return done(r);
        }
        let h = match self.table.get_or_open(&a, kind, key, file) {
            Ok(h) => h,
            Err(e) => return done(Err(e)),
        };
        match h.apply(range, typ, false) {
            Ok(()) => {
                self.kernel.pages(a.ino);
                done(Ok(()))
            }
            Err(e) if sleep && e.raw_os_error() == Some(libc::EAGAIN) => {
                let (table, kernel) = (self.table.clone(), self.kernel.clone());
                let ino = a.ino;
                let job = move |stop: &dyn Fn() -> bool| -> Result<()> {
                    let mut h = h;
                    loop {
                        if stop() {
                            return Err(Refused::Interrupted.into());
                        }
                        match h.apply(range, typ, true) {
                            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                            Err(e) => return Err(io(e)),
                            Ok(()) => match table.adopt(ino, &h) {
                                None => {
                                    kernel.pages(ino);
                                    return Ok(());
                                }
                                // Dropping the old one lets its lock go.
                                Some(current) => h = current,
                            },
                        }
                    }
                };
                self.waits.start(a.uid, a.unique, job, done);
            }
            Err(e) => done(Err(io(e))),
        }
    }

    /// F_GETLK for `a`: the first lock that stands in the way of a lock of
    /// type `typ` on `range`, with the pid of the process that took it when
    /// that is known — a process lock taken in BACKING, or a lock taken
    /// through this mount — else 0 (a lock held elsewhere).
    pub fn test(&self, a: Asker, file: &File, range: Range, typ: i32) -> Result<Option<Conflict>> {
        let own = self.table.find(a.ino, Kind::Record, a.owner);
        let fd = own.as_ref().map_or(file, |h| &h.file);
        let Some(mut c) = sys::lock::ofd_getlk(fd, range, typ).map_err(io)? else {
            return Ok(None);
        };
        if c.pid <= 0 {
            let others: Vec<Arc<Holder>> = {
                let files = self.table.files.lock();
                files
                    .by_ino
                    .get(&a.ino)
                    .map(|l| {
                        l.iter()
                            .filter(|h| h.kind == Kind::Record && h.key != a.owner)
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default()
            };
            c.pid = others
                .iter()
                .find(|h| h.holds(&c))
                .map_or(0, |h| h.pid.load(Ordering::Relaxed) as i32);
        }
        Ok(Some(c))
    }

    /// FLUSH by `owner` (a close(2) of a descriptor of `ino`, or its exit):
    /// the owner's record locks on the file go.
    pub fn flush(&self, ino: u64, owner: u64) {
        let gone = self
            .table
            .files
            .lock()
            .remove(ino, |h| h.kind == Kind::Record && h.key == owner);
        // Cleared and closed here, outside the table's lock.
        gone.iter().for_each(|h| h.let_go());
        drop(gone);
    }

    /// RELEASE of handle `fh` (its last close): its flock locks go, and the
    /// record locks taken through it alone (its OFD locks).
    pub fn release(&self, ino: u64, fh: u64) {
        let gone = self.table.files.lock().remove(ino, |h| match h.kind {
            Kind::Flock => h.key == fh,
            Kind::Record => {
                let mut fhs = h.fhs.lock();
                fhs.retain(|&f| f != fh);
                fhs.is_empty()
            }
        });
        gone.iter().for_each(|h| h.let_go());
        drop(gone);
    }

    /// FUSE_INTERRUPT for request `unique`: a wait for it ends with EINTR
    /// (now, or as soon as the request arrives).
    pub fn interrupt(&self, unique: u64) {
        self.waits.interrupt(unique);
    }
}

#[cfg(test)]
mod tests;
