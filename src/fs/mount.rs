//! Mounting and unmounting: the kernel side of a FUSE session.
//!
//! As root the daemon calls mount(2) itself with type `fuse.cutf8fs` and
//! BACKING as the source, so `mount` and `df` show `BACKING on MNT type
//! fuse.cutf8fs`. Otherwise it asks the setuid `fusermount3` to do it (the
//! libfuse protocol: a socket in `_FUSE_COMMFD`, the /dev/fuse descriptor
//! comes back as SCM_RIGHTS). Permission checks are always on
//! (`default_permissions`). This module knows nothing of the filesystem.

use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::daemon::Failure;
use super::options::Options;

pub const FSTYPE: &str = "fuse.cutf8fs";

/// A live mount: the /dev/fuse descriptor to serve and how to undo it.
pub struct Mounted {
    pub dev: OwnedFd,
    pub mountpoint: PathBuf,
    pub fusermount: bool,
}

fn cpath(p: &Path) -> Result<CString, Failure> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Failure::usage("path holds a NUL byte"))
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
    // SAFETY: geteuid cannot fail.
    if !o.auto_unmount && unsafe { libc::geteuid() } == 0 {
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
    // SAFETY: valid C string; the returned descriptor is owned below.
    let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        let e = io::Error::last_os_error();
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
    // SAFETY: `raw` was just opened and is owned by no one else.
    let dev = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut data = vec![
        format!("fd={}", dev.as_raw_fd()),
        "rootmode=40000".to_owned(),
        // SAFETY: getuid/getgid cannot fail.
        format!("user_id={}", unsafe { libc::getuid() }),
        format!("group_id={}", unsafe { libc::getgid() }),
    ];
    data.extend(common_opts(o, allow_other));
    let to_c = |s: &str| CString::new(s).map_err(|_| fail(libc::EINVAL, format!("bad name {s:?}")));
    let src = to_c(source)?;
    let fstype = to_c(FSTYPE)?;
    let data = to_c(&data.join(","))?;
    let target = cpath(mnt).map_err(|f| SysError {
        code: libc::EINVAL,
        failure: f,
    })?;
    // SAFETY: all pointers are valid C strings for the duration of the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            o.flags,
            data.as_ptr().cast(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        let code = e.raw_os_error().unwrap_or(0);
        let msg = match code {
            libc::ENODEV => "the kernel has no FUSE support (load the fuse module)".into(),
            libc::EPERM | libc::EACCES => {
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
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(fusermount_bin());
    cmd.arg("-o")
        .arg(opts.join(","))
        .arg("--")
        .arg(mnt)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(theirs_fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(theirs_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::mount(format!("cannot run fusermount3 (install fuse3): {e}")))?;
    drop(theirs);
    let received = receive_fd(&ours);
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

fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message (and some slack).
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive
    // the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: `msg` points at live buffers.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no descriptor received",
        ));
    }
    // SAFETY: CMSG_* walk the control buffer recvmsg filled.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
            return Ok(OwnedFd::from_raw_fd(fd));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "no descriptor in message",
    ))
}

/// Unmounts (lazily if busy, so a clean stop never leaves "Transport
/// endpoint is not connected" behind).
pub fn unmount(mnt: &Path, fusermount: bool) -> io::Result<()> {
    if !fusermount {
        let c = CString::new(mnt.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: valid C string.
        if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBUSY) {
            // SAFETY: valid C string.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                return Ok(());
            }
            return Err(io::Error::last_os_error());
        }
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
