//! What in a tree that other users write is ours, and how anything in such a
//! tree is reached: the one place that decides. The mount's journal
//! (`crate::redo`), the index database (`crate::indexdb`), `cutf8
//! migrate` (its files and its undo journal, `crate::migrate`) and the one
//! walk of such trees, which `cutf8 check` and migrate share
//! (`crate::walk`), all go through it, and [`is_internal`] is the one list of names the
//! mount keeps for itself in BACKING; man/cutf8fs.1 and man/cutf8.1 (SECURITY) state the
//! rules and point here for the argument.
//!
//! # The setting
//!
//! `cutf8fs` usually runs as root over a BACKING that ordinary users write
//! directly, and an administrator runs `cutf8 migrate` as root over a tree
//! that users own. Such a user may, at any moment and as often as they
//! like, rename, replace, link, chmod and delete anything in the directories
//! they can write, plant files of any content there (forged records in our
//! formats included: the formats are public), put symbolic links where
//! directories were, and watch what root does with inotify to time it. The
//! programs must gain them nothing: never read, write, create, rename,
//! chmod, chown or delete anything outside the tree they were given, and
//! never act on a record in the tree unless they wrote it themselves.
//!
//! # How anything in such a tree is reached
//!
//! * **Descriptors, never paths resolved again.** A tree is entered once,
//!   at the path the administrator named (resolved as given, once); from
//!   then on everything is reached relative to a directory descriptor
//!   already held, one name at a time ([`enter_dir`], [`reach`]): a name is
//!   one component (no `/`, not `.` or `..`, not empty; `sys::component`),
//!   so a lookup cannot leave the directory it starts from.
//! * **No symbolic link is ever followed.** Every lookup uses `O_NOFOLLOW`
//!   (`AT_SYMLINK_NOFOLLOW` for a stat); as the name is one component, that
//!   covers every component of the lookup. A directory is opened with
//!   `O_DIRECTORY | O_NOFOLLOW`; a file first as an `O_PATH` descriptor, its
//!   type checked with `fstat` on that descriptor, and only a regular file
//!   is then opened for I/O, through `/proc/self/fd/N`, which reaches the
//!   inode the descriptor holds without a path walk ([`open_reached`]). So a
//!   FIFO, a device or a socket put where a file was is never opened.
//! * **Identity, not names.** What was looked at and what is acted on are
//!   the same object: a directory the walk classified is entered only if
//!   the descriptor's `(st_dev, st_ino)` is the one it classified, and a
//!   descriptor once checked is used for every later step (list, open,
//!   create, rename, unlink). Renaming a directory that is held, or putting
//!   a symlink in its place, misdirects nothing: the next step still happens
//!   in the directory that was checked. A directory reached again later
//!   (the walk keeps a bounded set of descriptors, not one per directory of a
//!   huge tree) is reached again from its parent's descriptor by name with
//!   its identity checked, component by component from a descriptor held.
//!
//! What such a user can still do is what they could do without the
//! programs: move a directory they own that a descriptor is held on to
//! another place they can write (work then goes on in that same directory,
//! whose files they could have put in the tree anyway), or make the work
//! fail by changing things under it. Hard links to files they do not own
//! are refused by the kernel (`fs.protected_hardlinks`, on by default), so
//! nothing reachable through the tree is anything they could not already
//! place there.
//!
//! # What in such a tree is ours
//!
//! A file or directory that the programs keep in a tree (the mount's
//! journal and its entries, the index database and its directory, a
//! migrate undo journal) is trusted only when it passes a [`Rule`]:
//!
//! * the right type (`fstat` of the descriptor that will be used, opened
//!   without following a symlink);
//! * **owned by this process's effective user.** Nobody else can create a
//!   file owned by root (or by whoever runs the program), nor give one away
//!   to them: only root can chown. So a file the user planted, however
//!   perfect a forgery of the format, fails here;
//! * **not writable (or, for records, not readable either) by group or
//!   others**, so that nobody else can have changed it since it was
//!   written, or read a copy of a file's content it holds;
//! * **exactly one link** for a file: no second name, in a directory the
//!   user writes, through which it could have been changed or swapped;
//! * **on the expected filesystem** (BACKING's, the tree's), so that no
//!   other filesystem's file can stand in for it.
//!
//! The owner rule is what makes a forged record useless; the others close
//! what the owner rule leaves: a genuine record moved, linked or copied to
//! where it does not belong. For that each record also carries what binds
//! it to where it was written — the mount's journal entry the `(st_dev,
//! st_ino)` of its target and of BACKING's root, a migrate journal those of
//! its directory and its target plus the target's owner — and a
//! [`Checksum`] of its content, checked before it is used: a genuine record
//! renamed into another directory, or whose target's name now holds another
//! file (even one that reuses the inode number: it has a new owner, the user
//! who made it, unless it is theirs, and then so was the content), is
//! refused. A record that fails any check is never acted on and never
//! deleted through: the caller says which file, why, and what to do (check
//! it, remove it, run again).
//!
//! Only the names these programs create are ever removed without being
//! checked first: temporary files of a killed migrate run (their owner is
//! the converted file's, not ours), removed by `unlinkat` of one name in a
//! directory held, which removes nothing a user could not remove there.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};

/// Names starting with this, at the root of BACKING, belong to the mount:
/// hidden in it, refused to its users, and skipped by `cutf8 migrate` at
/// any level of a tree (migrate cannot know where a BACKING's root is).
pub const INTERNAL_PREFIX: &str = ".cutf8fs-";

/// Whether `name` is one of the mount's internal files ([`INTERNAL_PREFIX`]).
/// The one test both the mount (hiding) and migrate (skipping) use.
pub fn is_internal(name: &OsStr) -> bool {
    name.as_bytes().starts_with(INTERNAL_PREFIX.as_bytes())
}

/// The effective user this process runs as: the one owner trusted.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// What a thing in the tree must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// Who else may have access to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone (a user's file the journal only links to).
    Any,
    /// Group and others may not write it (`mode & 0o022 == 0`).
    NotShared,
    /// Group and others have no access at all (`mode & 0o077 == 0`).
    Private,
}

/// A rule a thing in the tree is judged by (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    /// Owned by this process's effective user.
    pub ours: bool,
    pub access: Access,
    /// Exactly one link (files).
    pub one_link: bool,
    /// On this device.
    pub device: Option<u64>,
}

impl Rule {
    /// A directory of ours.
    pub const fn our_dir(access: Access) -> Rule {
        Rule {
            kind: Kind::Dir,
            ours: true,
            access,
            one_link: false,
            device: None,
        }
    }

    /// A regular file of ours with one link.
    pub const fn our_file(access: Access) -> Rule {
        Rule {
            kind: Kind::File,
            ours: true,
            access,
            one_link: true,
            device: None,
        }
    }

    /// Any regular file (trusted for nothing but being one).
    pub const fn any_file() -> Rule {
        Rule {
            kind: Kind::File,
            ours: false,
            access: Access::Any,
            one_link: false,
            device: None,
        }
    }

    /// The same rule, on device `dev` only.
    pub const fn on(self, dev: u64) -> Rule {
        Rule {
            device: Some(dev),
            ..self
        }
    }

    /// Why `st` fails the rule (a phrase after the thing's name: "is owned
    /// by uid 1000, …"), or nothing.
    pub fn judge(&self, st: &FileStat) -> Result<(), String> {
        let want = match self.kind {
            Kind::Dir => SFlag::S_IFDIR,
            Kind::File => SFlag::S_IFREG,
        };
        if file_type(st) != want {
            return Err(format!(
                "is {}, not {}",
                kind_of(st),
                match self.kind {
                    Kind::Dir => "a directory",
                    Kind::File => "a regular file",
                }
            ));
        }
        if self.ours && st.st_uid != euid() {
            return Err(format!(
                "is owned by uid {}, not by the user this runs as (uid {})",
                st.st_uid,
                euid()
            ));
        }
        let mode = st.st_mode & 0o7777;
        match self.access {
            Access::Any => {}
            Access::NotShared if mode & 0o022 != 0 => {
                return Err(format!("is writable by group or others (mode {mode:04o})"));
            }
            Access::Private if mode & 0o077 != 0 => {
                return Err(format!(
                    "is accessible to group or others (mode {mode:04o})"
                ));
            }
            Access::NotShared | Access::Private => {}
        }
        if self.one_link && st.st_nlink != 1 {
            return Err(format!("has {} links, not 1", st.st_nlink));
        }
        if let Some(dev) = self.device {
            if st.st_dev != dev {
                return Err("is on another filesystem than the tree it belongs to".into());
            }
        }
        Ok(())
    }
}

fn file_type(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// "a directory", "a symlink", … for messages.
pub fn kind_of(st: &FileStat) -> &'static str {
    match file_type(st) {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a fifo",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFCHR => "a character device",
        _ => "a special file",
    }
}

/// Why something was not used.
#[derive(Debug)]
pub enum Unusable {
    /// It does not exist (and was not to be created).
    Missing,
    /// It is not trusted, or cannot be opened: why.
    Bad(String),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Missing => f.write_str("does not exist"),
            Unusable::Bad(why) => f.write_str(why),
        }
    }
}

/// `name` as one component (EINVAL otherwise).
fn one(name: &OsStr) -> io::Result<std::ffi::CString> {
    crate::sys::component(name)
}

/// What `name` in `dir` is, for a message after an open refused it.
fn what_is(dir: BorrowedFd<'_>, name: &std::ffi::CStr, e: Errno) -> String {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if matches!(e, Errno::ELOOP | Errno::ENOTDIR | Errno::ENXIO) => {
            format!("is {}", kind_of(&st))
        }
        _ => format!("cannot be opened ({e})"),
    }
}

/// Enters directory `name` of `parent` (one component, `O_DIRECTORY |
/// O_NOFOLLOW`, read-only): its descriptor and what `fstat` says of it.
pub fn enter_dir(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<(OwnedFd, FileStat)> {
    let c = one(name)?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(parent, c.as_c_str(), flags, Mode::empty()).map_err(io::Error::from)?;
    let st = fstat(&fd).map_err(io::Error::from)?;
    Ok((fd, st))
}

/// Reaches `name` in `dir` without opening it for I/O (one component,
/// `O_PATH | O_NOFOLLOW`): a descriptor to check with `fstat` before
/// [`open_reached`] opens it.
pub fn reach(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<(OwnedFd, FileStat)> {
    let c = one(name)?;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, c.as_c_str(), flags, Mode::empty()).map_err(io::Error::from)?;
    let st = fstat(&fd).map_err(io::Error::from)?;
    Ok((fd, st))
}

/// Opens for I/O the regular file `name` of `dir` that [`reach`] gave as
/// `reached` (`flags`: `O_RDONLY`, `O_WRONLY` or `O_RDWR`, with
/// `O_NOATIME` where the kernel allows it when `quiet`): through
/// `/proc/self/fd`, which opens the inode the descriptor holds without a
/// lookup; where /proc is not mounted (a bare chroot), by `name` again
/// (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`), kept only if it is the same
/// inode. EINVAL unless it is a regular file.
pub fn open_reached(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    reached: &(OwnedFd, FileStat),
    flags: libc::c_int,
    quiet: bool,
) -> io::Result<File> {
    let (fd, st) = reached;
    if file_type(st) != SFlag::S_IFREG {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let r = if quiet {
        crate::sys::reopen_quiet(fd.as_fd(), flags)
    } else {
        crate::sys::reopen(fd.as_fd(), flags)
    };
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            let c = one(name)?;
            let how = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
            let again = openat(
                dir,
                c.as_c_str(),
                OFlag::from_bits_retain(how | libc::O_CLOEXEC),
                Mode::empty(),
            )
            .map_err(io::Error::from)?;
            let now = fstat(&again).map_err(io::Error::from)?;
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                return Err(io::Error::from_raw_os_error(libc::ESTALE));
            }
            // Back to blocking I/O.
            nix::fcntl::fcntl(
                &again,
                nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_retain(flags)),
            )
            .map_err(io::Error::from)?;
            Ok(File::from(again))
        }
        r => r,
    }
}

/// Opens (with `create`, making it mode 0700 first when missing) the
/// directory `name` in `parent` and judges it by `rule`.
pub fn open_dir(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rule: &Rule,
    create: bool,
) -> Result<OwnedFd, Unusable> {
    let c = one(name).map_err(|e| Unusable::Bad(format!("is not a plain name ({e})")))?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut created = false;
    let fd = match openat(parent, c.as_c_str(), flags, Mode::empty()) {
        Err(Errno::ENOENT) if !create => return Err(Unusable::Missing),
        Err(Errno::ENOENT) => {
            match mkdirat(parent, c.as_c_str(), Mode::S_IRWXU) {
                Ok(()) => created = true,
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(Unusable::Bad(format!("cannot be created ({e})"))),
            }
            openat(parent, c.as_c_str(), flags, Mode::empty())
        }
        r => r,
    }
    .map_err(|e| Unusable::Bad(what_is(parent, &c, e)))?;
    let st = fstat(&fd).map_err(|e| Unusable::Bad(format!("cannot be checked ({e})")))?;
    rule.judge(&st).map_err(Unusable::Bad)?;
    if created {
        // Whatever the umask.
        fchmod(&fd, Mode::S_IRWXU)
            .map_err(|e| Unusable::Bad(format!("cannot be made private ({e})")))?;
    }
    Ok(fd)
}

/// Opens the regular file `name` in `dir` for `flags` (`O_RDONLY`,
/// `O_WRONLY` or `O_RDWR`) and judges it by `rule` before it is opened for
/// I/O (see [`reach`]). With `create`, a missing file is made (exclusively,
/// mode 0600 whatever the umask).
pub fn open_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: libc::c_int,
    rule: &Rule,
    create: bool,
) -> Result<File, Unusable> {
    let c = one(name).map_err(|e| Unusable::Bad(format!("is not a plain name ({e})")))?;
    match reach(dir, name) {
        Ok(reached) => {
            rule.judge(&reached.1).map_err(Unusable::Bad)?;
            open_reached(dir, name, &reached, flags, false)
                .map_err(|e| Unusable::Bad(format!("cannot be opened ({e})")))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
            let how = OFlag::from_bits_retain(flags)
                | OFlag::O_CREAT
                | OFlag::O_EXCL
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let fd = match openat(dir, c.as_c_str(), how, Mode::S_IRUSR | Mode::S_IWUSR) {
                Ok(fd) => fd,
                // Made by someone else meanwhile: judged as found.
                Err(Errno::EEXIST) => return open_file(dir, name, flags, rule, false),
                Err(e) => return Err(Unusable::Bad(format!("cannot be created ({e})"))),
            };
            fchmod(&fd, Mode::S_IRUSR | Mode::S_IWUSR)
                .map_err(|e| Unusable::Bad(format!("cannot be made private ({e})")))?;
            let st = fstat(&fd).map_err(|e| Unusable::Bad(format!("cannot be checked ({e})")))?;
            rule.judge(&st).map_err(Unusable::Bad)?;
            Ok(File::from(fd))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(Unusable::Missing),
        Err(e) => Err(Unusable::Bad(
            match Errno::from_raw(e.raw_os_error().unwrap_or(0)) {
                Errno::ELOOP => what_is(dir, &c, Errno::ELOOP),
                errno => format!("cannot be opened ({errno})"),
            },
        )),
    }
}

/// Removes the access ACL a file just created in a tree the user writes
/// was given by its directory's default ACL (`setfacl -d`, which the
/// directory's owner may set): its entries (a named user, a named group)
/// are masked by the creation mode's group bits, and a later `chmod` to
/// an original's mode would unmask them, giving whoever the default names
/// access to the content root writes. Without it the mode bits alone
/// decide. Nothing to do where the filesystem has no ACLs.
pub fn drop_inherited_acl(file: &File) -> io::Result<()> {
    match crate::sys::xattr::removexattr(file.as_fd(), c"system.posix_acl_access") {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA) | Some(libc::ENOTSUP)) => Ok(()),
        r => r,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` of one component, judged.
pub fn stat_at(dir: BorrowedFd<'_>, name: &OsStr, rule: &Rule) -> Result<FileStat, Unusable> {
    let c = one(name).map_err(|e| Unusable::Bad(format!("is not a plain name ({e})")))?;
    let st = match fstatat(dir, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Err(Unusable::Missing),
        Err(e) => return Err(Unusable::Bad(format!("cannot be checked ({e})"))),
    };
    rule.judge(&st).map_err(Unusable::Bad)?;
    Ok(st)
}

/// The checksum the programs' records carry: a word-at-a-time
/// multiply-xor hash over their bytes and length. Not a defence by itself
/// (anyone can compute it; the owner rule is the defence), but a torn,
/// damaged or swapped record is never acted on.
#[derive(Debug, Default, Clone)]
pub struct Checksum {
    h: u64,
    len: u64,
    pending: [u8; 8],
    n: usize,
}

impl Checksum {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;

    fn word(&mut self, w: u64) {
        let h = (self.h ^ w).wrapping_mul(Self::K);
        self.h = h ^ (h >> 29);
    }

    /// Takes the next bytes (any chunking gives the same sum).
    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.n > 0 {
            let take = (8 - self.n).min(data.len());
            self.pending[self.n..self.n + take].copy_from_slice(&data[..take]);
            self.n += take;
            data = &data[take..];
            if self.n < 8 {
                return;
            }
            self.word(u64::from_le_bytes(self.pending));
            self.n = 0;
        }
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.word(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.n = rest.len();
    }

    /// Bytes taken so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no bytes were taken.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sum of everything taken.
    pub fn finish(mut self) -> u64 {
        if self.n > 0 {
            let mut b = [0u8; 8];
            b[..self.n].copy_from_slice(&self.pending[..self.n]);
            self.word(u64::from_le_bytes(b));
        }
        let len = self.len;
        self.word(len);
        self.h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dirfd(p: &std::path::Path) -> OwnedFd {
        File::open(p).unwrap().into()
    }

    #[test]
    fn checksum_does_not_depend_on_chunking() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut whole = Checksum::default();
        whole.update(&data);
        let whole = whole.finish();
        for cut in [0, 1, 3, 7, 8, 9, 500, 999, 1000] {
            let mut s = Checksum::default();
            s.update(&data[..cut]);
            for b in data[cut..].chunks(5) {
                s.update(b);
            }
            assert_eq!(s.finish(), whole, "cut {cut}");
        }
        let mut other = Checksum::default();
        other.update(&data[..999]);
        assert_ne!(other.finish(), whole);
    }

    #[test]
    fn rules_name_what_fails() {
        let d = tempfile::tempdir().unwrap();
        let root = dirfd(d.path());
        std::fs::write(d.path().join("f"), b"x").unwrap();
        let f = OsStr::new("f");
        std::fs::set_permissions(d.path().join("f"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let private = Rule::our_file(Access::Private);
        let e = stat_at(root.as_fd(), f, &private).unwrap_err().to_string();
        assert!(
            e.contains("accessible to group or others (mode 0644)"),
            "{e}"
        );
        assert!(stat_at(root.as_fd(), f, &Rule::our_file(Access::NotShared)).is_ok());
        std::fs::hard_link(d.path().join("f"), d.path().join("g")).unwrap();
        let e = stat_at(root.as_fd(), f, &Rule::our_file(Access::NotShared))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 links"), "{e}");
        let e = stat_at(root.as_fd(), f, &Rule::any_file().on(u64::MAX))
            .unwrap_err()
            .to_string();
        assert!(e.contains("another filesystem"), "{e}");
        let e = stat_at(root.as_fd(), f, &Rule::our_dir(Access::Any))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a regular file, not a directory"), "{e}");
        assert!(matches!(
            stat_at(root.as_fd(), OsStr::new("none"), &private),
            Err(Unusable::Missing)
        ));
        // Never more than one component.
        for bad in ["../f", "/etc/passwd", "..", ".", ""] {
            assert!(
                matches!(
                    stat_at(root.as_fd(), OsStr::new(bad), &Rule::any_file()),
                    Err(Unusable::Bad(_))
                ),
                "{bad}"
            );
            assert!(open_file(
                root.as_fd(),
                OsStr::new(bad),
                libc::O_RDONLY,
                &Rule::any_file(),
                false
            )
            .is_err());
            assert!(reach(root.as_fd(), OsStr::new(bad)).is_err());
        }
    }

    #[test]
    fn symlinks_fifos_and_others_are_never_opened() {
        let d = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        std::fs::write(target.path().join("x"), b"elsewhere").unwrap();
        std::os::unix::fs::symlink(target.path().join("x"), d.path().join("link")).unwrap();
        std::os::unix::fs::symlink(target.path(), d.path().join("dlink")).unwrap();
        nix::unistd::mkfifo(&d.path().join("fifo"), Mode::S_IRWXU).unwrap();
        let root = dirfd(d.path());
        let any = Rule::any_file();
        let e = open_file(root.as_fd(), OsStr::new("link"), libc::O_RDWR, &any, true).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        let e = open_file(
            root.as_fd(),
            OsStr::new("fifo"),
            libc::O_RDONLY,
            &any,
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("is a fifo, not a regular file"),
            "{e}"
        );
        let e = open_dir(
            root.as_fd(),
            OsStr::new("dlink"),
            &Rule::our_dir(Access::Any),
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(enter_dir(root.as_fd(), OsStr::new("dlink")).is_err());
        assert_eq!(
            std::fs::read(target.path().join("x")).unwrap(),
            b"elsewhere"
        );
        // Created files and directories are private whatever the umask.
        let fd = open_dir(
            root.as_fd(),
            OsStr::new("new"),
            &Rule::our_dir(Access::Private),
            true,
        )
        .unwrap();
        let f = open_file(
            fd.as_fd(),
            OsStr::new("rec"),
            libc::O_RDWR,
            &Rule::our_file(Access::Private),
            true,
        )
        .unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o7777, 0o600);
    }
}
