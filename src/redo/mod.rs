//! The mount's redo journal: rewrites of a file's tail that must be
//! all-or-nothing, kept in `BACKING/.cutf8fs-journal` and redone after a
//! crash: at once by a live daemon of the same BACKING (`peers`), or at the
//! next mount. (`cutf8 migrate` keeps an undo journal of its
//! own, `crate::migrate`'s `undo`: a different format for a different job.)
//!
//! Called by `crate::io::write` (the write path) and opened once by `crate::fs`
//! when the mount starts. Knows descriptors, never paths: BACKING is a tree
//! that ordinary users write directly, while the daemon usually runs as root,
//! so nothing here is reached through a name that someone else could swap.
//!
//! * The journal directory is opened once, relative to the descriptor of
//!   BACKING's root, with `O_NOFOLLOW | O_DIRECTORY`, and used through that
//!   descriptor for the life of the mount. It must be a directory on
//!   BACKING's filesystem, owned by the daemon's effective user and not
//!   writable by group or others. It is created (mode 0700) only when the
//!   first journaled rewrite needs it, never on a read-only mount.
//! * An entry is a directory (0700) holding `target` (a hard link to the
//!   file, so the entry finds the inode again whatever its names), `tail`
//!   (the new tail, 0600) and `meta` (0600): the offset, the tail's length and
//!   checksum, the target's device and inode, BACKING root's device and inode,
//!   and, for messages only, the file's path when it was written.
//!   (The target's size and times are not part of the identity: the hard
//!   link and a copy cut short change them, and a replay must still run.)
//!   An entry counts only once renamed to `*.commit` after everything in
//!   it is durable: before that the file was not touched and the entry is
//!   dropped; after it the copy is (re)done and the entry removed — by
//!   another daemon of the BACKING the moment this one is gone (`peers`
//!   says why it must not wait: its survivors would serve the half-copied
//!   file, and a later replay would undo what they wrote into it), or
//!   else by the next mount. Each rewrite first checks that the name still refers
//!   to the directory in use (its owner may rename it), so an entry always
//!   sits where the next mount looks.
//! * At start every entry is checked before anything is done, by the rules
//!   of `crate::trust` (which holds the whole argument): directories and
//!   files owned by the daemon, not symlinks, private modes, one link for
//!   `tail` and `meta`, `target` on BACKING's filesystem, and for a
//!   committed entry the identity in `meta` matching what `target` and
//!   BACKING's root are now, and the tail's length and checksum. A journal
//!   or entry that fails is never replayed and nothing is deleted through
//!   it: the mount refuses to start with a message naming the path and what
//!   to do. A committed entry on a read-only mount also refuses the start
//!   (a half-rewritten file must not be served): "mount read-write once to
//!   finish it". A journal directory that fails the rules while mounted
//!   makes the rewrites that need it fail with EPERM, logged through
//!   `crate::ratelog` (its owner can keep it in place for every rewrite).
//! * Crash tests stop a daemon at the worst moment with [`KILL_ENV`]
//!   rather than a well-timed `kill -9`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

mod entry;
mod owner;
mod peers;

pub use peers::{Bare, Replaying};

/// Whether `name`, in the journal directory, names an entry rather than
/// one of the daemons' own files (`recover.lock`, owner files).
pub fn is_entry_name(name: &[u8]) -> bool {
    name != owner::RECOVER_LOCK.as_bytes() && !owner::is_owner_file(name)
}

/// The journal directory at the root of BACKING.
pub const DIR: &str = ".cutf8fs-journal";

use crate::trust::{self, Access, Checksum, Rule};
use entry::{
    apply, create_private, link_fd, preallocate, remove_entry, retire, state_of, Found, Meta,
    State, Summing, CHUNK, FILES,
};
use owner::{Liveness, Owner, Recovery};

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The journal of one mount. See the module doc.
#[derive(Debug)]
pub struct RedoJournal {
    /// BACKING's root (an `O_PATH` descriptor the daemon holds).
    root: OwnedFd,
    /// (st_dev, st_ino) of BACKING's root, recorded in every entry.
    root_id: (u64, u64),
    /// BACKING's path when the mount started, for messages only.
    backing: PathBuf,
    /// `-o ro` or a read-only BACKING: nothing is ever written.
    read_only: bool,
    /// This daemon's id: its entries are `<id>-<seq>` (`owner`).
    id: u64,
    /// The journal directory, once checked (at start, or when the first
    /// rewrite created it), and this daemon's owner file in it once it
    /// wrote an entry there. Held only to look it up or replace it; each
    /// rewrite keeps its own `Arc` of the directory it started in.
    dir: parking_lot::Mutex<Option<DirClaim>>,
    /// For crash tests only: the daemon kills itself at this journaled
    /// rewrite (1 for the first), right after its commit ([`KILL_ENV`]).
    kill_at: Option<u64>,
    /// Journaled rewrites committed so far (for `kill_at`).
    committed: AtomicU64,
}

/// For crash tests: `CUTF8FS_TEST_KILL_AFTER_COMMIT=N` makes the daemon
/// kill itself (SIGKILL) at its Nth journaled rewrite, right after the
/// entry is committed and part of the new tail copied: the moment a kill
/// leaves a half-rewritten file that only the journal can finish.
pub const KILL_ENV: &str = "CUTF8FS_TEST_KILL_AFTER_COMMIT";

/// The journal directory in use, and this daemon's claim on it.
#[derive(Debug)]
struct DirClaim {
    fd: Arc<OwnedFd>,
    owner: Option<Owner>,
}

/// The committed entries of owner `id` in `dir`, each with the identity
/// of the file its `target` names now: only to choose which file to hold
/// still while it is finished (everything is checked then, `sweep`).
fn committed_of(dir: &OwnedFd, id: u64) -> io::Result<Vec<(OsString, (u64, u64))>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut d = nix::dir::Dir::openat(dir, ".", flags, Mode::empty()).map_err(io::Error::from)?;
    let mut found = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io::Error::from)?;
        let n = e.file_name().to_bytes();
        if state_of(n) != Some(State::Commit) || owner::id_of(n) != Some(id) {
            continue;
        }
        let name = OsStr::from_bytes(n).to_owned();
        let target = openat(
            dir,
            name.as_os_str(),
            flags | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .and_then(|fd| fstatat(&fd, "target", AtFlags::AT_SYMLINK_NOFOLLOW))
        .map_or((0, 0), |st| (st.st_dev, st.st_ino));
        found.push((name, target));
    }
    found.sort();
    Ok(found)
}

/// A refusal to start: `what` happened at `path`, `todo` says what to do.
fn refuse(path: &Path, what: impl std::fmt::Display, todo: &str) -> io::Error {
    io::Error::other(format!(
        "{}: {what}; nothing in the journal was replayed or deleted. {todo}",
        path.display()
    ))
}

impl RedoJournal {
    /// The journal of the BACKING whose root directory is `root`. Checks and
    /// replays what a killed daemon left behind; refuses (an error whose
    /// message names the path and what to do) when the journal is not the
    /// daemon's own, or when a committed entry cannot be finished because
    /// the mount is read-only (`read_only`: `-o ro`; a read-only BACKING is
    /// detected here). Creates nothing.
    pub fn open(root: BorrowedFd<'_>, read_only: bool) -> io::Result<RedoJournal> {
        let root = root.try_clone_to_owned()?;
        let st = fstat(&root).map_err(io::Error::from)?;
        let backing = std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd()))
            .unwrap_or_else(|_| PathBuf::from("BACKING"));
        let fs_ro = nix::sys::statvfs::fstatvfs(&root)
            .map(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
            .unwrap_or(false);
        let j = RedoJournal {
            root,
            root_id: (st.st_dev, st.st_ino),
            backing,
            read_only: read_only || fs_ro,
            id: owner::new_id(),
            dir: parking_lot::Mutex::new(None),
            kill_at: std::env::var(KILL_ENV).ok().and_then(|v| v.parse().ok()),
            committed: AtomicU64::new(0),
        };
        let path = j.backing.join(DIR);
        let dir = match trust::open_dir(j.root.as_fd(), OsStr::new(DIR), &j.dir_rule(), false) {
            Ok(fd) => fd,
            Err(trust::Unusable::Missing) => return Ok(j),
            Err(trust::Unusable::Bad(what)) => {
                let todo = format!(
                    "Only the daemon's own journal is trusted: check it, then remove it \
                     (rm -r '{}') and mount again.",
                    path.display()
                );
                return Err(refuse(&path, what, &todo));
            }
        };
        j.recover(&dir, &path)?;
        if !j.read_only {
            *j.dir.lock() = Some(DirClaim {
                fd: Arc::new(dir),
                owner: None,
            });
        }
        Ok(j)
    }

    /// Whether this mount writes nothing to BACKING.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// What the journal directory must be (see `crate::trust`): a directory
    /// on BACKING's filesystem, owned by the daemon's user, not writable by
    /// group or others.
    fn dir_rule(&self) -> Rule {
        Rule::our_dir(Access::NotShared).on(self.root_id.0)
    }

    /// Checks every entry of a daemon that is gone (`owner`: the entries
    /// of a live one are left alone), then finishes committed ones and
    /// drops the others (on a read-only mount: refuses if any is
    /// committed, leaves the rest); last, the owner files of the daemons
    /// whose entries it finished go.
    fn recover(&self, dir: &OwnedFd, path: &Path) -> io::Result<usize> {
        let _recovery = Recovery::begin(dir, self.read_only)
            .map_err(|e| refuse(path, e, "Check the journal directory's files."))?;
        self.sweep(dir, path, None, None)
    }

    /// Finishes the entries of peer `id`, whose daemon ended: this daemon
    /// holds the lock of its owner file (`owner`, in `dir`). Nothing to
    /// do if another daemon finished them first (the owner file is no
    /// longer under its name). Each committed entry is finished on its
    /// own, inside `hooks` (which holds its file still) and then under
    /// `recover.lock`: the file's content lock before `recover.lock`, the
    /// order of the write path, whose first rewrite in a journal directory
    /// waits for `recover.lock` to claim its owner file.
    fn finish_peer(
        &self,
        dir: &OwnedFd,
        id: u64,
        owner: File,
        hooks: &dyn Replaying,
    ) -> io::Result<usize> {
        let path = self.backing.join(DIR);
        let name = format!("{id}{}", owner::OWNER_SUFFIX);
        let begin = || -> io::Result<Option<Recovery>> {
            let r = Recovery::begin(dir, false)
                .map_err(|e| refuse(&path, e, "Check the journal directory's files."))?;
            let held = fstat(owner.as_fd()).map_err(io::Error::from)?;
            Ok(
                match fstatat(dir, name.as_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st)
                        if held.st_nlink > 0
                            && (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino) =>
                    {
                        r
                    }
                    _ => None,
                },
            )
        };
        let mut replayed = 0;
        for (entry, target) in committed_of(dir, id)? {
            let mut one = || -> io::Result<()> {
                let Some(_recovery) = begin()? else {
                    return Ok(());
                };
                let peer = Some((id, Liveness::Dead(None)));
                replayed += self.sweep(dir, &path, peer, Some(&entry))?;
                Ok(())
            };
            hooks.replaying(target, &mut one)?;
        }
        // The rest (uncommitted entries), then the owner file.
        let Some(_recovery) = begin()? else {
            return Ok(replayed);
        };
        let peer = Some((id, Liveness::Dead(Some(owner))));
        Ok(replayed + self.sweep(dir, &path, peer, None)?)
    }

    /// [`RedoJournal::recover`]'s work, `recover.lock` held: of every dead
    /// daemon's entries, or only of `peer`'s (its id, known dead), and then
    /// only `entry` if given.
    fn sweep(
        &self,
        dir: &OwnedFd,
        path: &Path,
        peer: Option<(u64, Liveness)>,
        entry: Option<&OsStr>,
    ) -> io::Result<usize> {
        let only = peer.as_ref().map(|p| p.0);
        let mut names = Vec::new();
        {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let mut d =
                nix::dir::Dir::openat(dir, ".", flags, Mode::empty()).map_err(io::Error::from)?;
            for e in d.iter() {
                let e = e.map_err(io::Error::from)?;
                let n = e.file_name().to_bytes();
                if n != b"." && n != b".." {
                    names.push(OsStr::from_bytes(n).to_owned());
                }
            }
        }
        names.sort();
        // Who each entry belongs to, and whether that daemon lives.
        let mut owners: std::collections::BTreeMap<u64, Liveness> = Default::default();
        if let Some((id, l)) = peer {
            owners.insert(id, l);
        }
        let mut live = 0;
        let mut mine = Vec::new();
        for name in names {
            let n = name.as_bytes();
            if n == owner::RECOVER_LOCK.as_bytes() {
                continue;
            }
            let Some(id) = owner::id_of(n) else {
                if only.is_none() {
                    mine.push(name);
                }
                continue;
            };
            if only.is_some_and(|o| o != id) || entry.is_some_and(|e| e != name.as_os_str()) {
                continue;
            }
            if let std::collections::btree_map::Entry::Vacant(v) = owners.entry(id) {
                let l = Liveness::of(dir, id).map_err(|e| {
                    refuse(
                        &path.join(format!("{id}.owner")),
                        e,
                        "It was not written by this daemon: check it, then remove it and \
                         mount again.",
                    )
                })?;
                v.insert(l);
            }
            if owner::is_owner_file(n) {
                continue;
            }
            match owners.get(&id) {
                Some(Liveness::Alive) => live += 1,
                _ => mine.push(name),
            }
        }
        if live > 0 {
            log::info!("journal: {live} entries of another daemon serving this BACKING left to it");
        }
        let mut found = Vec::new();
        for name in mine {
            let epath = path.join(&name);
            let bad = |what: String| {
                let todo = format!(
                    "It was not written by this daemon: check it, then remove it \
                     (rm -r '{}') and mount again.",
                    epath.display()
                );
                refuse(&epath, what, &todo)
            };
            found.push(self.check_entry(dir, name.clone()).map_err(bad)?);
        }
        // Nothing is done before every entry passed.
        let mut replayed = 0;
        for f in found {
            let epath = path.join(&f.name);
            match f.state {
                State::Commit => {
                    let (meta, target, tail) = self.check_commit(&f).map_err(|what| {
                        let todo = format!(
                            "Check it, then remove it (rm -r '{}') and mount again; \
                             the file it names may hold a half-finished rewrite.",
                            epath.display()
                        );
                        refuse(&epath, what, &todo)
                    })?;
                    let file = String::from_utf8_lossy(&meta.name).into_owned();
                    if self.read_only {
                        return Err(io::Error::other(format!(
                            "{}: an interrupted rewrite of {file} (inode {}) is committed \
                             in the journal, but this mount is read-only (-o ro or a \
                             read-only BACKING), so it cannot be finished and the file \
                             must not be served half rewritten. Mount read-write once to \
                             finish it.",
                            epath.display(),
                            meta.target.1
                        )));
                    }
                    let context = |e: io::Error| {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "{}: finishing the interrupted rewrite of {file}: {e}",
                                epath.display()
                            ),
                        )
                    };
                    apply(&target, meta.offset, &tail).map_err(context)?;
                    // Closed before the entry goes (see `rewrite`).
                    drop((target, tail));
                    log::warn!("journal: finished an interrupted rewrite of {file}");
                    replayed += 1;
                    retire(dir, &f).map_err(context)?;
                }
                State::Open | State::Done if self.read_only => {}
                State::Open | State::Done => remove_entry(dir, &f).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("{}: removing an unfinished entry: {e}", epath.display()),
                    )
                })?,
            }
        }
        if !self.read_only {
            for (id, l) in owners {
                l.release(dir, id).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("{}: removing a finished owner: {e}", path.display()),
                    )
                })?;
            }
        }
        Ok(replayed)
    }

    /// The checks every entry passes before anything is done with it.
    fn check_entry(&self, dir: &OwnedFd, name: OsString) -> Result<Found, String> {
        let state = state_of(name.as_bytes()).ok_or("an unexpected name in the journal")?;
        // (Its link count says nothing on every filesystem — btrfs keeps 1
        // for directories — so subdirectories are refused below by type.)
        let fd = trust::open_dir(dir.as_fd(), &name, &Rule::our_dir(Access::Private), false)
            .map_err(|r| r.to_string())?;
        let mut files = Vec::new();
        let mut count = 0;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut d = nix::dir::Dir::openat(&fd, ".", flags, Mode::empty())
            .map_err(|e| format!("cannot list it ({e})"))?;
        for e in d.iter() {
            let e = e.map_err(|e| format!("cannot list it ({e})"))?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            count += 1;
            let Some(&known) = FILES.iter().find(|f| f.as_bytes() == n) else {
                return Err(format!(
                    "holds an unexpected file {:?}",
                    String::from_utf8_lossy(n)
                ));
            };
            trust::stat_at(fd.as_fd(), OsStr::new(known), &self.file_rule(known))
                .map_err(|why| format!("{known} {why}"))?;
            files.push(known);
        }
        if count != files.len() {
            return Err("holds unexpected files".into());
        }
        Ok(Found {
            name,
            state,
            fd,
            files,
        })
    }

    /// What each file of an entry must be (see `crate::trust`): `target`
    /// a regular file on BACKING's filesystem (the user's file, linked);
    /// `tail` and `meta` the daemon's, private, one link.
    fn file_rule(&self, name: &str) -> Rule {
        if name == "target" {
            Rule::any_file().on(self.root_id.0)
        } else {
            Rule::our_file(Access::Private)
        }
    }

    /// A committed entry: everything present, `meta` well-formed and
    /// matching the target's and BACKING root's identity, the tail whole.
    fn check_commit(&self, f: &Found) -> Result<(Meta, File, File), String> {
        if f.files.len() != FILES.len() {
            return Err("a committed entry with files missing".into());
        }
        let open = |name: &str, flags: libc::c_int| -> Result<File, String> {
            trust::open_file(
                f.fd.as_fd(),
                OsStr::new(name),
                flags,
                &self.file_rule(name),
                false,
            )
            .map_err(|why| format!("{name} {why}"))
        };
        let mut text = String::new();
        open("meta", libc::O_RDONLY)?
            .take(64 << 10)
            .read_to_string(&mut text)
            .map_err(|e| format!("meta: cannot read it ({e})"))?;
        let meta = Meta::parse(&text).ok_or("meta is not a journal record of this daemon")?;
        if meta.root != self.root_id {
            return Err(format!(
                "was written for another BACKING (root device/inode {:?}, this one {:?})",
                meta.root, self.root_id
            ));
        }
        let target = open(
            "target",
            if self.read_only {
                libc::O_RDONLY
            } else {
                libc::O_WRONLY
            },
        )?;
        let st = fstat(&target).map_err(|e| format!("target: cannot stat it ({e})"))?;
        if (st.st_dev, st.st_ino) != meta.target {
            return Err(format!(
                "target is not the file the entry was written for (device/inode {:?}, \
                 recorded {:?})",
                (st.st_dev, st.st_ino),
                meta.target
            ));
        }
        let tail = open("tail", libc::O_RDONLY)?;
        let mut sum = Checksum::default();
        let mut buf = vec![0u8; CHUNK];
        let mut pos = 0u64;
        loop {
            let n = tail
                .read_at(&mut buf, pos)
                .map_err(|e| format!("tail: cannot read it ({e})"))?;
            if n == 0 {
                break;
            }
            sum.update(&buf[..n]);
            pos += n as u64;
        }
        if pos != meta.tail_len || sum.finish() != meta.tail_sum {
            return Err("tail does not match its recorded length and checksum".into());
        }
        Ok((meta, target, tail))
    }

    /// The journal directory, created (0700) and checked on first use. If
    /// the one in use was moved or replaced since (BACKING's owner can
    /// rename it), it is given up for whatever now has the name, checked
    /// again: an entry must sit where the next mount will look for it.
    fn dir(&self) -> io::Result<Arc<OwnedFd>> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        // The daemon's, whoever's write needs it.
        let _own = crate::sys::AsDaemon::new()?;
        let path = self.backing.join(DIR);
        let mut held = self.dir.lock();
        if let Some(h) = held.as_mut() {
            let named = fstatat(&self.root, DIR, AtFlags::AT_SYMLINK_NOFOLLOW);
            match (fstat(h.fd.as_ref()), named) {
                (Ok(a), Ok(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) => {
                    if h.owner.is_none() {
                        h.owner = Some(self.claim(&h.fd, &path)?);
                    }
                    return Ok(h.fd.clone());
                }
                _ => {
                    crate::ratelog::warn("journal-moved", &path.to_string_lossy(), || {
                        format!(
                            "{}: the journal directory was moved or replaced while mounted; \
                             using a new one",
                            path.display()
                        )
                    });
                    *held = None;
                }
            }
        }
        let created = match mkdirat(&self.root, DIR, Mode::from_bits_truncate(0o700)) {
            Ok(()) => true,
            Err(Errno::EEXIST) => false,
            Err(e) => return Err(io::Error::from(e)),
        };
        let fd = match trust::open_dir(self.root.as_fd(), OsStr::new(DIR), &self.dir_rule(), false)
        {
            Ok(fd) => fd,
            Err(why) => {
                // BACKING's owner can keep this up for every rewrite.
                crate::ratelog::error("journal-untrusted", &path.to_string_lossy(), || {
                    format!(
                        "{}: {why}: not the daemon's journal, never used; rewrites that need \
                         it fail with EPERM until it is removed (rm -r '{}')",
                        path.display(),
                        path.display()
                    )
                });
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
        };
        if created {
            fchmod(&fd, Mode::from_bits_truncate(0o700)).map_err(io::Error::from)?;
        }
        let owner = self.claim(&fd, &path)?;
        let fd = Arc::new(fd);
        *held = Some(DirClaim {
            fd: fd.clone(),
            owner: Some(owner),
        });
        Ok(fd)
    }

    /// This daemon's owner file in the journal directory `fd` (`owner`).
    fn claim(&self, fd: &OwnedFd, path: &Path) -> io::Result<Owner> {
        Owner::claim(fd, self.id).map_err(|e| {
            crate::ratelog::error("journal-owner", &path.to_string_lossy(), || {
                format!(
                    "{}: cannot take this daemon's owner file ({e}); rewrites that need the \
                     journal fail until it can",
                    path.display()
                )
            });
            io::Error::from_raw_os_error(libc::EPERM)
        })
    }

    /// The path of `file` below BACKING (for messages), or its full path.
    fn name_of(&self, file: &File) -> Vec<u8> {
        let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) else {
            return Vec::new();
        };
        match p.strip_prefix(&self.backing) {
            Ok(rel) => rel.as_os_str().as_bytes().to_vec(),
            Err(_) => p.as_os_str().as_bytes().to_vec(),
        }
    }

    /// Replaces `file[offset..]` with what `fill` writes, all or nothing.
    pub fn rewrite(
        &self,
        file: &File,
        offset: u64,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        if fstat(file.as_fd()).map_err(io::Error::from)?.st_nlink == 0 {
            // Deleted (or replaced by a rename in BACKING) while open: no
            // name shows it after a crash, so there is nothing to make
            // all-or-nothing, and an unlinked inode cannot be linked into
            // the journal. Stage the tail in an unnamed file and copy it.
            let flags = OFlag::O_RDWR | OFlag::O_TMPFILE | OFlag::O_CLOEXEC;
            let dir = self.dir()?;
            let own = crate::sys::AsDaemon::new()?;
            let fd = openat(dir, ".", flags, Mode::from_bits_truncate(0o600))
                .map_err(io::Error::from)?;
            drop(own);
            let mut tail = File::from(fd);
            {
                let mut w = io::BufWriter::with_capacity(CHUNK, &mut tail);
                fill(&mut w)?;
                w.flush()?;
            }
            return apply(file, offset, &tail);
        }
        let (dir, name, entry, tail) = self.prepare(file, offset, fill)?;
        // Committed: from here on a kill is finished by a live peer
        // (`peers`) or at the next mount.
        self.test_kill_point(file, offset, &tail);
        apply(file, offset, &tail)?;
        // Closed before the entry goes: a FUSE BACKING (bindfs, sshfs)
        // keeps a file unlinked while open as a hidden name, which would
        // leave the entry's directory not empty.
        drop(tail);
        let f = Found {
            name: OsString::from(format!("{name}.commit")),
            state: State::Commit,
            fd: entry,
            files: FILES.to_vec(),
        };
        retire(&dir, &f)
    }

    /// [`KILL_ENV`]: at the chosen rewrite, copies the first part of the
    /// tail (at most a step of the copy, half of it if shorter) and kills
    /// the daemon.
    fn test_kill_point(&self, file: &File, offset: u64, tail: &File) {
        let n = self.committed.fetch_add(1, Ordering::Relaxed) + 1;
        if self.kill_at != Some(n) {
            return;
        }
        let len = tail.metadata().map_or(0, |m| m.len());
        let mut buf = vec![0u8; usize::try_from(len / 2).unwrap_or(CHUNK).min(CHUNK)];
        if tail.read_exact_at(&mut buf, 0).is_ok() {
            let _ = file.write_all_at(&buf, offset);
        }
        log::warn!("journal: {KILL_ENV}={n}: killed after the commit, as a crash test asked");
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::SIGKILL);
    }

    /// Writes and commits an entry for the rewrite of `file[offset..]` with
    /// what `fill` writes, and stops there, as a kill right after the commit
    /// point would: for crash tests.
    #[doc(hidden)]
    pub fn commit_only(
        &self,
        file: &File,
        offset: u64,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        self.prepare(file, offset, fill).map(drop)
    }

    /// Everything up to and including the commit point. Returns the journal
    /// directory, the entry's stem name, its descriptor and the tail.
    fn prepare(
        &self,
        file: &File,
        offset: u64,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<(Arc<OwnedFd>, String, OwnedFd, File)> {
        let held = self.dir()?;
        let dir: &OwnedFd = &held;
        let name = format!("{}-{}", self.id, SEQ.fetch_add(1, Ordering::Relaxed));
        {
            // The entry is the daemon's; the tail's blocks, written as the
            // caller whose write this is (`sys::Limits`), count as the
            // caller's on the reserve.
            let _own = crate::sys::AsDaemon::new()?;
            mkdirat(dir, name.as_str(), Mode::from_bits_truncate(0o700))
                .map_err(io::Error::from)?;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let entry = match openat(dir, name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = unlinkat(dir, name.as_str(), UnlinkatFlags::RemoveDir);
                return Err(io::Error::from(e));
            }
        };
        let result = (|| {
            fchmod(&entry, Mode::from_bits_truncate(0o700)).map_err(io::Error::from)?;
            let st = fstat(file.as_fd()).map_err(io::Error::from)?;
            link_fd(file, &entry, "target")?;
            let mut tail = create_private(&entry, "tail")?;
            let sum = {
                let mut w = Summing {
                    inner: io::BufWriter::with_capacity(CHUNK, &mut tail),
                    sum: Checksum::default(),
                };
                fill(&mut w)?;
                w.flush()?;
                w.sum
            };
            tail.sync_all()?;
            let tail_len = sum.len();
            // Reserve the target's blocks first (without changing its
            // size), so the copy cannot run out of space half way: ENOSPC
            // comes now, while the file is untouched.
            preallocate(file, offset, tail_len)?;
            let meta = Meta {
                offset,
                tail_len,
                tail_sum: sum.finish(),
                target: (st.st_dev, st.st_ino),
                root: self.root_id,
                name: self.name_of(file),
            };
            let mut m = create_private(&entry, "meta")?;
            m.write_all(meta.render().as_bytes())?;
            m.sync_all()?;
            nix::unistd::fsync(&entry).map_err(io::Error::from)?;
            renameat(dir, name.as_str(), dir, format!("{name}.commit").as_str())
                .map_err(io::Error::from)?;
            nix::unistd::fsync(dir).map_err(io::Error::from)?;
            Ok::<File, io::Error>(tail)
        })();
        match result {
            Ok(tail) => Ok((held, name, entry, tail)),
            Err(e) => {
                let f = Found {
                    name: OsString::from(&name),
                    state: State::Open,
                    fd: entry,
                    files: FILES.to_vec(),
                };
                let _ = remove_entry(&dir, &f);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// `dir/f` holding `content`, and it opened read-write.
    fn file_in(dir: &Path, content: &[u8]) -> (PathBuf, File) {
        let p = dir.join("f");
        fs::write(&p, content).unwrap();
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        (p, file)
    }

    fn root_of(dir: &Path) -> OwnedFd {
        File::open(dir).unwrap().into()
    }

    /// The entries in journal directory `jdir`, not the daemons' own
    /// files (`recover.lock`, owner files).
    fn entries(jdir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(jdir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| is_entry_name(p.file_name().unwrap().as_bytes()))
            .collect();
        v.sort();
        v
    }

    /// A live daemon's entries are left alone by a mount that starts
    /// meanwhile; once it is gone, the next one finishes them and removes
    /// its owner file.
    #[test]
    fn a_live_owners_entries_are_left_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let (p, file) = file_in(dir.path(), b"old content here");
        let jdir = dir.path().join(DIR);
        let alive = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
        alive
            .commit_only(&file, 4, |w| w.write_all(b"NEW"))
            .unwrap();
        let entry = entries(&jdir);
        assert_eq!(entry.len(), 1);
        let owner_file = jdir.join(format!("{}{}", alive.id, owner::OWNER_SUFFIX));
        assert!(owner_file.exists());
        // Another mount starts, read-write and read-only: nothing is done.
        let other = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
        RedoJournal::open(root_of(dir.path()).as_fd(), true).unwrap();
        assert_eq!(entries(&jdir), entry);
        assert_eq!(fs::read(&p).unwrap(), b"old content here");
        // The other one writes entries of its own meanwhile.
        let q = dir.path().join("q");
        fs::write(&q, b"q content").unwrap();
        let qf = fs::OpenOptions::new().write(true).open(&q).unwrap();
        other.rewrite(&qf, 2, |w| w.write_all(b"C")).unwrap();
        assert_eq!(fs::read(&q).unwrap(), b"q C");
        assert_eq!(entries(&jdir), entry);
        drop(alive);
        let next = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
        assert!(entries(&jdir).is_empty());
        assert_eq!(fs::read(&p).unwrap(), b"old NEW");
        assert!(!owner_file.exists());
        let other_file = jdir.join(format!("{}{}", other.id, owner::OWNER_SUFFIX));
        assert!(other_file.exists(), "the live daemon's owner file went");
        drop(next);
    }

    /// A daemon watching its peers finishes a dead one's committed entry
    /// at once (not at the next mount) and removes its owner file.
    #[test]
    fn a_watching_daemon_finishes_a_dead_peers_entries_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (p, file) = file_in(dir.path(), b"old content here");
        let jdir = dir.path().join(DIR);
        let watching = Arc::new(RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap());
        watching.watch_peers(Arc::new(Bare)).unwrap();
        let dead = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
        dead.commit_only(&file, 4, |w| w.write_all(b"NEW")).unwrap();
        let owner_file = jdir.join(format!("{}{}", dead.id, owner::OWNER_SUFFIX));
        assert!(owner_file.exists());
        drop(dead);
        let t0 = std::time::Instant::now();
        while !entries(&jdir).is_empty() || owner_file.exists() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "the dead peer's entry is still there: {:?}",
                entries(&jdir)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(fs::read(&p).unwrap(), b"old NEW");
        drop(watching);
    }

    #[test]
    fn nothing_is_created_until_a_rewrite_needs_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(dir.path());
        let j = RedoJournal::open(root.as_fd(), false).unwrap();
        assert!(!dir.path().join(DIR).exists());
        let (p, file) = file_in(dir.path(), b"old content");
        j.rewrite(&file, 4, |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"old new");
        let md = fs::metadata(dir.path().join(DIR)).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o700);
        assert!(entries(&dir.path().join(DIR)).is_empty());
        // Read-only: the same rewrite is refused, nothing is created.
        let dir2 = tempfile::tempdir().unwrap();
        let j2 = RedoJournal::open(root_of(dir2.path()).as_fd(), true).unwrap();
        let e = j2.rewrite(&file, 0, |w| w.write_all(b"x")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS));
        assert!(!dir2.path().join(DIR).exists());
    }

    #[test]
    fn committed_entries_are_replayed_and_uncommitted_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (p, file) = file_in(dir.path(), b"old content here");
        let ino = fs::metadata(&p).unwrap().ino();
        {
            let j = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
            j.commit_only(&file, 4, |w| w.write_all(b"NEW")).unwrap();
        }
        let jdir = dir.path().join(DIR);
        let entry = entries(&jdir).remove(0);
        assert!(entry.to_string_lossy().ends_with(".commit"));
        for (f, mode) in [("tail", 0o600), ("meta", 0o600)] {
            let md = fs::metadata(entry.join(f)).unwrap();
            assert_eq!(md.permissions().mode() & 0o7777, mode, "{f}");
        }
        let md = fs::metadata(&entry).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o700);
        // An uncommitted entry beside it: dropped, its file untouched.
        fs::create_dir(jdir.join("1-0")).unwrap();
        fs::set_permissions(jdir.join("1-0"), fs::Permissions::from_mode(0o700)).unwrap();
        // Read-only: refused, naming the file, nothing changed.
        let e = RedoJournal::open(root_of(dir.path()).as_fd(), true).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("Mount read-write once"), "{msg}");
        assert!(msg.contains(".commit"), "{msg}");
        assert_eq!(fs::read(&p).unwrap(), b"old content here");
        assert!(jdir.join("1-0").exists());
        // Read-write: finished.
        let j = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"old NEW");
        assert!(entries(&jdir).is_empty());
        assert_eq!(fs::metadata(&p).unwrap().nlink(), 1);
        assert_eq!(fs::metadata(&p).unwrap().ino(), ino);
        j.rewrite(&file, 0, |w| w.write_all(b"rewritten")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"rewritten");
    }

    #[test]
    fn a_tampered_entry_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (p, file) = file_in(dir.path(), b"old content here");
        RedoJournal::open(root_of(dir.path()).as_fd(), false)
            .unwrap()
            .commit_only(&file, 4, |w| w.write_all(b"NEW"))
            .unwrap();
        let jdir = dir.path().join(DIR);
        let entry = entries(&jdir).remove(0);
        let tail = entry.join("tail");
        fs::write(&tail, b"EVIL").unwrap();
        let e = RedoJournal::open(root_of(dir.path()).as_fd(), false).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        assert!(e.to_string().contains("rm -r"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"old content here");
        assert!(entry.exists());
    }
}
