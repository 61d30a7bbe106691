//! The magic number, handled inside the converters as a byte order mark is
//! inside a UTF-16 decoder: what a [`Decoder`](crate::Decoder) does with one
//! at the start of its input ([`DecodeMagic`]), whether an
//! [`Encoder`](crate::Encoder) writes one ([`EncodeMagic`]), and what both
//! remember of it between calls ([`MagicState`]).
//!
//! The rules, for every caller alike:
//!
//! * A Corrected UTF-8 stream that holds text begins with [`MAGIC`]; an
//!   empty stream holds no text and no magic number (an encoder that is
//!   given no input writes nothing, and a decoder that expects the magic
//!   number accepts empty input).
//! * The magic number is not text. In strict mode a decoder refuses it
//!   anywhere but at the start it drops
//!   ([`Problem::MagicNumber`](crate::Problem::MagicNumber)), and an
//!   encoder refuses the text that would encode to it, the four characters
//!   U+10E7D U+ED4E U+0000 U+000A in a row ([`MAGIC_TEXT`],
//!   [`Problem::MagicText`](crate::Problem::MagicText)): strict conversion
//!   round-trips. An encoder also refuses input that begins with the magic
//!   number (it is Corrected UTF-8 already): `MagicNumber` at offset 0,
//!   decided on its first six bytes, U+FDDD and the encoded surrogate
//!   U+DCAE when read as UTF-8 (invalid UTF-8 whatever follows), instead
//!   of a surrogate at offset 3. Lossless conversion checks none of this
//!   and carries the bytes through as text.
//! * Streaming: the bytes that may be the start of a magic number at the
//!   end of a chunk are consumed and held (at most seven or eight) until
//!   the next chunk, or `last`, decides; any chunking gives the same result.

/// The magic number that begins a Corrected UTF-8 file (U+10E7D U+ED4E
/// U+0000 U+000A in Corrected UTF-8). It is not part of the text.
pub const MAGIC: [u8; 8] = [0xEF, 0xB7, 0x9D, 0xED, 0xB2, 0xAE, 0x00, 0x0A];

/// The magic number's four characters in UTF-8: what decoding [`MAGIC`] as
/// text gives, and the text strict encoding refuses.
pub const MAGIC_TEXT: [u8; 9] = [0xF0, 0x90, 0xB9, 0xBD, 0xEE, 0xB5, 0x8E, 0x00, 0x0A];

/// Where each unit of [`MAGIC`] ends, and of [`MAGIC_TEXT`].
pub(crate) const MAGIC_ENDS: [usize; 4] = [3, 6, 7, 8];
pub(crate) const TEXT_ENDS: [usize; 4] = [4, 7, 8, 9];

/// Index of the U+0000 in [`MAGIC`] and in [`MAGIC_TEXT`]: the byte the
/// converters look for to find where a magic number may begin.
pub(crate) const MAGIC_NUL: usize = 6;
pub(crate) const TEXT_NUL: usize = 7;

/// Whether `bytes` begins with the [`MAGIC`] number.
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// What a [`Decoder`](crate::Decoder) does with the magic number at the
/// start of its input (set with
/// [`Decoder::with_magic`](crate::Decoder::with_magic)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DecodeMagic {
    /// The input must begin with it, and it is dropped: any other
    /// non-empty input is [`Problem::MissingMagic`](crate::Problem::MissingMagic)
    /// at offset 0 (most likely it is plain UTF-8 already). For files.
    Expect,
    /// Dropped if the input begins with it; input without it is text from
    /// its first byte. For text known to be Corrected UTF-8.
    Strip,
    /// No magic number at the start: every byte is text (strict decoding
    /// refuses a magic number at the start too). For a stream that starts
    /// elsewhere than at the start of a file. The default.
    #[default]
    Off,
}

/// Whether an [`Encoder`](crate::Encoder) writes the magic number (set with
/// [`Encoder::with_magic`](crate::Encoder::with_magic)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EncodeMagic {
    /// Write it before the first output byte; an empty input gives an
    /// empty output. For files.
    Write,
    /// Write none. The default.
    #[default]
    Off,
}

/// What a converter remembers of the magic number between two calls, in
/// a few bits: whether the start of the stream is behind it, how much of
/// the magic number an encoder wrote, and the beginning of a magic number
/// held at the end of the last input.
///
/// After a call whose input ended at a unit boundary, it is the whole
/// state of a converter: [`Decoder::resume`](crate::Decoder::resume) and
/// [`Encoder::resume`](crate::Encoder::resume) continue from it in a new
/// converter of the same mode. For adapters that cannot keep a converter
/// between calls, and so hand in a unit cut by the end of their input
/// again with the next input instead of before it (glibc's iconv keeps a
/// module's state in an `mbstate_t`).
///
/// ```
/// use cutf8::{DecodeMagic, Decoder, MagicState, Status, MAGIC};
/// let mut out = [0u8; 32];
/// let mut d = Decoder::strict().with_magic(DecodeMagic::Expect);
/// // The first half of the magic number, then the state goes elsewhere...
/// assert_eq!(d.convert(&MAGIC[..4], &mut out, false), (Status::InputEmpty, 4, 0));
/// let bits = d.magic_state().to_bits();
/// // ... and a new decoder goes on from it.
/// let state = MagicState::from_bits(bits).unwrap();
/// let mut d = Decoder::strict().with_magic(DecodeMagic::Expect).resume(state);
/// assert_eq!(d.convert(&[0xB2, 0xAE, 0, b'\n', b'a'], &mut out, true), (Status::InputEmpty, 5, 1));
/// assert!(d.found_magic());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MagicState(Gate);

impl MagicState {
    /// The state as 16 bits (the rest of the `u32` is zero).
    pub fn to_bits(self) -> u32 {
        let g = self.0;
        g.held as u32
            | (g.view as u32) << 4
            | (g.text as u32) << 5
            | (g.done as u32) << 6
            | (g.body as u32) << 10
            | (g.found as u32) << 11
            | (g.sent as u32) << 12
    }

    /// The state [`to_bits`](Self::to_bits) gave; `None` for bits it
    /// cannot give.
    pub fn from_bits(bits: u32) -> Option<MagicState> {
        let g = Gate {
            held: (bits & 0xF) as u8,
            view: bits >> 4 & 1 == 1,
            text: bits >> 5 & 1 == 1,
            done: (bits >> 6 & 0xF) as u8,
            body: bits >> 10 & 1 == 1,
            found: bits >> 11 & 1 == 1,
            sent: (bits >> 12 & 0xF) as u8,
        };
        let pattern = if g.view {
            MAGIC_TEXT.len()
        } else {
            MAGIC.len()
        };
        let ok = bits >> 16 == 0
            && (g.held as usize) < pattern
            && g.done <= g.held
            && (g.text || g.done == 0)
            && (g.held > 0 || !g.text)
            && (g.sent as usize) <= MAGIC.len();
        ok.then_some(MagicState(g))
    }

    /// How many input bytes are held: the beginning of what may be a
    /// magic number (or its characters), consumed and not yet converted.
    pub fn held(self) -> usize {
        self.0.held as usize
    }

    /// Whether the start of the stream is still undecided: no byte of it
    /// converted, dropped or refused yet (what is held, if anything, may
    /// still be the magic number).
    pub fn at_start(self) -> bool {
        !self.0.body
    }

    pub(crate) fn gate(self) -> Gate {
        self.0
    }

    pub(crate) fn of(g: Gate) -> MagicState {
        MagicState(g)
    }
}

/// The magic-number state both converters keep (see [`MagicState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Gate {
    /// The start of the stream is decided: a magic number there was
    /// dropped, refused or found missing, or the stream began otherwise.
    pub body: bool,
    /// A decoder dropped a magic number at the start.
    pub found: bool,
    /// An encoder wrote this many bytes of [`MAGIC`] (whole units).
    pub sent: u8,
    /// This many bytes of a magic number were taken from the input and
    /// are held: a prefix of [`MAGIC_TEXT`] when `view`, else of
    /// [`MAGIC`].
    pub held: u8,
    pub view: bool,
    /// The held bytes turned out to be text, and the first `done` of them
    /// have been converted.
    pub text: bool,
    pub done: u8,
}

impl Gate {
    /// The pattern the held bytes begin.
    pub fn pattern(&self) -> &'static [u8] {
        if self.view {
            &MAGIC_TEXT
        } else {
            &MAGIC
        }
    }

    /// Take the bytes of `src` from `*i` that go on the held pattern.
    /// `true` when the pattern is complete.
    pub fn take(&mut self, src: &[u8], i: &mut usize) -> bool {
        let n = self.pattern().len();
        self.take_upto(src, i, n)
    }

    /// As [`take`](Self::take), up to the first `n` bytes of the pattern.
    pub fn take_upto(&mut self, src: &[u8], i: &mut usize, n: usize) -> bool {
        let pat = &self.pattern()[..n];
        let mut k = self.held as usize;
        while k < pat.len() && *i < src.len() && src[*i] == pat[k] {
            k += 1;
            *i += 1;
        }
        self.held = k as u8;
        k == pat.len()
    }

    /// Hold `rest`, a proper prefix of the pattern (`view` says which).
    pub fn hold(&mut self, rest: &[u8], view: bool) {
        self.held = rest.len() as u8;
        self.view = view;
        self.text = false;
        self.done = 0;
    }

    /// Forget the held bytes (converted, dropped or refused).
    pub fn clear(&mut self) {
        self.held = 0;
        self.view = false;
        self.text = false;
        self.done = 0;
    }
}

/// Where the vector code may convert up to, from `i`, so that the scalar
/// code sees every unit that may begin a magic pattern whose U+0000 byte
/// lies `nul` bytes after its first: the vector code stops `nul` bytes
/// before the first U+0000 byte at or after `i + nul`, or before the end
/// of what has been searched. The search runs ahead of the conversion a
/// few kilobytes at a time, each byte once (after a U+0000 byte, on from
/// it), so that the vector code reads what it converts from the cache.
/// Without a U+0000 byte, a chunk that is not the last keeps its last
/// `nul` bytes for the scalar code (a pattern cut by the chunk's end is
/// held).
#[derive(Debug, Default)]
pub(crate) struct NulScan {
    /// `src[from..to]` has been searched; `found` is the first U+0000
    /// byte in it.
    from: usize,
    to: usize,
    found: Option<usize>,
}

/// How many bytes are searched at a time, and how close the conversion
/// may come to the end of what is searched before the search goes on.
const WINDOW: usize = 4 * 1024;
const AHEAD: usize = 1024;

/// How close to the end of a range the vector code may stop only because
/// it takes whole blocks with look-ahead (the AVX2 blocks that end each
/// run stop at most a block, 32 bytes, and 34 of look-ahead short): the
/// conversion then goes on after searching further, without the scalar
/// code.
pub(crate) const NEAR_LIMIT: usize = 128;

impl NulScan {
    /// `(limit, searched)`: convert `src[i..limit]` with the vector code;
    /// `searched` says the limit is only where the search stopped (no
    /// U+0000 byte before it), so the conversion may go on after a search.
    pub fn limit(
        &mut self,
        find: impl Fn(&[u8]) -> Option<usize>,
        src: &[u8],
        i: usize,
        last: bool,
        nul: usize,
    ) -> (usize, bool) {
        let s = i + nul;
        if s >= src.len() {
            return (if last { src.len() } else { i }, false);
        }
        if s < self.from || s > self.to {
            // Not searched (the first call, or far past the last search).
            *self = NulScan {
                from: s,
                to: s,
                found: None,
            };
        } else if self.found.is_some_and(|p| p < s) {
            // Past the U+0000 byte found: search on from here.
            self.found = find(&src[s..self.to]).map(|k| s + k);
            self.from = s;
        }
        while self.found.is_none() && self.to < src.len() && self.to - s < AHEAD {
            let end = (self.to + WINDOW).min(src.len());
            self.found = find(&src[self.to..end]).map(|k| self.to + k);
            self.to = end;
        }
        match self.found {
            Some(p) => (p - nul, false),
            None if self.to < src.len() => (self.to - nul, true),
            None if last => (src.len(), false),
            None => (src.len() - nul, false),
        }
    }
}

#[cfg(test)]
mod tests;
