//! What a regular file holds, as the mount shows it: raw bytes, or the view
//! (V, docs/format.md) of a corrected file, served through an offset index.
//!
//! * [`Stamp`] (`crate::io`'s) names one state of a backing file (device,
//!   inode, size, mtime, ctime). Anything the mount knows about a file's content is kept
//!   under the stamp it was learned from and is used only while a fresh
//!   `fstat` gives the same stamp, so a change in BACKING behind the mount's
//!   back is never served stale.
//! * [`KnownContent`] is what is known of an inode's content while the kernel
//!   remembers it, in 32 bytes: the class (raw, or corrected with its view
//!   length) under the stamp it was learned at, and whether the kernel's
//!   page cache was filled at that stamp. It lives in the inode entry.
//! * [`OpenFile`] exists only while the file is open (or changed by the
//!   mount), shared by every handle: the content lock (readers share it;
//!   writers take it alone), the offset index, bytes held back.
//! * [`OpenFile::current`] is how every read and lseek sees the file: a
//!   fresh `fstat` under the content lock, and the index of exactly that
//!   stamp (learned under the lock held alone when BACKING changed the file
//!   behind the mount's back), so an index is never applied to bytes it was
//!   not built from. The read itself (`ops`) checks the stamp again after
//!   reading and reads again if it moved.
//! * [`classify()`] learns raw or corrected for `stat`: a file
//!   whose first data is not at offset 0 (a hole, unwritten extents) is raw
//!   unread; otherwise one page is read (no readahead, which would pull
//!   unwritten extents into the page cache and change SEEK_HOLE's answer);
//!   a corrected file is scanned, holes skipped, once per file at a time.
//!   Files larger than [`SCAN_INLINE`] whose class is not known are
//!   classified on the [`ScanPool`]'s threads, the FUSE reply going with the
//!   job, so a long scan never holds a worker other requests need.
//! * A never-indexed corrected file is sized by that one scan before its
//!   first byte is served, not indexed block by block as a first read goes:
//!   the kernel has the size before it sends the first READ (in the
//!   lookup's reply, and again from the getattr of the permission check at
//!   open, which `default_permissions` makes whenever the attributes are
//!   not valid) and serves reads only up to it. A lower bound told first
//!   and raised later (by `inval_inode` while reads go on) would be what a
//!   `stat` sees meanwhile, and a getattr cannot tell a permission check
//!   from a `stat`; an O_APPEND write lands at the kernel's size without
//!   asking. The scan leaves the file's bytes in the backing file's page
//!   cache, so the reads that follow do not go to the disk again: a cold
//!   `cat` reads the disk once (docs/performance.md, "Mount, reads").
//! * Reads in order are left to the kernel's read-ahead on both sides:
//!   the mount's (`crate::fs::frontend::mount::READ_AHEAD`: requests of 1 MiB, several
//!   in flight) and the backing file's, which fills its page cache in
//!   large pages. The daemon asks the backing file for nothing ahead
//!   itself: `POSIX_FADV_WILLNEED` fills the page cache one 4 KiB page at a
//!   time in the thread that serves the request, which cost a cold
//!   sequential read a quarter of the daemon's time and made it slower,
//!   not faster (docs/performance.md, "Mount, reads").
//! * [`IndexCache`] keeps the indexes of closed files for reuse, within a
//!   global memory bound (`-o index_cache=SIZE`), evicting the least
//!   recently used; an evicted index is rebuilt by one scan when needed.
//!   Behind it, the persistent index database (`crate::indexdb`) answers
//!   for files scanned by an earlier mount or written by `cutf8 migrate`.
//!
//! The index itself (view offset → disk offset) is `crate::view`'s, and
//! reading bytes is `crate::io`'s; this module knows files and stamps, not
//! bytes. Its rooms: `open` ([`OpenFile`]), `classify` (learning the class,
//! scan turns, the scan threads) and `index_cache` ([`IndexCache`]); what
//! is known under a stamp ([`KnownContent`]) is here.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::{mpsc, Arc};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

pub use crate::io::{build_index, has_magic};
use crate::view::OffsetIndex;
pub use crate::view::DATA_START;

use crate::fs::frontend::error::{io, Result};
use crate::fs::observe::stats::Stats;

pub use crate::io::Stamp;

mod classify;
mod index_cache;
mod open;

use classify::learn;
pub use classify::{classify, known, peek, ScanPool, ScanTurns, SCAN_INLINE};
pub use index_cache::{index_for, scan_index, take_index, IndexCache};
pub use open::OpenFile;

/// What a regular file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// No magic number: bytes are shown as they are.
    Raw,
    /// Magic number: shown as V of the bytes after it.
    Corrected {
        view_len: u64,
        /// False for the exception to lossless reading (docs/format.md): the view cannot be
        /// written back, so the file is read-only through the mount.
        lossless: bool,
    },
}

/// The shared state of one open corrected file.
#[derive(Default)]
pub struct Content {
    /// The index of the file's current content, while any handle is open.
    pub view: Option<(Stamp, Arc<OffsetIndex>)>,
    /// Open handles of the file.
    pub open: usize,
    /// Bytes a write held back to join with the next ([`HeldBytes`]).
    pub held: Option<HeldBytes>,
    /// Held bytes that could not be written, for the handles to report.
    pub lost: crate::fs::state::errseq::Lost,
}

/// The kernel cuts a write into pieces at page boundaries when the page it
/// starts in is not cached, so one write(2) of whole text can reach the
/// mount as two requests, the first ending inside a character. Written as
/// it is, that piece's incomplete last character would be half a character
/// in BACKING until the next piece came, and for good if the daemon were
/// killed in between (a corrected file that strict decoding refuses). With
/// the old bytes after it (continuation bytes of the character it
/// overwrites) it may even make something W cannot store, which would turn
/// the file raw for good, though the writer never wrote anything W cannot
/// store. So the piece is written without its incomplete last character,
/// whose bytes (at most six) are held here, reported written, and joined
/// with the next write if that continues it; anything else that reads or
/// changes the file first (a read, a write elsewhere, a size change,
/// fallocate, fsync, a close) writes them as they are, with the effect
/// docs/behaviour.md ("The mount") gives them. The kernel's page cache
/// holds them meanwhile, so cached reads see them too. Held at the file's
/// end (an append), the bytes count in the size the mount reports, as they
/// do in the kernel's.
pub struct HeldBytes {
    /// The view offset of the held bytes.
    pub at: u64,
    pub bytes: Vec<u8>,
    /// A read-write descriptor of the file they go to (the handle's own).
    pub file: Arc<File>,
    /// Held by an O_APPEND write: they go to the file's end, wherever it
    /// is when they are written (`at` is where the write before them
    /// landed, or `u64::MAX` when that is not known).
    pub append: bool,
}

/// What is known of one inode's content, under the stamp it was learned
/// at: its class, and whether an open at that stamp filled the kernel's
/// page cache (so the next open may keep it). 32 bytes: the stamp without
/// device and inode (the entry's own), times as nanoseconds, the class in
/// flag bits beside the view length. A stamp whose times do not fit is not
/// recorded (nothing is known of it), so no two stamps ever share a record.
#[derive(Clone, Copy, Default)]
pub struct KnownContent {
    size: u64,
    mtime: i64,
    ctime: i64,
    what: u64,
}

/// `KnownContent::what`: a stamp is recorded.
const STAMPED: u64 = 1 << 63;
/// Its class is known.
const CLASSED: u64 = 1 << 62;
const CORRECTED: u64 = 1 << 61;
const LOSSLESS: u64 = 1 << 60;
/// An open at this stamp filled the kernel's page cache.
const OPENED: u64 = 1 << 59;
/// The view length (of a corrected file).
const VIEW_LEN: u64 = OPENED - 1;

fn nanos((sec, nsec): (i64, i64)) -> Option<i64> {
    if !(0..1_000_000_000).contains(&nsec) {
        return None;
    }
    sec.checked_mul(1_000_000_000)?.checked_add(nsec)
}

impl KnownContent {
    /// The record of `stamp` with nothing known yet (None: not recordable).
    fn at(stamp: &Stamp) -> Option<KnownContent> {
        Some(KnownContent {
            size: stamp.size,
            mtime: nanos(stamp.mtime)?,
            ctime: nanos(stamp.ctime)?,
            what: STAMPED,
        })
    }

    fn is(&self, stamp: &Stamp) -> bool {
        self.what & STAMPED != 0
            && KnownContent::at(stamp)
                .is_some_and(|s| (s.size, s.mtime, s.ctime) == (self.size, self.mtime, self.ctime))
    }

    /// The class known for exactly this stamp, if any.
    pub fn class(&self, stamp: &Stamp) -> Option<Class> {
        if !self.is(stamp) || self.what & CLASSED == 0 {
            return None;
        }
        Some(if self.what & CORRECTED != 0 {
            Class::Corrected {
                view_len: self.what & VIEW_LEN,
                lossless: self.what & LOSSLESS != 0,
            }
        } else {
            Class::Raw
        })
    }

    /// Records `class` for `stamp` (a record of another stamp goes).
    pub fn remember(&mut self, stamp: Stamp, class: Class) {
        let what = match class {
            Class::Raw => CLASSED,
            Class::Corrected { view_len, .. } if view_len > VIEW_LEN => {
                *self = KnownContent::default();
                return;
            }
            Class::Corrected { view_len, lossless } => {
                CLASSED | CORRECTED | view_len | if lossless { LOSSLESS } else { 0 }
            }
        };
        if !self.is(&stamp) {
            *self = match KnownContent::at(&stamp) {
                Some(s) => s,
                None => return,
            };
        }
        self.what = STAMPED | (self.what & OPENED) | what;
    }

    /// Records an open at `stamp`; true when the previous open saw the same
    /// stamp (the kernel's cached pages are still right).
    pub fn opened_at(&mut self, stamp: Stamp) -> bool {
        if self.is(&stamp) {
            let before = self.what & OPENED != 0;
            self.what |= OPENED;
            return before;
        }
        *self = KnownContent::at(&stamp).unwrap_or_default();
        if self.what & STAMPED != 0 {
            self.what |= OPENED;
        }
        false
    }

    /// Forgets everything (after the mount itself changed the content).
    pub fn forget(&mut self) {
        *self = KnownContent::default();
    }

    /// After a change of metadata only: the class known under `old` holds
    /// under `new` too (the page cache is not carried: the next open reads
    /// afresh, as after any change).
    fn carry(&mut self, old: &Stamp, new: &Stamp) {
        match self.class(old) {
            Some(c) => {
                *self = KnownContent::default();
                self.remember(*new, c);
            }
            None if self.is(old) => self.forget(),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests;
