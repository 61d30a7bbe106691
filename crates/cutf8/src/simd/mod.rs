//! Which vector code the converters run: a [`Level`], chosen per
//! converter.
//!
//! The best level this CPU has is detected once, on first use: AVX-512
//! when it has every instruction that level's kernels use (AVX-512 F, BW,
//! VBMI and VBMI2, with AVX2, BMI2 and POPCNT), else AVX2 when it has
//! that, SSE2 otherwise (always there on x86_64), and on other targets the
//! portable word-at-a-time code. Without the `std` feature nothing is
//! detected at run time: the level is the best one the compilation target
//! enables (`-C target-feature`, `-C target-cpu`).
//!
//! Every converter runs at that level unless it is built with a lower
//! maximum ([`Decoder::with_simd_level`](crate::Decoder::with_simd_level),
//! [`Encoder::with_simd_level`](crate::Encoder::with_simd_level),
//! [`LengthCounter::with_simd_level`](crate::length::LengthCounter::with_simd_level)):
//! for measurements and tests. Nothing here is process-wide or reads the
//! environment; a program that wants a knob parses it into a [`Level`]
//! and passes it to the converters it makes.
//!
//! ```
//! use cutf8::simd::Level;
//! use cutf8::Decoder;
//! let best = Level::best();
//! let level: Level = "portable".parse().unwrap();
//! let d = Decoder::strict().with_simd_level(level);
//! assert_eq!(d.simd_level(), Level::Portable);
//! // Asking for more than the CPU has gives what it has.
//! assert_eq!(Decoder::strict().with_simd_level(Level::Avx512).simd_level(), best);
//! assert_eq!(d.decode_to_vec(&[0xC0, 0xAF])?, "Ï".as_bytes());
//! # Ok::<(), cutf8::ConvertError>(())
//! ```
//!
//! # Inside
//!
//! This module holds the crate's only `unsafe`. Three jobs, each a plain
//! safe function the converters call first and finish with scalar code:
//! `decode_run` (V) and `encode_run` (W) convert the longest prefix of
//! their input made of units the vector kernels take (see `kernels`), and
//! `find_disk_candidate` / `find_view_candidate` skip to the next byte the
//! length passes must look at, `candidate_block` gives a block's candidates
//! as masks where they are dense, and `count_changing` counts the disk
//! units that certainly grow (or view units that certainly shrink) a
//! vector at a time, one popcount each, for the per-block counts the
//! offset index is built from and for the whole-buffer lengths;
//! `find_zero` finds the U+0000 bytes near which a magic number may
//! begin. They know nothing of streaming state: a run starts at a unit
//! boundary and stops at one. On SSE2, which has no byte shuffle, the
//! blocks whose units change length are spread or packed by a byte loop.
//!
//! The AVX-512 level has its own conversion kernel (`avx512`: 64-byte
//! blocks, lane classes as `k` masks, `vpcompressb` for the units whose
//! length changes); each of its runs goes on with the AVX2 kernel, which
//! takes the last 34–63 bytes (or output room) a 64-byte block cannot and
//! a refused block's first half when the unit that stopped it lies in the
//! second. Its length kernels are 64 bytes wide too (`avx512_len`: the
//! next candidate, a block's candidates as two `u64` masks, and the
//! counts a vector at a time, with the bytes after each lead compared
//! against bounds a `vpermb` looks up per lead); the search ends with the
//! AVX2 one, and a block with fewer than 67 bytes left is an AVX2 block.
//!
//! Every conversion kernel steps from block to block by how much of the
//! block it took, which depends on the block's last bytes; so that the
//! next blocks' loads need not wait for that on an input too long to be in
//! the cache (2 MiB and more), each block also prefetches the block a
//! kilobyte ahead. Where these choices were measured:
//! `docs/performance.md` of the repository this crate lives in.
//!
//! Dispatch cannot be misused from safe code (memchr's rule): the kernels
//! take a `Path`, and a `Path` of a level is only made by `Path::new`,
//! which returns `None` when the CPU lacks the level's instructions.
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_len;
#[cfg(target_arch = "x86_64")]
mod kernels;
#[cfg(target_arch = "x86_64")]
mod vector;

use core::sync::atomic::{AtomicU8, Ordering};

/// How far ahead of the block it converts a conversion kernel prefetches.
pub(crate) const PREFETCH: usize = 1024;

/// The input length from which the conversion kernels prefetch (twice the
/// second-level cache of the machines measured).
pub(crate) const PREFETCH_FROM: usize = 2 << 20;

/// A level of vector code, lowest first.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Portable word-at-a-time code for ASCII runs, scalar code for the rest.
    Portable = 1,
    /// SSE2 blocks of 16 bytes (x86_64 only).
    Sse2 = 2,
    /// AVX2 blocks of 32 bytes (x86_64 with AVX2 only).
    Avx2 = 3,
    /// AVX-512 blocks of 64 bytes for the conversions and the length
    /// passes (their last bytes in AVX2 blocks; x86_64 with AVX2, AVX-512
    /// F, BW, VBMI and VBMI2, BMI2 and POPCNT only).
    Avx512 = 4,
}

impl Level {
    /// `"portable"`, `"sse2"`, `"avx2"` or `"avx512"`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Sse2 => "sse2",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// The best level this CPU runs (detected once): what every converter
    /// runs unless told otherwise.
    pub fn best() -> Level {
        Path::best().level()
    }

    fn from_u8(v: u8) -> Option<Level> {
        match v {
            1 => Some(Level::Portable),
            2 => Some(Level::Sse2),
            3 => Some(Level::Avx2),
            4 => Some(Level::Avx512),
            _ => None,
        }
    }
}

impl core::fmt::Display for Level {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`Level`] (see [`Level::name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseLevelError(alloc::string::String);

impl core::fmt::Display for ParseLevelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "unknown SIMD level {:?}: use avx512, avx2, sse2 or portable",
            self.0
        )
    }
}

impl core::error::Error for ParseLevelError {}

impl core::str::FromStr for Level {
    type Err = ParseLevelError;
    fn from_str(s: &str) -> Result<Level, ParseLevelError> {
        match s {
            "portable" => Ok(Level::Portable),
            "sse2" => Ok(Level::Sse2),
            "avx2" => Ok(Level::Avx2),
            "avx512" => Ok(Level::Avx512),
            _ => Err(ParseLevelError(s.into())),
        }
    }
}

/// A [`Level`] this CPU is known to run: what a converter keeps.
///
/// Invariant (what makes the kernels' `unsafe` sound): a `Path` of a level
/// that needs CPU features is only made by [`Path::new`] after checking
/// them, or by [`Path::new_unchecked`] under the same proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Path(Level);

/// Whether the CPU has `feature`: detected at run time with `std`, else
/// whether the compilation target enables it.
#[cfg(all(target_arch = "x86_64", feature = "std"))]
macro_rules! has {
    ($feature:tt) => {
        std::is_x86_feature_detected!($feature)
    };
}
#[cfg(all(target_arch = "x86_64", not(feature = "std")))]
macro_rules! has {
    ($feature:tt) => {
        cfg!(target_feature = $feature)
    };
}

impl Path {
    pub(crate) const PORTABLE: Path = Path(Level::Portable);

    /// `None` when this CPU lacks the instructions of `level`.
    // Without `std` the checks are constants of the target.
    #[cfg_attr(not(feature = "std"), allow(clippy::nonminimal_bool, clippy::eq_op))]
    pub(crate) fn new(level: Level) -> Option<Path> {
        let ok = match level {
            Level::Portable => true,
            Level::Sse2 => cfg!(target_arch = "x86_64"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => has!("avx2"),
            // Its kernels end their runs and searches with AVX2 code.
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                has!("avx2")
                    && has!("avx512f")
                    && has!("avx512bw")
                    && has!("avx512vbmi")
                    && has!("avx512vbmi2")
                    && has!("bmi2")
                    && has!("popcnt")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Level::Avx2 | Level::Avx512 => false,
        };
        ok.then_some(Path(level))
    }

    /// # Safety
    /// The CPU must have the instructions of `level`.
    unsafe fn new_unchecked(level: Level) -> Path {
        Path(level)
    }

    pub(crate) fn level(self) -> Level {
        self.0
    }

    /// Every path this CPU can run, best last.
    #[cfg(test)]
    pub(crate) fn available() -> alloc::vec::Vec<Path> {
        [Level::Portable, Level::Sse2, Level::Avx2, Level::Avx512]
            .into_iter()
            .filter_map(Path::new)
            .collect()
    }

    /// The best path this CPU runs (detected once).
    #[inline(always)]
    pub(crate) fn best() -> Path {
        match Level::from_u8(BEST.load(Ordering::Relaxed)) {
            // SAFETY: `BEST` only ever holds a level taken from a `Path`
            // made by `Path::new` (in `detect`).
            Some(level) => unsafe { Path::new_unchecked(level) },
            None => detect(),
        }
    }

    /// The best path this CPU runs at or below `max`.
    pub(crate) fn at_most(max: Level) -> Path {
        let best = Path::best();
        if best.level() <= max {
            return best;
        }
        [Level::Avx2, Level::Sse2]
            .into_iter()
            .filter(|&l| l <= max)
            .find_map(Path::new)
            .unwrap_or(Path::PORTABLE)
    }
}

/// 0 until detected, then the discriminant of the best [`Level`], as
/// checked by [`Path::new`]. A cache of what the CPU has, not a setting.
static BEST: AtomicU8 = AtomicU8::new(0);

#[cold]
fn detect() -> Path {
    let best = [Level::Avx512, Level::Avx2, Level::Sse2]
        .into_iter()
        .find_map(Path::new)
        .unwrap_or(Path::PORTABLE);
    BEST.store(best.level() as u8, Ordering::Relaxed);
    best
}

impl Path {
    /// V of the longest prefix of `src` (Corrected UTF-8, starting at a
    /// unit) that the fast path takes, into `dst`; returns the number of
    /// bytes read and written. Bytes of `dst` past those written may have
    /// been changed. May stop earlier than it could near the ends of `src`
    /// and `dst`.
    #[inline]
    pub(crate) fn decode_run(self, src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        decode_run_on(self, src, dst)
    }

    /// W of the longest prefix of `src` (view bytes, starting at a unit)
    /// that the fast path takes; as [`Path::decode_run`].
    #[inline]
    pub(crate) fn encode_run(self, src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        encode_run_on(self, src, dst)
    }

    /// Index of the first byte at or after `from` that the disk scan of
    /// the length passes must examine (DD–DF EE EF F7 FB FD FE), or
    /// `s.len()`.
    #[inline]
    pub(crate) fn find_disk_candidate(self, s: &[u8], from: usize) -> usize {
        find_on(self, s, from, false)
    }

    /// As [`Path::find_disk_candidate`] for the view scan (E0 F0 F8 FC FE).
    #[inline]
    pub(crate) fn find_view_candidate(self, s: &[u8], from: usize) -> usize {
        find_on(self, s, from, true)
    }

    /// The candidates (as [`Path::find_disk_candidate`], or
    /// [`Path::find_view_candidate`] with `view`) among the block of bytes
    /// at `i` as two masks (bit `j` for `s[i + j]`): the units that
    /// certainly change length, and the others; then the block's length
    /// (16, 32 or 64). `None` on the portable path and where fewer than a
    /// block and three bytes of look-ahead remain.
    #[inline]
    pub(crate) fn candidate_block(
        self,
        s: &[u8],
        i: usize,
        view: bool,
    ) -> Option<(u64, u64, usize)> {
        candidate_block_on(self, s, i, view)
    }

    /// How many units certainly change length (disk units that grow in
    /// the view; with `view`, view units that shrink on disk) in whole
    /// vectors from `i` on, up to the first vector holding a candidate
    /// [`Path::candidate_block`] would mark `other`, one reaching past
    /// `stop`, or the last whole block with its look-ahead: `(where it
    /// stopped, count)`. `(i, 0)` on the portable path.
    #[inline]
    pub(crate) fn count_changing(
        self,
        s: &[u8],
        i: usize,
        stop: usize,
        view: bool,
    ) -> (usize, u64) {
        count_changing_on(self, s, i, stop, view)
    }

    /// Index of the first zero byte of `s`.
    #[inline]
    pub(crate) fn find_zero(self, s: &[u8]) -> Option<usize> {
        find_zero_on(self, s)
    }
}

/// [`Path::find_zero`] on the path `p`: vectors where the path has them,
/// then words, then bytes.
pub(crate) fn find_zero_on(p: Path, s: &[u8]) -> Option<usize> {
    let i = match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            // SAFETY: a `Path` of these levels exists only when the CPU
            // has AVX2 (the invariant of `Path`).
            unsafe { x86::zero_avx2(s) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Sse2 => x86::zero_sse2(s),
        _ => 0,
    };
    if i < s.len() && s[i] == 0 {
        return Some(i);
    }
    super::ascii::find_zero(&s[i..]).map(|k| i + k)
}

/// [`candidate_block`] on the path `p`.
#[inline]
pub(crate) fn candidate_block_on(
    p: Path,
    s: &[u8],
    i: usize,
    view: bool,
) -> Option<(u64, u64, usize)> {
    match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if i + 64 + 3 <= s.len() => {
            // SAFETY: a `Path` of `Level::Avx512` exists only when the CPU
            // has every feature `block_avx512` enables (`Path::new`); the
            // block and its look-ahead are inside `s`.
            let (exact, other) = unsafe { x86::block_avx512(s, i, view) };
            Some((exact, other, 64))
        }
        // Near the end, the AVX-512 level goes on with 32-byte blocks.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 if i + 32 + 3 <= s.len() => {
            // SAFETY: a `Path` of `Level::Avx2` or `Level::Avx512` exists
            // only when the CPU has AVX2 (the invariant of `Path`; see
            // `Path::new`); the block and its look-ahead are inside `s`.
            let (exact, other) = unsafe { x86::block_avx2(s, i, view) };
            Some((exact.into(), other.into(), 32))
        }
        #[cfg(target_arch = "x86_64")]
        Level::Sse2 if i + 16 + 3 <= s.len() => {
            let (exact, other) = x86::block_sse2(s, i, view);
            Some((exact.into(), other.into(), 16))
        }
        _ => None,
    }
}

/// [`Path::count_changing`] on the path `p`.
pub(crate) fn count_changing_on(
    p: Path,
    s: &[u8],
    i: usize,
    stop: usize,
    view: bool,
) -> (usize, u64) {
    // A function per kernel: the disk counts compile as they did before
    // the view counts existed.
    match (p.level(), view) {
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, false) => {
            // SAFETY: a `Path` of `Level::Avx512` exists only when the CPU
            // has every feature `count_growing_avx512` enables.
            unsafe { x86::count_growing_avx512(s, i, stop) }
        }
        #[cfg(target_arch = "x86_64")]
        (Level::Avx512, true) => {
            // SAFETY: as for `count_growing_avx512`.
            unsafe { x86::count_shrinking_avx512(s, i, stop) }
        }
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, false) => {
            // SAFETY: a `Path` of `Level::Avx2` exists only when the CPU
            // has AVX2 (see `decode_run_on`, `Path::new`).
            unsafe { x86::count_growing_avx2(s, i, stop) }
        }
        #[cfg(target_arch = "x86_64")]
        (Level::Avx2, true) => {
            // SAFETY: as for `count_growing_avx2`.
            unsafe { x86::count_shrinking_avx2(s, i, stop) }
        }
        #[cfg(target_arch = "x86_64")]
        (Level::Sse2, false) => x86::count_growing_sse2(s, i, stop),
        #[cfg(target_arch = "x86_64")]
        (Level::Sse2, true) => x86::count_shrinking_sse2(s, i, stop),
        _ => (i, 0),
    }
}

fn portable_run(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
    let n = src.len().min(dst.len());
    let run = super::ascii::ascii_prefix_len(&src[..n]);
    dst[..run].copy_from_slice(&src[..run]);
    (run, run)
}

pub(crate) fn decode_run_on(p: Path, src: &[u8], dst: &mut [u8]) -> (usize, usize) {
    match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if src.len().min(dst.len()) >= 64 => {
            // SAFETY: a `Path` of `Level::Avx512` exists only when the CPU
            // has every feature `decode_avx512` enables (`Path::new`).
            unsafe { x86::decode_avx512(src, dst) }
        }
        // Too short for a 64-byte block: straight to the AVX2 blocks.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            // SAFETY: a `Path` of `Level::Avx2` or `Level::Avx512` exists
            // only when the CPU has AVX2 (the invariant of `Path`).
            unsafe { x86::decode_avx2(src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Sse2 => x86::decode_sse2(src, dst),
        _ => portable_run(src, dst),
    }
}

pub(crate) fn encode_run_on(p: Path, src: &[u8], dst: &mut [u8]) -> (usize, usize) {
    match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if src.len().min(dst.len()) >= 64 => {
            // SAFETY: as in `decode_run_on`.
            unsafe { x86::encode_avx512(src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 | Level::Avx512 => {
            // SAFETY: as in `decode_run_on`.
            unsafe { x86::encode_avx2(src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Sse2 => x86::encode_sse2(src, dst),
        _ => portable_run(src, dst),
    }
}

/// The AVX-512 level's 64-byte blocks alone, without the 32-byte blocks
/// that end its runs (`None` on other paths): for the tests, so that the
/// AVX2 code cannot hide what the 64-byte kernel refuses.
#[cfg(test)]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(crate) fn blocks_avx512_on(
    p: Path,
    encode: bool,
    src: &[u8],
    dst: &mut [u8],
) -> Option<(usize, usize)> {
    match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            // SAFETY: as in `decode_run_on`.
            Some(unsafe { x86::blocks_avx512(encode, src, dst) })
        }
        _ => None,
    }
}

pub(crate) fn find_on(p: Path, s: &[u8], from: usize, view: bool) -> usize {
    let from = from.min(s.len());
    let i = match p.level() {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => {
            // SAFETY: as in `count_changing_on`.
            unsafe { x86::find_avx512(s, from, view) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => {
            // SAFETY: as in `count_changing_on`.
            unsafe { x86::find_avx2(s, from, view) }
        }
        #[cfg(target_arch = "x86_64")]
        Level::Sse2 => x86::find_sse2(s, from, view),
        _ => from,
    };
    let cand: fn(u8) -> bool = if view {
        |b| matches!(b, 0xE0 | 0xF0 | 0xF8 | 0xFC | 0xFE)
    } else {
        |b| matches!(b, 0xDD..=0xDF | 0xEE | 0xEF | 0xF7 | 0xFB | 0xFD | 0xFE)
    };
    if i < s.len() && cand(s[i]) {
        return i;
    }
    s[i..]
        .iter()
        .position(|&b| cand(b))
        .map_or(s.len(), |k| i + k)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{avx512, avx512_len, kernels};
    use core::arch::x86_64::{__m128i, __m256i};

    pub(super) fn decode_sse2(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: SSE2 is part of the x86_64 baseline; `run` reads and
        // writes only within `src` and `dst`: before each block it checks
        // that the block and two bytes of look-ahead fit in `src` and
        // twice the block in `dst`.
        unsafe { kernels::run::<__m128i, false>(src, dst) }
    }

    pub(super) fn encode_sse2(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: as in `decode_sse2`.
        unsafe { kernels::run::<__m128i, true>(src, dst) }
    }

    pub(super) fn zero_sse2(s: &[u8]) -> usize {
        // SAFETY: SSE2 is baseline; `find_zero` loads only whole vectors
        // inside `s`.
        unsafe { kernels::find_zero::<__m128i>(s) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn zero_avx2(s: &[u8]) -> usize {
        // SAFETY: the caller guarantees AVX2; `find_zero` loads only whole
        // vectors inside `s`.
        unsafe { kernels::find_zero::<__m256i>(s) }
    }

    pub(super) fn find_sse2(s: &[u8], from: usize, view: bool) -> usize {
        // SAFETY: SSE2 is baseline; `find` loads a vector at `i`, `i + 1`
        // and `i + 2` only when `i + LANES + 2 <= s.len()`.
        unsafe {
            if view {
                kernels::find::<__m128i, true>(s, from)
            } else {
                kernels::find::<__m128i, false>(s, from)
            }
        }
    }

    pub(super) fn count_growing_sse2(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: SSE2 is baseline; `count_growing` loads only whole
        // vectors with their look-ahead inside `s`.
        unsafe { kernels::count_growing::<__m128i>(s, i, stop) }
    }

    pub(super) fn count_shrinking_sse2(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: SSE2 is baseline; `count_shrinking` loads only whole
        // vectors with their look-ahead inside `s`.
        unsafe { kernels::count_shrinking::<__m128i>(s, i, stop) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn count_growing_avx2(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: the caller guarantees AVX2; `count_growing` stays inside
        // `s` as in `count_growing_sse2`.
        unsafe { kernels::count_growing::<__m256i>(s, i, stop) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn count_shrinking_avx2(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: the caller guarantees AVX2; `count_shrinking` stays
        // inside `s` as in `count_shrinking_sse2`.
        unsafe { kernels::count_shrinking::<__m256i>(s, i, stop) }
    }

    /// Candidate masks of the 16 bytes at `i`; needs `i + 19 <= s.len()`.
    pub(super) fn block_sse2(s: &[u8], i: usize, view: bool) -> (u32, u32) {
        assert!(i + 16 + 3 <= s.len());
        // SAFETY: SSE2 is baseline; the loads (16 bytes at `i` to `i + 3`)
        // are inside `s` by the assertion.
        unsafe {
            if view {
                kernels::masks_at::<__m128i, true>(s.as_ptr().add(i))
            } else {
                kernels::masks_at::<__m128i, false>(s.as_ptr().add(i))
            }
        }
    }

    /// Candidate masks of the 32 bytes at `i`; needs `i + 35 <= s.len()`.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn block_avx2(s: &[u8], i: usize, view: bool) -> (u32, u32) {
        assert!(i + 32 + 3 <= s.len());
        // SAFETY: the caller guarantees AVX2; the loads are inside `s` by
        // the assertion.
        unsafe {
            if view {
                kernels::masks_at::<__m256i, true>(s.as_ptr().add(i))
            } else {
                kernels::masks_at::<__m256i, false>(s.as_ptr().add(i))
            }
        }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode_avx2(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: the caller guarantees AVX2; `run` stays inside the slices.
        unsafe { kernels::run::<__m256i, false>(src, dst) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn encode_avx2(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: as in `decode_avx2`.
        unsafe { kernels::run::<__m256i, true>(src, dst) }
    }

    /// # Safety
    /// The CPU must have AVX2, AVX-512 F, BW, VBMI and VBMI2, BMI2 and
    /// POPCNT.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn decode_avx512(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: the caller guarantees the features; both runs stay
        // inside the slices they are given (see their `# Safety`).
        unsafe { tail_avx2::<false>(avx512::run::<false>(src, dst), src, dst) }
    }

    /// # Safety
    /// As [`decode_avx512`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn encode_avx512(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: as in `decode_avx512`.
        unsafe { tail_avx2::<true>(avx512::run::<true>(src, dst), src, dst) }
    }

    /// # Safety
    /// As [`decode_avx512`].
    #[cfg(test)]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn blocks_avx512(encode: bool, src: &[u8], dst: &mut [u8]) -> (usize, usize) {
        // SAFETY: as in `decode_avx512`.
        unsafe {
            if encode {
                avx512::run::<true>(src, dst)
            } else {
                avx512::run::<false>(src, dst)
            }
        }
    }

    /// After a 64-byte run that read `r` and wrote `w` bytes: the rest in
    /// 32-byte blocks, which take the last 34 to 63 bytes (and output
    /// room) the 64-byte blocks cannot, and a refused block's first half
    /// when the unit that stopped it lies in the second.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    unsafe fn tail_avx2<const ENCODE: bool>(
        (r, w): (usize, usize),
        src: &[u8],
        dst: &mut [u8],
    ) -> (usize, usize) {
        let (src, dst) = (&src[r..], &mut dst[w..]);
        // SAFETY: the caller guarantees AVX2; the AVX2 entry points stay
        // inside the slices (`decode_avx2`).
        let (r2, w2) = unsafe {
            if ENCODE {
                encode_avx2(src, dst)
            } else {
                decode_avx2(src, dst)
            }
        };
        (r + r2, w + w2)
    }

    /// # Safety
    /// As [`decode_avx512`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn count_growing_avx512(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: the caller guarantees the features; `count_growing`
        // loads only whole vectors with their look-ahead inside `s`.
        unsafe { avx512_len::count_growing(s, i, stop) }
    }

    /// # Safety
    /// As [`decode_avx512`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn count_shrinking_avx512(s: &[u8], i: usize, stop: usize) -> (usize, u64) {
        // SAFETY: the caller guarantees the features; `count_shrinking`
        // loads only whole vectors with their look-ahead inside `s`.
        unsafe { avx512_len::count_shrinking(s, i, stop) }
    }

    /// Candidate masks of the 64 bytes at `i`; needs `i + 67 <= s.len()`.
    ///
    /// # Safety
    /// As [`decode_avx512`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn block_avx512(s: &[u8], i: usize, view: bool) -> (u64, u64) {
        assert!(i + 64 + 3 <= s.len());
        // SAFETY: the caller guarantees the features; the loads (64 bytes
        // at `i` to `i + 3`) are inside `s` by the assertion.
        unsafe {
            if view {
                avx512_len::masks_at::<true>(s.as_ptr().add(i))
            } else {
                avx512_len::masks_at::<false>(s.as_ptr().add(i))
            }
        }
    }

    /// The 64-byte search, then from where it stopped (fewer than 66
    /// bytes left, or a candidate there) the 32-byte one.
    ///
    /// # Safety
    /// As [`decode_avx512`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vbmi,avx512vbmi2,bmi2,popcnt")]
    pub(super) unsafe fn find_avx512(s: &[u8], from: usize, view: bool) -> usize {
        // SAFETY: the caller guarantees the features (AVX2 among them);
        // both searches load only vectors with their look-ahead inside `s`
        // (see `find_sse2`).
        let i = unsafe {
            if view {
                avx512_len::find::<true>(s, from)
            } else {
                avx512_len::find::<false>(s, from)
            }
        };
        if i + 64 + 2 <= s.len() {
            return i;
        }
        // SAFETY: as above (a candidate at `i` is found again at once).
        unsafe { find_avx2(s, i, view) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn find_avx2(s: &[u8], from: usize, view: bool) -> usize {
        // SAFETY: the caller guarantees AVX2; `find` stays inside `s` as
        // in `find_sse2`.
        unsafe {
            if view {
                kernels::find::<__m256i, true>(s, from)
            } else {
                kernels::find::<__m256i, false>(s, from)
            }
        }
    }
}

#[cfg(test)]
mod tests;
