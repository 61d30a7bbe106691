//! Keeping the kernel's caches true: what changed in BACKING behind the daemon,
//! what to invalidate, reads in flight against those invalidations, and a
//! dead peer daemon's rewrite this daemon finishes (`peers`).

pub(in crate::fs) mod inflight;
pub(in crate::fs) mod invalidate;
pub(in crate::fs) mod peers;
pub(in crate::fs) mod watch;
