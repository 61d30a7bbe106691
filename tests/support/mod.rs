//! What the integration tests share: the mount guard ([`mount`]), checks of
//! what writes left in BACKING ([`write`]), real unprivileged users
//! ([`users`]) and the `cutf8` runner ([`cli`]).

pub mod cli;
pub mod mount;
pub mod users;
pub mod write;
