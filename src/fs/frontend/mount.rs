//! Mounting and unmounting: the kernel side of a FUSE session.
//!
//! As root the daemon calls mount(2) itself with type `fuse.cutf8fs` and
//! BACKING as the source, so `mount` and `df` show `BACKING on MNT type
//! fuse.cutf8fs`. Otherwise it asks the setuid `fusermount3` to do it (the
//! libfuse protocol: a socket in `_FUSE_COMMFD`, the /dev/fuse descriptor
//! comes back as SCM_RIGHTS). Permission checks are always on
//! (`default_permissions`). This module knows nothing of the filesystem.
//!
//! A daemon unmounts only its own mount. Right after mounting it records
//! the mount's device number (`Own::device`, read without asking the
//! filesystem, which is not serving yet); to unmount, it opens the
//! mountpoint and detaches the mount that descriptor is on
//! (`/proc/self/fd/N`) only if it has that device number. A mountpoint
//! where something else is mounted now (this mount was detached, say by
//! `fusermount3 -uz`, and another mounted in its place) is left alone, and
//! the daemon ends its own connection instead ([`abort`]).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag};
use nix::mount::{umount2, MntFlags, MsFlags};

use crate::fs::frontend::failure::Failure;
use crate::fs::frontend::options::Options;
use crate::sys;

pub const FSTYPE: &str = "fuse.cutf8fs";

/// A live mount: the /dev/fuse descriptor to serve and how to undo it.
pub struct Mounted {
    pub dev: OwnedFd,
    pub own: Own,
}

/// Which mount is the daemon's, and how it was made.
#[derive(Clone, Debug)]
pub struct Own {
    pub mountpoint: PathBuf,
    /// Made by fusermount3 (so unmounted by it).
    pub fusermount: bool,
    /// The mount's device number, read when it was made (`None` if that
    /// failed: then only the path says which mount it is).
    pub device: Option<u64>,
}

impl Own {
    fn of(mnt: &Path, fusermount: bool) -> Own {
        let device = sys::open(mnt, libc::O_PATH | libc::O_DIRECTORY)
            .and_then(|root| sys::mount::device_of(root.as_fd()));
        let device = match device {
            Ok(d) => Some(d),
            Err(e) => {
                log::warn!(
                    "cannot read the device number of the new mount on {}: {e}; it will be \
                     unmounted by its path",
                    mnt.display()
                );
                None
            }
        };
        Own {
            mountpoint: mnt.to_owned(),
            fusermount,
            device,
        }
    }
}

/// Options both mount(2) and fusermount3 take from us.
fn common_opts(o: &Options, allow_other: bool) -> Vec<String> {
    let mut v = vec!["default_permissions".to_owned()];
    if allow_other || o.allow_root {
        v.push("allow_other".into());
    }
    if let Some(m) = o.max_read {
        v.push(format!("max_read={m}"));
    }
    v
}

/// How far the kernel reads ahead of a sequential reader of the mount:
/// 4 MiB, four requests of the largest size (256 pages, which the kernel
/// allows by default and the daemon asks for) in flight at once, so both
/// worker threads convert while the backing disk reads on. The kernel
/// starts a FUSE mount at 128 KiB (one request at a time, which its INIT
/// offers and the answer cannot raise): a cold `cat` of a corrected file
/// then waited on one request after another.
pub const READ_AHEAD: u64 = 4 << 20;

/// Sets the mount's read-ahead ([`READ_AHEAD`]) through
/// `/sys/class/bdi/MAJ:MIN/read_ahead_kb`, the mount's own backing-device
/// entry. Called once the FUSE handshake is done (the kernel sets the
/// read-ahead to the smaller of its own and what INIT's answer says) and
/// before the mount is served, so every file opened through it reads
/// ahead that far. Only root may write there: otherwise the kernel's
/// 128 KiB stay, said in the log. A value an administrator writes there
/// later is kept.
pub fn set_read_ahead(own: &Own) {
    let Some(dev) = own.device else { return };
    let path = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        rustix::fs::major(dev),
        rustix::fs::minor(dev)
    );
    match std::fs::write(&path, format!("{}\n", READ_AHEAD >> 10)) {
        Ok(()) => log::debug!("{path}: {} KiB", READ_AHEAD >> 10),
        Err(e) => log::info!(
            "the mount's read-ahead stays the kernel's ({path}: {e}); sequential reads \
             wait on one request at a time"
        ),
    }
}

pub fn mount(source: &str, mnt: &Path, o: &Options, allow_other: bool) -> Result<Mounted, Failure> {
    // auto_unmount needs fusermount3's watchdog, root or not.
    if !o.auto_unmount && sys::is_root() {
        match mount_sys(source, mnt, o, allow_other) {
            Ok(dev) => {
                return Ok(Mounted {
                    dev,
                    own: Own::of(mnt, false),
                })
            }
            // In a user namespace without the right to mount: try fusermount3.
            Err(e) if e.code == libc::EPERM => {}
            Err(e) => return Err(e.failure),
        }
    }
    let dev = mount_fusermount(source, mnt, o, allow_other)?;
    Ok(Mounted {
        dev,
        own: Own::of(mnt, true),
    })
}

struct SysError {
    code: i32,
    failure: Failure,
}

fn mount_sys(
    source: &str,
    mnt: &Path,
    o: &Options,
    allow_other: bool,
) -> Result<OwnedFd, SysError> {
    let fail = |code, msg: String| SysError {
        code,
        failure: Failure::mount(msg),
    };
    let dev = match sys::open(c"/dev/fuse", libc::O_RDWR) {
        Ok(dev) => dev,
        Err(e) => {
            let code = e.raw_os_error().unwrap_or(0);
            return Err(fail(
                if code == libc::EPERM { 0 } else { code },
                match code {
                    libc::ENOENT | libc::ENODEV | libc::ENXIO => {
                        "no /dev/fuse: FUSE is not available (install fuse3, load the fuse module)"
                            .into()
                    }
                    _ => format!("cannot open /dev/fuse: {e}"),
                },
            ));
        }
    };
    let mut data = vec![
        format!("fd={}", dev.as_raw_fd()),
        "rootmode=40000".to_owned(),
        format!("user_id={}", nix::unistd::getuid()),
        format!("group_id={}", nix::unistd::getgid()),
    ];
    data.extend(common_opts(o, allow_other));
    let r = nix::mount::mount(
        Some(source),
        mnt,
        Some(FSTYPE),
        MsFlags::from_bits_retain(o.flags),
        Some(data.join(",").as_str()),
    );
    if let Err(errno) = r {
        let code = errno as i32;
        let e = io::Error::from(errno);
        let msg = match errno {
            Errno::ENODEV => "the kernel has no FUSE support (load the fuse module)".into(),
            Errno::EPERM | Errno::EACCES => {
                format!("no permission to mount on {}: {e}", mnt.display())
            }
            _ => format!("mount on {} failed: {e}", mnt.display()),
        };
        return Err(fail(code, msg));
    }
    Ok(dev)
}

fn fusermount_bin() -> &'static str {
    ["/usr/bin/fusermount3", "/bin/fusermount3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("fusermount3")
}

fn flag_opts(o: &Options) -> Vec<String> {
    let table: [(libc::c_ulong, &str, &str); 5] = [
        (libc::MS_RDONLY, "ro", "rw"),
        (libc::MS_NOSUID, "nosuid", "suid"),
        (libc::MS_NODEV, "nodev", "dev"),
        (libc::MS_NOEXEC, "noexec", "exec"),
        (libc::MS_SYNCHRONOUS, "sync", "async"),
    ];
    let mut v: Vec<String> = table
        .iter()
        .map(|&(f, on, off)| if o.flags & f != 0 { on } else { off }.to_owned())
        .collect();
    for (f, name) in [
        (libc::MS_NOATIME, "noatime"),
        (libc::MS_NODIRATIME, "nodiratime"),
        (libc::MS_DIRSYNC, "dirsync"),
    ] {
        if o.flags & f != 0 {
            v.push(name.to_owned());
        }
    }
    v
}

fn mount_fusermount(
    source: &str,
    mnt: &Path,
    o: &Options,
    allow_other: bool,
) -> Result<OwnedFd, Failure> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| Failure::mount(format!("socketpair: {e}")))?;
    let mut opts = flag_opts(o);
    opts.extend(common_opts(o, allow_other));
    opts.push(format!("fsname={}", source.replace(',', "\\,")));
    opts.push("subtype=cutf8fs".into());
    if o.auto_unmount {
        opts.push("auto_unmount".into());
    }
    // fusermount3 inherits our end of the socket: it must outlive exec.
    let theirs_fd = theirs.as_raw_fd();
    nix::fcntl::fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty()))
        .map_err(|e| Failure::mount(format!("socketpair: {e}")))?;
    let mut cmd = Command::new(fusermount_bin());
    cmd.arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(mnt)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::mount(format!("cannot run fusermount3 (install fuse3): {e}")))?;
    drop(theirs);
    let received = sys::process::receive_fd(&ours);
    let received = match received {
        Ok(fd) if o.auto_unmount => {
            // fusermount3 stays, a watchdog that unmounts once our end of
            // the socket closes: when this process ends, however it ends.
            // So the socket stays open for the life of the process, and
            // fusermount3 is neither waited for nor read to its end.
            std::mem::forget(ours);
            std::mem::forget(child);
            return Ok(fd);
        }
        r => r,
    };
    drop(ours);
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    let status = child.wait();
    match received {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let why = err.trim();
            let why = if why.is_empty() {
                format!("{e} ({status:?})")
            } else {
                why.to_owned()
            };
            Err(Failure::mount(format!(
                "fusermount3 could not mount {}: {why}",
                mnt.display()
            )))
        }
    }
}

/// What [`unmount`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// The daemon's own mount is detached (at once, or once the files
    /// open through it are closed).
    Detached,
    /// The mountpoint no longer shows the daemon's mount (it was unmounted,
    /// or something is mounted over it): left alone.
    NotOurs,
}

/// Unmounts the daemon's own mount, lazily (files still open through it
/// keep working until closed, and a clean stop never leaves "Transport
/// endpoint is not connected" behind) — never another mount made on the
/// same path since.
pub fn unmount(own: &Own) -> io::Result<Unmounted> {
    let Some(device) = own.device else {
        return unmount_path(&own.mountpoint, own.fusermount).map(|()| Unmounted::Detached);
    };
    // Opening the mount's root asks the filesystem nothing (O_PATH).
    let Ok(root) = sys::open(own.mountpoint.as_path(), libc::O_PATH | libc::O_DIRECTORY) else {
        return Ok(Unmounted::NotOurs);
    };
    if sys::mount::device_of(root.as_fd()).ok() != Some(device) {
        return Ok(Unmounted::NotOurs);
    }
    if !own.fusermount {
        // The very mount `root` is on: no check-then-act window.
        match sys::mount::detach(root.as_fd()) {
            Ok(()) => return Ok(Unmounted::Detached),
            // In a user namespace without the right to unmount.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
    }
    drop(root);
    // fusermount3 unmounts by path: between the check above and its
    // unmount lies a short window (an unprivileged daemon has no other way).
    unmount_path(&own.mountpoint, true).map(|()| Unmounted::Detached)
}

/// Ends the daemon's own FUSE connection (the mount with device number
/// `device`) through the kernel's fusectl filesystem: every request fails
/// from then on, and the session ends. Needs fusectl mounted at
/// /sys/fs/fuse/connections.
pub fn abort(device: u64) -> io::Result<()> {
    // The kernel names a connection by its own dev_t: major << 20 | minor.
    let id = (u64::from(libc::major(device)) << 20) | u64::from(libc::minor(device));
    std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), b"1")
}

/// Unmounts whatever is mounted at `mnt` (lazily if busy): only when the
/// mount's identity could not be recorded.
fn unmount_path(mnt: &Path, fusermount: bool) -> io::Result<()> {
    if !fusermount {
        let e = match umount2(mnt, MntFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(Errno::EBUSY) => {
                return umount2(mnt, MntFlags::MNT_DETACH).map_err(io::Error::from)
            }
            Err(e) => io::Error::from(e),
        };
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
    }
    let status = Command::new(fusermount_bin())
        .args([
            OsStr::new("-u"),
            OsStr::new("-z"),
            OsStr::new("--"),
            mnt.as_os_str(),
        ])
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount3 -u failed: {status}")))
    }
}
