//! What the daemon tells about itself: counters, scan progress, and the log lines
//! that explain a refusal.

pub(in crate::fs) mod explain;
pub(in crate::fs) mod progress;
pub mod stats;
