//! The connections of one daemon to its index database: one for lookups,
//! one for the writer thread, each opened when first needed and closed
//! once idle for [`IDLE`], and the database file pinned (`store`) while
//! either is open. So an idle daemon holds nothing of the database open
//! (BACKING's filesystem can be remounted read-only, or unmounted as soon
//! as the view is), and every daemon of a BACKING reads and writes it at
//! the same moment: SQLite lets many connections read while one writes
//! (WAL mode; with a rollback journal, readers wait out a commit), and a
//! writer waits for another's commit instead of giving up. Called by the
//! lookups (`super`) and the writer thread (`writer`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::finder::{Finder, Found};
use super::store::{self, Db, Failed, Pinned};

/// A connection unused this long is closed.
pub(super) const IDLE: Duration = Duration::from_secs(1);
/// How long a lookup waits for another connection's lock (a commit with
/// a rollback journal; WAL readers never wait).
const READ_WAIT: Duration = Duration::from_millis(500);
/// How often a database that was missing is looked for again (another
/// daemon of the BACKING may have made it).
const LOOK_AGAIN: Duration = Duration::from_millis(250);
/// How long the writer waits for another daemon's commit.
pub(super) const WRITE_WAIT: Duration = Duration::from_secs(5);

pub(super) struct Pool {
    finder: Finder,
    /// The database file while a connection (or the closing lock) uses it.
    place: Mutex<Option<Arc<Pinned>>>,
    reader: Mutex<Option<Db>>,
    epoch: Instant,
    /// Milliseconds since `epoch` of the reader's last use.
    read_used: AtomicU64,
    /// The file exists (else only the writer creates it, or another
    /// daemon: looked for again at most every [`LOOK_AGAIN`]).
    exists: AtomicBool,
    /// Milliseconds since `epoch` when a missing file was last looked for.
    looked: AtomicU64,
    /// Set once the database turned out unusable for the rest of the mount.
    pub(super) off: AtomicBool,
    /// The file's path, for messages.
    pub(super) path: Mutex<std::path::PathBuf>,
}

impl Pool {
    pub(super) fn new(finder: Finder, path: std::path::PathBuf, pinned: Option<Db>) -> Pool {
        let exists = pinned.is_some();
        let place = pinned.as_ref().map(|d| d.pin().clone());
        Pool {
            finder,
            place: Mutex::new(place),
            reader: Mutex::new(pinned),
            epoch: Instant::now(),
            read_used: AtomicU64::new(0),
            exists: AtomicBool::new(exists),
            looked: AtomicU64::new(0),
            off: AtomicBool::new(false),
            path: Mutex::new(path),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The pinned database file: the one in use, else found again (created
    /// when `create`). A file another daemon removed (rebuilt) is found
    /// afresh once no connection of ours uses the old one. A missing one
    /// is looked for again now when `now`, else at most every
    /// [`LOOK_AGAIN`].
    pub(super) fn pinned(&self, create: bool, now: bool) -> Option<Arc<Pinned>> {
        let mut place = self.place.lock();
        if let Some(p) = place.as_ref() {
            if Arc::strong_count(p) > 1 || store::current(p) {
                return Some(p.clone());
            }
            place.take();
        }
        if !create && !self.exists.load(Ordering::Relaxed) {
            let t = self.now();
            let last = self.looked.load(Ordering::Relaxed);
            if !now && last != 0 && t < last + LOOK_AGAIN.as_millis() as u64 {
                return None;
            }
            self.looked.store(t.max(1), Ordering::Relaxed);
        }
        let found = match self.finder.find(create) {
            Found::Here(p) => p,
            Found::Later => return None,
            // Said once by the finder; not looked for again.
            Found::Nothing => {
                self.off.store(true, Ordering::Relaxed);
                return None;
            }
        };
        self.exists.store(true, Ordering::Relaxed);
        *self.path.lock() = found.path.clone();
        match store::pin(found) {
            Ok(p) => {
                *place = Some(p.clone());
                Some(p)
            }
            Err(e) => {
                self.failed(e);
                None
            }
        }
    }

    /// Turns the database off for this mount, with one line saying why.
    pub(super) fn failed(&self, why: Failed) {
        if self.off.swap(true, Ordering::Relaxed) {
            return;
        }
        let path = self.path.lock().clone();
        match why {
            Failed::Disk(e) => store::disk_failed(&path, &e),
            Failed::NotOurs(why) => log::warn!(
                "index database {}: {why}: left as it is; indexes kept in memory only (move \
                 it away to let the mount create its database)",
                path.display()
            ),
            Failed::Damaged(why) => log::warn!(
                "index database {} is damaged ({why}); not used for the rest of this mount \
                 (the next mount rebuilds it)",
                path.display()
            ),
            Failed::Busy => log::warn!(
                "index database {}: another daemon held it locked too long; not used for \
                 the rest of this mount",
                path.display()
            ),
        }
    }

    /// Runs `f` on the lookups' connection (opened if needed). None when
    /// there is no database or it failed (a busy database: this lookup
    /// only; anything else: the rest of the mount).
    pub(super) fn read<T>(&self, f: impl FnOnce(&Db) -> rusqlite::Result<Option<T>>) -> Option<T> {
        if self.off.load(Ordering::Relaxed) {
            return None;
        }
        // The database's files are the daemon's, and so is any block
        // SQLite takes for them, whoever's request reads (a thread may
        // hold a writer's limits: `sys::Limits::kept`).
        let _own = crate::sys::AsDaemon::new().ok()?;
        let mut reader = self.reader.lock();
        if reader.is_none() {
            let pin = self.pinned(false, false)?;
            match store::open(&pin, self.finder.root_id, READ_WAIT) {
                Ok(db) => *reader = Some(db),
                Err(Failed::Busy) => return None,
                Err(e) => {
                    drop(reader);
                    self.failed(e);
                    return None;
                }
            }
        }
        self.read_used.store(self.now(), Ordering::Relaxed);
        let db = reader.as_ref()?;
        match f(db) {
            Ok(v) => v,
            Err(e) => match Failed::from(e) {
                Failed::Busy => None,
                Failed::Disk(e) => {
                    log::debug!("index database: lookup failed: {e}");
                    None
                }
                e => {
                    reader.take();
                    drop(reader);
                    self.failed(e);
                    None
                }
            },
        }
    }

    /// A connection for the writer (the file created if missing).
    pub(super) fn writer(&self) -> Result<Db, Failed> {
        let pin = self
            .pinned(true, true)
            .ok_or_else(|| Failed::Disk("no place for it".into()))?;
        store::open(&pin, self.finder.root_id, WRITE_WAIT)
    }

    /// Closes the lookups' connection if idle for [`IDLE`], and lets go of
    /// the file once no connection uses it.
    pub(super) fn release_if_idle(&self) {
        {
            let mut reader = self.reader.lock();
            let idle = self
                .now()
                .saturating_sub(self.read_used.load(Ordering::Relaxed));
            if reader.is_some() && idle >= IDLE.as_millis() as u64 {
                reader.take();
            }
        }
        let mut place = self.place.lock();
        if place.as_ref().is_some_and(|p| Arc::strong_count(p) == 1) {
            place.take();
            drop(place);
            crate::sys::process::release_free_memory();
        }
    }

    /// Closes everything (at the unmount, after the writer ended).
    pub(super) fn release(&self) {
        self.reader.lock().take();
        self.place.lock().take();
    }
}
