//! The vector kernels, written once over [`Vector`] and compiled for SSE2
//! and AVX2 by `super`. (The AVX-512 level converts with its own kernel,
//! `super::avx512`, on the scheme described here, and has its own `find`,
//! `masks_at` and counts, `super::avx512_len`; its searches end with this
//! `find` at AVX2 width.)
//!
//! Both conversions keep the byte structure: in the units the fast path
//! takes (ASCII, and 2-, 3- and 4-byte sequences whose length is the same on
//! both sides), V and W only add or subtract a constant to the code point,
//! and a code point is written in base 64, one digit per continuation byte.
//! So each byte lane gets a digit of the offset (the format's table) and the carries
//! (borrows for W) run at most three lanes towards the lead byte:
//!
//! | sequence | offset | digits, lead first |
//! |---|---|---|
//! | 2 bytes | 160 | 2, 32 |
//! | 3 bytes, low (payload ≤ CF5F, view ≤ D7FF) | 2 208 | 0, 34, 32 |
//! | 3 bytes, high | 4 256 | 1, 2, 32 |
//! | 4 bytes | 69 792 | 0, 17, 2, 32 |
//!
//! Units whose length differs by one byte (U+0800–U+089F: two bytes on
//! disk, three in the view; U+10000–U+1109F: three and four) are taken too,
//! as simdutf's transcoders take mixed lengths: vectorised classification,
//! then a byte shuffle from a table. V computes them with the digits above,
//! so their lead overflows its class (a 2-byte lead becomes E0–E2, a 3-byte
//! one F0–F1); that lane is rewritten to the view's second byte and a
//! `pshufb` from a 256-entry table, indexed by the grown leads among eight
//! lanes, inserts the E0/F0 lead before it. W sees their lead borrow below
//! its class; a second pass gives their second lane the digits of the
//! shorter form (2, 32 after E0; 1, 2, 32 after F0) and a lead mark, and a
//! `pshufb` drops the old lead. Blocks without such units (nearly all, in
//! most text) pay one combined mask test for this.
//!
//! A block is taken only if every unit in it is one of those; anything else
//! (ill-formed bytes, C1 controls, overlong forms, surrogates, 5- and 6-byte
//! and FE/FF units, code points near or above U+10FFFF) ends the fast run,
//! and the scalar code of the caller takes over. A sequence cut by the end
//! of the block is left for the next block, whose first lane is its lead.

use super::vector::Vector;
use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};

/// Ask for the bytes [`super::PREFETCH`] after `p`, for the block that
/// will be converted there: its load then need not wait for memory after
/// the blocks before it are done (each block's start depends on where the
/// last one stopped). A prefetch never faults, wherever it points. Only
/// for inputs of at least [`super::PREFETCH_FROM`] bytes: a shorter one is
/// most likely in the cache already, where the prefetch costs and brings
/// nothing.
///
/// # Safety
///
/// None beyond calling it on x86_64 (SSE is baseline); `unsafe` because
/// the intrinsic is.
#[inline(always)]
pub(super) unsafe fn prefetch(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(super::PREFETCH) as *const i8);
}

/// Lane masks shared by both directions, and whether the block is
/// well-formed. Scalar bit masks (bit `j` = lane `j`) do what they can: the
/// structure check and the cut at the end need no vector work.
struct Shape<V> {
    /// The block with the high bits flipped (for [`ge_x`]).
    vx: V,
    /// C0–FF, E0–FF, F0–FF.
    lead2p: V,
    lead3p: V,
    lead4p: V,
    /// 80–BF.
    cont: V,
    /// Movemasks of `lead3p` and `lead4p`.
    m3: u64,
    m4: u64,
    /// Lanes before the first lead whose sequence runs past the block.
    commit: usize,
    /// Some continuation byte does not match the leads before it. Checked
    /// in every lane: in well-formed text none is misplaced, not even past
    /// `commit`, and a lead before `commit` whose continuation bytes are
    /// missing shows only there.
    misplaced: bool,
}

#[inline(always)]
unsafe fn shape<V: Vector>(v: V, high: u32, commit: usize) -> Shape<V> {
    let lanes = V::LANES;
    let all = (1u64 << lanes) - 1;
    let vx = v.xor(V::splat(0x80));
    let lead2p = ge_x(vx, 0xC0);
    let lead3p = ge_x(vx, 0xE0);
    let lead4p = ge_x(vx, 0xF0);
    let cont = is_cont(v);
    let (m2, m3, m4) = (
        lead2p.movemask() as u64,
        lead3p.movemask() as u64,
        lead4p.movemask() as u64,
    );
    let cont_bits = high as u64 & !m2;
    let expected = ((m2 << 1) | (m3 << 2) | (m4 << 3)) & all;
    Shape {
        vx,
        lead2p,
        lead3p,
        lead4p,
        cont,
        m3,
        m4,
        commit,
        misplaced: expected != cont_bits,
    }
}

/// `x >= t` as unsigned bytes, for `vx = x ^ 0x80`: one signed compare.
#[inline(always)]
unsafe fn ge_x<V: Vector>(vx: V, t: u8) -> V {
    vx.gt_i8(V::splat((t - 1) ^ 0x80))
}

/// `x > t` as signed bytes: for `t` ≥ 0x80 this is `x >= t + 1` for the
/// bytes 80–FF, and true for ASCII. Used only where the structure check
/// already makes the byte a continuation or lead byte.
#[inline(always)]
unsafe fn gt_high<V: Vector>(x: V, t: u8) -> V {
    x.gt_i8(V::splat(t))
}

/// 80–BF: the only bytes below C0 as signed bytes.
#[inline(always)]
unsafe fn is_cont<V: Vector>(x: V) -> V {
    V::splat(0xC0).gt_i8(x)
}

/// Bits of the lanes below `commit`.
#[inline(always)]
fn live(commit: usize) -> u32 {
    if commit >= 32 {
        u32::MAX
    } else {
        (1u32 << commit) - 1
    }
}

/// The offset digit of every lane, given which 3-byte leads take the high
/// offset: each lead lane holds its own digit and those of its first two
/// continuation bytes, which are then moved into place.
#[inline(always)]
unsafe fn digits<V: Vector>(s: &Shape<V>, is_lead2: V, is_lead3: V, hi: V) -> V {
    let lead_d = is_lead2.and(V::splat(2)).or(hi.and(V::splat(1)));
    let c1_d = hi
        .select(V::splat(2), V::splat(34))
        .and(is_lead3)
        .or(s.lead4p.and(V::splat(17)));
    let c2_d = s.lead4p.and(V::splat(2));
    // Not `is_cont(n1)`: a stray continuation byte just past the block
    // would hide the end of the last sequence in it.
    let last_cont = s.cont.down1().andnot(s.cont);
    lead_d
        .or(c1_d.up1())
        .or(c2_d.up2())
        .or(last_cont.and(V::splat(32)))
}

/// Carries (W: borrows) into each lane from the lane after it, given the
/// carry-out bit `0x40` of every continuation lane (`out40` of `x`).
#[inline(always)]
unsafe fn carry_in<V: Vector>(out40: V) -> V {
    out40.down1().min(V::splat(1))
}

/// V of one block, `n1` and `n2` the bytes one and two lanes further: the
/// converted block, or `None` when a lane before `s.commit` holds a unit the
/// fast path does not take.
///
/// The second value marks the lead lanes (below `s.commit`) of units one
/// byte longer in the view (U+0800–U+089F, two bytes on disk;
/// U+10000–U+1109F, three): such a lane holds the second byte of the view
/// form (A0–A2, 90–91), and [`grown_lead`] gives the byte to insert before
/// it.
#[inline(always)]
unsafe fn decode_block<V: Vector>(v: V, n1: V, n2: V, s: &Shape<V>) -> Option<(V, u32)> {
    let is_lead2 = s.lead3p.andnot(s.lead2p);
    let is_lead3 = s.lead4p.andnot(s.lead3p);
    // High offset when the payload is above CF5F, i.e. the bytes are above
    // EC BD 9F.
    // (The structure check makes `n1` and `n2` continuation bytes here.)
    // Above ED the lead alone decides; EC leads (U+C8A0–U+D89F, Hangul)
    // are rare outside Korean text, so only a block with one pays for the
    // test of the bytes after them.
    let ec = is(v, 0xEC);
    let above = ge_x(s.vx, 0xED);
    let hi = is_lead3.and(if ec.movemask() == 0 {
        above
    } else {
        above.or(ec.and(gt_high(n1, 0xBD).or(is(n1, 0xBD).and(gt_high(n2, 0x9F)))))
    });
    let d = digits(s, is_lead2, is_lead3, hi);
    let low6 = V::splat(0x3F);
    let c40 = s.cont.and(V::splat(0x40));
    let base = v.and(low6).add(d);
    // A carry chain is as long as the longest sequence in the block.
    let mut cin = carry_in(base.and(c40));
    if s.m3 != 0 {
        cin = carry_in(base.add(cin).and(c40));
        if s.m4 != 0 {
            cin = carry_in(base.add(cin).and(c40));
        }
    }
    let out_cont = base.add(cin).and(low6).or(V::splat(0x80));
    let out = s.cont.select(out_cont, v.add(d).add(cin));
    // Leads that overflow their length: the view needs a longer sequence.
    // A 2-byte lead becomes E0–E2 (U+0800–U+089F: the view is E0 A0–A2
    // ..), a 3-byte lead F0–F1 (U+10000–U+1109F: F0 90–91 ..).
    let g2 = is_lead2.and(gt_high(out, 0xDF));
    let g3 = is_lead3.and(gt_high(out, 0xEF));
    // Leads F3 and up: code points from U+D10A0 on, 5- and 6-byte
    // sequences, reserved units.
    let bad = ge_x(s.vx, 0xF3);
    if s.misplaced {
        return None;
    }
    // One test for the common case: nothing refused, nothing grows.
    if bad.or(g2).or(g3).movemask() & live(s.commit) == 0 {
        return Some((out, 0));
    }
    if bad.movemask() & live(s.commit) != 0 {
        return None;
    }
    let grow = g2.or(g3).movemask() & live(s.commit);
    let out = out.sub(g2.and(V::splat(0x40))).sub(g3.and(V::splat(0x60)));
    Some((out, grow))
}

/// The view's lead byte of each grown unit, from the second byte that
/// [`decode_block`] left in its lane: E0 before A0–A2, F0 before 90–91.
#[inline(always)]
unsafe fn grown_lead<V: Vector>(out: V) -> V {
    ge(out, 0xA0).select(V::splat(0xE0), V::splat(0xF0))
}

/// W of one block; see [`decode_block`]. The second value marks the lead
/// lanes (below `s.commit`) to drop: units one byte shorter on disk
/// (U+0800–U+089F, U+10000–U+1109F), whose second lane becomes the lead.
#[inline(always)]
unsafe fn encode_block<V: Vector>(v: V, n1: V, s: &Shape<V>) -> Option<(V, u32)> {
    let is_lead2 = s.lead3p.andnot(s.lead2p);
    let is_lead3 = s.lead4p.andnot(s.lead3p);
    let hi = is_lead3.and(ge_x(s.vx, 0xEE));
    let d = digits(s, is_lead2, is_lead3, hi);
    let low6 = V::splat(0x3F);
    let c40 = s.cont.and(V::splat(0x40));
    // Each continuation lane computes 64 + its digit - the offset digit -
    // the borrow; bit 6 clear means it borrowed from the lane before.
    let base = v.and(low6).or(V::splat(0x40)).sub(d);
    let mut bin = carry_in(base.andnot(c40));
    if s.m3 != 0 {
        bin = carry_in(base.sub(bin).andnot(c40));
        if s.m4 != 0 {
            bin = carry_in(base.sub(bin).andnot(c40));
        }
    }
    let out_cont = base.sub(bin).and(low6).or(V::splat(0x80));
    let out = s.cont.select(out_cont, v.sub(d).sub(bin));
    // A lead that borrows below its range had a code point too small for
    // its length: overlong, a C1 control, or one stored shorter on disk
    // (E0 A0–A2 ..: U+0800–U+089F; F0 90–91 ..: U+10000–U+1109F), which
    // are taken below. ED A0–BF: surrogates. F4 and up: U+100000 and
    // beyond, 5- and 6-byte forms, FE/FF.
    // (Lead lanes of `out` hold bytes from BD up: `gt_high` compares them
    // right.)
    let low3 = gt_high(out, 0xDF).andnot(s.lead3p);
    let low4 = gt_high(out, 0xEF).andnot(s.lead4p);
    let other = ge_x(s.vx, 0xF4)
        .or(is(v, 0xED).and(gt_high(n1, 0x9F)))
        .or(gt_high(out, 0xBF).andnot(s.lead2p));
    if s.misplaced {
        return None;
    }
    // One test for the common case: nothing refused, nothing shrinks.
    if other.or(low3).or(low4).movemask() & live(s.commit) == 0 {
        return Some((out, 0));
    }
    let shrink3 = low3.and(is(v, 0xE0)).and(ge(n1, 0xA0));
    let shrink4 = low4.and(is(v, 0xF0)).and(ge(n1, 0x90));
    let bad = other.or(shrink3.andnot(low3)).or(shrink4.andnot(low4));
    if bad.movemask() & live(s.commit) != 0 {
        return None;
    }
    let drop = shrink3.or(shrink4).movemask() & live(s.commit);
    // Again with the second lane of each such unit as a lead: the offset
    // digits (2, 32) of the 2-byte form instead of (34, 32) after E0, and
    // (1, 2, 32) of the high 3-byte form instead of (17, 2, 32) after F0.
    let (c1_3, c1_4) = (shrink3.up1(), shrink4.up1());
    let d = d.sub(c1_3.and(V::splat(32))).sub(c1_4.and(V::splat(16)));
    let base = v.and(low6).or(V::splat(0x40)).sub(d);
    let mut bin = carry_in(base.andnot(c40));
    bin = carry_in(base.sub(bin).andnot(c40));
    bin = carry_in(base.sub(bin).andnot(c40));
    let out_cont = base
        .sub(bin)
        .and(low6)
        .or(V::splat(0x80))
        .or(c1_3.and(V::splat(0x40)))
        .or(c1_4.and(V::splat(0x60)));
    Some((s.cont.select(out_cont, v.sub(d).sub(bin)), drop))
}

/// Run [`encode_block`] (`ENCODE`) or [`decode_block`] over `src` into
/// `dst` while it accepts; returns how many bytes were read and written.
/// Whole ASCII blocks are copied without conversion. Bytes of `dst` past
/// the number written may have been overwritten (a block is stored whole
/// even when its last lanes belong to the next one).
///
/// # Safety
///
/// The CPU must have `V`'s instructions. Memory safety is this function's
/// own: every load is of a block at `i` (plus `i + 1`, `i + 2` for
/// look-ahead) after checking `i + LANES + 2 <= src.len()` (`i + 4 *
/// LANES` for the ASCII quad), and every store of a block or of an
/// expanded block starts at `o` after checking `o + 2 * LANES <=
/// dst.len()` (`o + 4 * LANES` for the ASCII quad; an expanded block
/// stores at most `2 * LANES` bytes, see [`Vector::store_grown`]).
#[inline(always)]
pub(super) unsafe fn run<V: Vector, const ENCODE: bool>(
    src: &[u8],
    dst: &mut [u8],
) -> (usize, usize) {
    let lanes = V::LANES;
    let (slen, dlen) = (src.len(), dst.len());
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let (mut i, mut o) = (0, 0);
    // The last converted block and where it goes, stored only after the
    // next block is loaded: buffers that start at the same offset in a
    // page would otherwise make each load wait for the store before it
    // (4 KiB aliasing; measured 15 % on CJK).
    let mut held: Option<(V, usize)> = None;
    // Whether the last block was ASCII: only then try four at once.
    let mut ascii = true;
    let far = slen >= super::PREFETCH_FROM;
    loop {
        if ascii && i + 4 * lanes <= slen && o + 4 * lanes <= dlen {
            let a = V::load(sp.add(i));
            let b = V::load(sp.add(i + lanes));
            let c = V::load(sp.add(i + 2 * lanes));
            let e = V::load(sp.add(i + 3 * lanes));
            if a.or(b).or(c).or(e).movemask() == 0 {
                if let Some((h, at)) = held.take() {
                    h.store(dp.add(at));
                }
                a.store(dp.add(o));
                b.store(dp.add(o + lanes));
                c.store(dp.add(o + 2 * lanes));
                e.store(dp.add(o + 3 * lanes));
                i += 4 * lanes;
                o += 4 * lanes;
                continue;
            }
        }
        // Two bytes of look-ahead for the 3-byte checks; room for a block
        // that grows.
        if i + lanes + 2 > slen || o + 2 * lanes > dlen {
            break;
        }
        let v = V::load(sp.add(i));
        let high = v.movemask();
        if high == 0 {
            if let Some((h, at)) = held.take() {
                h.store(dp.add(at));
            }
            v.store(dp.add(o));
            i += lanes;
            o += lanes;
            ascii = true;
            continue;
        }
        ascii = false;
        if far {
            prefetch(sp.add(i));
        }
        // The lanes before a lead whose sequence runs past the block,
        // from the last three bytes: scalar and branch-free, as the next
        // block's address depends on it.
        let cut = |k: usize, lead: u8| k * (*sp.add(i + lanes - k) >= lead) as usize;
        let commit = lanes - cut(3, 0xF0).max(cut(2, 0xE0)).max(cut(1, 0xC0));
        let s = shape(v, high, commit);
        let n1 = V::load(sp.add(i + 1));
        let converted = if ENCODE {
            encode_block(v, n1, &s)
        } else {
            decode_block(v, n1, V::load(sp.add(i + 2)), &s)
        };
        if let Some((h, at)) = held.take() {
            h.store(dp.add(at));
        }
        let Some((out, changed)) = converted else {
            break;
        };
        if changed == 0 {
            held = Some((out, o));
            o += commit;
        } else if ENCODE {
            o += out.store_shrunk(changed, commit, dp.add(o));
        } else {
            o += out.store_grown(grown_lead(out), changed, commit, dp.add(o));
        }
        i += commit;
    }
    if let Some((h, at)) = held {
        h.store(dp.add(at));
    }
    (i, o)
}

/// Index of the first byte in `s[from..]` that [`view_candidates`]
/// (`VIEW`) or [`disk_candidates`] marks, or the first index from which
/// fewer than a vector's worth of bytes (plus two) remain: the caller goes
/// on byte by byte from there.
///
/// # Safety
///
/// The CPU must have `V`'s instructions; loads stay inside `s` (the loop
/// conditions check the look-ahead too).
#[inline(always)]
pub(super) unsafe fn find<V: Vector, const VIEW: bool>(s: &[u8], mut i: usize) -> usize {
    let lanes = V::LANES;
    let p = s.as_ptr();
    while i + 2 * lanes + 2 <= s.len() {
        let a = candidates_at::<V, VIEW>(p.add(i));
        let b = candidates_at::<V, VIEW>(p.add(i + lanes));
        if a | b != 0 {
            return if a != 0 {
                i + a.trailing_zeros() as usize
            } else {
                i + lanes + b.trailing_zeros() as usize
            };
        }
        i += 2 * lanes;
    }
    while i + lanes + 2 <= s.len() {
        let m = candidates_at::<V, VIEW>(p.add(i));
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += lanes;
    }
    i
}

/// Index of the first zero byte of `s`, or the first index from which
/// fewer than a vector's worth of bytes remain: the caller goes on word by
/// word from there.
///
/// # Safety
///
/// The CPU must have `V`'s instructions; loads stay inside `s`.
#[inline(always)]
pub(super) unsafe fn find_zero<V: Vector>(s: &[u8]) -> usize {
    let lanes = V::LANES;
    let (p, z) = (s.as_ptr(), V::splat(0));
    let mut i = 0;
    while i + 4 * lanes <= s.len() {
        let a = V::load(p.add(i)).eq(z);
        let b = V::load(p.add(i + lanes)).eq(z);
        let c = V::load(p.add(i + 2 * lanes)).eq(z);
        let d = V::load(p.add(i + 3 * lanes)).eq(z);
        if a.or(b).or(c).or(d).movemask() != 0 {
            break;
        }
        i += 4 * lanes;
    }
    while i + lanes <= s.len() {
        let m = V::load(p.add(i)).eq(z).movemask();
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += lanes;
    }
    i
}

/// Movemask of the candidates among the `LANES` bytes at `p` (two more
/// bytes must be readable). No closures in here: a closure would not
/// inherit the caller's `target_feature`.
#[inline(always)]
unsafe fn candidates_at<V: Vector, const VIEW: bool>(p: *const u8) -> u32 {
    let (v, n1) = (V::load(p), V::load(p.add(1)));
    if VIEW {
        view_candidates(v, n1).movemask()
    } else {
        disk_candidates(v, n1, V::load(p.add(2))).movemask()
    }
}

/// The candidates among the `LANES` bytes at `p` (three more bytes must
/// be readable) as two masks: units that certainly change length (complete
/// sequences: disk DD A0–BF, DE, DF, EE BD A0–BF, EE BE–BF, EF; view E0
/// A0–A1, E0 A2 80–9F, F0 90, F0 91 80–81, F0 91 82 80–9F), and the other
/// candidates, which the caller decides byte by byte.
#[inline(always)]
pub(super) unsafe fn masks_at<V: Vector, const VIEW: bool>(p: *const u8) -> (u32, u32) {
    let (v, n1, n2) = (V::load(p), V::load(p.add(1)), V::load(p.add(2)));
    let both_cont = is_cont(n1).and(is_cont(n2));
    let (exact, all) = if VIEW {
        let n3 = V::load(p.add(3));
        let low3 = ge(n1, 0xA0)
            .and(below(n1, 0xA2))
            .or(is(n1, 0xA2).and(below(n2, 0xA0)));
        let low4 = is(n1, 0x90)
            .or(is(n1, 0x91).and(below(n2, 0x82).or(is(n2, 0x82).and(below(n3, 0xA0)))));
        let e0 = is(v, 0xE0).and(low3).and(both_cont);
        let f0 = is(v, 0xF0).and(low4).and(both_cont).and(is_cont(n3));
        (e0.or(f0), view_candidates(v, n1))
    } else {
        (disk_growing(v, n1, n2), disk_candidates(v, n1, n2))
    };
    let exact = exact.movemask();
    (exact, all.movemask() & !exact)
}

/// The complete disk sequences among the lanes of `v` (`n1`, `n2` the
/// bytes one and two lanes further) that certainly grow in the view: DD
/// A0–BF, DE, DF with a continuation byte; EE BD A0–BF, EE BE–BF, EF with
/// two (U+0800–U+089F, U+10000–U+1109F). A subset of [`disk_candidates`].
#[inline(always)]
unsafe fn disk_growing<V: Vector>(v: V, n1: V, n2: V) -> V {
    let g2 = is(v, 0xDD)
        .and(ge(n1, 0xA0))
        .or(is(v, 0xDE))
        .or(is(v, 0xDF))
        .and(is_cont(n1));
    let g3 = is(v, 0xEE)
        .and(ge(n1, 0xBE).or(is(n1, 0xBD).and(ge(n2, 0xA0))))
        .or(is(v, 0xEF))
        .and(is_cont(n1).and(is_cont(n2)));
    g2.or(g3)
}

/// Counts the disk units that certainly grow (see [`disk_growing`]) in
/// whole vectors from `i` on, and stops before the first vector that holds
/// a candidate of another kind ([`disk_candidates`]: the caller decides
/// those unit by unit), that would reach past `stop`, or after which fewer
/// than three bytes of look-ahead remain. Returns where it stopped and the
/// count: no closure and no bit loop per unit, one popcount per vector.
///
/// # Safety
///
/// The CPU must have `V`'s instructions. Loads stay inside `s`: a vector
/// at `i` (and at `i + 1`, `i + 2`) is loaded only when `i + LANES + 3 <=
/// s.len()`.
#[inline(always)]
pub(super) unsafe fn count_growing<V: Vector>(s: &[u8], mut i: usize, stop: usize) -> (usize, u64) {
    let lanes = V::LANES;
    let p = s.as_ptr();
    // A vector at `i` is taken when `i + lanes <= stop`.
    let stop = stop.min(s.len().saturating_sub(3));
    let mut n = 0u64;
    while i + lanes <= stop {
        let (v, n1, n2) = (
            V::load(p.add(i)),
            V::load(p.add(i + 1)),
            V::load(p.add(i + 2)),
        );
        let all = disk_candidates(v, n1, n2).movemask();
        if all != 0 {
            let grow = disk_growing(v, n1, n2).movemask();
            if all & !grow != 0 {
                break;
            }
            n += grow.count_ones() as u64;
        }
        i += lanes;
    }
    (i, n)
}

/// The view side of [`count_growing`]: counts the view units that
/// certainly shrink on disk (the first mask of [`masks_at`] with `VIEW`)
/// in whole vectors from `i` on, and stops before the first vector that
/// holds another view candidate, that would reach past `stop`, or after
/// which fewer than three bytes of look-ahead remain.
///
/// # Safety
///
/// The CPU must have `V`'s instructions. Loads stay inside `s`: a vector
/// at `i` (and at `i + 1` to `i + 3`) is loaded only when `i + LANES + 3
/// <= s.len()`.
#[inline(always)]
pub(super) unsafe fn count_shrinking<V: Vector>(
    s: &[u8],
    mut i: usize,
    stop: usize,
) -> (usize, u64) {
    let lanes = V::LANES;
    let p = s.as_ptr();
    let stop = stop.min(s.len().saturating_sub(3));
    let mut n = 0u64;
    while i + lanes <= stop {
        if candidates_at::<V, true>(p.add(i)) != 0 {
            let (exact, other) = masks_at::<V, true>(p.add(i));
            if other != 0 {
                break;
            }
            n += exact.count_ones() as u64;
        }
        i += lanes;
    }
    (i, n)
}

#[inline(always)]
unsafe fn is<V: Vector>(x: V, t: u8) -> V {
    x.eq(V::splat(t))
}

#[inline(always)]
unsafe fn ge<V: Vector>(x: V, t: u8) -> V {
    x.ge(V::splat(t))
}

#[inline(always)]
unsafe fn below<V: Vector>(x: V, t: u8) -> V {
    x.ge(V::splat(t)).eq(V::splat(0))
}

/// Disk units that may be longer in the view, by their first three bytes
/// `v`, `n1`, `n2`: DD A0–BF, DE, DF (U+0800–U+089F); EE BD A0–BF, EE BE–BF,
/// EF (U+10000–U+1109F); F7, FB, FD; and FE (exempt units).
#[inline(always)]
unsafe fn disk_candidates<V: Vector>(v: V, n1: V, n2: V) -> V {
    let dd = is(v, 0xDD).and(ge(n1, 0xA0));
    let ee = is(v, 0xEE).and(ge(n1, 0xBE).or(is(n1, 0xBD).and(ge(n2, 0xA0))));
    dd.or(is(v, 0xDE))
        .or(is(v, 0xDF))
        .or(ee)
        .or(is(v, 0xEF))
        .or(is(v, 0xF7))
        .or(is(v, 0xFB))
        .or(is(v, 0xFD))
        .or(is(v, 0xFE))
}

/// View units that may be shorter on disk, by their first two bytes: E0
/// below A3 (U+0800–U+089F), F0 below 92 (U+10000–U+1109F), F8, FC, FE.
#[inline(always)]
unsafe fn view_candidates<V: Vector>(v: V, n1: V) -> V {
    is(v, 0xE0)
        .and(below(n1, 0xA3))
        .or(is(v, 0xF0).and(below(n1, 0x92)))
        .or(is(v, 0xF8))
        .or(is(v, 0xFC))
        .or(is(v, 0xFE))
}
