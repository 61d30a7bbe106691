//! Where the index database lives, and the checks before it is trusted.
//!
//! Knows descriptors, never paths resolved later: the directory holding the
//! database is opened once and the file relative to it, both judged by the
//! rules of `crate::trust` (which holds the whole argument): the directory
//! owned by the daemon's effective user, not writable by group or others,
//! and for the default place on BACKING's filesystem; the file a regular
//! file of the daemon's with one link, not writable by group or others,
//! never reached through a symlink. A place that fails a check is not
//! used: the caller logs one line and falls back.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::trust::{self, Access, Rule, Unusable};

/// The directory at BACKING's root that holds the database.
pub const DIR: &str = ".cutf8fs-index";
/// The database file in its directory.
pub const FILE: &str = "index.sqlite";

fn euid() -> u32 {
    trust::euid()
}

/// Opens (creating it, mode 0700, when `create`) and checks the directory
/// `name` under `parent`. `same_dev`: it must be on this device.
pub fn open_dir(
    parent: BorrowedFd<'_>,
    name: &Path,
    create: bool,
    same_dev: Option<u64>,
) -> Result<OwnedFd, Unusable> {
    let mut rule = Rule::our_dir(Access::NotShared);
    rule.device = same_dev;
    trust::open_dir(parent, name.as_os_str(), &rule, create)
}

/// Whether the daemon may create entries in the directory `dir`.
pub fn writable(dir: BorrowedFd<'_>) -> bool {
    nix::unistd::faccessat(
        dir,
        ".",
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
        nix::fcntl::AtFlags::AT_EACCESS,
    )
    .is_ok()
}

/// Opens (creating it, mode 0600) and checks the database file `name` in
/// the checked directory `dir`.
pub fn open_file(dir: BorrowedFd<'_>, name: &Path) -> Result<File, String> {
    let rule = Rule::our_file(Access::NotShared);
    trust::open_file(dir, name.as_os_str(), libc::O_RDWR, &rule, true).map_err(|r| r.to_string())
}

/// Opens a directory given by the administrator (`-o index_db=PATH`'s
/// parent, or the cache directory's parent): resolved as given.
pub fn open_given_dir(path: &Path) -> io::Result<OwnedFd> {
    let p = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    nix::fcntl::open(p, flags, Mode::empty()).map_err(io::Error::from)
}

/// The environment variable that names the cache directory instead (an
/// absolute path): for a site that keeps caches elsewhere, and for tests.
pub const CACHE_DIR_ENV: &str = "CUTF8FS_CACHE_DIR";

/// The per-user (or, for root, per-system) cache directory:
/// [`CACHE_DIR_ENV`] when set, else `/var/cache/cutf8fs` for root, else
/// `$XDG_CACHE_HOME/cutf8fs` or `~/.cache/cutf8fs`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os(CACHE_DIR_ENV).filter(|v| Path::new(v).is_absolute()) {
        return Some(PathBuf::from(d));
    }
    if euid() == 0 {
        return Some(PathBuf::from("/var/cache/cutf8fs"));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| Path::new(v).is_absolute())
                .map(|h| Path::new(&h).join(".cache"))
        })?;
    Some(base.join("cutf8fs"))
}

/// The database's file name in the cache directory for BACKING at `backing`
/// (its absolute path when the mount started): one file per BACKING.
pub fn cache_file_name(backing: &Path) -> PathBuf {
    let h = super::cache::hash(backing);
    let base: String = backing
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    PathBuf::from(format!("index-{base}-{h:016x}.sqlite"))
}

/// Opens the cache directory (creating it and its parents), checked.
pub fn open_cache_dir(dir: &Path) -> Result<OwnedFd, String> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if let Err(e) = std::fs::create_dir_all(parent) {
        return Err(format!("cannot be created ({e})"));
    }
    let pfd = open_given_dir(parent).map_err(|e| format!("cannot be opened ({e})"))?;
    let name = dir.file_name().map(Path::new).unwrap_or(Path::new("."));
    open_dir(pfd.as_fd(), name, true, None).map_err(|r| r.to_string())
}
