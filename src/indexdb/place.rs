//! Where the index database lives, and the checks before it is trusted.
//!
//! Knows descriptors, never paths resolved later: the directory holding the
//! database is opened once (`O_DIRECTORY | O_NOFOLLOW`), checked (owned by
//! the daemon's effective user, not writable by group or others, and for
//! the default place on BACKING's filesystem), and the file is opened
//! relative to it with `O_NOFOLLOW` and checked again (a regular file,
//! ours, one link, mode without group/other write). A place that fails a
//! check is not used: the caller logs one line and falls back.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, FileStat, Mode, SFlag};

/// The directory at BACKING's root that holds the database.
pub const DIR: &str = ".cutf8fs-index";
/// The database file in its directory.
pub const FILE: &str = "index.redb";

fn nix_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Why a directory or file is not trusted, or None when it is.
fn distrust(st: &FileStat, want: SFlag) -> Option<String> {
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != want {
        return Some(if want == SFlag::S_IFDIR {
            "is not a directory".into()
        } else {
            "is not a regular file".into()
        });
    }
    if st.st_uid != euid() {
        return Some(format!(
            "is owned by uid {}, not by the daemon's user (uid {})",
            st.st_uid,
            euid()
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Some(format!(
            "is writable by group or others (mode {:04o})",
            st.st_mode & 0o7777
        ));
    }
    if want == SFlag::S_IFREG && st.st_nlink != 1 {
        return Some(format!("has {} hard links, not one", st.st_nlink));
    }
    None
}

/// Why a directory is not used.
#[derive(Debug)]
pub enum Refused {
    /// It does not exist (and was not to be created).
    Missing,
    /// It is not trusted, or cannot be opened: why.
    Bad(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Missing => f.write_str("does not exist"),
            Refused::Bad(why) => f.write_str(why),
        }
    }
}

/// Opens (creating it, mode 0700, when `create`) and checks the directory
/// `name` under `parent`. `same_dev`: it must be on this device.
pub fn open_dir(
    parent: BorrowedFd<'_>,
    name: &Path,
    create: bool,
    same_dev: Option<u64>,
) -> Result<OwnedFd, Refused> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(parent, name, flags, Mode::empty()) {
        Err(Errno::ENOENT) if !create => return Err(Refused::Missing),
        Err(Errno::ENOENT) => {
            match mkdirat(parent, name, Mode::S_IRWXU) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(Refused::Bad(format!("cannot be created ({e})"))),
            }
            openat(parent, name, flags, Mode::empty())
        }
        r => r,
    }
    .map_err(|e| {
        Refused::Bad(match e {
            Errno::ENOTDIR | Errno::ELOOP => "is not a directory (or is a symlink)".to_owned(),
            e => format!("cannot be opened ({e})"),
        })
    })?;
    let st = fstat(&fd).map_err(|e| Refused::Bad(format!("cannot be checked ({e})")))?;
    if let Some(why) = distrust(&st, SFlag::S_IFDIR) {
        return Err(Refused::Bad(why));
    }
    if same_dev.is_some_and(|d| d != st.st_dev) {
        return Err(Refused::Bad("is not on BACKING's filesystem".into()));
    }
    Ok(fd)
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
    let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        dir,
        name,
        flags | OFlag::O_NONBLOCK,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .map_err(|e| match e {
        Errno::ELOOP => "is a symlink".to_owned(),
        e => format!("cannot be opened ({e})"),
    })?;
    let st = fstat(&fd).map_err(|e| format!("cannot be checked ({e})"))?;
    if let Some(why) = distrust(&st, SFlag::S_IFREG) {
        return Err(why);
    }
    // Back to blocking I/O (O_NONBLOCK only kept a planted FIFO from
    // hanging the open).
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_RDWR))
        .map_err(|e| format!("cannot be used ({e})"))?;
    Ok(File::from(fd))
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
    nix::fcntl::open(p, flags, Mode::empty()).map_err(nix_io)
}

/// The per-user (or, for root, per-system) cache directory's parent and
/// name: `/var/cache` + `cutf8fs` for root, else `$XDG_CACHE_HOME` or
/// `~/.cache` + `cutf8fs`.
pub fn cache_dir() -> Option<PathBuf> {
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
    use std::os::unix::ffi::OsStrExt;
    // FNV-1a: stable across builds and machines.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in backing.as_os_str().as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let base: String = backing
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    PathBuf::from(format!("index-{base}-{h:016x}.redb"))
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
