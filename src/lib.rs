//! Corrected UTF-8 for people who keep archives: the library behind the
//! `cutf8` converter and the `cutf8fs` mount. (A program that only wants to
//! speak Corrected UTF-8 depends on the codec crate, [`cutf8`], alone.)
//!
//! Data flows one way, top to bottom (an arrow is "imports"; nothing
//! imports upwards):
//!
//! ```text
//!  src/bin/cutf8/   (clap, indicatif)            src/bin/cutf8fs.rs   (clap)
//!    │ encode/decode   │ check     │ migrate            │
//!    ▼                 ▼           ▼                    ▼
//!  convert ◄──────── check ◄──── migrate              fs (fuser: daemon, mount, inodes,
//!    │                 │           │                   │  handles, ops/, errno in error.rs)
//!    │                 │           ├──────────┬────────┤
//!    │                 │           │          ▼        ▼
//!    │                 │           │        indexdb ──► io (the only reader/writer of backing
//!    │                 │           │          │        │  contents; stamps) ──► redo (journal)
//!    │                 │           ├──────────┴────────┤
//!    │                 │           ▼                   ▼
//!    │                 │          view (pure planning: offset index, read plans,
//!    │                 │           │    write plans, the magic guard; no fds)
//!    ▼                 ▼           ▼
//!  codec (the program's use of the codec crate: SIMD level, Coder)
//!    ▼
//!  cutf8 (the codec crate: bytes in, bytes out, no I/O)
//!
//!  beside them, used from above: walk (the one walk of trees others
//!  write; check, migrate) → trust (what in BACKING is ours; used by
//!  check, migrate, indexdb, redo, fs) → sys (system calls beyond a single
//!  nix call); ratelog (fs, redo); mountinfo (check, migrate, indexdb, fs)
//! ```
//!
//! * [`convert`] (encode/decode of streams), [`check`] (the document
//!   linter) and [`migrate`] (in-place conversion of whole trees) are the
//!   converter's subcommands. They parse no arguments and draw no progress
//!   bars: the binary does (`src/bin/cutf8/`), and hands them plain options
//!   and an observer. [`convert::Position`] is their one line/column type.
//! * [`fs`] serves the mount: it keeps inodes, handles and per-file state
//!   and turns errors into errno (`fs/frontend/error.rs`, the one place). For the
//!   content of a corrected file it plans with [`view`] (pure: the offset
//!   index, which disk bytes a read needs, what a write does — in place,
//!   extension, tail rewrite, or content that cannot be stored) and executes
//!   the plans with [`io`], the only code that reads and writes backing file
//!   contents (tail rewrites go through the [`redo`] journal). What a scan
//!   learns (view length, offset index) is kept across mounts in the
//!   [`indexdb`], used only for a file whose [`io::Stamp`] matches exactly
//!   (the one file-stamp type; migrate compares stamps too).
//! * [`trust`] decides what in a tree other users write is the programs'
//!   own (the redo journal, the index database, migrate's undo journals,
//!   the names the mount keeps for itself) and how anything in such a tree
//!   is reached (by descriptor, one name at a time, never through a
//!   symlink); its doc holds the security argument. [`walk`] is the one
//!   walk of such trees, which `check` and `migrate` share.
//! * [`ratelog`] rate-limits the log lines a user can cause again and
//!   again, counting what it holds back.
//! * [`sys`] holds the system calls that take more than one `nix` call or
//!   need raw `libc` (and so all `unsafe` outside the codec); a single
//!   safe `nix` call is made where it is needed. `mountinfo` reads
//!   `/proc/self/mountinfo`.
//!
//! The contract these modules keep is written in docs/format.md (the
//! bytes and the view) and docs/behaviour.md (the mount, the converter,
//! the charset).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod codec;
pub mod convert;
pub mod diagnose;
pub mod fs;
pub mod indexdb;
pub mod io;
pub mod migrate;
mod mountinfo;
pub mod ratelog;
pub mod redo;
pub mod shown;
pub mod sys;
pub mod trust;
pub mod view;
pub mod walk;
