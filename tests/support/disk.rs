//! Small filesystems mounted for one test and unmounted on drop: BACKINGs
//! whose space runs out and whose free blocks a test can read (statvfs).
//!
//! * [`Ext4`]: on a loop device; it can be remounted read-only — with its
//!   free blocks, the checks that show whether anything still holds a
//!   deleted file. Made with `mkfs.ext4 -m 0` (no blocks reserved for
//!   root, which the daemon is), or with a reserve (`Ext4::with_reserve`).
//! * [`Tmpfs`]: where a full disk is exact to the page (ext4 keeps blocks
//!   preallocated for a file being written, so whether one more byte fits
//!   on a "full" ext4 depends on when it was written back).
//!
//! Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Ext4 {
    /// Where the filesystem is mounted.
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Ext4 {
    /// A fresh ext4 of `mib` MiB with 4 KiB blocks, mounted.
    pub fn new(mib: u64) -> Ext4 {
        Ext4::with_reserve(mib, 0)
    }

    /// [`Ext4::new`] with `percent` % of its blocks reserved for root
    /// (`mkfs.ext4 -m`).
    pub fn with_reserve(mib: u64, percent: u32) -> Ext4 {
        let tmp = tempfile::Builder::new()
            .prefix("cutf8fs-ext4-")
            .tempdir()
            .expect("temp dir");
        let image = tmp.path().join("image");
        let dir = tmp.path().join("fs");
        std::fs::create_dir(&dir).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", &percent.to_string(), "-b", "4096"])
            .arg(&image))
        .expect("mkfs.ext4 (e2fsprogs) failed");
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&dir))
        .expect("mount -o loop failed (the test needs root)");
        Ext4 { dir, _tmp: tmp }
    }

    /// Bytes free for anyone (f_bavail).
    pub fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(&self.dir).expect("statvfs");
        v.blocks_available() * v.fragment_size()
    }

    /// `mount -o remount,ro` (or `rw`): what mount(8) said when it failed.
    pub fn remount(&self, how: &str) -> Result<(), String> {
        run(Command::new("mount")
            .arg("-o")
            .arg(format!("remount,{how}"))
            .arg(&self.dir))
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        if mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// A tmpfs of a given size, mounted for one test.
pub struct Tmpfs {
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Tmpfs {
    /// A fresh tmpfs of `kib` KiB.
    pub fn new(kib: u64) -> Tmpfs {
        let tmp = tempfile::Builder::new()
            .prefix("cutf8fs-tmpfs-")
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path().join("fs");
        std::fs::create_dir(&dir).unwrap();
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={kib}k,mode=0755"))
            .arg("tmpfs")
            .arg(&dir))
        .expect("mount -t tmpfs failed (the test needs root)");
        Tmpfs { dir, _tmp: tmp }
    }

    /// Bytes free (f_bavail).
    pub fn free(&self) -> u64 {
        let v = nix::sys::statvfs::statvfs(&self.dir).expect("statvfs");
        v.blocks_available() * v.fragment_size()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        if mounted(&self.dir) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

fn mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = dir.to_string_lossy().replace(' ', "\\040");
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == want))
}
