//! The vector kernels, written once over [`Vector`] and compiled for SSE2
//! and AVX2 by `super`.
//!
//! Both conversions keep the byte structure: in the units the fast path
//! takes (ASCII, and 2-, 3- and 4-byte sequences whose length is the same on
//! both sides), V and W only add or subtract a constant to the code point,
//! and a code point is written in base 64, one digit per continuation byte.
//! So each byte lane gets a digit of the offset (SPEC §1) and the carries
//! (borrows for W) run at most three lanes towards the lead byte:
//!
//! | sequence | offset | digits, lead first |
//! |---|---|---|
//! | 2 bytes | 160 | 2, 32 |
//! | 3 bytes, low (payload ≤ CF5F, view ≤ D7FF) | 2 208 | 0, 34, 32 |
//! | 3 bytes, high | 4 256 | 1, 2, 32 |
//! | 4 bytes | 69 792 | 0, 17, 2, 32 |
//!
//! A block is taken only if every unit in it is one of those and none
//! changes length; anything else (ill-formed bytes, C1 controls, overlong
//! forms, surrogates, code points that change length, 5- and 6-byte and
//! FE/FF units, code points near or above U+10FFFF) ends the fast run, and
//! the scalar code of the caller takes over. A sequence cut by the end of
//! the block is left for the next block, whose first lane is its lead.

use super::vector::Vector;

/// Lane masks shared by both directions.
struct Shape<V> {
    /// C0–FF, E0–FF, F0–FF.
    lead2p: V,
    lead3p: V,
    lead4p: V,
    /// 80–BF.
    cont: V,
    /// Lanes whose continuation bytes do not match the leads before them.
    /// Checked in every lane: in well-formed text none is set, not even
    /// past `commit`, and a lead before `commit` whose continuation bytes
    /// are missing shows only there.
    misplaced: V,
    /// Lanes before the first lead whose sequence runs past the block.
    commit: usize,
}

#[inline(always)]
unsafe fn shape<V: Vector>(v: V) -> Shape<V> {
    let lead2p = v.ge(V::splat(0xC0));
    let lead3p = v.ge(V::splat(0xE0));
    let lead4p = v.ge(V::splat(0xF0));
    let cont = v.and(V::splat(0xC0)).eq(V::splat(0x80));
    let expected = lead2p.up1().or(lead3p.up2()).or(lead4p.up3());
    let misplaced = cont.andnot(expected).or(expected.andnot(cont));
    // A lead in lane j announcing `need` continuation bytes is cut when
    // j + need >= LANES.
    let one = V::splat(1);
    let need = lead2p.and(one).add(lead3p.and(one)).add(lead4p.and(one));
    let cut = V::lane_index()
        .add(need)
        .ge(V::splat(V::LANES as u8))
        .movemask();
    let commit = if cut == 0 {
        V::LANES
    } else {
        cut.trailing_zeros() as usize
    };
    Shape {
        lead2p,
        lead3p,
        lead4p,
        cont,
        misplaced,
        commit,
    }
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
/// offset.
#[inline(always)]
unsafe fn digits<V: Vector>(s: &Shape<V>, is_lead2: V, hi: V) -> V {
    let last_cont = s.cont.down1().andnot(s.cont);
    let is_lead3 = s.lead4p.andnot(s.lead3p);
    let c1_of3 = is_lead3.up1();
    let hi_c1 = hi.up1();
    let c1_of4 = s.lead4p.up1();
    let c2_of4 = s.lead4p.up2();
    is_lead2
        .and(V::splat(2))
        .or(hi.and(V::splat(1)))
        .or(hi_c1.andnot(c1_of3).and(V::splat(34)))
        .or(hi_c1.and(V::splat(2)))
        .or(c1_of4.and(V::splat(17)))
        .or(c2_of4.and(V::splat(2)))
        .or(last_cont.and(V::splat(32)))
}

/// V of one block: the converted block and how many lanes of it count, or
/// `None` when the block holds a unit the fast path does not take.
#[inline(always)]
pub(super) unsafe fn decode_block<V: Vector>(v: V) -> Option<(V, usize)> {
    let s = shape(v);
    let is_lead2 = s.lead3p.andnot(s.lead2p);
    let is_lead3 = s.lead4p.andnot(s.lead3p);
    // High offset when the payload is above CF5F, i.e. the bytes are above
    // EC BD 9F.
    let (n1, n2) = (v.down1(), v.down2());
    let hi = is_lead3.and(
        v.ge(V::splat(0xED)).or(v.eq(V::splat(0xEC)).and(
            n1.ge(V::splat(0xBE))
                .or(n1.eq(V::splat(0xBD)).and(n2.ge(V::splat(0xA0)))),
        )),
    );
    let d = digits(&s, is_lead2, hi);
    let low6 = V::splat(0x3F);
    let base = v.and(low6).add(d);
    let mut cin = V::splat(0);
    let mut sum = base;
    for _ in 0..3 {
        sum = base.add(cin);
        let cout = sum.and(V::splat(0x40)).eq(V::splat(0x40)).and(s.cont);
        cin = cout.down1().and(V::splat(1));
    }
    let out_cont = sum.and(low6).or(V::splat(0x80));
    let out_other = v.add(d).add(cin);
    let out = s.cont.and(out_cont).or(s.cont.andnot(out_other));
    // Leads F3 and up: code points from U+FEF5F+69 792 on, 5- and 6-byte
    // sequences, reserved units. Leads that overflow their length: the
    // view needs a longer sequence.
    let bad = v
        .ge(V::splat(0xF3))
        .or(is_lead2.and(out.ge(V::splat(0xE0))))
        .or(is_lead3.and(out.ge(V::splat(0xF0))));
    if s.misplaced.movemask() != 0 || bad.movemask() & live(s.commit) != 0 {
        return None;
    }
    Some((out, s.commit))
}

/// W of one block; see [`decode_block`].
#[inline(always)]
pub(super) unsafe fn encode_block<V: Vector>(v: V) -> Option<(V, usize)> {
    let s = shape(v);
    let is_lead2 = s.lead3p.andnot(s.lead2p);
    let is_lead3 = s.lead4p.andnot(s.lead3p);
    let hi = is_lead3.and(v.ge(V::splat(0xEE)));
    let surrogate = v.eq(V::splat(0xED)).and(v.down1().ge(V::splat(0xA0)));
    let d = digits(&s, is_lead2, hi);
    let low6 = V::splat(0x3F);
    // Each continuation lane computes 64 + digit - offset digit - borrow;
    // bit 6 clear means it borrowed from the lane before.
    let base = v.and(low6).or(V::splat(0x40)).sub(d);
    let mut bin = V::splat(0);
    let mut diff = base;
    for _ in 0..3 {
        diff = base.sub(bin);
        let bout = diff.and(V::splat(0x40)).eq(V::splat(0)).and(s.cont);
        bin = bout.down1().and(V::splat(1));
    }
    let out_cont = diff.and(low6).or(V::splat(0x80));
    let out_other = v.sub(d).sub(bin);
    let out = s.cont.and(out_cont).or(s.cont.andnot(out_other));
    // A lead that borrows below its range had a code point too small for
    // its length: overlong, a C1 control, or one stored shorter on disk
    // (U+0800–U+089F, U+10000–U+1109F). F4 and up: U+100000 and beyond,
    // 5- and 6-byte forms, FE/FF.
    let bad = v
        .ge(V::splat(0xF4))
        .or(surrogate)
        .or(is_lead2.and(out.ge(V::splat(0xC0)).eq(V::splat(0))))
        .or(is_lead3.and(out.ge(V::splat(0xE0)).eq(V::splat(0))))
        .or(s.lead4p.and(out.ge(V::splat(0xF0)).eq(V::splat(0))));
    if s.misplaced.movemask() != 0 || bad.movemask() & live(s.commit) != 0 {
        return None;
    }
    Some((out, s.commit))
}

/// Run [`encode_block`] (`ENCODE`) or [`decode_block`] over `src` into
/// `dst` while it accepts; returns how many bytes were converted (the same
/// number were written). Whole ASCII blocks
/// are copied without conversion. `dst` bytes past the return value are
/// left as they were.
#[inline(always)]
pub(super) unsafe fn run<V: Vector, const ENCODE: bool>(src: &[u8], dst: &mut [u8]) -> usize {
    let lanes = V::LANES;
    let end = src.len().min(dst.len());
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    loop {
        if i + 4 * lanes <= end {
            let a = V::load(sp.add(i));
            let b = V::load(sp.add(i + lanes));
            let c = V::load(sp.add(i + 2 * lanes));
            let e = V::load(sp.add(i + 3 * lanes));
            if a.or(b).or(c).or(e).movemask() == 0 {
                a.store(dp.add(i));
                b.store(dp.add(i + lanes));
                c.store(dp.add(i + 2 * lanes));
                e.store(dp.add(i + 3 * lanes));
                i += 4 * lanes;
                continue;
            }
        }
        if i + lanes > end {
            break;
        }
        let v = V::load(sp.add(i));
        if v.movemask() == 0 {
            v.store(dp.add(i));
            i += lanes;
            continue;
        }
        let converted = if ENCODE {
            encode_block(v)
        } else {
            decode_block(v)
        };
        let Some((out, commit)) = converted else {
            break;
        };
        let out = if commit < lanes {
            // Keep what `dst` held past the committed lanes.
            let tail = V::lane_index().ge(V::splat(commit as u8));
            tail.andnot(out).or(tail.and(V::load(dp.add(i))))
        } else {
            out
        };
        out.store(dp.add(i));
        i += commit;
    }
    i
}

/// Index of the first byte in `s[from..]` that [`view_candidates`]
/// (`VIEW`) or [`disk_candidates`] marks, or the first
/// index from which fewer than a vector's worth of bytes remain (the caller
/// goes on byte by byte from there).
#[inline(always)]
pub(super) unsafe fn find<V: Vector, const VIEW: bool>(s: &[u8], mut i: usize) -> usize {
    let lanes = V::LANES;
    let p = s.as_ptr();
    while i + 2 * lanes <= s.len() {
        let a = candidates::<V, VIEW>(V::load(p.add(i))).movemask();
        let b = candidates::<V, VIEW>(V::load(p.add(i + lanes))).movemask();
        if a | b != 0 {
            return if a != 0 {
                i + a.trailing_zeros() as usize
            } else {
                i + lanes + b.trailing_zeros() as usize
            };
        }
        i += 2 * lanes;
    }
    while i + lanes <= s.len() {
        let m = candidates::<V, VIEW>(V::load(p.add(i))).movemask();
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += lanes;
    }
    i
}

#[inline(always)]
unsafe fn candidates<V: Vector, const VIEW: bool>(v: V) -> V {
    if VIEW {
        view_candidates(v)
    } else {
        disk_candidates(v)
    }
}

/// Disk lead bytes whose unit may be longer in the view, and FE: DD–DF, EE,
/// EF, F7, FB, FD, FE (see `length`).
#[inline(always)]
unsafe fn disk_candidates<V: Vector>(v: V) -> V {
    let dd_df = v
        .ge(V::splat(0xDD))
        .and(v.ge(V::splat(0xE0)).eq(V::splat(0)));
    let ee_ef = v
        .ge(V::splat(0xEE))
        .and(v.ge(V::splat(0xF0)).eq(V::splat(0)));
    dd_df
        .or(ee_ef)
        .or(v.eq(V::splat(0xF7)))
        .or(v.eq(V::splat(0xFB)))
        .or(v.eq(V::splat(0xFD)))
        .or(v.eq(V::splat(0xFE)))
}

/// View lead bytes whose unit may be shorter on disk: E0, F0, F8, FC, FE.
#[inline(always)]
unsafe fn view_candidates<V: Vector>(v: V) -> V {
    v.eq(V::splat(0xE0))
        .or(v.eq(V::splat(0xF0)))
        .or(v.eq(V::splat(0xF8)))
        .or(v.eq(V::splat(0xFC)))
        .or(v.eq(V::splat(0xFE)))
}
