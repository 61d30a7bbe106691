//! What the integration tests share: the mount guard ([`mount`]), checks of
//! what writes left in BACKING ([`write`]), real unprivileged users
//! ([`users`]), the `cutf8` runner ([`cli`]) and small filesystems that
//! fill up ([`disk`]: a loop-mounted ext4, a tmpfs), file handles
//! with the kernel's caches emptied ([`handles`]), and a daemon's reads
//! of chosen files held until the test lets them go ([`gate`]).

pub mod cli;
pub mod disk;
pub mod gate;
pub mod handles;
pub mod mount;
pub mod run;
pub mod servers;
pub mod users;
pub mod write;
