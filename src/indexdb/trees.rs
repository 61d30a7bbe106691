//! What `cutf8 migrate` does with a tree's index database: records the
//! files it just converted ([`record_written`]) and removes the database of
//! a tree converted back to plain UTF-8 ([`remove_unused`]). Everything is
//! reached by descriptor, by `place`'s checks.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{now, place, settled, IndexDb, Location, DIR, MIGRATE_MIN};
use crate::io::Stamp;
use crate::trust::Unusable;

/// The nearest directory at or above `dir`, on its filesystem, that holds
/// an index database directory (reached by `..` from descriptor to
/// descriptor, never by a path); None when none does.
fn archive_root(dir: BorrowedFd<'_>) -> Option<OwnedFd> {
    use nix::fcntl::{openat, AtFlags, OFlag};
    use nix::sys::stat::{fstat, fstatat, Mode};
    let start = fstat(dir).ok()?;
    let mut at = dir.try_clone_to_owned().ok()?;
    let mut id = (start.st_dev, start.st_ino);
    loop {
        if fstatat(&at, DIR, AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        {
            return Some(at);
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let up = openat(&at, "..", flags, Mode::empty()).ok()?;
        let st = fstat(&up).ok()?;
        if st.st_dev != start.st_dev || (st.st_dev, st.st_ino) == id {
            return None;
        }
        id = (st.st_dev, st.st_ino);
        at = up;
    }
}

/// Records the corrected files `cutf8 migrate` just wrote, open as `files`
/// (reached by descriptor, never by path: see `crate::trust`), under the
/// tree whose root directory is `root` (taken as a BACKING's root), so
/// that the first mount afterwards is warm. A tree inside an archive that
/// already has a database (it was mounted, or migrated, before) records
/// into that one; otherwise, unless `existing_only`, a database is made at
/// `root`. Each file is scanned once more after its ctime has settled
/// ([`racy_margin`](super::racy_margin); at most one wait for the whole list): what migrate
/// wrote may have been changed since by someone else within the same
/// timestamp tick, so only a scan made after the tick is trusted —
/// just-written files are usually still in the page cache. Files under
/// [`MIGRATE_MIN`] are left out (a mount reads one page of them to learn
/// they are corrected, which is most of a scan; so a run on small files
/// waits for nothing and creates nothing). Returns how many were handed
/// to the database (a mount of the tree that holds it lets go once idle;
/// a batch still refused after two seconds is dropped); nothing when it
/// cannot be opened.
pub fn record_written(
    root: BorrowedFd<'_>,
    existing_only: bool,
    files: &mut dyn Iterator<Item = File>,
) -> usize {
    let rootfd = match archive_root(root) {
        Some(fd) => fd,
        None if existing_only => return 0,
        None => match root.try_clone_to_owned() {
            Ok(fd) => fd,
            Err(_) => return 0,
        },
    };
    let mut files = files.peekable();
    if files.peek().is_none() {
        return 0;
    }
    let db = IndexDb::open(rootfd.as_fd(), &Location::Default, false);
    if !db.is_usable() {
        return 0;
    }
    let mut done = 0;
    for file in files {
        let state = |f: &File| -> Option<Stamp> {
            let st = nix::sys::stat::fstat(f).ok()?;
            (st.st_mode & libc::S_IFMT == libc::S_IFREG).then(|| Stamp::of(&st))
        };
        let Some(before) = state(&file).filter(|s| s.size >= MIGRATE_MIN) else {
            continue;
        };
        if !crate::io::has_magic(&file).unwrap_or(false) {
            continue;
        }
        while !settled(before.ctime, now()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let started = now();
        let Ok(index) = crate::io::build_index(&file) else {
            continue;
        };
        if state(&file) == Some(before) && index.disk_len() + 8 == before.size {
            db.put(&before, started, &index);
            done += 1;
        }
    }
    db.close();
    done
}

/// What [`remove_unused`] did with a tree's index database.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    /// There was none.
    None,
    /// Removed, directory and all (its path).
    Removed(PathBuf),
    /// Left in place (its path, and why).
    Kept(PathBuf, String),
}

/// Removes the index database of the tree at `root` (its
/// `.cutf8fs-index`), for `cutf8 migrate --to utf8` of a whole tree: a tree
/// of plain UTF-8 files has no use for it. Only when it is this user's own
/// by the same checks a mount makes before trusting it (`place`: no
/// symlink, owned by this user, not writable by others, on the tree's
/// filesystem, the file regular with one link), holds nothing else, and
/// the tree is not mounted here (a mount of the tree, even one that has
/// no database yet, may write one at any time). A daemon elsewhere (another
/// host) that used it only loses what it learned: it makes a new one. Everything is reached through descriptors (`unlinkat`),
/// never by a path resolved again.
pub fn remove_unused(root: &Path) -> Removal {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let dir_path = root.join(DIR);
    let kept = |why: String| Removal::Kept(dir_path.clone(), why);
    let Ok(rootfd) = place::open_given_dir(root) else {
        return Removal::None;
    };
    let Ok(root_st) = nix::sys::stat::fstat(&rootfd) else {
        return Removal::None;
    };
    let dir = match place::open_dir(rootfd.as_fd(), Path::new(DIR), false, Some(root_st.st_dev)) {
        Ok(d) => d,
        Err(Unusable::Missing) => return Removal::None,
        Err(Unusable::Bad(why)) => {
            return kept(format!("it {why}: not this user's own, so not removed"))
        }
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let real = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if let Some(at) = crate::mountinfo::cutf8fs_mounts_of_source(&mounts, &real).first() {
        return kept(format!("the tree is mounted at {} (cutf8fs)", at.display()));
    }
    // The database and the companions SQLite and the daemons make beside
    // it; anything else is somebody's.
    let ours = |n: &str| {
        n.strip_prefix(place::FILE)
            .is_some_and(|rest| ["", "-wal", "-shm", "-journal", "-closing"].contains(&rest))
    };
    let names: Vec<String> = match std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) {
        Ok(it) => it
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => return kept(format!("it cannot be listed ({e})")),
    };
    let others: Vec<&String> = names.iter().filter(|n| !ours(n)).collect();
    if !others.is_empty() {
        let others: Vec<&str> = others.iter().map(|s| s.as_str()).collect();
        return kept(format!("it holds other files ({})", others.join(", ")));
    }
    let rule = crate::trust::Rule::our_file(crate::trust::Access::NotShared);
    for name in &names {
        // Each judged like the database before it goes: ours, regular,
        // one link.
        if let Err(why) =
            crate::trust::open_file(dir.as_fd(), name.as_ref(), libc::O_RDONLY, &rule, false)
        {
            return kept(format!("{name} {why}: not removed"));
        }
        if let Err(e) = unlinkat(&dir, name.as_str(), UnlinkatFlags::NoRemoveDir) {
            return kept(format!("{name} cannot be removed ({e})"));
        }
    }
    match unlinkat(&rootfd, DIR, UnlinkatFlags::RemoveDir) {
        Ok(()) => Removal::Removed(dir_path),
        Err(e) => kept(format!("the directory cannot be removed ({e})")),
    }
}
