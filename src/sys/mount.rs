//! A mount's own identity, and unmounting exactly it: the device number
//! of the filesystem behind a descriptor, read without asking that
//! filesystem anything, and a lazy unmount of the mount a descriptor is
//! on (never whatever is mounted at a path now).

use std::io;
use std::os::fd::BorrowedFd;

use nix::mount::MntFlags;

use super::{from_nix, proc_path};

/// The device number of the filesystem the directory `dir` is on, read
/// without asking that filesystem anything (`AT_STATX_DONT_SYNC`: a FUSE
/// mount whose daemon does not answer yet still tells it).
pub fn device_of(dir: BorrowedFd<'_>) -> io::Result<u64> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let flags = AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC;
    let stx = statx(dir, c"", flags, StatxFlags::TYPE)?;
    Ok(libc::makedev(stx.stx_dev_major, stx.stx_dev_minor))
}

/// Detaches (`MNT_DETACH`) the mount whose root `root` is open on: the
/// path `/proc/self/fd/N` leads to that very mount, whatever has been
/// mounted at its mountpoint since. EINVAL if `root` is not a mount's root
/// or that mount is no longer attached.
pub fn detach(root: BorrowedFd<'_>) -> io::Result<()> {
    nix::mount::umount2(proc_path(root).as_c_str(), MntFlags::MNT_DETACH).map_err(from_nix)
}
