//! The reference: one unit at a time, straight from the format's table
//! (the crate documentation).
//!
//! Everything faster in this crate is tested against these functions. They
//! take a slice that starts at a unit and say what that unit is; the
//! streaming converters call them at buffer edges and in their slow paths.
//! Public as [`crate::unit`].

use super::{Problem, MAX_CODE_POINT};

/// Offsets added to the payload of 2-, 3-(low), 3-(high), 4-, 5- and 6-byte
/// sequences (the format's table).
const OFF2: u32 = 160;
const OFF3_LO: u32 = 2_208;
const OFF3_HI: u32 = 4_256;
const OFF4: u32 = 69_792;
const OFF5: u32 = 2_166_944;
const OFF6: u32 = 69_275_808;
/// A 3-byte payload above this takes [`OFF3_HI`].
const P3_SPLIT: u32 = 0xCF5F;

/// The length a lead byte announces: 1 for ASCII, 2–6 for Corrected/UTF-8
/// leads, 7 for FE (the view's extended form), 0 for continuation bytes and
/// 0xFF.
#[inline(always)]
pub(crate) const fn lead_len(b: u8) -> usize {
    match b {
        0x00..=0x7F => 1,
        0x80..=0xBF => 0,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        0xF8..=0xFB => 5,
        0xFC..=0xFD => 6,
        0xFE => 7,
        0xFF => 0,
    }
}

/// Whether `b` is a continuation byte (10xxxxxx), in either encoding: a
/// unit never starts with one, so a reader that lands on one steps back.
#[inline(always)]
pub const fn is_cont(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Payload bits of a complete sequence of `len` bytes (lead bits then six
/// bits per continuation byte), as in UTF-8. `s.len() >= len`, `len >= 2`.
#[inline(always)]
pub(crate) fn payload(s: &[u8], len: usize) -> u64 {
    let lead_bits: u32 = if len >= 7 { 0 } else { 7 - len as u32 };
    let mut v = (s[0] as u64) & ((1u64 << lead_bits) - 1);
    for &c in &s[1..len] {
        v = (v << 6) | (c & 0x3F) as u64;
    }
    v
}

/// Code point of a complete Corrected UTF-8 sequence of `len` (2..=6) bytes
/// whose payload is `p`.
#[inline(always)]
pub(crate) fn disk_cp(p: u32, len: usize) -> u32 {
    match len {
        2 => p + OFF2,
        3 if p <= P3_SPLIT => p + OFF3_LO,
        3 => p + OFF3_HI,
        4 => p + OFF4,
        5 => p + OFF5,
        _ => p + OFF6,
    }
}

/// One unit at the start of Corrected UTF-8 (disk) bytes. A closed set
/// (the format's kinds of unit): callers match it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskUnit {
    /// A complete sequence: the code point and its length on disk.
    Char {
        /// The code point (at most [`MAX_CODE_POINT`]).
        cp: u32,
        /// Its length on disk, 1 to 6.
        len: usize,
    },
    /// A continuation byte where no sequence is open (length 1).
    Stray,
    /// A lead byte followed by `len - 1` continuation bytes and then a
    /// non-continuation byte (or the end, when `at_end`).
    Truncated {
        /// How many bytes the truncated sequence has.
        len: usize,
        /// The full length its lead byte announced.
        expected: u8,
    },
    /// FE or FF: a reserved unit that extends over every continuation byte
    /// that follows.
    ReservedLead,
    /// The slice ends before the unit is decided and `at_end` is false.
    Incomplete,
}

/// Classify the unit at the start of `s`. `at_end` says that no bytes follow
/// `s`; otherwise a sequence that `s` cuts is [`DiskUnit::Incomplete`].
///
/// # Panics
///
/// When `s` is empty.
pub fn decode_disk_unit(s: &[u8], at_end: bool) -> DiskUnit {
    let b = s[0];
    let len = lead_len(b);
    match (b, len) {
        (0xFE | 0xFF, _) => DiskUnit::ReservedLead,
        (_, 0) => DiskUnit::Stray,
        (_, 1) => DiskUnit::Char {
            cp: b as u32,
            len: 1,
        },
        _ => match complete_len(s, len, at_end) {
            Ok(()) => DiskUnit::Char {
                cp: disk_cp(payload(s, len) as u32, len),
                len,
            },
            Err(Some(have)) => DiskUnit::Truncated {
                len: have,
                expected: len as u8,
            },
            Err(None) => DiskUnit::Incomplete,
        },
    }
}

/// `Ok` when `s` holds all `len` bytes of the sequence; `Err(Some(n))` when it
/// is truncated after `n` bytes; `Err(None)` when more input could complete it.
#[inline(always)]
fn complete_len(s: &[u8], len: usize, at_end: bool) -> Result<(), Option<usize>> {
    let have = s.len().min(len);
    for (k, &c) in s[1..have].iter().enumerate() {
        if !is_cont(c) {
            return Err(Some(k + 1));
        }
    }
    if have == len {
        Ok(())
    } else if at_end {
        Err(Some(have))
    } else {
        Err(None)
    }
}

/// One unit at the start of view (UTF-8 plus extended forms) bytes. A
/// closed set: callers match it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewUnit {
    /// A complete, shortest sequence of a code point W can store (extended
    /// forms above U+10FFFF included).
    Char {
        /// The code point (at most [`MAX_CODE_POINT`]).
        cp: u32,
        /// Its length in the view, 1 to 7.
        len: usize,
    },
    /// A complete sequence W cannot store: overlong, surrogate or C1.
    Unstorable {
        /// Which of the three it is.
        problem: Problem,
        /// Its length in bytes.
        len: usize,
    },
    /// Structurally ill-formed bytes W carries through unchanged: a stray
    /// continuation byte, a truncated sequence, FF, or an FE unit that is
    /// not an extended form.
    Passthrough {
        /// What strict W reports for it.
        problem: Problem,
        /// Its length in bytes.
        len: usize,
    },
    /// The slice ends before the unit is decided and `at_end` is false.
    Incomplete,
}

/// Classify the unit at the start of view bytes `s`; `at_end` as in
/// [`decode_disk_unit`].
///
/// # Panics
///
/// When `s` is empty.
pub fn decode_view_unit(s: &[u8], at_end: bool) -> ViewUnit {
    let b = s[0];
    let len = lead_len(b);
    if b == 0xFF {
        return ViewUnit::Passthrough {
            problem: Problem::Reserved(b),
            len: 1,
        };
    }
    if len == 0 {
        return ViewUnit::Passthrough {
            problem: Problem::StrayContinuation(b),
            len: 1,
        };
    }
    if len == 1 {
        return ViewUnit::Char {
            cp: b as u32,
            len: 1,
        };
    }
    match complete_len(s, len, at_end) {
        Err(None) => ViewUnit::Incomplete,
        Err(Some(have)) => ViewUnit::Passthrough {
            problem: if b == 0xFE {
                Problem::Reserved(b)
            } else {
                Problem::Truncated {
                    expected: len as u8,
                }
            },
            len: have,
        },
        Ok(()) => classify_view_value(payload(s, len), len),
    }
}

/// Judge the value `v` of a complete view sequence of `len` bytes.
#[inline(always)]
pub(crate) fn classify_view_value(v: u64, len: usize) -> ViewUnit {
    if len == 7 {
        return if (0x8000_0000..=MAX_CODE_POINT as u64).contains(&v) {
            ViewUnit::Char { cp: v as u32, len }
        } else {
            ViewUnit::Passthrough {
                problem: Problem::Reserved(0xFE),
                len,
            }
        };
    }
    let v = v as u32;
    let min = match len {
        2 => 0x80,
        3 => 0x800,
        4 => 0x1_0000,
        5 => 0x20_0000,
        _ => 0x400_0000,
    };
    let problem = if v < min {
        Problem::Overlong(v)
    } else if len == 2 && v <= 0x9F {
        Problem::C1Control(v)
    } else if len == 3 && (0xD800..=0xDFFF).contains(&v) {
        Problem::Surrogate(v)
    } else {
        return ViewUnit::Char { cp: v, len };
    };
    ViewUnit::Unstorable { problem, len }
}

/// Corrected UTF-8 of `cp` into `dst`; returns its length, or `None` for C1
/// controls, surrogates and code points above U+8421109F.
///
/// # Panics
///
/// When `dst` is shorter than the encoding (6 bytes always suffice).
#[inline(always)]
pub fn encode_disk(cp: u32, dst: &mut [u8]) -> Option<usize> {
    let (p, len) = match cp {
        0..=0x7F => {
            dst[0] = cp as u8;
            return Some(1);
        }
        0x80..=0x9F => return None,
        0xA0..=0x89F => (cp - OFF2, 2),
        0x8A0..=0xD7FF => (cp - OFF3_LO, 3),
        0xD800..=0xDFFF => return None,
        0xE000..=0x1_109F => (cp - OFF3_HI, 3),
        0x1_10A0..=0x21_109F => (cp - OFF4, 4),
        0x21_10A0..=0x421_109F => (cp - OFF5, 5),
        0x421_10A0..=MAX_CODE_POINT => (cp - OFF6, 6),
        _ => return None,
    };
    write_seq(p as u64, len, dst);
    Some(len)
}

/// The view form of `cp` into `dst`; returns its length: standard UTF-8 up
/// to U+10FFFF, the shortest RFC 2279 form up to U+7FFFFFFF, FE plus six
/// continuation bytes above.
///
/// # Panics
///
/// When `dst` is shorter than the form ([`crate::MAX_UNIT_LEN`] bytes
/// always suffice).
#[inline(always)]
pub fn encode_view(cp: u32, dst: &mut [u8]) -> usize {
    let len = view_len_of(cp);
    if len == 1 {
        dst[0] = cp as u8;
    } else {
        write_seq(cp as u64, len, dst);
    }
    len
}

/// Length of the view form of `cp`.
#[inline(always)]
pub(crate) const fn view_len_of(cp: u32) -> usize {
    match cp {
        0..=0x7F => 1,
        0x80..=0x7FF => 2,
        0x800..=0xFFFF => 3,
        0x1_0000..=0x1F_FFFF => 4,
        0x20_0000..=0x3FF_FFFF => 5,
        0x400_0000..=0x7FFF_FFFF => 6,
        _ => 7,
    }
}

/// Write payload `p` as a `len`-byte (2..=7) UTF-8-shaped sequence.
#[inline(always)]
pub(crate) fn write_seq(mut p: u64, len: usize, dst: &mut [u8]) {
    for k in (1..len).rev() {
        dst[k] = 0x80 | (p & 0x3F) as u8;
        p >>= 6;
    }
    let lead_mark: u8 = match len {
        2 => 0xC0,
        3 => 0xE0,
        4 => 0xF0,
        5 => 0xF8,
        6 => 0xFC,
        _ => 0xFE,
    };
    dst[0] = lead_mark | p as u8;
}
