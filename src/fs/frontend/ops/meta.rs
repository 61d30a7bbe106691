//! Attributes and checks of one inode: setattr (mode, owner, times, size),
//! statfs and access, and `keeping_content` for metadata changes that must
//! not cost a rescan.

use super::*;
use crate::fs::state::privs;

impl CutFs {
    #[allow(clippy::too_many_arguments)]
    pub(in crate::fs) fn set_attr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<u64>,
        req: &Request,
    ) -> Result<FileAttr> {
        let inode = self.inodes.get(ino)?;
        // The stat after the last change, when that change took one (the
        // reply needs no other).
        let mut after = None;
        if uid.is_some() || gid.is_some() || mode.is_some() {
            let ((), st) = self.keeping_content_stat(&inode, None, || {
                if uid.is_some() || gid.is_some() {
                    sys::chown(
                        inode.fd()?.as_fd(),
                        uid.unwrap_or(u32::MAX),
                        gid.unwrap_or(u32::MAX),
                    )
                    .map_err(io)?;
                }
                if let Some(mode) = mode {
                    if inode.fmt() == libc::S_IFLNK {
                        return Err(Refused::SymlinkMode.into());
                    }
                    sys::chmod(inode.fd()?.as_fd(), mode & 0o7777).map_err(io)?;
                }
                Ok(())
            })?;
            after = st;
        }
        if let Some(size) = size {
            self.truncate(&inode, size, fh, req)?;
            after = None;
        }
        if atime.is_some() || mtime.is_some() {
            let ((), st) = self.keeping_content_stat(&inode, None, || {
                sys::utimens(
                    inode.fd()?.as_fd(),
                    &[attr::timespec(atime), attr::timespec(mtime)],
                )
                .map_err(io)
            })?;
            after = st;
        }
        let st = match after {
            Some(st) => st,
            None => inode.stat()?,
        };
        self.attr(&inode, &st)
    }

    /// truncate(2) and ftruncate(2) by the caller of `req`: set-id bits and
    /// capabilities go first when it lacks CAP_FSETID, as natively.
    pub(in crate::fs) fn truncate(
        &self,
        inode: &Arc<Inode>,
        size: u64,
        fh: Option<u64>,
        req: &Request,
    ) -> Result<()> {
        if !inode.is_reg() {
            return Err(not_a_file(inode));
        }
        let handle = fh.and_then(|fh| self.handles.file(fh).ok());
        let (opened, attached);
        let (file, state): (&std::fs::File, &content::OpenFile) = match handle.as_deref() {
            Some(Handle::File(h)) if h.write => (&h.file, &h.state),
            _ => {
                opened = inode.open_quiet(libc::O_RDWR)?;
                attached = inode.attach(None);
                let state = attached.state().ok_or_else(|| not_a_file(inode))?;
                (&opened, &**state)
            }
        };
        self.kill_privs(inode, Some(state), file, req, false)?;
        // A size that grows the file (or a corrected file's rewritten
        // tail) takes blocks: the caller's.
        let _limits = limits(req)?;
        self.set_size(inode, state, file, size)
    }

    pub(in crate::fs) fn fs_stats(&self) -> Result<sys::StatVfs> {
        let root = self.inodes.get(crate::fs::state::inodes::ROOT)?;
        sys::fstatvfs(root.fd()?.as_fd()).map_err(io)
    }

    /// Runs a change of metadata only (`change` must not touch content)
    /// on `inode` and carries what is known of a regular file's content
    /// over to its new stamp (ctime moves, the bytes do not).
    pub(in crate::fs) fn keeping_content<T>(
        &self,
        inode: &Arc<Inode>,
        change: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.keeping_content_stat(inode, None, change)
            .map(|(r, _)| r)
    }

    /// [`Self::keeping_content`], with the inode's stat right after the
    /// change when it took one (regular files); `state`: the file's state
    /// when the caller has it (else it is attached for the change).
    fn keeping_content_stat<T>(
        &self,
        inode: &Arc<Inode>,
        state: Option<&content::OpenFile>,
        change: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Option<libc::stat>)> {
        if !inode.is_reg() {
            return Ok((change()?, None));
        }
        let attached;
        let state = match state {
            Some(s) => s,
            None => {
                attached = inode.attach(None);
                match attached.state() {
                    Some(s) => &**s,
                    None => return Ok((change()?, None)),
                }
            }
        };
        let mut content = state.content.write();
        let before = inode.stat().map(|st| Stamp::of(&st));
        let r = change()?;
        let after = inode.stat();
        if let (Ok(old), Ok(st)) = (before, &after) {
            state.carry(&mut content, inode.seen(), &self.cache, old, Stamp::of(st));
        }
        Ok((r, after.ok()))
    }

    /// Removes from `file` what a write, truncate or fallocate by a caller
    /// without CAP_FSETID removes natively (`privs::privs`): the kernel leaves
    /// this to the daemon (`FUSE_HANDLE_KILLPRIV_V2`, see `init`), whose own
    /// calls as root would keep them. `unprivileged`: the kernel already
    /// said the caller lacks CAP_FSETID (a write's flag); otherwise the
    /// caller's capabilities are read from /proc, only for a file that has
    /// something to lose. Nothing to remove costs two syscalls; a removal
    /// keeps what is known of the content across the ctime it moves, and
    /// tells the kernel its cached mode is stale (`invalidate`), so `stat`
    /// right after the write shows what BACKING shows. `state`: the file's
    /// state when the caller has it.
    pub(in crate::fs) fn kill_privs(
        &self,
        inode: &Arc<Inode>,
        state: Option<&content::OpenFile>,
        file: &std::fs::File,
        req: &Request,
        unprivileged: bool,
    ) -> Result<()> {
        let in_group = |gid| caller(req).has_group(gid);
        if privs::privs(file.as_fd(), in_group).map_err(io)?.is_none()
            || !unprivileged && sys::has_fsetid(req.pid(), req.uid())
        {
            return Ok(());
        }
        let killed = self.keeping_content_stat(inode, state, || {
            match privs::privs(file.as_fd(), in_group).map_err(io)? {
                Some(p) => privs::kill(file.as_fd(), p).map(|()| true).map_err(io),
                None => Ok(false),
            }
        });
        if matches!(killed, Ok((true, _))) {
            self.kernel.attributes(inode.ino);
        }
        killed.map(drop)
    }

    /// access(2) by mode bits. Never called in practice: with
    /// `default_permissions` (always on) the kernel answers access(2)
    /// itself, ACLs included.
    pub(in crate::fs) fn check_access(&self, req: &Request, ino: u64, mask: i32) -> Result<()> {
        let inode = self.inodes.get(ino)?;
        let st = inode.stat()?;
        if mask == libc::F_OK {
            return Ok(());
        }
        let mode = st.st_mode;
        let want = (mask & 7) as u32;
        if req.uid() == 0 {
            let exec_ok =
                mask & libc::X_OK == 0 || mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
            return if exec_ok {
                Ok(())
            } else {
                Err(Refused::Denied.into())
            };
        }
        let bits = if st.st_uid == req.uid() {
            (mode >> 6) & 7
        } else if st.st_gid == req.gid() || caller(req).has_group(st.st_gid) {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        if bits & want == want {
            Ok(())
        } else {
            Err(Refused::Denied.into())
        }
    }
}
