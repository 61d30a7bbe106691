//! Which new files stay raw whatever is written into them (this needs the
//! file's path below BACKING: `Inode::path`).
//!
//! A file that holds no content takes the encoding of its first write
//! (docs/behaviour.md, "The mount"), except, by default, where tools outside the mount read the
//! same bytes:
//!
//! * files under version-control metadata (`.git`, `.hg`, `.svn`; the list
//!   is `-o rawdirs=`): git on BACKING must still read `.git/HEAD`;
//! * scripts (`crate::view::sniff::is_script`: `#!` and an interpreter,
//!   as the kernel reads it, but not Rust's `#![` inner attributes): the
//!   kernel reads the `#!` line from BACKING when the script is run from
//!   there, and a magic number in front of it would make it unrunnable.
//!   `cutf8 migrate` leaves the same files raw.
//!
//! The path is the one the inode table last saw the file under (renames
//! through the mount included). Called by the write path (`write.rs`);
//! knows nothing of FUSE.

use std::ffi::OsString;
use std::path::Path;

/// The default of `-o rawdirs=`.
pub const DEFAULT_RAWDIRS: &str = ".git:.hg:.svn";

/// What decides that a new file stays raw.
pub struct RawPolicy {
    /// Directory names under which new files stay raw.
    dirs: Vec<OsString>,
}

impl RawPolicy {
    /// `dirs`: the names of `-o rawdirs=`.
    pub fn new(dirs: &[OsString]) -> Self {
        RawPolicy {
            dirs: dirs.to_vec(),
        }
    }

    /// Whether a file that holds nothing yet must stay raw when `first`
    /// is written at offset 0.
    pub fn keeps_raw(&self, rel: &str, first: &[u8]) -> bool {
        crate::view::sniff::is_script(first) || under(Path::new(rel), &self.dirs)
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
