//! Names in directories: lookup's creating and removing siblings — make
//! (mkdir, mknod, symlink), link, unlink/rmdir, rename — and readlink.
//! Each acts on one name under a parent held by descriptor (see `super`).

use super::*;

impl CutFs {
    /// Creates `name` in `parent` with `make` as the caller, under the
    /// caller's `umask` (None: none applies, a symlink), then enters it.
    pub(in crate::fs) fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        umask: Option<u32>,
        make: impl FnOnce(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr) -> std::io::Result<()>,
    ) -> Result<FileAttr> {
        if is_journal(parent, name) {
            return Err(Refused::Reserved.into());
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        {
            // The directory is reached first: reopening it takes the
            // daemon's own rights (CAP_DAC_READ_SEARCH for a file handle).
            let dir_fd = dir.fd()?;
            let _mask = umask.map(with_umask).transpose()?;
            let _as = act_as(req)?;
            make(dir_fd.as_fd(), &cname).map_err(io)?;
        }
        let (inode, st) = self.inodes.lookup(&dir, &cname)?;
        self.entry(inode, &st)
    }

    pub(in crate::fs) fn make_dir(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr> {
        self.make(req, parent, name, Some(umask), |d, n| {
            sys::mkdirat(d, n, mode & 0o7777)
        })
    }

    pub(in crate::fs) fn make_node(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<FileAttr> {
        let mode = mode & (libc::S_IFMT | 0o7777);
        self.make(req, parent, name, Some(umask), |d, n| {
            sys::mknodat(d, n, mode, libc::dev_t::from(rdev))
        })
    }

    pub(in crate::fs) fn make_symlink(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        target: &std::path::Path,
    ) -> Result<FileAttr> {
        let target = sys::cstring(target.as_os_str().as_bytes()).map_err(io)?;
        self.make(req, parent, name, None, |d, n| {
            sys::symlinkat(&target, d, n)
        })
    }

    pub(in crate::fs) fn make_link(
        &self,
        req: &Request,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
    ) -> Result<FileAttr> {
        if is_journal(newparent, newname) {
            return Err(Refused::Reserved.into());
        }
        let inode = self.inodes.get(ino)?;
        let dir = self.inodes.get(newparent)?;
        let cname = sys::component(newname).map_err(io)?;
        self.keeping_content(&inode, || {
            let (file, dir) = (inode.fd()?, dir.fd()?);
            // A new name may take a directory block: the caller's.
            let _limits = limits(req)?;
            sys::linkat(file.as_fd(), dir.as_fd(), &cname).map_err(io)
        })?;
        let (inode, st) = self.inodes.lookup(&dir, &cname)?;
        self.entry(inode, &st)
    }

    pub(in crate::fs) fn remove_entry(
        &self,
        parent: u64,
        name: &OsStr,
        flags: libc::c_int,
    ) -> Result<()> {
        if is_journal(parent, name) {
            return Err(Refused::Hidden.into());
        }
        let dir = self.inodes.get(parent)?;
        let cname = sys::component(name).map_err(io)?;
        let dir_fd = dir.fd()?;
        let last = (flags == 0)
            .then(|| last_name(dir_fd.as_fd(), &cname))
            .flatten();
        sys::unlinkat(dir_fd.as_fd(), &cname, flags).map_err(io)?;
        if let Some((dev, ino)) = last {
            self.cache.forget_file(dev, ino);
        }
        Ok(())
    }

    pub(in crate::fs) fn move_entry(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<()> {
        if is_journal(parent, name) || is_journal(newparent, newname) {
            return Err(Refused::Reserved.into());
        }
        let from = self.inodes.get(parent)?;
        let to = self.inodes.get(newparent)?;
        let old = sys::component(name).map_err(io)?;
        let new = sys::component(newname).map_err(io)?;
        let (from_fd, to_fd) = (from.fd()?, to.fd()?);
        // A file the rename replaces, if that was its last name.
        let replaced = (flags & libc::RENAME_EXCHANGE == 0)
            .then(|| last_name(to_fd.as_fd(), &new))
            .flatten();
        {
            // A new name may take a directory block: the caller's.
            let _limits = limits(req)?;
            sys::renameat2(from_fd.as_fd(), &old, to_fd.as_fd(), &new, flags).map_err(io)?;
        }
        if let Some((dev, ino)) = replaced {
            if sys::statat(to_fd.as_fd(), &new).is_ok_and(|st| (st.st_dev, st.st_ino) != (dev, ino))
            {
                self.cache.forget_file(dev, ino);
            }
        }
        drop((from_fd, to_fd));
        // Reopening by name follows the inodes to their new names.
        self.inodes.renamed(&to, &new);
        if flags & libc::RENAME_EXCHANGE != 0 {
            self.inodes.renamed(&from, &old);
        }
        Ok(())
    }

    pub(in crate::fs) fn link_target(&self, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inodes.get(ino)?;
        sys::readlink(inode.fd()?.as_fd()).map_err(io)
    }
}

/// The regular file named `name` in `dir` if that is its only name (device
/// and inode): removing the name deletes the file, and what the daemon
/// keeps of it can go (`IndexCache::forget_file`). A name that changes
/// between this look and the removal only costs a rescan later.
fn last_name(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::CStr) -> Option<(u64, u64)> {
    let st = sys::statat(dir, name).ok()?;
    (st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink == 1)
        .then_some((st.st_dev, st.st_ino))
}
