//! Corrected UTF-8 ⇄ standard UTF-8, and nothing else: a streaming codec
//! over the caller's buffers, with vector code and a scalar reference, no
//! I/O, no dependencies, `no_std` + `alloc` without the default `std`
//! feature.
//!
//! Corrected UTF-8 keeps UTF-8's byte structure (lead bytes, 10xxxxxx
//! continuation bytes) but adds an offset to every multi-byte sequence, so
//! that every well-formed sequence is the one and only encoding of one code
//! point: no overlong forms, no C1 controls (U+0080–U+009F), no surrogates,
//! and a code space up to U+8421109F.
//!
//! | bytes | offset | code points |
//! |---|---|---|
//! | 00 … 7F | 0 | U+0000 … U+007F |
//! | C0 80 … DF BF | 160 | U+00A0 … U+089F |
//! | E0 80 80 … EC BD 9F | 2 208 | U+08A0 … U+D7FF |
//! | EC BD A0 … EF BF BF | 4 256 | U+E000 … U+1109F |
//! | F0 80 80 80 … F7 BF BF BF | 69 792 | U+110A0 … U+21109F |
//! | F8 + 4 … FB BF BF BF BF | 2 166 944 | U+2110A0 … U+421109F |
//! | FC + 5 … FD BF BF BF BF BF | 69 275 808 | U+42110A0 … U+8421109F |
//!
//! The payload bits are read as in UTF-8, then the offset is added (a
//! three-byte payload up to 0xCF5F takes 2 208, above it 4 256). FE or FF
//! and the continuation bytes after it form a *reserved unit*, kept for
//! longer sequences in the future. A Corrected UTF-8 file that holds text
//! begins with the 8-byte [`MAGIC`] number (U+10E7D U+ED4E U+0000 U+000A),
//! which is not part of the text.
//!
//! Two conversions:
//!
//! * **V**, [`Decoder`]: Corrected UTF-8 in, UTF-8 out. [`Decoder::strict`]
//!   reports every unit without a standard form (stray continuation byte,
//!   truncated sequence, reserved unit, code point above U+10FFFF) as a
//!   [`Problem`]; [`Decoder::lossless`] passes such bytes through unchanged
//!   and writes code points above U+10FFFF in their shortest extended
//!   (RFC 2279 or FE) form.
//! * **W**, [`Encoder`]: UTF-8 (plus the extended forms) in, Corrected
//!   UTF-8 out. [`Encoder::strict`] rejects anything but well-formed UTF-8;
//!   [`Encoder::lossless`] passes structurally ill-formed bytes through.
//!   Neither can store C1 controls, overlong forms or encoded surrogates:
//!   those are always reported, never altered.
//!
//! Lossless V and W invert each other: W(V(b)) = b for all bytes but one
//! kind of reserved unit (FE plus six or more continuation bytes whose
//! first six carry U+80000000–U+8421109F, see
//! [`Decoder::exempt_units`]), and V(W(t)) = t for all text W stores.
//! Strict conversion round-trips text.
//!
//! The magic number is handled inside the converters, as a byte order mark
//! is inside a UTF-16 decoder ([`DecodeMagic`], [`EncodeMagic`]): a decoder
//! expects, strips or ignores it, an encoder writes it (before the first
//! output byte: an empty input gives an empty output) or not. In strict
//! mode a decoder refuses a magic number anywhere but at the start it
//! drops ([`Problem::MagicNumber`]), and an encoder refuses the text that
//! would encode to one, the four characters U+10E7D U+ED4E U+0000 U+000A
//! in a row ([`MAGIC_TEXT`], [`Problem::MagicText`]), and input that begins
//! with the magic number itself (it is Corrected UTF-8 already; decided on
//! its first six bytes, U+FDDD and an encoded surrogate when read as
//! UTF-8): strict conversion round-trips. Lossless conversion carries all
//! of these through as text. Any chunking gives the same result: bytes
//! that may begin a magic number at the end of a chunk are held (at most
//! eight) until the next chunk or `last` decides.
//!
//! For whole buffers there are one-shot functions: [`decode_strict`],
//! [`decode_strict_to_string`], [`decode_lossless`], [`encode_strict`] and
//! [`encode_lossless`]; with `std`, [`io::DecodeReader`] and
//! [`io::EncodeWriter`] wrap a reader and a writer.
//!
//! ```
//! use cutf8::{DecodeMagic, EncodeMagic, Encoder};
//! // "Ï!" is C0 AF 21 on disk: U+00CF minus the two-byte offset 160.
//! let disk = cutf8::encode_strict("Ï!".as_bytes())?;
//! assert_eq!(disk, [0xC0, 0xAF, b'!']);
//! assert_eq!(cutf8::decode_strict(&disk)?, "Ï!".as_bytes());
//!
//! // A file: the magic number first, required when reading it back.
//! let file = Encoder::strict().with_magic(EncodeMagic::Write).encode_to_vec("Ï!\n".as_bytes())?;
//! assert!(cutf8::has_magic(&file));
//! assert_eq!(cutf8::decode_strict_to_string(&file, DecodeMagic::Expect)?, "Ï!\n");
//! let err = cutf8::decode_strict_to_string(b"plain\n", DecodeMagic::Expect).unwrap_err();
//! assert_eq!((err.problem(), err.offset()), (cutf8::Problem::MissingMagic, 0));
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
//! encoding_rs: `convert(src, dst, last)` returns `(status, read,
//! written)`, one of three outcomes (a closed set, matched exhaustively):
//!
//! * [`Status::InputEmpty`]: all of `src` was consumed (and, with `last`,
//!   everything was written);
//! * [`Status::OutputFull`]: the next unit does not fit in what is left of
//!   `dst`: drain `dst` and call again with `src[read..]`;
//! * [`Status::Malformed`]: a unit the mode does not accept; it was
//!   consumed and its last byte is `src[read - 1]`, or in an earlier chunk
//!   (its first byte may lie in an earlier chunk: [`Malformed::len`] says
//!   how long it was, so it began `len` bytes before the read position).
//!   The caller may stop, or call again with `src[read..]`.
//!
//! `last` says no more input follows. Bytes of `dst` past `written` may have
//! been overwritten (the vector code stores whole blocks). Any `dst` with
//! room for the next unit makes progress ([`MAX_UNIT_LEN`] bytes always
//! do); [`max_view_len`] and [`max_disk_len`] size a buffer that takes a
//! whole input at once.
//!
//! ```
//! use cutf8::{Decoder, Status};
//! let disk = cutf8::encode_strict("κόσμε 世界\n".as_bytes())?;
//! let mut d = Decoder::strict();
//! let mut view = Vec::new();
//! let mut buf = [0u8; cutf8::MAX_UNIT_LEN];
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
//!         }
//!     }
//! }
//! assert_eq!(view, "κόσμε 世界\n".as_bytes());
//! # Ok::<(), cutf8::ConvertError>(())
//! ```
//!
//! # Modules
//!
//! * [`unit`](mod@unit): one unit at a time, the reference the fast paths
//!   are tested against (for callers that need code points, such as UCS-4
//!   converters).
//! * [`length`]: how long the other side of some bytes is, without
//!   converting them.
//! * [`simd`]: which vector code a converter runs.
//! * [`io`] (with `std`): a reader that decodes and a writer that encodes.
//!
//! Items hidden from this documentation (the `index` module: the pieces a
//! random-access index of a file's view is built from) are outside the
//! semver promise and may change in any release.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

mod ascii;
mod decoder;
mod encoder;
#[doc(hidden)]
pub mod index;
#[cfg(feature = "std")]
pub mod io;
pub mod length;
mod magic;
mod scalar;
pub mod simd;

pub use decoder::Decoder;
pub use encoder::Encoder;
pub use magic::{has_magic, DecodeMagic, EncodeMagic, MagicState, MAGIC, MAGIC_TEXT};

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
    //!     panic!("C0 AF is one character")
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

/// The highest code point Corrected UTF-8 can encode.
pub const MAX_CODE_POINT: u32 = 0x8421_109F;

/// The longest unit either side writes for one input unit (FE plus six
/// continuation bytes in the view): an output buffer this long always
/// makes progress.
pub const MAX_UNIT_LEN: usize = 7;

/// An output buffer size that always makes progress (more than
/// [`MAX_UNIT_LEN`]).
pub const MIN_DST: usize = 16;

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
    /// Decoding with [`DecodeMagic::Expect`]: the input does not begin with
    /// the magic number (the unit: the bytes up to the first that differs).
    MissingMagic,
    /// The magic number where text must be (strict mode): after the start
    /// of a decoder's input, or at the start of an encoder's, which is then
    /// Corrected UTF-8 already (decided on its first six bytes, U+FDDD and
    /// an encoded surrogate when read as UTF-8).
    MagicNumber,
    /// Encoding (strict mode): the magic number's characters U+10E7D U+ED4E
    /// U+0000 U+000A in a row, which would encode to the magic number.
    MagicText,
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

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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
            Problem::MissingMagic => f.write_str("no Corrected UTF-8 magic number at the start"),
            Problem::MagicNumber => {
                f.write_str("a Corrected UTF-8 magic number where text must be")
            }
            Problem::MagicText => f.write_str(
                "the magic number's characters U+10E7D U+ED4E U+0000 U+000A, which encode to it",
            ),
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

/// Outcome of one `convert` call of a [`Decoder`] or [`Encoder`]: one of
/// three, as encoding_rs's `CoderResult` (a closed set; what can be wrong
/// with a unit is the open one, [`Problem`]).
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// All input was consumed (and, with `last`, all of it was written).
    InputEmpty,
    /// `dst` has no room for the next unit: drain it and call again.
    OutputFull,
    /// A unit the current mode does not accept; see the crate documentation.
    Malformed(Malformed),
}

/// Conversion of a whole buffer failed at a byte offset.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertError {
    /// The bad unit.
    pub malformed: Malformed,
    /// Offset of the first byte of the bad unit in the input.
    pub offset: u64,
}

impl ConvertError {
    /// What was wrong with the unit at [`offset`](Self::offset).
    pub fn problem(&self) -> Problem {
        self.malformed.problem
    }

    /// Offset of the first byte of the bad unit in the input.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl core::fmt::Display for ConvertError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} at byte {}", self.malformed.problem, self.offset)
    }
}

impl core::error::Error for ConvertError {}

/// Upper bound on the view length of `disk_len` disk bytes (plus whatever a
/// decoder holds pending). Every unit grows by at most one byte and needs at
/// least two bytes to grow, so `n + n/2 + 8` is enough.
pub fn max_view_len(disk_len: usize) -> usize {
    disk_len
        .checked_add(disk_len / 2)
        .and_then(|n| n.checked_add(8))
        .unwrap_or(usize::MAX)
}

/// Upper bound on the disk length of `view_len` view bytes (plus the magic
/// number and whatever an encoder holds pending): W never grows.
pub fn max_disk_len(view_len: usize) -> usize {
    view_len.saturating_add(MAGIC.len() + 8)
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
                    offset: (read as u64).saturating_sub(m.len as u64),
                })
            }
        }
    }
}

impl Decoder {
    /// Decode the whole of `disk` (which ends the input) into a new vector;
    /// the first malformed unit is an error.
    pub fn decode_to_vec(mut self, disk: &[u8]) -> Result<Vec<u8>, ConvertError> {
        run_to_vec(
            disk,
            |s, o, l| self.convert(s, o, l),
            max_view_len(disk.len()),
        )
    }
}

impl Encoder {
    /// Encode the whole of `view` (which ends the input) into a new vector;
    /// the first malformed unit is an error.
    pub fn encode_to_vec(mut self, view: &[u8]) -> Result<Vec<u8>, ConvertError> {
        run_to_vec(
            view,
            |s, o, l| self.convert(s, o, l),
            max_disk_len(view.len()),
        )
    }
}

/// Lossless V of a whole buffer (no magic number handling): Corrected
/// UTF-8 → UTF-8. Never fails: ill-formed bytes and reserved units come
/// through unchanged.
///
/// ```
/// assert_eq!(cutf8::decode_lossless(&[0xDF, 0xBF, 0xFF]), b"\xE0\xA2\x9F\xFF");
/// ```
pub fn decode_lossless(disk: &[u8]) -> Vec<u8> {
    match Decoder::lossless().decode_to_vec(disk) {
        Ok(v) => v,
        // Lossless V has no malformed input; keep whatever it would say.
        Err(e) => unreachable!("lossless V reported {e}"),
    }
}

/// Strict V of a whole buffer, with no magic number at its start (see
/// [`DecodeMagic::Off`]): fails at the first unit with no standard UTF-8
/// form (see [`Decoder::strict`]).
pub fn decode_strict(disk: &[u8]) -> Result<Vec<u8>, ConvertError> {
    Decoder::strict().decode_to_vec(disk)
}

/// Strict V of a whole buffer into a `String`, with the magic number
/// handled as `magic` says (a file: [`DecodeMagic::Expect`]).
///
/// ```
/// use cutf8::DecodeMagic;
/// assert_eq!(cutf8::decode_strict_to_string(&[0xC0, 0xAF], DecodeMagic::Off)?, "Ï");
/// # Ok::<(), cutf8::ConvertError>(())
/// ```
pub fn decode_strict_to_string(disk: &[u8], magic: DecodeMagic) -> Result<String, ConvertError> {
    let view = Decoder::strict().with_magic(magic).decode_to_vec(disk)?;
    // Strict V writes standard UTF-8 only.
    Ok(String::from_utf8(view).expect("strict V writes UTF-8"))
}

/// Lossless W of a whole buffer (no magic number): UTF-8 → Corrected
/// UTF-8. Fails only at a unit W cannot store (C1 control, overlong form,
/// encoded surrogate; see [`Encoder::lossless`]).
pub fn encode_lossless(view: &[u8]) -> Result<Vec<u8>, ConvertError> {
    Encoder::lossless().encode_to_vec(view)
}

/// Strict W of a whole buffer (no magic number written): fails at the
/// first unit that is not well-formed UTF-8 W can store, and at the magic
/// number's characters (see [`Encoder::strict`]).
pub fn encode_strict(view: &[u8]) -> Result<Vec<u8>, ConvertError> {
    Encoder::strict().encode_to_vec(view)
}

#[cfg(test)]
mod tests;

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
