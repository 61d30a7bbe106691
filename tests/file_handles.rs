//! File handles made through the mount, as an NFS server makes and keeps
//! them (`support::handles`): a handle opens its file, with the view,
//! after the kernel forgot the inode (`drop_caches`) and after the daemon
//! restarted; it follows a rename in BACKING; once the file is deleted in
//! BACKING it is stale (ESTALE), also when a new file takes the name (and
//! perhaps the inode number); inode numbers shown through the mount are
//! the same after a restart. By file handle (a root daemon) and by name
//! (`CUTF8FS_NO_FILE_HANDLES=1`, as over a BACKING without handles).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::support::handles::{drop_caches, handle_of, open_by_handle, read_by_handle, Handle};
use crate::support::mount::Mount;
use crate::support::write::corrected_file;

/// A text whose view is longer than its bytes in BACKING.
const NOTES: &str = "Caf\u{e9} \u{800}\u{10000} notes\n";
const INNER: &str = "\u{3f4} inner \u{801}\n";
const RAW: &[u8] = b"\x00\x01binary\xff\n";

fn archive(b: &Path) {
    fs::write(b.join("notes.txt"), corrected_file(NOTES)).unwrap();
    fs::write(b.join("raw.bin"), RAW).unwrap();
    fs::create_dir_all(b.join("d/e")).unwrap();
    fs::write(b.join("d/e/inner.txt"), corrected_file(INNER)).unwrap();
}

/// The files, what they read as through the mount.
fn files() -> [(&'static str, &'static [u8]); 3] {
    [
        ("notes.txt", NOTES.as_bytes()),
        ("raw.bin", RAW),
        ("d/e/inner.txt", INNER.as_bytes()),
    ]
}

/// Every handle reads its file's view; the directory handle opens the
/// directory, in which the name is found.
fn all_read(m: &Mount, hs: &[(&str, &[u8], Handle)], dir: &Handle, when: &str) {
    for (rel, want, h) in hs {
        assert_eq!(
            read_by_handle(&m.mnt, h, &format!("{rel} {when}")),
            *want,
            "{rel} {when}"
        );
    }
    let d = open_by_handle(&m.mnt, dir, libc::O_RDONLY | libc::O_DIRECTORY)
        .unwrap_or_else(|e| panic!("d/e {when}: errno {e}"));
    let inner = format!(
        "/proc/self/fd/{}/inner.txt",
        std::os::fd::AsRawFd::as_raw_fd(&d)
    );
    assert_eq!(fs::read(inner).unwrap(), INNER.as_bytes(), "d/e {when}");
}

fn stale(m: &Mount, h: &Handle, what: &str) {
    match open_by_handle(&m.mnt, h, libc::O_RDONLY) {
        Err(e) => assert_eq!(e, libc::ESTALE, "{what}: errno {e}, not ESTALE"),
        Ok(_) => panic!("{what}: the handle still opens a file"),
    }
}

fn handles_live_as_long_as_their_files(by_handle: bool) {
    let start = Mount::with(&[]);
    let start = if by_handle {
        start
    } else {
        start.env("CUTF8FS_NO_FILE_HANDLES", "1")
    };
    let mut m = start.fresh(archive);
    let hs: Vec<(&str, &[u8], Handle)> = files()
        .into_iter()
        .map(|(rel, want)| (rel, want, handle_of(&m.m(rel))))
        .collect();
    let dir = handle_of(&m.m("d/e"));
    let inos: Vec<u64> = files()
        .iter()
        .map(|(rel, _)| fs::symlink_metadata(m.m(rel)).unwrap().ino())
        .collect();
    all_read(&m, &hs, &dir, "fresh");

    drop_caches();
    all_read(&m, &hs, &dir, "after the kernel forgot the inodes");

    m.unmount();
    m.remount();
    all_read(&m, &hs, &dir, "after a restart of the daemon");
    drop_caches();
    all_read(&m, &hs, &dir, "after a restart and an eviction");
    let now: Vec<u64> = files()
        .iter()
        .map(|(rel, _)| fs::symlink_metadata(m.m(rel)).unwrap().ino())
        .collect();
    assert_eq!(inos, now, "inode numbers changed across a remount");

    if by_handle {
        // A rename in BACKING is followed.
        fs::rename(m.b("raw.bin"), m.b("d/moved.bin")).unwrap();
        drop_caches();
        assert_eq!(read_by_handle(&m.mnt, &hs[1].2, "renamed in BACKING"), RAW);
        m.unmount();
        m.remount();
        assert_eq!(
            read_by_handle(&m.mnt, &hs[1].2, "renamed, after a restart"),
            RAW
        );
    }

    // Deleted in BACKING: stale, also once a new file has the name.
    fs::remove_file(m.b("notes.txt")).unwrap();
    stale(&m, &hs[0].2, "deleted in BACKING, inode still cached");
    drop_caches();
    stale(&m, &hs[0].2, "deleted in BACKING, inode forgotten");
    if by_handle {
        fs::write(m.b("notes.txt"), b"a new file\n").unwrap();
        assert_eq!(fs::read(m.m("notes.txt")).unwrap(), b"a new file\n");
        stale(&m, &hs[0].2, "deleted, a new file at its name");
        drop_caches();
        stale(&m, &hs[0].2, "deleted, a new file at its name, forgotten");
    }
    m.unmount();
    m.remount();
    stale(&m, &hs[0].2, "deleted, after a restart");
    // The others still open.
    assert_eq!(
        read_by_handle(&m.mnt, &hs[2].2, "a neighbour of the deleted file"),
        INNER.as_bytes()
    );
}

#[test]
fn handles_live_as_long_as_their_files_by_file_handle() {
    handles_live_as_long_as_their_files(true);
}

#[test]
fn handles_live_as_long_as_their_files_by_name() {
    handles_live_as_long_as_their_files(false);
}
