//! The offset indexes of closed files, kept within a memory bound (least
//! recently used evicted), with the persistent index database behind.

use super::*;

pub(super) fn index_cost(index: &OffsetIndex) -> usize {
    index
        .heap_bytes()
        .saturating_add(std::mem::size_of::<OffsetIndex>() + 128)
}

pub(super) struct CacheEntry {
    index: Arc<OffsetIndex>,
    cost: usize,
    tick: u64,
    /// Read from the database ahead of need (`IndexCache::prefetch`) and
    /// not asked for yet: its first hit counts as a database hit.
    fetched: bool,
}

#[derive(Default)]
pub(super) struct CacheInner {
    pub(super) map: HashMap<Stamp, CacheEntry>,
    pub(super) lru: BTreeMap<u64, Stamp>,
    /// The one stamp kept per file (device, inode): a file's newer state
    /// replaces its older one, which nothing asks for again (a file
    /// rewritten in BACKING a thousand times would otherwise keep a
    /// thousand indexes until the bound evicts them).
    pub(super) by_file: HashMap<(u64, u64), Stamp>,
    pub(super) used: usize,
    pub(super) tick: u64,
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
    pub(super) inner: Mutex<CacheInner>,
    pub db: crate::indexdb::IndexDb,
    /// The mount's counters (lookups and scans count here).
    pub stats: Arc<Stats>,
    /// Whose turn it is to classify each file.
    pub(super) turns: ScanTurns,
    /// Long scans, reported in the log as they go.
    pub(super) progress: Arc<crate::fs::observe::progress::Progress>,
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
        if let Some((index, fetched)) = self.get_cached(stamp) {
            self.stats.lookup(if fetched {
                Lookup::Database
            } else {
                Lookup::Memory
            });
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

    /// The cached index of `stamp`, and whether it was prefetched and
    /// not asked for before.
    fn get_cached(&self, stamp: &Stamp) -> Option<(Arc<OffsetIndex>, bool)> {
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        let e = c.map.get_mut(stamp)?;
        let old = std::mem::replace(&mut e.tick, tick);
        let fetched = std::mem::take(&mut e.fetched);
        let index = e.index.clone();
        c.lru.remove(&old);
        c.lru.insert(tick, *stamp);
        Some((index, fetched))
    }

    /// Reads ahead, in one transaction of the index database, the
    /// records of the files numbered `inos` on device `dev` that have no
    /// index in memory, and keeps them, each under the exact state it was
    /// learned from (so a `get` for a file in that state finds it here;
    /// a file that changed since is not served it, as with `get`). Also
    /// returns the node records stored for `nodes` (`export::Nodes`).
    /// A listing's next entries: one transaction instead of one per file.
    pub fn prefetch(&self, dev: u64, inos: &[u64], nodes: &[u64]) -> Vec<(u64, u32, Vec<u8>)> {
        let wanted: Vec<u64> = {
            let c = self.inner.lock();
            inos.iter()
                .copied()
                .filter(|&ino| !c.by_file.contains_key(&(dev, ino)))
                .collect()
        };
        let Some(batch) = self.db.get_batch(dev, &wanted, nodes) else {
            return Vec::new();
        };
        for (stamp, index) in batch.indexes {
            self.keep(stamp, Arc::new(index), true);
        }
        batch.nodes
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
        self.keep(stamp, index, false);
    }

    fn keep(&self, stamp: Stamp, index: Arc<OffsetIndex>, fetched: bool) {
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
        c.map.insert(
            stamp,
            CacheEntry {
                index,
                cost,
                tick,
                fetched,
            },
        );
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
    match cache.get(&stamp) {
        Some(index) => Ok(index),
        None => scan_index(cache, file, stamp),
    }
}

/// [`index_for`] for a caller whose own lookup of `stamp` just missed:
/// built now (one scan of `file`), cached if the file did not change
/// meanwhile.
pub fn scan_index(cache: &IndexCache, file: &File, stamp: Stamp) -> Result<Arc<OffsetIndex>> {
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
