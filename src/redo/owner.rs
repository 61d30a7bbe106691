//! Which daemon a journal entry belongs to, and whether that daemon still
//! lives: several daemons may serve one BACKING (several hosts over a
//! shared filesystem), and none may replay or delete the entries of
//! another that is alive. Used by the journal (`super`) when it first
//! writes an entry ([`Owner::claim`]) and when a mount starts
//! ([`Recovery`]), and by `super::peers` to learn at once that one died.
//!
//! * Each daemon takes a random 64-bit id. Its entries are named
//!   `<id>-<seq>` (then `.commit`, `.done`), and before its first entry it
//!   creates `<id>.owner` in the journal directory and holds an exclusive
//!   `flock` on it for its whole life. The kernel lets go of the lock when
//!   the daemon ends, however it ends (`kill -9` too); over NFS the lock
//!   is a byte-range lock the server keeps for the client, released when
//!   the client's lease ends after its host died.
//! * A mount that starts takes `recover.lock` (an exclusive `flock`, held
//!   only while it looks) and then, for each id that has entries or an
//!   owner file: an owner file it cannot lock belongs to a live daemon,
//!   whose entries it leaves alone; one it can lock, or no owner file at
//!   all (entries of a daemon older than owner files), belongs to a dead
//!   one, whose entries it checks and finishes as its own and whose owner
//!   file it removes last, still holding its lock.
//! * A daemon creates its owner file and locks it while holding
//!   `recover.lock`, so no starting mount can see it unlocked.
//!
//! Everything here is judged by `crate::trust`'s rules, as the entries
//! are: the owner files and `recover.lock` are the daemon's own regular
//! files, private, one link, in the journal directory the daemon owns.

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::trust::{self, Access, Rule};

/// The lock a starting mount holds while it sorts entries by owner.
pub(super) const RECOVER_LOCK: &str = "recover.lock";
/// An owner file is `<id>` followed by this.
pub(super) const OWNER_SUFFIX: &str = ".owner";

fn rule() -> Rule {
    Rule::our_file(Access::Private)
}

fn bad(name: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{name} {why}"))
}

/// A fresh id: 64 random bits (the standard library's per-process random
/// keys, mixed with the pid and the time).
pub(super) fn new_id() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    // Never 0, so an id is never confused with a missing one.
    h.finish().max(1)
}

/// The id an entry or owner file name belongs to.
pub(super) fn id_of(name: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(name).ok()?;
    let stem = s.strip_suffix(OWNER_SUFFIX).unwrap_or(s);
    let stem = stem.split(['.', '-']).next()?;
    stem.parse().ok()
}

/// Whether `name` is an owner file's.
pub(super) fn is_owner_file(name: &[u8]) -> bool {
    name.ends_with(OWNER_SUFFIX.as_bytes()) && id_of(name).is_some()
}

/// Owner file `name` in `dir`, opened to be locked (None if it is gone).
pub(super) fn open(dir: &OwnedFd, name: &OsStr) -> io::Result<Option<File>> {
    match trust::open_file(dir.as_fd(), name, libc::O_RDONLY, &rule(), false) {
        Ok(f) => Ok(Some(f)),
        Err(trust::Unusable::Missing) => Ok(None),
        Err(trust::Unusable::Bad(why)) => Err(bad(&name.to_string_lossy(), why)),
    }
}

/// `recover.lock`, held exclusively while alive.
pub(super) struct Recovery {
    _lock: File,
}

impl Recovery {
    /// Waits for `recover.lock` in the journal directory `dir` (created if
    /// missing, unless `read_only`: then no lock is taken — a read-only
    /// mount changes nothing).
    pub(super) fn begin(dir: &OwnedFd, read_only: bool) -> io::Result<Option<Recovery>> {
        if read_only {
            return Ok(None);
        }
        let f = trust::open_file(
            dir.as_fd(),
            OsStr::new(RECOVER_LOCK),
            libc::O_RDWR,
            &rule(),
            true,
        )
        .map_err(|why| bad(RECOVER_LOCK, why))?;
        crate::sys::lock_exclusive(&f)?;
        Ok(Some(Recovery { _lock: f }))
    }
}

/// What a starting mount learned of one owner.
pub(super) enum Liveness {
    /// Its owner file is locked: the daemon lives.
    Alive,
    /// Dead: its owner file, if any, now locked by us (removed by
    /// [`Liveness::release`] once its entries are finished).
    Dead(Option<File>),
}

impl Liveness {
    /// Whether owner `id`'s daemon is alive, judged from its owner file in
    /// `dir` (the caller holds [`Recovery`]).
    pub(super) fn of(dir: &OwnedFd, id: u64) -> io::Result<Liveness> {
        let name = format!("{id}{OWNER_SUFFIX}");
        match trust::open_file(
            dir.as_fd(),
            OsStr::new(&name),
            libc::O_RDONLY,
            &rule(),
            false,
        ) {
            Ok(f) => {
                if crate::sys::try_lock_exclusive(&f)? {
                    Ok(Liveness::Dead(Some(f)))
                } else {
                    Ok(Liveness::Alive)
                }
            }
            Err(trust::Unusable::Missing) => Ok(Liveness::Dead(None)),
            Err(trust::Unusable::Bad(why)) => Err(bad(&name, why)),
        }
    }

    /// Removes a dead owner's file (its entries are finished).
    pub(super) fn release(self, dir: &OwnedFd, id: u64) -> io::Result<()> {
        if let Liveness::Dead(Some(f)) = self {
            let name = format!("{id}{OWNER_SUFFIX}");
            match unlinkat(dir, name.as_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
            drop(f);
        }
        Ok(())
    }
}

/// This daemon as the owner of its entries in one journal directory.
#[derive(Debug)]
pub(super) struct Owner {
    /// Its owner file, locked for the daemon's life.
    _file: File,
}

impl Owner {
    /// Creates and locks `<id>.owner` in `dir`, under `recover.lock`.
    pub(super) fn claim(dir: &OwnedFd, id: u64) -> io::Result<Owner> {
        let _recovery = Recovery::begin(dir, false)?;
        let name = format!("{id}{OWNER_SUFFIX}");
        let f = trust::open_file(dir.as_fd(), OsStr::new(&name), libc::O_RDWR, &rule(), true)
            .map_err(|why| bad(&name, why))?;
        if !crate::sys::try_lock_exclusive(&f)? {
            return Err(bad(&name, "is locked by another process"));
        }
        nix::unistd::fsync(dir).map_err(io::Error::from)?;
        Ok(Owner { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_tell_their_owner() {
        assert_eq!(id_of(b"12-3"), Some(12));
        assert_eq!(id_of(b"12-3.commit"), Some(12));
        assert_eq!(id_of(b"12-3.done"), Some(12));
        assert_eq!(id_of(b"77.owner"), Some(77));
        assert!(is_owner_file(b"77.owner"));
        assert!(!is_owner_file(b"77-1.commit"));
        assert!(!is_owner_file(b"x.owner"));
        assert_eq!(id_of(b"recover.lock"), None);
        assert_ne!(new_id(), new_id());
    }
}
