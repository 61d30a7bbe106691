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
//! `crate::fs::content`). Until a read meets the mismatch, `stat` shows the
//! size the record says.
//!
//! # Where, and who may write it
//!
//! By default `BACKING/.cutf8fs-index/index.redb`, so every machine that
//! mounts the archive benefits; the directory is hidden by the mount and
//! skipped by migrate (`trust::is_internal`). It is opened like the
//! journal (`place`): relative to BACKING's root descriptor, `O_NOFOLLOW`,
//! owned by the daemon's user, not writable by group or others, on BACKING's
//! filesystem; the file ours, regular, one link, and empty or a redb file
//! (its magic number, whatever its mode): the owner of BACKING's root can
//! rename a directory of ours there, and a file of ours in it under the
//! database's name that is something else is left as it is (`store`),
//! never emptied to rebuild. When BACKING is read-only
//! (`-o ro` too) or that place fails a check (say BACKING's owner planted a
//! symlink or a directory of theirs there), the database lives in a cache
//! directory instead (`/var/cache/cutf8fs` for root, else
//! `$XDG_CACHE_HOME/cutf8fs` or `~/.cache/cutf8fs`), one file per BACKING.
//! `-o index_db=PATH` names the file, `-o index_db=none` keeps indexes in
//! memory only.
//!
//! # Why redb
//!
//! redb (pure Rust, copy-on-write B-trees, checksummed commits) over SQLite
//! (`rusqlite`): redb runs on a file we opened and checked ourselves
//! ([`redb::Builder::create_file`]) and writes nothing else, while SQLite
//! opens its database, `-journal`, `-wal` and `-shm` files by path, next to
//! each other — names in a tree the daemon does not trust, which it would
//! resolve again and again. redb also builds without a C compiler. Its cost:
//! one process at a time holds the file (an exclusive `flock`). So a mount
//! holds it only while it uses it and lets go after a second idle
//! (`lease`): a second mount of the same BACKING (or a `cutf8 migrate`
//! while it is mounted) that finds it held does without it for that
//! moment (one log line), tries again at most every quarter second, and is
//! as warm as the first once that is quiet; the file is never written by
//! two at once. (Other designs: one shard per daemon would leave a second
//! mount cold on what the first learned; opening per transaction costs an
//! open and a header write per lookup.)
//!
//! # Never worse than without it
//!
//! Missing: created with the first record (an index, or a node record —
//! `nodes`, which the first lookup of a mount stores). Truncated, damaged, or a record that does not decode:
//! one log line, the file is emptied and rebuilt (records that do not
//! decode are skipped); a file that does not begin with redb's header is
//! not a database, and is left as it is. Busy, or not trusted: one log line, memory only or
//! the cache directory. No failure here fails a mount or a request; a panic
//! inside the database code is caught and turns the database off.
//!
//! Writes never wait on the disk in a request: stored records go through a
//! bounded queue to one writer thread, which commits them in batches (one
//! fsync per batch); a full queue drops the record (costs only speed). A
//! record used a week or more after it was last dated is dated again; at unmount, records unused for [`MAX_AGE_DAYS`] are
//! collected, and beyond [`MAX_RECORDS`] the least recently used go, so
//! the file stays bounded however many files come and go. One record per
//! inode: a file that changes replaces its record.

// redb's error type is large; it travels only on the rare failure path,
// where it is logged once.
#![allow(clippy::result_large_err)]

mod finder;
mod lease;
mod nodes;
mod place;
mod record;
mod store;
mod trees;
mod writer;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use redb::TableDefinition;

use crate::io::Stamp;
use crate::view::OffsetIndex;
use finder::{Finder, Found};
use lease::Lease;
pub use place::DIR;
use store::{start_db, Opened};
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

/// Tries (50 ms apart) to lock a database another process holds.
const LOCK_TRIES: u32 = 40;

/// Records waiting for the writer thread.
const QUEUE: usize = 8192;
/// Longest wait before a batch is committed.
const BATCH_WAIT: Duration = Duration::from_millis(300);

const RECORDS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("records");
const META: TableDefinition<&str, (u64, u64)> = TableDefinition::new("meta");
/// META key: BACKING root's `(st_dev, st_ino)`.
const ROOT: &str = "root";

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
    /// The database while this daemon holds it (`lease`: opened when
    /// needed, by the writer when the first record creates it, and let go
    /// when idle).
    lease: Lease,
    /// Where it is, for messages.
    path: Mutex<PathBuf>,
    /// Set once a panic turned the database off.
    off: AtomicBool,
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

thread_local! {
    /// How many [`quiet`] calls this thread is inside.
    static QUIET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One read of the database (`read`, run under [`quiet`]): its value, or
/// None when there is none or the read failed. A failed internal check
/// (a panic in redb) turns the database off for the rest of the mount,
/// said once.
fn read_one(
    shared: &Shared,
    read: impl FnOnce() -> Result<Option<Vec<u8>>, redb::Error>,
) -> Option<Vec<u8>> {
    match quiet(read) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            log::debug!("index database: lookup failed: {e}");
            None
        }
        Err(_) => {
            if !shared.off.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "index database {}: redb failed an internal check on a lookup; \
                     not used for the rest of this mount",
                    shared.path.lock().display()
                );
            }
            None
        }
    }
}

/// Runs database code, catching a panic (redb asserts on some damaged
/// files): the caller turns it into "no database". Such a panic is logged
/// at debug level only; the caller logs the one line that matters.
fn quiet<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) > 0 {
                log::debug!("index database code failed: {info}");
            } else {
                previous(info);
            }
        }));
    });
    QUIET.with(|q| q.set(q.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r
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
        let (db, exists, path) = match finder.find(false) {
            Found::Here(file, path) => match start_db(file, &path, finder.root_id, 1) {
                Opened::Db(db) => (Some(db), true, path),
                Opened::Busy => {
                    log::info!(
                        "index database {} is in use by another mount (or migrate): this \
                         mount uses it whenever the other has let it go (after {} s idle)",
                        path.display(),
                        lease::IDLE.as_secs()
                    );
                    (None, true, path)
                }
                Opened::Failed => return IndexDb::none(),
            },
            Found::Later => (None, false, path),
            Found::Nothing => return IndexDb::none(),
        };
        let shared = Arc::new(Shared {
            lease: Lease::new(finder, db, exists),
            path: Mutex::new(path),
            off: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let w = shared.clone();
        let writer = std::thread::Builder::new()
            .name("index-db".into())
            .spawn(move || {
                if quiet(|| writer::writer(&w, rx)).is_err() {
                    w.off.store(true, Ordering::Relaxed);
                    log::warn!(
                        "index database {}: its writer failed an internal check; not used \
                         for the rest of this mount",
                        w.path.lock().display()
                    );
                }
            });
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

    fn db(&self) -> Option<(&Shared, Arc<store::Db>)> {
        let s = &self.inner.as_ref()?.shared;
        if s.off.load(Ordering::Relaxed) {
            return None;
        }
        let db = s.lease.get(s, 1, false)?;
        Some((s, db))
    }

    /// Whether there is a database, open or to be created with the first
    /// record.
    fn is_usable(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether a database is open now (not only to be created).
    pub fn is_open(&self) -> bool {
        self.db().is_some()
    }

    /// The index stored for exactly `state`, if any.
    pub fn get(&self, state: &Stamp) -> Option<OffsetIndex> {
        let (shared, db) = self.db()?;
        let key = (state.dev, state.ino);
        let bytes = read_one(shared, || {
            let r = db.begin_read()?;
            let t = r.open_table(RECORDS)?;
            Ok(t.get(key)?.map(|v| v.value().to_vec()))
        })?;
        let rec = record::decode(state.dev, state.ino, &bytes)?;
        if rec.state != *state
            || rec.index.disk_len() != state.size.checked_sub(cutf8::MAGIC.len() as u64)?
        {
            return None;
        }
        let today = day_of(now());
        if rec.seen_day.saturating_add(7) <= today {
            self.send(key, record::encode(state, today, &rec.index));
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
        self.send((state.dev, state.ino), record::encode(state, today, index));
    }

    fn send(&self, key: (u64, u64), bytes: Vec<u8>) {
        self.send_op(Op::Put(key, bytes));
    }

    fn send_op(&self, op: Op) {
        let Some(open) = self.inner.as_ref() else {
            return;
        };
        if open.shared.off.load(Ordering::Relaxed) {
            return;
        }
        if let Some(tx) = open.tx.lock().as_ref() {
            match tx.try_send(op) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(_)) => log::debug!("index database queue full"),
            }
        }
    }

    /// Commits every record stored so far; stores no more.
    pub fn close(&self) {
        let Some(open) = self.inner.as_ref() else {
            return;
        };
        drop(open.tx.lock().take());
        if let Some(w) = open.writer.lock().take() {
            let _ = w.join();
        }
        open.shared.lease.release();
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

    fn root_of(p: &Path) -> OwnedFd {
        place::open_given_dir(p).unwrap()
    }

    fn state(ino: u64, size: u64) -> Stamp {
        Stamp {
            dev: 1,
            ino,
            size,
            mtime: (1000, 5),
            ctime: (1000, 7),
        }
    }

    fn text_index(n: usize) -> OffsetIndex {
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
        // Garbage after redb's header, then a cut.
        let mut bytes = std::fs::read(&file).unwrap();
        let len = bytes.len() as u64;
        bytes[9..].fill(0x5a);
        std::fs::write(&file, bytes).unwrap();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
        db.put(&st, now(), &index);
        drop(db);
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(len / 3).unwrap();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.is_open());
        assert_eq!(db.get(&st), None);
    }

    /// A database damaged while it is open (redb's header intact, garbage
    /// after it) is closed without taking the process down: redb's check
    /// at closing panicked on the daemon's main thread at the unmount.
    #[test]
    fn a_database_damaged_while_open_closes_without_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(2);
        stored(d.path(), &state(4, 8 + index.disk_len()), &index);
        let file = d.path().join(DIR).join(place::FILE);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(db.get(&state(4, 8 + index.disk_len())).is_some());
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[9..].fill(0xA5);
        std::fs::write(&file, &bytes).unwrap();
        for n in 0..50 {
            db.put(&state(100 + n, 8 + index.disk_len()), now(), &index);
        }
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.close()));
        assert!(closed.is_ok(), "closing a damaged database panicked");
    }

    /// Two openers of one database (two mounts of one BACKING) take turns:
    /// each lets go when idle, and the other then reads what it stored.
    #[test]
    fn two_openers_take_turns_and_each_reads_what_the_other_stored() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(1);
        let st = state(5, 8 + index.disk_len());
        let st2 = state(6, 8 + index.disk_len());
        stored(d.path(), &state(4, 8), &OffsetIndex::default());
        let first = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        let second = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert!(first.is_open());
        assert!(!second.is_open(), "two processes hold the database");
        first.put(&st, now(), &index);
        let turn = |db: &IndexDb, st: &Stamp| {
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while std::time::Instant::now() < until {
                if let Some(i) = db.get(st) {
                    return Some(i);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            None
        };
        assert_eq!(
            turn(&second, &st),
            Some(index.clone()),
            "second never got it"
        );
        second.put(&st2, now(), &index);
        assert_eq!(
            turn(&first, &st2),
            Some(index.clone()),
            "first never got it back"
        );
        drop(first);
        drop(second);
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        assert_eq!(db.get(&st), Some(index.clone()));
        assert_eq!(db.get(&st2), Some(index));
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
        writer::collect(&db.db().unwrap().1, day_of(now()) + MAX_AGE_DAYS + 1).unwrap();
        assert_eq!(db.get(&st), None);
    }
}
