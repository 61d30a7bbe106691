//! The operations, as plain functions returning `Result`: what each FUSE
//! request does to BACKING. `mod.rs` wraps each in a thin trait method that
//! only sends the reply.
//!
//! Symlink safety: every operation starts from inode entries (their O_PATH
//! descriptors, found again safely by `inodes`) and one name component, and
//! uses `sys`'s `*at` wrappers,
//! which never follow a symlink; so a symlink in BACKING, or a rename there
//! while a request runs, can never lead the daemon outside BACKING.
//!
//! Permissions (man page, PERMISSIONS): the kernel checks every request
//! itself before it reaches us (`default_permissions` is always on), mode
//! bits and POSIX ACLs alike: the daemon negotiates FUSE_POSIX_ACL, and the
//! kernel reads ACLs through `getxattr` here. So a daemon running as root
//! lends nobody its rights, and decides nothing about them itself.
//! Files are created as the caller (`sys::ActAs`: fsuid, fsgid and groups of
//! the requesting process, root callers included) under the caller's umask
//! (`sys::Umask`; FUSE_DONT_MASK leaves it to us), so BACKING gives them the
//! owner, group, mode and default ACL it would give them natively; xattrs
//! (ACLs included) are changed as the caller too. Whatever allocates space
//! for a caller (a write, fallocate, a size change, a link or rename, and
//! the journal's copy of a rewrite) runs under the caller's limits
//! (`sys::Limits`: root's reserve and quotas apply to callers who are not
//! root, as natively) with the daemon's rights. Everything else runs as
//! the daemon, after the kernel's check. `listxattr` hides `trusted.*` from
//! callers without CAP_SYS_ADMIN, as the kernel does natively.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::{FileAttr, FileType, FopenFlags, Request, TimeOrNow};

use cutf8::MAGIC;

mod dir;
mod file;
pub(in crate::fs) use file::{handle_closed, release_handle};
mod meta;
mod names;
mod xattr;

pub(in crate::fs) use file::Opened;
pub(in crate::fs) use xattr::XattrReply;

use crate::fs::frontend::attr;
use crate::fs::frontend::error::{io, kept, Errno, Refused, Result};
use crate::fs::state::content::{self, Class, Stamp};
use crate::fs::state::handles::{DirEntry, DirHandle, FileHandle, Handle, Listing};
use crate::fs::state::inodes::Inode;
use crate::fs::state::share::{self, Ticket};
use crate::fs::CutFs;
use crate::sys::{self, ActAs, Identity, Limits};

/// Entries of one readdirplus reply prepared (looked up, classified)
/// together; more than a 4 KiB reply holds, fewer than a large one.
const PLUS_BATCH: usize = 48;

/// Entries of a listing whose records a readdirplus reads ahead from the
/// index database in one transaction (`CutFs::read_ahead`): more than a
/// reply of 32 KiB holds of short names (about 200), so each reply's
/// entries are found in one read or two.
const READ_AHEAD: usize = 256;

/// Threads classifying a batch of cold files at once (this one included).
pub(in crate::fs) const PLUS_WORKERS: usize = 8;

/// A readdirplus entry after its lookup: None for "." and "..".
type Looked = Option<Result<(Arc<Inode>, libc::stat)>>;

/// A readdirplus entry's attributes. `provisional`: the file is large, its
/// class not known yet and only a long scan can tell; rather than scan on a
/// FUSE worker, the entry goes out with the backing size and no validity
/// (the kernel asks again, by lookup or getattr, before it uses them, and
/// those finish on the scan threads) while a scan starts in the background.
pub(in crate::fs) struct PlusAttr {
    pub attr: FileAttr,
    pub provisional: bool,
}

fn caller(req: &Request) -> Identity {
    Identity::of(req.uid(), req.gid(), req.pid())
}

/// This thread acts as the caller of `req` until the guard drops. A switch
/// that did not take fails the request with EIO (and a log line) rather
/// than doing anything with the daemon's own rights. Inodes are reached
/// (`Inode::fd`) before: reopening one by handle needs the daemon's
/// CAP_DAC_READ_SEARCH, which acting as another user drops.
fn act_as(req: &Request) -> Result<ActAs> {
    ActAs::new(&caller(req)).map_err(|e| {
        crate::ratelog::error("no-identity", &format!("uid {}", req.uid()), || {
            format!(
                "cannot act as uid {} gid {} (pid {}): {e}; request refused with EIO",
                req.uid(),
                req.gid(),
                req.pid()
            )
        });
        Errno::from(Refused::NoIdentity)
    })
}

/// What this thread allocates counts as the caller's of `req` until the
/// guard drops (`sys::Limits`); a switch that did not take fails the
/// request with EIO, as [`act_as`].
fn limits(req: &Request) -> Result<Limits> {
    Limits::of(&limits_of(req)).map_err(|e| no_limits(req, e))
}

/// What this thread allocates counts as the caller's of `req` from now
/// until the next request that is not a write (`sys::Limits::kept`: a
/// stream of one caller's writes switches once).
fn limits_kept(req: &Request) -> Result<()> {
    Limits::kept(&limits_of(req)).map_err(|e| no_limits(req, e))
}

/// The caller of `req`, for its limits (its groups read at most once a
/// second per thread: `Identity::of_recent`).
fn limits_of(req: &Request) -> Identity {
    Identity::of_recent(req.uid(), req.gid(), req.pid())
}

fn no_limits(req: &Request, e: std::io::Error) -> Errno {
    crate::ratelog::error("no-identity", &format!("uid {}", req.uid()), || {
        format!(
            "cannot take the limits of uid {} gid {} (pid {}): {e}; request refused \
             with EIO",
            req.uid(),
            req.gid(),
            req.pid()
        )
    });
    Errno::from(Refused::NoIdentity)
}

/// This thread's umask is `umask` until the guard drops (EIO and a log
/// line if the thread cannot have its own).
fn with_umask(umask: u32) -> Result<sys::Umask> {
    sys::Umask::set(umask).map_err(|e| {
        crate::ratelog::error("no-umask", "", || {
            format!("cannot give this thread its own umask: {e}; request refused with EIO")
        });
        Errno::from(Refused::NoIdentity)
    })
}

/// Whether `name` is one of the two xattrs that hold POSIX ACLs.
fn is_acl_name(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
}

/// Why a request for a regular file's content cannot go to `inode`, which
/// is not one: a directory, or something only the kernel opens.
fn not_a_file(inode: &Inode) -> Errno {
    if inode.is_dir() {
        Refused::IsDir.into()
    } else {
        Refused::NotRegular.into()
    }
}

/// Whether `name` in `parent` is one of the mount's own files at the root
/// of BACKING (the journal, `crate::trust::is_internal`), which the mount
/// neither shows nor lets anyone touch.
fn is_journal(parent: u64, name: &OsStr) -> bool {
    parent == crate::fs::state::inodes::ROOT && crate::trust::is_internal(name)
}

/// The class of a regular file in state `st` (cached per stamp); a free
/// function so that the scan threads can run it.
pub(in crate::fs) fn classify(
    cache: &content::IndexCache,
    inode: &Inode,
    st: &libc::stat,
) -> Result<Class> {
    if !inode.is_reg() || (st.st_size as u64) < MAGIC.len() as u64 {
        return Ok(Class::Raw);
    }
    content::classify(inode.seen(), inode.ino, cache, st, || {
        open_to_classify(inode)
    })
}

/// Opens `inode` for the daemon's own read of its content (classifying,
/// indexing): without touching its access time where permitted.
fn open_to_classify(inode: &Inode) -> std::io::Result<std::fs::File> {
    inode
        .open_quiet(libc::O_RDONLY)
        .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
}

/// FUSE attributes of `inode` in state `st` and class `class`; a regular
/// file's preferred I/O size is `blksize` when the mount sets one
/// (`-o blksize`), and its size counts bytes held back at its end. Never
/// called under the file's content lock (it takes it to read).
pub(in crate::fs) fn attr_with(
    inode: &Inode,
    st: &libc::stat,
    class: Class,
    blksize: Option<u32>,
) -> FileAttr {
    let size = match class {
        Class::Raw => st.st_size as u64,
        Class::Corrected { view_len, .. } => view_len,
    };
    let mut a = attr::from_stat(inode.ino, st, size);
    if inode.ino == crate::fs::state::inodes::ROOT {
        a.ino = fuser::INodeNo(crate::fs::state::inodes::ROOT);
    }
    if inode.is_reg() {
        if let Some(b) = blksize {
            a.blksize = b;
        }
        // Bytes an append holds back at the file's end (`write::Held`)
        // were written as far as the writer and the kernel know.
        if let Some(state) = inode.open_state() {
            if let Some(held) = &state.content.read().held {
                if held.at == a.size {
                    a.size += held.bytes.len() as u64;
                }
            }
            state
                .told
                .store(a.size, std::sync::atomic::Ordering::Relaxed);
        }
    }
    a
}

impl CutFs {
    /// The class of a regular file in state `st` (cached per stamp).
    pub(in crate::fs) fn class(&self, inode: &Inode, st: &libc::stat) -> Result<Class> {
        classify(&self.cache, inode, st)
    }

    /// The attributes every reply carries: the view's size for corrected
    /// files, everything else as in BACKING.
    pub(in crate::fs) fn attr(&self, inode: &Inode, st: &libc::stat) -> Result<FileAttr> {
        Ok(attr_with(inode, st, self.class(inode, st)?, self.blksize))
    }

    /// Whether classifying this file may take long (a scan of a large
    /// corrected file whose index is not cached): then the reply is sent
    /// from the scan threads. Large raw files are told by their head here.
    pub(in crate::fs) fn needs_scan(&self, inode: &Inode, st: &libc::stat) -> Result<bool> {
        if !inode.is_reg()
            || st.st_size as u64 <= content::SCAN_INLINE
            || inode.seen().lock().class(&Stamp::of(st)).is_some()
        {
            return Ok(false);
        }
        let known = content::peek(inode.seen(), inode.ino, &self.cache, st, || {
            open_to_classify(inode)
        })?;
        Ok(known.is_none())
    }

    /// An entry for the kernel: counts one lookup, which is given back if
    /// the attributes cannot be had.
    pub(in crate::fs) fn entry(&self, inode: Arc<Inode>, st: &libc::stat) -> Result<FileAttr> {
        self.attr(&inode, st)
            .inspect_err(|_| self.inodes.forget(inode.ino, 1))
    }

    /// A name for logs: the path relative to BACKING under which the inode
    /// table last saw `inode` (`Inode::path`).
    pub(in crate::fs) fn name_of(&self, inode: &Inode) -> String {
        inode.path()
    }

    /// `name_of` by FUSE inode number.
    pub(in crate::fs) fn name_of_ino(&self, ino: u64) -> String {
        match self.inodes.get(ino) {
            Ok(inode) => self.name_of(&inode),
            Err(_) => format!("inode {ino}"),
        }
    }

    /// The first half of a lookup: the entry, counted, without its class.
    pub(in crate::fs) fn lookup_inode(
        &self,
        parent: u64,
        name: &OsStr,
    ) -> Result<(Arc<Inode>, libc::stat)> {
        if is_journal(parent, name) {
            return Err(Refused::Hidden.into());
        }
        // Only the kernel decoding a file handle asks for these (`export`).
        match name.as_encoded_bytes() {
            b"." => return self.inodes.revive(parent),
            b".." => return self.inodes.parent_of(parent),
            _ => {}
        }
        let dir = self.inodes.get(parent)?;
        let name = sys::component(name).map_err(io)?;
        self.inodes.lookup(&dir, &name)
    }

    pub(in crate::fs) fn forget_lookups(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// One descriptor of `uid`'s share for a handle of `inode` (opened by
    /// `what`); a refusal is logged (rate-limited per user) and answered
    /// EMFILE, or ENFILE once no descriptor is left for anyone.
    pub(in crate::fs) fn ticket(&self, uid: u32, inode: &Inode, what: &str) -> Result<Ticket> {
        self.shares.take(uid).map_err(|why| {
            let p = self.shares.policy();
            let (errno, text) = match why {
                share::Refusal::OverShare { held } => (
                    Refused::OverShare,
                    format!(
                        "uid {uid} holds {held} of the {} descriptors for files open through \
                         the mount (each user at most {}, and no more than {} while the last \
                         {} are left)",
                        p.pool, p.share, p.floor, p.reserve
                    ),
                ),
                share::Refusal::Exhausted => (
                    Refused::NoDescriptors,
                    format!(
                        "all {} descriptors for files open through the mount are taken",
                        p.pool
                    ),
                ),
            };
            crate::ratelog::warn("descriptor-share", &uid.to_string(), || {
                format!(
                    "{}: {what} refused ({}): {text}; see man cutf8fs, RESOURCES",
                    inode.path(),
                    std::io::Error::from_raw_os_error(Errno::from(errno).code())
                )
            });
            Errno::from(errno)
        })
    }
}
