//! The codec as this program runs it: every converter the library makes
//! runs at most at the vector level [`level`] gives, read once from
//! `CUTF8FS_SIMD` (`avx512`, `avx2`, `sse2` or `portable`; for
//! measurements) and otherwise the best the CPU has. The codec crate itself
//! has no process-wide setting: the level is handed to each converter.

use std::sync::OnceLock;

use cutf8::simd::Level;
use cutf8::{ConvertError, Encoder};

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
