//! Corrected UTF-8 ⇄ standard UTF-8, and nothing else: no I/O, no
//! allocation in the hot loops.
//!
//! Two conversions, named as in SPEC §2:
//!
//! * **V** (disk → view), [`Decoder`]: Corrected UTF-8 in, standard UTF-8
//!   out. Lossless mode passes reserved units, stray continuation bytes and
//!   truncated sequences through unchanged and writes code points above
//!   U+10FFFF in their shortest extended (RFC 2279 or FE) form; strict mode
//!   reports each of those as [`Problem`]s instead.
//! * **W** (view → disk), [`Encoder`]: standard UTF-8 (plus the extended
//!   forms) in, Corrected UTF-8 out. Lossless mode passes structurally
//!   ill-formed bytes through; strict mode rejects them. Neither mode can
//!   store C1 controls, overlong forms or encoded surrogates: those are
//!   always reported, never altered.
//!
//! Both converters stream: they take input in chunks of any size, keep a
//! partial unit across calls, and write into the caller's buffer. The
//! contract, as in encoding_rs: `convert(src, dst, last)` returns
//! `(status, read, written)`; on [`Status::InputEmpty`] all of `src` was
//! consumed; on [`Status::OutputFull`] the caller drains `dst` and calls again
//! with `src[read..]`; on [`Status::Malformed`] the bad unit was consumed and
//! its last byte is `src[read - 1]` (its first byte may lie in an earlier
//! chunk: `len` says how long it was). `last` says no more input follows.
//! Any `dst` of at least [`MIN_DST`] bytes makes progress.
//!
//! The length-only passes in [`length`] answer "how long is the view of these
//! disk bytes" (and the inverse) without converting, for the offset index.
//!
//! Callers: `convert`, `check` and `migrate` (one-shot and streaming), and
//! `index` (the mount's random-access reads). The codec knows nothing of
//! files.

mod ascii;
mod decoder;
mod encoder;
pub mod length;
mod scalar;
mod simd;

pub use ascii::ascii_prefix_len;
pub use decoder::Decoder;
pub use encoder::Encoder;
pub use scalar::{
    decode_disk_unit, decode_view_unit, encode_disk, encode_view, DiskUnit, ViewUnit,
};

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

/// Which vector code the converters run on this machine: `"avx2"`,
/// `"sse2"` or `"portable"` (for `cutf8 --version`). Detected once.
pub fn simd_path() -> &'static str {
    simd::path().name()
}

/// Whether `bytes` begins with the [`MAGIC`] number.
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// What a converter found wrong with one unit of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// A continuation byte (80–BF) where no sequence is open.
    StrayContinuation(u8),
    /// A lead byte followed by fewer continuation bytes than it announces.
    /// `expected` is the full length the lead byte announced.
    Truncated { expected: u8 },
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    pub problem: Problem,
    /// Length of the offending unit in input bytes (it ends at `read`).
    pub len: usize,
}

/// Outcome of one `convert` call.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvertError {
    pub malformed: Malformed,
    /// Offset of the first byte of the bad unit in the input.
    pub offset: usize,
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

/// V of a whole buffer (no magic handling): Corrected UTF-8 → UTF-8.
/// Strict mode fails at the first unit with no standard form.
pub fn decode_to_vec(disk: &[u8], strict: bool) -> Result<Vec<u8>, ConvertError> {
    let mut d = if strict {
        Decoder::strict()
    } else {
        Decoder::lossless()
    };
    run_to_vec(disk, |s, o, l| d.convert(s, o, l), max_view_len(disk.len()))
}

/// W of a whole buffer (no magic handling): UTF-8 → Corrected UTF-8.
/// Fails at the first unit the mode cannot store.
pub fn encode_to_vec(view: &[u8], strict: bool) -> Result<Vec<u8>, ConvertError> {
    let mut e = if strict {
        Encoder::strict()
    } else {
        Encoder::lossless()
    };
    run_to_vec(view, |s, o, l| e.convert(s, o, l), max_disk_len(view.len()))
}

#[cfg(test)]
mod tests;
