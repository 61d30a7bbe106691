//! Keeping the kernel's caches true: what changed in BACKING behind the daemon,
//! what to invalidate, and reads in flight against those invalidations.

pub(in crate::fs) mod inflight;
pub(in crate::fs) mod invalidate;
pub(in crate::fs) mod watch;
