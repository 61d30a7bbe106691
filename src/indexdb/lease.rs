//! Sharing the database file between the daemons of one BACKING (and
//! `cutf8 migrate`): redb lets one process at a time hold the file, so a
//! daemon holds it only while it uses it and lets go once it has been idle
//! for [`IDLE`]; another that finds it held misses (its lookups go to the
//! files, as without a database) and tries again at most every [`RETRY`].
//! So two mounts of one archive both read and write the persistent index,
//! each warm while the other is quiet, and the file is never written by
//! two at once. Called by the lookups and the writer thread (`super`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::finder::{Finder, Found};
use super::store::{start_db, Db, Opened};
use super::Shared;

/// A database unused this long is let go.
pub(super) const IDLE: Duration = Duration::from_secs(1);
/// A database held by another process is tried again after this long.
pub(super) const RETRY: Duration = Duration::from_millis(250);

/// The database, while this daemon holds it.
pub(super) struct Lease {
    db: Mutex<Option<Arc<Db>>>,
    finder: Finder,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last use.
    used: AtomicU64,
    /// Milliseconds since `epoch` before which no open is tried again.
    retry: AtomicU64,
    /// The file exists (else only the writer creates it).
    exists: AtomicBool,
    /// The "held by another" line was logged.
    told: AtomicBool,
}

impl Lease {
    pub(super) fn new(finder: Finder, db: Option<Db>, exists: bool) -> Lease {
        Lease {
            db: Mutex::new(db.map(Arc::new)),
            finder,
            epoch: Instant::now(),
            used: AtomicU64::new(0),
            retry: AtomicU64::new(0),
            exists: AtomicBool::new(exists),
            told: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The database: held, or opened now if no other process holds it
    /// (`tries` times 50 ms apart; created first when `create` and
    /// missing). None when it is held elsewhere, missing, or unusable.
    pub(super) fn get(&self, shared: &Shared, tries: u32, create: bool) -> Option<Arc<Db>> {
        let mut held = self.db.lock();
        let now = self.now();
        if let Some(db) = held.as_ref() {
            self.used.store(now, Ordering::Relaxed);
            return Some(db.clone());
        }
        if !create
            && (!self.exists.load(Ordering::Relaxed) || now < self.retry.load(Ordering::Relaxed))
        {
            return None;
        }
        let (file, path) = match self.finder.find(create) {
            Found::Here(file, path) => (file, path),
            Found::Later | Found::Nothing => return None,
        };
        self.exists.store(true, Ordering::Relaxed);
        *shared.path.lock() = path.clone();
        match start_db(file, &path, self.finder.root_id, tries) {
            Opened::Db(db) => {
                let db = Arc::new(db);
                *held = Some(db.clone());
                self.used.store(now, Ordering::Relaxed);
                Some(db)
            }
            Opened::Busy => {
                if !self.told.swap(true, Ordering::Relaxed) {
                    log::info!(
                        "index database {} is in use by another mount (or migrate): this \
                         mount uses it whenever the other has let it go (after {} s idle)",
                        path.display(),
                        IDLE.as_secs()
                    );
                }
                self.retry
                    .store(now + RETRY.as_millis() as u64, Ordering::Relaxed);
                None
            }
            Opened::Failed => {
                shared.off.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Lets go of the database if it has not been used for [`IDLE`] and no
    /// lookup holds it now.
    pub(super) fn release_if_idle(&self) {
        let mut held = self.db.lock();
        let idle = self.now().saturating_sub(self.used.load(Ordering::Relaxed));
        if idle >= IDLE.as_millis() as u64
            && held.as_ref().is_some_and(|d| Arc::strong_count(d) == 1)
        {
            // Dropped here, under the lock: no lookup opens it meanwhile;
            // its cache's memory goes back to the system.
            held.take();
            drop(held);
            crate::sys::process::release_free_memory();
        }
    }

    /// Lets go of the database (at the unmount).
    pub(super) fn release(&self) {
        self.db.lock().take();
    }

    /// The database if held now (no open tried).
    pub(super) fn held(&self) -> Option<Arc<Db>> {
        self.db.lock().clone()
    }
}
