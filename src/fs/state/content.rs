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
//! * [`OpenFile::classify`] learns raw or corrected for `stat`: a file
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
//! bytes.

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
/// mount as two requests, the first ending inside a character. When the
/// first piece's last character is incomplete and the old bytes after it
/// (continuation bytes of the character it overwrites) make with it
/// something W cannot store, writing the piece as it is would turn the
/// file raw for good, though the writer never wrote anything W cannot
/// store. So that piece is written without its incomplete last character,
/// whose bytes (at most six) are held here, reported written, and joined
/// with the next write if that continues it; anything else that reads or
/// changes the file first (a read, a write elsewhere, a size change,
/// fallocate, fsync, a close) writes them as they are, with the effect
/// docs/behaviour.md ("The mount") gives them. The kernel's page cache holds them meanwhile, so
/// cached reads see them too.
///
/// An append cut the same way is held too: written as it is, the file
/// would end in half a character until the next piece came, and a crash
/// of the daemon between the two pieces would leave it so (a corrected
/// file that strict decoding refuses). Held at the file's end, the bytes
/// count in the size the mount reports, as they do in the kernel's.
pub struct HeldBytes {
    /// The view offset of the held bytes.
    pub at: u64,
    pub bytes: Vec<u8>,
    /// A read-write descriptor of the file they go to (the handle's own).
    pub file: Arc<File>,
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

/// Held while a file is classified (its head read, maybe a scan), so two
/// requests for one cold file scan it once. The turn is the inode's own:
/// a classification of another file never waits for it (a small file's
/// first `cat` used to wait out a 2 GiB scan whenever the two inode
/// numbers fell on one of a fixed set of locks). What it holds is one
/// entry per file being classified right now.
#[derive(Default)]
pub struct ScanTurns {
    busy: Mutex<std::collections::HashSet<u64>>,
    freed: parking_lot::Condvar,
}

impl ScanTurns {
    /// Waits for `ino`'s turn: until no other caller holds one for it.
    pub fn take(&self, ino: u64) -> ScanTurn<'_> {
        let mut busy = self.busy.lock();
        while busy.contains(&ino) {
            self.freed.wait(&mut busy);
        }
        busy.insert(ino);
        ScanTurn(self, ino)
    }
}

/// One inode's turn to be classified ([`ScanTurns::take`]); the next
/// caller for that inode goes on when it is dropped.
#[must_use]
pub struct ScanTurn<'a>(&'a ScanTurns, u64);

impl Drop for ScanTurn<'_> {
    fn drop(&mut self) {
        let ScanTurn(ScanTurns { busy, freed }, ino) = self;
        let mut set = busy.lock();
        set.remove(ino);
        // Shrink what a burst of classifications grew (months of uptime).
        let len = set.len();
        if set.capacity() > 64 && len < set.capacity() / 4 {
            set.shrink_to(len * 2);
        }
        drop(set);
        freed.notify_all();
    }
}

/// Per-file state while a regular file is open (or being changed by the
/// mount), shared by all its handles; what outlives the open is in the
/// inode's [`KnownContent`].
///
/// Lock order: `content` before the inode's `KnownContent` and a scan turn, and
/// any of these before the [`IndexCache`]'s lock; `KnownContent` and the cache's
/// lock are leaves. The inode table's locks (`inodes`) may be taken under
/// `content`, never the other way round.
pub struct OpenFile {
    /// The content lock. Reads hold it shared; anything that changes the
    /// content or the index (a write, a rebuild) holds it alone.
    pub content: RwLock<Content>,
    /// The size the kernel was last told of the file while it is open:
    /// attribute replies set it, writes through the mount raise it, short
    /// reads lower it; unknown (`u64::MAX`) until then (`fs::inflight`).
    pub told: std::sync::atomic::AtomicU64,
}

impl Default for OpenFile {
    fn default() -> OpenFile {
        OpenFile {
            content: RwLock::default(),
            told: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }
}

impl OpenFile {
    pub fn new() -> OpenFile {
        OpenFile::default()
    }

    /// After a change of metadata only (owner, mode, times, links, xattrs)
    /// made through the mount under the content lock: what was known of
    /// the content under `old` holds under `new` too, so a `touch` or a
    /// `chmod` costs no rescan. Only when the size did not change.
    pub fn carry(
        &self,
        content: &mut Content,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        old: Stamp,
        new: Stamp,
    ) {
        if old == new || old.size != new.size || old.ino != new.ino || old.dev != new.dev {
            return;
        }
        seen.lock().carry(&old, &new);
        // The old stamp's entry moves: it can never match again, and a
        // second reference would make the next write copy the index.
        let cached = cache.remove(&old);
        if let Some((s, index)) = &content.view {
            if *s == old {
                let index = index.clone();
                cache.put(new, index.clone());
                content.view = Some((new, index));
                return;
            }
        }
        if let Some(index) = cached.or_else(|| cache.get(&old)) {
            // (`get` may have brought it from the index database.)
            drop(cache.remove(&old));
            cache.put(new, index);
        }
    }

    /// What the file open as `file` holds now: its stamp and, when it is
    /// corrected, the index built from exactly that stamp; returned with the
    /// content lock held shared, so the mount's own writes cannot change it
    /// meanwhile. A stamp the state does not know (BACKING changed the file
    /// behind the mount's back) is learned first, under the lock held alone:
    /// an index is never applied to bytes it was not built from. `second`
    /// opens a readable descriptor when `file` is write-only.
    pub fn current<'a>(
        &'a self,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        file: &File,
        second: impl Fn() -> io::Result<File>,
    ) -> Result<(
        RwLockReadGuard<'a, Content>,
        Stamp,
        Option<Arc<OffsetIndex>>,
    )> {
        for _ in 0..4 {
            let content = self.content.read();
            let st = crate::sys::fstat(file.as_fd()).map_err(io)?;
            let stamp = Stamp::of(&st);
            if (st.st_size as u64) < DATA_START {
                return Ok((content, stamp, None));
            }
            match &content.view {
                Some((s, index)) if *s == stamp => {
                    let index = index.clone();
                    return Ok((content, stamp, Some(index)));
                }
                None if seen.lock().class(&stamp) == Some(Class::Raw) => {
                    return Ok((content, stamp, None));
                }
                _ => {}
            }
            drop(content);
            let mut content = self.content.write();
            let st = crate::sys::fstat(file.as_fd()).map_err(io)?;
            let stamp = Stamp::of(&st);
            let learned;
            let second_file;
            let reader = match has_magic(file) {
                Ok(m) => {
                    learned = m;
                    file
                }
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    second_file = second().map_err(io)?;
                    learned = has_magic(&second_file).map_err(io)?;
                    &second_file
                }
                Err(e) => return Err(io(e)),
            };
            learn(&mut content, seen, cache, reader, stamp, learned)?;
        }
        crate::ratelog::warn("keeps-changing", "", || {
            "a file keeps changing in BACKING while it is read; the read fails with EIO".into()
        });
        Err(crate::fs::frontend::error::Refused::KeepsChanging.into())
    }

    /// The index kept for `stamp` disagrees with the file's bytes although
    /// the stamp did not move (they were changed in place without moving
    /// ctime, as writes through a shared mapping can; see
    /// `crate::io::Viewed::Stale`): it is forgotten — here, in the cache and
    /// in the index database, whose record is replaced — and built again
    /// from the bytes, under the content lock held alone. `second` opens a
    /// readable descriptor when `file` is write-only.
    pub fn rebuild(
        &self,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        file: &File,
        stamp: Stamp,
        second: impl Fn() -> io::Result<File>,
    ) -> Result<()> {
        let mut content = self.content.write();
        if content.view.as_ref().is_some_and(|(s, _)| *s == stamp) {
            content.view = None;
        }
        drop(cache.remove(&stamp));
        seen.lock().forget();
        let second_file;
        let reader = match has_magic(file) {
            Ok(_) => file,
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                second_file = second().map_err(io)?;
                &second_file
            }
            Err(e) => return Err(io(e)),
        };
        if Stamp::now(reader).map_err(io)? != stamp || !has_magic(reader).map_err(io)? {
            // Changed after all: the next look learns it.
            return Ok(());
        }
        let started = crate::indexdb::now();
        let index = Arc::new(build_index(reader).map_err(io)?);
        if Stamp::now(reader).map_err(io)? == stamp {
            cache.put(stamp, index.clone());
            cache.db.put(&stamp, started, &index);
            seen.lock().remember(
                stamp,
                Class::Corrected {
                    view_len: index.view_len(),
                    lossless: index.lossless(),
                },
            );
            content.view = Some((stamp, index));
        }
        Ok(())
    }
}

/// Records what the file is at `stamp` (under the content lock).
fn learn(
    content: &mut Content,
    seen: &Mutex<KnownContent>,
    cache: &IndexCache,
    reader: &File,
    stamp: Stamp,
    corrected: bool,
) -> Result<()> {
    if corrected {
        let index = index_for(cache, reader, stamp)?;
        seen.lock().remember(
            stamp,
            Class::Corrected {
                view_len: index.view_len(),
                lossless: index.lossless(),
            },
        );
        content.view = Some((stamp, index));
    } else {
        seen.lock().remember(stamp, Class::Raw);
        content.view = None;
    }
    Ok(())
}

/// The class of a regular file (inode number `ino`, what is known of it
/// `seen`) whose backing state is `st`, learned through a fresh descriptor
/// from `open` when not known for its stamp: the head is read (a file
/// starting with a hole is raw, unread), and a corrected file is scanned
/// (holes skipped) unless its index is cached. One classification per file
/// at a time; a second caller waits and takes the first one's answer.
pub fn classify(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
) -> Result<Class> {
    let class = learn_class(seen, ino, cache, st, open, true)?;
    // With `scan`, learn_class always answers.
    Ok(class.unwrap_or(Class::Raw))
}

/// Like `classify`, but never scans: None when only a scan can tell
/// (a corrected file whose index is not cached). Raw files, however
/// large, are answered by their head alone.
pub fn peek(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
) -> Result<Option<Class>> {
    learn_class(seen, ino, cache, st, open, false)
}

fn learn_class(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
    scan: bool,
) -> Result<Option<Class>> {
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) < DATA_START {
        return Ok(Some(Class::Raw));
    }
    let stamp = Stamp::of(st);
    if let Some(c) = seen.lock().class(&stamp) {
        return Ok(Some(c));
    }
    let _one = scan.then(|| cache.turns.take(ino));
    if let Some(c) = seen.lock().class(&stamp) {
        return Ok(Some(c));
    }
    // An index learned from exactly this stamp (in memory, or in the
    // index database) proves the content, magic number included: the
    // file is not even opened.
    if let Some(index) = cache.get(&stamp) {
        let class = Class::Corrected {
            view_len: index.view_len(),
            lossless: index.lossless(),
        };
        seen.lock().remember(stamp, class);
        return Ok(Some(class));
    }
    let file = open().map_err(io)?;
    // `has_magic` reads one page for the head, not a readahead window
    // (`io::read_head`).
    let class = if has_magic(&file).map_err(io)? {
        let index = match cache.get(&stamp) {
            Some(index) => index,
            None if !scan => return Ok(None),
            None => {
                crate::sys::fadvise(&file, libc::POSIX_FADV_SEQUENTIAL);
                index_for(cache, &file, stamp)?
            }
        };
        Class::Corrected {
            view_len: index.view_len(),
            lossless: index.lossless(),
        }
    } else {
        Class::Raw
    };
    seen.lock().remember(stamp, class);
    Ok(Some(class))
}

/// Files larger than this whose class is not known are classified on the
/// scan threads (a scan of a dense file costs about a millisecond per MiB),
/// so the FUSE workers stay free for other requests.
pub const SCAN_INLINE: u64 = 8 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// A few threads for long scans; the request's reply goes with the job.
pub struct ScanPool {
    tx: Mutex<mpsc::Sender<Job>>,
}

impl ScanPool {
    pub fn new(threads: usize) -> io::Result<ScanPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("scan-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    let Ok(job) = job else { break };
                    // A panicking job drops its reply, which answers EIO;
                    // the hook has logged it; the thread goes on.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                })?;
        }
        Ok(ScanPool { tx: Mutex::new(tx) })
    }

    /// Queues `job`; runs it here if the pool is gone.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        if let Err(mpsc::SendError(job)) = self.tx.lock().send(Box::new(job)) {
            job();
        }
    }
}

fn index_cost(index: &OffsetIndex) -> usize {
    index
        .heap_bytes()
        .saturating_add(std::mem::size_of::<OffsetIndex>() + 128)
}

struct CacheEntry {
    index: Arc<OffsetIndex>,
    cost: usize,
    tick: u64,
}

#[derive(Default)]
struct CacheInner {
    map: HashMap<Stamp, CacheEntry>,
    lru: BTreeMap<u64, Stamp>,
    /// The one stamp kept per file (device, inode): a file's newer state
    /// replaces its older one, which nothing asks for again (a file
    /// rewritten in BACKING a thousand times would otherwise keep a
    /// thousand indexes until the bound evicts them).
    by_file: HashMap<(u64, u64), Stamp>,
    used: usize,
    tick: u64,
}

impl CacheInner {
    /// Takes out the entry of `stamp`, with its bookkeeping.
    fn take(&mut self, stamp: &Stamp) -> Option<CacheEntry> {
        let e = self.map.remove(stamp)?;
        self.lru.remove(&e.tick);
        self.used -= e.cost;
        let file = (stamp.dev, stamp.ino);
        if self.by_file.get(&file) == Some(stamp) {
            self.by_file.remove(&file);
        }
        Some(e)
    }
}

/// Indexes of files by stamp, within a memory bound; behind it, the
/// persistent index database (`crate::indexdb`).
pub struct IndexCache {
    limit: usize,
    inner: Mutex<CacheInner>,
    pub db: crate::indexdb::IndexDb,
    /// The mount's counters (lookups and scans count here).
    pub stats: Arc<Stats>,
    /// Whose turn it is to classify each file.
    turns: ScanTurns,
    /// Long scans, reported in the log as they go.
    progress: Arc<crate::fs::observe::progress::Progress>,
}

impl IndexCache {
    #[cfg(test)]
    pub fn new(limit: usize) -> IndexCache {
        IndexCache::with_db(limit, crate::indexdb::IndexDb::none(), Arc::default())
    }

    pub fn with_db(limit: usize, db: crate::indexdb::IndexDb, stats: Arc<Stats>) -> IndexCache {
        IndexCache {
            limit,
            inner: Mutex::new(CacheInner::default()),
            db,
            stats,
            turns: ScanTurns::default(),
            progress: Arc::default(),
        }
    }

    /// The index for this stamp: cached (marked as recently used), or from
    /// the index database (then cached).
    pub fn get(&self, stamp: &Stamp) -> Option<Arc<OffsetIndex>> {
        use crate::fs::observe::stats::Lookup;
        if let Some(index) = self.get_cached(stamp) {
            self.stats.lookup(Lookup::Memory);
            return Some(index);
        }
        let Some(index) = self.db.get(stamp) else {
            self.stats.lookup(Lookup::Miss);
            return None;
        };
        self.stats.lookup(Lookup::Database);
        let index = Arc::new(index);
        self.put(*stamp, index.clone());
        Some(index)
    }

    /// Memory the cached indexes take, and the bound (for `--stats`).
    pub fn usage(&self) -> (usize, usize) {
        (self.inner.lock().used, self.limit)
    }

    fn get_cached(&self, stamp: &Stamp) -> Option<Arc<OffsetIndex>> {
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        let e = c.map.get_mut(stamp)?;
        let old = std::mem::replace(&mut e.tick, tick);
        let index = e.index.clone();
        c.lru.remove(&old);
        c.lru.insert(tick, *stamp);
        Some(index)
    }

    /// Takes the index kept for this stamp out of the cache (not from the
    /// index database).
    pub fn remove(&self, stamp: &Stamp) -> Option<Arc<OffsetIndex>> {
        self.inner.lock().take(stamp).map(|e| e.index)
    }

    /// Forgets what is kept of the file (device `dev`, inode `ino`): it was
    /// deleted through the mount (its last name), so no state of it will be
    /// asked for again, and the memory goes back at once, not when the
    /// bound evicts it (man cutf8fs, RESOURCES).
    pub fn forget_file(&self, dev: u64, ino: u64) {
        let mut c = self.inner.lock();
        if let Some(stamp) = c.by_file.get(&(dev, ino)).copied() {
            c.take(&stamp);
        }
        // A table emptied by a churn gives its memory back too.
        if c.map.capacity() > 64 && c.map.len() < c.map.capacity() / 4 {
            c.map.shrink_to_fit();
            c.by_file.shrink_to_fit();
        }
    }

    /// Keeps an index, evicting the least recently used ones to stay within
    /// the bound. An index larger than the whole bound is not kept.
    pub fn put(&self, stamp: Stamp, index: Arc<OffsetIndex>) {
        let cost = index_cost(&index);
        if cost > self.limit {
            log::debug!("index of {cost} bytes exceeds the cache bound; not cached");
            return;
        }
        let mut c = self.inner.lock();
        c.take(&stamp);
        if let Some(older) = c.by_file.insert((stamp.dev, stamp.ino), stamp) {
            c.take(&older);
            c.by_file.insert((stamp.dev, stamp.ino), stamp);
        }
        c.tick += 1;
        let tick = c.tick;
        c.map.insert(stamp, CacheEntry { index, cost, tick });
        c.lru.insert(tick, stamp);
        c.used += cost;
        while c.used > self.limit {
            let Some((_, victim)) = c.lru.first_key_value().map(|(t, s)| (*t, *s)) else {
                break;
            };
            c.take(&victim);
        }
    }
}

/// The index of the file at `stamp` (`index`, as found in `content` or the
/// cache), taken out of both for a change made under the content lock held
/// alone, so that the change is made in place: with no other holder (a
/// read takes its reference under the content lock, so none is left
/// while the lock is held alone) the index is not copied. A holder the lock does not cover (a `stat`
/// looking in the cache at that moment) costs one copy. Copying it for
/// every write made writes of a file dense in growing units quadratic in
/// its size: its index holds a step per 4 KiB block.
///
/// The caller gives the changed index back with the new stamp (or, when
/// the change failed, under the old one if the file did not change).
pub fn take_index(
    content: &mut Content,
    cache: &IndexCache,
    stamp: &Stamp,
    index: Arc<OffsetIndex>,
) -> OffsetIndex {
    content.view = None;
    drop(cache.remove(stamp));
    Arc::try_unwrap(index).unwrap_or_else(|shared| {
        log::debug!(
            "the index of a file being changed is shared; copied ({} bytes)",
            index_cost(&shared)
        );
        (*shared).clone()
    })
}

/// The index for `file` whose stamp (before reading) is `stamp`: from the
/// cache, or built now and cached if the file did not change meanwhile.
pub fn index_for(cache: &IndexCache, file: &File, stamp: Stamp) -> Result<Arc<OffsetIndex>> {
    if let Some(index) = cache.get(&stamp) {
        return Ok(index);
    }
    let started = crate::indexdb::now();
    let size = stamp.size;
    cache.stats.scan(size);
    let index = if size >= crate::fs::observe::progress::WATCHED {
        use std::os::fd::AsRawFd;
        let name = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_or_else(|_| "a corrected file".into(), |p| p.display().to_string());
        let scan = cache.progress.start(name, size);
        crate::io::build_index_watched(file, scan.done())
    } else {
        build_index(file)
    };
    let index = Arc::new(index.map_err(io)?);
    let after = crate::sys::fstat(std::os::fd::AsFd::as_fd(file)).map_err(io)?;
    if Stamp::of(&after) == stamp {
        cache.put(stamp, index.clone());
        cache.db.put(&stamp, started, &index);
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(n: u64) -> Stamp {
        Stamp {
            dev: 1,
            ino: n,
            size: 0,
            mtime: (0, 0),
            ctime: (0, 0),
        }
    }

    /// An index with growth in every block, so it costs real memory.
    fn dense_index(blocks: usize) -> Arc<OffsetIndex> {
        let mut disk = Vec::new();
        for _ in 0..blocks {
            let mut unit = [0u8; 8];
            let n = cutf8::unit::encode_disk(0x800, &mut unit).unwrap(); // grows by one
            disk.extend_from_slice(&unit[..n]);
            disk.resize(disk.len() + 4096 - n, b'a');
        }
        Arc::new(OffsetIndex::from_bytes(&disk))
    }

    /// A file's classification never waits for another file's, whatever
    /// their inode numbers (the striped locks it replaced made 1 of 64
    /// pairs wait); a second caller for the same file waits its turn.
    #[test]
    fn a_scan_turn_is_the_files_own() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;
        let turns = Arc::new(ScanTurns::default());
        let base = 0x5CA0_0000_0000u64;
        let held = turns.take(base);
        let others = std::thread::spawn({
            let turns = turns.clone();
            move || {
                for ino in base + 1..base + 1000 {
                    drop(turns.take(ino));
                }
            }
        });
        let t = std::time::Instant::now();
        while !others.is_finished() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "another file's classification waited for this one's"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        others.join().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let second = {
            let (done, turns) = (done.clone(), turns.clone());
            std::thread::spawn(move || {
                let _t = turns.take(base);
                done.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !done.load(Ordering::SeqCst),
            "two turns of one file at once"
        );
        drop(held);
        second.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert!(
            !turns.busy.lock().contains(&base),
            "a finished turn is kept"
        );
    }

    #[test]
    fn cache_stays_within_its_bound_and_evicts_least_recently_used() {
        let one = index_cost(&dense_index(64));
        let cache = IndexCache::new(one * 3 + one / 2);
        for n in 0..3 {
            cache.put(stamp(n), dense_index(64));
        }
        assert!(cache.get(&stamp(0)).is_some()); // 0 is now the most recent
        cache.put(stamp(3), dense_index(64));
        assert!(
            cache.get(&stamp(1)).is_none(),
            "least recently used evicted"
        );
        assert!(cache.get(&stamp(0)).is_some());
        assert!(cache.get(&stamp(3)).is_some());
        assert!(cache.inner.lock().used <= one * 3 + one / 2);
    }

    /// One state per file is kept: a newer one replaces the older (which
    /// nothing asks for again), and a file deleted through the mount takes
    /// its index with it; the memory count follows.
    #[test]
    fn a_files_newer_state_replaces_the_older_and_a_deleted_file_goes() {
        let cache = IndexCache::new(1 << 30);
        let old = stamp(7);
        let new = Stamp { size: 9, ..old };
        cache.put(old, dense_index(16));
        cache.put(stamp(8), dense_index(16));
        cache.put(new, dense_index(16));
        assert!(cache.get(&old).is_none(), "the older state kept");
        assert!(cache.get(&new).is_some());
        let one = cache.inner.lock().used / 2;
        cache.forget_file(1, 7);
        assert!(cache.get(&new).is_none());
        assert!(cache.get(&stamp(8)).is_some());
        assert_eq!(cache.inner.lock().used, one);
        cache.forget_file(1, 8);
        let c = cache.inner.lock();
        assert_eq!(
            (c.used, c.map.len(), c.lru.len(), c.by_file.len()),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn an_index_larger_than_the_bound_is_not_kept() {
        let cache = IndexCache::new(64);
        cache.put(stamp(1), dense_index(64));
        assert!(cache.get(&stamp(1)).is_none());
        assert_eq!(cache.inner.lock().used, 0);
    }

    #[test]
    fn an_index_taken_for_a_change_is_the_kept_one_not_a_copy() {
        // As after a write: the open file's state and the cache hold it,
        // and `now` found it.
        let cache = IndexCache::new(1 << 30);
        let mut content = Content::default();
        let kept = dense_index(64);
        assert_eq!(kept.parts().3.len(), 64);
        let steps = kept.parts().3.as_ptr();
        cache.put(stamp(1), kept.clone());
        content.view = Some((stamp(1), kept));
        let found = content.view.as_ref().unwrap().1.clone();
        let owned = take_index(&mut content, &cache, &stamp(1), found);
        assert_eq!(owned.parts().3.as_ptr(), steps, "copied");
        assert!(content.view.is_none());
        assert!(cache.get(&stamp(1)).is_none());
        // Someone else holding it (a stat at that moment): a copy, and the
        // other holder's index is untouched.
        let other = Arc::new(owned);
        let mut copy = take_index(&mut content, &cache, &stamp(1), other.clone());
        assert_ne!(copy.parts().3.as_ptr(), steps);
        assert_eq!(copy, *other);
        copy.apply_tail(0, 0, OffsetIndex::default());
        assert_ne!(copy, *other);
    }

    #[test]
    fn carrying_an_index_to_a_new_stamp_moves_it() {
        let cache = IndexCache::new(1 << 30);
        let st = OpenFile::new();
        let seen = Mutex::new(KnownContent::default());
        let mut content = Content::default();
        let index = dense_index(8);
        cache.put(stamp(1), index.clone());
        content.view = Some((stamp(1), index));
        let mut new = stamp(1);
        new.ctime = (1, 0);
        st.carry(&mut content, &seen, &cache, stamp(1), new);
        assert!(
            cache.get(&stamp(1)).is_none(),
            "the old stamp's entry stays"
        );
        let (s, index) = content.view.take().unwrap();
        assert_eq!(s, new);
        drop(cache.remove(&new));
        assert!(Arc::try_unwrap(index).is_ok(), "a reference left behind");
    }

    /// A stamp of the same inode at another moment.
    fn later(n: i64) -> Stamp {
        let mut s = stamp(1);
        s.mtime = (n, 0);
        s.ctime = (n, 5);
        s
    }

    #[test]
    fn class_and_open_stamps_are_per_stamp() {
        let mut st = KnownContent::default();
        assert_eq!(st.class(&later(1)), None);
        st.remember(later(1), Class::Raw);
        assert_eq!(st.class(&later(1)), Some(Class::Raw));
        assert_eq!(st.class(&later(2)), None);
        assert!(!st.opened_at(later(1)));
        assert!(st.opened_at(later(1)));
        // Learning the class at the same stamp keeps the open.
        st.remember(later(1), Class::Raw);
        assert!(st.opened_at(later(1)));
        assert!(!st.opened_at(later(2)));
        assert_eq!(st.class(&later(1)), None, "one stamp at a time");
        let c = Class::Corrected {
            view_len: 12345,
            lossless: false,
        };
        st.remember(later(2), c);
        assert_eq!(st.class(&later(2)), Some(c));
        assert!(st.opened_at(later(2)), "the open at this stamp is kept");
        st.forget();
        assert_eq!(st.class(&later(2)), None);
        assert!(!st.opened_at(later(2)));
    }

    /// Times a record cannot hold exactly are never recorded, so two
    /// stamps never share one; a metadata change carries the class only.
    #[test]
    fn seen_records_only_what_it_can_hold_exactly() {
        let mut st = KnownContent::default();
        let mut far = stamp(1);
        far.mtime = (i64::MAX / 2, 0);
        st.remember(far, Class::Raw);
        assert_eq!(st.class(&far), None);
        let mut odd = stamp(1);
        odd.ctime = (0, 1_000_000_000);
        assert!(!st.opened_at(odd) && !st.opened_at(odd));
        let huge = Class::Corrected {
            view_len: 1 << 60,
            lossless: true,
        };
        st.remember(later(3), huge);
        assert_eq!(st.class(&later(3)), None);
        st.remember(later(3), Class::Raw);
        st.opened_at(later(3));
        st.carry(&later(3), &later(4));
        assert_eq!(st.class(&later(4)), Some(Class::Raw));
        assert!(!st.opened_at(later(4)), "the page cache is not carried");
        assert!(std::mem::size_of::<KnownContent>() <= 32);
    }
}
