//! The few system calls std does not offer, each a thin safe wrapper:
//! `*at` calls relative to a directory descriptor (so a file is always
//! touched in the directory the walk saw, never through a symlink), xattr
//! copying and `flock`. Nothing here knows what migrate is for.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Open the directory `path` without following a symlink in its last
/// component.
pub fn open_dir(path: &Path) -> io::Result<File> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: `c` is a valid NUL-terminated string; open has no other
    // memory requirements.
    let fd = check(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by open and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
pub fn open_at(dir: &File, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<File> {
    let c = cstr(name.as_bytes())?;
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: valid directory fd and NUL-terminated name.
    let fd =
        check(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Open `name` in `dir` for reading without touching its atime when the
/// kernel allows that (O_NOATIME needs ownership or CAP_FOWNER).
pub fn open_read_at(dir: &File, name: &OsStr, write: bool) -> io::Result<File> {
    let base = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_NONBLOCK;
    match open_at(dir, name, base | libc::O_NOATIME, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open_at(dir, name, base, 0),
        r => r,
    }
}

/// `renameat(dir, from, dir, to)`.
pub fn rename_at(dir: &File, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (f, t) = (cstr(from.as_bytes())?, cstr(to.as_bytes())?);
    // SAFETY: valid fds and NUL-terminated names.
    check(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })?;
    Ok(())
}

/// `unlinkat(dir, name, 0)`.
pub fn unlink_at(dir: &File, name: &OsStr) -> io::Result<()> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: valid fd and NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) })?;
    Ok(())
}

/// `flock(fd, LOCK_EX)`: keeps two runs off one multiply linked file.
pub fn lock_exclusive(f: &File) -> io::Result<()> {
    // SAFETY: plain syscall on a valid fd.
    check(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) })?;
    Ok(())
}

/// All extended attributes of `f` as (name, value) pairs.
pub fn list_xattrs(f: &File) -> io::Result<Vec<(CString, Vec<u8>)>> {
    let fd = f.as_raw_fd();
    let mut names = vec![0u8; 1024];
    let len = loop {
        // SAFETY: the buffer pointer and length describe `names`.
        let n = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    };
    let mut out = Vec::new();
    for name in names[..len].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = cstr(name)?;
        let mut value = vec![0u8; 256];
        loop {
            // SAFETY: `cname` is NUL-terminated; pointer and length describe
            // `value`.
            let n = unsafe {
                libc::fgetxattr(fd, cname.as_ptr(), value.as_mut_ptr().cast(), value.len())
            };
            if n >= 0 {
                value.truncate(n as usize);
                break;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => value.resize(value.len() * 4, 0),
                // Removed since it was listed: nothing to copy.
                Some(libc::ENODATA) => {
                    value.clear();
                    break;
                }
                _ => return Err(e),
            }
        }
        out.push((cname, value));
    }
    Ok(out)
}

/// Set each (name, value) pair on `f`.
pub fn set_xattrs(f: &File, attrs: &[(CString, Vec<u8>)]) -> io::Result<()> {
    for (name, value) in attrs {
        // SAFETY: `name` is NUL-terminated; pointer and length describe
        // `value`.
        check(unsafe {
            libc::fsetxattr(
                f.as_raw_fd(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot keep xattr {}: {e}", name.to_string_lossy()),
            )
        })?;
    }
    Ok(())
}

/// `syncfs(fd)`: write out everything dirty on `f`'s filesystem and wait.
pub fn sync_fs(f: &File) -> io::Result<()> {
    // SAFETY: plain syscall on a valid fd.
    check(unsafe { libc::syncfs(f.as_raw_fd()) })?;
    Ok(())
}

/// What [`stat_at`] compares: enough to notice that a file changed.
pub struct Stamp {
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// Whether the file differs from the one `md` described.
    pub fn differs(&self, md: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        (self.ino, self.size, self.mtime, self.ctime)
            != (
                md.ino(),
                md.size() as i64,
                (md.mtime(), md.mtime_nsec()),
                (md.ctime(), md.ctime_nsec()),
            )
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn stat_at(dir: &File, name: &OsStr) -> io::Result<Stamp> {
    let c = cstr(name.as_bytes())?;
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, NUL-terminated name, `st` is writable.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(Stamp {
        ino: st.st_ino,
        size: st.st_size,
        mtime: (st.st_mtime, st.st_mtime_nsec),
        ctime: (st.st_ctime, st.st_ctime_nsec),
    })
}
