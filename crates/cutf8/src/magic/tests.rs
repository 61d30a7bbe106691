//! The magic number inside the converters, against a whole-buffer model of
//! its rules: every mode, at every offset (across the vector blocks of
//! every level), with the input cut at every position and in one-byte
//! chunks, through output buffers of every small size; the state carried
//! to a new converter at every cut; and `OutputFull` exact to the unit.

use super::*;
use crate::simd::{Level, Path};
use crate::unit::ViewUnit;
use crate::unit::{decode_disk_unit, decode_view_unit, encode_disk, encode_view, DiskUnit};
use crate::{Decoder, Encoder, Malformed, Problem, Status};

/// A strict or lossless converter of either direction, for the drivers.
#[derive(Clone)]
enum Conv {
    D(Decoder),
    E(Encoder),
}

impl Conv {
    fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        match self {
            Conv::D(d) => d.convert(src, dst, last),
            Conv::E(e) => e.convert(src, dst, last),
        }
    }

    fn state(&self) -> MagicState {
        match self {
            Conv::D(d) => d.magic_state(),
            Conv::E(e) => e.magic_state(),
        }
    }
}

/// What a conversion gives: the output, and the first error as (problem
/// when the model knows it, offset of its first byte).
type Outcome = (Vec<u8>, Option<(Option<Problem>, usize)>);

/// The model of strict or lossless V with a magic mode: the whole input at
/// once, unit by unit.
fn model_decode(input: &[u8], strict: bool, magic: DecodeMagic) -> Outcome {
    let mut out = Vec::new();
    let mut i = match magic {
        DecodeMagic::Expect if !input.is_empty() && !has_magic(input) => {
            return (out, Some((Some(Problem::MissingMagic), 0)));
        }
        DecodeMagic::Expect | DecodeMagic::Strip if has_magic(input) => MAGIC.len(),
        _ => 0,
    };
    while i < input.len() {
        if strict && input[i..].starts_with(&MAGIC) {
            return (out, Some((Some(Problem::MagicNumber), i)));
        }
        match decode_disk_unit(&input[i..], true) {
            DiskUnit::Char { cp, len } if !strict || cp <= 0x10_FFFF => {
                let mut t = [0u8; 8];
                let n = encode_view(cp, &mut t);
                out.extend_from_slice(&t[..n]);
                i += len;
            }
            _ if strict => return (out, Some((None, i))),
            DiskUnit::Truncated { len, .. } => {
                out.extend_from_slice(&input[i..i + len]);
                i += len;
            }
            _ => {
                // Stray bytes and reserved units: the inputs here have
                // none.
                unreachable!("{input:02X?} at {i}")
            }
        }
    }
    (out, None)
}

/// The model of W with a magic mode.
fn model_encode(input: &[u8], strict: bool, magic: EncodeMagic) -> Outcome {
    let mut out = Vec::new();
    if magic == EncodeMagic::Write && !input.is_empty() {
        out.extend_from_slice(&MAGIC);
    }
    if strict && input.starts_with(&MAGIC[..6]) {
        return (out, Some((Some(Problem::MagicNumber), 0)));
    }
    let mut i = 0;
    while i < input.len() {
        if strict && input[i..].starts_with(&MAGIC_TEXT) {
            return (out, Some((Some(Problem::MagicText), i)));
        }
        match decode_view_unit(&input[i..], true) {
            ViewUnit::Char { cp, len } if !strict || cp <= 0x10_FFFF => {
                let mut t = [0u8; 8];
                let n = encode_disk(cp, &mut t).expect("storable");
                out.extend_from_slice(&t[..n]);
                i += len;
            }
            ViewUnit::Passthrough { len, .. } if !strict => {
                out.extend_from_slice(&input[i..i + len]);
                i += len;
            }
            _ => return (out, Some((None, i))),
        }
    }
    (out, None)
}

/// Feed `input` in the chunks that `cuts` (sorted) make, through an output
/// buffer of `room` bytes; when a call makes no progress, the next unit
/// must not fit (checked by the caller's model through the output) and
/// the buffer grows by one byte for that call only.
fn drive(mut c: Conv, input: &[u8], cuts: &[usize], room: usize) -> Outcome {
    let mut out = Vec::new();
    let mut consumed = 0;
    let mut start = 0;
    let ends = cuts.iter().copied().chain([input.len()]);
    let n = cuts.len() + 1;
    for (k, end) in ends.enumerate() {
        let last = k + 1 == n;
        let mut src = &input[start..end];
        let mut r = room;
        loop {
            let mut buf = vec![0xAAu8; r];
            let (status, read, written) = c.convert(src, &mut buf, last);
            out.extend_from_slice(&buf[..written]);
            consumed += read;
            src = &src[read..];
            match status {
                Status::InputEmpty => {
                    assert!(src.is_empty(), "InputEmpty with {} bytes left", src.len());
                    break;
                }
                Status::OutputFull if read == 0 && written == 0 => {
                    assert!(
                        r < crate::MAX_UNIT_LEN,
                        "no progress with {r} bytes of room"
                    );
                    r += 1;
                }
                Status::OutputFull => r = room,
                Status::Malformed(m) => {
                    let at = consumed.checked_sub(m.len).expect("unit within the input");
                    return (out, Some((Some(m.problem), at)));
                }
            }
        }
        start = end;
    }
    (out, None)
}

/// Whether the outcomes agree (a problem the model leaves open matches any).
fn same(got: &Outcome, want: &Outcome) -> bool {
    got.0 == want.0
        && match (got.1, want.1) {
            (None, None) => true,
            (Some((g, at)), Some((w, wat))) => at == wat && (w.is_none() || g == w),
            _ => false,
        }
}

const DECODE_MODES: [DecodeMagic; 3] = [DecodeMagic::Expect, DecodeMagic::Strip, DecodeMagic::Off];
const ENCODE_MODES: [EncodeMagic; 2] = [EncodeMagic::Write, EncodeMagic::Off];

fn decoder(strict: bool, magic: DecodeMagic, level: Level) -> Conv {
    let d = if strict {
        Decoder::strict()
    } else {
        Decoder::lossless()
    };
    Conv::D(d.with_magic(magic).with_simd_level(level))
}

fn encoder(strict: bool, magic: EncodeMagic, level: Level) -> Conv {
    let e = if strict {
        Encoder::strict()
    } else {
        Encoder::lossless()
    };
    Conv::E(e.with_magic(magic).with_simd_level(level))
}

/// Every way to cut `input` once, and one-byte chunks; each through
/// output buffers of 1 to 9 bytes and a large one.
fn check_all_cuts(make: &dyn Fn() -> Conv, input: &[u8], want: &Outcome, what: &str) {
    let ones: Vec<usize> = (1..input.len()).collect();
    for room in (1..=9).chain([4096]) {
        let got = drive(make(), input, &ones, room);
        assert!(
            same(&got, want),
            "{what} 1-byte chunks, room {room}: {got:02X?} want {want:02X?}"
        );
        for cut in 0..=input.len() {
            if room != 4096 && room != 3 && cut % 3 != 0 {
                continue;
            }
            let got = drive(make(), input, &[cut], room);
            assert!(
                same(&got, want),
                "{what} cut {cut} room {room}: {got:02X?} want {want:02X?}"
            );
        }
    }
}

/// Inputs of the decoder: magic numbers whole and cut, at the start and
/// after it, alone and among other text.
fn disk_inputs() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![
        vec![],
        MAGIC.to_vec(),
        [&MAGIC[..], b"abc\n"].concat(),
        [&MAGIC[..], &MAGIC[..]].concat(),
        [&MAGIC[..], b"x", &MAGIC[..], b"y"].concat(),
        b"plain\n".to_vec(),
        [b"a", &MAGIC[..]].concat(),
        [&MAGIC[..], b"\xC0\xAF", &MAGIC[..], &MAGIC[..3]].concat(),
    ];
    for k in 1..MAGIC.len() {
        // A cut magic number: alone, at the end, then something else
        // (a byte that differs, a lead byte, the magic number again).
        v.push(MAGIC[..k].to_vec());
        v.push([&MAGIC[..], b"t", &MAGIC[..k]].concat());
        v.push([&MAGIC[..k], b"z"].concat());
        v.push([&MAGIC[..k], &[0xC0, 0xAF][..]].concat());
        v.push([&MAGIC[..k], &MAGIC[..]].concat());
        v.push([&MAGIC[..], &MAGIC[..k], b"q\n"].concat());
    }
    v
}

#[test]
fn decoder_magic_modes_at_every_cut() {
    for input in disk_inputs() {
        for strict in [true, false] {
            for magic in DECODE_MODES {
                let want = model_decode(&input, strict, magic);
                let make = || decoder(strict, magic, Level::best());
                let what = format!("{input:02X?} strict {strict} {magic:?}");
                check_all_cuts(&make, &input, &want, &what);
            }
        }
    }
}

/// Inputs of the encoder: the magic number's characters whole and cut,
/// at the start and after it, and the magic number's own bytes at the
/// start.
fn view_inputs() -> Vec<Vec<u8>> {
    let t = &MAGIC_TEXT[..];
    let mut v: Vec<Vec<u8>> = vec![
        vec![],
        t.to_vec(),
        [b"ab", t, b"cd"].concat(),
        [t, t].concat(),
        MAGIC.to_vec(),
        [&MAGIC[..], b"rest"].concat(),
        b"plain\n".to_vec(),
        "\u{10E7D}\u{ED4E}\n".as_bytes().to_vec(),
        "\u{FDDD}x".as_bytes().to_vec(),
    ];
    for k in 1..MAGIC_TEXT.len() {
        v.push(t[..k].to_vec());
        v.push([b"e", &t[..k]].concat());
        v.push([&t[..k], b"z"].concat());
        v.push([&t[..k], t].concat());
        v.push([b"\xC3\xA9", &t[..k], "é".as_bytes()].concat());
    }
    for k in 1..MAGIC.len() {
        // The magic number's bytes, cut, at the start of UTF-8 input:
        // U+FDDD, then an encoded surrogate or a cut one.
        v.push(MAGIC[..k].to_vec());
        v.push([&MAGIC[..k], b"z"].concat());
        v.push([&MAGIC[..k], &[0x80, 0x80][..]].concat());
    }
    v
}

#[test]
fn encoder_magic_modes_at_every_cut() {
    for input in view_inputs() {
        for strict in [true, false] {
            for magic in ENCODE_MODES {
                let want = model_encode(&input, strict, magic);
                let make = || encoder(strict, magic, Level::best());
                let what = format!("{input:02X?} strict {strict} {magic:?}");
                check_all_cuts(&make, &input, &want, &what);
            }
        }
    }
}

/// A magic number (or its characters) at every offset 0..140 of text
/// that the vector code takes (ASCII, Latin, CJK), on every level, whole
/// and cut around it: strict conversion refuses it exactly there.
#[test]
fn inside_text_at_every_offset_on_every_level() {
    let fillers = ["a", "é", "中", "😀"];
    for path in Path::available() {
        let level = path.level();
        for filler in fillers {
            for pad in 0..140 {
                let mut text = filler.repeat(pad / filler.len() + 1).into_bytes();
                text.truncate(pad - pad % filler.len());
                let at = text.len();
                let tail = filler.repeat(40);
                let view = [&text[..], &MAGIC_TEXT[..], tail.as_bytes()].concat();
                let head = crate::encode_strict(&text).unwrap();
                let dat = head.len();
                let disk = [
                    &head[..],
                    &MAGIC[..],
                    &crate::encode_strict(tail.as_bytes()).unwrap()[..],
                ]
                .concat();
                let want_d = model_decode(&disk, true, DecodeMagic::Off);
                let want_e = model_encode(&view, true, EncodeMagic::Off);
                assert_eq!(want_e.1, Some((Some(Problem::MagicText), at)));
                assert_eq!(want_d.1, Some((Some(Problem::MagicNumber), dat)));
                for cut in [0, at, at + 1, at + 4, at + 7, at + 8, view.len()] {
                    let cut = cut.min(view.len());
                    let got = drive(encoder(true, EncodeMagic::Off, level), &view, &[cut], 4096);
                    assert!(same(&got, &want_e), "{level} {filler} pad {pad} cut {cut}");
                }
                for cut in [0, dat, dat + 1, dat + 3, dat + 6, dat + 7, disk.len()] {
                    let cut = cut.min(disk.len());
                    let got = drive(decoder(true, DecodeMagic::Off, level), &disk, &[cut], 4096);
                    assert!(same(&got, &want_d), "{level} {filler} pad {pad} cut {cut}");
                }
                // Lossless conversion carries them through as text.
                let got = drive(decoder(false, DecodeMagic::Off, level), &disk, &[], 4096);
                assert_eq!(got, (view.clone(), None), "{level} {filler} pad {pad}");
            }
        }
    }
}

/// Cut at any unit boundary, a strict converter's state goes on in a new
/// converter as if it had never stopped, whatever the room in the output.
#[test]
fn state_carries_over_at_every_cut() {
    let disk: Vec<Vec<u8>> = disk_inputs()
        .into_iter()
        .filter(|b| !b.windows(2).any(|w| w == [0xC0, 0xAF]))
        .collect();
    for input in &disk {
        for magic in DECODE_MODES {
            let want = model_decode(input, true, magic);
            for cut in boundaries(input) {
                let got = resumed(decoder(true, magic, Level::best()), input, cut, |s| {
                    Conv::D(Decoder::strict().with_magic(magic).resume(s))
                });
                assert!(
                    same(&got, &want),
                    "{input:02X?} {magic:?} cut {cut}: {got:02X?} want {want:02X?}"
                );
            }
        }
    }
    let view: Vec<Vec<u8>> = view_inputs()
        .into_iter()
        .filter(|b| !String::from_utf8_lossy(b).contains('é'))
        .collect();
    for input in &view {
        for magic in ENCODE_MODES {
            let want = model_encode(input, true, magic);
            for cut in boundaries(input) {
                for room in [1, 2, 4, 4096] {
                    let got =
                        resumed_room(encoder(true, magic, Level::best()), input, cut, room, |s| {
                            Conv::E(Encoder::strict().with_magic(magic).resume(s))
                        });
                    assert!(
                        same(&got, &want),
                        "{input:02X?} {magic:?} cut {cut} room {room}"
                    );
                }
            }
        }
    }
}

/// The offsets of `b` where no unit is cut.
fn boundaries(b: &[u8]) -> Vec<usize> {
    (0..=b.len())
        .filter(|&p| p == b.len() || !crate::unit::is_cont(b[p]))
        .collect()
}

fn resumed(first: Conv, input: &[u8], cut: usize, next: impl Fn(MagicState) -> Conv) -> Outcome {
    resumed_room(first, input, cut, 4096, next)
}

/// Convert `input[..cut]`, then go on with `input[cut..]` in the
/// converter `next` makes from the first one's state (through its bits);
/// every call through `room` bytes of output, and a new converter after
/// each call, so that a magic number written or held text cut by a full
/// buffer carries over too.
fn resumed_room(
    first: Conv,
    input: &[u8],
    cut: usize,
    room: usize,
    next: impl Fn(MagicState) -> Conv,
) -> Outcome {
    let mut c = first;
    let mut out = Vec::new();
    let mut consumed = 0;
    for (src, last) in [(&input[..cut], false), (&input[cut..], true)] {
        let mut src = src;
        loop {
            let mut buf = vec![0u8; room];
            let (status, read, written) = c.convert(src, &mut buf, last);
            out.extend_from_slice(&buf[..written]);
            consumed += read;
            src = &src[read..];
            let bits = c.state().to_bits();
            c = next(MagicState::from_bits(bits).expect("its own bits"));
            match status {
                Status::InputEmpty => break,
                Status::OutputFull if read + written == 0 => {
                    // The next unit is longer than `room`: take it whole.
                    let mut big = vec![0u8; 64];
                    let (status, read, written) = c.convert(src, &mut big, last);
                    out.extend_from_slice(&big[..written]);
                    consumed += read;
                    src = &src[read..];
                    if let Status::Malformed(m) = status {
                        return (out, Some((Some(m.problem), consumed - m.len)));
                    }
                    if status == Status::InputEmpty {
                        break;
                    }
                }
                Status::OutputFull => {}
                Status::Malformed(m) => return (out, Some((Some(m.problem), consumed - m.len))),
            }
        }
    }
    (out, None)
}

/// `OutputFull` is exact: given exactly the first `p` bytes of what it
/// writes with room to spare, `p` at a unit boundary, a converter writes
/// those `p` bytes and stops there (glibc's iconv re-runs a conversion so,
/// to stop it where the next step stopped).
#[test]
fn output_full_stops_at_the_unit_that_does_not_fit() {
    let text = "aé\u{800}中\u{10000}😀\u{10E7D}\u{ED4E}x\u{FDDD}\u{89F}\u{10FFFF}\n".repeat(3);
    let view = [&MAGIC_TEXT[..4], text.as_bytes(), b"tail"].concat();
    let disk = [&MAGIC[..], &crate::encode_strict(&view).unwrap()[..]].concat();
    for path in Path::available() {
        let level = path.level();
        let cases = [
            (decoder(true, DecodeMagic::Expect, level), &disk),
            (decoder(false, DecodeMagic::Strip, level), &disk),
            (encoder(true, EncodeMagic::Write, level), &view),
            (encoder(false, EncodeMagic::Off, level), &view),
        ];
        for (conv, input) in cases {
            let (full, err) = drive(conv.clone(), input, &[], 4096);
            assert_eq!(err, None);
            for p in 0..=full.len() {
                if p < full.len() && crate::unit::is_cont(full[p]) {
                    continue;
                }
                let mut c = conv.clone();
                let mut buf = vec![0u8; p];
                let (status, read, written) = c.convert(input, &mut buf, true);
                assert_eq!(written, p, "{level} stopped early at {written} of {p}");
                assert_eq!(buf, full[..p], "{level} {p}");
                let want = if p == full.len() {
                    Status::InputEmpty
                } else {
                    Status::OutputFull
                };
                assert_eq!(status, want, "{level} {p} read {read}");
            }
        }
    }
}

#[test]
fn state_bits_round_trip_and_reject_nonsense() {
    let mut d = Decoder::strict().with_magic(DecodeMagic::Expect);
    let mut out = [0u8; 16];
    let _ = d.convert(&MAGIC[..5], &mut out, false);
    let s = d.magic_state();
    assert_eq!(MagicState::from_bits(s.to_bits()), Some(s));
    assert_eq!(MagicState::from_bits(u32::MAX), None);
    assert_eq!(MagicState::from_bits(1 << 20), None);
    // Held text longer than what is held.
    assert_eq!(MagicState::from_bits(1 | 1 << 5 | 3 << 6), None);
    assert_eq!(MagicState::from_bits(0), Some(MagicState::default()));
}

#[test]
fn one_shot_helpers_apply_the_rules() {
    let file = Encoder::strict()
        .with_magic(EncodeMagic::Write)
        .encode_to_vec(b"")
        .unwrap();
    assert!(file.is_empty(), "an empty text is an empty file");
    assert_eq!(
        crate::decode_strict_to_string(b"", DecodeMagic::Expect).unwrap(),
        ""
    );
    let e = crate::decode_strict_to_string(
        &[&MAGIC[..], b"a", &MAGIC[..]].concat(),
        DecodeMagic::Expect,
    )
    .unwrap_err();
    assert_eq!((e.problem(), e.offset()), (Problem::MagicNumber, 9));
    assert_eq!(
        e.malformed,
        Malformed {
            problem: Problem::MagicNumber,
            len: 8
        }
    );
}

/// Long texts, where the search for U+0000 runs ahead of the vector code
/// a window at a time: U+0000 bytes that begin nothing, and one magic
/// number (or its characters) placed around each window edge, on every
/// level, whole and in chunks that cut near it.
#[test]
fn long_texts_with_nul_bytes_and_one_magic_number_near_every_window_edge() {
    let line = "Grüße, 中文 text\0 more ࠀ\n";
    let body = line.repeat(3000);
    let window = 4096;
    for path in Path::available() {
        let level = path.level();
        for edge in (1..8).map(|k| k * window) {
            for delta in [-9isize, -7, -6, -1, 0, 1, 5] {
                let at = (edge as isize + delta) as usize;
                // A character boundary at or before `at`.
                let at = (0..=at).rev().find(|&k| body.is_char_boundary(k)).unwrap();
                let view = [
                    &body.as_bytes()[..at],
                    &MAGIC_TEXT[..],
                    &body.as_bytes()[at..],
                ]
                .concat();
                let want_e = model_encode(&view, true, EncodeMagic::Off);
                assert_eq!(want_e.1, Some((Some(Problem::MagicText), at)));
                let head = crate::encode_strict(&body.as_bytes()[..at]).unwrap();
                let tail = crate::encode_strict(&body.as_bytes()[at..]).unwrap();
                let disk = [&head[..], &MAGIC[..], &tail[..]].concat();
                let want_d = model_decode(&disk, true, DecodeMagic::Off);
                assert_eq!(want_d.1, Some((Some(Problem::MagicNumber), head.len())));
                for cuts in [
                    vec![],
                    vec![at - 3],
                    vec![at + 4],
                    vec![edge - 100, edge + 100],
                ] {
                    let got = drive(encoder(true, EncodeMagic::Off, level), &view, &cuts, 4096);
                    assert!(
                        same(&got, &want_e),
                        "{level} W edge {edge}{delta:+} cuts {cuts:?}"
                    );
                    let cuts: Vec<usize> = cuts.iter().map(|&c| c.min(disk.len())).collect();
                    let got = drive(decoder(true, DecodeMagic::Off, level), &disk, &cuts, 4096);
                    assert!(
                        same(&got, &want_d),
                        "{level} V edge {edge}{delta:+} cuts {cuts:?}"
                    );
                }
            }
        }
        // No magic number at all: the U+0000 bytes are text.
        let got = drive(
            encoder(true, EncodeMagic::Off, level),
            body.as_bytes(),
            &[5000, 9001],
            777,
        );
        assert_eq!(
            got,
            (crate::encode_lossless(body.as_bytes()).unwrap(), None),
            "{level}"
        );
    }
}
