//! The handful of byte-lane operations the kernels need, over SSE2's
//! `__m128i` and AVX2's `__m256i` (the shape of memchr's `Vector` trait).
//!
//! Every method is `#[inline(always)]` so that it is compiled inside the
//! kernel that calls it, and so under that kernel's `target_feature`.

use core::arch::x86_64::*;

/// A vector of `LANES` bytes.
///
/// # Safety
///
/// The methods are `unsafe` because they execute the instructions of the
/// implementing type: a caller must make sure the CPU has them (SSE2 always
/// does on x86_64; AVX2 is detected at run time in `super`). `load` and
/// `store` also need `LANES` valid bytes at the pointer.
pub(super) trait Vector: Copy {
    const LANES: usize;
    unsafe fn splat(b: u8) -> Self;
    unsafe fn load(p: *const u8) -> Self;
    unsafe fn store(self, p: *mut u8);
    unsafe fn add(self, o: Self) -> Self;
    unsafe fn sub(self, o: Self) -> Self;
    unsafe fn and(self, o: Self) -> Self;
    unsafe fn or(self, o: Self) -> Self;
    /// `!self & o`.
    unsafe fn andnot(self, o: Self) -> Self;
    /// 0xFF where equal, 0 elsewhere.
    unsafe fn eq(self, o: Self) -> Self;
    /// 0xFF where `self >= o` as unsigned bytes.
    unsafe fn ge(self, o: Self) -> Self;
    unsafe fn xor(self, o: Self) -> Self;
    /// 0xFF where `self > o` as signed bytes.
    unsafe fn gt_i8(self, o: Self) -> Self;
    /// Unsigned minimum.
    unsafe fn min(self, o: Self) -> Self;
    /// `a` where `self` (a mask of 0 or 0xFF lanes) is set, `b` elsewhere.
    unsafe fn select(self, a: Self, b: Self) -> Self;
    /// Lanes moved one or two places towards the end (lane `j` gets lane
    /// `j - k`), zeros shifted in: "the byte `k` before".
    unsafe fn up1(self) -> Self;
    unsafe fn up2(self) -> Self;
    /// Lanes moved one place towards the start (lane `j` gets lane
    /// `j + 1`), a zero shifted in: "the byte after".
    unsafe fn down1(self) -> Self;
    /// Bit `j` is the high bit of lane `j`.
    unsafe fn movemask(self) -> u32;

    /// Store lanes `0..commit` at `p` with the lane of `ins` inserted
    /// before each lane whose bit is set in `mask` (only bits below
    /// `commit`); returns the number of bytes that make up the result.
    /// Writes at most `2 * LANES` bytes (more than it returns).
    #[inline(always)]
    unsafe fn store_grown(self, ins: Self, mask: u32, commit: usize, p: *mut u8) -> usize {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        self.store(a.as_mut_ptr());
        ins.store(b.as_mut_ptr());
        let mut o = 0;
        for j in 0..commit {
            if mask >> j & 1 == 1 {
                *p.add(o) = b[j];
                o += 1;
            }
            *p.add(o) = a[j];
            o += 1;
        }
        o
    }

    /// Store lanes `0..commit` at `p` but those whose bit is set in `mask`;
    /// returns the number of bytes stored. Writes at most `LANES` bytes.
    #[inline(always)]
    unsafe fn store_shrunk(self, mask: u32, commit: usize, p: *mut u8) -> usize {
        let mut a = [0u8; 32];
        self.store(a.as_mut_ptr());
        let mut o = 0;
        for (j, &b) in a.iter().enumerate().take(commit) {
            if mask >> j & 1 == 0 {
                *p.add(o) = b;
                o += 1;
            }
        }
        o
    }
}

/// For each mask of 8 lanes: a `pshufb` index that gathers the lanes whose
/// bit is clear to the front (the rest zeroed, 0x80).
static SHRINK_TABLE: [[u8; 16]; 256] = shrink_table();

const fn shrink_table() -> [[u8; 16]; 256] {
    let mut t = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut q, mut j) = (0, 0);
        while j < 8 {
            if (m >> j) & 1 == 0 {
                t[m][q] = j as u8;
                q += 1;
            }
            j += 1;
        }
        m += 1;
    }
    t
}

/// For each mask of 8 lanes: a `pshufb` index that spreads the 8 low bytes
/// of a register and puts byte `8 + j` before byte `j` for every set bit
/// `j` (the inserted byte sits in the high half); unused places are
/// zeroed (0x80).
static GROW_TABLE: [[u8; 16]; 256] = grow_table();

const fn grow_table() -> [[u8; 16]; 256] {
    let mut t = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut q, mut j) = (0, 0);
        while j < 8 {
            if (m >> j) & 1 == 1 {
                t[m][q] = 8 + j as u8;
                q += 1;
            }
            t[m][q] = j as u8;
            q += 1;
            j += 1;
        }
        m += 1;
    }
    t
}

impl Vector for __m128i {
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn splat(b: u8) -> Self {
        _mm_set1_epi8(b as i8)
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        _mm_loadu_si128(p as *const __m128i)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        _mm_storeu_si128(p as *mut __m128i, self)
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        _mm_add_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        _mm_sub_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn and(self, o: Self) -> Self {
        _mm_and_si128(self, o)
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        _mm_or_si128(self, o)
    }
    #[inline(always)]
    unsafe fn andnot(self, o: Self) -> Self {
        _mm_andnot_si128(self, o)
    }
    #[inline(always)]
    unsafe fn eq(self, o: Self) -> Self {
        _mm_cmpeq_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn ge(self, o: Self) -> Self {
        _mm_cmpeq_epi8(_mm_max_epu8(self, o), self)
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        _mm_xor_si128(self, o)
    }
    #[inline(always)]
    unsafe fn gt_i8(self, o: Self) -> Self {
        _mm_cmpgt_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn min(self, o: Self) -> Self {
        _mm_min_epu8(self, o)
    }
    #[inline(always)]
    unsafe fn select(self, a: Self, b: Self) -> Self {
        _mm_or_si128(_mm_and_si128(self, a), _mm_andnot_si128(self, b))
    }
    #[inline(always)]
    unsafe fn up1(self) -> Self {
        _mm_slli_si128::<1>(self)
    }
    #[inline(always)]
    unsafe fn up2(self) -> Self {
        _mm_slli_si128::<2>(self)
    }
    #[inline(always)]
    unsafe fn down1(self) -> Self {
        _mm_srli_si128::<1>(self)
    }
    #[inline(always)]
    unsafe fn movemask(self) -> u32 {
        _mm_movemask_epi8(self) as u32
    }
}

impl Vector for __m256i {
    const LANES: usize = 32;
    #[inline(always)]
    unsafe fn splat(b: u8) -> Self {
        _mm256_set1_epi8(b as i8)
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> Self {
        _mm256_loadu_si256(p as *const __m256i)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        _mm256_storeu_si256(p as *mut __m256i, self)
    }
    #[inline(always)]
    unsafe fn add(self, o: Self) -> Self {
        _mm256_add_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn sub(self, o: Self) -> Self {
        _mm256_sub_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn and(self, o: Self) -> Self {
        _mm256_and_si256(self, o)
    }
    #[inline(always)]
    unsafe fn or(self, o: Self) -> Self {
        _mm256_or_si256(self, o)
    }
    #[inline(always)]
    unsafe fn andnot(self, o: Self) -> Self {
        _mm256_andnot_si256(self, o)
    }
    #[inline(always)]
    unsafe fn eq(self, o: Self) -> Self {
        _mm256_cmpeq_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn ge(self, o: Self) -> Self {
        _mm256_cmpeq_epi8(_mm256_max_epu8(self, o), self)
    }
    #[inline(always)]
    unsafe fn xor(self, o: Self) -> Self {
        _mm256_xor_si256(self, o)
    }
    #[inline(always)]
    unsafe fn gt_i8(self, o: Self) -> Self {
        _mm256_cmpgt_epi8(self, o)
    }
    #[inline(always)]
    unsafe fn min(self, o: Self) -> Self {
        _mm256_min_epu8(self, o)
    }
    #[inline(always)]
    unsafe fn select(self, a: Self, b: Self) -> Self {
        _mm256_blendv_epi8(b, a, self)
    }
    // Byte shifts across the two 128-bit halves: pair `self` with a copy
    // of itself moved by one half (zeros in the other), then `alignr`.
    #[inline(always)]
    unsafe fn up1(self) -> Self {
        _mm256_alignr_epi8::<15>(self, _mm256_permute2x128_si256::<0x08>(self, self))
    }
    #[inline(always)]
    unsafe fn up2(self) -> Self {
        _mm256_alignr_epi8::<14>(self, _mm256_permute2x128_si256::<0x08>(self, self))
    }
    #[inline(always)]
    unsafe fn down1(self) -> Self {
        _mm256_alignr_epi8::<1>(_mm256_permute2x128_si256::<0x81>(self, self), self)
    }
    #[inline(always)]
    unsafe fn movemask(self) -> u32 {
        _mm256_movemask_epi8(self) as u32
    }
    // Eight lanes at a time: the lanes and their insertions side by side in
    // one register, spread by a `pshufb` from `GROW_TABLE` (SSSE3, which
    // AVX2 implies), stored whole (16 bytes, at most 12 of them valid).
    #[inline(always)]
    unsafe fn store_grown(self, ins: Self, mask: u32, commit: usize, p: *mut u8) -> usize {
        let halves = [
            (_mm256_castsi256_si128(self), _mm256_castsi256_si128(ins)),
            (
                _mm256_extracti128_si256::<1>(self),
                _mm256_extracti128_si256::<1>(ins),
            ),
        ];
        let mut o = 0;
        for (h, (a, b)) in halves.into_iter().enumerate() {
            for (k, both) in [_mm_unpacklo_epi64(a, b), _mm_unpackhi_epi64(a, b)]
                .into_iter()
                .enumerate()
            {
                let at = 16 * h + 8 * k;
                if at >= commit {
                    return o;
                }
                let m = (mask >> at) & 0xFF;
                let idx = _mm_loadu_si128(GROW_TABLE[m as usize].as_ptr() as *const __m128i);
                _mm_storeu_si128(p.add(o) as *mut __m128i, _mm_shuffle_epi8(both, idx));
                o += (commit - at).min(8) + m.count_ones() as usize;
            }
        }
        o
    }
    // Eight lanes at a time through `SHRINK_TABLE`, 8 bytes stored.
    #[inline(always)]
    unsafe fn store_shrunk(self, mask: u32, commit: usize, p: *mut u8) -> usize {
        let halves = [
            _mm256_castsi256_si128(self),
            _mm256_extracti128_si256::<1>(self),
        ];
        let mut o = 0;
        for (h, a) in halves.into_iter().enumerate() {
            for (k, lanes) in [a, _mm_unpackhi_epi64(a, a)].into_iter().enumerate() {
                let at = 16 * h + 8 * k;
                if at >= commit {
                    return o;
                }
                let m = (mask >> at) & 0xFF;
                let idx = _mm_loadu_si128(SHRINK_TABLE[m as usize].as_ptr() as *const __m128i);
                _mm_storel_epi64(p.add(o) as *mut __m128i, _mm_shuffle_epi8(lanes, idx));
                o += (commit - at).min(8) - m.count_ones() as usize;
            }
        }
        o
    }
}
