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
//! The conditions are not a compare per byte value and per condition,
//! but a `vpermb` per lead from small tables of thresholds (disk:
//! `GROW_N1`, `CAND_N1`, `N2`; view: `VIEW_N1`, `SHRINK_N1`), a
//! `vpermi2b` by the second or third byte where the bound on the next
//! byte depends on it (`EE_BD`; `N2_MAX`, `N3_MAX_BY_N1`, `N3_MAX_BY_N2`),
//! and the bytes after the lead compared against those bounds, each
//! compare masked by the one before (a masked compare is an AND for
//! free). On Zen 4 the mask work is what counts: a compare into a mask
//! and an operation between masks issue about once a cycle each, and
//! moving a mask to a general register takes two (measured on this
//! project's machine). The first versions of the disk count (the hot
//! kernel: the index is built with it), fifteen compares and the logic
//! between them, or ten with the logic in `u64` arithmetic (five mask
//! moves a vector), counted dense text at 11–12 GB/s, about the AVX2
//! speed; this one at 19 (16 MiB, wall-clock best of 30). The view count
//! with plain compares ran `disk_len` on dense text at the AVX2 speed (8
//! GB/s, 64 MiB), with its tables at 17.

use core::arch::x86_64::*;

use super::avx512::{is, splat};

const LANES: usize = 64;

/// The 64 bytes at `p`.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const __m512i)
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

/// A table of 128 bytes in two registers.
#[inline(always)]
unsafe fn table2(t: &[u8; 128]) -> (__m512i, __m512i) {
    (table(&t[..64]), table(&t[64..]))
}

/// `t[x & 0x7F]` in each lane (a `vpermi2b`).
#[inline(always)]
unsafe fn lookup2(t: (__m512i, __m512i), x: __m512i) -> __m512i {
    _mm512_permutex2var_epi8(t.0, x, t.1)
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
            ee_bd: table2(&EE_BD),
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

    /// A superset of the candidates among the 64 lanes at `p` (`p + 65`
    /// readable), by the lead and the byte after it alone (EE BD is
    /// taken whatever its third byte, and so is any lane followed by FF):
    /// two loads and three instructions, where `masks` takes a dozen.
    #[inline(always)]
    unsafe fn maybe(self, p: *const u8) -> u64 {
        let cand_n1 = _mm512_permutexvar_epi8(_mm512_subs_epu8(load(p), splat(0xBF)), self.cand_n1);
        _mm512_cmpge_epu8_mask(load(p.add(1)), cand_n1)
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

/// View tables for a `vpermb` indexed as the disk tables. `VIEW_N1`: the
/// highest second byte with which a unit of this lead is a candidate (E0:
/// A2, F0: 91; F8 FC FE: any), 0 for the bytes that are no candidate
/// lead. `SHRINK_N1`: the lowest continuation byte after which a complete
/// unit of this lead shrinks on disk (E0: A0, F0: 90; C0: none).
/// `N3_ANY`: C0 for E0, whose unit has no fourth byte (see `View::masks`).
static VIEW_N1: [u8; 64] = view_table([0xA2, 0x91, 0xFF, 0x00]);
static SHRINK_N1: [u8; 64] = view_table([0xA0, 0x90, 0xC0, 0xC0]);
static N3_ANY: [u8; 64] = view_table([0xC0, 0x00, 0x00, 0x00]);

/// A table of the values for E0, F0, F8 FC FE, and every other byte.
const fn view_table(v: [u8; 4]) -> [u8; 64] {
    let mut t = [v[3]; 64];
    t[0xE0 - 0xBF] = v[0];
    t[0xF0 - 0xBF] = v[1];
    t[0xF8 - 0xBF] = v[2];
    t[0xFC - 0xBF] = v[2];
    t[0xFE - 0xBF] = v[2];
    t
}

/// For a `vpermi2b` by a continuation byte's low seven bits: the highest
/// byte after it in a unit that shrinks, as a continuation byte, and
/// whether it is one of the last of the range (bytes that share those
/// seven bits are no continuation bytes, and the compares before take
/// only continuation bytes). `N2_MAX`, by the second byte: E0 A2 then up
/// to 9F, F0 91 then up to 82, else BF. `N3_MAX_BY_N1` and
/// `N3_MAX_BY_N2`: 9F after F0 91 and after 82, BF else; the fourth byte
/// of F0 91 82 is up to 9F, `N3_MAX_BY_N1 | N3_MAX_BY_N2` (9F and BF
/// differ in one bit).
static N2_MAX: [u8; 128] = cont_table(&[(0xA2, 0x9F), (0x91, 0x82)]);
static N3_MAX_BY_N1: [u8; 128] = cont_table(&[(0x91, 0x9F)]);
static N3_MAX_BY_N2: [u8; 128] = cont_table(&[(0x82, 0x9F)]);

/// BF for every continuation byte but those listed.
const fn cont_table(special: &[(u8, u8)]) -> [u8; 128] {
    let mut t = [0xBF; 128];
    let mut k = 0;
    while k < special.len() {
        t[(special[k].0 & 0x7F) as usize] = special[k].1;
        k += 1;
    }
    t
}

/// The view tables in registers.
#[derive(Clone, Copy)]
struct View {
    cand_n1: __m512i,
    shrink_n1: __m512i,
    n3_any: __m512i,
    n2_max: (__m512i, __m512i),
    n3_by_n1: (__m512i, __m512i),
    n3_by_n2: (__m512i, __m512i),
}

impl View {
    #[inline(always)]
    unsafe fn new() -> View {
        View {
            cand_n1: table(&VIEW_N1),
            shrink_n1: table(&SHRINK_N1),
            n3_any: table(&N3_ANY),
            n2_max: table2(&N2_MAX),
            n3_by_n1: table2(&N3_MAX_BY_N1),
            n3_by_n2: table2(&N3_MAX_BY_N2),
        }
    }

    /// The view candidates among the lanes of `v`, `n1` the bytes one
    /// lane further (`kernels::view_candidates`).
    #[inline(always)]
    unsafe fn candidates(self, v: __m512i, n1: __m512i) -> u64 {
        let n1_max = _mm512_permutexvar_epi8(_mm512_subs_epu8(v, splat(0xBF)), self.cand_n1);
        _mm512_mask_cmple_epu8_mask(_mm512_test_epi8_mask(n1_max, n1_max), n1, n1_max)
    }

    /// The view candidates among the 64 lanes at `p` (`p + 66` readable):
    /// those that certainly shrink on disk (E0 A0–A1, E0 A2 80–9F:
    /// U+0800–U+089F; F0 90, F0 91 80–81, F0 91 82 80–9F: U+10000–U+1109F;
    /// complete), and all of them.
    #[inline(always)]
    unsafe fn masks(self, p: *const u8) -> (u64, u64) {
        let (v, n1, n2, n3) = (load(p), load(p.add(1)), load(p.add(2)), load(p.add(3)));
        let idx = _mm512_subs_epu8(v, splat(0xBF));
        let n1_max = _mm512_permutexvar_epi8(idx, self.cand_n1);
        let n1_min = _mm512_permutexvar_epi8(idx, self.shrink_n1);
        let any = _mm512_permutexvar_epi8(idx, self.n3_any);
        let n2_max = lookup2(self.n2_max, n1);
        // BF or 9F, then 7F (any) after E0: `(a | b) ^ any` (0x56: the
        // truth table, bit `4a + 2b + c`).
        let n3_max = _mm512_ternarylogic_epi32::<0x56>(
            lookup2(self.n3_by_n1, n1),
            lookup2(self.n3_by_n2, n2),
            any,
        );
        // Signed `<=` a bound from 80 on: a continuation byte up to it.
        let exact = _mm512_mask_cmpge_epu8_mask(cont(n1), n1, n1_min);
        let exact = _mm512_mask_cmple_epu8_mask(exact, n1, n1_max);
        let exact = _mm512_mask_cmple_epi8_mask(exact, n2, n2_max);
        let exact = _mm512_mask_cmple_epi8_mask(exact, n3, n3_max);
        let all = _mm512_mask_cmple_epu8_mask(_mm512_test_epi8_mask(n1_max, n1_max), n1, n1_max);
        (exact, all)
    }
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
        View::new().masks(p)
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
    let view = View::new();
    while i + LANES + 2 <= s.len() {
        let m = if VIEW {
            view.candidates(load(p.add(i)), load(p.add(i + 1)))
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
/// A vector goes through `Disk::masks` only when `Disk::maybe` finds a
/// possible candidate in it or the vector before held one; the others
/// (most vectors of text other than the densest) cost two loads and
/// three instructions instead of `masks`' dozen.
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
    // Whether the last vector held a candidate: then so does the next one
    // in text dense in them, whose vectors go straight to `masks`.
    let mut busy = false;
    while i + LANES <= stop {
        // Most vectors of most text hold no candidate: a test of the
        // leads and the bytes after them alone skips them.
        if busy || disk.maybe(p.add(i)) != 0 {
            let (grow, all) = disk.masks(p.add(i));
            if all & !grow != 0 {
                break;
            }
            n += grow.count_ones() as u64;
            busy = grow != 0;
        }
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
    let view = View::new();
    let mut n = 0u64;
    while i + LANES <= stop {
        if view.candidates(load(p.add(i)), load(p.add(i + 1))) != 0 {
            let (exact, all) = view.masks(p.add(i));
            if all & !exact != 0 {
                break;
            }
            n += exact.count_ones() as u64;
        }
        i += LANES;
    }
    (i, n)
}
