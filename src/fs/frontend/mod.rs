//! The FUSE frontend: requests in, replies out — the `Filesystem` trait, the
//! operations, errno mapping, options, and the daemon's and mount's life.

pub(in crate::fs) mod archive;
pub(in crate::fs) mod attr;
pub(in crate::fs) mod daemon;
pub(in crate::fs) mod error;
pub(in crate::fs) mod failure;
pub(in crate::fs) mod memory;
pub(in crate::fs) mod mount;
pub(in crate::fs) mod ops;
pub mod options;
pub(in crate::fs) mod remount;
pub(in crate::fs) mod requests;
