//! The state of a backing file, as far as its content goes: anything known
//! about the content (class, offset index) is kept under the stamp it was
//! learned from and used only while a fresh `fstat` gives the same stamp.
//!
//! The one file-stamp type of the crate: the mount's caches, the index
//! database's records (`crate::indexdb`, which stores them) and migrate's
//! "did it change while I converted it" check all compare `Stamp`s.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;

/// One state of a backing file: equal stamps mean unchanged content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of a `stat` result.
    pub fn of(st: &libc::stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// The stamp of `file` now (one `fstat`).
    pub fn now(file: &File) -> io::Result<Stamp> {
        Ok(Stamp::of(&nix::sys::stat::fstat(file)?))
    }

    /// The stamp of what `std::fs::metadata` returned.
    pub fn of_metadata(md: &Metadata) -> Stamp {
        Stamp {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
        }
    }
}
