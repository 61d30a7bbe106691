//! The conversion kernel for AVX-512: `kernels::run`'s scheme on blocks
//! of 64 bytes, with lane masks held as bit masks (`k` registers, `u64`:
//! bit `j` is lane `j`) instead of byte vectors. Compiled only inside
//! `super`'s AVX-512 entry points; the length passes' kernels for this
//! level are `avx512_len`.
//!
//! The arithmetic is `kernels`' (read its header first): each lane gets a
//! digit of the offset, carries (W: borrows) run at most three lanes
//! towards the lead. What AVX-512 changes:
//!
//! - every class of lane is one compare into a mask, and a byte's
//!   neighbours are the mask shifted (`n1 >= 0xA0` at lane `j` is bit
//!   `j + 1` of `v >= 0xA0`): no look-ahead loads and no lane shifts. The
//!   last lanes see zeros where the next block begins, as `kernels` sees
//!   its look-ahead, and only lanes past `commit` ever ask;
//! - the digits of blocks with 3- and 4-byte units are looked up per
//!   lead byte (`vpermb` from small tables) on the block and on the block
//!   loaded again one, two and three bytes earlier, those of 2-byte units
//!   are masked moves of constants; the carry chain is computed on the
//!   masks (generate and propagate, one round per continuation byte after
//!   the first), then applied by masked adds;
//! - a block is converted by one of three copies of the code, for the
//!   longest lead in it (2, 3, 4 bytes), so that Latin, Greek or Cyrillic
//!   text does not pay for the checks of longer units, nor CJK for those
//!   of 4-byte ones: the mask work, not the vector arithmetic, is what
//!   costs on Zen 4;
//! - W's units that are shorter on disk borrow below E0 or F0 in the one
//!   pass, as in `kernels`, but need no second pass: their second lane
//!   differs from the shorter form's lead by a constant (see
//!   `encode_block`); `vpcompressb` drops the old leads, into a register
//!   that is stored whole (the form that stores to memory is microcoded on
//!   Zen 4);
//! - V's grown units: per half block, a `vpermi2b` pairs each lane with
//!   the E0/F0 byte that would go before it, `pdep` spreads the mask of
//!   grown leads over those pairs, and `vpcompressb` keeps every lane and
//!   the bytes inserted before the grown ones (V on dense text 3.0 → 3.5
//!   GB/s against placing lanes and insertions with two `vpexpandb` and a
//!   `vpcompressb` per half).

use core::arch::x86_64::*;

const LANES: usize = 64;

#[inline(always)]
pub(super) unsafe fn splat(b: u8) -> __m512i {
    _mm512_set1_epi8(b as i8)
}

/// Lanes `>= t`, as unsigned bytes.
#[inline(always)]
unsafe fn ge(v: __m512i, t: u8) -> u64 {
    _mm512_cmpge_epu8_mask(v, splat(t))
}

/// Lanes `== t`.
#[inline(always)]
pub(super) unsafe fn is(v: __m512i, t: u8) -> u64 {
    _mm512_cmpeq_epi8_mask(v, splat(t))
}

/// `v` with the lanes of `k` set to `b`.
#[inline(always)]
unsafe fn put(v: __m512i, k: u64, b: u8) -> __m512i {
    _mm512_mask_mov_epi8(v, k, splat(b))
}

/// The 64 bytes at `p + at`.
#[inline(always)]
unsafe fn load(p: *const u8, at: usize) -> __m512i {
    _mm512_loadu_si512(p.add(at) as *const __m512i)
}

/// How many lanes of the block ending at `tail + 4` to take: all but a
/// sequence whose lead is among the last three bytes and that runs past
/// the block. The next block's address depends on it, so it is read with
/// a scalar load, ready sooner than the block's vector; `volatile` keeps
/// the compiler from taking the bytes out of that vector instead (it did:
/// Latin text converted a third slower, CJK 6–11 % slower).
#[inline(always)]
unsafe fn commit_at(tail: *const u8) -> usize {
    let t = u32::from_le_bytes((tail as *const [u8; 4]).read_volatile());
    let byte = |k: usize| (t >> (8 * (4 - k))) as u8;
    let cut = |k: usize, lead: u8| k * (byte(k) >= lead) as usize;
    LANES - cut(3, 0xF0).max(cut(2, 0xE0)).max(cut(1, 0xC0))
}

/// Bits of the lanes below `commit`.
#[inline(always)]
fn live(commit: usize) -> u64 {
    if commit >= LANES {
        u64::MAX
    } else {
        (1u64 << commit) - 1
    }
}

/// The lane classes of a block, as in `kernels::shape`.
struct Shape {
    /// C0–DF, E0–EF, F0–FF: leads of 2, 3 and 4 or more bytes.
    l2: u64,
    l3: u64,
    l4: u64,
    /// 80–BF.
    cont: u64,
    /// Some continuation byte does not match the leads before it (any
    /// lane; see `kernels::Shape::misplaced`).
    misplaced: bool,
}

#[inline(always)]
unsafe fn shape(v: __m512i, high: u64) -> Shape {
    let m2 = ge(v, 0xC0);
    let m3 = ge(v, 0xE0);
    let m4 = ge(v, 0xF0);
    let cont = high & !m2;
    // Bits shifted out at the top are the next block's lanes.
    let expected = (m2 << 1) | (m3 << 2) | (m4 << 3);
    Shape {
        l2: m2 & !m3,
        l3: m3 & !m4,
        l4: m4,
        cont,
        misplaced: expected != cont,
    }
}

/// Per-lead digit tables for a `vpermb` indexed by the byte minus BF (C0–FE
/// to 1–3F; FF and every byte below C0 to 0, which is no lead): the digit
/// of the offset a lead puts on its own lane (`own`) and on the lanes one,
/// two and three after it (`next1`, `next2`, `next3`): 2 and 32 for a
/// 2-byte lead; 0, 34, 32 (low offset) or 1, 2, 32 (high) for a 3-byte
/// one; 0, 17, 2, 32 for F0 and up (F3 and up are refused). A 3-byte lead from `hi` on takes the high offset: ED for V (EC
/// takes it too when the bytes after it are above BD 9F, which
/// `decode_block` adds), EE for W.
struct DigitTables {
    own: [u8; 64],
    next1: [u8; 64],
    next2: [u8; 64],
    next3: [u8; 64],
}

const fn digit_tables(hi: u8) -> DigitTables {
    let mut t = DigitTables {
        own: [0; 64],
        next1: [0; 64],
        next2: [0; 64],
        next3: [0; 64],
    };
    let mut b = 0xC0usize;
    while b < 0xFF {
        let k = b - 0xBF;
        if b < 0xE0 {
            t.own[k] = 2;
            t.next1[k] = 32;
        } else if b < 0xF0 {
            let high = b >= hi as usize;
            t.own[k] = high as u8;
            t.next1[k] = if high { 2 } else { 34 };
            t.next2[k] = 32;
        } else {
            t.next1[k] = 17;
            t.next2[k] = 2;
            t.next3[k] = 32;
        }
        b += 1;
    }
    t
}

/// Per lead byte (indexed as [`DigitTables`]): the highest lead a unit
/// of its length may end with in V (DF, EF; FF for the others, which
/// never exceed it), and the lowest in W (C0, E0, F0; 0 for the bytes
/// that are no lead).
static LEAD_MAX: [u8; 64] = lead_bounds([0xDF, 0xEF, 0xFF], 0xFF);
static LEAD_MIN: [u8; 64] = lead_bounds([0xC0, 0xE0, 0xF0], 0);

const fn lead_bounds(by_len: [u8; 3], other: u8) -> [u8; 64] {
    let mut t = [other; 64];
    let mut b = 0xC0usize;
    while b < 0xFF {
        t[b - 0xBF] = by_len[if b < 0xE0 {
            0
        } else if b < 0xF0 {
            1
        } else {
            2
        }];
        b += 1;
    }
    t
}

static DECODE_DIGITS: DigitTables = digit_tables(0xED);
static ENCODE_DIGITS: DigitTables = digit_tables(0xEE);

/// The 64 bytes that end `back` bytes before `p` (1 to 3), with the
/// lanes before `p` zero: each lane sees the byte `back` lanes before it
/// in the block, as `Shape`'s masks shifted.
///
/// # Safety
/// `p .. p + 64 - back` must be readable; nothing before `p` is read (the
/// masked-out lanes of a masked load are not accessed).
#[inline(always)]
unsafe fn before(p: *const u8, back: usize) -> __m512i {
    _mm512_maskz_loadu_epi8(!0u64 << back, p.wrapping_sub(back) as *const i8)
}

/// `t[b - BF]` for each lane's byte `b` (0 below C0 and for FF).
#[inline(always)]
unsafe fn by_lead(t: &[u8; 64], b: __m512i) -> __m512i {
    let idx = _mm512_subs_epu8(b, splat(0xBF));
    _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(t.as_ptr() as *const __m512i))
}

/// The offset digit of every lane (see `kernels::digits`). `LONGEST` is
/// the longest lead in the block (2: ASCII, 2-byte units and strays, as in
/// most Latin, Greek or Cyrillic text; 3; 4 for F0 and up): digits,
/// carries and checks of longer units are left out. A block of 2-byte
/// units takes its two digits from `Shape`'s masks (two masked moves); a
/// longer one from tables (`t`, see [`DigitTables`]) by each lane's byte
/// and the bytes one to three lanes before it, loaded again from `p`, the
/// block's start: vector lookups and adds instead of the four or five
/// masks computed in general registers and moved to `k` registers
/// (mask work is what a block costs on Zen 4; where this was measured:
/// `docs/performance.md` of the repository this crate lives in).
///
/// # Safety
/// `p .. p + 64` must be readable, `v` the 64 bytes there.
#[inline(always)]
unsafe fn digits<const LONGEST: usize>(
    t: &DigitTables,
    s: &Shape,
    v: __m512i,
    p: *const u8,
) -> __m512i {
    if LONGEST == 2 {
        return put(_mm512_maskz_mov_epi8(s.l2, splat(2)), s.cont, 32);
    }
    let d = _mm512_add_epi8(by_lead(&t.own, v), by_lead(&t.next1, before(p, 1)));
    let d = _mm512_add_epi8(d, by_lead(&t.next2, before(p, 2)));
    if LONGEST == 3 {
        return d;
    }
    _mm512_add_epi8(d, by_lead(&t.next3, before(p, 3)))
}

/// Carry (W: borrow) out of each continuation lane, given the lanes that
/// generate one and those that pass one on: a chain is as long as the
/// longest sequence's continuation bytes, so `LONGEST - 2` rounds settle
/// them.
#[inline(always)]
fn carries<const LONGEST: usize>(generate: u64, propagate: u64) -> u64 {
    let mut c = generate;
    for _ in 2..LONGEST {
        c = generate | (propagate & (c >> 1));
    }
    c
}

/// V of one block, as `kernels::decode_block`: the converted block, the
/// view's lead bytes to insert (E0 or F0, valid in the lanes of the third
/// value) and the lead lanes below `commit` of the units one byte longer
/// in the view, which hold the view's second byte; `None` when a lane
/// below `commit` holds a unit the fast path does not take. `LONGEST` as
/// in [`digits`].
#[inline(always)]
unsafe fn decode_block<const LONGEST: usize>(
    v: __m512i,
    p: *const u8,
    s: &Shape,
    commit: usize,
) -> Option<(__m512i, __m512i, u64)> {
    // High offset when the bytes are above EC BD 9F (the structure check
    // makes the next two lanes continuation bytes).
    // The tables give ED–EF the high offset; an EC lead (U+C8A0–U+D89F,
    // Hangul, rare outside Korean text) takes it when the bytes after it
    // are above BD 9F: only a block that has one pays for that test.
    let d = digits::<LONGEST>(&DECODE_DIGITS, s, v, p);
    let d = if LONGEST > 2 {
        let ec = s.l3 & is(v, 0xEC);
        if ec == 0 {
            d
        } else {
            let n1_bd = is(v, 0xBD) >> 1;
            let n1_above = ge(v, 0xBE) >> 1;
            let n2_above = ge(v, 0xA0) >> 2;
            let hi = ec & (n1_above | (n1_bd & n2_above));
            // Digits 1 and 2 where the low offset's are 0 and 34.
            let d = _mm512_mask_add_epi8(d, hi, d, splat(1));
            _mm512_mask_sub_epi8(d, hi << 1, d, splat(32))
        }
    } else {
        d
    };
    let sum = _mm512_add_epi8(v, d);
    // A continuation lane holds 0x80 + its digit sum (below 0x100): bit 6
    // is the carry out, 0xBF passes one on.
    let g = _mm512_mask_test_epi8_mask(s.cont, sum, splat(0x40));
    let p = if LONGEST > 2 {
        _mm512_mask_cmpeq_epi8_mask(s.cont, sum, splat(0xBF))
    } else {
        0
    };
    let c = carries::<LONGEST>(g, p);
    let out = _mm512_mask_add_epi8(sum, c >> 1, sum, splat(1));
    let out = _mm512_mask_sub_epi8(out, c, out, splat(0x40));
    // Leads that overflow their length (E0–E2 from a 2-byte lead, F0–F1
    // from a 3-byte one) and leads F3 and up, as in `kernels`.
    // (Past 2-byte units, one compare against a bound per lead byte.)
    let (g2, g3) = if LONGEST == 2 {
        (_mm512_mask_cmpgt_epu8_mask(s.l2, out, splat(0xDF)), 0)
    } else {
        let over = _mm512_cmpgt_epu8_mask(out, by_lead(&LEAD_MAX, v));
        (over & s.l2, over & s.l3)
    };
    let bad = if LONGEST > 3 { ge(v, 0xF3) } else { 0 };
    let live = live(commit);
    if s.misplaced || bad & live != 0 {
        return None;
    }
    let grow = (g2 | g3) & live;
    if grow == 0 {
        return Some((out, out, 0));
    }
    let out = _mm512_mask_sub_epi8(out, g2, out, splat(0x40));
    let out = _mm512_mask_sub_epi8(out, g3, out, splat(0x60));
    let ins = put(splat(0xF0), g2, 0xE0);
    Some((out, ins, grow))
}

/// W of one block, as `kernels::encode_block`: the converted block and
/// the lead lanes below `commit` to drop (units one byte shorter on disk,
/// whose second lane holds the disk form's lead). `LONGEST` as in
/// [`digits`].
#[inline(always)]
unsafe fn encode_block<const LONGEST: usize>(
    v: __m512i,
    p: *const u8,
    s: &Shape,
    commit: usize,
) -> Option<(__m512i, u64)> {
    let d = digits::<LONGEST>(&ENCODE_DIGITS, s, v, p);
    let diff = _mm512_sub_epi8(v, d);
    // A continuation lane holds 0x80 + its digit difference (from -34):
    // below 0x80 it borrows, 0x80 passes a borrow on.
    let g = _mm512_mask_cmplt_epu8_mask(s.cont, diff, splat(0x80));
    let p = if LONGEST > 2 {
        _mm512_mask_cmpeq_epi8_mask(s.cont, diff, splat(0x80))
    } else {
        0
    };
    let b = carries::<LONGEST>(g, p);
    let out = _mm512_mask_sub_epi8(diff, b >> 1, diff, splat(1));
    let out = _mm512_mask_add_epi8(out, b, out, splat(0x40));
    // A lead that borrows below its range had a code point too small for
    // its length: overlong, a C1 control, or one stored shorter on disk
    // (E0 A0–A2 ..: U+0800–U+089F; F0 90–91 ..: U+10000–U+1109F). ED
    // A0–BF: surrogates; F4 and up: U+100000 and beyond, 5- and 6-byte
    // forms, FE/FF.
    let live = live(commit);
    if LONGEST == 2 {
        let low2 = _mm512_mask_cmple_epu8_mask(s.l2, out, splat(0xBF));
        if s.misplaced || low2 & live != 0 {
            return None;
        }
        return Some((out, 0));
    }
    // Only E0 and F0 leads can borrow below their range; the shorter
    // units are those that do with a second byte from A0 and from 90.
    // One compare against a bound per lead byte for every length.
    let low = _mm512_cmplt_epu8_mask(out, by_lead(&LEAD_MIN, v));
    let (low2, low3) = (low & s.l2, low & s.l3);
    let ge_a0 = ge(v, 0xA0);
    let shrink3 = low3 & (ge_a0 >> 1);
    let surrogate = is(v, 0xED) & (ge_a0 >> 1);
    let (low4, shrink4, beyond) = if LONGEST > 3 {
        let low4 = low & s.l4;
        (low4, low4 & (ge(v, 0x90) >> 1), ge(v, 0xF4))
    } else {
        (0, 0, 0)
    };
    let bad = low2 | (low3 & !shrink3) | (low4 & !shrink4) | surrogate | beyond;
    if s.misplaced || bad & live != 0 {
        return None;
    }
    // The second lane of a shorter unit becomes its lead. Its digit was
    // 34 (after E0) or 17 (after F0) where the shorter form's is 2 (the
    // 2-byte form) or 1 (the high 3-byte form); the borrows from the
    // lanes after it are the same. So it holds the lead's low bits minus
    // 32 or 16, modulo 64, as a continuation byte (BD–BF, BE–BF): adding
    // 0x20 or 0x30 gives the lead (DD–DF, EE–EF).
    let out = _mm512_mask_add_epi8(out, shrink3 << 1, out, splat(0x20));
    let out = _mm512_mask_add_epi8(out, shrink4 << 1, out, splat(0x30));
    Some((out, (shrink3 | shrink4) & live))
}

/// `vpermi2b` indices that pair each of the 32 lanes of a half block
/// (`HALF` 0 or 1) of the second operand with the same lane of the first,
/// first operand's byte first.
static PAIRS: [[u8; 64]; 2] = pairs();

const fn pairs() -> [[u8; 64]; 2] {
    let mut t = [[0u8; 64]; 2];
    let mut h = 0;
    while h < 2 {
        let mut j = 0;
        while j < 32 {
            t[h][2 * j] = (32 * h + j) as u8;
            t[h][2 * j + 1] = (64 + 32 * h + j) as u8;
            j += 1;
        }
        h += 1;
    }
    t
}

/// Lanes `32 * HALF ..` of `out` with the lane of `ins` inserted before
/// each lane whose bit is set in `grow` (bits `0..32` for the half):
/// `32 + popcount(grow)` bytes that count, then zeros.
#[inline(always)]
unsafe fn spread_half<const HALF: usize>(out: __m512i, ins: __m512i, grow: u64) -> __m512i {
    // Each lane as the pair (inserted byte, lane): keep the lane, and the
    // inserted byte where the lane grows.
    let idx = _mm512_loadu_si512(PAIRS[HALF].as_ptr() as *const __m512i);
    let pairs = _mm512_permutex2var_epi8(ins, idx, out);
    let keep = _pdep_u64(grow, 0x5555_5555_5555_5555) | 0xAAAA_AAAA_AAAA_AAAA;
    _mm512_maskz_compress_epi8(keep, pairs)
}

/// Run [`encode_block`] (`ENCODE`) or [`decode_block`] over `src` into
/// `dst` while it accepts; returns how many bytes were read and written,
/// as `kernels::run` (the same loop on 64-byte blocks).
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VBMI2, BMI2 and POPCNT. Memory
/// safety is this function's own: every load is of a block at `i` after
/// checking `i + 64 <= src.len()` (`i + 256` for the ASCII quad); every
/// store of 64 bytes starts at `o` after checking `o + 64 <= dst.len()`
/// (`o + 256` for the ASCII quad), and a block that grows is stored as
/// two 64-byte halves at `o` and `o + n0` after checking `o + n0 + 64 <=
/// dst.len()`.
#[inline(always)]
pub(super) unsafe fn run<const ENCODE: bool>(src: &[u8], dst: &mut [u8]) -> (usize, usize) {
    let (slen, dlen) = (src.len(), dst.len());
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let (mut i, mut o) = (0, 0);
    // The last block and where it goes, stored after the next load (4 KiB
    // aliasing, see `kernels::run`).
    let mut held: Option<(__m512i, usize)> = None;
    let mut ascii = true;
    let far = slen >= super::PREFETCH_FROM;
    loop {
        if ascii && i + 4 * LANES <= slen && o + 4 * LANES <= dlen {
            let a = load(sp, i);
            let b = load(sp, i + LANES);
            let c = load(sp, i + 2 * LANES);
            let e = load(sp, i + 3 * LANES);
            let any = _mm512_or_si512(_mm512_or_si512(a, b), _mm512_or_si512(c, e));
            if _mm512_movepi8_mask(any) == 0 {
                if let Some((h, at)) = held.take() {
                    _mm512_storeu_si512(dp.add(at) as *mut __m512i, h);
                }
                for (k, x) in [a, b, c, e].into_iter().enumerate() {
                    _mm512_storeu_si512(dp.add(o + k * LANES) as *mut __m512i, x);
                }
                i += 4 * LANES;
                o += 4 * LANES;
                continue;
            }
        }
        if i + LANES > slen || o + LANES > dlen {
            break;
        }
        let v = load(sp, i);
        let high = _mm512_movepi8_mask(v);
        if high == 0 {
            if let Some((h, at)) = held.take() {
                _mm512_storeu_si512(dp.add(at) as *mut __m512i, h);
            }
            _mm512_storeu_si512(dp.add(o) as *mut __m512i, v);
            i += LANES;
            o += LANES;
            ascii = true;
            continue;
        }
        ascii = false;
        if far {
            super::kernels::prefetch(sp.add(i));
        }
        // The lanes before a lead whose sequence runs past the block (61
        // to 64; its last four bytes are inside `src` as the block is).
        let commit = commit_at(sp.add(i + LANES - 4));
        if let Some((h, at)) = held.take() {
            // In bounds: `at + 64 <= dlen` was checked before it was held.
            _mm512_storeu_si512(dp.add(at) as *mut __m512i, h);
        }
        let s = shape(v, high);
        if ENCODE {
            let converted = if s.l4 != 0 {
                encode_block::<4>(v, sp.add(i), &s, commit)
            } else if s.l3 != 0 {
                encode_block::<3>(v, sp.add(i), &s, commit)
            } else {
                encode_block::<2>(v, sp.add(i), &s, commit)
            };
            let Some((out, drop)) = converted else {
                break;
            };
            // Held for a store at `o`, checked above: a block shrinks.
            if drop == 0 {
                held = Some((out, o));
                o += commit;
            } else {
                held = Some((_mm512_maskz_compress_epi8(!drop, out), o));
                o += commit - drop.count_ones() as usize;
            }
        } else {
            let converted = if s.l4 != 0 {
                decode_block::<4>(v, sp.add(i), &s, commit)
            } else if s.l3 != 0 {
                decode_block::<3>(v, sp.add(i), &s, commit)
            } else {
                decode_block::<2>(v, sp.add(i), &s, commit)
            };
            let Some((out, ins, grow)) = converted else {
                break;
            };
            if grow == 0 {
                held = Some((out, o));
                o += commit;
            } else {
                // Lanes 0..32 (all below `commit`) and their insertions
                // make `n0` bytes, at most 48; the rest goes after them.
                let low = grow & 0xFFFF_FFFF;
                let n0 = 32 + low.count_ones() as usize;
                if o + n0 + LANES > dlen {
                    break;
                }
                let r0 = spread_half::<0>(out, ins, low);
                let r1 = spread_half::<1>(out, ins, grow >> 32);
                _mm512_storeu_si512(dp.add(o) as *mut __m512i, r0);
                _mm512_storeu_si512(dp.add(o + n0) as *mut __m512i, r1);
                o += commit + grow.count_ones() as usize;
            }
        }
        i += commit;
    }
    if let Some((h, at)) = held {
        _mm512_storeu_si512(dp.add(at) as *mut __m512i, h);
    }
    (i, o)
}
