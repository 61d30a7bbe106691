//! The way back to an inode the daemon keeps no descriptor of: its file
//! handle or the (parent, name) it was last seen as (the parent module's
//! doc says when each is used), reopening by either, and the path it is at.

use super::*;

/// Handles up to this many bytes, of a type below 256 (ext4, xfs, tmpfs:
/// 8 to 16 bytes, types 1 to 0x81), are kept in the entry itself.
pub(super) const INLINE: usize = 16;

/// How to find a backing inode again without a descriptor (24 bytes: the
/// name of an inode reopened by name, the rare case, lies behind one
/// pointer).
pub(super) enum Anchor {
    /// BACKING's root (always open).
    Root,
    /// A file handle on the filesystem with mount id `mnt`.
    Small {
        ty: u8,
        len: u8,
        mnt: i32,
        bytes: [u8; INLINE],
    },
    /// A larger file handle (btrfs, overlayfs), or one of a larger type.
    Large {
        mnt: i32,
        handle: Box<BackingHandle>,
    },
    /// The directory and name it was last seen under.
    Name(Box<Named>),
}

/// Where an inode reopened by name was last seen.
pub(super) struct Named {
    parent: Arc<Inode>,
    name: Box<CStr>,
}

impl Anchor {
    pub(super) fn named(parent: &Arc<Inode>, name: &CStr) -> Anchor {
        Anchor::Name(Box::new(Named {
            parent: parent.clone(),
            name: name.into(),
        }))
    }

    pub(super) fn handle(h: &BackingHandle, mnt: i32) -> Anchor {
        let b = h.bytes();
        if let (true, Ok(ty)) = (b.len() <= INLINE, u8::try_from(h.ty())) {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            Anchor::Small {
                ty,
                len: b.len() as u8,
                mnt,
                bytes,
            }
        } else {
            Anchor::Large {
                mnt,
                handle: Box::new(h.clone()),
            }
        }
    }

    /// (type, bytes, mount id) of a handle anchor.
    pub(super) fn parts(&self) -> Option<(i32, &[u8], i32)> {
        match self {
            Anchor::Small {
                ty,
                mnt,
                len,
                bytes,
            } => Some((i32::from(*ty), &bytes[..usize::from(*len)], *mnt)),
            Anchor::Large { mnt, handle } => Some((handle.ty(), handle.bytes(), *mnt)),
            _ => None,
        }
    }

    pub(super) fn same_handle(&self, h: &BackingHandle, mnt: i32) -> bool {
        self.parts() == Some((h.ty(), h.bytes(), mnt))
    }

    /// The generation the kernel is given (`export::generation`; 0 for
    /// the root and for inodes reopened by name).
    pub(super) fn generation(&self) -> u64 {
        match self.parts() {
            Some((ty, bytes, _)) => export::generation(ty, bytes),
            None => 0,
        }
    }

    /// How the inode is found again after the kernel forgot it
    /// (`export`): None for the root, and for a name in a directory of
    /// another filesystem.
    pub(super) fn record(&self) -> Option<Record> {
        match self {
            Anchor::Root => None,
            Anchor::Name(n) => (n.parent.ino < FOREIGN_BASE).then(|| Record::Name {
                parent: n.parent.ino,
                name: n.name.as_ref().into(),
            }),
            a => a.parts().map(|(ty, bytes, _)| Record::Handle {
                ty,
                bytes: bytes.to_vec(),
            }),
        }
    }
}

pub(super) fn stale() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ESTALE)
}

pub(super) fn errno_io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.code())
}

impl Inode {
    /// Finds the backing inode again (see the module doc) and opens it with
    /// `flags` (O_PATH, or for I/O); ESTALE if it is gone or its name now
    /// leads to another file. Returns the descriptor and its fresh stat.
    pub(super) fn reopen(&self, flags: libc::c_int) -> std::io::Result<(File, libc::stat)> {
        enum Way {
            /// Type, mount id, length and bytes of the handle.
            Handle(i32, i32, usize, [u8; libc::MAX_HANDLE_SZ as usize]),
            Name(Arc<Inode>, Box<CStr>),
        }
        let way = {
            let i = self.inner.lock();
            match &i.anchor {
                Anchor::Root => return Err(stale()),
                Anchor::Name(n) => Way::Name(n.parent.clone(), n.name.clone()),
                a => {
                    let (ty, bytes, mnt) = a.parts().ok_or_else(stale)?;
                    let mut buf = [0u8; libc::MAX_HANDLE_SZ as usize];
                    let len = bytes.len().min(buf.len());
                    buf[..len].copy_from_slice(&bytes[..len]);
                    Way::Handle(ty, mnt, len, buf)
                }
            }
        };
        let fd: OwnedFd = match way {
            Way::Handle(ty, mnt, len, bytes) => {
                let mount = self
                    .shared
                    .mounts
                    .lock()
                    .get(&mnt)
                    .cloned()
                    .ok_or_else(stale)?;
                let open = || sys::open_by_handle_parts(mount.as_fd(), ty, &bytes[..len], flags);
                // ext4 answers ENOMEM, not ESTALE, for a handle whose inode
                // is being freed at that moment (its inode cache lookup
                // gives up on it): a file just replaced by a rename. Asked
                // once more; then the file is gone, and the kernel looks
                // its name up again (the VFS retries an ESTALE open once).
                match open() {
                    Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                        open().map_err(|e| match e.raw_os_error() {
                            Some(libc::ENOMEM) => stale(),
                            _ => e,
                        })?
                    }
                    r => r?,
                }
            }
            Way::Name(parent, name) => {
                let dir = parent.fd().map_err(errno_io)?;
                let path =
                    sys::open_path(dir.as_fd(), &name).map_err(|e| match e.raw_os_error() {
                        Some(libc::ENOENT | libc::ENOTDIR) => stale(),
                        _ => e,
                    })?;
                if flags == libc::O_PATH {
                    path
                } else {
                    let st = sys::fstat(path.as_fd())?;
                    if Key::of(&st) != self.key {
                        return Err(stale());
                    }
                    sys::reopen(path.as_fd(), flags)?.into()
                }
            }
        };
        let st = sys::fstat(fd.as_fd())?;
        if Key::of(&st) != self.key {
            return Err(stale());
        }
        Ok((File::from(fd), st))
    }

    /// The path relative to BACKING this inode is at (by handle: where the
    /// kernel finds it now; by name: where it was last seen), for messages
    /// and for policies that look at names ("." for the root).
    pub fn path(&self) -> String {
        let mut parts = Vec::new();
        let mut next: Option<Arc<Inode>> = None;
        loop {
            let i = match &next {
                Some(n) => n.inner.lock(),
                None => self.inner.lock(),
            };
            let up = match &i.anchor {
                Anchor::Root => break,
                Anchor::Name(n) => {
                    parts.push(n.name.to_string_lossy().into_owned());
                    n.parent.clone()
                }
                _ => {
                    drop(i);
                    let above = match &next {
                        Some(n) => n.path_by_kernel(),
                        None => self.path_by_kernel(),
                    };
                    if above != "." {
                        parts.push(above);
                    }
                    break;
                }
            };
            drop(i);
            next = Some(up);
            if parts.len() > 4096 {
                break;
            }
        }
        if parts.is_empty() {
            return ".".into();
        }
        parts.reverse();
        parts.join("/")
    }

    /// The path of the inode as the kernel names its descriptor, relative
    /// to BACKING's root.
    pub(super) fn path_by_kernel(&self) -> String {
        let unknown = || format!("inode {}", self.key.ino);
        let fd = match self.held_fd() {
            Some(fd) => fd,
            None => match self.reopen(libc::O_PATH) {
                Ok((f, _)) => Arc::new(f),
                Err(_) => return unknown(),
            },
        };
        let (Ok(me), Ok(root)) = (
            sys::fd_path(fd.as_fd()),
            sys::fd_path(self.shared.root.as_fd()),
        ) else {
            return unknown();
        };
        match me.strip_prefix(&root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => unknown(),
        }
    }

    /// The path of `name` in this directory, for messages.
    pub fn path_of(&self, name: &OsStr) -> String {
        let name = name.to_string_lossy();
        match self.path().as_str() {
            "." => name.into_owned(),
            p => format!("{p}/{name}"),
        }
    }

    /// Records `name` in `parent` as where this inode was last seen (kept
    /// only by entries reopened by name; the node record follows).
    pub(super) fn seen_as(&self, parent: &Arc<Inode>, name: &CStr) {
        let mut i = self.inner.lock();
        if let Anchor::Name(n) = &mut i.anchor {
            if !Arc::ptr_eq(&n.parent, parent) || *n.name != *name {
                n.parent = parent.clone();
                n.name = name.into();
                let record = i.anchor.record();
                drop(i);
                self.shared.record(self.ino, record);
            }
        }
    }
}

impl InodeTable {
    /// How to find `name` in `dir` (state `st`, in `parent`) again: its
    /// handle, when its filesystem's handles can be opened (a filesystem
    /// mounted inside BACKING is entered by its root, a directory, whose
    /// descriptor then serves its handles); else its parent and name.
    pub(super) fn anchor_at(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &CStr,
        st: &libc::stat,
        parent: &Arc<Inode>,
    ) -> Anchor {
        let by_name = || Anchor::named(parent, name);
        if !self.shared.by_handle {
            return by_name();
        }
        let Ok((h, mnt)) = sys::name_to_handle(dir, name) else {
            return by_name();
        };
        if !self.shared.mounts.lock().contains_key(&mnt) {
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return by_name();
            }
            let opened = sys::openat(
                dir,
                name,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .and_then(|fd| sys::fstat(fd.as_fd()).map(|s| (fd, s)));
            match opened {
                Ok((fd, s)) if Key::of(&s) == Key::of(st) => {
                    self.shared
                        .mounts
                        .lock()
                        .entry(mnt)
                        .or_insert_with(|| Arc::new(File::from(fd)));
                }
                _ => return by_name(),
            }
        }
        Anchor::handle(&h, mnt)
    }
}

impl Inode {
    /// The directory an inode reopened by name was last seen in (None for
    /// the root and for inodes reopened by handle).
    pub(in crate::fs) fn named_parent(&self) -> Option<Arc<Inode>> {
        match &self.inner.lock().anchor {
            Anchor::Name(n) => Some(n.parent.clone()),
            _ => None,
        }
    }
}
