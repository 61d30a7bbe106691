//! Scans never block other users: index building skips holes, so
//! a sparse 20 GiB corrected file is classified without reading them;
//! scans of large dense files run off the FUSE workers, so a small `cat`
//! by another process completes while two big files are first stat'ed (or
//! opened with no index cached, or listed by `ls -l`) and their scans are
//! held (fanotify permission events on their reads): however slow the
//! machine, the cat is answered while the scans provably go on; and
//! classification leaves what SEEK_DATA/SEEK_HOLE answer on the backing file
//! unchanged. Times are printed, never asserted.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::gate::ReadGate;
use crate::support::mount::*;

const GIB: u64 = 1 << 30;

fn read_at(path: &std::path::Path, off: u64, len: usize) -> Vec<u8> {
    let f = fs::File::open(path).unwrap();
    let mut buf = vec![0u8; len];
    let n = f.read_at(&mut buf, off).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn sparse_20_gib_files_are_classified_without_reading_the_holes() {
    // A sparse corrected file made in BACKING: 1 MiB of text with growing
    // characters at the start, 1 MiB at 10 GiB, a hole up to 20 GiB.
    let mut a = random_disk(1 << 20, 5);
    a.push(b'\n');
    let mut b = random_disk(1 << 20, 6);
    b.push(b'\n');
    let far = 10 * GIB;
    let len = 20 * GIB;
    let m = Mount::new(&[], |d| {
        let f = fs::File::create(d.join("sparse.txt")).unwrap();
        f.write_all_at(&corrected(&a), 0).unwrap();
        f.write_all_at(&b, far).unwrap();
        f.set_len(len).unwrap();
    });
    let (va, vb) = (expected_view(&corrected(&a)), expected_view(&corrected(&b)));
    let grow_a = (va.len() - a.len()) as u64;
    let grow_b = (vb.len() - b.len()) as u64;
    let t = Instant::now();
    let size = fs::metadata(m.m("sparse.txt")).unwrap().len();
    eprintln!(
        "stat of a sparse 20 GiB corrected file (made in BACKING): {:?}",
        t.elapsed()
    );
    assert_eq!(size, len - 8 + grow_a + grow_b);
    let path = m.m("sparse.txt");
    assert_eq!(read_at(&path, 0, 4096), va[..4096]);
    assert_eq!(read_at(&path, 5 * GIB, 4096), vec![0u8; 4096]);
    let vfar = far - 8 + grow_a;
    assert_eq!(read_at(&path, vfar - 100, 100), vec![0u8; 100]);
    assert_eq!(read_at(&path, vfar, 4096), vb[..4096]);
    assert_eq!(read_at(&path, size - 10, 100), vec![0u8; 10]);

    // The same through the mount, as any user can: a one-line corrected
    // file extended to 20 GiB by truncate.
    fs::write(m.m("x.txt"), "x\n").unwrap();
    assert_eq!(&fs::read(m.b("x.txt")).unwrap()[..8], &cutf8::MAGIC);
    let t = Instant::now();
    let st = Command::new("truncate")
        .args(["-s", "20G"])
        .arg(m.m("x.txt"))
        .status()
        .unwrap();
    eprintln!("truncate -s 20G through the mount: {:?}", t.elapsed());
    assert!(st.success());
    let t = Instant::now();
    let size = fs::metadata(m.m("x.txt")).unwrap().len();
    eprintln!("stat of it: {:?}", t.elapsed());
    assert_eq!(size, 20 * GIB);
    let path = m.m("x.txt");
    assert_eq!(read_at(&path, 0, 4), b"x\n\0\0");
    assert_eq!(read_at(&path, 10 * GIB, 64), vec![0u8; 64]);
    assert_eq!(read_at(&path, 20 * GIB - 1, 64), vec![0u8; 1]);
    // Still corrected in BACKING, and still sparse.
    let bk = fs::metadata(m.b("x.txt")).unwrap();
    assert_eq!(bk.len(), 20 * GIB + 8);
    assert!(std::os::unix::fs::MetadataExt::blocks(&bk) < 1024);
}

/// 1 MiB of dense corrected disk text: every few bytes a character that
/// grows (a 2-byte unit, then "ab"), cut at a unit boundary.
fn dense_chunk() -> Vec<u8> {
    let mut chunk = Vec::new();
    while chunk.len() < (1 << 20) {
        chunk.extend(enc(0x0800 + (chunk.len() as u32 % 0xA0)));
        chunk.extend_from_slice(b"ab");
    }
    chunk.truncate(1 << 20);
    chunk
}

/// `big1.txt` and `big2.txt` in `dir`: corrected files of `n` times `chunk`.
fn write_big(dir: &std::path::Path, chunk: &[u8], n: u64) {
    for name in ["big1.txt", "big2.txt"] {
        let mut f = std::io::BufWriter::new(fs::File::create(dir.join(name)).unwrap());
        f.write_all(&cutf8::MAGIC).unwrap();
        for _ in 0..n {
            f.write_all(chunk).unwrap();
        }
        f.flush().unwrap();
    }
}

/// MiB chunks in a big file: past the size classified on the scan threads
/// (8 MiB), so its scan never runs on a FUSE worker.
const BIG_CHUNKS: u64 = 16;

/// How many copies of the small file each test makes (`fresh-N.txt`),
/// so that every small read can be the first of its file: a first read
/// classifies the file, and must not wait for the big files' scans
/// whatever its inode number (a classification of a cold small file once
/// waited for any scan that shared one of 64 locks with it).
const FRESH: usize = 600;

/// Small reads made while the big files' scans are held: enough that
/// some small file almost surely shares one of those 64 locks with a big
/// one.
const READS: usize = 200;

/// `small.txt` and its [`FRESH`] copies in `dir`.
fn write_small(dir: &std::path::Path, small: &[u8]) {
    fs::write(dir.join("small.txt"), small).unwrap();
    for i in 0..FRESH {
        fs::write(dir.join(format!("fresh-{i}.txt")), small).unwrap();
    }
}

/// The mount of these tests: two FUSE workers only, so that a scan on a
/// worker (two big files) would leave none for a small read.
fn mount(opts: &[&str], setup: impl FnOnce(&std::path::Path)) -> Mount {
    let mut all = vec!["threads=2"];
    all.extend_from_slice(opts);
    Mount::new(&all, setup)
}

/// Holds the reads of the big files by the daemon's scan threads until
/// dropped: how long a scan takes depends on the machine, so the tests do
/// not guess when the scans run, they stop them (and wait until they are
/// stopped, [`ReadGate::wait_held`]: a scan run on a FUSE worker instead
/// would never be held, and that wait fails).
fn hold_scans(m: &Mount) -> ReadGate {
    ReadGate::new(m.pid(), "scan-", &[m.b("big1.txt"), m.b("big2.txt")])
}

/// The behaviour: [`READS`] small reads one after another, each of a
/// small file never read before (a copy of `small.txt` while `*next` <
/// [`FRESH`], then `small.txt`) whole and a stat of the 32 MiB raw
/// `video.raw` if there is one, are all answered while the big files'
/// scans are held: none waited for a scan (had one, it would never be
/// answered until the scans go on). Read in this process's thread, as
/// `cat` would (lookup, open, read, release).
fn small_reads_beside_held_scans(m: &Mount, small: &[u8], next: &mut usize) {
    let names: Vec<_> = (0..READS)
        .map(|_| {
            if *next < FRESH {
                *next += 1;
                format!("fresh-{}.txt", *next - 1)
            } else {
                "small.txt".to_owned()
            }
        })
        .collect();
    let raw = m.b("video.raw").exists().then(|| m.m("video.raw"));
    let (dir, want) = (m.m(""), expected_view(small));
    let (tx, rx) = std::sync::mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        for name in names {
            let got = fs::read(dir.join(&name)).unwrap();
            assert_eq!(got, want, "{name}");
            if let Some(raw) = &raw {
                assert_eq!(fs::metadata(raw).unwrap().len(), 32 << 20);
            }
            let _ = tx.send(name);
        }
    });
    let mut done = 0;
    while done < READS {
        // A deadline for a hang, never a measure: the reads need no scan.
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(_) => done += 1,
            Err(_) => panic!(
                "a small read was not answered while the big files' scans were held \
                 ({done} of {READS} were): it waited for a scan"
            ),
        }
    }
    eprintln!("{READS} small reads beside held scans: {:?}", t.elapsed());
}

#[test]
fn a_small_cat_completes_while_two_big_files_are_first_stated() {
    let chunk = dense_chunk();
    // Cut at a unit boundary: 4 bytes per (2-byte unit + "ab").
    let chunk_view = expected_view(&corrected(&chunk)).len() as u64;
    let small = corrected("small file: é ࠀ 😀\n".repeat(20).as_bytes());
    // No attribute or entry caching: the `ls -l` below reaches the daemon
    // for every entry without waiting out a timeout.
    let m = mount(&["attr_timeout=0", "entry_timeout=0"], |d| {
        write_big(d, &chunk, BIG_CHUNKS);
        write_small(d, &small);
        // A large raw file: told raw by its head, never queued for a scan.
        fs::write(d.join("video.raw"), vec![0x5Au8; 32 << 20]).unwrap();
    });
    let mut next = 0;
    let want_big = BIG_CHUNKS * chunk_view;
    let mut gate = hold_scans(&m);
    let stats: Vec<_> = ["big1.txt", "big2.txt"]
        .into_iter()
        .map(|n| {
            let p = m.m(n);
            std::thread::spawn(move || fs::metadata(&p).map(|md| md.len()))
        })
        .collect();
    gate.wait_held(2, 60.0, "the two stats' scans on the scan threads");
    small_reads_beside_held_scans(&m, &small, &mut next);
    assert!(
        stats.iter().all(|h| !h.is_finished()),
        "a stat of a big file was answered before its scan went on"
    );
    drop(gate);
    for h in stats {
        assert_eq!(h.join().unwrap().unwrap(), want_big);
    }

    // Again through `ls -l` (readdirplus, then a stat of each entry): the
    // big files changed in BACKING (their class is unknown again), and the
    // listing must not scan them on the workers either. `ls` stats one
    // entry after another: one scan at a time.
    for name in ["big1.txt", "big2.txt"] {
        let st = Command::new("touch").arg(m.b(name)).status().unwrap();
        assert!(st.success());
    }
    let mut gate = hold_scans(&m);
    let dir = m.m("");
    let ls = std::thread::spawn(move || Command::new("ls").arg("-ln").arg(&dir).output());
    gate.wait_held(1, 60.0, "the listing's scan on the scan threads");
    small_reads_beside_held_scans(&m, &small, &mut next);
    assert!(!ls.is_finished(), "ls -l ended before its scan went on");
    drop(gate);
    let ls_out = ls.join().unwrap().unwrap();
    assert!(ls_out.status.success(), "ls -l failed: {ls_out:?}");
    let listing = String::from_utf8_lossy(&ls_out.stdout).into_owned();
    for name in ["big1.txt", "big2.txt"] {
        let line = listing
            .lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("{name} missing from ls -l:\n{listing}"));
        let size: u64 = line.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(size, want_big, "ls -l size of {name}:\n{listing}");
    }
}

#[test]
fn a_small_cat_completes_while_big_files_are_opened_without_a_cached_index() {
    // index_cache=0: no index is kept, so every open of a big corrected
    // file needs a scan (as when the cache let it go, or an index is larger
    // than the cache): the opens must not hold the workers a cat needs.
    // index_db=none: otherwise the stats' scans may be recorded in the
    // index database, and the opens need no scan at all.
    let chunk = dense_chunk();
    let view = expected_view(&corrected(&chunk));
    let small = corrected("small file: é ࠀ 😀\n".repeat(20).as_bytes());
    let m = mount(&["index_cache=0", "index_db=none"], |d| {
        write_big(d, &chunk, BIG_CHUNKS);
        write_small(d, &small);
    });
    let mut next = 0;
    // Known class (the stats scan on the scan threads), no index kept.
    for name in ["big1.txt", "big2.txt"] {
        assert_eq!(
            fs::metadata(m.m(name)).unwrap().len(),
            BIG_CHUNKS * view.len() as u64
        );
    }
    let mut gate = hold_scans(&m);
    let opens: Vec<_> = ["big1.txt", "big2.txt"]
        .into_iter()
        .map(|n| {
            let p = m.m(n);
            std::thread::spawn(move || Command::new("head").arg("-c").arg("64").arg(&p).output())
        })
        .collect();
    gate.wait_held(2, 60.0, "the two opens' scans on the scan threads");
    small_reads_beside_held_scans(&m, &small, &mut next);
    assert!(
        opens.iter().all(|h| !h.is_finished()),
        "an open of a big file was answered before its scan went on"
    );
    drop(gate);
    for h in opens {
        let out = h.join().unwrap().unwrap();
        assert!(out.status.success(), "head of a big file: {out:?}");
        assert_eq!(out.stdout, view[..64]);
    }
}

fn seek(f: &fs::File, whence: i32) -> i64 {
    // SAFETY: lseek on an open descriptor.
    unsafe { libc::lseek(f.as_raw_fd(), 0, whence) }
}

#[test]
fn classification_leaves_seek_hole_as_it_was() {
    let m = Mount::new(&[], |_| {});
    // fallocate of a new file: unwritten extents, which ext4 reports as a
    // hole — until something reads them into the page cache.
    let st = Command::new("fallocate")
        .args(["-l", "1M"])
        .arg(m.b("f"))
        .status()
        .unwrap();
    assert!(st.success());
    // And a file with 4 KiB of data followed by unwritten extents.
    fs::write(m.b("g"), vec![b'a'; 4096]).unwrap();
    let g = fs::OpenOptions::new().write(true).open(m.b("g")).unwrap();
    // SAFETY: fallocate on an open descriptor (KEEP_SIZE off: extends).
    assert_eq!(
        unsafe { libc::fallocate(g.as_raw_fd(), 0, 4096, 1 << 20) },
        0
    );
    g.sync_all().unwrap();
    drop(g);
    for name in ["f", "g"] {
        let before = {
            let f = fs::File::open(m.b(name)).unwrap();
            (seek(&f, libc::SEEK_DATA), seek(&f, libc::SEEK_HOLE))
        };
        let md = fs::metadata(m.m(name)).unwrap();
        assert_eq!(md.len(), fs::metadata(m.b(name)).unwrap().len());
        let after = {
            let f = fs::File::open(m.b(name)).unwrap();
            (seek(&f, libc::SEEK_DATA), seek(&f, libc::SEEK_HOLE))
        };
        assert_eq!(
            before, after,
            "{name}: SEEK_DATA/SEEK_HOLE changed by one stat through the mount"
        );
    }
}
