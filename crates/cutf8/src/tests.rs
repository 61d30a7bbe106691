//! Codec tests: the format's worked examples, every scalar value, the
//! invariants on random input, streaming at every cut, and the fast paths
//! against the scalar reference.

use super::unit::*;
use super::*;
use proptest::prelude::*;

/// The one-shot functions, mode as a flag (for tests that run both).
pub(crate) fn decode_to_vec(b: &[u8], strict: bool) -> Result<Vec<u8>, ConvertError> {
    if strict {
        decode_strict(b)
    } else {
        Ok(decode_lossless(b))
    }
}

/// As [`decode_to_vec`], for W.
pub(crate) fn encode_to_vec(b: &[u8], strict: bool) -> Result<Vec<u8>, ConvertError> {
    if strict {
        encode_strict(b)
    } else {
        encode_lossless(b)
    }
}

/// The format's worked examples (the byte table in the crate docs): (disk
/// bytes, code point).
const EXAMPLES: &[(&[u8], u32)] = &[
    (&[0x2F], 0x2F),
    (&[0xC0, 0xAF], 0xCF),
    (&[0xC0, 0x80], 0xA0),
    (&[0xDF, 0xBF], 0x89F),
    (&[0xE0, 0x80, 0x80], 0x8A0),
    (&[0xEC, 0xBD, 0x9F], 0xD7FF),
    (&[0xEC, 0xBD, 0xA0], 0xE000),
    (&[0xEF, 0xBF, 0xBF], 0x1109F),
    (&[0xF0, 0x80, 0x80, 0x80], 0x110A0),
    (&[0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF], 0x8421109F),
];

/// The table's range boundaries: (first disk sequence, first code point,
/// last disk sequence, last code point).
const RANGES: &[(&[u8], u32, &[u8], u32)] = &[
    (&[0x00], 0, &[0x7F], 0x7F),
    (&[0xC0, 0x80], 0xA0, &[0xDF, 0xBF], 0x89F),
    (&[0xE0, 0x80, 0x80], 0x8A0, &[0xEC, 0xBD, 0x9F], 0xD7FF),
    (&[0xEC, 0xBD, 0xA0], 0xE000, &[0xEF, 0xBF, 0xBF], 0x1109F),
    (
        &[0xF0, 0x80, 0x80, 0x80],
        0x110A0,
        &[0xF7, 0xBF, 0xBF, 0xBF],
        0x21109F,
    ),
    (
        &[0xF8, 0x80, 0x80, 0x80, 0x80],
        0x2110A0,
        &[0xFB, 0xBF, 0xBF, 0xBF, 0xBF],
        0x421109F,
    ),
    (
        &[0xFC, 0x80, 0x80, 0x80, 0x80, 0x80],
        0x42110A0,
        &[0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF],
        0x8421109F,
    ),
];

fn disk_of(cp: u32) -> Vec<u8> {
    let mut b = [0u8; 8];
    let n = encode_disk(cp, &mut b).expect("encodable");
    b[..n].to_vec()
}

fn view_of(cp: u32) -> Vec<u8> {
    let mut b = [0u8; 8];
    let n = encode_view(cp, &mut b);
    b[..n].to_vec()
}

#[test]
fn worked_examples_both_ways() {
    for &(bytes, cp) in EXAMPLES.iter() {
        assert_eq!(
            decode_disk_unit(bytes, true),
            DiskUnit::Char {
                cp,
                len: bytes.len()
            }
        );
        assert_eq!(disk_of(cp), bytes, "encode U+{cp:04X}");
    }
    for &(lo, lo_cp, hi, hi_cp) in RANGES.iter() {
        assert_eq!(disk_of(lo_cp), lo);
        assert_eq!(disk_of(hi_cp), hi);
        assert_eq!(
            decode_disk_unit(lo, true),
            DiskUnit::Char {
                cp: lo_cp,
                len: lo.len()
            }
        );
        assert_eq!(
            decode_disk_unit(hi, true),
            DiskUnit::Char {
                cp: hi_cp,
                len: hi.len()
            }
        );
    }
    assert_eq!(decode_to_vec(&[0xC0, 0xAF], true).unwrap(), "Ï".as_bytes());
    assert_eq!(encode_to_vec("Ï".as_bytes(), true).unwrap(), [0xC0, 0xAF]);
}

#[test]
fn magic_is_what_spec_says() {
    let view = decode_to_vec(&MAGIC, false).unwrap();
    let cps: Vec<u32> = String::from_utf8(view)
        .unwrap()
        .chars()
        .map(|c| c as u32)
        .collect();
    assert_eq!(cps, [0x10E7D, 0xED4E, 0, 0x0A]);
    let chars: String = [0x10E7D, 0xED4E, 0, 0x0A]
        .iter()
        .map(|&c| char::from_u32(c).unwrap())
        .collect();
    assert_eq!(chars.as_bytes(), MAGIC_TEXT);
    // W of those characters is the magic number; strict W refuses them.
    assert_eq!(encode_to_vec(chars.as_bytes(), false).unwrap(), MAGIC);
    let e = encode_to_vec(chars.as_bytes(), true).unwrap_err();
    assert_eq!((e.problem(), e.offset), (Problem::MagicText, 0));
    // And strict V refuses the magic number as text.
    let e = decode_to_vec(&MAGIC, true).unwrap_err();
    assert_eq!((e.problem(), e.offset), (Problem::MagicNumber, 0));
}

#[test]
fn first_code_point_above_unicode() {
    assert_eq!(disk_of(0x11_0000), [0xF3, 0xBE, 0xBD, 0xA0]);
}

#[test]
fn unencodable_code_points() {
    let mut b = [0u8; 8];
    for cp in [
        0x80,
        0x85,
        0x9F,
        0xD800,
        0xDBFF,
        0xDFFF,
        0x8421_10A0,
        u32::MAX,
    ] {
        assert_eq!(encode_disk(cp, &mut b), None, "U+{cp:04X}");
    }
}

#[test]
fn every_scalar_value_round_trips() {
    let mut text = String::new();
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        if (0x80..=0x9F).contains(&(c as u32)) {
            continue;
        }
        text.push(c);
    }
    let disk = encode_to_vec(text.as_bytes(), true).unwrap();
    assert_eq!(decode_to_vec(&disk, true).unwrap(), text.as_bytes());
    assert_eq!(length::view_len(&disk), text.len() as u64);
    assert_eq!(length::disk_len(text.as_bytes()), disk.len() as u64);
    // and one by one, against the scalar reference
    for c in text.chars() {
        let cp = c as u32;
        let d = disk_of(cp);
        assert_eq!(
            decode_disk_unit(&d, true),
            DiskUnit::Char { cp, len: d.len() }
        );
        assert_eq!(view_of(cp), c.to_string().as_bytes());
    }
}

#[test]
fn samples_above_unicode_round_trip_through_extended_forms() {
    let mut cp = 0x11_0000u32;
    let mut n = 0;
    while cp <= MAX_CODE_POINT {
        let d = disk_of(cp);
        let v = view_of(cp);
        assert_eq!(decode_to_vec(&d, false).unwrap(), v, "V of U+{cp:X}");
        assert_eq!(encode_to_vec(&v, false).unwrap(), d, "W of U+{cp:X}");
        assert!(
            matches!(decode_to_vec(&d, true), Err(e) if e.malformed.problem == Problem::BeyondUnicode(cp))
        );
        assert!(encode_to_vec(&v, true).is_err());
        n += 1;
        cp = cp.saturating_add(0x1_2345 + n * 7919);
        if cp == u32::MAX {
            break;
        }
    }
    for cp in [
        0x11_0000,
        0x1F_FFFF,
        0x20_0000,
        0x21_109F,
        0x21_10A0,
        0x3FF_FFFF,
        0x400_0000,
        0x421_109F,
        0x421_10A0,
        0x7FFF_FFFF,
        0x8000_0000,
        MAX_CODE_POINT,
    ] {
        let d = disk_of(cp);
        let v = view_of(cp);
        assert_eq!(decode_to_vec(&d, false).unwrap(), v);
        assert_eq!(encode_to_vec(&v, false).unwrap(), d);
        assert_eq!(length::view_len(&d), v.len() as u64);
        assert_eq!(length::disk_len(&v), d.len() as u64);
    }
    // the view forms are the shortest extended forms
    assert_eq!(view_of(0x7FFF_FFFF), [0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF]);
    assert_eq!(
        view_of(0x8000_0000),
        [0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80]
    );
    assert_eq!(view_of(0x20_0000), [0xF8, 0x88, 0x80, 0x80, 0x80]);
}

/// W's refusals, each in lossless and strict mode.
#[test]
fn w_never_stores_c1_overlong_or_surrogates() {
    let cases: &[(&[u8], Problem)] = &[
        (&[0xC2, 0x80], Problem::C1Control(0x80)),
        (&[0xC2, 0x9F], Problem::C1Control(0x9F)),
        (&[0xC0, 0xAF], Problem::Overlong(0x2F)),
        (&[0xC1, 0xBF], Problem::Overlong(0x7F)),
        (&[0xE0, 0x80, 0xAF], Problem::Overlong(0x2F)),
        (&[0xE0, 0x9F, 0xBF], Problem::Overlong(0x7FF)),
        (&[0xF0, 0x8F, 0xBF, 0xBF], Problem::Overlong(0xFFFF)),
        (
            &[0xF8, 0x87, 0xBF, 0xBF, 0xBF],
            Problem::Overlong(0x1F_FFFF),
        ),
        (
            &[0xFC, 0x83, 0xBF, 0xBF, 0xBF, 0xBF],
            Problem::Overlong(0x3FF_FFFF),
        ),
        (&[0xED, 0xA0, 0x80], Problem::Surrogate(0xD800)),
        (&[0xED, 0xBF, 0xBF], Problem::Surrogate(0xDFFF)),
    ];
    for &(bytes, problem) in cases {
        for strict in [false, true] {
            for pad in [0, 1, 40] {
                let mut input = vec![b'x'; pad];
                input.extend_from_slice(bytes);
                input.extend_from_slice(b"tail");
                let e = encode_to_vec(&input, strict).unwrap_err();
                assert_eq!(
                    e.malformed,
                    Malformed {
                        problem,
                        len: bytes.len()
                    },
                    "{bytes:02X?}"
                );
                assert_eq!(e.offset, pad as u64);
            }
        }
    }
}

/// The problems each strict direction reports, with exact offsets, at the
/// start, middle and end of the input.
#[test]
fn strict_errors_have_exact_positions() {
    let decode_cases: &[(&[u8], Problem, usize)] = &[
        (&[0x80], Problem::StrayContinuation(0x80), 1),
        (&[0xBF], Problem::StrayContinuation(0xBF), 1),
        (&[0xC3], Problem::Truncated { expected: 2 }, 1),
        (&[0xE4, 0x80], Problem::Truncated { expected: 3 }, 2),
        (
            &[0xFC, 0x80, 0x80, 0x80, 0x80],
            Problem::Truncated { expected: 6 },
            5,
        ),
        (&[0xFE], Problem::Reserved(0xFE), 1),
        (&[0xFF, 0x80, 0x80], Problem::Reserved(0xFF), 3),
        (
            &[0xF3, 0xBE, 0xBD, 0xA0],
            Problem::BeyondUnicode(0x11_0000),
            4,
        ),
    ];
    for &(bytes, problem, len) in decode_cases {
        for (pre, post) in [
            (&b""[..], &b""[..]),
            (b"ab\n", b"z"),
            (&[0xC0, 0xAF][..], &b"\n"[..]),
        ] {
            let mut input = pre.to_vec();
            input.extend_from_slice(bytes);
            input.extend_from_slice(post);
            let e = decode_to_vec(&input, true).unwrap_err();
            assert_eq!(
                (e.malformed, e.offset),
                (Malformed { problem, len }, pre.len() as u64),
                "{input:02X?}"
            );
            // the same through a streaming decoder cut at every position
            for cut in 0..=input.len() {
                let r = stream(&mut Decoder::strict(), &input, &[cut]);
                assert_eq!(
                    r.unwrap_err(),
                    (Malformed { problem, len }, pre.len()),
                    "cut {cut} {input:02X?}"
                );
            }
        }
    }
    let encode_cases: &[(&[u8], Problem, usize)] = &[
        (&[0x80], Problem::StrayContinuation(0x80), 1),
        (&[0xC3], Problem::Truncated { expected: 2 }, 1),
        (&[0xE4, 0xB8], Problem::Truncated { expected: 3 }, 2),
        (&[0xFE], Problem::Reserved(0xFE), 1),
        (&[0xFF], Problem::Reserved(0xFF), 1),
        (
            &[0xF4, 0x90, 0x80, 0x80],
            Problem::BeyondUnicode(0x11_0000),
            4,
        ),
        (&[0xC2, 0x85], Problem::C1Control(0x85), 2),
    ];
    for &(bytes, problem, len) in encode_cases {
        for pre in [
            &b""[..],
            "é\n".as_bytes(),
            b"0123456789abcdef0123456789abcdef0123",
        ] {
            let mut input = pre.to_vec();
            input.extend_from_slice(bytes);
            input.extend_from_slice(b"\n");
            let e = encode_to_vec(&input, true).unwrap_err();
            assert_eq!(
                (e.malformed, e.offset),
                (Malformed { problem, len }, pre.len() as u64),
                "{input:02X?}"
            );
            for cut in 0..=input.len() {
                let r = stream(&mut Encoder::strict(), &input, &[cut]);
                assert_eq!(
                    r.unwrap_err(),
                    (Malformed { problem, len }, pre.len()),
                    "cut {cut} {input:02X?}"
                );
            }
        }
    }
}

trait Convert {
    fn step(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize);
}
impl Convert for Decoder {
    fn step(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        self.convert(src, dst, last)
    }
}
impl Convert for Encoder {
    fn step(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        self.convert(src, dst, last)
    }
}

/// Feed `input` cut at the given positions (sorted or not), through an
/// output buffer of `MIN_DST` bytes; the first error with its absolute offset.
fn stream(
    c: &mut impl Convert,
    input: &[u8],
    cuts: &[usize],
) -> Result<Vec<u8>, (Malformed, usize)> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.push(input.len());
    cuts.sort();
    let mut out = Vec::new();
    let mut buf = [0u8; MIN_DST];
    let mut start = 0;
    for (k, &end) in cuts.iter().enumerate() {
        let last = k == cuts.len() - 1;
        let mut src = &input[start..end];
        let mut consumed_before = start;
        loop {
            let (status, r, w) = c.step(src, &mut buf, last);
            out.extend_from_slice(&buf[..w]);
            consumed_before += r;
            src = &src[r..];
            match status {
                Status::InputEmpty => break,
                Status::OutputFull => continue,
                Status::Malformed(m) => return Err((m, consumed_before - m.len)),
            }
        }
        start = end;
    }
    Ok(out)
}

/// Lossless V then W of random bytes, with the exempt class filtered out.
fn has_exempt(disk: &[u8]) -> bool {
    let mut d = Decoder::lossless();
    let mut out = vec![0u8; max_view_len(disk.len())];
    let _ = d.convert(disk, &mut out, true);
    d.exempt_units() > 0
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Bias towards the interesting bytes: leads, continuations, FE/FF.
    let byte = prop_oneof![
        3 => any::<u8>(),
        2 => 0x80u8..=0xBF,
        1 => 0xC0u8..=0xFF,
        1 => 0x20u8..0x7F,
    ];
    proptest::collection::vec(byte, 0..300)
}

fn arb_text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => proptest::char::range('\u{0}', '\u{7F}'),
        2 => proptest::char::range('\u{A0}', '\u{7FF}'),
        2 => proptest::char::range('\u{800}', '\u{8FF}'),
        2 => proptest::char::range('\u{900}', '\u{FFFF}'),
        2 => proptest::char::range('\u{10000}', '\u{110FF}'),
        1 => proptest::char::range('\u{11100}', '\u{10FFFF}'),
    ];
    proptest::collection::vec(ch, 0..200).prop_map(|v| {
        v.into_iter()
            .filter(|c| !('\u{80}'..='\u{9F}').contains(c))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Lossless reading: W(V(b)) = b, except the exempt class.
    #[test]
    fn lossless_reading(b in arb_bytes()) {
        let view = decode_to_vec(&b, false).unwrap();
        prop_assert_eq!(length::view_len(&b), view.len() as u64);
        if !has_exempt(&b) {
            let back = encode_to_vec(&view, false).unwrap();
            prop_assert_eq!(back, b);
        }
    }

    /// Invariant 1 on bytes built from exempt-free pieces that stress FE.
    #[test]
    fn lossless_reading_fe_units(parts in proptest::collection::vec((0u8..=8, any::<u64>()), 0..20)) {
        let mut b = Vec::new();
        for (n, v) in parts {
            b.push(0xFE);
            for k in 0..n { b.push(0x80 | ((v >> (6 * k as u64)) & 0x3F) as u8); }
            b.push(b'.');
        }
        let view = decode_to_vec(&b, false).unwrap();
        if has_exempt(&b) {
            prop_assert_ne!(encode_to_vec(&view, false).unwrap(), b);
        } else {
            prop_assert_eq!(encode_to_vec(&view, false).unwrap(), b);
        }
    }

    /// Lossless writing: V(W(t)) = t for text W can store.
    #[test]
    fn lossless_writing(t in arb_text()) {
        let disk = encode_to_vec(t.as_bytes(), false).unwrap();
        prop_assert_eq!(&encode_to_vec(t.as_bytes(), true).unwrap(), &disk);
        prop_assert_eq!(length::disk_len(t.as_bytes()), disk.len() as u64);
        prop_assert_eq!(decode_to_vec(&disk, false).unwrap(), t.as_bytes());
        prop_assert_eq!(decode_to_vec(&disk, true).unwrap(), t.as_bytes());
    }

    /// Invariant 2 through random view bytes: whatever W accepts, V gives back.
    #[test]
    fn lossless_writing_any_bytes(b in arb_bytes()) {
        if let Ok(disk) = encode_to_vec(&b, false) {
            prop_assert_eq!(decode_to_vec(&disk, false).unwrap(), b);
        }
    }

    /// Streaming at random cuts equals one-shot, both directions, both modes.
    #[test]
    fn streaming_equals_one_shot(b in arb_bytes(), cuts in proptest::collection::vec(0usize..300, 0..8)) {
        prop_assert_eq!(stream(&mut Decoder::lossless(), &b, &cuts).map_err(|e| e.1), decode_to_vec(&b, false).map_err(|e| e.offset as usize));
        prop_assert_eq!(stream(&mut Decoder::strict(), &b, &cuts), decode_to_vec(&b, true).map_err(|e| (e.malformed, e.offset as usize)));
        prop_assert_eq!(stream(&mut Encoder::lossless(), &b, &cuts), encode_to_vec(&b, false).map_err(|e| (e.malformed, e.offset as usize)));
        prop_assert_eq!(stream(&mut Encoder::strict(), &b, &cuts), encode_to_vec(&b, true).map_err(|e| (e.malformed, e.offset as usize)));
        let mut c = length::LengthCounter::disk_to_view();
        let mut start = 0;
        let mut cs = cuts.clone();
        cs.sort();
        for cut in cs { let cut = cut.min(b.len()).max(start); c.push(&b[start..cut]); start = cut; }
        c.push(&b[start..]);
        prop_assert_eq!(c.finish(), length::view_len(&b));
    }

    /// Strict decode accepts exactly what lossless V maps without
    /// pass-through: its output is then valid UTF-8 equal to V's.
    #[test]
    fn strict_decode_accepts_exactly_faithful_input(b in arb_bytes()) {
        let lossless = decode_to_vec(&b, false).unwrap();
        let faithful = reference_faithful(&b);
        match decode_to_vec(&b, true) {
            Ok(v) => { prop_assert!(faithful); prop_assert_eq!(&v, &lossless); prop_assert!(std::str::from_utf8(&v).is_ok()); }
            Err(_) => prop_assert!(!faithful),
        }
    }

    /// Strict encode accepts exactly std's idea of UTF-8 minus C1 controls.
    #[test]
    fn strict_encode_accepts_exactly_utf8_without_c1(b in arb_bytes()) {
        let ok = std::str::from_utf8(&b).map(|s| !s.chars().any(|c| ('\u{80}'..='\u{9F}').contains(&c)) && !s.contains("\u{10E7D}\u{ED4E}\0\n")).unwrap_or(false);
        prop_assert_eq!(encode_to_vec(&b, true).is_ok(), ok);
    }
}

/// The scalar reference's answer to "does every unit decode to a code point
/// ≤ U+10FFFF, and is no unit the start of a magic number".
fn reference_faithful(b: &[u8]) -> bool {
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(&MAGIC) {
            return false;
        }
        match decode_disk_unit(&b[i..], true) {
            DiskUnit::Char { cp, len } if cp <= 0x10FFFF => i += len,
            _ => return false,
        }
    }
    true
}

/// Each example and boundary of the table at offsets 0..64, split at every cut,
/// through both directions.
#[test]
fn table_at_every_offset_and_cut() {
    for &(lo, _, hi, _) in RANGES.iter() {
        for bytes in [lo, hi] {
            for pad in 0..64 {
                let mut disk = vec![b'a'; pad];
                disk.extend_from_slice(bytes);
                disk.extend_from_slice(b"z");
                let view = decode_to_vec(&disk, false).unwrap();
                for cut in 0..=disk.len() {
                    assert_eq!(
                        stream(&mut Decoder::lossless(), &disk, &[cut]).unwrap(),
                        view
                    );
                }
                for cut in 0..=view.len() {
                    assert_eq!(
                        stream(&mut Encoder::lossless(), &view, &[cut]).unwrap(),
                        disk
                    );
                }
            }
        }
    }
}
