//! NFS-Ganesha's file handles across a restart of the daemon, by the
//! procedures man cutf8fs documents (EXPORTING). Ganesha's FSAL VFS puts
//! in every handle the id of the filesystem the file is on
//! (`vfs_map_name_to_handle_at`, FSAL_VFS/os/linux/handle_syscalls.c), and
//! for a FUSE mount that id is the mount's device number 0:N (statfs gives
//! FUSE mounts no f_fsid; `posix_get_fsid` in FSAL/localfs.c falls back to
//! st_dev), which is new at every mount. With `fsid_type = Major64` in the
//! export's FSAL block only the major number, 0 for every FUSE mount, goes
//! into the handle, so the handle outlives the mount.
//!
//! Each test takes handles through Ganesha, restarts the daemon (and
//! Ganesha) and reads by those handles alone: PUTFH and READ, no name looked
//! up (`nfsop readfh`, support::servers). The new mount must have another
//! device number than the old, or the test could not tell. A handle
//! taken a moment before the restart survives it too, also on a BACKING
//! whose index database the old daemon creates after the new one started.
//! The test
//! without `Major64` shows the same procedure leaves every handle stale,
//! its fsid being all that changed.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use crate::support::mount::{is_mounted, wait_for, Mount};
use crate::support::servers::Server;
use crate::support::write::corrected_file;

/// What man cutf8fs puts in the export's FSAL block.
const FSAL: &str = "fsid_type = Major64;";

const NOTES: &str = "Caf\u{e9} \u{2014} \u{800}\u{10000} read by its handle\n";
const INNER: &str = "\u{3f4} inner \u{801}\n";
const RAW: &[u8] = b"\x00\x01binary\xff\xfe\n";

fn archive(b: &Path) {
    fs::write(b.join("notes.txt"), corrected_file(NOTES)).unwrap();
    fs::write(b.join("raw.bin"), RAW).unwrap();
    fs::create_dir(b.join("d")).unwrap();
    fs::write(b.join("d/inner.txt"), corrected_file(INNER)).unwrap();
}

/// The files the tests take handles of, and their view.
fn files() -> [(&'static str, &'static [u8]); 3] {
    [
        ("notes.txt", NOTES.as_bytes()),
        ("d/inner.txt", INNER.as_bytes()),
        ("raw.bin", RAW),
    ]
}

/// (file, its handle, its view), each handle checked to read the view now.
fn take_handles(nfs: &Server) -> Vec<(&'static str, String, &'static [u8])> {
    files()
        .into_iter()
        .map(|(rel, want)| {
            let h = nfs.nfs_handle(rel);
            let out = nfs.nfs_read_handle(&h);
            assert_eq!(out.stdout, want, "{rel} by its handle {h}: {}", show(&out));
            (rel, h, want)
        })
        .collect()
}

fn show(out: &Output) -> String {
    format!(
        "{}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until the daemon has written the node records of what Ganesha
/// looked up: the index database's `nodes` holds the inode number each
/// shows through the mount.
fn settle(m: &Mount) {
    let mut want: Vec<i64> = ["d"]
        .into_iter()
        .chain(files().map(|(rel, _)| rel))
        .map(|rel| fs::metadata(m.m(rel)).unwrap().ino() as i64)
        .collect();
    want.sort();
    let db = m.b(".cutf8fs-index/index.sqlite");
    let stored = || -> rusqlite::Result<Vec<i64>> {
        let c =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut q = c.prepare("SELECT ino FROM nodes")?;
        let v = q.query_map([], |r| r.get(0))?.collect();
        v
    };
    crate::support::mount::wait_until("the node records of Ganesha's lookups", 30.0, || {
        stored().is_ok_and(|have| want.iter().all(|i| have.contains(i)))
    });
}

fn dev_of(p: &Path) -> u64 {
    fs::metadata(p).unwrap().dev()
}

/// The old daemon, killed if the test ends before it did.
struct Old(Child);

impl Drop for Old {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// man cutf8fs, EXPORTING, under a running Ganesha: `umount` refuses (the
/// server holds the mount), so `umount -l`, a new daemon on the same
/// BACKING and mount point, then Ganesha restarted; the old daemon ends by
/// itself once Ganesha let go of the old mount. Returns the device numbers
/// of the old and the new mount.
fn restart_under_running_ganesha(m: &mut Mount, nfs: &mut Server) -> (u64, u64) {
    let before = dev_of(&m.mnt);
    let busy = Command::new("umount").arg(&m.mnt).output().unwrap();
    assert!(
        !busy.status.success(),
        "umount of the exported mount succeeded: Ganesha should hold it busy"
    );
    let old = Old(m.take_child().expect("the daemon runs"));
    let lazy = Command::new("umount")
        .arg("-l")
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(lazy.status.success(), "umount -l: {}", show(&lazy));
    assert!(wait_for(10.0, || !is_mounted(&m.mnt)), "still mounted");
    m.remount();
    let after = dev_of(&m.mnt);
    nfs.restart();
    let mut old = old;
    assert!(
        wait_for(10.0, || old.0.try_wait().ok().flatten().is_some()),
        "the old daemon still runs 10 s after Ganesha restarted"
    );
    (before, after)
}

/// Mounts tmpfs placeholders until the kernel's next anonymous device
/// number is above `dev`'s (it hands out the lowest free one), so that the
/// next mount cannot take `dev` again. Unmounted on drop.
struct Placeholders(Vec<tempfile::TempDir>);

impl Placeholders {
    fn above(dev: u64) -> Placeholders {
        let mut held = Placeholders(Vec::new());
        for _ in 0..256 {
            let d = tempfile::Builder::new()
                .prefix("devhold-")
                .tempdir()
                .unwrap();
            let out = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "devhold"])
                .arg(d.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "mount tmpfs: {}", show(&out));
            let got = dev_of(d.path());
            held.0.push(d);
            if libc::major(got) == 0 && libc::minor(got) >= libc::minor(dev) {
                return held;
            }
        }
        panic!("256 tmpfs mounts and device number {dev:#x} still free");
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = Command::new("umount").arg(d.path()).status();
        }
    }
}

fn paths(p: &[tempfile::TempDir]) -> Vec<PathBuf> {
    p.iter().map(|d| d.path().to_path_buf()).collect()
}

/// Reads every handle and asserts each gives its file's view.
fn assert_read_by_old_handles(nfs: &Server, handles: &[(&str, String, &[u8])], when: &str) {
    for (rel, h, want) in handles {
        let out = nfs.nfs_read_handle(h);
        assert!(
            out.status.success(),
            "{rel} by the handle taken before {when} ({h}): {}",
            show(&out)
        );
        assert_eq!(&out.stdout, want, "{rel} by its old handle after {when}");
        assert_eq!(
            &nfs.nfs_handle(rel),
            h,
            "Ganesha gives {rel} another handle after {when}"
        );
    }
}

#[test]
fn ganesha_handles_survive_a_daemon_restart_under_the_running_server() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha_fsal(&m.mnt, "4244.1", FSAL);
    let handles = take_handles(&nfs);
    settle(&m);
    for round in 1..=2 {
        let (before, after) = restart_under_running_ganesha(&mut m, &mut nfs);
        assert_ne!(
            before, after,
            "restart {round}: the new mount has the old one's device number"
        );
        assert_read_by_old_handles(&nfs, &handles, &format!("restart {round}"));
    }
    // The mount itself still serves the view.
    assert_eq!(fs::read(m.m("notes.txt")).unwrap(), NOTES.as_bytes());
}

/// The clean order (Ganesha stopped, unmount, mount, Ganesha started) with
/// the old device number held by another mount, as on a busy host.
#[test]
fn ganesha_handles_survive_a_daemon_restart_with_the_server_stopped_first() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha_fsal(&m.mnt, "4245.1", FSAL);
    let handles = take_handles(&nfs);
    settle(&m);
    let before = dev_of(&m.mnt);
    nfs.stop();
    m.unmount();
    let held = Placeholders::above(before);
    m.remount();
    let after = dev_of(&m.mnt);
    assert_ne!(
        before,
        after,
        "the new mount has the old one's device number (placeholders {:?})",
        paths(&held.0)
    );
    drop(held);
    nfs.restart();
    assert_read_by_old_handles(&nfs, &handles, "the restart");
}

/// Without `fsid_type = Major64` the same procedure leaves every handle
/// stale (NFS4ERR_STALE): what the configuration in man cutf8fs is for,
/// and what the tests above would see without it. The handle Ganesha gives
/// the same file after the restart differs from the old one in the
/// filesystem id alone (Two32: the device number's major and minor), so
/// the part cutf8fs made is still good.
#[test]
fn without_major64_ganesha_handles_go_stale_at_a_daemon_restart() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha(&m.mnt, "4246.1");
    let handles = take_handles(&nfs);
    settle(&m);
    let (before, after) = restart_under_running_ganesha(&mut m, &mut nfs);
    assert_ne!(before, after, "the new mount has the old device number");
    for (rel, h, _) in &handles {
        let out = nfs.nfs_read_handle(h);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{rel} by its handle {h} after the restart: NFS4ERR_STALE expected (exit 3): {}",
            show(&out)
        );
        let new = nfs.nfs_handle(rel);
        assert_eq!(new.len(), h.len(), "{rel}: {h} then {new}");
        // Ganesha's header (version, flags, export id, length: 5 bytes),
        // then FSAL VFS's: the fsid type (1 byte), the fsid (8 bytes), the
        // kernel's handle.
        let differ: Vec<usize> = (0..h.len() / 2)
            .filter(|&i| h[2 * i..2 * i + 2] != new[2 * i..2 * i + 2])
            .collect();
        assert!(
            !differ.is_empty() && differ.iter().all(|i| (6..14).contains(i)),
            "{rel}: {h} then {new}: bytes {differ:?} differ, not only the fsid"
        );
    }
}

/// A handle Ganesha took a moment before the restart, before the old
/// daemon wrote its node record (it does within 300 ms, and at its end),
/// survives the restart when the index database already exists.
#[test]
fn ganesha_handles_taken_just_before_a_restart_survive_it() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha_fsal(&m.mnt, "4247.1", FSAL);
    take_handles(&nfs);
    settle(&m);
    fs::write(m.b("late.txt"), corrected_file(NOTES)).unwrap();
    let h = nfs.nfs_handle("late.txt");
    let late = [("late.txt", h, NOTES.as_bytes())];
    let (before, after) = restart_under_running_ganesha(&mut m, &mut nfs);
    assert_ne!(before, after, "the new mount has the old device number");
    assert_read_by_old_handles(&nfs, &late, "the restart");
}

/// The same on a BACKING whose index database does not exist yet when
/// the new daemon starts (the old one creates it with its first records,
/// at most 300 ms after the lookups): the new daemon looks for it again
/// when a node is unknown, and waits for the old one's commit
/// (`indexdb::closing`). Failed every time before that (2026-11-28).
#[test]
fn ganesha_handles_survive_a_restart_before_the_database_exists() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha_fsal(&m.mnt, "4248.1", FSAL);
    let handles = take_handles(&nfs);
    let (before, after) = restart_under_running_ganesha(&mut m, &mut nfs);
    assert_ne!(before, after, "the new mount has the old device number");
    assert_read_by_old_handles(&nfs, &handles, "the restart");
}
