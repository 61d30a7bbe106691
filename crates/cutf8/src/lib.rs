//! Corrected UTF-8 ⇄ standard UTF-8, and nothing else: no I/O, no
//! dependencies, no allocation in the streaming converters.
//!
//! Corrected UTF-8 keeps UTF-8's byte structure but adds an offset to every
//! multi-byte sequence, so that every well-formed sequence is the one and only
//! encoding of one code point (no overlong forms; C1 controls and surrogates
//! are skipped; the code space reaches U+8421109F). A Corrected UTF-8 file
//! begins with the 8-byte [`MAGIC`] number, which is not part of the text.
//!
//! Two conversions, named as in the format's specification:
//!
//! * **V** (disk → view), [`Decoder`]: Corrected UTF-8 in, standard UTF-8
//!   out. [`Decoder::lossless`] passes reserved units, stray continuation
//!   bytes and truncated sequences through unchanged and writes code points
//!   above U+10FFFF in their shortest extended (RFC 2279 or FE) form;
//!   [`Decoder::strict`] reports each of those as a [`Problem`] instead.
//! * **W** (view → disk), [`Encoder`]: standard UTF-8 (plus the extended
//!   forms) in, Corrected UTF-8 out. [`Encoder::lossless`] passes
//!   structurally ill-formed bytes through; [`Encoder::strict`] rejects them.
//!   Neither can store C1 controls, overlong forms or encoded surrogates:
//!   those are always reported, never altered.
//!
//! For whole buffers there are one-shot functions: [`decode_lossless`],
//! [`decode_strict`], [`encode_lossless`] and [`encode_strict`].
//!
//! ```
//! // "Ï!" is C0 AF 21 on disk: U+00CF minus the two-byte offset 160.
//! let disk = cutf8::encode_strict("Ï!".as_bytes())?;
//! assert_eq!(disk, [0xC0, 0xAF, b'!']);
//! assert_eq!(cutf8::decode_strict(&disk)?, "Ï!".as_bytes());
//!
//! // Lossless V never fails: ill-formed bytes come through unchanged, and
//! // lossless W gives them back.
//! let odd = [b'a', 0x80, 0xC0];
//! assert_eq!(cutf8::decode_lossless(&odd), odd);
//! assert_eq!(cutf8::encode_lossless(&odd)?, odd);
//!
//! // W cannot store a C1 control, not even losslessly.
//! let err = cutf8::encode_lossless("\u{85}".as_bytes()).unwrap_err();
//! assert_eq!(err.problem(), cutf8::Problem::C1Control(0x85));
//! assert_eq!(err.offset(), 0);
//! # Ok::<(), cutf8::ConvertError>(())
//! ```
//!
//! # Streaming
//!
//! Both converters take input in chunks of any size, keep a partial unit
//! across calls, and write into the caller's buffer. The contract, as in
//! encoding_rs: `convert(src, dst, last)` returns `(status, read, written)`;
//! on [`Status::InputEmpty`] all of `src` was consumed; on
//! [`Status::OutputFull`] the caller drains `dst` and calls again with
//! `src[read..]`; on [`Status::Malformed`] the bad unit was consumed and its
//! last byte is `src[read - 1]` (its first byte may lie in an earlier chunk:
//! [`Malformed::len`] says how long it was). `last` says no more input
//! follows. Bytes of `dst` past `written` may have been overwritten (the
//! vector code stores whole blocks). Any `dst` of at least [`MIN_DST`]
//! bytes makes progress;
//! [`max_view_len`] and [`max_disk_len`] size a buffer that takes a whole
//! input at once.
//!
//! ```
//! use cutf8::{Decoder, Status};
//! let disk = cutf8::encode_strict("κόσμε 世界\n".as_bytes())?;
//! let mut d = Decoder::strict();
//! let mut view = Vec::new();
//! let mut buf = [0u8; cutf8::MIN_DST];
//! // Feed three bytes at a time through a small output buffer.
//! let chunks: Vec<&[u8]> = disk.chunks(3).collect();
//! for (k, chunk) in chunks.iter().enumerate() {
//!     let last = k + 1 == chunks.len();
//!     let mut src = *chunk;
//!     loop {
//!         let (status, read, written) = d.convert(src, &mut buf, last);
//!         view.extend_from_slice(&buf[..written]);
//!         src = &src[read..];
//!         match status {
//!             Status::InputEmpty => break,
//!             Status::OutputFull => continue,
//!             Status::Malformed(m) => panic!("{}", m.problem),
//!             _ => unreachable!("no other status yet"),
//!         }
//!     }
//! }
//! assert_eq!(view, "κόσμε 世界\n".as_bytes());
//! # Ok::<(), cutf8::ConvertError>(())
//! ```
//!
//! # Modules
//!
//! * [`unit`](mod@unit): one unit at a time, the reference the fast paths are tested
//!   against (for callers that need code points, such as UCS-4 converters).
//! * [`length`]: how long the other side of some bytes is, without
//!   converting them (a random-access index of a file's view is built from
//!   these).
//! * [`simd`]: which vector code runs, and a way to lower it for
//!   measurements.
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod ascii;
mod decoder;
mod encoder;
pub mod length;
mod scalar;
pub mod simd;

pub use decoder::Decoder;
pub use encoder::Encoder;

pub mod unit {
    //! One unit at a time: the reference implementation of the format,
    //! straight from its table, and what the fast paths are tested against.
    //!
    //! Use these when you need code points (a UCS-4 converter, a
    //! unit-aligned seek); for bytes to bytes, [`Decoder`](crate::Decoder)
    //! and [`Encoder`](crate::Encoder) are much faster.
    //!
    //! ```
    //! use cutf8::unit::{decode_disk_unit, encode_view, DiskUnit};
    //! let DiskUnit::Char { cp, len } = decode_disk_unit(&[0xC0, 0xAF], true) else {
    //!     unreachable!()
    //! };
    //! assert_eq!((cp, len), (0xCF, 2));
    //! let mut view = [0u8; cutf8::MAX_UNIT_LEN];
    //! let n = encode_view(cp, &mut view);
    //! assert_eq!(&view[..n], "Ï".as_bytes());
    //! ```
    pub use crate::scalar::{
        decode_disk_unit, decode_view_unit, encode_disk, encode_view, is_cont, DiskUnit, ViewUnit,
    };
}

/// The magic number that begins a Corrected UTF-8 file (U+10E7D U+ED4E U+0000
/// U+000A). It is not part of the text.
pub const MAGIC: [u8; 8] = [0xEF, 0xB7, 0x9D, 0xED, 0xB2, 0xAE, 0x00, 0x0A];

/// The highest code point Corrected UTF-8 can encode.
pub const MAX_CODE_POINT: u32 = 0x8421_109F;

/// The longest unit either side writes for one input unit (FE plus six
/// continuation bytes in the view).
pub const MAX_UNIT_LEN: usize = 7;

/// Smallest output buffer that always makes progress.
pub const MIN_DST: usize = 16;

/// Whether `bytes` begins with the [`MAGIC`] number.
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// What a converter found wrong with one unit of its input.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// A continuation byte (80–BF) where no sequence is open.
    StrayContinuation(u8),
    /// A lead byte followed by fewer continuation bytes than it announces.
    /// `expected` is the full length the lead byte announced.
    Truncated {
        /// The full length the lead byte announced.
        expected: u8,
    },
    /// Disk side: an FE/FF reserved unit (strict decoding only).
    /// View side: an FE/FF byte, which standard UTF-8 never has.
    Reserved(u8),
    /// A code point above U+10FFFF: strict decoding has no standard form for
    /// it; strict encoding rejects its extended (RFC 2279) form.
    BeyondUnicode(u32),
    /// View side: a sequence longer than its code point needs (e.g. C0 AF).
    Overlong(u32),
    /// View side: an encoded surrogate (ED A0 80 … ED BF BF).
    Surrogate(u32),
    /// View side: a C1 control (U+0080 … U+009F), which Corrected UTF-8 skips.
    C1Control(u32),
}

impl Problem {
    /// Whether lossless W must refuse this problem (it cannot be stored
    /// without changing what reads back).
    pub fn is_unstorable(self) -> bool {
        matches!(
            self,
            Problem::Overlong(_) | Problem::Surrogate(_) | Problem::C1Control(_)
        )
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Problem::StrayContinuation(b) => write!(f, "stray continuation byte {b:02X}"),
            Problem::Truncated { expected } => write!(f, "truncated {expected}-byte sequence"),
            Problem::Reserved(b) => write!(f, "reserved unit starting with {b:02X}"),
            Problem::BeyondUnicode(cp) => {
                write!(f, "code point U+{cp:04X} is above U+10FFFF")
            }
            Problem::Overlong(cp) => write!(f, "overlong form of U+{cp:04X}"),
            Problem::Surrogate(cp) => write!(f, "encoded surrogate U+{cp:04X}"),
            Problem::C1Control(cp) => write!(f, "C1 control U+{cp:04X} cannot be encoded"),
        }
    }
}

/// One malformed unit: what was wrong and how many input bytes it spanned.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    /// What was wrong.
    pub problem: Problem,
    /// Length of the offending unit in input bytes (it ends at `read`).
    pub len: usize,
}

/// Outcome of one `convert` call of a [`Decoder`] or [`Encoder`].
///
/// A closed set, as encoding_rs's `CoderResult`: callers match it
/// exhaustively, so a new variant would be a breaking change.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// All input was consumed (and, with `last`, all of it was written).
    InputEmpty,
    /// `dst` has no room for the next unit: drain it and call again.
    OutputFull,
    /// A unit the current mode does not accept; see the module doc.
    Malformed(Malformed),
}

/// Conversion of a whole buffer failed at a byte offset.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertError {
    /// The bad unit.
    pub malformed: Malformed,
    /// Offset of the first byte of the bad unit in the input.
    pub offset: usize,
}

impl ConvertError {
    /// What was wrong with the unit at [`offset`](Self::offset).
    pub fn problem(&self) -> Problem {
        self.malformed.problem
    }

    /// Offset of the first byte of the bad unit in the input.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl std::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.malformed.problem, self.offset)
    }
}

impl std::error::Error for ConvertError {}

/// Upper bound on the view length of `disk_len` disk bytes (plus whatever a
/// decoder holds pending). Every unit grows by at most one byte and needs at
/// least two bytes to grow, so `n + n/2 + 8` is enough.
pub fn max_view_len(disk_len: usize) -> usize {
    disk_len
        .checked_add(disk_len / 2)
        .and_then(|n| n.checked_add(8))
        .unwrap_or(usize::MAX)
}

/// Upper bound on the disk length of `view_len` view bytes: W never grows.
pub fn max_disk_len(view_len: usize) -> usize {
    view_len.saturating_add(8)
}

fn run_to_vec(
    src: &[u8],
    mut step: impl FnMut(&[u8], &mut [u8], bool) -> (Status, usize, usize),
    cap: usize,
) -> Result<Vec<u8>, ConvertError> {
    let mut out = vec![0u8; cap.max(MIN_DST)];
    let (mut read, mut written) = (0, 0);
    loop {
        let (status, r, w) = step(&src[read..], &mut out[written..], true);
        read += r;
        written += w;
        match status {
            Status::InputEmpty => {
                out.truncate(written);
                return Ok(out);
            }
            Status::OutputFull => {
                let grow = out.len() / 2 + MIN_DST;
                out.resize(out.len() + grow, 0);
            }
            Status::Malformed(m) => {
                return Err(ConvertError {
                    malformed: m,
                    offset: read - m.len,
                })
            }
        }
    }
}

/// Lossless V of a whole buffer (no magic handling): Corrected UTF-8 →
/// UTF-8. Never fails: ill-formed bytes and reserved units come through
/// unchanged.
///
/// ```
/// assert_eq!(cutf8::decode_lossless(&[0xDF, 0xBF, 0xFF]), b"\xE0\xA2\x9F\xFF");
/// ```
pub fn decode_lossless(disk: &[u8]) -> Vec<u8> {
    let mut d = Decoder::lossless();
    match run_to_vec(disk, |s, o, l| d.convert(s, o, l), max_view_len(disk.len())) {
        Ok(v) => v,
        // Lossless V has no malformed input; keep whatever it would say.
        Err(e) => unreachable!("lossless V reported {e}"),
    }
}

/// Strict V of a whole buffer (no magic handling): fails at the first unit
/// with no standard UTF-8 form (see [`Decoder::strict`]).
pub fn decode_strict(disk: &[u8]) -> Result<Vec<u8>, ConvertError> {
    let mut d = Decoder::strict();
    run_to_vec(disk, |s, o, l| d.convert(s, o, l), max_view_len(disk.len()))
}

/// Lossless W of a whole buffer (no magic handling): UTF-8 → Corrected
/// UTF-8. Fails only at a unit W cannot store (C1 control, overlong form,
/// encoded surrogate; see [`Encoder::lossless`]).
pub fn encode_lossless(view: &[u8]) -> Result<Vec<u8>, ConvertError> {
    let mut e = Encoder::lossless();
    run_to_vec(view, |s, o, l| e.convert(s, o, l), max_disk_len(view.len()))
}

/// Strict W of a whole buffer (no magic handling): fails at the first unit
/// that is not well-formed UTF-8 W can store (see [`Encoder::strict`]).
pub fn encode_strict(view: &[u8]) -> Result<Vec<u8>, ConvertError> {
    let mut e = Encoder::strict();
    run_to_vec(view, |s, o, l| e.convert(s, o, l), max_disk_len(view.len()))
}

#[cfg(test)]
mod tests;
