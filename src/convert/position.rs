//! Where a conversion is in its input, and how a malformed unit is
//! described: byte offset, line, column (characters since the last
//! U+000A), and the unit's bytes even when it began in an earlier chunk.
//! [`Position`] is the one line/column/offset type of the converter, of
//! `cutf8 check` and of migrate's reports.

use std::fmt;

use cutf8::{Malformed, Problem};

use super::{Direction, Options};

/// Where something is in an input: lines and columns count from 1, columns
/// in characters (the bytes that are not continuation bytes), the byte
/// offset from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: u64,
    pub column: u64,
    pub offset: u64,
}

impl Default for Position {
    fn default() -> Self {
        Position {
            line: 1,
            column: 1,
            offset: 0,
        }
    }
}

impl Position {
    /// Moves over `bytes` (well-formed text, or units counted as one
    /// character each by their first byte).
    pub fn advance(&mut self, bytes: &[u8]) {
        self.offset += bytes.len() as u64;
        match bytes.iter().rposition(|&b| b == b'\n') {
            Some(k) => {
                self.line += count_newlines(&bytes[..=k]);
                self.column = count_chars(&bytes[k + 1..]) + 1;
            }
            None => self.column += count_chars(bytes),
        }
    }
}

impl fmt::Display for Position {
    /// `line:col (byte N)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} (byte {})", self.line, self.column, self.offset)
    }
}

/// Where the converter is in its input ([`Position`]), and the last few
/// bytes (a bad unit may have begun in an earlier chunk).
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    at: Position,
    tail: [u8; TAIL],
    tail_len: usize,
    /// The decoder dropped a magic number at the start (counted as input).
    magic: bool,
}

/// Bytes of history kept: longer than any unit but a reserved one.
const TAIL: usize = 8;

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            at: Position::default(),
            tail: [0; TAIL],
            tail_len: 0,
            magic: false,
        }
    }
}

impl Tracker {
    /// The decoder dropped the magic number at the start of the input it
    /// was given: its bytes count as offsets but not as text. It ends with
    /// U+000A, so it adds exactly one line when counted; take it back
    /// (once, whether its bytes are counted yet or not).
    pub(crate) fn magic_dropped(&mut self) {
        if !std::mem::replace(&mut self.magic, true) {
            self.at.line -= 1;
        }
    }

    /// Count `bytes` (consumed input) into the position.
    pub(crate) fn advance(&mut self, bytes: &[u8]) {
        self.at.advance(bytes);
        self.remember(bytes);
    }

    #[cfg(test)]
    pub(super) fn line(&self) -> u64 {
        self.at.line
    }

    #[cfg(test)]
    pub(super) fn column(&self) -> u64 {
        self.at.column
    }

    fn remember(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL {
            self.tail.copy_from_slice(&bytes[bytes.len() - TAIL..]);
            self.tail_len = TAIL;
        } else {
            let keep = (TAIL - bytes.len()).min(self.tail_len);
            let mut t = [0u8; TAIL];
            t[..keep].copy_from_slice(&self.tail[self.tail_len - keep..self.tail_len]);
            t[keep..keep + bytes.len()].copy_from_slice(bytes);
            self.tail = t;
            self.tail_len = keep + bytes.len();
        }
    }

    /// The position of a malformed unit that ends at the end of `consumed`
    /// (input consumed by the call that reported it); advances over the
    /// input before the unit, not over the unit.
    pub(crate) fn locate(&mut self, consumed: &[u8], m: Malformed) -> Located {
        let before = consumed.len().saturating_sub(m.len);
        self.advance(&consumed[..before]);
        let here = &consumed[before..];
        let (offset, column, bytes) = if m.len <= consumed.len() {
            (self.at.offset, self.at.column, Some(here.to_vec()))
        } else {
            // The unit began in an earlier chunk: the characters of that
            // part are already counted (one lead byte for a sequence or a
            // reserved unit; more for the magic number or its characters,
            // which are never longer than the bytes kept).
            let earlier = m.len - consumed.len();
            let before = (earlier <= self.tail_len)
                .then(|| &self.tail[self.tail_len - earlier..self.tail_len]);
            let counted = before.map_or(1, count_chars);
            let bytes = before.map(|b| [b, here].concat());
            (
                self.at.offset - earlier as u64,
                self.at.column.saturating_sub(counted).max(1),
                bytes,
            )
        };
        self.at.offset += here.len() as u64;
        self.remember(here);
        Located {
            pos: Position {
                line: self.at.line,
                column,
                offset,
            },
            malformed: m,
            bytes,
        }
    }
}

pub(super) fn count_newlines(b: &[u8]) -> u64 {
    const NL: u64 = 0x0A0A_0A0A_0A0A_0A0A;
    count_bytes(
        b,
        |w| {
            // High bit of each byte set iff the byte of `w ^ NL` is zero.
            let x = w ^ NL;
            let nonzero = ((x & !HIGH) + !HIGH) | x;
            (!nonzero & HIGH) >> 7
        },
        |c| c == b'\n',
    )
}

/// Characters in well-formed UTF-8 or Corrected UTF-8: the bytes that are
/// not continuation bytes (10xxxxxx).
pub(crate) fn count_chars(b: &[u8]) -> u64 {
    count_bytes(
        b,
        // Bit 7 set and bit 6 (moved up by the shift) clear: continuation.
        |w| (!(w & !(w << 1)) & HIGH) >> 7,
        |c| c & 0xC0 != 0x80,
    )
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// How many bytes of `b` satisfy `pred`, eight at a time: `lanes(w)` gives
/// 1 in each byte of the word `w` that does, and up to 255 such words are
/// summed per byte before a horizontal add. About 6 GB/s here, where
/// `filter().count()` was 2 and took a third of `cutf8 decode`'s time.
#[inline(always)]
fn count_bytes(b: &[u8], lanes: impl Fn(u64) -> u64, pred: impl Fn(u8) -> bool) -> u64 {
    const L16: u64 = 0x00FF_00FF_00FF_00FF;
    let fold = |acc: u64| {
        let pairs = (acc & L16) + ((acc >> 8) & L16);
        pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48
    };
    let mut words = b.chunks_exact(8);
    let (mut total, mut acc, mut n) = (0u64, 0u64, 0u32);
    for w in &mut words {
        acc += lanes(u64::from_le_bytes(w.try_into().expect("chunks_exact(8)")));
        n += 1;
        if n == 255 {
            total += fold(acc);
            acc = 0;
            n = 0;
        }
    }
    total += fold(acc);
    total + words.remainder().iter().filter(|&&c| pred(c)).count() as u64
}

/// A malformed unit and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// Where its first byte is in the input (offsets count the magic
    /// number; lines and columns do not).
    pub pos: Position,
    pub malformed: Malformed,
    /// Its bytes, when known (always, except for reserved units longer
    /// than [`TAIL`] that began in an earlier chunk).
    pub bytes: Option<Vec<u8>>,
}

impl Located {
    /// `line:col: what (byte offset N)`, to follow the file name (the
    /// remedy, if any, follows: `convert::hint`).
    pub(super) fn message(&self, opts: &Options) -> String {
        format!(
            "{}:{}: {} (byte offset {})",
            self.pos.line,
            self.pos.column,
            self.describe(opts.direction),
            self.pos.offset
        )
    }

    /// What was found, with its bytes in hex.
    pub(crate) fn describe(&self, direction: Direction) -> String {
        let len = self.malformed.len;
        let hex = match &self.bytes {
            Some(b) if b.len() <= TAIL => hex(b),
            _ => String::new(),
        };
        match self.malformed.problem {
            Problem::StrayContinuation(b) => format!("stray continuation byte {b:02X}"),
            Problem::Truncated { expected } => format!("truncated {expected}-byte sequence {hex}"),
            Problem::Reserved(lead) if direction == Direction::Encode => {
                format!("byte {lead:02X}, which never appears in UTF-8")
            }
            Problem::Reserved(lead) => {
                if hex.is_empty() {
                    format!(
                        "reserved unit {lead:02X} plus {} continuation bytes has no UTF-8 form",
                        len - 1
                    )
                } else {
                    format!("reserved unit {hex} has no UTF-8 form")
                }
            }
            Problem::BeyondUnicode(cp) if direction == Direction::Encode => {
                format!("extended form {hex} of U+{cp:04X} is not UTF-8 (above U+10FFFF)")
            }
            Problem::BeyondUnicode(cp) => {
                format!("code point U+{cp:04X} ({hex}) is above U+10FFFF, beyond UTF-8")
            }
            Problem::Overlong(cp) => {
                format!("overlong form {hex} of U+{cp:04X} cannot be encoded")
            }
            Problem::Surrogate(cp) => {
                format!("encoded surrogate U+{cp:04X} ({hex}) cannot be encoded")
            }
            Problem::C1Control(cp) => format!("C1 control U+{cp:04X} ({hex}) cannot be encoded"),
            Problem::MagicText => "the magic number's characters U+10E7D U+ED4E U+0000 U+000A, \
                 which would encode to a magic number inside the text (decoding refuses one)"
                .to_string(),
            Problem::MagicNumber => {
                format!("a Corrected UTF-8 magic number ({hex}) inside the text")
            }
            other => format!("{other} ({hex})"),
        }
    }
}

/// `C0 AF`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (k, b) in bytes.iter().enumerate() {
        if k > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02X}"));
    }
    s
}
