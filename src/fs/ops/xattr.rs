//! Extended attributes: set, get, list (hiding `trusted.*` from callers
//! without CAP_SYS_ADMIN) and remove; ACLs are xattrs changed as the caller.

use super::*;

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
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            let _as = act_as(req)?;
            sys::setxattr(inode.fd()?.as_fd(), &name, value, flags).map_err(io)
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
        let inode = self.inodes.get(ino)?;
        let acl = is_acl_name(name.as_bytes());
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        let fd = inode.fd()?;
        Self::xattr_reply(size, |buf| sys::getxattr(fd.as_fd(), &name, buf)).map_err(|e| {
            if acl && e == Errno::EOPNOTSUPP {
                Refused::NoAcl.into()
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
        let fd = inode.fd()?;
        if sys::has_sys_admin(req.pid(), req.uid()) {
            return Self::xattr_reply(size, |buf| sys::listxattr(fd.as_fd(), buf));
        }
        let mut all = Vec::new();
        loop {
            let n = sys::listxattr(fd.as_fd(), &mut []).map_err(io)?;
            all.resize(n, 0);
            match sys::listxattr(fd.as_fd(), &mut all) {
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

    /// removexattr, as the caller (see `setxattr`).
    pub(in crate::fs) fn remove_xattr(&self, req: &Request, ino: u64, name: &OsStr) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let name = sys::cstring(name.as_bytes()).map_err(io)?;
        self.keeping_content(&inode, || {
            let _as = act_as(req)?;
            sys::removexattr(inode.fd()?.as_fd(), &name).map_err(io)
        })
    }
}

pub(in crate::fs) enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}
