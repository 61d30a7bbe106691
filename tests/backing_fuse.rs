//! The mount over a BACKING without usable file handles: a bindfs mount
//! (another FUSE filesystem, standing in for a network filesystem), on
//! which the daemon reopens inodes by directory and name. A representative
//! subset of the mount's contract runs there: the view of corrected and
//! raw files, writes arriving corrected, a shifting rewrite under the
//! journal, rename and mkdir, flock and POSIX locks reaching the files
//! underneath, and file handles made through the mount opening their files
//! after an eviction and a restart of the daemon (stale once deleted).

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::handles::{drop_caches, handle_of, open_by_handle, read_by_handle};
use crate::support::mount::{is_mounted, wait_for, Mount};
use crate::support::write::{assert_corrected, corrected_file};

/// bindfs of a directory, unmounted on drop.
pub(crate) struct Bindfs {
    mnt: PathBuf,
}

impl Bindfs {
    pub(crate) fn mount(real: &Path, mnt: &Path) -> Bindfs {
        let out = Command::new("bindfs")
            .arg("--enable-lock-forwarding")
            .arg("--multithreaded")
            .arg(real)
            .arg(mnt)
            .output()
            .expect("bindfs (scripts/setup.sh)");
        assert!(out.status.success(), "bindfs: {out:?}");
        let fuse = || {
            fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .any(|l| l.contains(&format!(" {} ", mnt.display())) && l.contains("fuse"))
        };
        assert!(wait_for(10.0, fuse), "bindfs did not mount");
        Bindfs {
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
    }
}

const NOTES: &str = "Caf\u{e9} \u{800}\u{10000} notes\n";
const RAW: &[u8] = b"\x00\x01binary\xff\n";

/// flock(2) on `f`, not waiting: whether it was granted.
fn try_flock(f: &fs::File) -> bool {
    // SAFETY: flock(2) on a descriptor this function borrows.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[test]
fn the_mount_over_a_fuse_backing_keeps_its_contract() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    let bind = dir.path().join("bind");
    let mnt = dir.path().join("mnt");
    for d in [&real, &bind, &mnt] {
        fs::create_dir(d).unwrap();
    }
    fs::write(real.join("notes.txt"), corrected_file(NOTES)).unwrap();
    fs::write(real.join("raw.bin"), RAW).unwrap();
    fs::create_dir(real.join("d")).unwrap();
    fs::write(real.join("d/inner.txt"), corrected_file("inner \u{3b1}\n")).unwrap();
    let bindfs = Bindfs::mount(&real, &bind);
    let mut m = Mount::with(&[]).on(&bind, &mnt, &dir.path().join("daemon.log"));
    assert!(
        m.log_text().contains("reopened by name"),
        "the daemon uses file handles on a FUSE BACKING:\n{}",
        m.log_text()
    );

    // The view.
    assert_eq!(fs::read(m.m("notes.txt")).unwrap(), NOTES.as_bytes());
    assert_eq!(fs::read(m.m("raw.bin")).unwrap(), RAW);
    assert_eq!(
        fs::metadata(m.m("notes.txt")).unwrap().len(),
        NOTES.len() as u64
    );

    // Writes: a new text file arrives corrected; a shifting rewrite of a
    // corrected file goes through the journal and leaves it corrected.
    fs::write(m.m("new.txt"), "new \u{2192} text\n").unwrap();
    assert_corrected(
        &real.join("new.txt"),
        "new \u{2192} text\n".as_bytes(),
        "new file",
    );
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.m("notes.txt"))
        .unwrap();
    f.write_at("\u{800}".as_bytes(), 0).unwrap();
    drop(f);
    let want = format!("\u{800}{}", &NOTES[3..]);
    assert_eq!(fs::read_to_string(m.m("notes.txt")).unwrap(), want);
    assert_corrected(&real.join("notes.txt"), want.as_bytes(), "shifting rewrite");
    assert!(crate::support::write::journal_entries(&real).is_empty());

    // Rename and mkdir reach the files underneath.
    fs::rename(m.m("new.txt"), m.m("d/moved.txt")).unwrap();
    assert!(real.join("d/moved.txt").exists() && !real.join("new.txt").exists());
    fs::create_dir(m.m("e")).unwrap();
    assert!(real.join("e").is_dir());

    // Locks: flock through the mount excludes one taken underneath, and
    // the other way round.
    let through = fs::File::open(m.m("raw.bin")).unwrap();
    let native = fs::File::open(real.join("raw.bin")).unwrap();
    assert!(try_flock(&through), "flock through the mount");
    assert!(
        !try_flock(&native),
        "flock underneath granted beside the mount's"
    );
    drop(through);
    // (The kernel sends the release of a closed file on its own time.)
    assert!(
        wait_for(5.0, || try_flock(&native)),
        "flock underneath after the mount's went"
    );
    let through = fs::File::open(m.m("raw.bin")).unwrap();
    assert!(
        !try_flock(&through),
        "flock through the mount beside a native one"
    );
    drop((through, native));

    // File handles by name: after an eviction and a restart; stale once
    // deleted.
    let h = handle_of(&m.m("d/inner.txt"));
    let gone = handle_of(&m.m("raw.bin"));
    assert_eq!(
        read_by_handle(&m.mnt, &h, "fresh"),
        "inner \u{3b1}\n".as_bytes()
    );
    drop_caches();
    assert_eq!(
        read_by_handle(&m.mnt, &h, "evicted"),
        "inner \u{3b1}\n".as_bytes()
    );
    m.unmount();
    m.remount();
    drop_caches();
    assert_eq!(
        read_by_handle(&m.mnt, &h, "restarted"),
        "inner \u{3b1}\n".as_bytes()
    );
    fs::remove_file(real.join("raw.bin")).unwrap();
    drop_caches();
    assert_eq!(
        open_by_handle(&m.mnt, &gone, libc::O_RDONLY).err(),
        Some(libc::ESTALE),
        "a deleted file's handle"
    );
    drop(m);
    assert!(!is_mounted(&mnt));
    drop(bindfs);
}
