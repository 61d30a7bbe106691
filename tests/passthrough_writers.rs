//! Passthrough beside writers, on read-write mounts with the default options
//! (`src/fs/state/passthrough.rs`): a large raw file's readers are served by the
//! kernel whoever else has it open, while its writers' reads, writes,
//! appends and truncations still reach the daemon, so the magic-number
//! guard and the first-write rule hold; a writer's shared mapping is the
//! backing file's. "Served by the kernel" is told as in `passthrough`: a
//! read that completes while the daemon is stopped (SIGSTOP).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::passthrough::{by_kernel, one_raw_file, raw_bytes, read_all, while_stopped};
use crate::support::mount::{expected_view, wait_for, Mount};

use cutf8::MAGIC;

/// `len` bytes of `f` at `at` (positioned reads only).
fn read_at(f: &File, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut buf[got..], at + got as u64).unwrap() {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    buf
}

fn rw(path: &std::path::Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} for writing: {e}", path.display()))
}

/// Size and mtime seen through the mount and in BACKING agree.
fn same_attrs(m: &Mount, name: &str) {
    let (mm, bm) = (
        fs::metadata(m.m(name)).unwrap(),
        fs::metadata(m.b(name)).unwrap(),
    );
    assert_eq!(mm.len(), bm.len(), "{name}: size through the mount");
    assert_eq!(
        (mm.mtime(), mm.mtime_nsec()),
        (bm.mtime(), bm.mtime_nsec()),
        "{name}: mtime through the mount"
    );
}

/// A reader opened first stays with the kernel while a writer opened beside
/// it writes, appends and truncates through the daemon; the reader sees
/// each change at once, and the attributes follow.
#[test]
fn reader_and_writer_of_a_big_raw_file() {
    let data = raw_bytes(1 << 20, 21);
    let n = data.len() as u64;
    let m = one_raw_file(&[], &data);
    let r = Arc::new(File::open(m.m("raw.bin")).unwrap());
    let r2 = r.clone();
    assert!(
        by_kernel(&m, move || read_all(&r2, 1 << 20).unwrap()),
        "a reader of a big raw file on a default read-write mount is served by the kernel"
    );
    let w = Arc::new(rw(&m.m("raw.bin")));
    let w2 = w.clone();
    let early = while_stopped(
        m.pid(),
        Duration::from_secs(1),
        move || w2.write_at(b"HELLO", 100).unwrap(),
        |n| assert_eq!(n, 5),
    );
    assert!(
        early.is_none(),
        "the writer's write is a request to the (stopped) daemon"
    );
    assert_eq!(read_at(&r, 100, 5), b"HELLO", "the reader sees the write");
    assert_eq!(read_at(&w, 100, 5), b"HELLO", "so does the writer");
    same_attrs(&m, "raw.bin");

    let a = OpenOptions::new()
        .append(true)
        .open(m.m("raw.bin"))
        .unwrap();
    (&a).write_all(b"appended line\n").unwrap();
    assert_eq!(read_at(&r, n, 100), b"appended line\n", "the append");
    assert_eq!(fs::metadata(m.m("raw.bin")).unwrap().len(), n + 14);
    assert_eq!(r.metadata().unwrap().len(), n + 14, "fstat of the reader");
    same_attrs(&m, "raw.bin");

    // Truncation by another handle.
    nix::unistd::truncate(&m.m("raw.bin"), 4096).unwrap();
    assert_eq!(read_all(&r, 1 << 21).unwrap().len(), 4096);
    assert_eq!(read_all(&w, 1 << 21).unwrap().len(), 4096);
    same_attrs(&m, "raw.bin");
    // Grown again by the writer past the end: zeros between, as natively.
    w.write_at(b"END", 8192).unwrap();
    let all = read_all(&r, 1 << 21).unwrap();
    assert_eq!(all.len(), 8195);
    assert!(all[4096..8192].iter().all(|&b| b == 0));
    assert_eq!(&all[8192..], b"END");
    assert_eq!(&all[100..105], b"HELLO");
    same_attrs(&m, "raw.bin");

    let mut want = data[..4096].to_vec();
    want[100..105].copy_from_slice(b"HELLO");
    want.resize(8192, 0);
    want.extend_from_slice(b"END");
    assert!(fs::read(m.b("raw.bin")).unwrap() == want, "BACKING");
    let r2 = r.clone();
    assert!(
        by_kernel(&m, move || read_all(&r2, 1 << 20).unwrap()),
        "the reader is still served by the kernel"
    );
}

/// A writer of a big raw file with no reader beside it keeps the kernel's
/// page cache (a direct-I/O writer's reads would each be a request): a
/// reader that opens later is served by the daemon and reads each write;
/// a writer that opens beside a passthrough reader joins passthrough.
#[test]
fn reader_opened_after_a_writer() {
    let data = raw_bytes(2 << 20, 22);
    let m = one_raw_file(&[], &data);
    let w = Arc::new(rw(&m.m("raw.bin")));
    assert!(read_at(&w, 0, 1 << 20) == data[..1 << 20]);
    let w2 = w.clone();
    let cached = while_stopped(
        m.pid(),
        Duration::from_secs(30),
        move || read_at(&w2, 4096, 4096),
        |_| {},
    );
    assert!(
        cached.is_some(),
        "a lone writer reads again from the kernel's page cache"
    );
    let r = Arc::new(File::open(m.m("raw.bin")).unwrap());
    assert!(read_all(&r, 4 << 20).unwrap() == data);
    w.write_at(b"later", 1 << 20).unwrap();
    assert_eq!(read_at(&r, 1 << 20, 5), b"later");
    assert_eq!(read_at(&w, 1 << 20, 5), b"later");
}

/// `tail -f` of a big raw log beside a shell that appends line after line
/// (each `>>` a new open) shows every line; the log stays raw.
#[test]
fn tail_follows_an_appender() {
    let mut log = Vec::new();
    let mut i = 0;
    while log.len() < 200 << 10 {
        log.extend_from_slice(format!("old line {i}\n").as_bytes());
        i += 1;
    }
    let m = Mount::new(&[], |b| fs::write(b.join("app.log"), &log).unwrap());
    // Another reader of the log, served by the kernel meanwhile.
    let r = File::open(m.m("app.log")).unwrap();
    let len = log.len();
    assert!(by_kernel(&m, move || read_all(&r, len).unwrap()));
    let mut tail = Command::new("tail")
        .args(["-n", "0", "-f", "-s", "0.1"])
        .arg(m.m("app.log"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = tail.stdout.take().unwrap();
    // tail opens the log and seeks to its end before the first line comes:
    // waited for as it happens (its descriptor's offset), not guessed.
    let at_end = || {
        let Ok(fds) = fs::read_dir(format!("/proc/{}/fd", tail.id())) else {
            return false;
        };
        fds.flatten().any(|e| {
            fs::read_link(e.path()).is_ok_and(|p| p == m.m("app.log"))
                && fs::read_to_string(format!(
                    "/proc/{}/fdinfo/{}",
                    tail.id(),
                    e.file_name().to_string_lossy()
                ))
                .is_ok_and(|i| i.lines().any(|l| l == format!("pos:\t{len}")))
        })
    };
    assert!(
        crate::support::mount::wait_for(30.0, at_end),
        "tail never opened the log and went to its end"
    );
    let lines: String = (0..50).map(|i| format!("new line {i}\n")).collect();
    for line in lines.lines() {
        let mut f = OpenOptions::new()
            .append(true)
            .open(m.m("app.log"))
            .unwrap_or_else(|e| panic!("append {line:?}: {e}"));
        writeln!(f, "{line}").unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let want = lines.len();
    std::thread::spawn(move || {
        let mut got = vec![0u8; want];
        let r = out.read_exact(&mut got).map(|_| got);
        let _ = tx.send(r);
    });
    let got = rx.recv_timeout(Duration::from_secs(30));
    let _ = tail.kill();
    let _ = tail.wait();
    let got = got
        .expect("tail -f shows the appended lines within 30 s")
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&got), lines);
    let disk = fs::read(m.b("app.log")).unwrap();
    assert!(disk[..len] == log[..], "the old lines stay");
    assert_eq!(&disk[len..], lines.as_bytes(), "raw, as written");
}

/// The magic number cannot be written at offset 0 of a raw file through a
/// writer in passthrough mode, whatever path the write takes: write(2),
/// after fcntl(F_SETFL) cleared O_APPEND (which no request reports), and
/// copy_file_range(2) from a file holding it.
#[test]
fn magic_at_offset_zero_fails_in_passthrough_mode() {
    let data = raw_bytes(512 << 10, 23);
    let mut src = raw_bytes(8192, 27);
    src[4096..4104].copy_from_slice(&MAGIC);
    let d = data.clone();
    let m = Mount::new(&[], move |b| {
        fs::write(b.join("raw.bin"), &d).unwrap();
        fs::write(b.join("src.bin"), &src).unwrap();
    });
    let r = Arc::new(File::open(m.m("raw.bin")).unwrap());
    let r2 = r.clone();
    assert!(by_kernel(&m, move || read_all(&r2, 4096).unwrap()));

    let w = rw(&m.m("raw.bin"));
    let e = w
        .write_at(&MAGIC, 0)
        .expect_err("pwrite of the magic number");
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ), "{e}");

    let a = OpenOptions::new()
        .append(true)
        .open(m.m("raw.bin"))
        .unwrap();
    let fd = a.as_raw_fd();
    // SAFETY: fcntl on a descriptor this test owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    let set = unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_APPEND) };
    assert_eq!(set, 0);
    let e = a
        .write_at(&MAGIC, 0)
        .expect_err("pwrite after O_APPEND was cleared");
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ), "{e}");

    // Within the mount (copy_file_range does not cross filesystems): the
    // magic number's bytes inside another raw file.
    let src = File::open(m.m("src.bin")).unwrap();
    let (mut off_in, mut off_out): (libc::loff_t, libc::loff_t) = (4096, 0);
    // SAFETY: both descriptors are open for the call; the offsets are
    // locals that outlive it.
    let n = unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            &mut off_in,
            w.as_raw_fd(),
            &mut off_out,
            MAGIC.len(),
            0,
        )
    };
    let e = std::io::Error::last_os_error();
    assert!(n < 0, "copy_file_range of the magic number to 0 copied {n}");
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ), "{e}");

    drop((w, a));
    assert!(fs::read(m.b("raw.bin")).unwrap() == data, "nothing stored");
    assert!(read_all(&r, data.len() + 1).unwrap() == data);
}

/// An empty file takes the encoding of its first write (text: corrected)
/// even right after passthrough readers closed; while one is still open it
/// stays raw (those handles see its bytes), and a later emptying with none
/// open lets the first write decide again.
#[test]
fn first_write_to_an_empty_file_beside_passthrough() {
    let data = raw_bytes(300 << 10, 24);
    let m = one_raw_file(&[], &data);
    let text = "naïve text, first write\n";
    // `cat f; : > f; echo text >> f`, the reader's release in flight.
    for round in 0..20 {
        fs::write(m.b("raw.bin"), &data).unwrap();
        assert!(fs::read(m.m("raw.bin")).unwrap() == data, "round {round}");
        File::create(m.m("raw.bin")).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(m.m("raw.bin"))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        drop(f);
        let disk = fs::read(m.b("raw.bin")).unwrap();
        assert_eq!(
            &disk[..8],
            &MAGIC,
            "round {round}: the emptied file became corrected"
        );
        assert_eq!(fs::read_to_string(m.m("raw.bin")).unwrap(), text);
    }

    // A reader holds the file open in passthrough mode meanwhile.
    fs::write(m.b("raw.bin"), &data).unwrap();
    let r = File::open(m.m("raw.bin")).unwrap();
    assert!(read_all(&r, 16).unwrap() == data[..16]);
    let w = rw(&m.m("raw.bin"));
    w.set_len(0).unwrap();
    w.write_at(text.as_bytes(), 0).unwrap();
    assert_eq!(
        fs::read(m.b("raw.bin")).unwrap(),
        text.as_bytes(),
        "raw while a passthrough reader has it open"
    );
    assert_eq!(read_all(&r, 1000).unwrap(), text.as_bytes());
    assert_eq!(fs::read_to_string(m.m("raw.bin")).unwrap(), text);
    drop((r, w));
    // None open now: emptied again, text makes it corrected.
    let settled = wait_for(10.0, || {
        fs::write(m.m("raw.bin"), text).unwrap();
        fs::read(m.b("raw.bin")).unwrap().starts_with(&MAGIC)
    });
    assert!(
        settled,
        "with no passthrough handle, the first write decides"
    );
    assert_eq!(fs::read_to_string(m.m("raw.bin")).unwrap(), text);
}

/// A writer's shared writable mapping maps the backing file: its stores
/// need no daemon and show to readers at once. The magic number stored
/// that way at offset 0 makes the file corrected from its next open (as
/// the same bytes written in BACKING would), and the writer's close logs
/// it naming the file.
#[test]
fn writers_shared_mapping_is_the_backing_file() {
    let data = raw_bytes(1 << 20, 25);
    let m = one_raw_file(&[], &data);
    let r = File::open(m.m("raw.bin")).unwrap();
    let w = rw(&m.m("raw.bin"));
    // SAFETY: nothing truncates the file while it is mapped.
    let map = unsafe { memmap2::MmapMut::map_mut(&w) }.unwrap();
    let map = Arc::new(std::sync::Mutex::new(map));
    let m2 = map.clone();
    let stored = while_stopped(
        m.pid(),
        Duration::from_secs(30),
        move || {
            let mut map = m2.lock().unwrap();
            map[4096 * 7..4096 * 7 + 6].copy_from_slice(b"MAPPED");
            map[4096 * 7..4096 * 7 + 6].to_vec()
        },
        |_| {},
    );
    assert!(
        stored.is_some(),
        "a store through a writer's mapping needs no daemon"
    );
    assert_eq!(read_at(&r, 4096 * 7, 6), b"MAPPED", "the reader sees it");
    map.lock().unwrap().flush().unwrap();
    assert_eq!(
        &fs::read(m.b("raw.bin")).unwrap()[4096 * 7..4096 * 7 + 6],
        b"MAPPED"
    );

    map.lock().unwrap()[..8].copy_from_slice(&MAGIC);
    map.lock().unwrap().flush().unwrap();
    drop(map);
    drop((w, r));
    assert!(
        wait_for(10.0, || m
            .log_text()
            .contains("raw.bin: now begins with the magic number")),
        "the writer's close logs it:\n{}",
        m.log_text()
    );
    let mut disk = data.clone();
    disk[4096 * 7..4096 * 7 + 6].copy_from_slice(b"MAPPED");
    disk[..8].copy_from_slice(&MAGIC);
    assert!(
        fs::read(m.b("raw.bin")).unwrap() == disk,
        "BACKING holds the stores"
    );
    let start = Instant::now();
    let view = loop {
        // The last passthrough handle's release may still be in flight
        // (EBUSY until then).
        match fs::read(m.m("raw.bin")) {
            Ok(v) => break v,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed().as_secs() < 10 => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("read after the mapping's close: {e}"),
        }
    };
    assert!(
        view == expected_view(&disk),
        "read as the corrected file it now is"
    );
}

/// A file that was small when a writer opened it keeps that writer's
/// page-cached handle as it grows: a reader beside it is served by the
/// daemon (the kernel forbids mixing the two), reads right, and once the
/// writer closes, readers are served by the kernel.
#[test]
fn file_grown_past_the_threshold_while_open() {
    let m = Mount::new(&[], |_| {});
    let data = raw_bytes(1 << 20, 26);
    let mut w = File::create(m.m("grown.bin")).unwrap();
    w.write_all(&data).unwrap();
    let r = File::open(m.m("grown.bin")).unwrap();
    assert!(read_all(&r, data.len() + 1).unwrap() == data);
    w.write_all(b"more").unwrap();
    assert_eq!(read_at(&r, data.len() as u64, 10), b"more");
    drop((w, r));
    let mut want = data.clone();
    want.extend_from_slice(b"more");
    let len = want.len();
    let path = m.m("grown.bin");
    let served = wait_for(10.0, || {
        let r = File::open(&path).unwrap();
        by_kernel(&m, move || read_all(&r, len).unwrap())
    });
    assert!(
        served,
        "with the writer closed, a reader is served by the kernel"
    );
    assert!(fs::read(m.m("grown.bin")).unwrap() == want);
}
