//! close(2) reports a write that failed after the last write(2) returned,
//! as fsync does (man cutf8fs(1), WRITES): the last character of an append
//! the kernel cut at a page boundary is held back by the daemon to be
//! joined with the next write (tests/write_split.rs); when nothing comes,
//! close(2) writes it (FLUSH), and if BACKING cannot take it, close(2)
//! fails with BACKING's errno — not only a line in the log.
//!
//! Needs root (a tmpfs: a full disk exact to the page, see
//! `support::disk`) and FUSE.

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::IntoRawFd;
use std::process::{Command, Stdio};

use crate::support::disk::Tmpfs;
use crate::support::mount::Mount;
use crate::support::write::corrected_file;

/// The append, the filling of the disk and the close(2) run in a child
/// process of their own (python3), never in this one: the test harness
/// runs other tests on other threads, and a process one of them starts
/// holds copies of this process's descriptors between its fork and its
/// exec. A copy of the append's descriptor closed there is a close(2) of
/// the same open file (a FLUSH, which would write the held byte or take
/// its error first); a copy of the filler's keeps its space after the
/// filler is deleted.
const WRITER: &str = r#"
import os, sys
path, filler, n, reader = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
print(os.write(fd, b"y" * (n - 1) + b"\xc3"), flush=True)
if reader:
    rd = os.open(path, os.O_RDONLY)
sys.stdin.readline()
f = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
for size in (64 << 10, 512):
    while True:
        try:
            if os.write(f, bytes(size)) == 0:
                break
        except OSError:
            break
os.close(f)
print("filled", flush=True)
sys.stdin.readline()
def close(what, f):
    try:
        os.close(f)
        print(what, 0, flush=True)
    except OSError as e:
        print(what, e.errno, flush=True)
if reader:
    close("reader", rd)
close("writer", fd)
"#;

/// A corrected file `t.txt` on a 1 MiB tmpfs, appended to (by [`WRITER`])
/// so that the daemon holds the append's last byte, the lead of "é", with
/// the disk then filled to the page. `reader`: the file is also open
/// read-only in the same process, and that handle is closed first.
/// Returns the disk, the mount and what the file's view is without the
/// held byte; the closes' results are in `closes`.
struct Full {
    disk: Tmpfs,
    m: Mount,
    _tmp: tempfile::TempDir,
    want: Vec<u8>,
    closes: Vec<String>,
}

fn held_append_on_a_full_disk(reader: bool) -> Full {
    let disk = Tmpfs::new(1024);
    let backing = disk.path("b");
    fs::create_dir(&backing).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    // A corrected file whose seven characters of U+0800-U+089F take two
    // bytes on disk and three in the view: with the magic number, the
    // backing file then ends on a page boundary exactly where the view
    // does. Written in BACKING, not through the mount: the append below
    // must be the file's only writer, or the release of an earlier one
    // (which the kernel sends after close(2) returned, late on a busy
    // machine) could write the held byte while the disk still has room.
    let mut view = "\u{800}".repeat(7).into_bytes();
    view.extend_from_slice(&b"x".repeat(3000));
    view.push(b'\n');
    fs::write(
        backing.join("t.txt"),
        corrected_file(std::str::from_utf8(&view).unwrap()),
    )
    .unwrap();
    let m = Mount::with(&["index_db=none"]).on(&backing, &mnt, &tmp.path().join("log"));
    // An append ending at view offset 8192 with the lead byte of "é": the
    // daemon writes all but that byte (the backing file is then 8192
    // bytes, two full pages) and holds it for the next write.
    let n = 8192 - view.len();
    let mut child = Command::new("python3")
        .args(["-c", WRITER])
        .arg(m.m("t.txt"))
        .arg(disk.path("filler"))
        .arg(n.to_string())
        .arg(if reader { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut line = || {
        let mut l = String::new();
        from.read_line(&mut l).unwrap();
        l.trim().to_string()
    };
    assert_eq!(line(), n.to_string());
    assert_eq!(fs::metadata(m.b("t.txt")).unwrap().len(), 8192);
    // The disk fills up meanwhile (natively, as another program might).
    writeln!(to, "fill").unwrap();
    assert_eq!(line(), "filled");
    assert!(disk.free() < 4096, "{} bytes still free", disk.free());
    // close(2): the held byte needs a new page, which BACKING refuses.
    writeln!(to, "close").unwrap();
    let closes = (0..1 + usize::from(reader)).map(|_| line()).collect();
    assert!(child.wait().unwrap().success());
    let mut want = view;
    want.extend_from_slice(&b"y".repeat(n - 1));
    Full {
        disk,
        m,
        _tmp: tmp,
        want,
        closes,
    }
}

#[test]
fn close_reports_enospc_of_a_held_append_on_a_full_disk() {
    let Full {
        disk,
        m,
        _tmp,
        mut want,
        closes,
    } = held_append_on_a_full_disk(false);
    assert_eq!(
        closes,
        [format!("writer {}", libc::ENOSPC)],
        "close(2) must report that the append's last byte was not written; log:\n{}",
        m.log_text()
    );
    assert!(
        m.log_text().contains("could not be written"),
        "{}",
        m.log_text()
    );
    // What is in the file is what close(2)'s caller can know: all but the
    // lost byte, through the mount and in BACKING.
    assert_eq!(fs::read(m.m("t.txt")).unwrap(), want);
    // Space back: writes work again through the same mount.
    fs::remove_file(disk.path("filler")).unwrap();
    let mut f = OpenOptions::new().append(true).open(m.m("t.txt")).unwrap();
    f.write_all("é done\n".as_bytes()).unwrap();
    drop(f);
    want.extend_from_slice("é done\n".as_bytes());
    assert_eq!(fs::read(m.m("t.txt")).unwrap(), want);
}

/// Another handle's close(2) writes the held byte first (it settles what
/// is held before the file is closed): the loss is still the writer's to
/// hear, at its own close(2), as the kernel reports a write-back error to
/// every file open when it happened. A read-only handle's close(2) reports
/// nothing, as on NFS.
#[test]
fn the_writer_hears_of_its_lost_byte_when_another_handle_met_the_error() {
    let Full {
        disk: _disk,
        m,
        _tmp,
        want,
        closes,
    } = held_append_on_a_full_disk(true);
    assert_eq!(
        closes,
        ["reader 0".to_string(), format!("writer {}", libc::ENOSPC)],
        "log:\n{}",
        m.log_text()
    );
    assert!(m.log_text().contains("could not be written"));
    assert_eq!(fs::read(m.m("t.txt")).unwrap(), want);
}

/// The common case, through the same path: a close(2) after writes with
/// nothing held succeeds, and a close of a file only read sends nothing.
#[test]
fn close_after_ordinary_writes_succeeds() {
    let m = Mount::new(&[], |_| {});
    for i in 0..20 {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(m.m("log.txt"))
            .unwrap();
        writeln!(f, "line {i} é").unwrap();
        let fd = f.into_raw_fd();
        // SAFETY: `fd` was just taken from the File, which no longer owns it.
        assert_eq!(unsafe { libc::close(fd) }, 0);
    }
    let text = fs::read_to_string(m.m("log.txt")).unwrap();
    assert_eq!(text.lines().count(), 20);
    assert!(cutf8::has_magic(&fs::read(m.b("log.txt")).unwrap()));
}
