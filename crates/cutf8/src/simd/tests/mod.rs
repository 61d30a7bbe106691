//! The fast paths against the scalar reference (`codec::scalar`), on every
//! path this CPU has, at offsets 0..64 and with output room cut anywhere;
//! then the converters and length passes built on them against a
//! unit-by-unit reference, one-shot and streamed at random cuts through
//! output buffers of several sizes.

use super::*;
use crate::index::{BlockCount, DiskEvent};
use crate::scalar::is_cont;
use crate::tests::{decode_to_vec, encode_to_vec};
use crate::unit::{
    decode_disk_unit, decode_view_unit, encode_disk, encode_view, DiskUnit, ViewUnit,
};
use crate::{length, Decoder, Encoder, Status};
use proptest::prelude::*;

/// V unit by unit; `Err(offset)` of the first unit strict mode refuses.
fn reference_v(b: &[u8], strict: bool) -> Result<Vec<u8>, usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let unit = decode_disk_unit(&b[i..], true);
        let ok = matches!(unit, DiskUnit::Char { cp, .. } if cp <= 0x10_FFFF);
        if strict && !ok {
            return Err(i);
        }
        match unit {
            DiskUnit::Char { cp, len } => {
                let mut t = [0u8; 8];
                let n = encode_view(cp, &mut t);
                out.extend_from_slice(&t[..n]);
                i += len;
            }
            DiskUnit::Stray => {
                out.push(b[i]);
                i += 1;
            }
            DiskUnit::Truncated { len, .. } => {
                out.extend_from_slice(&b[i..i + len]);
                i += len;
            }
            DiskUnit::ReservedLead => {
                let mut j = i + 1;
                while j < b.len() && is_cont(b[j]) {
                    j += 1;
                }
                out.extend_from_slice(&b[i..j]);
                i = j;
            }
            DiskUnit::Incomplete => unreachable!("at_end"),
        }
    }
    Ok(out)
}

/// W unit by unit; `Err(offset)` of the first unit the mode refuses.
fn reference_w(b: &[u8], strict: bool) -> Result<Vec<u8>, usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match decode_view_unit(&b[i..], true) {
            ViewUnit::Char { cp, len } => {
                if strict && cp > 0x10_FFFF {
                    return Err(i);
                }
                let mut t = [0u8; 8];
                let n = encode_disk(cp, &mut t).ok_or(i)?;
                out.extend_from_slice(&t[..n]);
                i += len;
            }
            ViewUnit::Unstorable { .. } => return Err(i),
            ViewUnit::Passthrough { len, .. } => {
                if strict {
                    return Err(i);
                }
                out.extend_from_slice(&b[i..i + len]);
                i += len;
            }
            ViewUnit::Incomplete => unreachable!("at_end"),
        }
    }
    Ok(out)
}

/// What a fast run may claim: whole units, all well-formed code points up
/// to U+10FFFF.
fn reference_fast_v(b: &[u8]) -> Option<Vec<u8>> {
    reference_v(b, true).ok()
}

fn reference_fast_w(b: &[u8]) -> Option<Vec<u8>> {
    reference_w(b, true).ok()
}

/// Text the fast paths should take whole (both directions), with
/// occasional units they must leave to the scalar code, and junk.
fn arb_textish(junk: u32) -> impl Strategy<Value = Vec<u8>> {
    let clean = junk == 0;
    let junk = junk.max(1);
    let piece = prop_oneof![
        40 => (0x20u64..0x7F).boxed(),
        12 => (0xA0u64..0x800).boxed(),
        12 => (0x8A0u64..0xD800).boxed(),
        4 => (0xCF00u64..0xD800).boxed(), // around the 3-byte offset switch
        6 => (0xE000u64..0x1_0000).boxed(),
        8 => (0x1_10A0u64..0xD_10A0).boxed(),
        junk => (0x800u64..0x8A0).boxed(),
        junk => (0x1_0000u64..0x1_10A0).boxed(),
        junk => (0xD_10A0u64..0x11_0000).boxed(),
        junk => (0x11_0000u64..0x8000_0000).boxed(), // extended forms
        junk => (0x8000_0000u64..0x8421_10A0).boxed(),
        junk => (0x1_0000_0000u64..0x1_0000_0100).boxed(), // a raw byte
    ];
    proptest::collection::vec(piece, 0..120).prop_map(move |ps| {
        let mut out = Vec::new();
        for p in ps {
            let taken =
                matches!(p, 0x20..=0x7E | 0xA0..=0x7FF | 0x8A0..=0xFFFF | 0x1_10A0..=0xD_109F);
            if clean && (!taken || (0xD800..0xE000).contains(&p)) {
                continue;
            }
            let mut t = [0u8; 8];
            if p >= 0x1_0000_0000 {
                out.push(p as u8);
            } else {
                let n = encode_view(p as u32, &mut t);
                out.extend_from_slice(&t[..n]);
            }
        }
        out
    })
}

/// Disk bytes of text-like input: W of the view where it can store it.
fn to_disk(view: &[u8]) -> Vec<u8> {
    encode_to_vec(view, false).unwrap_or_else(|_| view.to_vec())
}

/// The bytes of the last conversion block on `path` (on clean text, a
/// fast run stops fewer than this and three bytes before the end of its
/// input): the AVX-512 level ends its runs with 32-byte blocks.
fn run_block(path: Path) -> usize {
    match path.level() {
        Level::Portable => 0,
        Level::Sse2 => 16,
        Level::Avx2 | Level::Avx512 => 32,
    }
}

/// The bytes of a vector of the length passes on `path` (the blocks of
/// [`count_changing_on`] and [`candidate_block_on`]).
fn length_block(path: Path) -> usize {
    match path.level() {
        Level::Portable => 0,
        Level::Sse2 => 16,
        Level::Avx2 => 32,
        Level::Avx512 => 64,
    }
}

/// A fast run on `path` (`encode`: W, else V), or with `blocks` the
/// AVX-512 level's 64-byte blocks alone (`None` on other paths).
fn run_on(
    path: Path,
    blocks: bool,
    encode: bool,
    src: &[u8],
    dst: &mut [u8],
) -> Option<(usize, usize)> {
    match (blocks, encode) {
        (true, _) => blocks_avx512_on(path, encode, src, dst),
        (false, true) => Some(encode_run_on(path, src, dst)),
        (false, false) => Some(decode_run_on(path, src, dst)),
    }
}

/// [`check_one_run`] of the run on `path`, and of the AVX-512 blocks
/// alone on that level.
fn check_run(
    path: Path,
    encode: bool,
    src: &[u8],
    room: usize,
) -> Result<(), proptest::test_runner::TestCaseError> {
    check_one_run(path, false, encode, src, room)?;
    check_one_run(path, true, encode, src, room)
}

fn check_one_run(
    path: Path,
    blocks: bool,
    encode: bool,
    src: &[u8],
    room: usize,
) -> Result<(), proptest::test_runner::TestCaseError> {
    // A guard zone after `dst`: the kernels must never store past it.
    let mut big = vec![0xA5u8; room + 64];
    let Some((r, w)) = run_on(path, blocks, encode, src, &mut big[..room]) else {
        return Ok(());
    };
    prop_assert!(r <= src.len() && w <= room);
    let want = if encode {
        reference_fast_w(&src[..r])
    } else {
        reference_fast_v(&src[..r])
    };
    prop_assert_eq!(
        want.as_deref(),
        Some(&big[..w]),
        "{:?} read {} wrote {}",
        path,
        r,
        w
    );
    prop_assert!(
        big[room..].iter().all(|&b| b == 0xA5),
        "{:?} stored past the end of dst",
        path,
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// A fast run converts exactly what the reference converts, stops at a
    /// unit boundary, and writes nothing past what it claims.
    #[test]
    fn fast_runs_equal_reference(
        text in arb_textish(1),
        pad in 0usize..64,
        room_cut in 0usize..80,
    ) {
        let mut view = vec![b'a'; pad];
        view.extend_from_slice(&text);
        let disk = to_disk(&view);
        for path in Path::available() {
            for (encode, src) in [(true, &view), (false, &disk)] {
                check_run(path, encode, src, src.len() + 40)?;
                check_run(path, encode, src, src.len().saturating_sub(room_cut))?;
            }
        }
    }

    /// Random bytes: the fast run never claims anything the reference
    /// would not convert one for one.
    #[test]
    fn fast_runs_on_random_bytes(b in proptest::collection::vec(prop_oneof![
        2 => any::<u8>(), 2 => 0x80u8..0xC0, 1 => 0xC0u8..=0xFF, 1 => 0x20u8..0x7F], 0..200)) {
        for path in Path::available() {
            check_run(path, true, &b, b.len() + 40)?;
            check_run(path, false, &b, b.len() + 40)?;
        }
    }

    /// On text it fully takes, a fast run stops only near the end.
    #[test]
    fn fast_runs_take_clean_text(text in arb_textish(0), pad in 0usize..64) {
        let mut view = vec![b'a'; pad];
        view.extend_from_slice(&text);
        let disk = to_disk(&view);
        for path in Path::available().into_iter().filter(|p| p.level() != Level::Portable) {
            let mut dst = vec![0u8; 2 * view.len() + 64];
            for (blocks, (encode, src)) in [false, true].into_iter().flat_map(|b| [(b, (true, &view)), (b, (false, &disk))]) {
                let Some((n, _)) = run_on(path, blocks, encode, src, &mut dst) else { continue };
                let block = if blocks { 64 } else { run_block(path) };
                prop_assert!(n + block + 3 >= src.len(), "{:?} blocks {} encode {} {} of {}", path, blocks, encode, n, src.len());
            }
        }
    }

    /// The fast runs take the units whose length differs on disk too
    /// (U+0800–U+089F, U+10000–U+1109F), however densely they come.
    #[test]
    fn fast_runs_take_length_changing_units(
        text in arb_textish(0),
        grow in proptest::collection::vec((0usize..200, prop_oneof![0x800u32..0x8A0, 0x1_0000u32..0x1_10A0]), 0..60),
        pad in 0usize..64,
    ) {
        let mut chars: Vec<char> = std::str::from_utf8(&text).unwrap().chars().collect();
        for (at, cp) in grow {
            chars.insert(at.min(chars.len()), char::from_u32(cp).unwrap());
        }
        let mut view = "a".repeat(pad);
        view.extend(chars);
        let disk = to_disk(view.as_bytes());
        for path in Path::available().into_iter().filter(|p| p.level() != Level::Portable) {
            let mut dst = vec![0u8; 2 * view.len() + 64];
            for blocks in [false, true] {
                let block = if blocks { 64 } else { run_block(path) };
                if let Some((n, w)) = run_on(path, blocks, false, &disk, &mut dst) {
                    prop_assert!(n + block + 3 >= disk.len(), "{:?} blocks {} decode {} of {}", path, blocks, n, disk.len());
                    let want = reference_fast_v(&disk[..n]);
                    prop_assert_eq!(want.as_deref(), Some(&dst[..w]));
                }
                if let Some((n, w)) = run_on(path, blocks, true, view.as_bytes(), &mut dst) {
                    prop_assert!(n + block + 3 >= view.len(), "{:?} blocks {} encode {} of {}", path, blocks, n, view.len());
                    let want = reference_fast_w(&view.as_bytes()[..n]);
                    prop_assert_eq!(want.as_deref(), Some(&dst[..w]));
                }
            }
        }
    }

    /// Candidate search never skips a unit whose length may change, and
    /// stops only on a lead byte of the kind the scans look at.
    #[test]
    fn find_never_skips_a_candidate(b in proptest::collection::vec(prop_oneof![
        6 => 0u8..0xDD, 2 => 0xDDu8..=0xFF, 2 => 0x90u8..0xC0], 0..200)) {
        let coarse = |view: bool, x: u8| if view {
            matches!(x, 0xE0 | 0xF0 | 0xF8 | 0xFC | 0xFE)
        } else {
            matches!(x, 0xDD..=0xDF | 0xEE | 0xEF | 0xF7 | 0xFB | 0xFD | 0xFE)
        };
        // The exact conditions, a missing byte counting as "maybe".
        let must = |view: bool, j: usize| {
            let n1 = b.get(j + 1).copied();
            let n2 = b.get(j + 2).copied();
            match (view, b[j]) {
                (false, 0xDD) => n1.is_none_or(|c| c >= 0xA0),
                (false, 0xEE) => match n1 {
                    None => true,
                    Some(c) if c >= 0xBE => true,
                    Some(0xBD) => n2.is_none_or(|c| c >= 0xA0),
                    _ => false,
                },
                (true, 0xE0) => n1.is_none_or(|c| c < 0xA3),
                (true, 0xF0) => n1.is_none_or(|c| c < 0x92),
                (view, x) => coarse(view, x),
            }
        };
        for path in Path::available() {
            for view in [false, true] {
                for from in 0..=b.len() {
                    let r = find_on(path, &b, from, view);
                    prop_assert!(r == b.len() || coarse(view, b[r]), "{:?} {} stopped at {}", path, view, r);
                    prop_assert!((from..r).all(|j| !must(view, j)), "{:?} {} skipped to {}", path, view, r);
                }
            }
        }
    }

    /// The converters built on the fast paths equal the unit-by-unit
    /// reference, one-shot and streamed through outputs of several sizes,
    /// on every level.
    #[test]
    fn converters_equal_reference(
        text in arb_textish(2),
        pad in 0usize..64,
        cuts in proptest::collection::vec(0usize..600, 0..6),
        room in prop_oneof![Just(7usize), 8usize..80, Just(4096)],
    ) {
        let mut view = vec![b'x'; pad];
        view.extend_from_slice(&text);
        let disk = to_disk(&view);
        // The magic number is refused in strict mode (its own tests);
        // the units alone here.
        let magic = disk.windows(8).any(|w| w == crate::MAGIC)
            || view.windows(9).any(|w| w == crate::MAGIC_TEXT);
        for strict in [false, true].into_iter().filter(|&s| !(s && magic)) {
            prop_assert_eq!(decode_to_vec(&disk, strict).map_err(|e| e.offset as usize), reference_v(&disk, strict));
            prop_assert_eq!(encode_to_vec(&view, strict).map_err(|e| e.offset as usize), reference_w(&view, strict));
            for path in Path::available() {
                let d = if strict { Decoder::strict() } else { Decoder::lossless() };
                let mut d = d.with_simd_level(path.level());
                prop_assert_eq!(stream(|s, o, l| d.convert(s, o, l), &disk, &cuts, room), reference_v(&disk, strict), "{:?}", path);
                let e = if strict { Encoder::strict() } else { Encoder::lossless() };
                let mut e = e.with_simd_level(path.level());
                prop_assert_eq!(stream(|s, o, l| e.convert(s, o, l), &view, &cuts, room), reference_w(&view, strict), "{:?}", path);
            }
        }
        if let Ok(v) = reference_v(&disk, false) {
            prop_assert_eq!(length::view_len(&disk), v.len() as u64);
        }
        if let Ok(d) = reference_w(&view, false) {
            prop_assert_eq!(length::disk_len(&view), d.len() as u64);
        }
    }
}

/// Feed `input` cut at `cuts` through an output buffer of `room` bytes;
/// the output, or the offset of the first refused unit.
fn stream(
    mut step: impl FnMut(&[u8], &mut [u8], bool) -> (Status, usize, usize),
    input: &[u8],
    cuts: &[usize],
    room: usize,
) -> Result<Vec<u8>, usize> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.push(input.len());
    cuts.sort();
    let mut out = Vec::new();
    let mut buf = vec![0u8; room];
    let mut start = 0;
    for (k, &end) in cuts.iter().enumerate() {
        let last = k == cuts.len() - 1;
        let mut pos = start;
        loop {
            let (status, r, w) = step(&input[pos..end], &mut buf, last);
            out.extend_from_slice(&buf[..w]);
            pos += r;
            match status {
                Status::InputEmpty => break,
                Status::OutputFull => continue,
                Status::Malformed(m) => return Err(pos - m.len),
            }
        }
        start = end;
    }
    Ok(out)
}

/// Each lane of a vector at once: one unit of each kind the fast path must
/// refuse, at every position of a clean block, on every path.
#[test]
fn each_refused_unit_at_every_position() {
    let refused_view: &[&[u8]] = &[
        &[0xC2, 0x85],             // C1 control
        &[0xC0, 0xAF],             // overlong
        &[0xE0, 0x9F, 0xBF],       // overlong
        &[0xED, 0xA0, 0x80],       // surrogate
        &[0xF4, 0x8F, 0xBF, 0xBF], // U+10FFFF
        &[0xF8, 0x88, 0x80, 0x80, 0x80],
        &[0xFE],
        &[0x80],
        &[0xE4, 0xB8],
    ];
    let refused_disk: &[&[u8]] = &[
        &[0xF3, 0x80, 0x80, 0x80], // near U+10FFFF
        &[0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF],
        &[0xFF, 0x80],
        &[0xBF],
        &[0xC5],
    ];
    for path in Path::available() {
        for (encode, cases) in [(true, refused_view), (false, refused_disk)] {
            for unit in cases {
                for pos in 0..70 {
                    let mut src = "é".repeat(pos / 2).into_bytes();
                    src.resize(pos, b'a');
                    src.extend_from_slice(unit);
                    src.extend_from_slice(&[b'z'; 70]);
                    let mut dst = vec![0u8; src.len()];
                    let (n, w) = if encode {
                        encode_run_on(path, &src, &mut dst)
                    } else {
                        decode_run_on(path, &src, &mut dst)
                    };
                    assert!(n <= pos, "{path:?} {unit:02X?} at {pos}: ran to {n}");
                    let want = if encode {
                        reference_fast_w(&src[..n])
                    } else {
                        reference_fast_v(&src[..n])
                    };
                    assert_eq!(want.as_deref(), Some(&dst[..w]));
                }
            }
        }
    }
}

/// The first and last units of both ranges whose length differs on disk,
/// and their neighbours, at every position in a block and beside each
/// other: both fast runs take them and agree with the reference.
#[test]
fn length_changing_units_at_every_position() {
    let cps = [
        0x7FF, 0x800, 0x89F, 0x8A0, 0xFFFF, 0x1_0000, 0x1_109F, 0x1_10A0,
    ];
    for path in Path::available()
        .into_iter()
        .filter(|p| p.level() != Level::Portable)
    {
        for a in cps {
            for b in cps {
                for pos in 0..70 {
                    let mut view = "é".repeat(pos / 2).into_bytes();
                    view.resize(pos, b'a');
                    for cp in [a, b, a] {
                        view.extend_from_slice(char::from_u32(cp).unwrap().to_string().as_bytes());
                    }
                    view.extend_from_slice(&[b'z'; 70]);
                    let disk = to_disk(&view);
                    let mut dst = vec![0u8; 2 * view.len()];
                    let (n, w) = decode_run_on(path, &disk, &mut dst);
                    assert!(
                        n > pos + 9,
                        "{path:?} V U+{a:X} U+{b:X} at {pos}: ran to {n}"
                    );
                    assert_eq!(reference_fast_v(&disk[..n]).as_deref(), Some(&dst[..w]));
                    let (n, w) = encode_run_on(path, &view, &mut dst);
                    assert!(
                        n > pos + 9,
                        "{path:?} W U+{a:X} U+{b:X} at {pos}: ran to {n}"
                    );
                    assert_eq!(reference_fast_w(&view[..n]).as_deref(), Some(&dst[..w]));
                }
            }
        }
    }
}

/// Blocks made only of units whose length differs on disk (every lane of
/// a 64-byte block shrinking or growing), and such units among others,
/// after 0..64 bytes of padding (and after an ASCII stretch long enough
/// for four blocks at once): on every path, with the input cut at each of
/// its last 70 bytes (a sequence cut at the end, `commit` below a block),
/// and with every output room from nothing to more than enough (the
/// output filling `dst` exactly, a grown block that does not fit).
#[test]
fn dense_blocks_at_every_offset_cut_and_room() {
    let fills = [
        "\u{800}",
        "\u{1_0000}",
        "\u{1_109F}\u{89F}",
        "\u{800}a\u{1_0000}é中\u{1_109F}😀\u{89F}ж",
        "\u{8A0}\u{1_10A0}\u{FFFF}\u{7FF}",
        // Blocks whose longest units are two bytes (a lighter kernel).
        "é\u{7FF}a\u{A0}ж",
        "\u{800}é",
    ];
    for path in Path::available()
        .into_iter()
        .filter(|p| p.level() != Level::Portable)
    {
        for fill in fills {
            for pad in (0..64).chain(250..262) {
                let mut view = "a".repeat(pad);
                while view.len() < pad + 200 {
                    view.push_str(fill);
                }
                let view = view.into_bytes();
                let disk = to_disk(&view);
                for (encode, src) in [(true, &view), (false, &disk)] {
                    let out_len = if encode { disk.len() } else { view.len() };
                    for end in src.len().saturating_sub(70)..=src.len() {
                        check_run(path, encode, &src[..end], 2 * end + 64).unwrap();
                    }
                    for room in 0..out_len + 70 {
                        check_run(path, encode, src, room).unwrap();
                    }
                    // With room, a run stops only within the last block.
                    let mut dst = vec![0u8; 2 * src.len() + 64];
                    for blocks in [false, true] {
                        let Some((n, _)) = run_on(path, blocks, encode, src, &mut dst) else {
                            continue;
                        };
                        let block = if blocks { 64 } else { run_block(path) };
                        assert!(
                            n + block + 3 >= src.len(),
                            "{path:?} {fill:?} pad {pad} blocks {blocks} encode {encode}: {n} of {}",
                            src.len()
                        );
                    }
                }
            }
        }
    }
}

/// The levels the tests iterate are the ones the CPU has: on a CPU with
/// AVX-512 (this project's machines), `Path::available` offers it, and
/// every test above runs it.
#[test]
fn every_level_the_cpu_has_is_available() {
    let levels: Vec<Level> = Path::available().iter().map(|p| p.level()).collect();
    assert!(levels.windows(2).all(|w| w[0] < w[1]), "{levels:?}");
    assert_eq!(Level::best(), *levels.last().unwrap());
    #[cfg(target_arch = "x86_64")]
    {
        let avx512 = [
            "avx2",
            "avx512f",
            "avx512bw",
            "avx512vbmi",
            "avx512vbmi2",
            "bmi2",
            "popcnt",
        ];
        let has = |f: &str| match f {
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
            "avx512vbmi" => std::is_x86_feature_detected!("avx512vbmi"),
            "avx512vbmi2" => std::is_x86_feature_detected!("avx512vbmi2"),
            "bmi2" => std::is_x86_feature_detected!("bmi2"),
            _ => std::is_x86_feature_detected!("popcnt"),
        };
        assert_eq!(
            levels.contains(&Level::Avx512),
            avx512.iter().all(|f| has(f))
        );
        assert_eq!(levels.contains(&Level::Avx2), has("avx2"));
        assert!(levels.contains(&Level::Sse2));
    }
}

mod lengths;
