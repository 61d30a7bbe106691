//! `-o archive`: regular files read by inode, with no OPEN, FLUSH or
//! RELEASE requests; this module keeps the daemon's own handles they are
//! read through.
//!
//! An archive is browsed and searched: `grep -r` opens, reads and closes
//! every file, and on a default mount each of those opens costs OPEN, FLUSH
//! and RELEASE, three round trips to the daemon although the file's pages
//! are in the kernel's cache and no READ is sent. The kernel has a way out
//! (libfuse's `no_open`, fs/fuse/file.c `fuse_do_open`): once the daemon
//! answers an OPEN of a regular file with ENOSYS, the kernel opens every
//! regular file of the connection itself (an OPEN already on its way then
//! is still sent, and answered the same), keeps their page cache from one
//! open to the next (FOPEN_KEEP_CACHE) and sends no RELEASE at their last
//! close; once it answers a FLUSH with ENOSYS, no FLUSH either. A warm
//! `grep -r` then costs no request per file at all.
//!
//! What the mount gives up for that, and why each is safe:
//! * **Writes**: the mount is read-only (`archive` implies `ro`), so the
//!   kernel refuses every write, create and size change with EROFS before
//!   the daemon hears of it; FLUSH has nothing to write back.
//! * **Locks stay in the mount**: FLUSH is how the kernel tells the daemon
//!   a POSIX lock owner closed the file (`fs::locks`); without it a lock
//!   forwarded to BACKING would never be released. So `init` does not ask
//!   for FUSE_POSIX_LOCKS or FUSE_FLOCK_LOCKS, and the kernel keeps locks
//!   itself, among the mount's users (as for any FUSE filesystem that does
//!   not implement them), not in BACKING.
//! * **Passthrough and per-open descriptors**: no OPEN, no handle of the
//!   caller's: a READ comes with file handle 0 and is served here through a
//!   handle of the daemon's own per inode, opened at the first READ, closed
//!   after [`IDLE`] unused (so a file deleted in BACKING is released, as
//!   `fs::passthrough` and the handles of a default mount release theirs),
//!   at most [`MOST`] at once (the least recently used closes first). They
//!   count in root's descriptor share, not in the readers'.
//! * Permissions are still the kernel's (`default_permissions`, always on):
//!   an open the mode bits or ACLs refuse fails as on any mount.
//!
//! What changes in BACKING is still seen: each READ checks the file's stamp
//! as through any handle (`CutFs::read_file`), and the kernel's page cache
//! is dropped when the watch of BACKING (or a GETATTR seeing a new size or
//! mtime, FUSE_AUTO_INVAL_DATA) says the file changed.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a handle stays open unused.
pub const IDLE: Duration = Duration::from_secs(2);

/// Handles open at most: the files being read at once, and then some.
pub const MOST: usize = 64;

/// The daemon's own handles (`H`: `Arc<handles::Handle>`) of the files
/// read lately, by inode.
pub struct Readers<H> {
    open: Mutex<HashMap<u64, Entry<H>>>,
}

impl<H> Default for Readers<H> {
    fn default() -> Self {
        Readers {
            open: Mutex::default(),
        }
    }
}

struct Entry<H> {
    handle: H,
    used: Instant,
}

impl<H: Clone + Send + 'static> Readers<H> {
    /// Starts the thread that closes handles unused for [`IDLE`]; it ends
    /// with the last reference to `readers`.
    pub fn spawn_sweeper(readers: &Arc<Readers<H>>, closed: fn(H)) -> std::io::Result<()> {
        let weak: Weak<Readers<H>> = Arc::downgrade(readers);
        std::thread::Builder::new()
            .name("archive-sweep".into())
            .spawn(move || loop {
                std::thread::sleep(IDLE / 2);
                let Some(r) = weak.upgrade() else { return };
                for h in r.expired(Instant::now()) {
                    closed(h);
                }
            })
            .map(drop)
    }

    /// The handle of `ino` read through lately, if it is still for
    /// `is_current`'s inode (an inode forgotten and looked up again is a
    /// new object: its handle is opened anew).
    pub fn get(&self, ino: u64, is_current: impl Fn(&H) -> bool) -> Option<H> {
        let mut open = self.open.lock();
        let e = open.get_mut(&ino)?;
        if !is_current(&e.handle) {
            return None;
        }
        e.used = Instant::now();
        Some(e.handle.clone())
    }

    /// Keeps `handle` for `ino`; returns the handles to close: one it
    /// replaces, and the least recently used beyond [`MOST`].
    pub fn put(&self, ino: u64, handle: H) -> Vec<H> {
        let mut open = self.open.lock();
        let mut out: Vec<H> = open
            .insert(
                ino,
                Entry {
                    handle,
                    used: Instant::now(),
                },
            )
            .map(|e| e.handle)
            .into_iter()
            .collect();
        while open.len() > MOST {
            let Some(oldest) = open.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| *k) else {
                break;
            };
            out.extend(open.remove(&oldest).map(|e| e.handle));
        }
        out
    }

    /// Takes out the handles unused since `now - IDLE`.
    fn expired(&self, now: Instant) -> Vec<H> {
        let mut open = self.open.lock();
        let old: Vec<u64> = open
            .iter()
            .filter(|(_, e)| now.duration_since(e.used) >= IDLE)
            .map(|(k, _)| *k)
            .collect();
        old.iter()
            .filter_map(|k| open.remove(k).map(|e| e.handle))
            .collect()
    }

    /// Handles open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> Arc<u32> {
        Arc::new(7)
    }

    #[test]
    fn at_most_most_and_the_least_recently_used_goes_first() {
        let r = Readers::<Arc<u32>>::default();
        let first = handle();
        assert!(r.put(1, first.clone()).is_empty());
        for ino in 2..=MOST as u64 {
            assert!(r.put(ino, handle()).is_empty());
        }
        // 1 used again: 2 is now the oldest.
        assert!(r.get(1, |_| true).is_some());
        let out = r.put(1000, handle());
        assert_eq!(out.len(), 1);
        assert_eq!(r.len(), MOST);
        assert!(r.get(2, |_| true).is_none());
        assert!(r.get(1, |h| Arc::ptr_eq(h, &first)).is_some());
        // An entry for another inode object is not served.
        assert!(r.get(1, |_| false).is_none());
    }

    #[test]
    fn unused_handles_expire() {
        let r = Readers::<Arc<u32>>::default();
        r.put(1, handle());
        assert!(r.expired(Instant::now()).is_empty());
        assert_eq!(r.expired(Instant::now() + IDLE).len(), 1);
        assert_eq!(r.len(), 0);
    }
}
