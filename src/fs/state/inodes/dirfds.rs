//! The cache of descriptors of inodes not open through the mount (those of
//! directories): an entry's cached descriptor, CLOCK eviction when the cache
//! is full, the sweep of the ones not used lately, and halving it when the
//! daemon runs out of descriptors.

use super::*;

/// Bounds of the cache of directory descriptors.
pub(super) const CAP_MIN: usize = 16;

pub(super) const CAP_MAX: usize = 4096;

/// How often the cache lets go of the directory descriptors not used since
/// it last looked (so one is kept from one to two of these after its last
/// use).
pub(super) const SWEEP: std::time::Duration = std::time::Duration::from_millis(500);

#[derive(Default)]
pub(super) struct Clock {
    /// The inodes whose descriptor is cached.
    ring: Vec<Weak<Inode>>,
    hand: usize,
}

pub(super) fn is_resource(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
    )
}

impl Shared {
    /// Enters an inode that just got its cached descriptor; evicts another
    /// (whose descriptor closes when no request uses it any more) if the
    /// cache is full. Recently used inodes are passed over; if all are, the
    /// oldest candidate goes anyway.
    pub(super) fn register(&self, me: Weak<Inode>) {
        let mut closing = Vec::new();
        {
            let mut c = self.clock.lock();
            if c.ring.len() < self.cap {
                c.ring.push(me);
                return;
            }
            let mut placed = false;
            let steps = 2 * c.ring.len() + 1;
            for _ in 0..steps {
                let h = c.hand % c.ring.len();
                c.hand = h + 1;
                if let Some(v) = c.ring[h].upgrade() {
                    if v.take_used() {
                        continue;
                    }
                    closing.push(v.inner.lock().take_cached());
                }
                c.ring[h] = me.clone();
                placed = true;
                break;
            }
            if !placed {
                let h = c.hand % c.ring.len();
                if let Some(v) = c.ring[h].upgrade() {
                    closing.push(v.inner.lock().take_cached());
                }
                c.ring[h] = me;
            }
        }
        // The descriptors close here, outside the lock.
        drop(closing);
    }

    /// Lets go of the descriptors not used since the last sweep (called
    /// every `SWEEP`).
    pub(super) fn sweep(&self) {
        let mut closing = Vec::new();
        let mut c = self.clock.lock();
        c.ring.retain(|w| {
            let Some(v) = w.upgrade() else {
                return false;
            };
            if v.take_used() {
                return true;
            }
            closing.push(v.inner.lock().take_cached());
            false
        });
        c.hand = 0;
        drop(c);
        drop(closing);
    }

    /// Under descriptor pressure: lets go of half the cached descriptors,
    /// used or not.
    pub(super) fn shrink(&self) -> usize {
        let mut closing = Vec::new();
        let mut c = self.clock.lock();
        let target = c.ring.len().div_ceil(2);
        while closing.len() < target {
            let Some(w) = c.ring.pop() else { break };
            if let Some(v) = w.upgrade() {
                closing.push(v.inner.lock().take_cached());
            }
        }
        drop(c);
        closing.len()
    }

    /// Runs `open`; when it fails for want of descriptors, shrinks the
    /// cache and tries once more; if that fails too, logs a line naming the
    /// path (rate-limited) and returns the errno.
    pub(super) fn retrying<T>(
        &self,
        mut open: impl FnMut() -> std::io::Result<T>,
        path: impl Fn() -> String,
        what: &str,
    ) -> Result<T> {
        match open() {
            Err(e) if is_resource(&e) => {
                self.shrink();
                open().map_err(|e| {
                    if is_resource(&e) {
                        let path = path();
                        crate::ratelog::warn("out-of-descriptors", &path, || {
                            format!(
                                "{path}: cannot {what}: out of file descriptors or memory ({e}); \
                                 the daemon's descriptors are those of files open through the \
                                 mount (each user's share is bounded, man cutf8fs: RESOURCES): \
                                 close some, or raise the daemon's limit (ulimit -n)"
                            )
                        });
                    }
                    io(e)
                })
            }
            r => r.map_err(io),
        }
    }
}

impl Inode {
    /// A descriptor of the backing inode: an open handle's, a cached one,
    /// or one reopened now (closed when the caller drops it).
    pub fn fd(self: &Arc<Self>) -> Result<Fd> {
        if let Some(fd) = self.held_fd() {
            return Ok(fd);
        }
        let (file, _) =
            self.shared
                .retrying(|| self.reopen(libc::O_PATH), || self.path(), "reopen")?;
        let fd = Arc::new(file);
        if self.cacheable() {
            let mut i = self.inner.lock();
            let held = i.held.get_or_insert_with(Box::default);
            if let Some(other) = &held.cached {
                return Ok(other.clone());
            }
            held.cached = Some(fd.clone());
            drop(i);
            self.mark_used();
            self.shared.register(Arc::downgrade(self));
        }
        Ok(fd)
    }

    /// The descriptor the entry holds now, if any (an open handle's first,
    /// then a cached one).
    pub(super) fn held_fd(&self) -> Option<Fd> {
        let i = self.inner.lock();
        let held = i.held.as_ref()?;
        if let Some(fd) = held.fds.first() {
            return Some(fd.clone());
        }
        let fd = held.cached.clone()?;
        drop(i);
        self.mark_used();
        Some(fd)
    }

    /// Sets the CLOCK bit (if not set: the common case costs a load).
    pub(super) fn mark_used(&self) {
        if self.word.load(Ordering::Relaxed) & USED == 0 {
            self.word.fetch_or(USED, Ordering::Relaxed);
        }
    }

    /// Clears the CLOCK bit; whether it was set.
    pub(super) fn take_used(&self) -> bool {
        self.word.fetch_and(!USED, Ordering::Relaxed) & USED != 0
    }

    /// Whether a reopened descriptor is kept (for about a second, see the
    /// module doc): directories', the parents names are looked up in.
    pub(super) fn cacheable(&self) -> bool {
        self.is_dir()
    }

    #[cfg(test)]
    pub(super) fn has_cached_fd(&self) -> bool {
        self.inner
            .lock()
            .held
            .as_ref()
            .is_some_and(|h| h.cached.is_some())
    }
}

impl InodeTable {
    /// Descriptors the cache holds now (for tests).
    #[cfg(test)]
    pub(super) fn cached(&self) -> usize {
        self.shared
            .clock
            .lock()
            .ring
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|i| i.has_cached_fd())
            .count()
    }
}
