//! Reads in flight against the kernel's invalidations of their inode: no
//! short read is answered that the kernel would turn into zeros.
//!
//! **Why.** A READ answered with fewer bytes than it asked for says the
//! file ends there. The kernel takes that as the file's new, smaller size
//! only if no invalidation of the inode (`invalidate`: the watch's, for a
//! change in BACKING, or a handler's) came between its sending the READ
//! and the answer: the READ carries the inode's attribute version, and an
//! invalidation moves it on. Otherwise it keeps the size it had, fills the
//! pages past the answer with zeros, marks them up to date, and the
//! `read(2)` waiting for them returns those zeros. So a file truncated in
//! BACKING while a reader of the mount reads on would show zeros that no
//! version of the file ever held (tests/mount_backing_changes.rs,
//! `pread_far_past_a_truncation_in_backing`: 5 runs in 30 under load
//! before this).
//!
//! **How.** Three rules:
//! * The watch waits, before it drops an inode's contents, until no read
//!   of the inode is being served (at most [`SETTLE`]): a READ the daemon
//!   has taken from the queue is answered first, under the version it was
//!   sent with ([`Reads::settle`], from `Invalidator::contents`).
//! * A READ still in the kernel's queue then, or one that took longer, is
//!   answered after the invalidation. The daemon cannot see when the
//!   kernel sent a READ, so a short READ of an inode received within
//!   [`SUSPECT`] of an invalidation of it (or during one) is not answered
//!   short: it fails with EINTR, once per range of the file. The kernel's
//!   read-ahead drops a failure and asks for the page again
//!   (`read_folio`), a READ sent after the invalidation: it falls within a
//!   range already failed, so it is answered as it is, and the kernel
//!   keeps the smaller size.
//! * A short answer the kernel takes moves the version on as well. Short
//!   answers of one inode are weighed and sent one at a time
//!   ([`Reads::answering_short`]), and one that lowers the size the kernel
//!   was last told (`OpenFile::told`: attribute replies set it, writes
//!   raise it, short answers lower it) makes the short READs then in flight
//!   suspect in turn ([`Reads::lowered`]).
//!
//! A short answer that ends at or past the size the kernel was last told
//! is never suspect: the kernel shows nothing past its size. Nor is a
//! read through a direct-I/O handle (O_DIRECT, or a passthrough writer's):
//! it has no page cache to fill with zeros. Should a caller see the EINTR
//! itself (a page read that did not come from read-ahead), reading again
//! is the answer, as for a signal; Rust's, Python's and coreutils' readers
//! do so unasked. Left: two readers of one file racing a truncation in
//! BACKING (one's READ still queued while the other's short answer moves
//! the version on); man cutf8fs(1), CACHING, and the ignored test
//! `two_readers_racing_truncations_in_backing_see_one_version_and_no_error`.
//!
//! **Bounded.** Counters and locks in 64 slots of inode numbers, and one
//! entry per inode invalidated within [`SUSPECT`] (expired ones are swept
//! out as new ones come, once their count doubles, and the memory given
//! back), each holding at most [`RANGES`] failed ranges; a READ that finds
//! no room is answered as it is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The longest the watch waits for reads in flight.
const SETTLE: Duration = Duration::from_millis(100);

/// How long after an invalidation a READ may still have been sent before
/// it: the time a READ can wait in the kernel's queue for a worker, under
/// load. Longer costs only a second round trip for a file's last page.
pub const SUSPECT: Duration = Duration::from_secs(2);

/// Failed ranges kept per inode since its last invalidation.
pub const RANGES: usize = 64;

/// Entries past which the expired ones are swept out.
const SWEEP: usize = 1024;

/// Reads the daemon is serving, and recent invalidations.
pub struct Reads {
    /// Reads being served, per slot of inode numbers.
    serving: [AtomicU32; 64],
    /// Short answers being decided and sent, one at a time per slot.
    answering: [Mutex<()>; 64],
    /// Inodes invalidated within [`SUSPECT`].
    recent: Mutex<RecentInvalidations>,
}

/// The recent invalidations, and the count at which expired ones are
/// next swept out (twice the live ones after a sweep, so that invalidating
/// every inode the kernel holds, after lost events, costs a sweep per
/// doubling, not one per inode).
struct RecentInvalidations {
    map: HashMap<u64, Invalidated>,
    sweep_at: usize,
}

/// One inode's last invalidations.
struct Invalidated {
    /// The last one sent to the kernel (`invalidate`).
    at: Option<Instant>,
    /// The last short answer that lowered the kernel's size: it moved the
    /// version on too, when the kernel took it.
    lowered: Option<Instant>,
    /// Ranges `[start, end)` whose short READ failed since either, so the
    /// kernel's second READ of them is answered.
    failed: Vec<(u64, u64)>,
}

impl Invalidated {
    fn last(&self) -> Option<Instant> {
        self.at.max(self.lowered)
    }
}

impl Default for Reads {
    fn default() -> Reads {
        Reads {
            serving: std::array::from_fn(|_| AtomicU32::new(0)),
            answering: std::array::from_fn(|_| Mutex::new(())),
            recent: Mutex::new(RecentInvalidations {
                map: HashMap::new(),
                sweep_at: SWEEP,
            }),
        }
    }
}

/// A read being served, until dropped (after its reply is sent).
pub struct Reading<'a> {
    slot: &'a AtomicU32,
    ino: u64,
    since: Instant,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.slot.fetch_sub(1, Ordering::Release);
    }
}

impl Reads {
    fn slot(&self, ino: u64) -> &AtomicU32 {
        &self.serving[(ino % 64) as usize]
    }

    /// Counts a read of `ino` until the guard is dropped.
    pub fn enter(&self, ino: u64) -> Reading<'_> {
        let slot = self.slot(ino);
        slot.fetch_add(1, Ordering::Acquire);
        Reading {
            slot,
            ino,
            since: Instant::now(),
        }
    }

    /// Held while a short answer to a READ of `ino` is weighed
    /// ([`Reads::refuse_short`]) and sent: an answer that lowers the
    /// kernel's size moves the inode's attribute version on when the
    /// kernel takes it, within the reply's write, so the next short READ
    /// of the inode is weighed only once that happened.
    pub fn answering_short(&self, ino: u64) -> parking_lot::MutexGuard<'_, ()> {
        self.answering[(ino % 64) as usize].lock()
    }

    /// Waits until no read of `ino`'s slot is being served (or [`SETTLE`]).
    pub fn settle(&self, ino: u64) {
        let slot = self.slot(ino);
        let end = Instant::now() + SETTLE;
        while slot.load(Ordering::Acquire) != 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// `ino` is about to be invalidated: its short READs received within
    /// [`SUSPECT`] from now, or in flight now, are suspect.
    pub fn invalidating(&self, ino: u64) {
        self.note(ino, Instant::now(), false);
    }

    /// A short answer to a READ of `ino` lowered the kernel's size (under
    /// [`Reads::answering_short`]): the READs of it in flight now are
    /// suspect. One received later was sent after it, as far as one
    /// reader goes; another reader's, still queued, is not caught (the
    /// limit man cutf8fs(1) names).
    pub fn lowered(&self, ino: u64) {
        self.note(ino, Instant::now(), true);
    }

    fn note(&self, ino: u64, now: Instant, lowered: bool) {
        let mut guard = self.recent.lock();
        let recent = &mut *guard;
        if recent.map.len() >= recent.sweep_at {
            recent.map.retain(|_, i| {
                i.last()
                    .is_some_and(|t| now.saturating_duration_since(t) < SUSPECT)
            });
            let live = recent.map.len();
            if recent.map.capacity() > 4 * live + SWEEP {
                recent.map.shrink_to(2 * live + SWEEP);
            }
            recent.sweep_at = (2 * live).max(SWEEP);
        }
        let e = recent.map.entry(ino).or_insert(Invalidated {
            at: None,
            lowered: None,
            failed: Vec::new(),
        });
        if lowered {
            e.lowered = Some(now);
        } else {
            e.at = Some(now);
        }
        e.failed.clear();
    }

    /// Whether the READ `r` at `offset` for `size` bytes, about to be
    /// answered with `got` bytes, must fail instead (see the module's
    /// notes). `told`: the size the kernel was last told of the file; an
    /// answer that ends there or past it is kept whatever the kernel's
    /// version, as the kernel shows nothing past its size. `direct`:
    /// whether it came through a handle without page cache (asked only of
    /// a READ that would fail).
    pub fn refuse_short(
        &self,
        r: &Reading<'_>,
        (offset, size): (u64, u32),
        (got, told): (usize, u64),
        direct: impl FnOnce() -> bool,
    ) -> bool {
        if got >= size as usize || offset + got as u64 >= told {
            return false;
        }
        let mut recent = self.recent.lock();
        let Some(inv) = recent.map.get_mut(&r.ino) else {
            return false;
        };
        let now = Instant::now();
        let after_invalidation = inv
            .at
            .is_some_and(|at| now.saturating_duration_since(at) < SUSPECT || at >= r.since);
        let during_lowering = inv.lowered.is_some_and(|at| at >= r.since);
        if !after_invalidation && !during_lowering {
            return false;
        }
        if inv.failed.iter().any(|&(s, e)| s <= offset && offset < e) {
            return false;
        }
        if inv.failed.len() >= RANGES || direct() {
            return false;
        }
        inv.failed.push((offset, offset + u64::from(size)));
        log::debug!(
            "inode {}: a short read at {offset} of {size} bytes ({got} read), perhaps sent \
             before an invalidation, fails once, so the kernel asks again",
            r.ino
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_read_after_an_invalidation_fails_once_per_range() {
        let reads = Reads::default();
        let r = reads.enter(7);
        assert!(
            !reads.refuse_short(&r, (0, 4096), (10, u64::MAX), || false),
            "nothing invalidated"
        );
        drop(r);
        reads.invalidating(7);
        let r = reads.enter(7);
        assert!(
            !reads.refuse_short(&r, (0, 4096), (4096, u64::MAX), || false),
            "a whole read"
        );
        assert!(
            !reads.refuse_short(&r, (0, 4096), (10, u64::MAX), || true),
            "direct I/O"
        );
        assert!(
            reads.refuse_short(&r, (8192, 16384), (0, u64::MAX), || false),
            "first short read"
        );
        assert!(
            !reads.refuse_short(&r, (12288, 4096), (0, u64::MAX), || false),
            "the kernel asks again"
        );
        assert!(
            reads.refuse_short(&r, (65536, 4096), (0, u64::MAX), || false),
            "another range"
        );
        assert!(
            !reads.refuse_short(&r, (131072, 4096), (10, 131072), || false),
            "the kernel's size ends before this page: nothing past it shows"
        );
        assert!(
            !reads.refuse_short(&r, (126976, 4096), (10, 126986), || false),
            "the kernel's size ends within what is read"
        );
        assert!(
            reads.refuse_short(&r, (126976, 4096), (10, 200000), || false),
            "the kernel's size is past it"
        );
        drop(r);
        let other = reads.enter(8);
        assert!(
            !reads.refuse_short(&other, (0, 4096), (0, u64::MAX), || false),
            "another inode"
        );
    }

    #[test]
    fn an_invalidation_during_a_read_makes_it_suspect_and_forgets_failed_ranges() {
        let reads = Reads::default();
        reads.invalidating(3);
        let r = reads.enter(3);
        assert!(reads.refuse_short(&r, (0, 4096), (0, u64::MAX), || false));
        assert!(!reads.refuse_short(&r, (0, 4096), (0, u64::MAX), || false));
        reads.invalidating(3);
        assert!(
            reads.refuse_short(&r, (0, 4096), (0, u64::MAX), || false),
            "a new invalidation"
        );
    }

    #[test]
    fn a_lowering_answer_makes_only_reads_in_flight_suspect() {
        let reads = Reads::default();
        let in_flight = reads.enter(9);
        std::thread::sleep(Duration::from_millis(1));
        reads.lowered(9);
        let later = reads.enter(9);
        assert!(
            reads.refuse_short(&in_flight, (0, 4096), (0, 1 << 20), || false),
            "in flight while another answer lowered the size"
        );
        assert!(
            !reads.refuse_short(&later, (8192, 4096), (0, 1 << 20), || false),
            "received after it"
        );
    }

    #[test]
    fn failed_ranges_are_bounded() {
        let reads = Reads::default();
        reads.invalidating(1);
        let r = reads.enter(1);
        for i in 0..RANGES as u64 {
            assert!(reads.refuse_short(&r, (i * 4096, 4096), (0, u64::MAX), || false));
        }
        assert!(
            !reads.refuse_short(&r, (1 << 40, 4096), (0, u64::MAX), || false),
            "no room: answered"
        );
    }

    #[test]
    fn expired_entries_are_swept_and_their_memory_given_back() {
        let reads = Reads::default();
        let t0 = Instant::now();
        for ino in 0..(SWEEP as u64 * 8) {
            reads.note(ino, t0, false);
        }
        assert_eq!(
            reads.recent.lock().map.len(),
            SWEEP * 8,
            "live entries stay"
        );
        let later = t0 + SUSPECT * 2;
        for ino in 0..SWEEP as u64 + 1 {
            reads.note(1 << 32 | ino, later, false);
        }
        let recent = reads.recent.lock();
        assert_eq!(recent.map.len(), SWEEP + 1, "only the live ones stay");
        assert!(
            recent.map.capacity() <= 4 * recent.map.len() + SWEEP,
            "{}",
            recent.map.capacity()
        );
    }

    #[test]
    fn invalidating_every_inode_at_once_stays_linear() {
        // After lost events the watch invalidates every inode the kernel
        // holds: a sweep per invalidation would make that quadratic.
        let reads = Reads::default();
        let t = Instant::now();
        for ino in 0..200_000u64 {
            reads.invalidating(ino);
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "200 000 invalidations took {:?}",
            t.elapsed()
        );
        assert_eq!(reads.recent.lock().map.len(), 200_000);
    }

    #[test]
    fn settle_returns_once_reads_end() {
        let reads = Reads::default();
        let r = reads.enter(5);
        let t = Instant::now();
        reads.settle(5);
        assert!(t.elapsed() >= SETTLE, "waited while a read was served");
        drop(r);
        let t = Instant::now();
        reads.settle(5);
        assert!(t.elapsed() < SETTLE, "no read: no wait");
    }
}
