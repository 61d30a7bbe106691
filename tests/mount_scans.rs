//! Scans never block other users: index building skips holes, so
//! a sparse 20 GiB corrected file is classified in milliseconds; scans of
//! large dense files run off the FUSE workers, so a small `cat` by another
//! process completes while two 2 GiB files are first stat'ed (or opened
//! with no index cached, or listed by `ls -l`); and
//! classification leaves what SEEK_DATA/SEEK_HOLE answer on the backing file
//! unchanged. Times are printed, never asserted.

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// How many copies of the small file each test makes (`fresh-N.txt`),
/// so that every small read can be the first of its file: a first read
/// classifies the file, and must not wait for the big files' scans
/// whatever its inode number (a classification of a cold small file once
/// waited for any scan that shared one of 64 locks with it).
const FRESH: usize = 600;

/// `small.txt` and its [`FRESH`] copies in `dir`.
fn write_small(dir: &std::path::Path, small: &[u8]) {
    fs::write(dir.join("small.txt"), small).unwrap();
    for i in 0..FRESH {
        fs::write(dir.join(format!("fresh-{i}.txt")), small).unwrap();
    }
}

/// Small reads one after another while `busy()` (big files' scans under
/// way elsewhere): each reads a small file never read before (a copy of
/// `small.txt` while `*next` < [`FRESH`], then `small.txt`) whole and stats
/// the 32 MiB raw `video.raw` if there is one, and notes when it started
/// and ended. How long a scan takes depends on the machine and the codec,
/// so the tests do not guess when the scans run: they keep reading until
/// the scans' callers are done.
fn small_reads_while(
    m: &Mount,
    small: &[u8],
    next: &mut usize,
    busy: impl Fn() -> bool,
) -> Vec<(Instant, Instant)> {
    let mut reads = Vec::new();
    let raw = m.b("video.raw").exists().then(|| m.m("video.raw"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    while busy() {
        let name = if *next < FRESH {
            *next += 1;
            format!("fresh-{}.txt", *next - 1)
        } else {
            "small.txt".to_owned()
        };
        let start = Instant::now();
        // Read in this process, as `cat` would (lookup, open, read,
        // release): a process spawned on a loaded 2-CPU machine took 300 ms
        // to start, as long as a scan, without waiting for one.
        let got = fs::read(m.m(&name)).unwrap();
        assert_eq!(got, expected_view(small), "{name}");
        if let Some(raw) = &raw {
            assert_eq!(fs::metadata(raw).unwrap().len(), 32 << 20);
        }
        reads.push((start, Instant::now()));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    reads
}

/// The behaviour: a small read that started well before the first of the
/// big files' callers was done (while the scans ran, had they taken the
/// workers) ended before that caller did, and quickly: had it waited for a
/// worker held by a scan it would have ended only as that scan did, which
/// might still beat the caller's own next request. The margin leaves out a
/// read that merely began as a scan was about to end.
fn assert_no_read_waited(reads: &[(Instant, Instant)], first_done: Instant, shortest: Duration) {
    let margin = Duration::from_millis(50);
    let during: Vec<_> = reads
        .iter()
        .filter(|(start, _)| *start + margin < first_done)
        .collect();
    assert!(
        !during.is_empty(),
        "no small read ran during the scans: the big files are too small for this machine \
         ({} reads)",
        reads.len()
    );
    for (start, end) in &during {
        assert!(
            *end < first_done && *end - *start < shortest / 2,
            "a small read started {:?} before the first big file's caller was done and \
             waited for a scan (it took {:?}, the shortest caller {shortest:?})",
            first_done - *start,
            *end - *start
        );
    }
    eprintln!(
        "{} small reads during the scans, the slowest {:?}",
        during.len(),
        during.iter().map(|(s, e)| *e - *s).max().unwrap()
    );
}

#[test]
fn a_small_cat_completes_while_two_2_gib_files_are_first_stated() {
    let chunk = dense_chunk();
    // Cut at a unit boundary: 4 bytes per (2-byte unit + "ab").
    let chunk_view = expected_view(&corrected(&chunk)).len() as u64;
    let n_chunks = 2048u64;
    let small = corrected("small file: é ࠀ 😀\n".repeat(20).as_bytes());
    // No attribute or entry caching: the `ls -l` below reaches the daemon
    // for every entry without waiting out a timeout.
    let m = Mount::new(&["attr_timeout=0", "entry_timeout=0"], |d| {
        write_big(d, &chunk, n_chunks);
        write_small(d, &small);
        // A large raw file: told raw by its head, never queued for a scan.
        fs::write(d.join("video.raw"), vec![0x5Au8; 32 << 20]).unwrap();
    });
    let mut next = 0;
    let want_big = n_chunks * chunk_view;
    let t0 = Instant::now();
    let stats: Vec<_> = ["big1.txt", "big2.txt"]
        .into_iter()
        .map(|n| {
            let p = m.m(n);
            std::thread::spawn(move || {
                let t = Instant::now();
                let len = fs::metadata(&p).map(|md| md.len());
                (len, t.elapsed(), Instant::now())
            })
        })
        .collect();
    let reads = small_reads_while(&m, &small, &mut next, || {
        !stats.iter().all(|h| h.is_finished())
    });
    let mut first_stat = None::<Instant>;
    let mut shortest = Duration::MAX;
    for (i, h) in stats.into_iter().enumerate() {
        let (len, took, done) = h.join().unwrap();
        eprintln!("stat of 2 GiB dense file {}: {took:?}", i + 1);
        assert_eq!(len.unwrap(), want_big);
        first_stat = Some(first_stat.map_or(done, |f| f.min(done)));
        shortest = shortest.min(took);
    }
    eprintln!("all done after {:?}", t0.elapsed());
    assert_no_read_waited(&reads, first_stat.unwrap(), shortest);

    // Again through `ls -l` (readdirplus, then a stat of each entry): the
    // big files changed in BACKING (their class is unknown again), and the
    // listing must not scan them on the workers either.
    for name in ["big1.txt", "big2.txt"] {
        let st = Command::new("touch").arg(m.b(name)).status().unwrap();
        assert!(st.success());
    }
    let dir = m.m("");
    let ls = std::thread::spawn(move || {
        let t = Instant::now();
        let out = Command::new("ls").arg("-ln").arg(&dir).output().unwrap();
        (out, t.elapsed(), Instant::now())
    });
    let reads = small_reads_while(&m, &small, &mut next, || !ls.is_finished());
    let (ls_out, ls_took, ls_done) = ls.join().unwrap();
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
    eprintln!("ls -l with two unknown 2 GiB files: {ls_took:?}");
    assert_no_read_waited(&reads, ls_done, ls_took);
    drop(m); // the big files go with the temp dir
}

#[test]
fn a_small_cat_completes_while_big_files_are_opened_without_a_cached_index() {
    // index_cache=0: no index is kept, so every open of a big corrected
    // file needs a scan (as when the cache let it go, or an index is larger
    // than the cache): the opens must not hold the workers a cat needs.
    // index_db=none: otherwise, on a slow machine, the stats' scans may
    // start more than the racy window after the files were written, be
    // recorded in the index database, and the opens need no scan at all.
    let chunk = dense_chunk();
    let view = expected_view(&corrected(&chunk));
    let n_chunks = 1024u64;
    let small = corrected("small file: é ࠀ 😀\n".repeat(20).as_bytes());
    let m = Mount::new(&["index_cache=0", "index_db=none"], |d| {
        write_big(d, &chunk, n_chunks);
        write_small(d, &small);
    });
    let mut next = 0;
    // Known class (the stats scan on the scan threads), no index kept.
    for name in ["big1.txt", "big2.txt"] {
        assert_eq!(
            fs::metadata(m.m(name)).unwrap().len(),
            n_chunks * view.len() as u64
        );
    }
    let opens: Vec<_> = ["big1.txt", "big2.txt"]
        .into_iter()
        .map(|n| {
            let p = m.m(n);
            std::thread::spawn(move || {
                let t = Instant::now();
                let out = Command::new("head").arg("-c").arg("64").arg(&p).output();
                (out, t.elapsed(), Instant::now())
            })
        })
        .collect();
    let reads = small_reads_while(&m, &small, &mut next, || {
        !opens.iter().all(|h| h.is_finished())
    });
    let mut first_open = None::<Instant>;
    let mut shortest = Duration::MAX;
    for h in opens {
        let (out, took, done) = h.join().unwrap();
        let out = out.unwrap();
        assert!(out.status.success(), "head of a big file: {out:?}");
        assert_eq!(out.stdout, view[..64]);
        eprintln!("open + 64 bytes of a big file without a cached index: {took:?}");
        first_open = Some(first_open.map_or(done, |f| f.min(done)));
        shortest = shortest.min(took);
    }
    assert_no_read_waited(&reads, first_open.unwrap(), shortest);
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
