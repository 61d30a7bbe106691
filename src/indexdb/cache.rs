//! Keeps the cache directory of index databases (`place::cache_dir`)
//! small: at every daemon's start it removes the databases of trees that
//! are gone, those unused for [`Limits::days`], and beyond [`Limits::max`]
//! bytes in all the least recently used first; never one whose tree is
//! mounted, never a file that is not ours.
//!
//! An entry is a database `index-NAME-HASH.sqlite` and its companions
//! (`-wal`, `-shm`, `-journal`, `-closing`, and `-tree`, which holds
//! BACKING's path: written by every daemon that uses the entry, so its
//! mtime is when the entry was last used, and checked against the HASH in
//! the name, so a tree file of someone else's names no tree). Every file
//! of an entry is judged before anything of it goes, by the rules the
//! database itself is opened by (`crate::trust`: a regular file of the
//! daemon's user, one link, not writable by others, reached without a
//! symlink), and the database must be empty or begin with SQLite's header
//! and our application id: an entry with one file that fails is left
//! whole. Removal is by name in the checked directory's descriptor.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::place;
use crate::trust::{Access, Rule, Unusable};

/// The companions of a database in the cache directory, itself first.
pub(super) const SUFFIXES: [&str; 6] = ["", "-wal", "-shm", "-journal", "-closing", TREE];
/// The companion that names the entry's BACKING.
pub(super) const TREE: &str = "-tree";

/// Default bound of the whole cache directory: 1 GiB.
pub const DEFAULT_MAX: u64 = 1 << 30;
/// Default expiry: as long as a record unused is kept in a database
/// (`MAX_AGE_DAYS`), so an entry that old holds nothing a mount would keep.
pub const DEFAULT_DAYS: u32 = super::MAX_AGE_DAYS;

/// How much the cache directory may hold (`-o index_db_cache_max=`,
/// `-o index_db_cache_days=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of all entries together.
    pub max: u64,
    /// Days an entry may go unused.
    pub days: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max: DEFAULT_MAX,
            days: DEFAULT_DAYS,
        }
    }
}

/// The HASH of a database's file name for BACKING `backing` (FNV-1a of its
/// path: stable across builds and machines).
pub(super) fn hash(backing: &Path) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in backing.as_os_str().as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The entry (database file name) and companion suffix `name` is, if it
/// has the form of one of ours: `index-NAME-HASH.sqlite` + a suffix, NAME
/// at most 32 of `[A-Za-z0-9_]`, HASH 16 hex digits.
fn parse(name: &OsStr) -> Option<(String, &'static str, u64)> {
    let name = name.to_str()?;
    let (stem, suffix) = SUFFIXES.iter().rev().find_map(|s| {
        let stem = name.strip_suffix(s)?;
        stem.ends_with(".sqlite").then_some((stem, *s))
    })?;
    let inner = stem.strip_prefix("index-")?.strip_suffix(".sqlite")?;
    let (base, hex) = inner.rsplit_once('-')?;
    if base.len() > 32 || !base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    if hex.len() != 16
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    let h = u64::from_str_radix(hex, 16).ok()?;
    Some((stem.to_string(), suffix, h))
}

/// Writes BACKING's path into the entry's tree file beside the database
/// `db_name` in the checked directory `dir` (its mtime: now).
pub(super) fn note_use(dir: BorrowedFd<'_>, db_name: &Path, backing: &Path) {
    use std::io::Write;
    let mut name = db_name.as_os_str().to_os_string();
    name.push(TREE);
    let rule = Rule::our_file(Access::NotShared);
    if let Ok(mut f) = crate::trust::open_file(dir, &name, libc::O_WRONLY, &rule, true) {
        let _ = f.set_len(0);
        let _ = f.write_all(backing.as_os_str().as_bytes());
    }
}

/// One entry found in the cache directory.
#[derive(Debug)]
struct Entry {
    /// The database's file name.
    stem: String,
    /// Its files' names present.
    names: Vec<OsString>,
    bytes: u64,
    /// Seconds since the epoch it was last used.
    used: i64,
    /// BACKING, when a tree file names it.
    tree: Option<PathBuf>,
}

/// SQLite's header, and where it keeps `PRAGMA application_id`.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const APP_ID_AT: usize = 68;

/// Whether the database file `f` is ours: empty, or SQLite with our id.
fn is_our_database(f: &std::fs::File) -> bool {
    let mut head = [0u8; APP_ID_AT + 4];
    match crate::io::read_full_at(f, &mut head, 0) {
        Ok(0) => true,
        Ok(n) if n == head.len() => {
            head.starts_with(SQLITE_MAGIC)
                && i64::from(u32::from_be_bytes(head[APP_ID_AT..].try_into().unwrap()))
                    == super::store::APP_ID
        }
        _ => false,
    }
}

/// Judges every file of the entry `stem` (names `names`) in `dir`: its
/// size, last use and tree, or None when one of them is not ours.
fn judge(dir: BorrowedFd<'_>, stem: &str, hash: u64, names: Vec<OsString>) -> Option<Entry> {
    let rule = Rule::our_file(Access::NotShared);
    let (mut bytes, mut used, mut tree) = (0u64, i64::MIN, None);
    for name in &names {
        let f = match crate::trust::open_file(dir, name, libc::O_RDONLY, &rule, false) {
            Ok(f) => f,
            // Gone meanwhile (a daemon's companion): nothing to judge.
            Err(Unusable::Missing) => continue,
            Err(Unusable::Bad(_)) => return None,
        };
        if name.as_bytes() == stem.as_bytes() && !is_our_database(&f) {
            return None;
        }
        let st = nix::sys::stat::fstat(&f).ok()?;
        bytes += st.st_size as u64;
        used = used.max(st.st_mtime);
        if name.as_bytes().ends_with(TREE.as_bytes()) {
            let mut v = Vec::new();
            use std::io::Read;
            let _ = (&f).take(4097).read_to_end(&mut v);
            let p = PathBuf::from(OsString::from_vec(v));
            if p.is_absolute() && self::hash(&p) == hash {
                tree = Some(p);
            }
        }
    }
    Some(Entry {
        stem: stem.to_string(),
        names,
        bytes,
        used,
        tree,
    })
}

/// Whether the tree at `p` is gone: nothing at its path, or not a
/// directory any more.
fn gone(p: &Path) -> bool {
    match std::fs::symlink_metadata(p) {
        Ok(m) => !m.is_dir(),
        Err(e) => matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)),
    }
}

/// Opens the cache directory `dir` when it exists, checked (never made).
fn open_existing(dir: &Path) -> Option<OwnedFd> {
    let parent = place::open_given_dir(dir.parent()?).ok()?;
    place::open_dir(parent.as_fd(), Path::new(dir.file_name()?), false, None).ok()
}

/// What a run of [`tidy`] removed: (database path, why).
pub type Removed = Vec<(PathBuf, String)>;

/// Tidies the cache directory by `limits`, at `now` (seconds since the
/// epoch), keeping the entry of `keep` (the BACKING this daemon is about
/// to use). Logs one line per entry removed; returns them.
pub fn tidy(limits: Limits, keep: Option<&Path>) -> Removed {
    let Some(dir) = place::cache_dir() else {
        return Vec::new();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let Some(fd) = open_existing(&dir) else {
        return Vec::new();
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let removed = tidy_in(fd.as_fd(), limits, now, &|p: &Path| {
        keep.is_some_and(|k| k == p)
            || !crate::mountinfo::cutf8fs_mounts_of_source(&mounts, p).is_empty()
    });
    for (name, why) in &removed {
        log::info!("index cache: removed {} ({why})", dir.join(name).display());
    }
    removed
        .into_iter()
        .map(|(n, why)| (dir.join(n), why))
        .collect()
}

/// [`tidy`] in the checked directory `dir`; `in_use` says whether a tree
/// is mounted (or is this daemon's). Returns the names removed, and why.
fn tidy_in(
    dir: BorrowedFd<'_>,
    limits: Limits,
    now: i64,
    in_use: &dyn Fn(&Path) -> bool,
) -> Vec<(PathBuf, String)> {
    let Ok(list) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return Vec::new();
    };
    let mut groups: std::collections::BTreeMap<String, (u64, Vec<OsString>)> = Default::default();
    for e in list.filter_map(Result::ok) {
        let name = e.file_name();
        if let Some((stem, _, h)) = parse(&name) {
            groups.entry(stem).or_insert((h, Vec::new())).1.push(name);
        }
    }
    let mut entries: Vec<Entry> = groups
        .into_iter()
        .filter_map(|(stem, (h, names))| judge(dir, &stem, h, names))
        .collect();
    let mut removed = Vec::new();
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let busy = |e: &Entry| e.tree.as_deref().is_some_and(in_use);
    // Oldest first: the bound drops from the front.
    entries.sort_by_key(|e| e.used);
    let max_age = i64::from(limits.days) * 86_400;
    for e in &entries {
        if busy(e) {
            continue;
        }
        let why = match &e.tree {
            Some(t) if gone(t) => format!("its tree {} is gone", t.display()),
            _ if now - e.used > max_age => {
                format!("unused for more than {} days", limits.days)
            }
            _ if total > limits.max => format!(
                "the cache is over its bound of {} bytes; this entry was the least recently used",
                limits.max
            ),
            _ => continue,
        };
        if remove(dir, e) {
            total -= e.bytes;
            removed.push((PathBuf::from(&e.stem), why));
        }
    }
    removed
}

/// Removes the entry's files, each judged again just before (the
/// database last); false if one is not ours or cannot be removed.
fn remove(dir: BorrowedFd<'_>, e: &Entry) -> bool {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    let rule = Rule::our_file(Access::NotShared);
    let mut names: Vec<&OsString> = e.names.iter().collect();
    names.sort_by_key(|n| n.as_bytes() == e.stem.as_bytes());
    for name in names {
        match crate::trust::open_file(dir, name, libc::O_RDONLY, &rule, false) {
            Ok(f) if name.as_bytes() == e.stem.as_bytes() && !is_our_database(&f) => return false,
            Ok(_) => {}
            Err(Unusable::Missing) => continue,
            Err(Unusable::Bad(_)) => return false,
        }
        match unlinkat(dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_ours_only() {
        let (stem, suf, h) = parse(OsStr::new("index-a_b-00000000000000ff.sqlite-wal")).unwrap();
        assert_eq!(
            (stem.as_str(), suf, h),
            ("index-a_b-00000000000000ff.sqlite", "-wal", 255)
        );
        assert!(parse(OsStr::new("index-a-00000000000000ff.sqlite")).is_some());
        assert!(parse(OsStr::new("index-a-00000000000000ff.sqlite-tree")).is_some());
        assert!(parse(OsStr::new("index-a-00000000000000FF.sqlite")).is_none());
        assert!(parse(OsStr::new("index-a-ff.sqlite")).is_none());
        assert!(parse(OsStr::new("index-a.b-00000000000000ff.sqlite")).is_none());
        assert!(parse(OsStr::new("index-a-00000000000000ff.sqlite.bak")).is_none());
        assert!(parse(OsStr::new("notes.txt")).is_none());
    }

    #[test]
    fn the_name_and_the_tree_file_agree() {
        let p = Path::new("/srv/archive");
        let name = place::cache_file_name(p);
        let (_, _, h) = parse(name.as_os_str()).unwrap();
        assert_eq!(h, hash(p));
    }
}
