//! Reconnection: the kernel decoding a file handle of a node it forgot
//! asks the daemon to look up "." in that node (and ".." in a directory);
//! the node is found again from its record ([`super::Nodes`]) or its
//! directory's "..", and entered in the inode table again.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::sync::Arc;

use super::Record;
use crate::fs::frontend::error::{io, Errno, Result};
use crate::fs::state::inodes::{Inode, InodeTable, Key, ROOT};
use crate::sys::{self, BackingHandle};

impl InodeTable {
    /// LOOKUP of "." in node `ino`: the kernel decodes a file handle of a
    /// node it may have forgotten (`export`). Counts one lookup. ESTALE if
    /// the node's file is gone or cannot be found again.
    pub fn revive(&self, ino: u64) -> Result<(Arc<Inode>, libc::stat)> {
        if let Some(inode) = self.count_lookup(ino) {
            return match inode.stat() {
                Ok(st) => Ok((inode, st)),
                Err(e) => {
                    self.forget(ino, 1);
                    Err(e)
                }
            };
        }
        let inode = self.find_node(ino, 0)?;
        let st = inode.stat()?;
        Ok((self.adopt(inode, &st)?, st))
    }

    /// LOOKUP of ".." in directory `ino` (the kernel reconnecting a
    /// directory it decoded from a handle): its parent, counted once; the
    /// root is its own parent. By name, the parent the directory was seen
    /// in; by handle, the directory's ".." if that lies under BACKING.
    pub fn parent_of(&self, ino: u64) -> Result<(Arc<Inode>, libc::stat)> {
        let dir = self.get(ino)?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let parent = match dir.named_parent() {
            Some(p) => p,
            None if dir.key == self.root_key() => self.get(ROOT)?,
            None => {
                let fd = dir.fd()?;
                let st = sys::statat(fd.as_fd(), c"..").map_err(io)?;
                let known = if Key::of(&st) == self.root_key() {
                    Some(self.get(ROOT)?)
                } else {
                    self.entry_of(Key::of(&st))
                };
                match known {
                    Some(p) => p,
                    None => {
                        let up = sys::openat(
                            fd.as_fd(),
                            c"..",
                            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                            0,
                        )
                        .map_err(io)?;
                        if !self.own_number(Key::of(&st)) || !self.inside(up.as_fd())? {
                            return Err(Errno::ESTALE);
                        }
                        let (h, mnt) = sys::name_to_handle(up.as_fd(), c"").map_err(io)?;
                        if !self.opens_handles_of(mnt) {
                            return Err(Errno::ESTALE);
                        }
                        self.outside_by_handle(st.st_ino, &st, &h, mnt)
                    }
                }
            }
        };
        let st = parent.stat()?;
        Ok((self.adopt(parent, &st)?, st))
    }

    /// Node `ino` found from its record (`export`), not entered in the
    /// table: the entry if the table has it, else one made from the
    /// record — by handle on BACKING's filesystem, or by name in its
    /// parent, found the same way (`depth` parents up so far). The file
    /// found must have number `ino`, and a directory lie under BACKING.
    ///
    /// A record that finds no such file may be that of a deleted file
    /// whose number a new one took through a daemon that is ending now,
    /// its record of the new file not committed yet (`umount && mount` at
    /// once; xfstests generic/477 deletes and makes its files again each
    /// round): then the record that daemon commits is tried too.
    fn find_node(&self, ino: u64, depth: usize) -> Result<Arc<Inode>> {
        if let Ok(inode) = self.get(ino) {
            return Ok(inode);
        }
        if ino <= ROOT || InodeTable::is_foreign(ino) || depth > 4096 {
            return Err(Errno::ESTALE);
        }
        let record = self.node_record(ino).ok_or(Errno::ESTALE)?;
        match self.found_by(ino, record.clone(), depth) {
            Err(Errno::ESTALE) => match self.node_record_after_closing(ino) {
                Some(newer) if newer != record => self.found_by(ino, newer, depth),
                _ => Err(Errno::ESTALE),
            },
            found => found,
        }
    }

    /// [`InodeTable::find_node`] by one record of node `ino`.
    fn found_by(&self, ino: u64, record: Record, depth: usize) -> Result<Arc<Inode>> {
        let stale = |e: std::io::Error| match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::EINVAL | libc::ESTALE) => Errno::ESTALE,
            _ => io(e),
        };
        enum Way {
            Handle(BackingHandle, i32),
            Name(Arc<Inode>, CString),
        }
        let (fd, way) = match record {
            Record::Handle { ty, bytes } => {
                let (mnt, mount) = self.root_mount().ok_or(Errno::ESTALE)?;
                let fd = sys::open_by_handle_parts(mount.as_fd(), ty, &bytes, libc::O_PATH)
                    .map_err(stale)?;
                let h = sys::name_to_handle(fd.as_fd(), c"").map_err(stale)?.0;
                (fd, Way::Handle(h, mnt))
            }
            Record::Name { parent, name } => {
                let up = self.find_node(parent, depth + 1)?;
                let dir = up.fd()?;
                let fd = sys::open_path(dir.as_fd(), &name).map_err(stale)?;
                (fd, Way::Name(up, name))
            }
        };
        let st = sys::fstat(fd.as_fd()).map_err(io)?;
        if st.st_dev != self.root_key().dev || st.st_ino != ino {
            return Err(Errno::ESTALE);
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR && !self.inside(fd.as_fd())? {
            return Err(Errno::ESTALE);
        }
        Ok(match way {
            Way::Handle(h, mnt) => self.outside_by_handle(ino, &st, &h, mnt),
            Way::Name(up, name) => self.outside_by_name(ino, &st, &up, &name),
        })
    }

    /// Whether the directory behind `dir` lies under BACKING's root: its
    /// ".." chain reaches the root before its filesystem's top.
    fn inside(&self, dir: std::os::fd::BorrowedFd<'_>) -> Result<bool> {
        let mut at = dir.try_clone_to_owned().map_err(io)?;
        for _ in 0..4096 {
            let st = sys::fstat(at.as_fd()).map_err(io)?;
            if Key::of(&st) == self.root_key() {
                return Ok(true);
            }
            let up = sys::openat(
                at.as_fd(),
                c"..",
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(io)?;
            if Key::of(&sys::fstat(up.as_fd()).map_err(io)?) == Key::of(&st) {
                return Ok(false);
            }
            at = up;
        }
        Ok(false)
    }
}
