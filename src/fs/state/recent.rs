//! The descriptors the last few extended-attribute reads opened, kept for
//! a moment so that the requests that come in pairs share one: `ls -l`
//! asks every file for `security.selinux` and `system.posix_acl_access`
//! one right after the other, and reopening a file (by handle: an
//! `open_by_handle_at`, an `fstat`, a `close`) costs more than reading an
//! attribute. Used by `ops::xattr` only.
//!
//! **Nothing is pinned** (see `inodes`): at most [`SLOTS`] descriptors are
//! kept, and a descriptor not used since the sweeper last passed is closed
//! when it passes again, every [`SWEEP`]; so a file deleted in BACKING is
//! let go at most two sweeps (half a second) after the last request that
//! read it, whether or not the kernel still remembers its inode. The
//! sweeper sleeps (parked, no timer) while nothing is kept.
//!
//! Descriptors are found by the inode entry itself (`Arc` identity), not
//! its number: an entry the kernel forgot and a new one that got the same
//! number never share one.

use std::sync::{Arc, Weak};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::Mutex;

use crate::fs::state::inodes::{Fd, Inode};

/// The most descriptors kept: a few clients' pairs of requests at once.
pub const SLOTS: usize = 16;

/// How often unused descriptors are closed (each is kept from one to two
/// of these after its last use).
pub const SWEEP: Duration = Duration::from_millis(250);

struct Slot {
    inode: Weak<Inode>,
    fd: Fd,
    /// Used since the sweeper last passed.
    used: bool,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    /// The slot the next descriptor replaces when all are taken (oldest
    /// first).
    next: usize,
}

impl Slots {
    /// Closes (hands back, to be dropped outside the lock) the descriptors
    /// not used since the last sweep; true if none is left.
    fn sweep(&mut self, closing: &mut Vec<Slot>) -> bool {
        let mut k = 0;
        while k < self.slots.len() {
            if std::mem::take(&mut self.slots[k].used) {
                k += 1;
            } else {
                closing.push(self.slots.swap_remove(k));
            }
        }
        self.next = 0;
        self.slots.is_empty()
    }
}

/// The cache (one per mount).
pub struct RecentFds {
    slots: Arc<Mutex<Slots>>,
    sweeper: Option<Thread>,
}

impl RecentFds {
    /// An empty cache and its sweeper thread (without one, nothing is
    /// ever kept).
    pub fn new() -> RecentFds {
        let slots = Arc::new(Mutex::new(Slots::default()));
        let weak = Arc::downgrade(&slots);
        let sweeper = std::thread::Builder::new()
            .name("recent-fds".into())
            .spawn(move || sweeper(weak))
            .map_err(|e| log::warn!("no sweeper thread ({e}): xattr reads reopen every time"))
            .ok()
            .map(|h| h.thread().clone());
        RecentFds { slots, sweeper }
    }

    /// The descriptor kept for `inode`, if any (marked used).
    pub fn get(&self, inode: &Arc<Inode>) -> Option<Fd> {
        let mut s = self.slots.lock();
        let slot = s
            .slots
            .iter_mut()
            .find(|s| std::ptr::eq(s.inode.as_ptr(), Arc::as_ptr(inode)))?;
        slot.used = true;
        Some(slot.fd.clone())
    }

    /// Keeps `fd` as `inode`'s for a moment (replacing the oldest kept
    /// descriptor when all slots are taken).
    pub fn put(&self, inode: &Arc<Inode>, fd: &Fd) {
        let Some(sweeper) = &self.sweeper else {
            return;
        };
        let slot = Slot {
            inode: Arc::downgrade(inode),
            fd: fd.clone(),
            used: true,
        };
        let (was_empty, old) = {
            let mut s = self.slots.lock();
            let was_empty = s.slots.is_empty();
            let old = if s.slots.len() < SLOTS {
                s.slots.push(slot);
                None
            } else {
                let k = s.next % SLOTS;
                s.next = k + 1;
                Some(std::mem::replace(&mut s.slots[k], slot))
            };
            (was_empty, old)
        };
        // The replaced descriptor closes here, outside the lock.
        drop(old);
        if was_empty {
            sweeper.unpark();
        }
    }

    /// Closes every kept descriptor not used since the last sweep (what
    /// the sweeper does every `SWEEP`; for tests).
    #[cfg(test)]
    fn sweep(&self) {
        let mut closing = Vec::new();
        self.slots.lock().sweep(&mut closing);
    }

    /// A cache swept only by [`RecentFds::sweep`] (for tests: the sweeper
    /// thread would race the test's own sweeps).
    #[cfg(test)]
    fn swept_by_hand() -> RecentFds {
        RecentFds {
            slots: Arc::new(Mutex::new(Slots::default())),
            // `put` unparks it: harmless for the test's thread.
            sweeper: Some(std::thread::current()),
        }
    }

    /// How many descriptors are kept now (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().slots.len()
    }
}

impl Drop for RecentFds {
    fn drop(&mut self) {
        // Wakes the sweeper, which then finds the cache gone and ends.
        if let Some(t) = &self.sweeper {
            t.unpark();
        }
    }
}

/// The sweeper's loop: while anything is kept, closes every `SWEEP` what
/// was not used since the last pass; parked while nothing is kept (`put`
/// wakes it); ends with the cache.
fn sweeper(slots: Weak<Mutex<Slots>>) {
    loop {
        let empty = {
            let Some(slots) = slots.upgrade() else {
                return;
            };
            let mut closing = Vec::new();
            let empty = slots.lock().sweep(&mut closing);
            // The descriptors close here, outside the lock.
            drop(closing);
            empty
        };
        if empty {
            std::thread::park();
        } else {
            std::thread::sleep(SWEEP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors of this process that lead to a deleted file in `dir`.
    fn deleted_fds(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.starts_with(dir) && t.to_string_lossy().ends_with(" (deleted)"))
            .count()
    }

    fn entries(
        dir: &std::path::Path,
        n: usize,
    ) -> (crate::fs::state::inodes::InodeTable, Vec<Arc<Inode>>) {
        let table =
            crate::fs::state::inodes::InodeTable::new(crate::fs::CutFs::open_backing(dir).unwrap())
                .unwrap();
        let root = table.get(crate::fs::state::inodes::ROOT).unwrap();
        let mut all = Vec::new();
        for i in 0..n {
            std::fs::write(dir.join(format!("f{i}")), b"x").unwrap();
            let name = std::ffi::CString::new(format!("f{i}")).unwrap();
            all.push(table.lookup(&root, &name).unwrap().0);
        }
        (table, all)
    }

    /// Kept only by the same entry; at most `SLOTS`, the oldest replaced.
    #[test]
    fn found_by_entry_and_bounded() {
        let d = tempfile::tempdir().unwrap();
        let (_t, all) = entries(d.path(), SLOTS + 4);
        let r = RecentFds::swept_by_hand();
        for inode in &all {
            let fd = Arc::new(inode.open(libc::O_RDONLY).unwrap());
            r.put(inode, &fd);
            assert!(Arc::ptr_eq(&r.get(inode).unwrap(), &fd));
        }
        assert_eq!(r.len(), SLOTS);
        assert!(r.get(&all[0]).is_none(), "the oldest is replaced");
        assert!(r.get(&all[SLOTS + 3]).is_some());
    }

    /// A descriptor unused for one sweep goes at the next; the sweeper
    /// thread does that on its own within two `SWEEP`s, so a file deleted
    /// natively is let go.
    #[test]
    fn unused_descriptors_close_within_two_sweeps() {
        let d = tempfile::tempdir().unwrap();
        let (_t, all) = entries(d.path(), 2);
        let r = RecentFds::swept_by_hand();
        for inode in &all {
            r.put(inode, &Arc::new(inode.open(libc::O_RDONLY).unwrap()));
        }
        r.sweep();
        assert!(r.get(&all[0]).is_some(), "used since the last sweep");
        r.sweep();
        assert_eq!(r.len(), 1, "the unused one goes");
        r.sweep();
        assert_eq!(r.len(), 0);
        // The thread, with a file deleted behind the cache's back.
        let r = RecentFds::new();
        r.put(&all[1], &Arc::new(all[1].open(libc::O_RDONLY).unwrap()));
        std::fs::remove_file(d.path().join("f1")).unwrap();
        assert_eq!(deleted_fds(d.path()), 1);
        // Two sweeps; a loaded machine may run the thread late.
        let t = std::time::Instant::now();
        while (r.len(), deleted_fds(d.path())) != (0, 0) && t.elapsed() < SWEEP * 20 {
            std::thread::sleep(SWEEP / 10);
        }
        assert_eq!(r.len(), 0);
        assert_eq!(deleted_fds(d.path()), 0, "a deleted file is still held");
    }
}
