//! Walking a tree that other users write: each directory reached from its
//! parent's descriptor by one name with its identity checked, never by a
//! path resolved again (`crate::trust` holds the argument).
//!
//! [`Dirs`] records the directories a walk entered and hands out
//! descriptors of them; [`Shard`] splits a walk's files between runs.

mod dirs;
mod shard;

use std::ffi::OsStr;
use std::fs::File;
use std::io;

use nix::fcntl::AtFlags;
use nix::sys::stat::FileStat;

pub use dirs::{DirId, Dirs, Lost, CACHE};
pub use shard::{inode_key, path_key, Shard};

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` of one name.
pub fn stat_at(dir: &File, name: &OsStr) -> io::Result<FileStat> {
    let c = crate::sys::component(name)?;
    nix::sys::stat::fstatat(dir, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(io::Error::from)
}
