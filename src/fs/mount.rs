//! Mounting and unmounting: the kernel side of a FUSE session.
//!
//! As root the daemon calls mount(2) itself with type `fuse.cutf8fs` and
//! BACKING as the source, so `mount` and `df` show `BACKING on MNT type
//! fuse.cutf8fs`. Otherwise it asks the setuid `fusermount3` to do it (the
//! libfuse protocol: a socket in `_FUSE_COMMFD`, the /dev/fuse descriptor
//! comes back as SCM_RIGHTS). Permission checks are always on
//! (`default_permissions`). This module knows nothing of the filesystem.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag};
use nix::mount::{umount2, MntFlags, MsFlags};

use super::failure::Failure;
use super::options::Options;
use crate::sys;

pub const FSTYPE: &str = "fuse.cutf8fs";

/// A live mount: the /dev/fuse descriptor to serve and how to undo it.
pub struct Mounted {
    pub dev: OwnedFd,
    pub mountpoint: PathBuf,
    pub fusermount: bool,
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

pub fn mount(source: &str, mnt: &Path, o: &Options, allow_other: bool) -> Result<Mounted, Failure> {
    // auto_unmount needs fusermount3's watchdog, root or not.
    if !o.auto_unmount && sys::is_root() {
        match mount_sys(source, mnt, o, allow_other) {
            Ok(dev) => {
                return Ok(Mounted {
                    dev,
                    mountpoint: mnt.to_owned(),
                    fusermount: false,
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
        mountpoint: mnt.to_owned(),
        fusermount: true,
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

/// Unmounts (lazily if busy, so a clean stop never leaves "Transport
/// endpoint is not connected" behind).
pub fn unmount(mnt: &Path, fusermount: bool) -> io::Result<()> {
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
