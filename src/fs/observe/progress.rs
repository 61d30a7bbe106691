//! Long first scans say how far they are, in the log: the first `stat` of
//! a large corrected file that no index knows reads the whole file, and
//! `ls -l` waits meanwhile with nothing to show. Every
//! [`interval`] (2 s, or `CUTF8FS_SCAN_PROGRESS_MS` milliseconds) one
//! thread logs each scan running longer than that: the file, bytes read
//! of its size, how long so far; and once it ends, that it ended. Scans
//! register with the mount's [`Progress`] (`content::index_for`); the
//! scanning itself reports its position through an atomic
//! (`crate::io::build_index_watched`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Files smaller than this are scanned without registering (a scan runs
/// at a GB/s or more: these end before any report is due).
pub const WATCHED: u64 = 64 << 20;

/// One scan in progress.
pub struct Scan {
    name: String,
    size: u64,
    started: Instant,
    /// Bytes of the file scanned so far (set by the scan).
    pub done: AtomicU64,
    reported: std::sync::atomic::AtomicBool,
}

/// One mount's scans in progress, and its reporting thread (started with
/// the first scan registered, gone with the `Progress`).
#[derive(Default)]
pub struct Progress {
    running: Mutex<Vec<Arc<Scan>>>,
    reporter: OnceLock<()>,
}

/// How often progress is logged.
pub fn interval() -> Duration {
    static I: OnceLock<Duration> = OnceLock::new();
    *I.get_or_init(|| {
        std::env::var("CUTF8FS_SCAN_PROGRESS_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(2), Duration::from_millis)
    })
}

impl Progress {
    /// Registers a scan of `name` (`size` bytes) until the guard drops.
    pub fn start(self: &Arc<Progress>, name: String, size: u64) -> Guard<'_> {
        let scan = Arc::new(Scan {
            name,
            size,
            started: Instant::now(),
            done: AtomicU64::new(0),
            reported: std::sync::atomic::AtomicBool::new(false),
        });
        self.running.lock().push(scan.clone());
        self.reporter
            .get_or_init(|| start_reporter(Arc::downgrade(self)));
        Guard(self, scan)
    }
}

/// A registered scan; dropping it ends the registration.
pub struct Guard<'a>(&'a Progress, Arc<Scan>);

impl Guard<'_> {
    pub fn done(&self) -> &AtomicU64 {
        &self.1.done
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let Guard(progress, scan) = self;
        progress.running.lock().retain(|s| !Arc::ptr_eq(s, scan));
        if scan.reported.load(Relaxed) {
            log::info!(
                "{}: first scan done in {:.1} s; its index is kept (later opens and stats \
                 do not read the file again)",
                scan.name,
                scan.started.elapsed().as_secs_f64()
            );
        }
    }
}

/// The thread that logs `progress`'s long scans, until it is gone.
fn start_reporter(progress: Weak<Progress>) {
    let _ = std::thread::Builder::new()
        .name("scan-progress".into())
        .spawn(move || loop {
            std::thread::sleep(interval());
            let Some(p) = progress.upgrade() else { return };
            let scans: Vec<Arc<Scan>> = p.running.lock().clone();
            drop(p);
            for s in scans {
                if s.started.elapsed() >= interval() {
                    report(&s);
                }
            }
        });
}

fn report(s: &Scan) {
    let done = s.done.load(Relaxed).min(s.size);
    let pct = (done * 100).checked_div(s.size).unwrap_or(100);
    s.reported.store(true, Relaxed);
    crate::ratelog::log(log::Level::Info, "scan-progress", &s.name, || {
        format!(
            "{}: first scan of this corrected file, {} MiB of {} MiB read ({pct} %) in {:.1} s \
             (stat and open of it wait for the scan)",
            s.name,
            done >> 20,
            s.size >> 20,
            s.started.elapsed().as_secs_f64()
        )
    });
}
