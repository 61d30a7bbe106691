//! The first reads of a corrected file the daemon has never indexed, and
//! cold sequential reads of one it has: the first `cat` shows exactly what
//! `cutf8 decode` gives and leaves the file indexed (the next `stat` scans
//! nothing), random reads before and during a sequential read agree with
//! the decoded text, a kill -9 in the middle of a first read leaves the
//! index database right, a cold sequential read reaches the daemon in
//! requests of 1 MiB (the mount's read-ahead, `READ_AHEAD` in
//! src/fs/frontend/mount.rs), and reads of any size at any offset give exactly the
//! view.

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::mount::{corrected, enc, Mount};

/// Disk bytes of text with length-changing units in most 4 KiB blocks (so
/// view offsets drift from disk offsets), about `len` bytes.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        match x % 97 {
            0 => out.extend_from_slice(&enc(0x0840)), // 2 on disk, 3 in view
            1 => out.extend_from_slice(&enc(0x10330)), // 3 on disk, 4 in view
            2 => out.extend_from_slice(&enc(0x00E9)),
            3 => out.extend_from_slice(&enc(0x65E5)),
            4..=9 => out.push(b'\n'),
            n => out.push(b'a' + (n % 26) as u8),
        }
    }
    out.push(b'\n');
    out
}

/// What `cutf8 decode` makes of a backing file.
fn decoded(file: &Path) -> Vec<u8> {
    let out = Command::new(crate::support::cli::BIN)
        .arg("decode")
        .arg(file)
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "cutf8 decode");
    out.stdout
}

/// The daemon's count of index scans.
fn scans(m: &Mount) -> u64 {
    m.stats_count("scans")
}

fn cat(path: &Path) -> Vec<u8> {
    let out = Command::new("cat").arg(path).output().unwrap();
    crate::support::run::succeeded(&out, format!("cat {}", path.display()));
    out.stdout
}

/// 24 MiB: above the size whose scans run on the scan threads.
const BIG: usize = 24 << 20;

#[test]
fn a_never_indexed_files_first_cat_is_its_decoding_and_leaves_it_indexed() {
    let m = Mount::new(&["index_db=none"], |b| {
        fs::write(b.join("big.txt"), corrected(&text(BIG, 7))).unwrap();
    });
    let want = decoded(&m.b("big.txt"));
    assert_eq!(scans(&m), 0, "nothing read before the first cat");
    let got = cat(&m.m("big.txt"));
    assert!(got == want, "the first cat differs from cutf8 decode");
    assert_eq!(scans(&m), 1, "one scan for the first cat");
    // The index is complete: size, random reads and a second cat need
    // no scan.
    assert_eq!(
        fs::metadata(m.m("big.txt")).unwrap().len(),
        want.len() as u64
    );
    let f = File::open(m.m("big.txt")).unwrap();
    let mut buf = vec![0u8; 1000];
    for off in [want.len() - 1000, 12_345, 9 << 20] {
        f.read_exact_at(&mut buf, off as u64).unwrap();
        assert!(buf == want[off..off + 1000], "at {off}");
    }
    assert!(cat(&m.m("big.txt")) == want);
    assert_eq!(scans(&m), 1, "the file was scanned again");
}

/// Random reads of a never-indexed file, from several threads, before and
/// while one sequential reader goes through it, each compared with the
/// decoded text.
#[test]
fn random_reads_of_a_never_indexed_file_agree_with_its_decoding() {
    let m = Mount::new(&["index_db=none"], |b| {
        fs::write(b.join("big.txt"), corrected(&text(BIG, 11))).unwrap();
        fs::write(b.join("two.txt"), corrected(&text(BIG, 12))).unwrap();
    });
    for name in ["big.txt", "two.txt"] {
        let want = decoded(&m.b(name));
        let path = m.m(name);
        std::thread::scope(|s| {
            if name == "two.txt" {
                // A sequential reader beside the random ones.
                s.spawn(|| assert!(cat(&path) == want, "{name}: the cat differs"));
            }
            for t in 0..4u64 {
                let (want, path) = (&want, &path);
                s.spawn(move || {
                    let f = File::open(path).unwrap();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    for _ in 0..200 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let off = (x % want.len() as u64) as usize;
                        let len = 1 + (x >> 40) as usize % 9000;
                        let mut buf = vec![0u8; len];
                        let n = f.read_at(&mut buf, off as u64).unwrap();
                        let end = (off + len).min(want.len());
                        assert_eq!(n, end - off, "{name}: read of {len} at {off}");
                        assert!(buf[..n] == want[off..end], "{name}: {len} bytes at {off}");
                    }
                });
            }
        });
    }
}

/// kill -9 while the first read of a never-indexed file is under way
/// (the scan that sizes it, or the reads after it): the next mount serves
/// the file right, sized from the database or by a scan, never from a
/// half-built record.
#[test]
fn kill_9_during_a_first_read_leaves_the_index_database_right() {
    let mut m = Mount::with(&[])
        .env("CUTF8FS_RACY_MARGIN_MS", "300")
        .fresh(|b| {
            fs::write(b.join("big.txt"), corrected(&text(4 * BIG, 13))).unwrap();
        });
    // Old enough that its record is stored: the racy margin is a time
    // window, so time passing is the event itself.
    std::thread::sleep(Duration::from_millis(350));
    let want = decoded(&m.b("big.txt"));
    let size = fs::metadata(m.b("big.txt")).unwrap().len();
    for round in 0..3 {
        let path = m.m("big.txt");
        let read_so_far = daemon_bytes_read(m.pid());
        let mut reader = Command::new("dd")
            .arg(format!("if={}", path.display()))
            .args(["of=/dev/null", "bs=64k"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Into the scan, then a little further each round: the daemon has
        // read a quarter of the file, then a half, then three quarters (or
        // the reader is done already).
        let pid = m.pid();
        let into = (round + 1) * size / 4;
        crate::support::mount::wait_until("the daemon's reads into the scan", 60.0, || {
            daemon_bytes_read(pid) >= read_so_far + into
                || reader.try_wait().ok().flatten().is_some()
        });
        eprintln!(
            "round {round}: killed after the daemon read {} bytes",
            daemon_bytes_read(pid) - read_so_far
        );
        m.kill9();
        let _ = reader.wait();
        m.remount();
        assert_eq!(
            fs::metadata(m.m("big.txt")).unwrap().len(),
            want.len() as u64,
            "round {round}: size after the kill"
        );
        assert!(
            cat(&m.m("big.txt")) == want,
            "round {round}: content after the kill"
        );
        m.unmount();
        m.remount();
        assert!(
            cat(&m.m("big.txt")) == want,
            "round {round}: content from the database"
        );
        assert_eq!(scans(&m), 0, "round {round}: not served from the database");
    }
}

/// Bytes process `pid` has read so far (`rchar` of /proc/PID/io).
fn daemon_bytes_read(pid: u32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: ")?.parse().ok())
        .unwrap_or(0)
}

/// The daemon's count of READ requests.
fn read_requests(m: &Mount) -> u64 {
    m.stats_count("read")
}

/// A cold sequential read reaches the daemon in requests of 1 MiB, the
/// largest the kernel sends, not one of 128 or 256 KiB at a time: the
/// mount reads ahead 4 MiB (its `read_ahead_kb`, which the daemon sets
/// as root), and the bytes are the decoded text.
#[test]
fn a_cold_sequential_read_comes_in_requests_of_a_mebibyte() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("big.txt"), corrected(&text(BIG, 17))).unwrap();
    });
    let want = decoded(&m.b("big.txt"));
    let dev = fs::metadata(&m.mnt).unwrap().dev();
    let ra = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    assert_eq!(fs::read_to_string(&ra).unwrap().trim(), "4096", "{ra}");
    // Sized and indexed; then the mount's pages of the file dropped.
    assert_eq!(
        fs::metadata(m.m("big.txt")).unwrap().len(),
        want.len() as u64
    );
    let f = File::open(m.m("big.txt")).unwrap();
    nix::fcntl::posix_fadvise(
        &f,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .unwrap();
    let before = read_requests(&m);
    assert!(
        cat(&m.m("big.txt")) == want,
        "the cold cat differs from cutf8 decode"
    );
    let reads = read_requests(&m) - before;
    let mib = want.len().div_ceil(1 << 20) as u64;
    assert!(
        reads <= mib + 4,
        "{reads} READ requests for {mib} MiB: the kernel reads ahead less than a MiB at a time"
    );
}

/// Reads of any size through O_DIRECT (each one request of the caller's
/// size, up to 1 MiB) at any offset, one file's large reads alternating
/// with another's short reads at its end, give exactly each file's view:
/// nothing of one read's bytes reaches another's reply.
#[test]
fn direct_reads_of_any_size_give_exactly_the_view() {
    use std::os::unix::fs::OpenOptionsExt;
    let m = Mount::new(&[], |b| {
        fs::write(b.join("big.txt"), corrected(&text(3 << 20, 23))).unwrap();
        fs::write(b.join("small.txt"), corrected(&text(5000, 29))).unwrap();
        fs::write(b.join("raw.bin"), vec![0x5a; 3000]).unwrap();
    });
    let big = decoded(&m.b("big.txt"));
    let small = decoded(&m.b("small.txt"));
    let raw = vec![0x5au8; 3000];
    let open = |name: &str| {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.m(name))
            .unwrap()
    };
    let (fb, fs_, fr) = (open("big.txt"), open("small.txt"), open("raw.bin"));
    let mut x = 99u64;
    for i in 0..120 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % big.len() as u64) as usize;
        let len = [1 << 20, (1 << 20) - 3, 777_777, 4096, 9][i % 5];
        let mut buf = vec![0u8; len];
        let n = fb.read_at(&mut buf, off as u64).unwrap();
        let want = &big[off..(off + len).min(big.len())];
        assert!(
            n == want.len() && buf[..n] == *want,
            "big.txt {off}+{len}: {n} bytes"
        );
        let off = small.len() - (x % 64) as usize;
        let mut buf = vec![0u8; 1 << 20];
        let n = fs_.read_at(&mut buf, off as u64).unwrap();
        assert!(buf[..n] == small[off..], "small.txt {off}: {n} bytes");
        let off = (x % 3000) as usize;
        let n = fr.read_at(&mut buf, off as u64).unwrap();
        assert!(buf[..n] == raw[off..], "raw.bin {off}: {n} bytes");
    }
}
