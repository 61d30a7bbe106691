//! The view of a corrected file, as pure functions: no file descriptors,
//! no I/O, no errno. Offsets count from the first byte after the magic
//! number (disk) or from the first byte of the view.
//!
//! * [`OffsetIndex`] (`index`): view offset → disk offset, per 4 KiB block.
//! * [`Reading`] and [`Span`] (`read`): which disk bytes a read needs, and
//!   the view bytes they give.
//! * `write`: what a write, a size change or a zeroed range does to the disk
//!   bytes — a [`Patch`] in place, an extension, a rewrite of the tail, or
//!   an [`Error`] (content W cannot store).
//! * [`magic`]: whether a change would make a raw file begin with the magic
//!   number; [`sniff`]: whether a new file's first write is text;
//!   [`pieces`]: where a write the kernel may have cut at a page boundary
//!   ends what is written now.
//!
//! The I/O layer (`crate::io`) executes these plans on backing files; the
//! mount (`crate::fs`) decides which errno an [`Error`] is.

pub mod index;
pub mod magic;
pub mod pieces;
pub mod read;
pub mod sniff;
pub mod write;

use cutf8::{Problem, MAGIC};

pub use index::{OffsetIndex, Piece, Rescan};
pub use read::{Reading, Span, SpanPlan, END_SPAN};
pub use write::{Patch, Resize, Way, ZeroPatch};

/// Where the text starts in a corrected file.
pub const DATA_START: u64 = MAGIC.len() as u64;

pub(crate) use cutf8::unit::is_cont;

/// Why a change of a view cannot be made. `crate::fs::frontend::error` turns each
/// into an errno; nothing else does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// W cannot store the new content (e.g. a C1 control) at this view
    /// offset: a write turns the file raw instead; other changes fail.
    Unstorable { problem: Problem, offset: u64 },
    /// The change would make a raw file begin with the magic number, so it
    /// would read back as something else (docs/behaviour.md, "The mount").
    MagicOnRaw,
    /// The view holds a unit W would not give back unchanged (docs/format.md,
    /// invariant 1's exception): it is read-only.
    ReadOnly,
    /// An offset plus a length past what a file can hold.
    TooLarge,
    /// The file is not what its index says (BACKING changed it between the
    /// index and the read): nothing was planned; the caller learns the file
    /// again.
    Changed,
    /// The operation has no meaning on a view (e.g. fallocate's collapse
    /// and insert modes, which would shift text by disk blocks).
    Unsupported,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unstorable { problem, offset } => {
                write!(
                    f,
                    "{problem} at view offset {offset}: Corrected UTF-8 cannot store it"
                )
            }
            Error::MagicOnRaw => f.write_str(
                "the file would begin with the Corrected UTF-8 magic number and read back as \
                 something else",
            ),
            Error::ReadOnly => f.write_str(
                "the file holds a unit that cannot be written back unchanged: read-only",
            ),
            Error::TooLarge => f.write_str("offset and length exceed the largest file"),
            Error::Changed => f.write_str("the file changed in BACKING while it was written"),
            Error::Unsupported => f.write_str("not supported on a corrected file"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
pub(crate) mod tests;
