//! Log lines that a user can cause, rate-limited so that no user can flood
//! the log: per kind of message and per key (a path, a uid), the first
//! [`BURST`] lines of a window ([`WINDOW`], or `CUTF8FS_RATELOG_WINDOW_MS`
//! milliseconds from the daemon's environment, which tests use to keep
//! short) are written, and across all keys of one kind at most
//! [`KIND_BURST`]; what is held back is counted, and once the window has
//! passed one line says how many lines of that kind were not written ("N
//! more like this"). Nothing is dropped silently: the count always reaches
//! the log (a background thread writes it when no further message of the
//! kind comes), and [`suppressed_total`] gives the count since the start.
//!
//! Used for every message a request can trigger again and again: a refused
//! or untrusted file in BACKING met on each rewrite, a resource limit met
//! on each request. Messages that cannot repeat (start-up, a bug) go to
//! `log` directly. Knows nothing of its callers; the memory it keeps is
//! bounded ([`MAX_KEYS`] keys, forgotten once their window has passed).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Lines of one kind and key written per window.
pub const BURST: u32 = 5;
/// Lines of one kind written per window, whatever their keys.
pub const KIND_BURST: u32 = 50;
/// The window over which lines are counted (unless the environment says
/// otherwise, see [`window`]).
pub const WINDOW: Duration = Duration::from_secs(60);
/// The environment variable that sets the window, in milliseconds.
pub const WINDOW_ENV: &str = "CUTF8FS_RATELOG_WINDOW_MS";

/// The process's window: [`WINDOW_ENV`] if set to a number of milliseconds
/// (at least 1), else [`WINDOW`]. Read once.
pub fn window() -> Duration {
    static W: OnceLock<Duration> = OnceLock::new();
    *W.get_or_init(|| {
        std::env::var(WINDOW_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map_or(WINDOW, Duration::from_millis)
    })
}
/// Keys remembered at most (beyond, a new key counts against its kind only).
pub const MAX_KEYS: usize = 4096;

#[derive(Clone, Copy)]
struct Count {
    since: Instant,
    written: u32,
}

impl Count {
    fn new(now: Instant) -> Count {
        Count {
            since: now,
            written: 0,
        }
    }

    /// Counts one line; whether it may be written.
    fn take(&mut self, now: Instant, window: Duration, burst: u32) -> bool {
        if now.duration_since(self.since) >= window {
            *self = Count::new(now);
        }
        self.written += 1;
        self.written <= burst
    }
}

struct Kind {
    count: Count,
    /// Lines held back since the last summary line.
    held: u64,
    /// The level the held lines had (the highest).
    level: log::Level,
}

/// One limiter's state (the process has one, [`limiter`]; tests make their
/// own with a clock of their choosing).
pub struct Limiter {
    inner: Mutex<State>,
    total: AtomicU64,
    window: Duration,
}

impl Default for Limiter {
    /// A limiter with the [`WINDOW`].
    fn default() -> Limiter {
        Limiter::with_window(WINDOW)
    }
}

#[derive(Default)]
struct State {
    kinds: HashMap<&'static str, Kind>,
    keys: HashMap<(&'static str, u64), Count>,
}

fn key_hash(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// What to write for one message: the line itself, and before it the
/// summary of lines held back in a window that has passed.
#[derive(Debug, PartialEq, Eq)]
pub struct Decision {
    pub summary: Option<(log::Level, String)>,
    pub write: bool,
}

fn summary_line(kind: &str, held: u64, window: Duration) -> String {
    let secs = if window.subsec_millis() == 0 {
        window.as_secs().to_string()
    } else {
        format!("{:.3}", window.as_secs_f64())
    };
    format!(
        "{held} more message{} like this ({kind}) in the last {secs} s were not logged",
        if held == 1 { "" } else { "s" },
    )
}

impl Limiter {
    /// A limiter counting over `window`.
    pub fn with_window(window: Duration) -> Limiter {
        Limiter {
            inner: Mutex::default(),
            total: AtomicU64::new(0),
            window,
        }
    }

    /// Decides about one message of `kind` for `key` at `now`.
    pub fn decide(
        &self,
        now: Instant,
        level: log::Level,
        kind: &'static str,
        key: &str,
    ) -> Decision {
        let mut st = self.inner.lock();
        let st = &mut *st;
        let k = st.kinds.entry(kind).or_insert_with(|| Kind {
            count: Count::new(now),
            held: 0,
            level,
        });
        let window = self.window;
        let mut summary = None;
        if now.duration_since(k.count.since) >= window && k.held > 0 {
            summary = Some((k.level, summary_line(kind, k.held, window)));
            k.held = 0;
        }
        let kind_ok = k.count.take(now, window, KIND_BURST);
        let id = (kind, key_hash(key));
        let key_ok = if let Some(c) = st.keys.get_mut(&id) {
            c.take(now, window, BURST)
        } else {
            if st.keys.len() >= MAX_KEYS {
                st.keys.retain(|_, c| now.duration_since(c.since) < window);
            }
            if st.keys.len() < MAX_KEYS {
                let mut c = Count::new(now);
                c.take(now, window, BURST);
                st.keys.insert(id, c);
            }
            true
        };
        let write = kind_ok && key_ok;
        if !write {
            let k = st.kinds.get_mut(kind).expect("inserted above");
            if k.held == 0 || level < k.level {
                k.level = level;
            }
            k.held += 1;
            self.total.fetch_add(1, Ordering::Relaxed);
        }
        Decision { summary, write }
    }

    /// Summary lines of every kind whose window has passed with lines held
    /// back (they are then reported, and the count starts again).
    pub fn due(&self, now: Instant) -> Vec<(log::Level, String)> {
        let window = self.window;
        let mut st = self.inner.lock();
        let mut out = Vec::new();
        for (kind, k) in st.kinds.iter_mut() {
            if k.held > 0 && now.duration_since(k.count.since) >= window {
                out.push((k.level, summary_line(kind, k.held, window)));
                k.held = 0;
                k.count = Count::new(now);
            }
        }
        st.keys.retain(|_, c| now.duration_since(c.since) < window);
        out
    }

    /// Lines held back since this limiter was made.
    pub fn suppressed(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// The process's limiter (its window is [`window`]).
pub fn limiter() -> &'static Limiter {
    static L: OnceLock<Limiter> = OnceLock::new();
    L.get_or_init(|| Limiter::with_window(window()))
}

/// Lines held back since the process started.
pub fn suppressed_total() -> u64 {
    limiter().suppressed()
}

/// Writes the summaries of held-back lines once their window has passed,
/// even when no further message of their kind comes (started on the first
/// held-back line).
fn start_reporter() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("ratelog".into())
            .spawn(|| loop {
                // Started from any request's thread: not with its caller's
                // limits (`sys::own_rights`).
                let _ = crate::sys::own_rights();
                std::thread::sleep(window() / 6);
                for (level, line) in limiter().due(Instant::now()) {
                    log::log!(level, "{line}");
                }
            });
    });
}

/// Logs the line `msg` makes at `level`, unless messages of `kind` for
/// `key` (or of `kind` at all) exceeded their share of the window; `msg`
/// is called only when the line is written.
pub fn log(level: log::Level, kind: &'static str, key: &str, msg: impl FnOnce() -> String) {
    if !log::log_enabled!(level) {
        return;
    }
    let d = limiter().decide(Instant::now(), level, kind, key);
    if let Some((l, line)) = d.summary {
        log::log!(l, "{line}");
    }
    if d.write {
        log::log!(level, "{}", msg());
    } else {
        start_reporter();
    }
}

/// [`log()`] at warning level.
pub fn warn(kind: &'static str, key: &str, msg: impl FnOnce() -> String) {
    log(log::Level::Warn, kind, key, msg)
}

/// [`log()`] at error level.
pub fn error(kind: &'static str, key: &str, msg: impl FnOnce() -> String) {
    log(log::Level::Error, kind, key, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Level::{Error, Warn};

    #[test]
    fn one_key_gets_its_burst_then_a_count() {
        let l = Limiter::default();
        let t0 = Instant::now();
        let written = (0..1000)
            .filter(|i| {
                l.decide(t0 + Duration::from_millis(*i), Warn, "k", "/a")
                    .write
            })
            .count();
        assert_eq!(written, BURST as usize);
        assert_eq!(l.suppressed(), 1000 - BURST as u64);
        // Nothing due before the window has passed.
        assert!(l.due(t0 + Duration::from_secs(30)).is_empty());
        let due = l.due(t0 + WINDOW);
        assert_eq!(due.len(), 1);
        assert!(
            due[0].1.starts_with("995 more messages like this (k)"),
            "{due:?}"
        );
        // The next window starts afresh.
        let t1 = t0 + WINDOW + Duration::from_secs(1);
        assert!(l.decide(t1, Warn, "k", "/a").write);
    }

    #[test]
    fn many_keys_are_bounded_by_their_kind() {
        let l = Limiter::default();
        let t0 = Instant::now();
        let written = (0..10_000)
            .filter(|i| l.decide(t0, Warn, "k", &format!("/f{i}")).write)
            .count();
        assert_eq!(written, KIND_BURST as usize);
        // Another kind is not affected.
        assert!(l.decide(t0, Warn, "other", "/f1").write);
        // Memory stays bounded.
        assert!(l.inner.lock().keys.len() <= MAX_KEYS);
    }

    #[test]
    fn the_summary_comes_with_the_next_message_after_the_window() {
        let l = Limiter::default();
        let t0 = Instant::now();
        for _ in 0..BURST + 3 {
            l.decide(t0, Error, "k", "u1000");
        }
        let d = l.decide(t0 + WINDOW, Warn, "k", "u1000");
        assert!(d.write);
        let (level, line) = d.summary.unwrap();
        assert_eq!(level, Error);
        assert!(
            line.starts_with("3 more messages like this (k) in the last 60 s"),
            "{line}"
        );
        assert!(l.due(t0 + 2 * WINDOW).is_empty());
    }
}
