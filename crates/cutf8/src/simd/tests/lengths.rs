//! The length passes (units whose length differs between disk and view,
//! block counts for the offset index, candidate search) on every path
//! against unit-by-unit references.

use super::*;

/// Offsets of the units whose view is longer (disk side, `view = false`)
/// or whose disk form is shorter (view side), unit by unit: every lead
/// byte begins a unit.
fn reference_changes(b: &[u8], view: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..b.len() {
        if b[i] < 0xC0 {
            continue;
        }
        if view {
            if let ViewUnit::Char { cp, len } = decode_view_unit(&b[i..], true) {
                let mut t = [0u8; 8];
                if encode_disk(cp, &mut t).is_some_and(|n| n < len) {
                    out.push(i);
                }
            }
        } else if let DiskUnit::Char { cp, len } = decode_disk_unit(&b[i..], true) {
            let mut t = [0u8; 8];
            if encode_view(cp, &mut t) > len {
                out.push(i);
            }
        }
    }
    out
}

/// Bytes crowded with the leads and second bytes that decide whether a
/// unit changes length (and FE units), with some of anything.
fn crowded_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            3 => 0x80u8..0xC0,
            3 => proptest::sample::select(vec![
                0xDD, 0xDE, 0xDF, 0xEE, 0xEF, 0xE0, 0xF0, 0xF7, 0xFB, 0xFD, 0xFE,
                0x90, 0x91, 0x82, 0x9F, 0xA0, 0xA1, 0xA2, 0xBD, 0xBE,
            ]),
            1 => any::<u8>(),
            1 => 0x20u8..0x7F,
        ],
        0..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// The length scans report exactly the units whose length changes, in
    /// order, on every level (the block masks of the vector levels and the
    /// byte loop of the portable one), on bytes crowded with the leads and
    /// second bytes that decide it; the whole-buffer lengths and the
    /// streaming counters (cut at `cut`) count exactly those.
    #[test]
    fn scans_report_exactly_the_changing_units_on_every_level(
        b in crowded_bytes(),
        cut in 0usize..300,
    ) {
        for path in Path::available() {
            for view in [false, true] {
                let mut got = Vec::new();
                let done = if view {
                    length::scan_view(path, &b, true, |p| got.push(p))
                } else {
                    length::scan_disk(path, &b, true, |e| {
                        if let DiskEvent::Grow(p) = e {
                            got.push(p)
                        }
                    })
                };
                prop_assert_eq!(done, b.len());
                let want = reference_changes(&b, view);
                prop_assert_eq!(&got, &want, "{:?} view {}", path, view);
                let (len, n) = (b.len() as u64, want.len() as u64);
                let (one_shot, mut c) = if view {
                    (length::disk_len_on(path, &b), length::LengthCounter::view_to_disk().with_simd_level(path.level()))
                } else {
                    (length::view_len_on(path, &b), length::LengthCounter::disk_to_view().with_simd_level(path.level()))
                };
                let other = if view { len - n } else { len + n };
                prop_assert_eq!(one_shot, other, "{:?} view {}", path, view);
                let cut = cut.min(b.len());
                c.push(&b[..cut]);
                c.push(&b[cut..]);
                prop_assert_eq!(c.finish(), other, "{:?} view {} cut {}", path, view, cut);
            }
        }
    }
}

/// Per-block counts, unit by unit: growing units from the unit reference
/// ([`reference_changes`]), exempt units from the decoded value of each FE
/// lead with six continuation bytes; merged per block, in order.
fn reference_blocks(b: &[u8], start: u64, block: u64) -> Vec<BlockCount> {
    let mut out: Vec<BlockCount> = Vec::new();
    let mut add = |p: usize, grow: u64, exempt: u64| {
        let k = (start + p as u64) / block;
        match out.last_mut() {
            Some(c) if c.block == k => {
                c.grow += grow;
                c.exempt += exempt;
            }
            _ => out.push(BlockCount {
                block: k,
                grow,
                exempt,
            }),
        }
    };
    let grows = reference_changes(b, false);
    let mut exempt = Vec::new();
    for i in 0..b.len() {
        if b[i] == 0xFE && b.len() >= i + 7 && b[i + 1..i + 7].iter().all(|&c| is_cont(c)) {
            let v = b[i + 1..i + 7]
                .iter()
                .fold(0u64, |v, &c| v << 6 | (c & 0x3F) as u64);
            if (0x8000_0000..=crate::MAX_CODE_POINT as u64).contains(&v) {
                exempt.push(i);
            }
        }
    }
    let (mut g, mut x) = (grows.iter().peekable(), exempt.iter().peekable());
    loop {
        match (g.peek(), x.peek()) {
            (Some(&&p), Some(&&q)) if p < q => {
                add(p, 1, 0);
                g.next();
            }
            (_, Some(&&q)) => {
                add(q, 0, 1);
                x.next();
            }
            (Some(&&p), None) => {
                add(p, 1, 0);
                g.next();
            }
            (None, None) => break,
        }
    }
    out
}

/// `scan_disk`'s events of `b` counted per block (the second reference).
fn scan_blocks(p: Path, b: &[u8], start: u64, block: u64) -> Vec<BlockCount> {
    let mut out: Vec<BlockCount> = Vec::new();
    length::scan_disk(p, b, true, |e| {
        let (p, grow) = match e {
            DiskEvent::Grow(p) => (p, 1),
            DiskEvent::Exempt(p) => (p, 0),
        };
        let k = (start + p as u64) / block;
        match out.last_mut() {
            Some(c) if c.block == k => {
                c.grow += grow;
                c.exempt += 1 - grow;
            }
            _ => out.push(BlockCount {
                block: k,
                grow,
                exempt: 1 - grow,
            }),
        }
    });
    out
}

/// [`length::count_disk_blocks`] over `b` in chunks cut at `cuts`, each
/// undecided rest handed in again at the front of the next chunk, tallies
/// of one block from two chunks merged; checks that each chunk decides as
/// much as `scan_disk` does and that every tally is non-empty and in order.
fn count_streamed(p: Path, b: &[u8], cuts: &[usize], start: u64, block: u64) -> Vec<BlockCount> {
    let mut ends: Vec<usize> = cuts.iter().map(|&c| c.min(b.len())).collect();
    ends.push(b.len());
    ends.sort();
    let mut out: Vec<BlockCount> = Vec::new();
    let mut pos = 0;
    for end in ends {
        let end = end.max(pos);
        let at_end = end == b.len();
        let chunk = &b[pos..end];
        let mut last = None;
        let done = length::count_disk_blocks(p, chunk, at_end, start + pos as u64, block, |c| {
            assert!(c.grow + c.exempt > 0, "empty tally {c:?}");
            assert!(
                last.is_none_or(|k| k < c.block),
                "{c:?} after block {last:?}"
            );
            last = Some(c.block);
            match out.last_mut() {
                Some(o) if o.block == c.block => {
                    o.grow += c.grow;
                    o.exempt += c.exempt;
                }
                _ => out.push(c),
            }
        });
        assert_eq!(
            done,
            length::scan_disk(p, chunk, at_end, |_| {}),
            "chunk {pos}..{end}"
        );
        pos += done;
    }
    assert_eq!(pos, b.len());
    out
}

/// Block sizes the count is checked with: down to one byte (a vector
/// spans many blocks), around the vector widths, and the index's 4096.
const BLOCKS: [u64; 9] = [1, 3, 7, 16, 31, 32, 33, 100, 4096];

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// The per-block counts equal both references on bytes crowded with
    /// the leads and second bytes that decide growth (and FE units), on
    /// every level, for any block size and start, one-shot and in chunks.
    #[test]
    fn block_counts_equal_the_references_on_every_level(
        b in crowded_bytes(),
        start in prop_oneof![0u64..5000, Just(u64::MAX / 4)],
        cuts in proptest::collection::vec(0usize..300, 0..6),
    ) {
        for path in Path::available() {
            for block in BLOCKS {
                let want = reference_blocks(&b, start, block);
                prop_assert_eq!(&scan_blocks(path, &b, start, block), &want);
                prop_assert_eq!(&count_streamed(path, &b, &[], start, block), &want, "{:?} block {}", path, block);
                prop_assert_eq!(&count_streamed(path, &b, &cuts, start, block), &want, "{:?} block {} cuts {:?}", path, block, cuts);
            }
        }
    }

    /// The same on text dense in growing units (a block of it is mostly
    /// taken whole by the vector count), padded 0..64 bytes, with FE units
    /// and junk now and then.
    #[test]
    fn block_counts_equal_the_references_on_dense_text(
        text in arb_textish(3),
        grow in proptest::collection::vec((0usize..400, prop_oneof![0x800u32..0x8A0, 0x1_0000u32..0x1_10A0]), 0..120),
        pad in 0usize..64,
        start in 0u64..10_000,
        cuts in proptest::collection::vec(0usize..1500, 0..6),
    ) {
        let mut view = vec![b'a'; pad];
        let mut units: Vec<Vec<u8>> = Vec::new();
        let mut t = &text[..];
        while !t.is_empty() {
            let n = match decode_view_unit(t, true) {
                ViewUnit::Char { len, .. } | ViewUnit::Passthrough { len, .. } | ViewUnit::Unstorable { len, .. } => len,
                ViewUnit::Incomplete => t.len(),
            };
            units.push(t[..n].to_vec());
            t = &t[n..];
        }
        for (at, cp) in grow {
            units.insert(at.min(units.len()), char::from_u32(cp).unwrap().to_string().into_bytes());
        }
        view.extend(units.concat());
        let disk = to_disk(&view);
        for path in Path::available() {
            for block in [7, 32, 33, 64, 4096] {
                let want = reference_blocks(&disk, start, block);
                prop_assert_eq!(&count_streamed(path, &disk, &cuts, start, block), &want, "{:?} block {}", path, block);
            }
        }
    }
}

/// Growing units (2- and 3-byte), a growing unit cut short, and an exempt
/// unit, at every offset 0..64 in a vector and around a block boundary,
/// the bytes cut into two chunks at every position: each counted in its
/// block on every level.
#[test]
fn block_counts_at_every_offset_block_edge_and_cut() {
    let units: [&[u8]; 5] = [
        &[0xDF, 0xBF],
        &[0xEF, 0xBF, 0xBF],
        &[0xDD, 0xA0],
        &[0xEE, 0xBD],
        &[0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80],
    ];
    for path in Path::available() {
        for unit in units {
            for pad in 0..64 {
                let mut b = "é".repeat(pad / 2).into_bytes();
                b.resize(pad, b'a');
                for u in [unit, b"x", unit, b"\xDF\xBF", unit] {
                    b.extend_from_slice(u);
                }
                b.extend_from_slice(&[b'z'; 40]);
                for block in [16u64, 64] {
                    for start in [0, 5, block - 3] {
                        let want = reference_blocks(&b, start, block);
                        for cut in 0..=b.len() {
                            assert_eq!(
                                count_streamed(path, &b, &[cut], start, block),
                                want,
                                "{path:?} {unit:02X?} pad {pad} block {block} start {start} cut {cut}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The vector count alone: on every path, from every offset 0..64, it
/// counts exactly the growing units of the vectors it takes, stops before
/// `stop` and before the last bytes of look-ahead, and stops only before
/// a vector that holds a candidate it cannot decide.
#[test]
fn count_growing_counts_whole_vectors() {
    let mut view = String::new();
    for k in 0..400u32 {
        let cp = [
            0x61,
            0xE9,
            0x436,
            0x4E2D,
            0x1F600,
            0x800 + k % 0xA0,
            0x1_0000 + k * 7,
        ][k as usize % 7];
        view.push(char::from_u32(cp).unwrap());
    }
    let disk = to_disk(view.as_bytes());
    let mut odd = disk.clone();
    odd[900] = 0xF7; // a candidate the vector count leaves to the caller
    for path in Path::available() {
        for b in [&disk, &odd] {
            let grows = reference_changes(b, false);
            for from in 0..64 {
                for stop in [from, from + 40, from + 500, b.len()] {
                    let (i, n) = count_changing_on(path, b, from, stop, false);
                    assert!(i == from || (i > from && i <= stop && i + 3 <= b.len()));
                    assert_eq!(
                        n,
                        grows.iter().filter(|&&p| p >= from && p < i).count() as u64,
                        "{path:?} from {from} stop {stop}"
                    );
                    if path.level() == Level::Portable {
                        assert_eq!((i, n), (from, 0));
                        continue;
                    }
                    let lanes = length_block(path);
                    assert_eq!((i - from) % lanes, 0);
                    let room = i + lanes <= stop.min(b.len() - 3);
                    if room {
                        // Stopped before a vector with another candidate
                        // (the F7, or the unit before it that it cut).
                        assert!(
                            (i..i + lanes)
                                .any(|q| matches!(b[q], 0xDD..=0xDF | 0xEE | 0xEF | 0xF7)
                                    && !grows.contains(&q)),
                            "{path:?} from {from} stopped at {i}: {:02X?}",
                            &b[i..i + lanes + 3]
                        );
                    }
                }
            }
        }
    }
}

/// A run reads nothing before its input: the bytes just before it in
/// memory (here a lead whose unit they cut, as a converter leaves behind
/// after a truncated sequence it passed through) change nothing, on every
/// level and in the AVX-512 blocks alone (whose digits look at the bytes
/// one to three lanes before each lane).
#[test]
fn runs_ignore_the_bytes_before_them() {
    let texts = [
        "a\u{4E2D}\u{6587}\u{FF0C}b\u{1F600}x",
        "\u{4E2D}a\u{1F600}\u{E9}",
        "ab\u{800}\u{10000}\u{1F600}c",
        "\u{E9}t\u{E8}\u{3B1}",
    ];
    let befores: [&[u8]; 7] = [
        b"\xC3",
        b"\xE4\xB8",
        b"\xE4",
        b"\xEE\x95",
        b"\xF0\x9F\x98",
        b"\xF0\x8E",
        b"\xF0",
    ];
    for t in texts {
        let view = t.repeat(20).into_bytes();
        let disk = to_disk(&view);
        for (encode, src) in [(true, &view), (false, &disk)] {
            for path in Path::available() {
                for blocks in [false, true] {
                    let mut want_dst = vec![0u8; 2 * src.len() + 64];
                    let want = run_on(path, blocks, encode, src, &mut want_dst);
                    for before in befores {
                        let mut buf = before.to_vec();
                        buf.extend_from_slice(src);
                        let mut dst = vec![0u8; 2 * src.len() + 64];
                        let got = run_on(path, blocks, encode, &buf[before.len()..], &mut dst);
                        let what = format!(
                            "{path:?} blocks {blocks} encode {encode} {t:?} after {before:02X?}"
                        );
                        assert_eq!(got, want, "{what}");
                        if let Some((_, w)) = got {
                            assert_eq!(dst[..w], want_dst[..w], "{what}");
                        }
                    }
                }
            }
        }
    }
}

/// The vector counts skip vectors by their leads and second bytes alone
/// (AVX-512) or by their candidates (the other levels): a unit at the
/// edge of those tests, alone in ASCII, CJK or Latin text at any lane, is
/// counted when it grows, ends the count when it is another candidate,
/// and changes nothing when it is neither.
#[test]
fn lone_units_at_the_edge_of_the_skip_test() {
    let units: [&[u8]; 14] = [
        b"\xDD\xA0",         // grows (U+0800)
        b"\xDD\x9F",         // keeps its length, no candidate
        b"\xDE\x80",         // grows
        b"\xDF\xBF",         // grows
        b"\xDF\x41",         // cut: a candidate, decided by the caller
        b"\xEE\xBD\xA0",     // grows (U+10000)
        b"\xEE\xBD\x9F",     // keeps its length, no candidate
        b"\xEE\xBC\xBF",     // keeps its length, no candidate
        b"\xEE\xBE\x80",     // grows
        b"\xEF\xBF\xBF",     // grows
        b"\xF7\xBF\xBF\xBF", // far lead: a candidate
        b"\xFB\x80",         // far lead, cut
        b"\xFE\xFF",         // FE then FF
        b"\xFD\xFF",         // a lead then FF
    ];
    let fills: [&str; 3] = ["abcdefgh", "\u{4E2D}\u{6587}", "\u{E9}\u{E8}t"];
    for fill in fills {
        let text = to_disk(fill.repeat(80).as_bytes());
        for unit in units {
            for at in 0..70 {
                // A unit boundary near `at`, in the fill's own text.
                let cut = (at..).find(|&k| !is_cont(text[k])).unwrap();
                let mut b = text[..cut].to_vec();
                b.extend_from_slice(unit);
                b.extend_from_slice(&text[cut..]);
                for path in Path::available() {
                    let lanes = length_block(path);
                    for from in [0, 1, cut.saturating_sub(1)] {
                        let from = (from..).find(|&k| !is_cont(b[k])).unwrap();
                        assert_eq!(
                            count_changing_on(path, &b, from, b.len(), false),
                            reference_count(&b, from, b.len(), lanes, false),
                            "{path:?} {unit:02X?} at {cut} from {from} in {fill:?}"
                        );
                    }
                }
            }
        }
    }
}

/// The length passes' candidate rules, byte by byte (the definitions of
/// `kernels::masks_at`, `disk_candidates` and `view_candidates`): whether
/// the unit at `b[j]` certainly changes length, and whether it is a
/// candidate at all. A missing byte counts as ASCII.
fn rule(b: &[u8], j: usize, view: bool) -> (bool, bool) {
    let at = |k: usize| b.get(j + k).copied().unwrap_or(0);
    let (v, n1, n2, n3) = (at(0), at(1), at(2), at(3));
    let c = |x: u8| x & 0xC0 == 0x80;
    if view {
        let exact = match v {
            0xE0 => c(n1) && c(n2) && (matches!(n1, 0xA0..=0xA1) || (n1 == 0xA2 && n2 < 0xA0)),
            0xF0 => {
                c(n1)
                    && c(n2)
                    && c(n3)
                    && (n1 == 0x90 || (n1 == 0x91 && (n2 < 0x82 || (n2 == 0x82 && n3 < 0xA0))))
            }
            _ => false,
        };
        let cand = match v {
            0xE0 => n1 < 0xA3,
            0xF0 => n1 < 0x92,
            0xF8 | 0xFC | 0xFE => true,
            _ => false,
        };
        (exact, cand)
    } else {
        let ee = n1 >= 0xBE || (n1 == 0xBD && n2 >= 0xA0);
        let exact = match v {
            0xDD => matches!(n1, 0xA0..=0xBF),
            0xDE | 0xDF => c(n1),
            0xEE => c(n1) && c(n2) && ee,
            0xEF => c(n1) && c(n2),
            _ => false,
        };
        let cand = match v {
            0xDD => n1 >= 0xA0,
            0xEE => ee,
            0xDE | 0xDF | 0xEF | 0xF7 | 0xFB | 0xFD | 0xFE => true,
            _ => false,
        };
        (exact, cand)
    }
}

/// [`candidate_block_on`] at `i` on `path` against [`rule`], lane by lane;
/// the block is the widest of the path's that fits with its look-ahead
/// (the AVX-512 level goes on with 32-byte blocks near the end).
fn check_block(path: Path, b: &[u8], i: usize, view: bool) {
    let got = candidate_block_on(path, b, i, view);
    let widths: &[usize] = match path.level() {
        Level::Portable => &[],
        Level::Sse2 => &[16],
        Level::Avx2 => &[32],
        Level::Avx512 => &[64, 32],
    };
    let Some(want_n) = widths.iter().copied().find(|&w| i + w + 3 <= b.len()) else {
        assert_eq!(got, None, "{path:?} at {i} of {}", b.len());
        return;
    };
    let (exact, other, n) = got.unwrap_or_else(|| panic!("{path:?} at {i} of {}", b.len()));
    assert_eq!(n, want_n, "{path:?} at {i} of {}", b.len());
    for k in 0..64 {
        let (e, c) = if k < n {
            rule(b, i + k, view)
        } else {
            (false, false)
        };
        assert_eq!(
            (exact >> k & 1 == 1, other >> k & 1 == 1),
            (e, c && !e),
            "{path:?} view {view} block at {i}, lane {k}: {:02X?}",
            &b[i + k..(i + k + 4).min(b.len())]
        );
    }
}

/// What [`count_changing_on`] must return with vectors of `lanes` bytes:
/// whole vectors from `from` while one fits before `stop` with three
/// bytes of look-ahead and all its candidates certainly change length,
/// and the count of those.
fn reference_count(b: &[u8], from: usize, stop: usize, lanes: usize, view: bool) -> (usize, u64) {
    let (mut i, mut n) = (from, 0);
    if lanes == 0 {
        return (from, 0);
    }
    while i + lanes <= stop.min(b.len().saturating_sub(3)) {
        let rules: Vec<_> = (i..i + lanes).map(|j| rule(b, j, view)).collect();
        if rules.iter().any(|&(e, c)| c && !e) {
            break;
        }
        n += rules.iter().filter(|&&(e, _)| e).count() as u64;
        i += lanes;
    }
    (i, n)
}

/// The rules agree with the unit-by-unit reference: a unit that certainly
/// changes length does, and every unit that does is a candidate.
fn check_rule(b: &[u8], view: bool) {
    let changes = reference_changes(b, view);
    for j in 0..b.len() {
        let (exact, cand) = rule(b, j, view);
        if exact {
            assert!(changes.contains(&j), "view {view} {j}: {b:02X?}");
        }
        if changes.contains(&j) {
            assert!(cand, "view {view} {j}: {b:02X?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Every block's candidate masks, at every offset, on every level,
    /// equal the byte-by-byte rule: the lanes of a 64-byte block line up
    /// with their look-ahead, the last ones with the next block's bytes.
    #[test]
    fn candidate_blocks_follow_the_rule_at_every_offset(b in crowded_bytes()) {
        for view in [false, true] {
            check_rule(&b, view);
            for path in Path::available() {
                for i in 0..=b.len() {
                    check_block(path, &b, i, view);
                }
            }
        }
    }

    /// The vector counts on every level, from every offset and to every
    /// stop, take exactly the whole vectors the rule allows.
    #[test]
    fn counts_follow_the_rule(b in crowded_bytes(), from in 0usize..80) {
        for path in Path::available() {
            let lanes = length_block(path);
            for view in [false, true] {
                for stop in from..=b.len() + 1 {
                    prop_assert_eq!(
                        count_changing_on(path, &b, from, stop, view),
                        reference_count(&b, from, stop, lanes, view),
                        "{:?} view {} from {} stop {}", path, view, from, stop
                    );
                }
            }
        }
    }
}

/// Each kind of candidate (changing length, cut, not changing by its
/// second, third or fourth byte, exempt and far leads; disk and view) at
/// every position of three 64-byte vectors, so at lanes 61–63 with its
/// look-ahead in the next vector, on text that is otherwise units that
/// change length and é: the candidate masks of every block, the vector
/// counts from every offset 0..64 to stops at and around every vector's
/// end, and the search for the next candidate (there and with the unit
/// alone), follow the rule on every level.
#[test]
fn candidates_at_vector_edges() {
    let disk: [&[u8]; 14] = [
        &[0xDD, 0xA0],
        &[0xDD, 0x9F],
        &[0xDD, 0xC3],
        &[0xDF, 0x41],
        &[0xDE, 0xBF],
        &[0xEE, 0xBD, 0xA0],
        &[0xEE, 0xBD, 0x9F],
        &[0xEE, 0xBD, 0xC3],
        &[0xEE, 0xBE, 0x41],
        &[0xEE, 0xBC, 0xBF],
        &[0xEF, 0xBF],
        &[0xF7, 0x80, 0x80, 0x80],
        &[0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80],
        &[0xFD, 0xBD],
    ];
    let view: [&[u8]; 9] = [
        &[0xE0, 0xA1, 0x80],
        &[0xE0, 0xA2, 0x9F],
        &[0xE0, 0xA2, 0xA0],
        &[0xE0, 0x9F, 0xBF],
        &[0xF0, 0x91, 0x82, 0x9F],
        &[0xF0, 0x91, 0x82, 0xA0],
        &[0xF0, 0x90, 0x80],
        &[0xF8, 0x88],
        &[0xE0, 0xA0],
    ];
    // Units that change length (U+089F, U+1109F) and é, on each side.
    let disk_fill: [&[u8]; 3] = [b"\xDF\xBF", b"\xEF\xBF\xBF", "é".as_bytes()];
    let view_fill: [&[u8]; 3] = [b"\xE0\xA2\x9F", b"\xF0\x91\x82\x9F", "é".as_bytes()];
    for (is_view, units, fill) in [(false, &disk[..], disk_fill), (true, &view[..], view_fill)] {
        for unit in units {
            for pos in 0..3 * 64 {
                let mut b = Vec::new();
                let mut k = 0;
                while b.len() < pos {
                    b.extend_from_slice(fill[k % 3]);
                    k += 1;
                }
                b.truncate(pos);
                b.extend_from_slice(unit);
                while b.len() < 4 * 64 + 3 {
                    b.extend_from_slice(fill[k % 3]);
                    k += 1;
                }
                check_rule(&b, is_view);
                for path in Path::available() {
                    for i in 0..b.len() {
                        check_block(path, &b, i, is_view);
                    }
                    // The first rule candidate from each offset (the
                    // search may stop earlier at a lead it does not judge
                    // by the next bytes: everywhere on the portable path,
                    // on the vector paths only near the end); also with
                    // the unit alone among é, where the search has to
                    // skip whole vectors to reach it.
                    let mut alone = "é".repeat(pos / 2).into_bytes();
                    alone.resize(pos, b'a');
                    alone.extend_from_slice(unit);
                    alone.resize(4 * 64 + 3, b'z');
                    for s in [&b, &alone] {
                        for from in 0..s.len() {
                            let first = (from..s.len()).find(|&j| rule(s, j, is_view).1);
                            let got = find_on(path, s, from, is_view);
                            let unjudged = path.level() == Level::Portable || got + 34 > s.len();
                            assert!(
                                first == Some(got) || (first.is_none_or(|f| got < f) && unjudged),
                                "{path:?} view {is_view} {unit:02X?} at {pos} from {from}: {got} {first:?}"
                            );
                        }
                    }
                    let lanes = length_block(path);
                    for from in 0..64 {
                        for end in (0..=4usize).map(|v| from + v * 64) {
                            for stop in end.saturating_sub(1)..=end + 1 {
                                assert_eq!(
                                    count_changing_on(path, &b, from, stop, is_view),
                                    reference_count(&b, from, stop, lanes, is_view),
                                    "{path:?} {unit:02X?} at {pos} from {from} stop {stop}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Text of `len` bytes or a little more, from a fixed seed: stretches of
/// ASCII long enough for the four-block copies, then stretches of one to
/// three scripts at character level (two-, three- and four-byte units,
/// units whose length differs on disk); with `junk`, bytes the fast
/// paths refuse and lossless conversion carries through (a stray
/// continuation byte, an FE unit) now and then.
fn long_text(len: usize, junk: bool) -> Vec<u8> {
    let chars = [
        'é',
        'ж',
        '中',
        '字',
        '😀',
        '\u{800}',
        '\u{89F}',
        '\u{1_0000}',
        '\u{1_109F}',
        '\u{FFFF}',
        '\u{D_109F}',
    ];
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut out = Vec::with_capacity(len + 4096);
    while out.len() < len {
        out.resize(out.len() + next(600), b'a' + next(26) as u8);
        for _ in 0..next(2000) {
            if next(3) == 0 {
                out.push(b' ');
            } else {
                let c = chars[next(chars.len())];
                out.extend_from_slice(c.to_string().as_bytes());
            }
        }
        if junk && next(8) == 0 {
            out.extend_from_slice(if next(2) == 0 { &[0x80] } else { &[0xFE, 0x80] });
        }
    }
    out
}

/// Inputs long enough for the kernels to prefetch ahead of the blocks
/// they convert (`PREFETCH_FROM`): on every level, a fast run over clean
/// text takes all of it but its last block and converts it exactly, and
/// the converters give the unit-by-unit reference's output on text with
/// refused units, where each run stops and the next begins further on.
#[test]
fn long_inputs_convert_as_the_reference_on_every_level() {
    let clean = long_text(PREFETCH_FROM * 5 / 4, false);
    let disk_clean = to_disk(&clean);
    let junk = long_text(PREFETCH_FROM * 5 / 4, true);
    let disk_junk = to_disk(&junk);
    assert!(disk_clean.len() >= PREFETCH_FROM && disk_junk.len() >= PREFETCH_FROM);
    let (want_v, want_w) = (
        reference_v(&disk_junk, false).unwrap(),
        reference_w(&junk, false).unwrap(),
    );
    for path in Path::available() {
        for (encode, src) in [(true, &clean), (false, &disk_clean)] {
            let mut dst = vec![0u8; 2 * src.len() + 64];
            let (n, w) = if encode {
                encode_run_on(path, src, &mut dst)
            } else {
                decode_run_on(path, src, &mut dst)
            };
            if path.level() != Level::Portable {
                assert!(
                    n + run_block(path) + 3 >= src.len(),
                    "{path:?} encode {encode}: ran to {n} of {}",
                    src.len()
                );
            }
            let want = if encode {
                reference_fast_w(&src[..n])
            } else {
                reference_fast_v(&src[..n])
            };
            assert!(
                want.as_deref() == Some(&dst[..w]),
                "{path:?} encode {encode}: output differs from the reference"
            );
        }
        let mut d = Decoder::lossless().with_simd_level(path.level());
        let got = stream(|s, o, l| d.convert(s, o, l), &disk_junk, &[], 3 << 20).unwrap();
        assert!(got == want_v, "{path:?}: V differs from the reference");
        let mut e = Encoder::lossless().with_simd_level(path.level());
        let got = stream(|s, o, l| e.convert(s, o, l), &junk, &[], 3 << 20).unwrap();
        assert!(got == want_w, "{path:?}: W differs from the reference");
    }
}
