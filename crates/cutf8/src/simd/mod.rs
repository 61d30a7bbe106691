//! Vector fast paths for the codec, and the only `unsafe` in it.
//!
//! Three jobs, each a plain safe function the converters call first and
//! finish with scalar code: [`decode_run`] (V) and [`encode_run`] (W)
//! convert the longest prefix of their input made of units the vector
//! kernels take (see `kernels`), and [`find_disk_candidate`] /
//! [`find_view_candidate`] skip to the next byte the length passes must
//! look at. They know nothing of streaming state: a run starts at a unit
//! boundary and stops at one.
//!
//! The code path is picked once, on first use, and cached: AVX2 when the CPU
//! has it, SSE2 otherwise (always there on x86_64), and on other targets
//! the portable word-at-a-time ASCII copy of [`super::ascii`]. The
//! environment variable `CUTF8FS_SIMD=avx2|sse2|portable` can only lower
//! the choice (for measurements). [`path`] names the live path.
//!
//! Measured on an AMD EPYC (Zen 4, 2 shared cores) with
//! `scripts/bench-codec.sh`: AVX2 blocks of 32 bytes convert the non-ASCII
//! corpora 1.6–2× as fast as SSE2 blocks of 16; ASCII runs near memcpy
//! speed either way (checked four vectors at a time). In thread CPU time
//! (the machine is shared), AVX2 converts CJK at 3.3 GB/s where
//! encoding_rs's UTF-8 → UTF-16 does 1.4. The kernels are bound by
//! instruction count: a variant that computed each lane's carry straight
//! from look-ahead loads (a much shorter dependent chain, more
//! instructions) measured the same, so the simpler lane-to-lane carries
//! stayed.
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "x86_64")]
mod kernels;
#[cfg(target_arch = "x86_64")]
mod vector;

use std::sync::atomic::{AtomicU8, Ordering};

/// A code path of the vector fast paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Path {
    Portable = 1,
    Sse2 = 2,
    Avx2 = 3,
}

impl Path {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Sse2 => "sse2",
            Path::Avx2 => "avx2",
        }
    }

    /// Every path this CPU can run, best last.
    pub(crate) fn available() -> Vec<Path> {
        let mut v = vec![Path::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            v.push(Path::Sse2);
            if std::is_x86_feature_detected!("avx2") {
                v.push(Path::Avx2);
            }
        }
        v
    }
}

/// 0 until detected, then a [`Path`] discriminant.
static LIVE: AtomicU8 = AtomicU8::new(0);

#[cold]
fn detect() -> Path {
    let best = *Path::available().last().unwrap_or(&Path::Portable);
    let wanted = match std::env::var("CUTF8FS_SIMD").as_deref() {
        Ok("portable") => Path::Portable,
        Ok("sse2") => Path::Sse2,
        _ => best,
    };
    let p = wanted.min(best);
    LIVE.store(p as u8, Ordering::Relaxed);
    p
}

/// The path the converters use on this machine.
#[inline(always)]
pub(crate) fn path() -> Path {
    match LIVE.load(Ordering::Relaxed) {
        1 => Path::Portable,
        2 => Path::Sse2,
        3 => Path::Avx2,
        _ => detect(),
    }
}

/// V of the longest prefix of `src` (Corrected UTF-8, starting at a unit)
/// that the fast path takes, into `dst`; returns its length, which is
/// also the number of bytes written. Bytes of `dst` past it are untouched.
/// May return less than it could near the ends of `src` and `dst`.
#[inline]
pub(crate) fn decode_run(src: &[u8], dst: &mut [u8]) -> usize {
    decode_run_on(path(), src, dst)
}

/// W of the longest prefix of `src` (view bytes, starting at a unit) that
/// the fast path takes; as [`decode_run`].
#[inline]
pub(crate) fn encode_run(src: &[u8], dst: &mut [u8]) -> usize {
    encode_run_on(path(), src, dst)
}

/// Index of the first byte at or after `from` that [`super::length`]'s
/// disk scan must examine (DD–DF EE EF F7 FB FD FE), or `s.len()`.
#[inline]
pub(crate) fn find_disk_candidate(s: &[u8], from: usize) -> usize {
    find_on(path(), s, from, false)
}

/// As [`find_disk_candidate`] for the view scan (E0 F0 F8 FC FE).
#[inline]
pub(crate) fn find_view_candidate(s: &[u8], from: usize) -> usize {
    find_on(path(), s, from, true)
}

fn portable_run(src: &[u8], dst: &mut [u8]) -> usize {
    let n = src.len().min(dst.len());
    let run = super::ascii::ascii_prefix_len(&src[..n]);
    dst[..run].copy_from_slice(&src[..run]);
    run
}

pub(crate) fn decode_run_on(p: Path, src: &[u8], dst: &mut [u8]) -> usize {
    match p {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: `Path::Avx2` is only ever chosen (by `detect` or a
            // test, from `Path::available`) when the CPU has AVX2.
            unsafe { x86::decode_avx2(src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Sse2 => x86::decode_sse2(src, dst),
        _ => portable_run(src, dst),
    }
}

pub(crate) fn encode_run_on(p: Path, src: &[u8], dst: &mut [u8]) -> usize {
    match p {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: as in `decode_run_on`.
            unsafe { x86::encode_avx2(src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Sse2 => x86::encode_sse2(src, dst),
        _ => portable_run(src, dst),
    }
}

pub(crate) fn find_on(p: Path, s: &[u8], from: usize, view: bool) -> usize {
    let from = from.min(s.len());
    let i = match p {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: as in `decode_run_on`.
            unsafe { x86::find_avx2(s, from, view) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Sse2 => x86::find_sse2(s, from, view),
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
    use super::kernels;
    use core::arch::x86_64::{__m128i, __m256i};

    pub(super) fn decode_sse2(src: &[u8], dst: &mut [u8]) -> usize {
        // SAFETY: SSE2 is part of the x86_64 baseline; `run` reads and
        // writes only within `src` and `dst`: before each block it checks
        // that the block and two bytes of look-ahead fit in both.
        unsafe { kernels::run::<__m128i, false>(src, dst) }
    }

    pub(super) fn encode_sse2(src: &[u8], dst: &mut [u8]) -> usize {
        // SAFETY: as in `decode_sse2`.
        unsafe { kernels::run::<__m128i, true>(src, dst) }
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

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode_avx2(src: &[u8], dst: &mut [u8]) -> usize {
        // SAFETY: the caller guarantees AVX2; `run` stays inside the slices.
        unsafe { kernels::run::<__m256i, false>(src, dst) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn encode_avx2(src: &[u8], dst: &mut [u8]) -> usize {
        // SAFETY: as in `decode_avx2`.
        unsafe { kernels::run::<__m256i, true>(src, dst) }
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
