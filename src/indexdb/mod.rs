//! The persistent index database: what a scan of a corrected file learned
//! (its offset index, hence its view length and whether it is lossless),
//! kept across mounts so that a cold `ls -l`, `stat` or `find -size` does
//! not read every byte of every file again.
//!
//! Called by `fs` (looked up when the in-memory index cache misses — before
//! the file is even opened — and stored after a scan; opened once when the
//! mount starts) and by `migrate` ([`record_written`]: the files it just
//! converted, so the first mount after a migration is warm). Knows files
//! only by their [`Stamp`] and descriptors, nothing of FUSE.
//!
//! # Never stale
//!
//! A record is keyed by `(st_dev, st_ino)` and holds the exact state it was
//! learned from: size, mtime and ctime to the nanosecond. It is used only
//! when a fresh `fstat` gives that state exactly. It is stored only when the
//! scan started more than [`RACY_MARGIN`] after the file's ctime (git's
//! "racy timestamp" rule): the kernel stamps a change with a coarse clock
//! (a tick of a few ms, 1–2 s on some filesystems), so a write landing in
//! the same tick as the state the scan saw would leave size, mtime and
//! ctime unchanged; once the tick of the recorded ctime is past, any change
//! to content or metadata sets ctime to a later value, which no user can
//! choose (only mtime and atime can be set). Hence:
//!
//! * rewrite in place, same size, even within the same second, or followed
//!   by `touch -r` restoring the mtime: ctime moves, the record no longer
//!   matches;
//! * rename, link, unlink of another name: each sets the file's ctime;
//!   the record follows the inode, not a name, so every hard link shares
//!   it and a file renamed over another is a different inode;
//! * delete and re-create with the inode number reused: the new file's
//!   ctime is its creation time, after the scan, so later than the
//!   recorded one (which was older than the scan by the margin);
//! * restore from a backup (tar, rsync) with identical sizes and mtimes:
//!   the restored files have new ctimes (and usually new inodes);
//! * a clock stepped back: a record is only stored when the scan's clock
//!   is past ctime by the margin, so a clock that was wrong only delays
//!   storing. A stale match needs the clock set back and a rewrite of the
//!   same size landing on the recorded ctime to the nanosecond — the same
//!   exposure the in-memory cache (and git, and rsync) have.
//! * a database from another BACKING (copied, or `-o index_db=` pointing
//!   at it): the database records BACKING root's `(st_dev, st_ino)`; a
//!   different one empties it, with one log line.
//!
//! What no stat can see: bytes changed in place through a shared mapping
//! (`mmap` with `MAP_SHARED`). The kernel stamps mtime and ctime only at
//! the first write fault on a page, and again only after writeback has
//! cleaned the page (on tmpfs, never), so later writes through the mapping
//! change the content under the same state — the limit git documents for
//! its own index ("racy git"). A record made between such writes describes
//! bytes that are no longer there. It can only misplace the file's own
//! bytes: a read decodes the bytes that are there, never beyond the file
//! and never another file's, and checks what the index promises where
//! that is cheap (the first whole block it decodes; the view's end when
//! it reaches it: `crate::view::Reading::stale`); a mismatch has the mount
//! scan the file again and replace the record (`rebuild` in
//! `crate::fs::state::content`). Until a read meets the mismatch, `stat` shows the
//! size the record says.
//!
//! # Where, and who may write it
//!
//! By default `BACKING/.cutf8fs-index/index.sqlite`, so every machine that
//! mounts the archive benefits; the directory is hidden by the mount and
//! skipped by migrate (`trust::is_internal`). It is opened like the
//! journal (`place`): relative to BACKING's root descriptor, `O_NOFOLLOW`,
//! owned by the daemon's user, not writable by group or others, on BACKING's
//! filesystem; the file ours, regular, one link, and empty or an SQLite
//! file with our application id (`store`): the owner of BACKING's root can
//! rename a directory of root's there, and a file of root's in it under the
//! database's name (any other file, or another program's SQLite database)
//! is left as it is, never emptied to rebuild. SQLite opens the file and
//! its companions (`-wal`, `-shm`, `-journal`) as `/proc/self/fd/N/NAME`,
//! N the directory checked once, through a VFS that never resolves that
//! name again (`crate::sys::sqlite`): a rename of the directory between two
//! of SQLite's opens cannot lead it elsewhere. When BACKING is read-only
//! (`-o ro` too) or that place fails a check (say BACKING's owner planted a
//! symlink or a directory of theirs there), the database lives in a cache
//! directory instead (`/var/cache/cutf8fs` for root, else
//! `$XDG_CACHE_HOME/cutf8fs` or `~/.cache/cutf8fs`), one file per BACKING.
//! `-o index_db=PATH` names the file, `-o index_db=none` keeps indexes in
//! memory only.
//!
//! # Several daemons at the same moment: why SQLite
//!
//! Every daemon of a BACKING (a second mount, another host over shared
//! storage, a new daemon while the old one is still exiting) reads and
//! writes the one database at the same moment, and nothing one learned is
//! dropped because another was using it. Until version 3 the store was
//! redb, which lets one process at a time hold the file: a second mount
//! listing at the same moment did without it (4.1–8.4× as long as one
//! mount alone, reading half the tree's bytes to size files), a batch of
//! node records refused was dropped (file handles answered ESTALE after a
//! restart), and the holder kept it open for writing. The candidates, and
//! why this one:
//!
//! * **SQLite** (`rusqlite`, built in): many readers and one writer
//!   across processes. On a local filesystem in WAL mode readers never
//!   wait and a writer waits for another's commit (`busy_timeout`) instead
//!   of giving up; on a network or FUSE filesystem (no shared memory
//!   between hosts) the rollback journal, which needs only POSIX locks,
//!   and readers wait out a commit (`store::local`). Damage is an error
//!   code, never a crash. Its one hazard here, opening companions by path
//!   in a tree the daemon does not trust, is closed by the pinned VFS.
//! * LMDB (`heed`): as concurrent, but a damaged file (a bad page
//!   pointer in a memory map) can crash the daemon, its map size is fixed
//!   in advance, and it never works over NFS.
//! * Per-daemon files others read: a daemon would be cold on what the
//!   others learned until it merged them; merging is the database again.
//! * `trusted.` extended attributes on each file: unforgeable by users
//!   and kept with the file, but setting one changes the file's ctime,
//!   which is exactly what a record is checked against ("Never stale"),
//!   node records have no file to live on, and NFS has no `trusted.`.
//!
//! Measured with two mounts of one BACKING listing at the same moment
//! (`scripts/bench-mount.sh`, docs/performance.md): see the figure there.
//!
//! A daemon holds a connection only while it uses it (`pool`: closed
//! after a second idle), so an idle daemon holds nothing of the database
//! open: BACKING's filesystem can be remounted read-only, or unmounted as
//! soon as the view is. A daemon that is closing commits everything it
//! queued before it ends, and a daemon starting meanwhile that misses a
//! node record waits for that (`closing`).
//!
//! # Never worse than without it
//!
//! Missing: created with the first record (an index, or a node record —
//! `nodes`, which the first lookup of a mount stores). Damaged (found when
//! a mount starts, which checks it): one log line, removed and made
//! afresh; damage found later turns it off for the rest of that mount. A
//! file that is not ours is left as it is. A full or failing disk: one
//! log line, memory only, the file kept. No failure here fails a mount or
//! a request.
//!
//! Writes never wait on the disk in a request: stored records go through a
//! bounded queue to one writer thread, which commits them in batches; a
//! full queue drops an index record (it costs only speed) and makes a node
//! record wait (bounded: a lost one is a handle that no longer opens). A
//! record used a week or more after it was last dated is dated again; at
//! unmount, records unused for [`MAX_AGE_DAYS`] are collected, and beyond
//! [`MAX_RECORDS`] the least recently used go, so the file stays bounded
//! however many files come and go. One record per inode: a file that
//! changes replaces its record.

mod batch;
mod cache;
mod closing;
mod finder;
mod nodes;
mod place;
mod pool;
mod record;
mod store;
mod trees;
mod writer;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use rusqlite::OptionalExtension;

use crate::io::Stamp;
use crate::view::OffsetIndex;
pub use batch::Batch;
pub use cache::Limits as CacheLimits;
use finder::{Finder, Found};
pub use nodes::node_current;
pub use place::{CACHE_DIR_ENV, DIR};
use pool::Pool;
use store::Failed;
pub use trees::{record_written, remove_unused, Removal};

/// A scan must start this long after the file's last change (ctime) for
/// its result to be stored: more than any filesystem's timestamp tick
/// (FAT's 2 s is the coarsest in use).
pub const RACY_MARGIN: Duration = Duration::from_millis(2100);
/// The environment variable that sets the margin in milliseconds instead
/// (for tests: a margin they set is one they can wait out exactly).
pub const RACY_MARGIN_ENV: &str = "CUTF8FS_RACY_MARGIN_MS";
/// Records unused for this long are collected at unmount.
pub const MAX_AGE_DAYS: u32 = 90;
/// At most this many records; beyond, the least recently used go.
pub const MAX_RECORDS: u64 = 4 << 20;

/// `cutf8 migrate` records written files at least this large.
pub const MIGRATE_MIN: u64 = 64 << 10;

/// Records waiting for the writer thread.
const QUEUE: usize = 8192;
/// Longest wait before a batch is committed.
const BATCH_WAIT: Duration = Duration::from_millis(300);
/// How long a node record waits for room in a full queue before it is
/// dropped (the writer is then stuck on a disk that does not answer).
const NODE_QUEUE_WAIT: Duration = Duration::from_secs(10);

/// Where the database is, from `-o index_db=`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Location {
    /// `BACKING/.cutf8fs-index/`, or the cache directory.
    #[default]
    Default,
    /// `none`: memory only.
    None,
    /// `PATH`: this file.
    File(PathBuf),
}

impl Location {
    /// Parses the value of `-o index_db=`: `none` or an absolute path (the
    /// daemon may change directory before it opens it).
    pub fn parse(v: &str) -> Option<Location> {
        match v {
            "none" => Some(Location::None),
            p if Path::new(p).is_absolute() && !p.ends_with('/') => {
                Some(Location::File(PathBuf::from(p)))
            }
            _ => None,
        }
    }
}

enum Op {
    /// An index record.
    Put((u64, u64), Vec<u8>),
    /// A node record (`nodes`).
    Node(u64, Vec<u8>),
}

/// What lookups and the writer share.
struct Shared {
    pool: Pool,
    /// Records sent and not yet taken care of by the writer.
    queued: AtomicUsize,
    /// Of those, the node records, by inode number (how many of each):
    /// `IndexDb::not_pending`.
    nodes_queued: Mutex<std::collections::HashMap<u64, u32>>,
}

impl Shared {
    /// The writer took care of `n` records (committed or given up on),
    /// among them the node records of `nodes`.
    fn done(&self, n: usize, nodes: impl Iterator<Item = u64>) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
        self.nodes_done(nodes);
    }

    /// A node record of each of `nodes` is no longer on its way.
    fn nodes_done(&self, nodes: impl Iterator<Item = u64>) {
        let mut q = self.nodes_queued.lock();
        for ino in nodes {
            if let std::collections::hash_map::Entry::Occupied(mut e) = q.entry(ino) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
        if q.is_empty() && q.capacity() > 1024 {
            q.shrink_to_fit();
        }
    }
}

struct Open {
    shared: Arc<Shared>,
    tx: Mutex<Option<SyncSender<Op>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// The index database of one mount; see the module doc. Every method is
/// infallible: without a database they do nothing.
pub struct IndexDb {
    inner: Option<Open>,
}

/// Seconds and nanoseconds since the epoch, now.
pub fn now() -> (i64, i64) {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
        Err(_) => (0, 0),
    }
}

fn day_of(t: (i64, i64)) -> u32 {
    u32::try_from(t.0.max(0) / 86_400).unwrap_or(u32::MAX)
}

/// The process's margin: [`RACY_MARGIN_ENV`] if set to a number of
/// milliseconds, else [`RACY_MARGIN`]. Read once.
pub fn racy_margin() -> Duration {
    static MARGIN: OnceLock<Duration> = OnceLock::new();
    *MARGIN.get_or_init(|| {
        std::env::var(RACY_MARGIN_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(RACY_MARGIN, Duration::from_millis)
    })
}

/// Whether a scan that started at `started` may be stored for a file whose
/// ctime is `ctime` (see "Never stale").
pub fn settled(ctime: (i64, i64), started: (i64, i64)) -> bool {
    let to_ns = |t: (i64, i64)| i128::from(t.0) * 1_000_000_000 + i128::from(t.1);
    to_ns(started) - to_ns(ctime) > racy_margin().as_nanos() as i128
}

/// Tidies the cache directory of index databases (`cache`): run by every
/// daemon as it starts, before it opens its own database (that of the
/// BACKING whose root descriptor is `root`, which is kept). Never fails.
pub fn tidy_cache(root: BorrowedFd<'_>, limits: CacheLimits) {
    let backing = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd())).ok();
    cache::tidy(limits, backing.as_deref());
}

impl IndexDb {
    /// No database: indexes live in memory only.
    pub fn none() -> IndexDb {
        IndexDb { inner: None }
    }

    /// The database of the BACKING whose root descriptor is `root`, at
    /// `loc`. Never fails: whatever goes wrong is logged in one line and
    /// the mount goes on without (or with a fresh) database.
    pub fn open(root: BorrowedFd<'_>, loc: &Location, read_only: bool) -> IndexDb {
        if *loc == Location::None {
            log::info!("index database: none (-o index_db=none); indexes kept in memory only");
            return IndexDb::none();
        }
        let (Ok(root_st), Ok(root)) = (nix::sys::stat::fstat(root), root.try_clone_to_owned())
        else {
            return IndexDb::none();
        };
        let backing = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd()))
            .unwrap_or_else(|_| PathBuf::from("BACKING"));
        let fs_ro = nix::sys::statvfs::fstatvfs(&root)
            .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
            .unwrap_or(false);
        let finder = Finder {
            root,
            root_dev: root_st.st_dev,
            root_id: (root_st.st_dev, root_st.st_ino),
            backing,
            loc: loc.clone(),
            ro_mount: read_only,
            ro_fs: fs_ro,
        };
        let path = finder.backing.join(DIR).join(place::FILE);
        let (db, path) = match first_open(&finder) {
            Ok(Some(db)) => {
                let p = db.pin().path().to_path_buf();
                (Some(db), p)
            }
            Ok(None) => (None, path),
            Err(()) => return IndexDb::none(),
        };
        let shared = Arc::new(Shared {
            pool: Pool::new(finder, path, db),
            queued: AtomicUsize::new(0),
            nodes_queued: Mutex::default(),
        });
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let w = shared.clone();
        let writer = std::thread::Builder::new()
            .name("index-db".into())
            .spawn(move || writer::writer(&w, rx));
        let Ok(writer) = writer else {
            return IndexDb::none();
        };
        IndexDb {
            inner: Some(Open {
                shared,
                tx: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(writer)),
            }),
        }
    }

    /// Whether there is a database, open or to be created with the first
    /// record.
    fn is_usable(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether the database can be read now (it exists and is usable).
    pub fn is_open(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|o| o.shared.pool.read(|_| Ok(Some(()))).is_some())
    }

    /// The index stored for exactly `state`, if any.
    pub fn get(&self, state: &Stamp) -> Option<OffsetIndex> {
        let pool = &self.inner.as_ref()?.shared.pool;
        let key = (state.dev, state.ino);
        let bytes = pool.read(|db| {
            db.conn
                .prepare_cached("SELECT value FROM records WHERE dev = ?1 AND ino = ?2")?
                .query_row([key.0 as i64, key.1 as i64], |r| r.get::<_, Vec<u8>>(0))
                .optional()
        })?;
        let rec = record::decode(state.dev, state.ino, &bytes)?;
        if rec.state != *state
            || rec.index.disk_len() != state.size.checked_sub(cutf8::MAGIC.len() as u64)?
        {
            return None;
        }
        let today = day_of(now());
        if rec.seen_day.saturating_add(7) <= today {
            self.send_op(
                Op::Put(key, record::encode(state, today, &rec.index)),
                false,
                false,
            );
        }
        Some(rec.index)
    }

    /// Stores `index`, learned for `state` by a scan that started at
    /// `started` (after which the file's state was checked unchanged).
    /// Not stored when the scan was too close to the file's last change.
    pub fn put(&self, state: &Stamp, started: (i64, i64), index: &OffsetIndex) {
        if !settled(state.ctime, started) {
            return;
        }
        let today = day_of(now());
        let op = Op::Put((state.dev, state.ino), record::encode(state, today, index));
        self.send_op(op, false, false);
    }

    /// Queues `op` for the writer. A full queue drops an index record (it
    /// costs only speed) but makes a node record wait, up to
    /// [`NODE_QUEUE_WAIT`]: a lost one is a file handle that no longer
    /// opens.
    /// A node record marked on its way (`IndexDb::mark_node`) is sent
    /// with `marked`.
    fn send_op(&self, op: Op, wait: bool, marked: bool) {
        let Some(open) = self.inner.as_ref() else {
            return;
        };
        let node = match op {
            Op::Node(ino, _) => Some(ino),
            Op::Put(..) => None,
        };
        if let (Some(ino), false) = (node, marked) {
            self.mark_node(ino);
        }
        if open.shared.pool.off.load(Ordering::Relaxed) {
            open.shared.nodes_done(node.into_iter());
            return;
        }
        let Some(tx) = open.tx.lock().clone() else {
            open.shared.nodes_done(node.into_iter());
            return;
        };
        open.shared.queued.fetch_add(1, Ordering::Relaxed);
        let mut op = op;
        let until = Instant::now() + NODE_QUEUE_WAIT;
        loop {
            match tx.try_send(op) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) if wait && Instant::now() < until => {
                    op = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Full(_)) => {
                    log::debug!("index database queue full");
                    break;
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        open.shared.done(1, node.into_iter());
    }

    /// Marks a node record of `ino` on its way to the writer, before it
    /// is sent with `put_node_marked` (`not_pending` leaves `ino` out
    /// until it is committed): for a caller that must mark it under a
    /// lock of its own (`export::Nodes`).
    pub fn mark_node(&self, ino: u64) {
        if let Some(o) = self.inner.as_ref() {
            *o.shared.nodes_queued.lock().entry(ino).or_default() += 1;
        }
    }

    /// Those of the inode numbers `inos` with no node record of this
    /// daemon waiting for the writer (queued, or in a batch not yet
    /// committed): a read started after this shows the last record this
    /// daemon stored for each (`export::Nodes`, which does not store again
    /// a record that is there already).
    pub fn not_pending(&self, inos: &[u64]) -> Vec<u64> {
        let Some(o) = self.inner.as_ref() else {
            return Vec::new();
        };
        let q = o.shared.nodes_queued.lock();
        inos.iter()
            .copied()
            .filter(|ino| !q.contains_key(ino))
            .collect()
    }

    /// Commits every record stored so far; stores no more. While it does,
    /// a daemon starting on the same BACKING that misses a node record
    /// waits for it (`closing`).
    pub fn close(&self) {
        let Some(open) = self.inner.as_ref() else {
            return;
        };
        let pending = open.shared.queued.load(Ordering::Relaxed) > 0;
        let closing = pending.then(|| closing::begin(&open.shared.pool)).flatten();
        drop(open.tx.lock().take());
        if let Some(w) = open.writer.lock().take() {
            let _ = w.join();
        }
        open.shared.pool.release();
        drop(closing);
    }
}

/// The database as the mount starts: opened and checked once, so a
/// damaged one is rebuilt now, before any other thread uses it. Ok(None):
/// none yet (created with the first record); Err: none for this mount.
fn first_open(finder: &Finder) -> Result<Option<store::Db>, ()> {
    let place = match finder.find(false) {
        Found::Here(p) => p,
        Found::Later => return Ok(None),
        Found::Nothing => return Err(()),
    };
    let path = place.path.clone();
    let refused = |why: Failed| match why {
        Failed::NotOurs(why) => log::warn!(
            "index database {}: {why}: left as it is; indexes kept in memory only (move it \
             away to let the mount create its database)",
            path.display()
        ),
        Failed::Disk(e) => store::disk_failed(&path, &e),
        Failed::Busy => log::warn!(
            "index database {}: locked by another daemon for over {} s; indexes kept in \
             memory only",
            path.display(),
            pool::WRITE_WAIT.as_secs()
        ),
        Failed::Damaged(why) => log::warn!(
            "index database {}: cannot create it ({why}); indexes kept in memory only",
            path.display()
        ),
    };
    let pin = store::pin(place).map_err(&refused)?;
    match store::open(&pin, finder.root_id, pool::WRITE_WAIT) {
        Ok(db) => Ok(Some(db)),
        Err(Failed::Damaged(why)) => {
            log::warn!(
                "index database {} is damaged ({why}); rebuilding it (sizes are learned again \
                 by reading the files)",
                path.display()
            );
            store::remove(&pin);
            drop(pin);
            let place = match finder.find(true) {
                Found::Here(p) => p,
                Found::Later | Found::Nothing => return Err(()),
            };
            let pin = store::pin(place).map_err(&refused)?;
            store::open(&pin, finder.root_id, pool::WRITE_WAIT)
                .map(Some)
                .map_err(&refused)
        }
        Err(Failed::Busy) => {
            // Another daemon's long write: not a reason to go without the
            // database. The first lookup or batch opens it again (and
            // checks it then).
            log::info!(
                "index database {}: locked by another daemon for over {} s as this mount \
                 starts; opened again when first needed",
                path.display(),
                pool::WRITE_WAIT.as_secs()
            );
            Ok(None)
        }
        Err(e) => {
            refused(e);
            Err(())
        }
    }
}

impl Drop for IndexDb {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, OwnedFd};

    pub(super) fn root_of(p: &Path) -> OwnedFd {
        place::open_given_dir(p).unwrap()
    }

    pub(super) fn state(ino: u64, size: u64) -> Stamp {
        Stamp {
            dev: 1,
            ino,
            size,
            mtime: (1000, 5),
            ctime: (1000, 7),
        }
    }

    pub(super) fn text_index(n: usize) -> OffsetIndex {
        let mut disk = Vec::new();
        for _ in 0..n {
            let mut unit = [0u8; 8];
            let n = cutf8::unit::encode_disk(0x800, &mut unit).unwrap(); // grows by one
            disk.extend_from_slice(&unit[..n]);
            disk.resize(disk.len() + 5000, b'a');
        }
        OffsetIndex::from_bytes(&disk)
    }

    fn stored(dir: &Path, st: &Stamp, index: &OffsetIndex) {
        let db = IndexDb::open(root_of(dir).as_fd(), &Location::Default, false);
        db.put(st, now(), index);
        db.close();
        assert!(dir.join(DIR).join(place::FILE).exists());
    }

    #[test]
    fn a_record_is_served_only_for_the_exact_state() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(3);
        let st = state(5, 8 + index.disk_len());
        stored(d.path(), &st, &index);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert_eq!(db.get(&st), Some(index.clone()));
        let mut other = st;
        other.ctime.1 += 1;
        assert_eq!(db.get(&other), None);
        let mut other = st;
        other.mtime.0 -= 1;
        assert_eq!(db.get(&other), None);
        let mut other = st;
        other.size += 1;
        assert_eq!(db.get(&other), None);
        let mut other = st;
        other.dev = 2;
        assert_eq!(db.get(&other), None);
    }

    #[test]
    fn a_scan_too_close_to_the_last_change_is_not_stored() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(1);
        let mut st = state(9, 8 + index.disk_len());
        st.ctime = now();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        db.put(&st, now(), &index);
        db.close();
        assert!(
            !d.path().join(DIR).exists(),
            "nothing stored, nothing created"
        );
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
        assert!(settled((100, 0), (102, 100_000_001)));
        assert!(!settled((100, 0), (102, 100_000_000)));
        assert!(
            !settled((100, 0), (50, 0)),
            "a clock set back stores nothing"
        );
    }

    #[test]
    fn garbage_in_the_file_is_rebuilt_and_a_foreign_database_emptied() {
        let _ = env_logger::builder()
            .is_test(true)
            .filter_level(log::LevelFilter::Debug)
            .try_init();
        let d = tempfile::tempdir().unwrap();
        let index = text_index(2);
        let st = state(5, 8 + index.disk_len());
        stored(d.path(), &st, &index);
        let file = d.path().join(DIR).join(place::FILE);
        // Another BACKING's database.
        let other = tempfile::tempdir().unwrap();
        std::fs::create_dir(other.path().join(DIR)).unwrap();
        std::fs::set_permissions(
            other.path().join(DIR),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        std::fs::copy(&file, other.path().join(DIR).join(place::FILE)).unwrap();
        let db = IndexDb::open(root_of(other.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
        drop(db);
        // Garbage after SQLite's header, then a cut.
        let mut bytes = std::fs::read(&file).unwrap();
        let len = bytes.len() as u64;
        bytes[100..].fill(0x5a);
        std::fs::write(&file, bytes).unwrap();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
        db.put(&st, now(), &index);
        drop(db);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert_eq!(
            db.get(&st),
            Some(index.clone()),
            "the rebuilt database works"
        );
        drop(db);
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(len / 3).unwrap();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
    }

    /// A database damaged while it is open is closed without taking the
    /// process down, and the next open rebuilds it.
    #[test]
    fn a_database_damaged_while_open_closes_without_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(2);
        stored(d.path(), &state(4, 8 + index.disk_len()), &index);
        let file = d.path().join(DIR).join(place::FILE);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.get(&state(4, 8 + index.disk_len())).is_some());
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[100..].fill(0xA5);
        std::fs::write(&file, &bytes).unwrap();
        for n in 0..50 {
            db.put(&state(100 + n, 8 + index.disk_len()), now(), &index);
        }
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.close()));
        assert!(closed.is_ok(), "closing a damaged database panicked");
        drop(db);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
    }

    /// Two openers of one database (two mounts of one BACKING) read and
    /// write it at the same moment: neither waits for the other to let go,
    /// and each reads what the other stored as soon as it is committed.
    #[test]
    fn two_openers_at_once_each_read_what_the_other_stored() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(1);
        let st = state(5, 8 + index.disk_len());
        let st2 = state(6, 8 + index.disk_len());
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let first = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        let second = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(first.is_open());
        assert!(second.is_open(), "the second opener was kept out");
        let turn = |db: &IndexDb, st: &Stamp| {
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < until {
                if let Some(i) = db.get(st) {
                    return Some(i);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        };
        // Both keep reading all along.
        let busy = std::sync::atomic::AtomicBool::new(true);
        std::thread::scope(|s| {
            s.spawn(|| {
                while busy.load(Ordering::Relaxed) {
                    assert!(first.get(&state(4, 8)).is_some());
                    assert!(second.get(&state(4, 8)).is_some());
                }
            });
            first.put(&st, now(), &index);
            second.put(&st2, now(), &index);
            assert_eq!(
                turn(&second, &st),
                Some(index.clone()),
                "second never got it"
            );
            assert_eq!(
                turn(&first, &st2),
                Some(index.clone()),
                "first never got it"
            );
            busy.store(false, Ordering::Relaxed);
        });
        // A node record stored by one is read by the other.
        first.put_node(77, b"rec".to_vec());
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while second.node(77).is_none() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(second.node(77), Some(b"rec".to_vec()));
        drop(first);
        drop(second);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert_eq!(db.get(&st), Some(index.clone()));
        assert_eq!(db.get(&st2), Some(index));
    }

    /// A mount starting while another daemon holds the write lock and
    /// commits (the other mount busy, or the old daemon of `umount &&
    /// mount` still storing): the new one waits and uses the database,
    /// and its node records are stored. (It went without a database for
    /// the whole mount when its start upgraded a read to a write.)
    #[test]
    fn a_mount_starting_during_another_daemons_commit_uses_the_database() {
        let d = tempfile::tempdir().unwrap();
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let file = d.path().join(DIR).join(place::FILE);
        let other = rusqlite::Connection::open(&file).unwrap();
        other
            .execute_batch(
                "BEGIN IMMEDIATE; INSERT OR REPLACE INTO nodes(ino, day, rec) \
                 VALUES (1, 1, x'00');",
            )
            .unwrap();
        let new = std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                other.execute_batch("COMMIT").unwrap();
            });
            IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false)
        });
        assert!(new.is_open());
        new.put_node(42, b"rec".to_vec());
        new.close();
        let again = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert_eq!(
            again.node(42),
            Some(b"rec".to_vec()),
            "the node record was lost"
        );
        assert!(again.get(&state(4, 8)).is_some());
    }

    /// A node record queued by a daemon that is closing is found by a
    /// lookup of another that starts meanwhile: the lookup waits for the
    /// closing one's commit instead of answering "unknown".
    #[test]
    fn a_node_record_of_a_closing_opener_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let old = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        let new = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(new.is_open());
        for ino in 1000..3000 {
            old.put_node(ino, ino.to_le_bytes().to_vec());
        }
        // Closing at once: the records are still queued (BATCH_WAIT).
        std::thread::scope(|s| {
            s.spawn(|| old.close());
            let lock = d.path().join(DIR).join(format!("{}-closing", place::FILE));
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while !lock.exists() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(2));
            assert_eq!(new.node(2999), Some(2999u64.to_le_bytes().to_vec()));
        });
        // An unknown node costs no wait once nobody is closing.
        let t = std::time::Instant::now();
        assert_eq!(new.node(5), None);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }

    /// An idle opener holds nothing of the database open.
    #[test]
    fn an_idle_opener_holds_no_descriptor_of_the_database() {
        let d = tempfile::tempdir().unwrap();
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.get(&state(4, 8)).is_some());
        let held = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .filter(|p| p.starts_with(d.path().join(DIR)))
                .count()
        };
        assert!(held() > 0);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while held() > 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(held(), 0, "still open after the idle time");
        assert!(db.get(&state(4, 8)).is_some(), "opened again when needed");
    }

    #[test]
    fn a_symlink_or_a_shared_directory_is_not_used() {
        let d = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path(), d.path().join(DIR)).unwrap();
        assert!(place::open_dir(root_of(d.path()).as_fd(), Path::new(DIR), true, None).is_err());
        std::fs::remove_file(d.path().join(DIR)).unwrap();
        std::fs::create_dir(d.path().join(DIR)).unwrap();
        std::fs::set_permissions(
            d.path().join(DIR),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        assert!(place::open_dir(root_of(d.path()).as_fd(), Path::new(DIR), true, None).is_err());
        // A symlink at the file's name is never followed.
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path().join("x"), dir.path().join("f")).unwrap();
        let dfd = root_of(dir.path());
        assert!(place::open_file(dfd.as_fd(), Path::new("f")).is_err());
        assert!(!target.path().join("x").exists());
    }

    #[test]
    fn old_records_are_collected() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(1);
        let st = state(5, 8 + index.disk_len());
        stored(d.path(), &st, &index);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        let pool = &db.inner.as_ref().unwrap().shared.pool;
        let w = pool.writer().ok().unwrap();
        writer::collect(&w.conn, day_of(now()) + MAX_AGE_DAYS + 1).unwrap();
        drop(w);
        assert_eq!(db.get(&st), None);
    }
}
