//! The daemon's counters: requests by kind, scans, index lookups, bytes
//! converted, and the report `cutf8fs --stats MOUNTPOINT` prints (read
//! from the virtual attribute `cutf8fs.stats` of the mount's root, see
//! `ops/xattr.rs`).
//!
//! Counting costs one relaxed atomic add on paths that already make a
//! system call or more (a FUSE request, a scan, a read): no lock, no
//! ordering with anything else. What is cheap to learn only when asked
//! (descriptors, memory, inodes, the index cache's size, the log lines
//! held back by `crate::ratelog`) is learned then. The counters are the
//! mount's (`Stats`, owned by `CutFs` and shared with what counts), not
//! the process's: two `CutFs` (unit tests) count apart.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// The request kinds counted, in report order (the names `CutFs::guard`
/// is given).
const OPS: [&str; 34] = [
    "lookup",
    "forget",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "access",
    "create",
    "fallocate",
    "lseek",
    "ioctl",
    "other",
];

/// One mount's counters.
pub(crate) struct Stats {
    started: Instant,
    requests: [AtomicU64; OPS.len()],
    scans: AtomicU64,
    scanned: AtomicU64,
    hits_memory: AtomicU64,
    hits_db: AtomicU64,
    misses: AtomicU64,
    view_read: AtomicU64,
    view_written: AtomicU64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            started: Instant::now(),
            requests: [const { AtomicU64::new(0) }; OPS.len()],
            scans: AtomicU64::new(0),
            scanned: AtomicU64::new(0),
            hits_memory: AtomicU64::new(0),
            hits_db: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            view_read: AtomicU64::new(0),
            view_written: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// Counts one request of kind `op` (unknown kinds count as "other").
    #[inline]
    pub(crate) fn request(&self, op: &str) {
        let k = OPS.iter().position(|&o| o == op).unwrap_or(OPS.len() - 1);
        self.requests[k].fetch_add(1, Relaxed);
    }

    /// Requests counted so far, of every kind.
    pub(crate) fn requests_served(&self) -> u64 {
        self.requests.iter().map(|r| r.load(Relaxed)).sum()
    }

    /// Counts a scan of `bytes` bytes (a corrected file read to index it).
    pub(crate) fn scan(&self, bytes: u64) {
        self.scans.fetch_add(1, Relaxed);
        self.scanned.fetch_add(bytes, Relaxed);
    }

    /// Counts one index lookup.
    pub(crate) fn lookup(&self, how: Lookup) {
        match how {
            Lookup::Memory => &self.hits_memory,
            Lookup::Database => &self.hits_db,
            Lookup::Miss => &self.misses,
        }
        .fetch_add(1, Relaxed);
    }

    /// Counts view bytes served by reading corrected files (converted V).
    #[inline]
    pub(crate) fn view_read(&self, bytes: u64) {
        self.view_read.fetch_add(bytes, Relaxed);
    }

    /// Counts view bytes written into corrected files (converted W).
    #[inline]
    pub(crate) fn view_written(&self, bytes: u64) {
        self.view_written.fetch_add(bytes, Relaxed);
    }
}

/// Where an index lookup was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The in-memory cache.
    Memory,
    /// The persistent index database.
    Database,
    /// Neither: a scan follows.
    Miss,
}

/// What the report adds that the counters do not hold, learned when asked.
pub(crate) struct Now {
    pub(crate) backing: String,
    pub(crate) inodes: usize,
    pub(crate) cache_used: usize,
    pub(crate) cache_limit: usize,
}

/// The report: `name value` lines, indented ones grouped under the line
/// above them, every number in plain digits first (so scripts can split
/// on whitespace), a human size after it where it helps.
pub(crate) fn report(c: &Stats, now: &Now) -> String {
    let get = |a: &AtomicU64| a.load(Relaxed);
    let mut s = format!(
        "cutf8fs {} serving {} for {} s\n",
        env!("CARGO_PKG_VERSION"),
        now.backing,
        c.started.elapsed().as_secs()
    );
    let total: u64 = c.requests.iter().map(get).sum();
    s += &format!("requests {total}\n");
    for (op, n) in OPS.iter().zip(&c.requests) {
        let n = get(n);
        if n > 0 || matches!(*op, "lookup" | "getattr" | "read" | "write") {
            s += &format!("  {op} {n}\n");
        }
    }
    let scanned = get(&c.scanned);
    s += &format!(
        "scans {} ({scanned} bytes read to index corrected files, {})\n",
        get(&c.scans),
        size(scanned)
    );
    s += &format!(
        "index hits {} (memory {}, database {}), misses {}\n",
        get(&c.hits_memory) + get(&c.hits_db),
        get(&c.hits_memory),
        get(&c.hits_db),
        get(&c.misses)
    );
    s += &format!(
        "index cache {} bytes of {} ({} of {})\n",
        now.cache_used,
        now.cache_limit,
        size(now.cache_used as u64),
        size(now.cache_limit as u64)
    );
    let (r, w) = (get(&c.view_read), get(&c.view_written));
    s += &format!(
        "converted {r} bytes read as UTF-8 ({}), {w} bytes written as Corrected UTF-8 ({})\n",
        size(r),
        size(w)
    );
    s += &format!("inodes {} known\n", now.inodes);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(0, |(soft, _)| soft);
    s += &format!("descriptors {fds} open (limit {limit})\n");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (rss, peak) = (kib("VmRSS:") << 10, kib("VmHWM:") << 10);
    s += &format!(
        "memory {rss} bytes resident ({}), peak {peak} ({})\n",
        size(rss),
        size(peak)
    );
    s += &format!(
        "log lines held back {} (rate-limited: man cutf8fs, LOGS)\n",
        crate::ratelog::suppressed_total()
    );
    s += &format!(
        "turns waited {} (requests queued for their user's turn: man cutf8fs, RESOURCES)\n",
        fuser::turns_queued()
    );
    s
}

/// The report of the daemon serving the mount at `mountpoint`, asked
/// through the mount (`cutf8fs --stats`): its root's `cutf8fs.stats`.
pub fn query(mountpoint: &std::path::Path) -> Result<String, String> {
    let shown = mountpoint.display();
    let real = std::fs::canonicalize(mountpoint).map_err(|e| format!("{shown}: {e}"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    match crate::mountinfo::cutf8fs_mount_of(&mounts, &real) {
        Some((at, _)) if at == real => {}
        _ => return Err(format!("{shown}: not a cutf8fs mount point")),
    }
    let dir = std::fs::File::open(&real).map_err(|e| format!("{shown}: {e}"))?;
    let name = c"cutf8fs.stats";
    let mut buf = vec![0u8; 64 << 10];
    use std::os::fd::AsFd;
    let n = crate::sys::getxattr(dir.as_fd(), name, &mut buf).map_err(|e| {
        format!("{shown}: cannot read its statistics ({e}); is its daemon older than this cutf8fs?")
    })?;
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `1.50 MiB`, exact below 1 KiB (as `cutf8 migrate` shows sizes).
fn size(n: u64) -> String {
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < 6 {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        u => format!("{v:.2} {}iB", ["K", "M", "G", "T", "P", "E"][u - 1]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_counts_in_its_own_place() {
        let c = Stats::default();
        let before: Vec<u64> = c.requests.iter().map(|a| a.load(Relaxed)).collect();
        c.request("read");
        c.request("no such request");
        let after: Vec<u64> = c.requests.iter().map(|a| a.load(Relaxed)).collect();
        let read = OPS.iter().position(|&o| o == "read").unwrap();
        assert!(after[read] > before[read]);
        assert!(after[OPS.len() - 1] > before[OPS.len() - 1]);
        let text = report(
            &c,
            &Now {
                backing: "/b".into(),
                inodes: 3,
                cache_used: 0,
                cache_limit: 64 << 20,
            },
        );
        assert!(text.contains("\n  read "), "{text}");
        assert!(text.contains("inodes 3 known"), "{text}");
        assert_eq!(size(1536), "1.50 KiB");
        assert_eq!(size(100), "100 B");
    }
}
