//! Full disk (docs/behaviour.md, "The mount": errors of the backing
//! filesystem reach the caller as the same errno, and the original file is
//! left intact): BACKING is a 2 MiB tmpfs (the tests run as root). Corrected
//! files are created in it, the disk is filled through the mount until
//! ENOSPC, and then the existing files are modified in every way that needs
//! space: a shifting in-place rewrite (journaled), a C1 control (the file
//! would turn raw, journaled), appends, `sed -i` (new file + rename), and a
//! new file. Each writer gets ENOSPC or succeeds; no existing file is lost or
//! truncated: each holds exactly its last content (for an append, the old
//! content plus the bytes write(2) reported written). Once space is freed,
//! the same edits succeed and the journal is empty.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::mount::Mount;
use crate::support::write::{assert_corrected, assert_raw, corrected_file};
use cutf8::{self, MAGIC};

const ENOSPC: i32 = 28;

/// A tmpfs mounted for the test; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .expect("cannot run mount");
        assert!(st.success(), "mount -t tmpfs failed (the test needs root)");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn text(lines: usize, tag: &str) -> String {
    (0..lines)
        .map(|i| format!("{tag} {i}: café жизнь 中文 😀 \u{800}\u{89F} 𐀀\u{1109F} abcdefghij\n"))
        .collect()
}

/// write(2) until all of `data` is written or an error; returns the bytes
/// written and the error.
fn write_some(
    path: &Path,
    append: bool,
    off: Option<u64>,
    data: &[u8],
) -> (usize, Option<io::Error>) {
    let mut f = OpenOptions::new()
        .write(true)
        .append(append)
        .create(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut done = 0;
    while done < data.len() {
        let r = match off {
            Some(o) => f.write_at(&data[done..], o + done as u64),
            None => f.write(&data[done..]),
        };
        match r {
            Ok(0) => return (done, Some(io::Error::from_raw_os_error(ENOSPC))),
            Ok(n) => done += n,
            Err(e) => return (done, Some(e)),
        }
    }
    // Errors may also come at close (flush).
    match f.sync_all() {
        Ok(()) => (done, None),
        Err(e) => (done, Some(e)),
    }
}

/// `assert_corrected`, or, when a short append cut the last character (the
/// view then ends in an incomplete sequence, which W keeps as it is), the
/// same with the lossless converters.
fn check_corrected(path: &Path, view: &[u8], what: &str) {
    if std::str::from_utf8(view).is_ok() {
        return assert_corrected(path, view, what);
    }
    let b = fs::read(path).unwrap();
    assert!(cutf8::has_magic(&b), "{what}: not corrected");
    assert!(
        cutf8::decode_lossless(&b[MAGIC.len()..]) == view,
        "{what}: V of the backing file differs"
    );
    assert!(
        cutf8::encode_lossless(view).unwrap() == b[MAGIC.len()..],
        "{what}: backing differs from W of the view"
    );
}

fn expect_enospc(e: &Option<io::Error>, what: &str) {
    if let Some(e) = e {
        assert_eq!(
            e.raw_os_error(),
            Some(ENOSPC),
            "{what}: expected ENOSPC, got {e}"
        );
    }
}

#[test]
fn enospc_reaches_writers_and_no_file_is_lost_or_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let _tmpfs = Tmpfs::mount(&backing, "2m");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for k in 0..4 {
        let t = text(300, &format!("file{k}"));
        fs::write(backing.join(format!("f{k}.txt")), corrected_file(&t)).unwrap();
        files.push((format!("f{k}.txt"), t.into_bytes()));
    }
    fs::hard_link(backing.join("f0.txt"), backing.join("f0-link.txt")).unwrap();
    fs::write(backing.join("raw.bin"), b"\x00raw\xff".repeat(1000)).unwrap();
    let d = Mount::with(&[]).on(&backing, &mnt, &dir.path().join("daemon.log"));

    // Fill the disk through the mount: a new text file (corrected), then
    // a binary one (raw), each until ENOSPC.
    let fill_text = text(40_000, "fill").into_bytes();
    let (n, e) = write_some(&d.m("fill.txt"), false, None, &fill_text);
    assert!(
        e.is_some(),
        "2 MiB tmpfs did not fill with {} bytes",
        fill_text.len()
    );
    expect_enospc(&e, "filling with text");
    assert!(n > 100_000, "only {n} bytes of text fit");
    let (_, e) = write_some(&d.m("fill.bin"), false, None, &vec![0u8; 4 << 20]);
    expect_enospc(&e, "filling with binary");
    assert!(e.is_some(), "the binary filler did not get ENOSPC");

    let mut enospc = 0;
    let count = |e: &Option<io::Error>, enospc: &mut usize, what: &str| {
        eprintln!("full disk: {what}: {e:?}");
        if e.is_some() {
            *enospc += 1;
        }
    };
    // f0 (two names): a write that shifts the text (U+0800 is 3 bytes in
    // the view, 2 on disk), all or nothing.
    let (name, old) = files[0].clone();
    let mut data = "\u{800}".repeat(40);
    while old[6 + data.len()] & 0xC0 == 0x80 {
        data.push('.'); // end on a character boundary
    }
    let (_, e) = write_some(&d.m(&name), false, Some(6), data.as_bytes());
    expect_enospc(&e, "shifting write");
    count(&e, &mut enospc, "shifting write");
    let mut now = old.clone();
    if e.is_none() {
        now[6..6 + data.len()].copy_from_slice(data.as_bytes());
    }
    assert_corrected(&backing.join(&name), &now, "shifting write on a full disk");
    assert_corrected(&backing.join("f0-link.txt"), &now, "its hard link");
    files[0].1 = now;
    // f1: a C1 control would turn it raw (a rewrite of the whole file).
    let (name, old) = files[1].clone();
    let (_, e) = write_some(&d.m(&name), false, Some(3), b"\xc2\x85");
    expect_enospc(&e, "C1 control");
    count(&e, &mut enospc, "C1 control");
    if e.is_none() {
        let mut now = old.clone();
        now[3..5].copy_from_slice(b"\xc2\x85");
        assert_raw(&backing.join(&name), &now, "C1 control on a full disk");
        files[1].1 = Vec::new(); // raw now: checked here only
    } else {
        assert_corrected(
            &backing.join(&name),
            &old,
            "C1 control refused on a full disk",
        );
    }
    // f2: a big append; the file holds its old content plus what write(2)
    // reported written.
    let (name, old) = files[2].clone();
    let more = text(3000, "more").into_bytes();
    let (n, e) = write_some(&d.m(&name), true, None, &more);
    assert!(e.is_some(), "a 300 KB append fit on a full disk");
    expect_enospc(&e, "append");
    count(&e, &mut enospc, "append");
    let mut now = old.clone();
    now.extend_from_slice(&more[..n]);
    let got = fs::read(d.m(&name)).unwrap();
    assert!(
        got == now,
        "append on a full disk: the view is not old content + the {n} bytes written"
    );
    // The backing holds exactly that (strict check needs whole characters).
    check_corrected(&backing.join(&name), &now, "append on a full disk");
    files[2].1 = now;
    // f3: sed -i writes a new file and renames it: sed fails, f3 stays.
    let (name, old) = files[3].clone();
    let st = Command::new("sed")
        .args(["-i", "s/a/ä/g"])
        .arg(d.m(&name))
        .output()
        .unwrap();
    if st.status.success() {
        let now = String::from_utf8(old)
            .unwrap()
            .replace('a', "ä")
            .into_bytes();
        assert_corrected(&backing.join(&name), &now, "sed -i on a full disk");
        files[3].1 = now;
    } else {
        enospc += 1;
        assert_corrected(&backing.join(&name), &old, "sed -i failed on a full disk");
    }
    assert!(
        enospc >= 2,
        "only {enospc} of the edits on a full disk got ENOSPC"
    );
    // The raw file and every corrected one are intact, through the mount too.
    assert_raw(
        &backing.join("raw.bin"),
        &b"\x00raw\xff".repeat(1000),
        "raw file",
    );
    for (name, view) in &files {
        if view.is_empty() {
            continue;
        }
        check_corrected(&backing.join(name), view, &format!("{name} on a full disk"));
        assert!(
            fs::read(d.m(name)).unwrap() == *view,
            "{name} reads differently"
        );
    }

    // Free space: the same kinds of edits now succeed.
    fs::remove_file(d.m("fill.bin")).unwrap();
    fs::remove_file(d.m("fill.txt")).unwrap();
    let (name, mut view) = files[0].clone();
    let (_, e) = write_some(&d.m(&name), false, Some(0), "\u{800}\u{800}".as_bytes());
    assert!(e.is_none(), "shifting write after freeing space: {e:?}");
    view[..6].copy_from_slice("\u{800}\u{800}".as_bytes());
    assert_corrected(
        &backing.join(&name),
        &view,
        "shifting write after freeing space",
    );
    let (name, mut view) = files[2].clone();
    let (_, e) = write_some(&d.m(&name), true, None, b"\nafter\n");
    assert!(e.is_none(), "append after freeing space: {e:?}");
    view.extend_from_slice(b"\nafter\n");
    check_corrected(&backing.join(&name), &view, "append after freeing space");
    assert!(fs::read(d.m(&name)).unwrap() == view);
    let left = crate::support::write::journal_entries(&backing);
    assert!(
        left.is_empty(),
        "journal entries left behind after ENOSPC: {left:?}"
    );
    drop(d);
}
