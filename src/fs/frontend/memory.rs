//! Memory the daemon frees goes back to the system: few allocator arenas,
//! trimmed once a burst of requests is over.
//!
//! glibc's malloc gives every thread that meets contention an arena of its
//! own (up to eight per CPU), and keeps what is freed in them for reuse. A
//! churn through the mount (three users creating, reading, renaming and
//! deleting 15 000 files) left the daemon 13.8 MiB above where it started,
//! after the kernel forgot every inode and nothing was cached any more:
//! free memory scattered over the worker threads' arenas, which
//! `malloc_trim` could not give back while small live allocations pinned
//! each arena's pages. With at most [`ARENAS`] arenas and a trim after each
//! burst the same churn ends 7.5 MiB above the start (measured by hand,
//! 2026-11-28; most of the rest is SQLite's and the allocator's own, and
//! `scripts/soak.sh` follows it for an hour).
//!
//! The arenas are shared by the workers, so two threads allocating at the
//! same moment may wait for each other's lock: a request allocates little
//! (its reply buffer, kept per thread by `crate::io::recycle`), and no
//! throughput change was measured at 2 CPUs.

use std::time::Duration;

/// Allocator arenas at most: one per CPU, 2 to 8.
fn arenas() -> i32 {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    i32::try_from(cpus.clamp(2, 8)).unwrap_or(2)
}

/// How long the daemon must have been quiet (no request counted) before
/// what it freed is given back.
const QUIET: Duration = Duration::from_secs(2);

/// Bounds the allocator's arenas; call before the threads start.
pub fn limit_arenas() {
    crate::sys::process::limit_arenas(arenas());
}

/// Starts the thread that trims the allocator's free memory once the
/// daemon has been quiet for [`QUIET`] after serving requests; `served`
/// counts the requests served so far.
pub fn spawn_trimmer(served: impl Fn() -> u64 + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("trim".into())
        .spawn(move || {
            let mut trimmed_at = served();
            let mut last = trimmed_at;
            loop {
                std::thread::sleep(QUIET);
                let now = served();
                if now == last && now != trimmed_at {
                    crate::sys::process::release_free_memory();
                    trimmed_at = now;
                }
                last = now;
            }
        })
        .map(drop)
}
