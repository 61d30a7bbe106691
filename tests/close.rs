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
use std::io::Write;
use std::os::fd::IntoRawFd;

use crate::support::disk::Tmpfs;
use crate::support::mount::Mount;
use crate::support::write::corrected_file;

/// Fills `disk` natively until nothing is left (returns the filler's path).
fn fill(disk: &Tmpfs) -> std::path::PathBuf {
    let p = disk.path("filler");
    let mut f = fs::File::create(&p).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // Small writes take what delayed allocation left.
    while let Ok(n) = f.write(&chunk[..512]) {
        if n == 0 {
            break;
        }
    }
    let _ = f.sync_all();
    p
}

#[test]
fn close_reports_enospc_of_a_held_append_on_a_full_disk() {
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
    // must be the file's only handle, or the release of an earlier one
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
    let mut append = b"y".repeat(8192 - view.len() - 1);
    append.push(0xC3);
    let mut f = OpenOptions::new().append(true).open(m.m("t.txt")).unwrap();
    assert_eq!(f.write(&append).unwrap(), append.len());
    assert_eq!(fs::metadata(m.b("t.txt")).unwrap().len(), 8192);
    // The disk fills up meanwhile (natively, as another program might).
    let filler = fill(&disk);
    assert!(disk.free() < 4096, "{} bytes still free", disk.free());
    // close(2): the held byte needs a new page, which BACKING refuses.
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was just taken from the File, which no longer owns it.
    let r = unsafe { libc::close(fd) };
    let err = std::io::Error::last_os_error();
    assert_eq!(
        (r, err.raw_os_error()),
        (-1, Some(libc::ENOSPC)),
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
    let mut want = view.clone();
    want.extend_from_slice(&append[..append.len() - 1]);
    assert_eq!(fs::read(m.m("t.txt")).unwrap(), want);
    // Space back: writes work again through the same mount.
    fs::remove_file(filler).unwrap();
    let mut f = OpenOptions::new().append(true).open(m.m("t.txt")).unwrap();
    f.write_all("é done\n".as_bytes()).unwrap();
    drop(f);
    want.extend_from_slice("é done\n".as_bytes());
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
