//! Extended attributes: set, get, list (hiding `trusted.*` from callers
//! without CAP_SYS_ADMIN) and remove; ACLs are xattrs changed as the caller.
//!
//! Also the mount's virtual attributes, which tell what the mount does:
//!
//! * `cutf8fs.encoding` on a regular file: `corrected`, `raw` or `empty`,
//!   how it is stored in BACKING (through the mount every file reads as
//!   UTF-8, so nothing else tells);
//! * `cutf8fs.stats` on the mount's root: the daemon's statistics
//!   (`crate::fs::observe::stats`), which `cutf8fs --stats MOUNTPOINT` prints.
//!
//! They are answered by getxattr and by nothing else: never listed by
//! listxattr, so `cp -a`, `tar --xattrs`, `rsync -X` and any tool that
//! copies "all attributes" never carry them to a copy (which is stored as
//! the mount decides, not as its source was); set and remove fail with
//! EPERM. Their namespace, `cutf8fs.`, is none of the kernel's (`user.`,
//! `trusted.`, `security.`, `system.`): no file in BACKING can have an
//! attribute of that name (its filesystem refuses the namespace), so none
//! is hidden or shadowed, and a tool told to copy it explicitly fails
//! rather than store it. The kernel passes the name through to the daemon
//! after checking read permission on the file, so anyone who may read a
//! file may ask how it is stored, as native tools could tell by reading
//! its first bytes in BACKING.
//!
//! **`security.selinux` where it is absent is not supported
//! (EOPNOTSUPP), not ENODATA.** `ls -l` asks every file for two
//! attributes, `security.selinux` and `system.posix_acl_access`; the
//! kernel caches no `security.*` attribute, so each listing cost a round
//! trip per file for a label that is not there. The daemon is asked for
//! that label only where no security module answers it (with SELinux on,
//! the kernel answers from its own label and never asks the
//! filesystem), and `ls` (like libselinux's callers) takes EOPNOTSUPP to
//! mean the whole filesystem has no labels and stops asking. A file that
//! has the attribute in BACKING still shows its value, listxattr lists
//! exactly what BACKING has, and setting one works as before: only the
//! error for an absent label differs, as on gocryptfs, which supports no
//! `security.*` attribute at all.
//!
//! **Reading is cheap.** The other attribute, the ACL, the kernel caches,
//! but drops an inode's cached ACLs whenever a readdirplus refreshes it,
//! so reading is on the path of every listing.
//! A regular file not open through the mount is opened read-only by its
//! handle and read with `fgetxattr`; an `O_PATH` descriptor, which is all
//! the inode table would give, can be read only through its
//! `/proc/self/fd` path, a walk through procfs that costs more than the
//! reopen itself (docs/performance.md). The descriptor is kept for a
//! moment (`crate::fs::state::recent`), so the second request of the pair
//! reads through it, and let go within half a second. `O_NONBLOCK`: a
//! lease on the file in BACKING is never waited for (the `O_PATH` way is
//! taken instead). Only regular files: opening a device or a FIFO would
//! reach its driver or wait for a writer; directories (their descriptors
//! are kept by the inode table anyway), symlinks and the rest are read
//! through the `O_PATH` descriptor as before.

use std::ffi::CStr;

use super::*;
use crate::fs::state::inodes::Fd;

/// The namespace of the mount's virtual attributes.
const VIRTUAL: &[u8] = b"cutf8fs.";
/// How a file is stored.
const ENCODING: &[u8] = b"cutf8fs.encoding";
/// The daemon's statistics (the mount's root only).
const STATS: &[u8] = b"cutf8fs.stats";
/// The SELinux label, which reaches the daemon only on a host where no
/// security module answers it.
const SELINUX: &[u8] = b"security.selinux";

impl CutFs {
    /// Sets an xattr as the caller (the kernel has checked the caller may;
    /// as the caller, BACKING also applies its own side effects, e.g. an ACL
    /// set by an owner outside the file's group clears its setgid bit).
    pub(in crate::fs) fn set_xattr(
        &self,
        req: &Request,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
    ) -> Result<()> {
        if name.as_bytes().starts_with(VIRTUAL) {
            return Err(Refused::Virtual.into());
        }
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            // Reached first: reopening takes the daemon's own rights.
            let fd = inode.fd()?;
            let _as = act_as(req)?;
            sys::setxattr(fd.as_fd(), &name, value, flags).map_err(io)
        })
    }

    /// getxattr/listxattr protocol: size 0 asks for the length.
    pub(in crate::fs) fn xattr_reply(
        size: u32,
        mut call: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    ) -> Result<XattrReply> {
        if size == 0 {
            let n = call(&mut []).map_err(io)?;
            return Ok(XattrReply::Size(
                u32::try_from(n).map_err(|_| Refused::TooBig)?,
            ));
        }
        let mut buf = vec![0u8; size as usize];
        let n = call(&mut buf).map_err(io)?;
        buf.truncate(n);
        Ok(XattrReply::Data(buf))
    }

    /// getxattr. The kernel reads POSIX ACLs through here to check
    /// permissions; on a BACKING without ACL support they are absent
    /// (ENODATA), not an error that would refuse every access.
    pub(in crate::fs) fn get_xattr(&self, ino: u64, name: &OsStr, size: u32) -> Result<XattrReply> {
        if name.as_bytes().starts_with(VIRTUAL) {
            let value = self.virtual_xattr(ino, name.as_bytes())?;
            return Self::xattr_reply(size, |buf| {
                if buf.is_empty() {
                    Ok(value.len())
                } else if buf.len() < value.len() {
                    Err(std::io::Error::from_raw_os_error(libc::ERANGE))
                } else {
                    buf[..value.len()].copy_from_slice(&value);
                    Ok(value.len())
                }
            });
        }
        let inode = self.inodes.get(ino)?;
        let acl = is_acl_name(name.as_bytes());
        let label = name.as_bytes() == SELINUX;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        let fd = self.xattr_source(&inode)?;
        Self::xattr_reply(size, |buf| get_through(&fd, &name, buf)).map_err(|e| {
            if acl && e == Errno::EOPNOTSUPP {
                Refused::NoAcl.into()
            } else if label && e == Errno::ENODATA {
                Refused::NoLabel.into()
            } else {
                e
            }
        })
    }

    /// listxattr: the names BACKING lists, less `trusted.*` for a caller
    /// who would not see them natively (the daemon, as root, always does):
    /// one without CAP_SYS_ADMIN.
    pub(in crate::fs) fn list_xattrs(
        &self,
        req: &Request,
        ino: u64,
        size: u32,
    ) -> Result<XattrReply> {
        let inode = self.inodes.get(ino)?;
        let fd = self.xattr_source(&inode)?;
        if sys::has_sys_admin(req.pid(), req.uid()) {
            return Self::xattr_reply(size, |buf| list_through(&fd, buf));
        }
        let mut all = Vec::new();
        loop {
            let n = list_through(&fd, &mut []).map_err(io)?;
            all.resize(n, 0);
            match list_through(&fd, &mut all) {
                Ok(n) => {
                    all.truncate(n);
                    break;
                }
                // Grown since the size was asked: again.
                Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
                Err(e) => return Err(io(e)),
            }
        }
        let shown: Vec<u8> = all
            .split_inclusive(|&b| b == 0)
            .filter(|n| !n.starts_with(b"trusted."))
            .flatten()
            .copied()
            .collect();
        let len = u32::try_from(shown.len()).map_err(|_| Refused::TooBig)?;
        match size {
            0 => Ok(XattrReply::Size(len)),
            s if s < len => Err(Refused::BufferTooSmall.into()),
            _ => Ok(XattrReply::Data(shown)),
        }
    }

    /// A descriptor to read `inode`'s attributes through (see the module
    /// doc): an open handle's, one kept from the last request for this
    /// entry, a regular file opened read-only now (and kept), or else the
    /// entry's `O_PATH` one.
    fn xattr_source(&self, inode: &Arc<Inode>) -> Result<Fd> {
        if !inode.is_reg() || inode.is_open() {
            return inode.fd();
        }
        if let Some(fd) = self.recent.get(inode) {
            return Ok(fd);
        }
        let fd = match inode.open(libc::O_RDONLY | libc::O_NONBLOCK) {
            Ok(f) => Arc::new(f),
            // A lease holder in BACKING (EWOULDBLOCK), or a daemon that
            // may not read the file (reopening by name, without root).
            Err(Errno::EWOULDBLOCK | Errno::EACCES | Errno::EPERM) => inode.fd()?,
            Err(e) => return Err(e),
        };
        self.recent.put(inode, &fd);
        Ok(fd)
    }

    /// The value of virtual attribute `name` of inode `ino` (see the
    /// module doc).
    fn virtual_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let inode = self.inodes.get(ino)?;
        match name {
            ENCODING if inode.is_reg() => {
                let st = inode.stat()?;
                let value = if st.st_size == 0 {
                    "empty"
                } else {
                    match classify(&self.cache, &inode, &st)? {
                        Class::Raw => "raw",
                        Class::Corrected { .. } => "corrected",
                    }
                };
                Ok(value.as_bytes().to_vec())
            }
            STATS if ino == crate::fs::state::inodes::ROOT => {
                let (cache_used, cache_limit) = self.cache.usage();
                let backing = inode
                    .fd()
                    .ok()
                    .and_then(|fd| {
                        use std::os::fd::AsRawFd;
                        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
                    })
                    .map_or_else(|| "BACKING".into(), |p| p.display().to_string());
                let now = crate::fs::observe::stats::Now {
                    backing,
                    inodes: self.inodes.known(),
                    cache_used,
                    cache_limit,
                };
                Ok(crate::fs::observe::stats::report(&self.stats, &now).into_bytes())
            }
            _ => Err(Refused::NoVirtual.into()),
        }
    }

    /// removexattr, as the caller (see `setxattr`).
    pub(in crate::fs) fn remove_xattr(&self, req: &Request, ino: u64, name: &OsStr) -> Result<()> {
        if name.as_bytes().starts_with(VIRTUAL) {
            return Err(Refused::Virtual.into());
        }
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            // Reached first: reopening takes the daemon's own rights.
            let fd = inode.fd()?;
            let _as = act_as(req)?;
            sys::removexattr(fd.as_fd(), &name).map_err(io)
        })
    }
}

/// getxattr through `fd`: `fgetxattr`, or for an `O_PATH` descriptor
/// (EBADF) its `/proc/self/fd` path. An empty `buf` asks for the size.
fn get_through(fd: &Fd, name: &CStr, buf: &mut [u8]) -> std::io::Result<usize> {
    let r = if buf.is_empty() {
        rustix::fs::fgetxattr_query(fd, name)
    } else {
        rustix::fs::fgetxattr(fd, name, &mut *buf)
    };
    match r {
        Err(rustix::io::Errno::BADF) => sys::getxattr(fd.as_fd(), name, buf),
        r => r.map_err(Into::into),
    }
}

/// listxattr through `fd`, as [`get_through`].
fn list_through(fd: &Fd, buf: &mut [u8]) -> std::io::Result<usize> {
    let r = if buf.is_empty() {
        rustix::fs::flistxattr_query(fd)
    } else {
        rustix::fs::flistxattr(fd, &mut *buf)
    };
    match r {
        Err(rustix::io::Errno::BADF) => sys::listxattr(fd.as_fd(), buf),
        r => r.map_err(Into::into),
    }
}

pub(in crate::fs) enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}
