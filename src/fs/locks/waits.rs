//! Lock requests that must wait, each on a thread of its own: bounded in
//! all and per user (with places kept for users who wait little), woken
//! by INTERRUPT, and the interrupts that overtake their request.

use super::*;

/// Lock requests waiting at once, all users together.
pub const MAX_WAITS: usize = 512;

/// Lock requests one user may have waiting at once.
pub const WAITS_PER_USER: usize = 128;

/// The last of the [`MAX_WAITS`] places, kept for users who have fewer
/// than [`FEW_WAITS`] waiting: four users at their [`WAITS_PER_USER`]
/// would otherwise take every place and every other user's wait would
/// fail with ENOLCK.
pub const KEPT_WAITS: usize = 64;

/// A user with fewer waiting than this may take the [`KEPT_WAITS`].
pub const FEW_WAITS: usize = 8;

/// Whether a user with `mine` waits may start one more when `all` are
/// waiting: never beyond [`MAX_WAITS`] or [`WAITS_PER_USER`], and into the
/// last [`KEPT_WAITS`] places only with fewer than [`FEW_WAITS`].
pub(super) fn room_for(mine: usize, all: usize) -> bool {
    all < MAX_WAITS && mine < WAITS_PER_USER && (all < MAX_WAITS - KEPT_WAITS || mine < FEW_WAITS)
}

/// Interrupts kept for requests not seen yet (an interrupt can overtake
/// its request between two FUSE workers), and for how long.
pub(super) const EARLY_MAX: usize = 256;

pub(super) const EARLY_FOR: Duration = Duration::from_secs(10);

/// How often a waiting thread that was told to stop is woken again (the
/// wake signal can come just before it starts to wait).
pub(super) const REWAKE: Duration = Duration::from_millis(20);

/// A request waiting for its lock on a thread of its own.
pub(super) struct Waiter {
    uid: u32,
    stop: Arc<AtomicBool>,
    /// The thread while it runs (set by the thread itself, cleared under
    /// the same lock before it ends, so a wake never reaches another one).
    thread: Option<Pthread>,
}

#[derive(Default)]
pub(super) struct WaitState {
    pub(super) by_unique: HashMap<u64, Waiter>,
    per_user: HashMap<u32, usize>,
    /// Interrupts for requests not (yet) waiting, newest last.
    early: VecDeque<(u64, Instant)>,
    /// Whether the thread that wakes stopped waiters again runs.
    rewaking: bool,
}

/// The waiting threads: one per waiting request, bounded in all and per
/// user.
#[derive(Default)]
pub(super) struct Waits {
    pub(super) state: Mutex<WaitState>,
    /// Tells the re-waking thread that a waiter was told to stop.
    stopped: Condvar,
}

pub(super) type Done = Box<dyn FnOnce(Result<()>) + Send>;

impl Waits {
    /// Runs `job` (given a "stop now?" test) on a new thread for request
    /// `unique` of `uid`, then `done` with its outcome there.
    pub(super) fn start(
        self: &Arc<Self>,
        uid: u32,
        unique: u64,
        job: impl FnOnce(&dyn Fn() -> bool) -> Result<()> + Send + 'static,
        done: impl FnOnce(Result<()>) + Send + 'static,
    ) {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let mut st = self.state.lock();
            let now = Instant::now();
            while st.early.front().is_some_and(|&(_, t)| now - t > EARLY_FOR) {
                st.early.pop_front();
            }
            if let Some(i) = st.early.iter().position(|&(u, _)| u == unique) {
                st.early.remove(i);
                drop(st);
                return done(Err(Refused::Interrupted.into()));
            }
            let mine = st.per_user.get(&uid).copied().unwrap_or(0);
            let all = st.by_unique.len();
            if !room_for(mine, all) {
                drop(st);
                let who = uid.to_string();
                crate::ratelog::warn("lock-waits", &who, || {
                    format!(
                        "uid {who}: a lock wait refused with ENOLCK: {mine} of its own \
                         waiting already, {all} in all (at most {WAITS_PER_USER} a user, \
                         {MAX_WAITS} in all, the last {KEPT_WAITS} for users with fewer \
                         than {FEW_WAITS})"
                    )
                });
                return done(Err(Refused::NoLockRoom.into()));
            }
            st.by_unique.insert(
                unique,
                Waiter {
                    uid,
                    stop: stop.clone(),
                    thread: None,
                },
            );
            *st.per_user.entry(uid).or_default() += 1;
            if !st.rewaking {
                st.rewaking = self.start_rewaking();
            }
        }
        // The reply goes out from whichever side ends up with it.
        let slot: Arc<Mutex<Option<Done>>> = Arc::new(Mutex::new(Some(Box::new(done))));
        let theirs = slot.clone();
        let waits = self.clone();
        let spawned = std::thread::Builder::new()
            .name("lock-wait".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(e) = sys::lock::unblock_wake_signal() {
                    log::debug!("lock wait: cannot take the wake signal: {e}");
                }
                if let Some(w) = waits.state.lock().by_unique.get_mut(&unique) {
                    w.thread = Some(sys::lock::this_thread());
                }
                let r = error::guard("lock wait", String::new, || {
                    job(&|| stop.load(Ordering::SeqCst))
                });
                waits.finish(unique);
                if let Some(done) = theirs.lock().take() {
                    done(r);
                }
            });
        if let Err(e) = spawned {
            self.finish(unique);
            crate::ratelog::warn("lock-waits", "spawn", || {
                format!("cannot start a thread to wait for a lock ({e}): ENOLCK")
            });
            if let Some(done) = slot.lock().take() {
                done(Err(Refused::NoLockRoom.into()));
            }
        }
    }

    /// The waiter of `unique` is done: out of the table, its thread no
    /// longer to be woken.
    fn finish(&self, unique: u64) {
        let mut st = self.state.lock();
        if let Some(w) = st.by_unique.remove(&unique) {
            if let Some(n) = st.per_user.get_mut(&w.uid) {
                *n -= 1;
                if *n == 0 {
                    st.per_user.remove(&w.uid);
                }
            }
        }
    }

    pub(super) fn interrupt(&self, unique: u64) {
        let mut st = self.state.lock();
        match st.by_unique.get(&unique) {
            Some(w) => {
                w.stop.store(true, Ordering::SeqCst);
                if let Some(t) = w.thread {
                    let _ = sys::lock::wake(t);
                }
                self.stopped.notify_one();
            }
            None => {
                if st.early.len() >= EARLY_MAX {
                    st.early.pop_front();
                }
                st.early.push_back((unique, Instant::now()));
            }
        }
    }

    /// Starts the thread that wakes, every [`REWAKE`], the waiters told to
    /// stop that have not yet (a wake can come just before the wait
    /// starts). True if it runs.
    fn start_rewaking(self: &Arc<Self>) -> bool {
        let waits = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("lock-rewake".into())
            .stack_size(128 * 1024)
            .spawn(move || loop {
                let Some(w) = waits.upgrade() else { return };
                let mut st = w.state.lock();
                let stopping: Vec<Pthread> = st
                    .by_unique
                    .values()
                    .filter(|w| w.stop.load(Ordering::SeqCst))
                    .filter_map(|w| w.thread)
                    .collect();
                for t in &stopping {
                    // Under the lock: the thread is still running.
                    let _ = sys::lock::wake(*t);
                }
                let pause = if stopping.is_empty() {
                    Duration::from_secs(1)
                } else {
                    REWAKE
                };
                w.stopped.wait_for(&mut st, pause);
            })
            .is_ok()
    }
}
