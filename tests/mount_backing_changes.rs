//! Files changed in BACKING behind the mount's back: a corrected
//! file truncated, grown, rewritten in place with the same size, replaced by
//! a rename, or deleted, while a handle of it is open through the mount for
//! reading, for writing, or mmapped.
//!
//! Every read through the old handle must be a slice of ONE version's view
//! (the old one, or the new one once the change is visible), or EOF; never
//! bytes of both, never a crash; the mount stays up and the daemon logs no
//! panic. Writes through an old handle follow "last writer wins" without
//! corrupting the encoding. Also: a pread far past a truncation, and isatty() on a
//! mount file answered quietly.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use crate::support::mount::*;

/// One way BACKING changes a file.
#[derive(Clone, Copy, Debug)]
enum Change {
    Truncate,
    Grow,
    SameSize,
    Rename,
    Delete,
}

const CHANGES: [Change; 5] = [
    Change::Truncate,
    Change::Grow,
    Change::SameSize,
    Change::Rename,
    Change::Delete,
];

fn old_bytes(seed: u64) -> Vec<u8> {
    corrected(&random_disk(200_000, seed))
}

/// Applies `c` to BACKING's `path`; returns the bytes the path holds
/// afterwards (None when it is gone).
fn apply(c: Change, path: &Path, old: &[u8], seed: u64) -> Option<Vec<u8>> {
    // Coarse file timestamps: let the clock move so the change gets a new
    // mtime (the daemon's only way to see a same-size rewrite); the
    // timestamp's granularity is the thing waited out, no event.
    std::thread::sleep(Duration::from_millis(30));
    match c {
        Change::Truncate => {
            let f = fs::OpenOptions::new().write(true).open(path).unwrap();
            f.set_len(50).unwrap();
            Some(old[..50].to_vec())
        }
        Change::Grow => {
            let more = random_disk(150_000, seed + 100);
            let f = fs::OpenOptions::new().append(true).open(path).unwrap();
            f.write_all_at(&more, old.len() as u64).unwrap();
            let mut new = old.to_vec();
            new.extend_from_slice(&more);
            Some(new)
        }
        Change::SameSize => {
            let mut disk = random_disk(old.len(), seed + 200);
            disk.truncate(old.len() - 8);
            let f = fs::OpenOptions::new().write(true).open(path).unwrap();
            f.write_all_at(&disk, 8).unwrap();
            Some(corrected(&disk))
        }
        Change::Rename => {
            let new = corrected(&random_disk(120_000, seed + 300));
            let tmp = path.with_extension("new");
            fs::write(&tmp, &new).unwrap();
            fs::rename(&tmp, path).unwrap();
            Some(new)
        }
        Change::Delete => {
            fs::remove_file(path).unwrap();
            None
        }
    }
}

/// What the old handle may see after the change: the old inode's view,
/// and the new content's view if the handle's inode is the changed one.
fn versions(c: Change, old: &[u8], new: &Option<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut v = vec![expected_view(old)];
    if let (Change::Truncate | Change::Grow | Change::SameSize, Some(n)) = (c, new) {
        v.push(expected_view(n));
    }
    v
}

/// `got`, read at `off` asking `want` bytes, is a whole read from one
/// version: exactly that version's bytes there (EOF past its end).
fn one_version(what: &str, got: &[u8], off: usize, want: usize, vs: &[Vec<u8>]) {
    one_version_ending(what, got, (off, want), vs, false);
}

/// As [`one_version`]; with `early`, the read may also be the first part
/// of a version's bytes ending at a page boundary: while the kernel learns
/// a new, smaller size, a read may end early there (man cutf8fs(1),
/// CACHING). Never a byte no version holds there.
fn one_version_ending(
    what: &str,
    got: &[u8],
    (off, want): (usize, usize),
    vs: &[Vec<u8>],
    early: bool,
) {
    let ok = vs.iter().any(|v| {
        let o = off.min(v.len());
        let e = &v[o..(o + want).min(v.len())];
        got == e
            || (early
                && got.len() < e.len()
                && (off + got.len()).is_multiple_of(4096)
                && e.starts_with(got))
    });
    assert!(
        ok,
        "{what}: {} bytes at {off} match no single version (lengths {:?}); head {:02X?}",
        got.len(),
        vs.iter().map(Vec::len).collect::<Vec<_>>(),
        &got[..got.len().min(16)]
    );
}

fn mount_alive(m: &Mount, what: &str) {
    assert!(
        fs::read_dir(m.m("")).is_ok(),
        "{what}: the mount is gone; log:\n{}",
        m.log_text()
    );
    let log = m.log_text();
    assert!(
        !log.contains("panicked") && !log.contains("BUG"),
        "{what}: the daemon panicked:\n{log}"
    );
}

const OFFSETS: [usize; 8] = [0, 49, 1000, 4095, 100_000, 199_990, 300_000, 10_000_000];

/// Checks reads through `f` (at OFFSETS, then to EOF) and its fstat.
fn check_handle(what: &str, f: &mut fs::File, vs: &[Vec<u8>]) {
    for off in OFFSETS {
        let mut buf = vec![0u8; 4096];
        let n = f
            .read_at(&mut buf, off as u64)
            .unwrap_or_else(|e| panic!("{what}: pread at {off}: {e}"));
        one_version(&format!("{what} pread"), &buf[..n], off, 4096, vs);
    }
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut all = Vec::new();
    f.read_to_end(&mut all)
        .unwrap_or_else(|e| panic!("{what}: read to EOF: {e}"));
    assert!(
        vs.contains(&all),
        "{what}: read to EOF ({} bytes) is no single version (lengths {:?})",
        all.len(),
        vs.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let len = f.metadata().unwrap().len() as usize;
    assert!(
        vs.iter().any(|v| v.len() == len),
        "{what}: fstat size {len} is no version's length"
    );
}

fn name(c: Change) -> String {
    format!("{c:?}.txt").to_lowercase()
}

fn matrix_mount() -> Mount {
    // attr_timeout=0: the kernel asks for fresh attributes before reads,
    // and entry_timeout=0 for a fresh lookup of a name replaced by rename,
    // so its page cache of the old version is dropped once the change is
    // visible; what remains to test is the daemon.
    Mount::new(&["attr_timeout=0", "entry_timeout=0"], |b| {
        for (i, c) in CHANGES.iter().enumerate() {
            fs::write(b.join(name(*c)), old_bytes(i as u64 + 1)).unwrap();
        }
    })
}

#[test]
fn reads_through_a_handle_opened_before_a_change_see_one_version() {
    let m = matrix_mount();
    for (i, c) in CHANGES.iter().enumerate() {
        let what = format!("read handle, {c:?}");
        let old = old_bytes(i as u64 + 1);
        let mut f = fs::File::open(m.m(&name(*c))).unwrap();
        let mut head = [0u8; 100];
        f.read_exact(&mut head).unwrap();
        let new = apply(*c, &m.b(&name(*c)), &old, i as u64);
        let vs = versions(*c, &old, &new);
        check_handle(&what, &mut f, &vs);
        // A second pass: the index for the new version is cached now.
        check_handle(&format!("{what}, again"), &mut f, &vs);
        mount_alive(&m, &what);
    }
}

#[test]
fn writes_through_a_handle_opened_before_a_change_last_writer_wins() {
    let m = matrix_mount();
    for (i, c) in CHANGES.iter().enumerate() {
        let what = format!("write handle, {c:?}");
        let old = old_bytes(i as u64 + 1);
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.m(&name(*c)))
            .unwrap();
        let mut head = [0u8; 100];
        f.read_exact(&mut head).unwrap();
        let new = apply(*c, &m.b(&name(*c)), &old, i as u64);
        let vs = versions(*c, &old, &new);
        check_handle(&what, &mut f, &vs);
        // The write comes last: it wins, over the version the handle sees.
        let mut target = vs.last().unwrap().clone();
        let at = 10usize;
        f.write_all_at(b"HELLO", at as u64)
            .unwrap_or_else(|e| panic!("{what}: pwrite: {e}"));
        if target.len() < at + 5 {
            target.resize(at + 5, 0);
        }
        target[at..at + 5].copy_from_slice(b"HELLO");
        let mut all = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut all).unwrap();
        assert!(
            all == target,
            "{what}: view after the write is not the write over one version"
        );
        drop(f);
        match (c, &new) {
            (Change::Truncate | Change::Grow | Change::SameSize, _) => {
                let disk = fs::read(m.b(&name(*c))).unwrap();
                assert!(
                    expected_view(&disk) == target,
                    "{what}: BACKING does not hold the written view"
                );
                assert!(
                    fs::read(m.m(&name(*c))).unwrap() == target,
                    "{what}: reopen"
                );
            }
            (Change::Rename, Some(n)) => {
                // The write went to the old, replaced inode; the new file
                // is untouched.
                let now = fs::read(m.b(&name(*c))).unwrap();
                assert!(
                    now == *n,
                    "{what}: BACKING's new file changed ({} bytes, was {}; first difference at {:?})",
                    now.len(),
                    n.len(),
                    now.iter().zip(n.iter()).position(|(a, b)| a != b)
                );
                assert!(
                    fs::read(m.m(&name(*c))).unwrap() == expected_view(n),
                    "{what}"
                );
            }
            _ => assert!(!m.b(&name(*c)).exists(), "{what}"),
        }
        mount_alive(&m, &what);
    }
}

/// Reads `len` bytes of a mapping at `off` in a child process: Ok(bytes),
/// or Err(signal) when the child died of one.
fn mmap_read(map: *const u8, off: usize, len: usize) -> Result<Vec<u8>, i32> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only copies from the mapping, writes to the pipe
    // and _exits (async-signal-safe calls only).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut buf = [0u8; 256];
        let len = len.min(256);
        for (i, b) in buf.iter_mut().enumerate().take(len) {
            // SAFETY: within the mapping's length (checked by the caller);
            // a page beyond the file's end raises SIGBUS, which is the
            // point of running this in a child.
            *b = unsafe { std::ptr::read_volatile(map.add(off + i)) };
        }
        // SAFETY: plain system calls in the child.
        unsafe {
            libc::write(fds[1], buf.as_ptr().cast(), len);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is ours; File takes it over.
    let mut r = unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    let mut out = Vec::new();
    r.read_to_end(&mut out).unwrap();
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFSIGNALED(status) {
        Err(libc::WTERMSIG(status))
    } else {
        Ok(out)
    }
}

#[test]
fn mmap_reads_after_a_change_see_one_version_or_sigbus_past_the_end() {
    let m = matrix_mount();
    let page = 4096usize;
    for (i, c) in CHANGES.iter().enumerate() {
        let what = format!("mmap, {c:?}");
        let old = old_bytes(i as u64 + 1);
        let old_view_len = expected_view(&old).len();
        let f = fs::File::open(m.m(&name(*c))).unwrap();
        // SAFETY: a shared read-only mapping of the file's view length.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                old_view_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "{what}: mmap");
        let map = map as *const u8;
        // Touch the first page before the change.
        assert!(mmap_read(map, 0, 16).is_ok(), "{what}: first page");
        let new = apply(*c, &m.b(&name(*c)), &old, i as u64);
        let vs = versions(*c, &old, &new);
        // Let the kernel see the change (attr_timeout=0).
        let _ = f.metadata();
        for off in [0usize, 49, 5000, 100_000, old_view_len - 64] {
            match mmap_read(map, off, 64) {
                Ok(got) => {
                    // Within the last page of a version, past its end, a
                    // mapping shows zeros (as on any filesystem).
                    let ok = vs.iter().any(|v| {
                        let o = off.min(v.len());
                        let e = &v[o..(o + 64).min(v.len())];
                        got.len() == 64
                            && got[..e.len()] == *e
                            && got[e.len()..].iter().all(|&b| b == 0)
                            && (e.len() == 64 || off < v.len().div_ceil(page) * page)
                    });
                    assert!(
                        ok,
                        "{what}: 64 mapped bytes at {off} match no single version"
                    );
                }
                Err(sig) => {
                    // Native Linux: SIGBUS only for pages wholly past EOF.
                    let new_len = vs.last().unwrap().len();
                    assert_eq!(sig, libc::SIGBUS, "{what}: signal at {off}");
                    assert!(
                        off >= new_len.div_ceil(page) * page,
                        "{what}: SIGBUS at {off}, inside the file ({new_len} bytes)"
                    );
                }
            }
        }
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(map as *mut _, old_view_len) };
        mount_alive(&m, &what);
    }
}

/// Finding 1 as reported: read a little, truncate to 50 bytes in BACKING,
/// pread 4096 bytes at 300 000 on the same handle. It killed the mount.
#[test]
fn pread_far_past_a_truncation_in_backing() {
    let old = corrected(&random_disk(400_000, 11));
    let m = Mount::new(&[], |b| fs::write(b.join("f.txt"), &old).unwrap());
    let f = fs::File::open(m.m("f.txt")).unwrap();
    let mut head = [0u8; 100];
    f.read_at(&mut head, 0).unwrap();
    let b = fs::OpenOptions::new()
        .write(true)
        .open(m.b("f.txt"))
        .unwrap();
    b.set_len(50).unwrap();
    let mut buf = vec![0u8; 4096];
    let r = f.read_at(&mut buf, 300_000);
    let vs = [expected_view(&old), expected_view(&old[..50])];
    match r {
        Ok(n) => one_version("pread at 300000", &buf[..n], 300_000, 4096, &vs),
        Err(e) => panic!(
            "pread at 300000 after truncation in BACKING: {e}\n{}",
            m.log_text()
        ),
    }
    mount_alive(&m, "pread far past a truncation");
    assert!(fs::read(m.m("f.txt")).is_ok(), "a fresh open reads");
}

/// Readers of the mount keep reading (page-aligned and unaligned preads,
/// some past the new end) while BACKING truncates the file, round after
/// round, with the default options (the watch on, long caches). Every
/// read returns bytes of one version or EOF: never zeros that no version
/// held (the kernel keeps the old size when an invalidation meets a short
/// read: `src/fs/coherence/inflight.rs`), never an error. After each round `stat`
/// and a read past the end answer from the new version at once.
#[test]
fn a_reader_racing_truncations_in_backing_sees_one_version_and_no_error() {
    race_truncations(1);
}

/// The same with two readers of one file at once. Not met: one reader's
/// short answer, taken by the kernel, moves the file's attribute version
/// on, so the other's READ in flight is answered under an older one and
/// its pages past the answer stay zeros (or, where the daemon sees it
/// coming, fail with EINTR); man cutf8fs(1), CACHING.
#[test]
#[ignore = "known limit: two readers racing a truncation made in BACKING (man cutf8fs, CACHING)"]
fn two_readers_racing_truncations_in_backing_see_one_version_and_no_error() {
    race_truncations(2);
}

fn race_truncations(readers: usize) {
    const ROUNDS: usize = 24;
    const LENGTHS: [usize; 4] = [0, 50, 4096 + 8, 150_001];
    let olds: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|r| corrected(&random_disk(400_000, 500 + r as u64)))
        .collect();
    let m = Mount::new(&[], |b| {
        for (r, old) in olds.iter().enumerate() {
            fs::write(b.join(format!("r{r}.txt")), old).unwrap();
        }
    });
    let offsets: Vec<u64> = vec![
        0, 4096, 8192, 49_152, 100_000, 147_456, 200_704, 299_008, 300_000, 360_448, 397_000,
    ];
    for (r, old) in olds.iter().enumerate() {
        let cut = LENGTHS[r % LENGTHS.len()];
        let vs = [expected_view(old), expected_view(&old[..cut])];
        let f = fs::File::open(m.m(&format!("r{r}.txt"))).unwrap();
        let mut head = [0u8; 100];
        f.read_at(&mut head, 0).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let total = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let readers: Vec<_> = (0..readers)
                .map(|t| {
                    let (f, vs, offsets, stop, m, total) = (&f, &vs, &offsets, &stop, &m, &total);
                    s.spawn(move || {
                        let mut i = t;
                        let mut reads = 0;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) || reads < 40 {
                            let off = offsets[i % offsets.len()];
                            let mut buf = vec![0u8; 4096];
                            let n = f.read_at(&mut buf, off).unwrap_or_else(|e| {
                                panic!(
                                    "round {r}: pread at {off} while BACKING truncates: {e}\n{}",
                                    m.log_text()
                                )
                            });
                            one_version_ending(
                                &format!("round {r}"),
                                &buf[..n],
                                (off as usize, 4096),
                                vs,
                                true,
                            );
                            i += 7;
                            reads += 1;
                            total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            // A varied moment into the reads: the race's timing is what
            // varies, no event.
            std::thread::sleep(Duration::from_millis((r % 5) as u64));
            let b = fs::OpenOptions::new()
                .write(true)
                .open(m.b(&format!("r{r}.txt")))
                .unwrap();
            b.set_len(cut as u64).unwrap();
            // Reads after the truncation too: each reader a few more.
            let at = total.load(std::sync::atomic::Ordering::Relaxed);
            let went_on = crate::support::mount::wait_for(60.0, || {
                total.load(std::sync::atomic::Ordering::Relaxed) >= at + 10 * readers.len()
                    || readers.iter().any(|t| t.is_finished())
            });
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(
                went_on,
                "round {r}: no reads after the truncation within 60 s"
            );
            for t in readers {
                if let Err(e) = t.join() {
                    std::panic::resume_unwind(e);
                }
            }
        });
        // The watch has told the kernel by now: the new size at once.
        let want = vs[1].len() as u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while fs::metadata(m.m(&format!("r{r}.txt"))).unwrap().len() != want {
            assert!(
                std::time::Instant::now() < deadline,
                "round {r}: stat shows no truncation to {want}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut buf = vec![0u8; 4096];
        let n = f
            .read_at(&mut buf, 300_000)
            .unwrap_or_else(|e| panic!("round {r}: pread past the new end after stat: {e}"));
        assert_eq!(n, 0, "round {r}: pread past the new end ({want})");
        let mut all = Vec::new();
        fs::File::open(m.m(&format!("r{r}.txt")))
            .unwrap()
            .read_to_end(&mut all)
            .unwrap();
        assert!(
            all == vs[1],
            "round {r}: a fresh open reads the new version"
        );
    }
    mount_alive(&m, "readers racing truncations");
}

/// Finding 5: isatty() (ioctl TCGETS) on a mount file is answered ENOTTY
/// quietly: a thousand of them add no warnings to the log.
#[test]
fn isatty_on_a_mount_file_is_quiet() {
    let m = Mount::new(&[], |b| fs::write(b.join("f"), b"text\n").unwrap());
    let f = fs::File::open(m.m("f")).unwrap();
    let before = m.log_text().lines().count();
    for _ in 0..1000 {
        // SAFETY: isatty on an open descriptor.
        assert_eq!(unsafe { libc::isatty(f.as_raw_fd()) }, 0);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTTY)
        );
    }
    let log = m.log_text();
    let grown = log.lines().count() - before;
    assert!(
        grown <= 2,
        "isatty ×1000 added {grown} log lines:\n{}",
        log.lines()
            .skip(before)
            .take(12)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A file written through a shared mapping changes its bytes without
/// moving its ctime once its page is writable (only the first write fault
/// stamps the time; on tmpfs, whose pages are never cleaned by writeback,
/// no later write does), so a stat-based cache cannot see the change (man
/// cutf8fs(1), SECURITY). The daemon scanned the file between the two
/// writes, and its index database stored the scan. Reads through the mount
/// must stay within the file, never panic, notice that the bytes disagree
/// with the index where it checks (a read reaching the view's end does),
/// build the index again — the size shown becomes the real view's — and
/// replace the database's record, so that the next mount is right too.
#[test]
fn a_change_through_a_shared_mapping_that_keeps_ctime_is_noticed_on_read() {
    let dir = tempfile::Builder::new()
        .prefix("cutf8fs-mmap-")
        .tempdir()
        .unwrap();
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&backing)
        .status()
        .expect("mount(8)");
    assert!(st.success(), "mount -t tmpfs failed");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _tmpfs = Unmount(backing.clone());
    let text = "a".repeat(20_000) + "\n";
    let f = backing.join("f.txt");
    fs::write(&f, corrected(text.as_bytes())).unwrap();
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    // SAFETY: the mapping covers the file, which nothing truncates while
    // it is mapped; the test writes it as any process may.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
    let ctime = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec(), m.len())
    };
    // The first write fault stamps the file; the scan comes once that
    // stamp is settled (so the index database keeps it).
    map[8 + 100] = b'b';
    let stamped = ctime(&f);
    // The daemon's racy margin, set short (`CUTF8FS_RACY_MARGIN_MS`), and
    // waited out: a time window, so time passing is the event itself.
    const MARGIN_MS: u64 = 300;
    std::thread::sleep(Duration::from_millis(MARGIN_MS + 50));
    let log = dir.path().join("daemon.log");
    let mut m = Mount::with(&["attr_timeout=0"])
        .env("CUTF8FS_RACY_MARGIN_MS", &MARGIN_MS.to_string())
        .on(&backing, &mnt, &log);
    assert_eq!(fs::metadata(m.m("f.txt")).unwrap().len(), 20_001);
    // U+089F: two bytes on disk, three in the view — the view grows by one,
    // and nothing about the file's stat changes.
    map[8 + 200..8 + 202].copy_from_slice(&[0xDF, 0xBF]);
    assert_eq!(
        ctime(&f),
        stamped,
        "the second write moved ctime: nothing to test"
    );
    let now = fs::read(&f).unwrap();
    let want = expected_view(&now);
    assert_eq!(want.len(), 20_002);
    // Whatever the first read returns, it is never more than the view the
    // daemon showed, and the mount stays up.
    let first = fs::read(m.m("f.txt")).expect("read through the mount");
    assert!(first.len() <= want.len());
    assert_eq!(&first[..], &want[..first.len()], "bytes of another view");
    assert_eq!(
        fs::metadata(m.m("f.txt")).unwrap().len(),
        20_002,
        "the size shown is still the stale index's; log:\n{}",
        m.log_text()
    );
    assert_eq!(fs::read(m.m("f.txt")).unwrap(), want);
    assert!(
        m.log_text().contains("no longer match its offset index"),
        "{}",
        m.log_text()
    );
    // The index database's record was replaced: a new mount is right.
    m.unmount();
    m.remount();
    assert_eq!(fs::metadata(m.m("f.txt")).unwrap().len(), 20_002);
    assert_eq!(fs::read(m.m("f.txt")).unwrap(), want);
    drop(m);
    drop(map);
}
