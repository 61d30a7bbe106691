//! Corrected UTF-8 for people who keep archives.
//!
//! Read top to bottom, this crate is the data flow of the two programs:
//!
//! * `cutf8` (the converter, `src/bin/cutf8.rs`) parses arguments and calls
//!   [`convert`] (encode/decode), [`check`] (the document linter) and
//!   [`migrate`] (in-place conversion of whole trees).
//! * `cutf8fs` (the FUSE mount, `src/bin/cutf8fs.rs`) parses arguments and
//!   calls [`fs`], which serves corrected files through an offset [`index`]
//!   (kept across mounts in the [`indexdb`])
//!   and writes to them through [`edit`] (in-place patches, and a crash
//!   [`journal`] for rewrites that shift text).
//! * Everything above stands on [`codec`]: pure conversion between Corrected
//!   UTF-8 (on disk) and standard UTF-8 (the view), with no I/O.
//!
//! Data flows one way: bin → fs/migrate/convert/check → index → codec.

pub mod check;
pub mod convert;
pub mod edit;
pub mod fs;
pub mod index;
pub mod indexdb;
pub mod journal;
pub mod migrate;
pub mod mountinfo;
