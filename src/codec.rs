//! The codec as this program runs it: every converter the library makes
//! runs at most at the vector level [`level`] gives, read once from
//! `CUTF8FS_SIMD` (`avx512`, `avx2`, `sse2` or `portable`; for
//! measurements) and otherwise the best the CPU has. The codec crate itself
//! has no process-wide setting: the level is handed to each converter.
//! [`Coder`] is either direction behind one call, for the converter
//! (`crate::convert`, `crate::check`) and migrate.

use std::sync::OnceLock;

use cutf8::simd::Level;
use cutf8::{ConvertError, DecodeMagic, Decoder, EncodeMagic, Encoder, Status};

/// The environment variable that lowers the level.
pub const ENV: &str = "CUTF8FS_SIMD";

/// The vector level for this process (an unknown `CUTF8FS_SIMD` value is
/// ignored: the best level).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let max = std::env::var(ENV).ok().and_then(|v| v.parse().ok());
        cutf8::Decoder::strict()
            .with_simd_level(max.unwrap_or(Level::Avx512))
            .simd_level()
    })
}

/// The view length of Corrected UTF-8 bytes, at [`level`].
pub fn view_len(disk: &[u8]) -> u64 {
    let mut c = cutf8::length::LengthCounter::disk_to_view().with_simd_level(level());
    c.push(disk);
    c.finish()
}

/// Lossless W of a whole buffer, at [`level`].
pub fn encode_lossless(view: &[u8]) -> Result<Vec<u8>, ConvertError> {
    Encoder::lossless()
        .with_simd_level(level())
        .encode_to_vec(view)
}

/// Either codec direction behind one `convert` call, at [`level`]: the
/// converter's and migrate's streams are the same loop both ways.
pub enum Coder {
    Decode(Decoder),
    Encode(Encoder),
}

impl Coder {
    /// V (Corrected UTF-8 to UTF-8), lossless or strict, with `magic`.
    pub fn decoder(lossless: bool, magic: DecodeMagic) -> Coder {
        let d = if lossless {
            Decoder::lossless()
        } else {
            Decoder::strict()
        };
        Coder::Decode(d.with_magic(magic).with_simd_level(level()))
    }

    /// W (UTF-8 to Corrected UTF-8), lossless or strict, with `magic`.
    pub fn encoder(lossless: bool, magic: EncodeMagic) -> Coder {
        let e = if lossless {
            Encoder::lossless()
        } else {
            Encoder::strict()
        };
        Coder::Encode(e.with_magic(magic).with_simd_level(level()))
    }

    /// Whether this is W.
    pub fn encodes(&self) -> bool {
        matches!(self, Coder::Encode(_))
    }

    /// Reserved units decoded that W would not give back unchanged
    /// (`Decoder::exempt_units`; none when encoding).
    pub fn exempt_units(&self) -> u64 {
        match self {
            Coder::Decode(d) => d.exempt_units(),
            Coder::Encode(_) => 0,
        }
    }

    /// Whether a decoder dropped a magic number at the start.
    pub fn found_magic(&self) -> bool {
        match self {
            Coder::Decode(d) => d.found_magic(),
            Coder::Encode(_) => false,
        }
    }

    /// One step of the codec's `convert` (status, bytes read, written).
    pub fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        match self {
            Coder::Decode(d) => d.convert(src, dst, last),
            Coder::Encode(e) => e.convert(src, dst, last),
        }
    }
}
