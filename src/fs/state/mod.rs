//! What the daemon keeps per inode and per open file: the inode table, handles,
//! the content of regular files, the write path and per-user shares.

pub(in crate::fs) mod content;
pub(in crate::fs) mod errseq;
pub(in crate::fs) mod handles;
pub(in crate::fs) mod inodes;
pub(in crate::fs) mod passthrough;
pub(in crate::fs) mod privs;
pub(in crate::fs) mod rawnew;
pub(in crate::fs) mod recent;
pub(in crate::fs) mod share;
pub(in crate::fs) mod write;
