//! Which new files stay raw whatever is written into them, and how a file
//! is named in the log: both need the file's path below BACKING.
//!
//! A file that holds no content takes the encoding of its first write
//! (SPEC §3), except, by default, where tools outside the mount read the
//! same bytes:
//!
//! * files under version-control metadata (`.git`, `.hg`, `.svn`; the list
//!   is `-o rawdirs=`): git on BACKING must still read `.git/HEAD`;
//! * files whose first write begins with `#!`: the kernel reads the `#!`
//!   line from BACKING when the script is run from there, and a magic
//!   number in front of it would make it unrunnable.
//!
//! The path comes from the kernel (`/proc/self/fd` of the inode's `O_PATH`
//! descriptor), so it is the file's name now, whatever renames happened.
//! Called by the write path (`write.rs`); knows nothing of FUSE.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// The default of `-o rawdirs=`.
pub const DEFAULT_RAWDIRS: &str = ".git:.hg:.svn";

/// What decides that a new file stays raw.
pub struct RawPolicy {
    /// BACKING as the kernel names it (for relative paths in the log).
    root: PathBuf,
    /// Directory names under which new files stay raw.
    dirs: Vec<OsString>,
}

impl RawPolicy {
    /// `root` is BACKING's descriptor; `dirs` the names of `-o rawdirs=`.
    pub fn new(root: BorrowedFd<'_>, dirs: &[OsString]) -> Self {
        RawPolicy {
            root: fd_path(root).unwrap_or_default(),
            dirs: dirs.to_vec(),
        }
    }

    /// The file's path relative to BACKING (`inode N` when unknown).
    pub fn name(&self, fd: BorrowedFd<'_>, ino: u64) -> String {
        match fd_path(fd) {
            Some(p) => match p.strip_prefix(&self.root) {
                Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
                Ok(rel) => rel.display().to_string(),
                Err(_) => p.display().to_string(),
            },
            None => format!("inode {ino}"),
        }
    }

    /// Whether a file that holds nothing yet must stay raw when `first`
    /// is written at offset 0.
    pub fn keeps_raw(&self, fd: BorrowedFd<'_>, first: &[u8]) -> bool {
        if first.starts_with(b"#!") {
            return true;
        }
        if self.dirs.is_empty() {
            return false;
        }
        let Some(p) = fd_path(fd) else {
            return false;
        };
        let rel = p.strip_prefix(&self.root).unwrap_or(&p);
        under(rel, &self.dirs)
    }
}

/// Whether a directory component of `rel` (not its last component) is
/// one of `dirs`.
fn under(rel: &Path, dirs: &[OsString]) -> bool {
    let parent = rel.parent().unwrap_or(Path::new(""));
    parent
        .components()
        .any(|c| dirs.iter().any(|d| c.as_os_str() == d.as_os_str()))
}

fn fd_path(fd: BorrowedFd<'_>) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Parses `-o rawdirs=` (names separated by `:`; empty: none).
pub fn parse_rawdirs(v: &str) -> Result<Vec<OsString>, String> {
    let mut dirs = Vec::new();
    for d in v.split(':').filter(|d| !d.is_empty()) {
        if d.contains('/') || d == "." || d == ".." {
            return Err(format!(
                "rawdirs: {d:?} is not a directory name (names separated by ':', \
                 e.g. rawdirs={DEFAULT_RAWDIRS})"
            ));
        }
        dirs.push(OsString::from(d));
    }
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directory_components_count() {
        let dirs = parse_rawdirs(DEFAULT_RAWDIRS).unwrap();
        assert!(under(Path::new(".git/HEAD"), &dirs));
        assert!(under(Path::new("a/.hg/store/x"), &dirs));
        assert!(!under(Path::new(".git"), &dirs), "a file named .git");
        assert!(!under(Path::new("a/.gitignore"), &dirs));
        assert!(!under(Path::new("x.git/y"), &dirs));
        assert!(parse_rawdirs("").unwrap().is_empty());
        assert!(parse_rawdirs("a/b").is_err());
    }
}
