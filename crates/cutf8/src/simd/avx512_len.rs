//! The length passes' kernels for AVX-512: `kernels::find`,
//! `kernels::masks_at`, `kernels::count_growing` and
//! `kernels::count_shrinking` on vectors of 64 bytes, with lane classes
//! as `u64` masks (bit `j` is lane `j`, as in `avx512`). Same
//! definitions, same results and the same look-ahead as those (read their
//! docs first): only the width and the instructions differ. Compiled only
//! inside `super`'s AVX-512 entry points.
//!
//! A unit is decided by its lead and the bytes after it, which are
//! loaded as vectors at `p + 1`, `p + 2` (and `p + 3`), as `kernels`
//! does, so that a lane's conditions line up bit for bit and the last
//! lanes see the next bytes.
//!
//! On disk, where the index is built (`count_growing`: the hot kernel),
//! the conditions are not a compare per byte value and per condition,
//! but a `vpermb` per lead from small tables of thresholds (`GROW_N1`,
//! `CAND_N1`, `N2`), and the second and third bytes compared against
//! those thresholds, each compare masked by the one before (a masked
//! compare is an AND for free). On Zen 4 the mask work is what counts: a
//! compare into a mask and an operation between masks issue about once a
//! cycle each, and moving a mask to a general register takes two (measured
//! on this project's machine). The first versions, fifteen compares and
//! the logic between them, or ten with the logic in `u64` arithmetic
//! (five mask moves a vector), counted dense text at 11–12 GB/s, about
//! the AVX2 speed; this one at 19 (16 MiB, wall-clock best of 30). The
//! view side (`disk_len`, `scan_view`; not used by the mount) looks its
//! candidates up the same way and decides the ones that certainly shrink
//! with plain compares.

use core::arch::x86_64::*;

const LANES: usize = 64;

/// The 64 bytes at `p`.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const __m512i)
}

#[inline(always)]
unsafe fn splat(b: u8) -> __m512i {
    _mm512_set1_epi8(b as i8)
}

/// Lanes `== t`.
#[inline(always)]
unsafe fn is(v: __m512i, t: u8) -> u64 {
    _mm512_cmpeq_epi8_mask(v, splat(t))
}

/// Lanes `< t`, as unsigned bytes.
#[inline(always)]
unsafe fn below(v: __m512i, t: u8) -> u64 {
    _mm512_cmplt_epu8_mask(v, splat(t))
}

/// 80–BF: the bytes below C0 as signed bytes.
#[inline(always)]
unsafe fn cont(v: __m512i) -> u64 {
    _mm512_cmplt_epi8_mask(v, splat(0xC0))
}

/// Per-lead tables for a `vpermb` indexed by the lead minus BF (C0–FE to
/// 1–3F; FF and every byte below C0 to 0, which is no candidate). The
/// candidate leads are DD–DF (2 bytes), EE–EF (3 bytes), and F7 FB FD FE
/// ("far": candidates whatever follows, never growing).
///
/// `GROW_N1`: the lowest continuation byte after which a complete unit of
/// this lead grows (C0: none). `CAND_N1`: the lowest second byte with
/// which it is a candidate. `N2`: a bound on the third byte as a signed
/// byte, `n2 <= N2`: BF (a continuation byte) for 3-byte leads, 7F (any)
/// for 2-byte ones, and nonzero exactly for the candidate leads.
static GROW_N1: [u8; 64] = lead_table([0xA0, 0x80, 0x80, 0xBD, 0x80, 0xC0, 0xC0]);
static CAND_N1: [u8; 64] = lead_table([0xA0, 0x00, 0x00, 0xBD, 0x00, 0x00, 0xFF]);
static N2: [u8; 64] = lead_table([0x7F, 0x7F, 0x7F, 0xBF, 0xBF, 0x7E, 0x00]);

/// A table of the values for DD, DE, DF, EE, EF, the far leads and every
/// other byte, in that order.
const fn lead_table(v: [u8; 7]) -> [u8; 64] {
    let mut t = [v[6]; 64];
    let leads = [0xDD, 0xDE, 0xDF, 0xEE, 0xEF, 0xF7, 0xFB, 0xFD, 0xFE];
    let mut k = 0;
    while k < leads.len() {
        t[leads[k] as usize - 0xBF] = v[if k < 5 { k } else { 5 }];
        k += 1;
    }
    t
}

/// For a `vpermi2b` by a second byte's low seven bits, after EE: A0 for
/// BD (EE BD is a candidate, and grows, only with a third byte from A0),
/// 0 for the rest. (3D, which shares BD's seven bits, is below `CAND_N1`
/// and no continuation byte.)
static EE_BD: [u8; 128] = {
    let mut t = [0u8; 128];
    t[0x3D] = 0xA0;
    t
};

/// A table of 64 bytes (`t.len() >= 64`) in a register.
#[inline(always)]
unsafe fn table(t: &[u8]) -> __m512i {
    debug_assert!(t.len() >= LANES);
    _mm512_loadu_si512(t.as_ptr() as *const __m512i)
}

/// The disk tables in registers.
#[derive(Clone, Copy)]
struct Disk {
    grow_n1: __m512i,
    cand_n1: __m512i,
    n2: __m512i,
    ee_bd: (__m512i, __m512i),
}

impl Disk {
    #[inline(always)]
    unsafe fn new() -> Disk {
        Disk {
            grow_n1: table(&GROW_N1),
            cand_n1: table(&CAND_N1),
            n2: table(&N2),
            ee_bd: (table(&EE_BD[..64]), table(&EE_BD[64..])),
        }
    }

    /// The disk candidates among the 64 lanes at `p` (`p + 66` readable):
    /// those that certainly grow (`kernels::disk_growing`) and all of
    /// them (`kernels::disk_candidates`).
    #[inline(always)]
    unsafe fn masks(self, p: *const u8) -> (u64, u64) {
        let (v, n1, n2) = (load(p), load(p.add(1)), load(p.add(2)));
        let idx = _mm512_subs_epu8(v, splat(0xBF));
        let grow_n1 = _mm512_permutexvar_epi8(idx, self.grow_n1);
        let cand_n1 = _mm512_permutexvar_epi8(idx, self.cand_n1);
        let n2_max = _mm512_permutexvar_epi8(idx, self.n2);
        let (lo, hi) = self.ee_bd;
        let n2_min = _mm512_maskz_permutex2var_epi8(is(v, 0xEE), lo, n1, hi);
        let grow = _mm512_mask_cmpge_epu8_mask(cont(n1), n1, grow_n1);
        let grow = _mm512_mask_cmple_epi8_mask(grow, n2, n2_max);
        let grow = _mm512_mask_cmpge_epu8_mask(grow, n2, n2_min);
        let all = _mm512_test_epi8_mask(n2_max, n2_max);
        let all = _mm512_mask_cmpge_epu8_mask(all, n1, cand_n1);
        let all = _mm512_mask_cmpge_epu8_mask(all, n2, n2_min);
        (grow, all)
    }

    /// `masks(p).1` alone (`p + 66` readable).
    #[inline(always)]
    unsafe fn candidates(self, p: *const u8) -> u64 {
        let (v, n1, n2) = (load(p), load(p.add(1)), load(p.add(2)));
        let idx = _mm512_subs_epu8(v, splat(0xBF));
        let cand_n1 = _mm512_permutexvar_epi8(idx, self.cand_n1);
        let n2_max = _mm512_permutexvar_epi8(idx, self.n2);
        let (lo, hi) = self.ee_bd;
        let n2_min = _mm512_maskz_permutex2var_epi8(is(v, 0xEE), lo, n1, hi);
        let all = _mm512_test_epi8_mask(n2_max, n2_max);
        let all = _mm512_mask_cmpge_epu8_mask(all, n1, cand_n1);
        _mm512_mask_cmpge_epu8_mask(all, n2, n2_min)
    }
}

/// For a `vpermb` indexed as the disk tables: the highest second byte
/// with which a view unit of this lead is a candidate (E0: A2, F0: 91;
/// F8 FC FE: any), and 0 for the bytes that are no candidate lead.
static VIEW_N1: [u8; 64] = {
    let mut t = [0u8; 64];
    t[0xE0 - 0xBF] = 0xA2;
    t[0xF0 - 0xBF] = 0x91;
    t[0xF8 - 0xBF] = 0xFF;
    t[0xFC - 0xBF] = 0xFF;
    t[0xFE - 0xBF] = 0xFF;
    t
};

/// The view candidates among the lanes of `v`, `n1` the bytes one lane
/// further (`kernels::view_candidates`), `table` [`VIEW_N1`].
#[inline(always)]
unsafe fn view_candidates(v: __m512i, n1: __m512i, table: __m512i) -> u64 {
    let n1_max = _mm512_permutexvar_epi8(_mm512_subs_epu8(v, splat(0xBF)), table);
    _mm512_mask_cmple_epu8_mask(_mm512_test_epi8_mask(n1_max, n1_max), n1, n1_max)
}

/// The view candidates among the 64 lanes at `p` (`p + 66` readable):
/// those that certainly shrink on disk (as `kernels::masks_at` decides
/// them), and all of them.
#[inline(always)]
unsafe fn view_masks(p: *const u8) -> (u64, u64) {
    let (v, n1, n2, n3) = (load(p), load(p.add(1)), load(p.add(2)), load(p.add(3)));
    let (c1, c2) = (cont(n1), cont(n2));
    // E0 A0–A1, E0 A2 80–9F (U+0800–U+089F); F0 90, F0 91 80–81, F0 91
    // 82 80–9F (U+10000–U+1109F).
    let a0_a1 =
        _mm512_mask_cmplt_epu8_mask(_mm512_cmpge_epu8_mask(n1, splat(0xA0)), n1, splat(0xA2));
    let low3 = a0_a1 | (is(n1, 0xA2) & below(n2, 0xA0));
    let low4 = is(n1, 0x90) | (is(n1, 0x91) & (below(n2, 0x82) | (is(n2, 0x82) & below(n3, 0xA0))));
    let exact = (is(v, 0xE0) & low3 & c1 & c2) | (is(v, 0xF0) & low4 & c1 & c2 & cont(n3));
    (exact, view_candidates(v, n1, table(&VIEW_N1)))
}

/// `kernels::masks_at` on 64 lanes: the candidates among the bytes at `p`
/// that certainly change length, and the others.
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI; `p .. p + 67` must be
/// readable.
#[inline(always)]
pub(super) unsafe fn masks_at<const VIEW: bool>(p: *const u8) -> (u64, u64) {
    let (exact, all) = if VIEW {
        view_masks(p)
    } else {
        Disk::new().masks(p)
    };
    (exact, all & !exact)
}

/// `kernels::find` on 64 lanes: the index of the first candidate in
/// `s[i..]`, or the first index from which fewer than 66 bytes remain
/// (`super` goes on from there with the AVX2 search, in a function of its
/// own: instantiating `kernels::find` in here made LLVM compile the AVX2
/// count 5 % slower).
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI. Loads stay inside `s`: a
/// vector at `i` (and at `i + 1`, `i + 2`) only when `i + 66 <=
/// s.len()`.
#[inline(always)]
pub(super) unsafe fn find<const VIEW: bool>(s: &[u8], mut i: usize) -> usize {
    let p = s.as_ptr();
    let disk = Disk::new();
    let view = table(&VIEW_N1);
    while i + LANES + 2 <= s.len() {
        let m = if VIEW {
            view_candidates(load(p.add(i)), load(p.add(i + 1)), view)
        } else {
            disk.candidates(p.add(i))
        };
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += LANES;
    }
    i
}

/// `kernels::count_growing` on 64 lanes: counts the disk units that
/// certainly grow in whole vectors from `i` on, and stops before the
/// first vector that holds another candidate, that would reach past
/// `stop`, or after which fewer than three bytes of look-ahead remain.
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI, and POPCNT. Loads stay
/// inside `s`: a vector at `i` (and at `i + 1`, `i + 2`) is loaded only
/// when `i + 64 + 3 <= s.len()`.
#[inline(always)]
pub(super) unsafe fn count_growing(s: &[u8], mut i: usize, stop: usize) -> (usize, u64) {
    let p = s.as_ptr();
    // A vector at `i` is taken when `i + 64 <= stop`.
    let stop = stop.min(s.len().saturating_sub(3));
    let disk = Disk::new();
    let mut n = 0u64;
    while i + LANES <= stop {
        let (grow, all) = disk.masks(p.add(i));
        if all & !grow != 0 {
            break;
        }
        n += grow.count_ones() as u64;
        i += LANES;
    }
    (i, n)
}

/// `kernels::count_shrinking` on 64 lanes: counts the view units that
/// certainly shrink on disk in whole vectors from `i` on, and stops
/// before the first vector that holds another view candidate, that would
/// reach past `stop`, or after which fewer than three bytes of
/// look-ahead remain.
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI, and POPCNT. Loads stay
/// inside `s`: a vector at `i` (and at `i + 1` to `i + 3`) is loaded only
/// when `i + 64 + 3 <= s.len()`.
#[inline(always)]
pub(super) unsafe fn count_shrinking(s: &[u8], mut i: usize, stop: usize) -> (usize, u64) {
    let p = s.as_ptr();
    let stop = stop.min(s.len().saturating_sub(3));
    let view = table(&VIEW_N1);
    let mut n = 0u64;
    while i + LANES <= stop {
        if view_candidates(load(p.add(i)), load(p.add(i + 1)), view) != 0 {
            let (exact, all) = view_masks(p.add(i));
            if all & !exact != 0 {
                break;
            }
            n += exact.count_ones() as u64;
        }
        i += LANES;
    }
    (i, n)
}
