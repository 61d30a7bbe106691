//! Corrected UTF-8 for people who keep archives: the library behind the
//! `cutf8` converter and the `cutf8fs` mount. (A program that only wants to
//! speak Corrected UTF-8 depends on the codec crate, [`cutf8`], alone.)
//!
//! Data flows one way, top to bottom:
//!
//! ```text
//!  src/bin/cutf8/   (clap, indicatif)        src/bin/cutf8fs.rs   (clap)
//!    │ encode/decode   │ check   │ migrate          │
//!    ▼                 ▼         ▼                  ▼
//!  convert           check     migrate ───┐        fs (fuser: daemon, mount,
//!    │                 │         │        │          │  inodes, ops, write)
//!    │                 │         │        │          ├──► edit ──► journal
//!    │                 │         │        │          ▼      │
//!    │                 │         │        │        index ◄──┘
//!    ▼                 ▼         ▼        ▼          ▼
//!  cutf8 (the codec crate: bytes in, bytes out, no I/O)
//!
//!  sys: the one syscall layer (nix; the few raw libc calls), used by
//!       fs and migrate
//! ```
//!
//! * [`convert`] (encode/decode of streams), [`check`] (the document
//!   linter) and [`migrate`] (in-place conversion of whole trees) are the
//!   converter's subcommands. They parse no arguments and draw no progress
//!   bars: the binary does (`src/bin/cutf8/`), and hands them plain options
//!   and an observer.
//! * [`fs`] serves the mount: corrected files are read through an offset
//!   `index` (view offset → disk offset) and written through [`edit`]
//!   (in-place patches, appends, and rewrites under the crash [`journal`]).
//! * [`sys`] is the only place that makes system calls `std` lacks;
//!   `mountinfo` reads `/proc/self/mountinfo`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod convert;
pub mod edit;
pub mod fs;
mod index;
pub mod journal;
pub mod migrate;
mod mountinfo;
pub mod sys;
