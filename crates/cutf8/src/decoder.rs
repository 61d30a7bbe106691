//! V, streaming: Corrected UTF-8 (disk) → UTF-8 (view).
//!
//! State between calls is only what a chunk edge can cut: a partial
//! sequence (at most five bytes), the fact that a reserved FE/FF unit is
//! still open, and the magic number's [`Gate`] (its bytes held at the
//! start of the stream or, in strict mode, anywhere a magic number may
//! begin). The main loop runs the vector code of [`crate::simd`] (ASCII and
//! every well-formed unit up to U+D109F), then decodes a stretch unit by
//! unit: 2- and 3-byte sequences inline, everything else through the
//! scalar reference. In strict mode the vector code stops short of every
//! U+0000 byte (the magic number holds one) so that the scalar code sees
//! each unit that could begin a magic number.

use crate::magic::NEAR_LIMIT;
use crate::magic::{DecodeMagic, Gate, MagicState, NulScan, MAGIC, MAGIC_ENDS, MAGIC_NUL};
use crate::scalar::{decode_disk_unit, disk_cp, encode_view, is_cont, lead_len, payload};
use crate::scalar::{view_len_of, DiskUnit};
use crate::simd::{Level, Path};
use crate::{Malformed, Problem, Status, MAX_CODE_POINT, MAX_UNIT_LEN};

/// How far the scalar loop goes after the vector code stops: past the
/// longest block it refuses, so that the next try starts beyond it.
const SCALAR_STRETCH: usize = 64;

/// The view of each unit of the magic number (U+10E7D U+ED4E U+0000
/// U+000A), for magic numbers held and then found to be text.
const MAGIC_VIEWS: [&[u8]; 4] = [
    &[0xF0, 0x90, 0xB9, 0xBD],
    &[0xEE, 0xB5, 0x8E],
    &[0],
    &[0x0A],
];

/// Streaming V; see the crate documentation for the contract.
///
/// ```
/// use cutf8::{Decoder, Status};
/// let mut d = Decoder::lossless();
/// let mut out = [0u8; 32];
/// let (status, read, written) = d.convert(&[0xC0, 0xAF, b'!'], &mut out, true);
/// assert_eq!(status, Status::InputEmpty);
/// assert_eq!((read, &out[..written]), (3, "Ï!".as_bytes()));
/// ```
#[derive(Debug, Clone)]
pub struct Decoder {
    strict: bool,
    path: Path,
    magic: DecodeMagic,
    gate: Gate,
    /// A sequence cut by the end of the previous chunk: `pending[..plen]`,
    /// starting with its lead byte (never FE/FF, never complete).
    pending: [u8; 8],
    plen: usize,
    /// An FE/FF unit whose continuation bytes may go on in the next chunk.
    reserved: Option<Reserved>,
    /// Reserved units W would not give back unchanged.
    exempt: u64,
}

#[derive(Debug, Clone, Copy)]
struct Reserved {
    lead: u8,
    len: usize,
    /// Payload of the first six continuation bytes (FE's extended form).
    value: u64,
}

impl Reserved {
    /// Add a continuation byte; true when this makes the unit FE plus six
    /// continuation bytes whose value W would read as an extended form.
    fn push(&mut self, c: u8) -> bool {
        if self.len < 7 {
            self.value = (self.value << 6) | (c & 0x3F) as u64;
        }
        self.len += 1;
        self.lead == 0xFE
            && self.len == 7
            && (0x8000_0000..=MAX_CODE_POINT as u64).contains(&self.value)
    }
}

impl Decoder {
    /// V as the format defines it, for reading whatever a file holds: never
    /// fails. Reserved units, stray continuation bytes and truncated
    /// sequences pass through unchanged; code points above U+10FFFF come
    /// out in their shortest extended form (RFC 2279 up to U+7FFFFFFF,
    /// FE plus six continuation bytes above). Only a missing magic number
    /// ([`DecodeMagic::Expect`]) is reported.
    pub fn lossless() -> Self {
        Self::new(false)
    }

    /// V for text: stray bytes, truncated sequences, reserved units, code
    /// points above U+10FFFF and a magic number after the start are
    /// [`Status::Malformed`]; what it writes is always valid UTF-8, and
    /// strict encoding gives the input back.
    pub fn strict() -> Self {
        Self::new(true)
    }

    fn new(strict: bool) -> Self {
        Decoder {
            strict,
            path: Path::best(),
            magic: DecodeMagic::Off,
            gate: Gate::default(),
            pending: [0; 8],
            plen: 0,
            reserved: None,
            exempt: 0,
        }
    }

    /// What to do with the magic number at the start of the input
    /// (default: [`DecodeMagic::Off`]).
    pub fn with_magic(mut self, magic: DecodeMagic) -> Self {
        self.magic = magic;
        self
    }

    /// Use vector code up to `max` (never more than the CPU has; the
    /// default is the best it has, [`Level::best`]).
    pub fn with_simd_level(mut self, max: Level) -> Self {
        self.path = Path::at_most(max);
        self
    }

    /// The vector level this decoder runs.
    pub fn simd_level(&self) -> Level {
        self.path.level()
    }

    /// Go on from `state`, taken from a decoder of the same mode by
    /// [`magic_state`](Self::magic_state) (see [`MagicState`]).
    pub fn resume(mut self, state: MagicState) -> Self {
        self.gate = state.gate();
        self
    }

    /// What this decoder remembers of the magic number; with no unit cut
    /// by the end of its input held, all it remembers.
    pub fn magic_state(&self) -> MagicState {
        MagicState::of(self.gate)
    }

    /// Whether a magic number at the start of the input was dropped
    /// ([`DecodeMagic::Expect`] and [`DecodeMagic::Strip`]).
    pub fn found_magic(&self) -> bool {
        self.gate.found
    }

    /// How many reserved units seen so far are FE plus six or more
    /// continuation bytes carrying a value in U+80000000–U+8421109F: the one
    /// input V cannot hand to W unchanged (lossless mode).
    pub fn exempt_units(&self) -> u64 {
        self.exempt
    }

    /// Convert `src` into `dst`; see the crate documentation for the
    /// contract.
    pub fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        let mut i = 0;
        let mut o = 0;
        if let Some(r) = self.reserved.take() {
            if let Some(s) = self.reserved_tail(r, src, dst, &mut i, &mut o, last) {
                return (s, i, o);
            }
        }
        if !self.gate.body || self.gate.held > 0 {
            if let Some(s) = self.gate(src, dst, &mut i, &mut o, last) {
                return (s, i, o);
            }
        }
        if self.plen > 0 {
            let need = lead_len(self.pending[0]);
            while self.plen < need && i < src.len() && is_cont(src[i]) {
                self.pending[self.plen] = src[i];
                self.plen += 1;
                i += 1;
            }
            let have = self.plen;
            if have < need && i == src.len() && !last {
                return (Status::InputEmpty, i, o);
            }
            let cp = disk_cp(payload(&self.pending, need) as u32, need);
            let out = match (have == need, self.strict) {
                (true, true) if cp > 0x10_FFFF => 0,
                (true, _) => view_len_of(cp),
                (false, true) => 0,
                (false, false) => have,
            };
            if out > dst.len() - o {
                return (Status::OutputFull, i, o);
            }
            self.plen = 0;
            if have == need {
                if let Some(m) = self.emit(cp, need, dst, &mut o) {
                    return (Status::Malformed(m), i, o);
                }
            } else if self.strict {
                let m = Malformed {
                    problem: Problem::Truncated {
                        expected: need as u8,
                    },
                    len: have,
                };
                return (Status::Malformed(m), i, o);
            } else {
                dst[o..o + have].copy_from_slice(&self.pending[..have]);
                o += have;
            }
        }
        self.run(src, dst, i, o, last)
    }

    /// The start of the stream and held magic bytes: take what the input
    /// adds to them, decide, and write held bytes that turned out to be
    /// text. `None` when conversion goes on.
    fn gate(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        i: &mut usize,
        o: &mut usize,
        last: bool,
    ) -> Option<Status> {
        let g = &mut self.gate;
        // Held bytes taken from earlier inputs (the rest are in `src`).
        let before = g.held as usize;
        if !g.text {
            if !g.body {
                if self.magic == DecodeMagic::Off {
                    g.body = true;
                    return None;
                }
                // The start: the magic number, or not.
                if g.take(src, i) {
                    g.clear();
                    g.found = true;
                    g.body = true;
                    return None;
                }
                if *i == src.len() && !last {
                    return Some(Status::InputEmpty);
                }
                g.body = true;
                if g.held == 0 && *i == src.len() {
                    // Empty input.
                    return None;
                }
                if self.magic == DecodeMagic::Expect {
                    // The bytes that differ from it, up to the first
                    // that does, are the bad unit.
                    let differs = (*i < src.len()) as usize;
                    *i += differs;
                    let len = g.held as usize + differs;
                    g.clear();
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::MissingMagic,
                        len,
                    }));
                }
            } else {
                // A magic number after the start (strict mode).
                if g.take(src, i) {
                    g.clear();
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::MagicNumber,
                        len: MAGIC.len(),
                    }));
                }
                if *i == src.len() && !last {
                    return Some(Status::InputEmpty);
                }
            }
            g.text = true;
        }
        // Held bytes that are text: their whole units, then a cut one as
        // the pending sequence.
        let mut start = 0;
        for (&end, view) in MAGIC_ENDS.iter().zip(MAGIC_VIEWS) {
            if g.done as usize == start && end <= g.held as usize {
                if view.len() > dst.len() - *o {
                    return Some(Status::OutputFull);
                }
                dst[*o..*o + view.len()].copy_from_slice(view);
                *o += view.len();
                g.done = end as u8;
            }
            start = end;
        }
        let (done, held) = (g.done as usize, g.held as usize);
        g.clear();
        if done < held {
            if done >= before {
                // A cut unit, all of it in this input: convert it from there.
                *i -= held - done;
            } else {
                self.pending[..held - done].copy_from_slice(&MAGIC[done..held]);
                self.plen = held - done;
            }
        }
        None
    }

    /// Write the view of `cp` (a complete `len`-byte disk sequence); in strict
    /// mode a code point above U+10FFFF is an error instead.
    #[inline(always)]
    fn emit(&self, cp: u32, len: usize, dst: &mut [u8], o: &mut usize) -> Option<Malformed> {
        if self.strict && cp > 0x10_FFFF {
            return Some(Malformed {
                problem: Problem::BeyondUnicode(cp),
                len,
            });
        }
        *o += encode_view(cp, &mut dst[*o..]);
        None
    }

    /// Consume the continuation bytes of an open reserved unit. `None` when
    /// the unit ended and conversion goes on; otherwise the status to return.
    fn reserved_tail(
        &mut self,
        mut r: Reserved,
        src: &[u8],
        dst: &mut [u8],
        i: &mut usize,
        o: &mut usize,
        last: bool,
    ) -> Option<Status> {
        while *i < src.len() && is_cont(src[*i]) {
            if !self.strict {
                if *o == dst.len() {
                    self.reserved = Some(r);
                    return Some(Status::OutputFull);
                }
                dst[*o] = src[*i];
                *o += 1;
            }
            if r.push(src[*i]) {
                self.exempt += 1;
            }
            *i += 1;
        }
        if *i == src.len() && !last {
            self.reserved = Some(r);
            return Some(Status::InputEmpty);
        }
        if self.strict {
            return Some(Status::Malformed(Malformed {
                problem: Problem::Reserved(r.lead),
                len: r.len,
            }));
        }
        None
    }

    /// How many bytes the unit at `src[i]` writes (0 when it is refused or
    /// only held): for an output buffer with less than [`MAX_UNIT_LEN`]
    /// bytes of room, which must not take a unit it cannot finish.
    #[cold]
    fn out_len(&self, src: &[u8], i: usize, last: bool) -> usize {
        match decode_disk_unit(&src[i..], last) {
            DiskUnit::Char { cp, .. } if self.strict && cp > 0x10_FFFF => 0,
            DiskUnit::Char { cp, .. } => view_len_of(cp),
            _ if self.strict => 0,
            DiskUnit::Stray | DiskUnit::ReservedLead => 1,
            DiskUnit::Truncated { len, .. } => len,
            DiskUnit::Incomplete => 0,
        }
    }

    fn run(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        mut i: usize,
        mut o: usize,
        last: bool,
    ) -> (Status, usize, usize) {
        let mut nuls = NulScan::default();
        let path = self.path;
        loop {
            // Vector blocks as far as they go (ASCII, and units that keep
            // their length), then scalar code for at least the block the
            // vector code refused.
            let (limit, searched) = if self.strict {
                let find = |s: &[u8]| path.find_zero(s);
                nuls.limit(find, src, i, last, MAGIC_NUL)
            } else {
                (src.len(), false)
            };
            let (read, written) = path.decode_run(&src[i..limit.max(i)], &mut dst[o..]);
            i += read;
            o += written;
            if i == src.len() {
                return (Status::InputEmpty, i, o);
            }
            if searched && read > 0 && limit - i < NEAR_LIMIT {
                // Stopped by the end of what is searched: search on.
                continue;
            }
            let stop = i + SCALAR_STRETCH;
            while i < src.len() && i < stop {
                if dst.len() - o < MAX_UNIT_LEN && self.out_len(src, i, last) > dst.len() - o {
                    return (Status::OutputFull, i, o);
                }
                let b = src[i];
                if b < 0x80 {
                    dst[o] = b;
                    i += 1;
                    o += 1;
                    continue;
                }
                // Hot cases first: complete 2- and 3-byte sequences.
                if (0xC0..0xE0).contains(&b) {
                    if let Some(&[_, c1]) = src.get(i..i + 2) {
                        if is_cont(c1) {
                            let cp = ((b as u32 & 0x1F) << 6 | (c1 as u32 & 0x3F)) + 160;
                            if cp < 0x800 {
                                dst[o] = 0xC0 | (cp >> 6) as u8;
                                dst[o + 1] = 0x80 | (cp & 0x3F) as u8;
                                o += 2;
                            } else {
                                dst[o] = 0xE0 | (cp >> 12) as u8;
                                dst[o + 1] = 0x80 | ((cp >> 6) & 0x3F) as u8;
                                dst[o + 2] = 0x80 | (cp & 0x3F) as u8;
                                o += 3;
                            }
                            i += 2;
                            continue;
                        }
                    }
                } else if (0xE0..0xF0).contains(&b) {
                    if let Some(&[_, c1, c2]) = src.get(i..i + 3) {
                        if is_cont(c1) && is_cont(c2) {
                            let p = (b as u32 & 0x0F) << 12
                                | (c1 as u32 & 0x3F) << 6
                                | (c2 as u32 & 0x3F);
                            let cp = p + if p <= 0xCF5F { 2_208 } else { 4_256 };
                            if cp < 0x1_0000 {
                                dst[o] = 0xE0 | (cp >> 12) as u8;
                                dst[o + 1] = 0x80 | ((cp >> 6) & 0x3F) as u8;
                                dst[o + 2] = 0x80 | (cp & 0x3F) as u8;
                                o += 3;
                                i += 3;
                                continue;
                            }
                            // U+10E7D begins the magic number.
                            if !(self.strict && cp == 0x1_0E7D) {
                                o += encode_view(cp, &mut dst[o..]);
                                i += 3;
                                continue;
                            }
                            if let Some(s) = self.magic_at(src, &mut i, last) {
                                return (s, i, o);
                            }
                            o += encode_view(cp, &mut dst[o..]);
                            i += 3;
                            continue;
                        }
                    }
                }
                if let Some(s) = self.slow_unit(src, dst, &mut i, &mut o, last) {
                    return (s, i, o);
                }
            }
            if i == src.len() {
                return (Status::InputEmpty, i, o);
            }
        }
    }

    /// Strict mode, at a unit that begins the magic number (U+10E7D, or a
    /// cut start of it): refuse a whole magic number, hold one cut by the
    /// end of a chunk that is not the last; `None` when it is text (the
    /// caller goes on at `*i`, unchanged, and must not ask again).
    #[cold]
    fn magic_at(&mut self, src: &[u8], i: &mut usize, last: bool) -> Option<Status> {
        let rest = &src[*i..];
        if rest.starts_with(&MAGIC) {
            *i += MAGIC.len();
            return Some(Status::Malformed(Malformed {
                problem: Problem::MagicNumber,
                len: MAGIC.len(),
            }));
        }
        if !last && rest.len() < MAGIC.len() && MAGIC.starts_with(rest) {
            self.gate.hold(rest, false);
            *i = src.len();
            return Some(Status::InputEmpty);
        }
        // Text: U+10E7D and whatever follows.
        None
    }

    /// Any unit starting at `src[i]` (≥ 0x80), through the scalar reference.
    /// `dst` has room for what the unit writes.
    #[inline(never)]
    fn slow_unit(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        i: &mut usize,
        o: &mut usize,
        last: bool,
    ) -> Option<Status> {
        let b = src[*i];
        match decode_disk_unit(&src[*i..], last) {
            DiskUnit::Char { cp, len } => {
                if self.strict && cp == 0x1_0E7D {
                    if let Some(s) = self.magic_at(src, i, last) {
                        return Some(s);
                    }
                }
                *i += len;
                self.emit(cp, len, dst, o).map(Status::Malformed)
            }
            DiskUnit::Stray => {
                *i += 1;
                if self.strict {
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::StrayContinuation(b),
                        len: 1,
                    }));
                }
                dst[*o] = b;
                *o += 1;
                None
            }
            DiskUnit::Truncated { len, expected } => {
                *i += len;
                if self.strict {
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::Truncated { expected },
                        len,
                    }));
                }
                dst[*o..*o + len].copy_from_slice(&src[*i - len..*i]);
                *o += len;
                None
            }
            DiskUnit::Incomplete => {
                let rest = &src[*i..];
                if self.strict && MAGIC.starts_with(rest) {
                    // The end of the chunk may be the start of a magic
                    // number (the next chunk decides).
                    self.gate.hold(rest, false);
                } else {
                    self.pending[..rest.len()].copy_from_slice(rest);
                    self.plen = rest.len();
                }
                *i = src.len();
                Some(Status::InputEmpty)
            }
            DiskUnit::ReservedLead => {
                *i += 1;
                if !self.strict {
                    dst[*o] = b;
                    *o += 1;
                }
                let r = Reserved {
                    lead: b,
                    len: 1,
                    value: 0,
                };
                self.reserved_tail(r, src, dst, i, o, last)
            }
        }
    }
}
