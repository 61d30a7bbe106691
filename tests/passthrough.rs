//! FUSE passthrough for raw files (`src/fs/state/passthrough.rs`), on by default
//! on read-write and read-only mounts: readers served by the kernel,
//! writers beside them still served by the daemon (reads, writes,
//! appends, truncation, the magic-number guard, the first-write rule), a
//! writer's shared mapping on the backing file.
//!
//! How a test tells passthrough from the daemon's path: it stops the
//! daemon (SIGSTOP) with the file already open. A read the kernel serves
//! itself completes; a read that needs the daemon waits until SIGCONT.
//! Each passthrough test is paired with `-o passthrough=off`, where the
//! same read must wait, so neither result can come by accident.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::mount::{enc, random_disk, wait_for, Mount};
use crate::support::users::{sh_as, user};

use cutf8::MAGIC;

/// Raw bytes that do not begin with the magic number.
pub(crate) fn raw_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut b = random_disk(len, seed);
    b[0] = b'R';
    b
}

/// Reads `len` bytes of `f` at 0 (positioned reads only: nothing else
/// reaches the daemon).
pub(crate) fn read_all(f: &File, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Runs `work` while the daemon `pid` is stopped; returns its result if it
/// finished while the daemon was stopped (`wait` at most), else `None` —
/// then it is let finish after SIGCONT and its result is checked by `late`.
/// What `work` holds (a descriptor it reads through) is dropped only after
/// SIGCONT: every close(2) through the mount, a passthrough reader's too,
/// waits for the daemon (FLUSH, for the locks' sake).
pub(crate) fn while_stopped<T: Send + 'static, W: FnMut() -> T + Send + 'static>(
    pid: u32,
    wait: Duration,
    mut work: W,
    late: impl FnOnce(T),
) -> Option<T> {
    signal(pid, libc::SIGSTOP);
    // kill(2) returns before every thread has stopped.
    assert!(
        wait_for(20.0, || all_stopped(pid)),
        "the daemon's threads stop"
    );
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let v = work();
        let _ = tx.send((v, work));
    });
    let r = rx.recv_timeout(wait);
    signal(pid, libc::SIGCONT);
    match r {
        Ok((v, held)) => {
            drop(held);
            t.join().unwrap();
            Some(v)
        }
        Err(_) => {
            let (v, held) = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("work after SIGCONT");
            drop(held);
            late(v);
            t.join().unwrap();
            None
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    assert!(pid > 0, "the daemon runs");
    // SAFETY: kill(2) on the daemon this test started; no memory involved.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// Whether every thread of process `pid` is stopped (state T).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        state.starts_with('T') || state.starts_with('t')
    })
}

/// A read-write mount, default options plus `m_opts`, of one raw file.
pub(crate) fn one_raw_file(m_opts: &[&str], data: &[u8]) -> Mount {
    let data = data.to_vec();
    Mount::new(m_opts, move |b| {
        fs::write(b.join("raw.bin"), &data).unwrap()
    })
}

/// Whether `read` completes while the daemon is stopped: served by the
/// kernel, not by a request.
pub(crate) fn by_kernel(m: &Mount, read: impl FnMut() -> Vec<u8> + Send + 'static) -> bool {
    while_stopped(m.pid(), Duration::from_secs(5), read, |_| {}).is_some()
}

#[test]
fn raw_file_read_only_is_read_by_the_kernel() {
    let data = raw_bytes(4 << 20, 1);
    let m = one_raw_file(&[], &data);
    // Logged at the kernel's INIT, which may come after the mount is listed.
    assert!(
        wait_for(10.0, || m.log_text().contains("passthrough on")),
        "the daemon says passthrough is on:\n{}",
        m.log_text()
    );
    let f = File::open(m.m("raw.bin")).unwrap();
    let len = data.len();
    let got = while_stopped(
        m.pid(),
        Duration::from_secs(30),
        move || read_all(&f, len).unwrap(),
        |_| {},
    );
    let got = got.expect("a read of a raw file through passthrough needs no daemon");
    assert!(got == data, "passthrough read returns the file's bytes");
}

#[test]
fn passthrough_off_reads_through_the_daemon() {
    let data = raw_bytes(1 << 20, 2);
    let m = one_raw_file(&["passthrough=off"], &data);
    assert!(m.log_text().contains("passthrough off"), "{}", m.log_text());
    let f = File::open(m.m("raw.bin")).unwrap();
    let (len, want) = (data.len(), data.clone());
    let got = while_stopped(
        m.pid(),
        Duration::from_secs(1),
        move || read_all(&f, len).unwrap(),
        move |late| assert!(late == want, "the daemon's read returns the file's bytes"),
    );
    assert!(
        got.is_none(),
        "with -o passthrough=off a read waits for the (stopped) daemon"
    );
}

#[test]
fn small_raw_file_is_read_through_the_daemon() {
    // Under 128 KiB the daemon's path (with its kept page cache) is faster.
    let data = raw_bytes(100 << 10, 10);
    let m = one_raw_file(&[], &data);
    let f = File::open(m.m("raw.bin")).unwrap();
    let (len, want) = (data.len(), data.clone());
    let got = while_stopped(
        m.pid(),
        Duration::from_secs(1),
        move || read_all(&f, len).unwrap(),
        move |late| assert!(late == want),
    );
    assert!(got.is_none(), "a small raw file is read through the daemon");
}

#[test]
fn corrected_file_is_never_passed_through() {
    let view = "Μοῦσα — text, shown as its view\n".repeat(1000);
    let text: Vec<u8> = view.chars().flat_map(|c| enc(c as u32)).collect();
    let disk = crate::support::mount::corrected(&text);
    let m = Mount::new(&["passthrough=on"], |b| {
        fs::write(b.join("c.txt"), &disk).unwrap()
    });
    let f = File::open(m.m("c.txt")).unwrap();
    let len = view.len();
    let want = view.clone().into_bytes();
    let got = while_stopped(
        m.pid(),
        Duration::from_secs(1),
        move || read_all(&f, len).unwrap(),
        move |late| assert!(late == want, "the view, not the disk bytes"),
    );
    assert!(got.is_none(), "a corrected file is read through the daemon");
    assert_eq!(fs::read(m.m("c.txt")).unwrap(), view.as_bytes());
}

#[test]
fn mmap_of_a_passthrough_file() {
    let data = raw_bytes(3 << 20, 3);
    let m = one_raw_file(&[], &data);
    let f = File::open(m.m("raw.bin")).unwrap();
    // SAFETY: nothing truncates the file while it is mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert_eq!(map.len(), data.len());
    let got = while_stopped(
        m.pid(),
        Duration::from_secs(30),
        move || map.to_vec(),
        |_| {},
    );
    let got = got.expect("page faults of a passthrough mapping need no daemon");
    assert!(got == data, "the mapping shows the file's bytes");
    drop(f);
    // A writable shared mapping of a writer maps the backing file too
    // (src/fs/state/passthrough.rs) and reads back exactly.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m("raw.bin"))
        .unwrap();
    // SAFETY: as above.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.unwrap();
    map[100..105].copy_from_slice(b"MMAP!");
    map.flush().unwrap();
    drop(map);
    drop(f);
    let mut want = data.clone();
    want[100..105].copy_from_slice(b"MMAP!");
    assert!(
        fs::read(m.b("raw.bin")).unwrap() == want,
        "BACKING has the change"
    );
    assert!(
        fs::read(m.m("raw.bin")).unwrap() == want,
        "and so does the mount"
    );
}

#[test]
fn magic_at_the_start_of_a_raw_file_after_passthrough_reads() {
    let data = raw_bytes(256 << 10, 4);
    let m = one_raw_file(&[], &data);
    let reader = File::open(m.m("raw.bin")).unwrap();
    assert_eq!(read_all(&reader, data.len()).unwrap(), data);
    drop(reader);
    // The writer (its writes served by the daemon) still gets the EILSEQ of
    // docs/behaviour.md ("The mount").
    let w = OpenOptions::new().write(true).open(m.m("raw.bin")).unwrap();
    let e = w
        .write_at(&MAGIC, 0)
        .expect_err("the magic number at offset 0");
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ), "{e}");
    drop(w);
    assert!(fs::read(m.b("raw.bin")).unwrap() == data, "nothing stored");
    // And a reader beside an appender reads what it appends.
    let w = OpenOptions::new()
        .append(true)
        .open(m.m("raw.bin"))
        .unwrap();
    let reader = File::open(m.m("raw.bin")).unwrap();
    (&w).write_all(b"appended\n").unwrap();
    let all = read_all(&reader, data.len() + 100).unwrap();
    assert_eq!(&all[data.len()..], b"appended\n", "reads after writes");
}

#[test]
fn attributes_exact_after_writes_and_passthrough_reads() {
    let data = raw_bytes(300_000, 5);
    let n = data.len();
    let m = one_raw_file(&["attr_timeout=0"], &data);
    {
        let w = OpenOptions::new()
            .append(true)
            .open(m.m("raw.bin"))
            .unwrap();
        (&w).write_all(&[7u8; 1234]).unwrap();
    }
    let r = File::open(m.m("raw.bin")).unwrap();
    let all = read_all(&r, n + 10_000).unwrap();
    assert_eq!(all.len(), n + 1234);
    let (mm, bm) = (
        fs::metadata(m.m("raw.bin")).unwrap(),
        fs::metadata(m.b("raw.bin")).unwrap(),
    );
    assert_eq!(mm.len(), bm.len());
    assert_eq!((mm.mtime(), mm.mtime_nsec()), (bm.mtime(), bm.mtime_nsec()));
    assert_eq!((mm.ctime(), mm.ctime_nsec()), (bm.ctime(), bm.ctime_nsec()));
    // Grown in BACKING behind the mount's back while open in passthrough:
    // the size follows (attr_timeout=0), the reader sees the new bytes.
    OpenOptions::new()
        .append(true)
        .open(m.b("raw.bin"))
        .unwrap()
        .write_all(b"tail")
        .unwrap();
    assert_eq!(fs::metadata(m.m("raw.bin")).unwrap().len(), n as u64 + 1238);
    assert_eq!(&read_all(&r, n + 10_000).unwrap()[n + 1234..], b"tail");
}

#[test]
fn permissions_unchanged_with_passthrough() {
    let data = raw_bytes(200_000, 6);
    let m = Mount::new(&["passthrough=on"], |b| {
        fs::write(b.join("secret.bin"), &data).unwrap();
        fs::set_permissions(b.join("secret.bin"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(b.join("open.bin"), &data).unwrap();
        fs::set_permissions(b.join("open.bin"), fs::Permissions::from_mode(0o644)).unwrap();
    });
    let u = user("cutf8t-a");
    // Root holds the secret file open through passthrough meanwhile: its
    // backing file (opened with the daemon's rights) lends nothing.
    let held = File::open(m.m("secret.bin")).unwrap();
    assert!(read_all(&held, data.len() + 1).unwrap() == data);
    let secret = m.m("secret.bin");
    let out = sh_as(u, "cat \"$1\" > /dev/null", &[secret.as_os_str()]);
    assert!(
        !out.status.success(),
        "a user without read permission cannot read"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let open = m.m("open.bin");
    let out = sh_as(u, "cat \"$1\"", &[open.as_os_str()]);
    assert!(out.status.success());
    assert!(
        out.stdout == data,
        "a reader with permission gets the bytes"
    );
    // Write permission is checked as before, too.
    let out = sh_as(u, "printf x >> \"$1\"", &[open.as_os_str()]);
    assert!(!out.status.success(), "no write permission, no write");
    drop(held);
}

/// A second cutf8fs whose BACKING is the first one's mount: the kernel
/// refuses a FUSE backing file stacked that deep, so the daemon falls back
/// to its own path with one log line, and reads stay right.
#[test]
fn falls_back_when_backing_refuses() {
    let data = raw_bytes(200_000, 7);
    let lower = one_raw_file(&[], &data);
    let dir = tempfile::tempdir().unwrap();
    let (mnt, log) = (dir.path().join("mnt"), dir.path().join("upper.log"));
    fs::create_dir(&mnt).unwrap();
    let mut upper = Mount::with(&["passthrough=on"]).on(&lower.mnt, &mnt, &log);
    for _ in 0..3 {
        assert!(fs::read(mnt.join("raw.bin")).unwrap() == data);
    }
    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("passthrough unavailable").count(),
        1,
        "one log line:\n{text}"
    );
    upper.unmount();
}

/// `cat f; echo x >> f`: the reader's close reaches the daemon after the
/// close returned (RELEASE is sent in the background), so the writer's
/// open may arrive first. It must not be refused for a reader that is
/// already gone.
#[test]
fn writer_right_after_a_passthrough_reader_closed() {
    let data = raw_bytes(200_000, 8);
    let m = one_raw_file(&[], &data);
    let mut want = data.clone();
    for i in 0..300u32 {
        let r = File::open(m.m("raw.bin")).unwrap();
        assert_eq!(read_all(&r, 16).unwrap(), &data[..16]);
        drop(r);
        let w = OpenOptions::new()
            .append(true)
            .open(m.m("raw.bin"))
            .unwrap_or_else(|e| panic!("open for appending, round {i}: {e}"));
        (&w).write_all(&i.to_le_bytes()).unwrap();
        want.extend_from_slice(&i.to_le_bytes());
    }
    assert!(fs::read(m.m("raw.bin")).unwrap() == want);
}

/// `-o ro` reads raw files by passthrough as a read-write mount does.
#[test]
fn read_only_mount_reads_by_passthrough() {
    let data = raw_bytes(1 << 20, 11);
    let d = data.clone();
    let ro = Mount::new(&["ro"], move |b| fs::write(b.join("raw.bin"), &d).unwrap());
    assert!(
        ro.log_text().contains("passthrough on"),
        "{}",
        ro.log_text()
    );
    let f = File::open(ro.m("raw.bin")).unwrap();
    let len = data.len();
    let got = while_stopped(
        ro.pid(),
        Duration::from_secs(30),
        move || read_all(&f, len).unwrap(),
        |_| {},
    );
    let got = got.expect("a read-only mount reads raw files by passthrough");
    assert!(got == data);
}
