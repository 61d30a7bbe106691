//! Corrected UTF-8 for people who keep archives.
//!
//! Read top to bottom, this crate is the data flow of the two programs:
//!
//! * `cutf8` (the converter, `src/bin/cutf8.rs`) parses arguments and calls
//!   [`convert`] (encode/decode), [`check`] (the document linter) and
//!   [`migrate`] (in-place conversion of whole trees).
//! * `cutf8fs` (the FUSE mount, `src/bin/cutf8fs.rs`) parses arguments and
//!   calls [`fs`], which keeps inodes, handles and per-file state and turns
//!   errors into errno. For the content of a corrected file it plans with
//!   [`view`] (pure: the offset index, which disk bytes a read needs, what a
//!   write does — in place, extension, tail rewrite, or content that cannot
//!   be stored) and executes the plans with [`io`], the only code that reads
//!   and writes backing file contents (tail rewrites go through the crash
//!   [`journal`]).
//! * Everything above stands on the `cutf8` crate: pure conversion between Corrected
//!   UTF-8 (on disk) and standard UTF-8 (the view), with no I/O.
//!
//! Data flows one way: bin → fs/migrate/convert/check → io → view → codec.

pub mod check;
pub mod convert;
pub mod fs;
pub mod io;
pub mod journal;
pub mod migrate;
pub mod mountinfo;
pub mod view;
