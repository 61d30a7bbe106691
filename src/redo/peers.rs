//! Finishes, at once, the committed entries of a peer daemon that died:
//! each read-write daemon watches the other daemons of its BACKING
//! (`owner`) and, the moment one is gone, runs for that one id the same
//! recovery a starting mount runs. Started by `crate::fs` once the mount
//! can serve ([`super::RedoJournal::watch_peers`]); knows nothing of FUSE:
//! what the daemon must do around a replay (hold the file's content lock,
//! forget its caches, tell the kernel) comes in as a [`Replaying`].
//!
//! **Why at once, not at the next mount.** A daemon killed after an
//! entry's commit leaves the file half rewritten (a shifted tail, partly
//! copied). Finished only by the next mount, that state is what every
//! live daemon serves meanwhile, indefinitely, and what they write into it
//! (an append, a whole new content) is then overwritten by the replay,
//! without a word: the next mount cannot tell writes made after the crash
//! from the crash's own damage. Finished by a survivor within moments of
//! the death, there is no "meanwhile" worth the name: the window is the
//! time the kernel takes to hand over the dead daemon's lock plus one copy
//! of the tail, and the survivor holds its own content lock of the file
//! across it, so its own readers and writers of an open file wait for the
//! replay instead of racing it. (While the peer was alive and copying,
//! the other daemons saw the copy in progress too; that is no worse.)
//!
//! **How.** One thread looks at the journal directory every [`LOOK`] (a
//! `stat` of its name and a listing of a directory of a few names: cheap
//! on any filesystem, NFS included; inotify would miss other hosts'
//! changes over NFS). For each owner file of another id it has not seen,
//! it opens the file (by `crate::trust`'s rules, as every journal file)
//! and starts a thread that blocks in `flock(LOCK_EX)` on it. The kernel
//! grants that lock when the peer's daemon ends, however it ends (over
//! NFS: when the server lets the dead host's lease go), so the thread
//! wakes the moment the peer is gone. It then takes `recover.lock`, checks
//! that the owner file it holds is still the one under that name (another
//! daemon may have finished the peer first and removed it: then there is
//! nothing to do), and finishes and drops that peer's entries as a
//! starting mount would, every check included, before it removes the
//! owner file. A peer that dies before the look sees its owner file is
//! found unlocked at the next look: the lock is granted at once. A peer
//! unmounted cleanly is handled the same way (it has no entries left) and
//! its owner file tidied.
//!
//! **Bounds.** One waiting thread (small stack, one descriptor) per live
//! peer; ids of peers once seen are remembered (8 bytes each) so that a
//! peer whose entries could not be finished (an untrusted entry: logged,
//! left for the next mount, which refuses with the same words) is not
//! tried again at every look. A read-only mount watches nothing: it can
//! finish nothing, and a committed entry refuses its start.
//!
//! **Races with starting mounts.** A mount that starts while a waiting
//! thread holds a dead peer's lock sees the owner file locked and leaves
//! its entries to it, which is right: this daemon finishes them. A thread
//! that wakes after a starting mount finished the peer finds the owner
//! file unlinked and stops.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};

use super::{owner, RedoJournal, DIR};
use crate::trust;

/// How often the journal directory is looked at for new peers.
pub const LOOK: Duration = Duration::from_millis(500);

/// What the daemon does around the replay of a dead peer's entry.
pub trait Replaying: Send + Sync {
    /// Runs `replay`, which rewrites the backing file whose (st_dev,
    /// st_ino) is `target`, while this daemon neither reads nor writes that
    /// file; afterwards makes the daemon and the kernel forget what they
    /// cached of it. Called from a thread that serves no request.
    fn replaying(
        &self,
        target: (u64, u64),
        replay: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()>;
}

/// Nothing to do around a replay (no cache, no kernel: unit tests).
pub struct Bare;

impl Replaying for Bare {
    fn replaying(
        &self,
        _target: (u64, u64),
        replay: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        replay()
    }
}

/// Starts the thread that looks for peers; it ends once the journal is
/// dropped.
pub(super) fn spawn(journal: Weak<RedoJournal>, hooks: Arc<dyn Replaying>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("journal-peers".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut seen = HashSet::new();
            let mut dir: Option<((u64, u64), Arc<OwnedFd>)> = None;
            loop {
                {
                    let Some(j) = journal.upgrade() else {
                        return;
                    };
                    if let Some(d) = j.peer_dir(&mut dir) {
                        for (id, file) in j.new_peers(&d, &mut seen) {
                            wait_for(journal.clone(), hooks.clone(), d.clone(), id, file);
                        }
                    }
                }
                std::thread::sleep(LOOK);
            }
        })
        .map(drop)
}

/// Starts the thread that waits for peer `id`'s lock (`file`, its owner
/// file in `dir`), then finishes its entries.
fn wait_for(
    journal: Weak<RedoJournal>,
    hooks: Arc<dyn Replaying>,
    dir: Arc<OwnedFd>,
    id: u64,
    file: File,
) {
    let spawned = std::thread::Builder::new()
        .name("journal-peer".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            let locked = crate::sys::lock_exclusive(&file);
            let Some(j) = journal.upgrade() else {
                return;
            };
            let path = j.backing.join(DIR);
            if let Err(e) = locked {
                log::error!(
                    "{}: cannot wait for daemon {id}'s owner file ({e}); its entries are \
                     left for the next mount",
                    path.display()
                );
                return;
            }
            match j.finish_peer(&dir, id, file, &*hooks) {
                Ok(0) => log::debug!("journal: daemon {id} ended with nothing to finish"),
                Ok(n) => log::warn!(
                    "journal: daemon {id} serving this BACKING ended; finished its {n} \
                     interrupted rewrite(s)"
                ),
                Err(e) => log::error!(
                    "journal: daemon {id} serving this BACKING ended, and its entries could \
                     not be finished: {e} (left for the next mount)"
                ),
            }
        });
    if let Err(e) = spawned {
        log::warn!(
            "cannot start a thread to wait for daemon {id} ({e}); its entries, should it be \
             killed, are finished at the next mount"
        );
    }
}

impl RedoJournal {
    /// Starts watching this BACKING's other daemons (see the module doc);
    /// nothing on a read-only mount.
    pub fn watch_peers(self: &Arc<Self>, hooks: Arc<dyn Replaying>) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        spawn(Arc::downgrade(self), hooks)
    }

    /// The journal directory now under its name, checked by the journal's
    /// rules when it is new to `held` (None while there is none, or one
    /// that is not the daemon's: the write path says so).
    fn peer_dir(&self, held: &mut Option<((u64, u64), Arc<OwnedFd>)>) -> Option<Arc<OwnedFd>> {
        let st = match fstatat(&self.root, DIR, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(_) => {
                *held = None;
                return None;
            }
        };
        let id = (st.st_dev, st.st_ino);
        if let Some((h, fd)) = held.as_ref() {
            if *h == id {
                return Some(fd.clone());
            }
        }
        *held = None;
        let fd =
            trust::open_dir(self.root.as_fd(), OsStr::new(DIR), &self.dir_rule(), false).ok()?;
        let st = fstat(&fd).ok()?;
        let fd = Arc::new(fd);
        *held = Some(((st.st_dev, st.st_ino), fd.clone()));
        Some(fd)
    }

    /// The owner files of other daemons in `dir` not in `seen`, opened
    /// (and added to `seen`).
    fn new_peers(&self, dir: &OwnedFd, seen: &mut HashSet<u64>) -> Vec<(u64, File)> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(mut d) = nix::dir::Dir::openat(dir, ".", flags, Mode::empty()) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for e in d.iter().flatten() {
            let n = e.file_name().to_bytes();
            if !owner::is_owner_file(n) {
                continue;
            }
            let Some(id) = owner::id_of(n) else {
                continue;
            };
            if id == self.id || seen.contains(&id) {
                continue;
            }
            match owner::open(dir, OsStr::from_bytes(n)) {
                Ok(Some(f)) => {
                    seen.insert(id);
                    found.push((id, f));
                }
                Ok(None) => {}
                Err(why) => {
                    seen.insert(id);
                    crate::ratelog::warn("journal-peer", "", || {
                        format!(
                            "{}: {why}; that daemon's entries are left for the next mount",
                            self.backing.join(DIR).display()
                        )
                    });
                }
            }
        }
        found
    }
}
