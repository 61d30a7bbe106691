//! W, streaming: UTF-8 (view, extended forms included) → Corrected UTF-8.
//!
//! State between calls is a sequence cut by a chunk edge (at most six
//! bytes: FE plus five) and the magic number's [`Gate`]: how much of it was
//! written, and in strict mode the bytes held at a chunk's end that may
//! begin the magic number's characters (or, at the start, the magic number
//! itself). The main loop runs the vector code of [`crate::simd`], then
//! encodes a stretch unit by unit: 2- and 3-byte sequences inline,
//! everything else through the scalar reference. In strict mode the vector
//! code stops short of every U+0000 byte, as in the decoder.

use crate::magic::{EncodeMagic, Gate, MagicState, NulScan, MAGIC, MAGIC_ENDS, MAGIC_TEXT};
use crate::magic::{NEAR_LIMIT, TEXT_ENDS, TEXT_NUL};
use crate::scalar::{decode_view_unit, encode_disk, is_cont, lead_len, ViewUnit};
use crate::simd::{Level, Path};
use crate::{Malformed, Problem, Status, MAX_UNIT_LEN};

/// How far the scalar loop goes after the vector code stops (see the
/// decoder).
const SCALAR_STRETCH: usize = 64;

/// How much of the magic number at the start of the input makes it
/// Corrected UTF-8 already: U+FDDD and the encoded surrogate U+DCAE.
const ALREADY: usize = 6;

/// Streaming W; see the crate documentation for the contract.
///
/// ```
/// use cutf8::{Encoder, Status, Problem};
/// let mut e = Encoder::lossless();
/// let mut out = [0u8; 32];
/// let (status, read, written) = e.convert("Ï".as_bytes(), &mut out, true);
/// assert_eq!((status, read, &out[..written]), (Status::InputEmpty, 2, &[0xC0, 0xAF][..]));
/// // C1 controls cannot be stored, not even losslessly.
/// let (status, _, _) = Encoder::lossless().convert(&[0xC2, 0x85], &mut out, true);
/// assert!(matches!(status, Status::Malformed(m) if m.problem == Problem::C1Control(0x85)));
/// ```
#[derive(Debug, Clone)]
pub struct Encoder {
    strict: bool,
    path: Path,
    magic: EncodeMagic,
    gate: Gate,
    /// A sequence cut by the end of the previous chunk, lead byte first.
    pending: [u8; 8],
    plen: usize,
}

impl Encoder {
    /// W as the format defines it, for storing whatever a view holds:
    /// structurally ill-formed bytes (stray continuation bytes, truncated
    /// sequences, FE/FF units that are not an extended form) pass through;
    /// C1 controls, overlong forms and encoded surrogates, which Corrected
    /// UTF-8 cannot store, are errors.
    pub fn lossless() -> Self {
        Self::new(false)
    }

    /// W for text: anything but well-formed RFC 3629 UTF-8 without C1
    /// controls, and the magic number's characters (see
    /// [`MAGIC_TEXT`](crate::MAGIC_TEXT)), is [`Status::Malformed`]; strict
    /// decoding gives the input back.
    pub fn strict() -> Self {
        Self::new(true)
    }

    fn new(strict: bool) -> Self {
        Encoder {
            strict,
            path: Path::best(),
            magic: EncodeMagic::Off,
            gate: Gate::default(),
            pending: [0; 8],
            plen: 0,
        }
    }

    /// Whether to write the magic number (default: [`EncodeMagic::Off`]).
    pub fn with_magic(mut self, magic: EncodeMagic) -> Self {
        self.magic = magic;
        self
    }

    /// Use vector code up to `max` (never more than the CPU has; the
    /// default is the best it has, [`Level::best`]).
    pub fn with_simd_level(mut self, max: Level) -> Self {
        self.path = Path::at_most(max);
        self
    }

    /// The vector level this encoder runs.
    pub fn simd_level(&self) -> Level {
        self.path.level()
    }

    /// Go on from `state`, taken from an encoder of the same mode by
    /// [`magic_state`](Self::magic_state) (see [`MagicState`]).
    pub fn resume(mut self, state: MagicState) -> Self {
        self.gate = state.gate();
        self
    }

    /// What this encoder remembers of the magic number; with no unit cut
    /// by the end of its input held, all it remembers.
    pub fn magic_state(&self) -> MagicState {
        MagicState::of(self.gate)
    }

    /// Convert `src` into `dst`; see the crate documentation for the
    /// contract.
    pub fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        let mut i = 0;
        let mut o = 0;
        let busy = !src.is_empty() || self.plen > 0 || self.gate.held > 0;
        if self.magic == EncodeMagic::Write && (self.gate.sent as usize) < MAGIC.len() && busy {
            // Unit by unit, so that a short buffer takes what fits.
            for &end in &MAGIC_ENDS {
                let sent = self.gate.sent as usize;
                if end <= sent {
                    continue;
                }
                if end - sent > dst.len() - o {
                    return (Status::OutputFull, i, o);
                }
                dst[o..o + end - sent].copy_from_slice(&MAGIC[sent..end]);
                o += end - sent;
                self.gate.sent = end as u8;
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
            if self.plen < need && i == src.len() && !last {
                return (Status::InputEmpty, i, o);
            }
            let have = self.plen;
            let pending = self.pending;
            let unit = decode_view_unit(&pending[..have], true);
            if self.out_len(unit) > dst.len() - o {
                return (Status::OutputFull, i, o);
            }
            self.plen = 0;
            if let Some(s) = self.unit(unit, &pending[..have], dst, &mut o) {
                return (s, i, o);
            }
        }
        self.run(src, dst, i, o, last)
    }

    /// The start of the stream and held magic bytes, as in the decoder:
    /// strict mode refuses input that begins with the magic number and the
    /// magic number's characters anywhere. `None` when conversion goes on.
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
                if !self.strict {
                    g.body = true;
                    return None;
                }
                if g.held == 0 {
                    match src.get(*i) {
                        None if !last => return Some(Status::InputEmpty),
                        Some(&b) if b == MAGIC[0] => g.view = false,
                        _ => {
                            g.body = true;
                            return None;
                        }
                    }
                }
                // Input that begins with the magic number is Corrected
                // UTF-8 already: decided on its first six bytes, U+FDDD
                // then an encoded surrogate (invalid UTF-8 either way).
                if g.take_upto(src, i, ALREADY) {
                    g.clear();
                    g.body = true;
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::MagicNumber,
                        len: ALREADY,
                    }));
                }
                if *i == src.len() && !last {
                    return Some(Status::InputEmpty);
                }
                g.body = true;
            } else {
                // The magic number's characters (strict mode).
                if g.take(src, i) {
                    g.clear();
                    return Some(Status::Malformed(Malformed {
                        problem: Problem::MagicText,
                        len: MAGIC_TEXT.len(),
                    }));
                }
                if *i == src.len() && !last {
                    return Some(Status::InputEmpty);
                }
            }
            g.text = true;
        }
        let (pattern, ends): (&[u8], &[usize]) = if g.view {
            (&MAGIC_TEXT, &TEXT_ENDS)
        } else {
            // Read as UTF-8, the magic number begins with U+FDDD and then
            // an encoded surrogate: only its first unit can be text.
            (&MAGIC, &MAGIC_ENDS[..1])
        };
        let mut start = 0;
        for &end in ends {
            if g.done as usize == start && end <= g.held as usize {
                let mut tmp = [0u8; 8];
                let n = match decode_view_unit(&pattern[start..end], true) {
                    ViewUnit::Char { cp, .. } => encode_disk(cp, &mut tmp).unwrap_or(0),
                    _ => 0,
                };
                if n > dst.len() - *o {
                    return Some(Status::OutputFull);
                }
                dst[*o..*o + n].copy_from_slice(&tmp[..n]);
                *o += n;
                g.done = end as u8;
            }
            start = end;
        }
        let (done, held) = (g.done as usize, g.held as usize);
        g.clear();
        if done < held && done >= before {
            // The rest, all of it in this input: convert it from there.
            *i -= held - done;
            return None;
        }
        if done < held {
            self.pending[..held - done].copy_from_slice(&pattern[done..held]);
            self.plen = held - done;
        }
        None
    }

    /// How many bytes the decided `unit` writes (0 when it is refused).
    fn out_len(&self, unit: ViewUnit) -> usize {
        match unit {
            ViewUnit::Char { cp, .. } if self.strict && cp > 0x10_FFFF => 0,
            ViewUnit::Char { cp, .. } => {
                let mut tmp = [0u8; 8];
                encode_disk(cp, &mut tmp).unwrap_or(0)
            }
            ViewUnit::Passthrough { len, .. } if !self.strict => len,
            _ => 0,
        }
    }

    /// [`out_len`](Self::out_len) of the unit at `src[i]`: for an output
    /// buffer with less than [`MAX_UNIT_LEN`] bytes of room, which must
    /// not take a unit it cannot finish.
    #[cold]
    fn out_len_at(&self, src: &[u8], i: usize, last: bool) -> usize {
        if self.strict && src[i] >= 0xFE {
            return 0;
        }
        self.out_len(decode_view_unit(&src[i..], last))
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
            // As in the decoder: vector blocks, then a scalar stretch.
            let (limit, searched) = if self.strict {
                let find = |s: &[u8]| path.find_zero(s);
                nuls.limit(find, src, i, last, TEXT_NUL)
            } else {
                (src.len(), false)
            };
            let (read, written) = path.encode_run(&src[i..limit.max(i)], &mut dst[o..]);
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
                if dst.len() - o < MAX_UNIT_LEN && self.out_len_at(src, i, last) > dst.len() - o {
                    return (Status::OutputFull, i, o);
                }
                let b = src[i];
                if b < 0x80 {
                    dst[o] = b;
                    i += 1;
                    o += 1;
                    continue;
                }
                if (0xC2..0xE0).contains(&b) {
                    if let Some(&[_, c1]) = src.get(i..i + 2) {
                        if is_cont(c1) {
                            let cp = (b as u32 & 0x1F) << 6 | (c1 as u32 & 0x3F);
                            if cp >= 0xA0 {
                                let p = cp - 160;
                                dst[o] = 0xC0 | (p >> 6) as u8;
                                dst[o + 1] = 0x80 | (p & 0x3F) as u8;
                                o += 2;
                                i += 2;
                                continue;
                            }
                        }
                    }
                } else if (0xE1..0xF0).contains(&b) && b != 0xED {
                    // E1–EC, EE, EF: never overlong, never a surrogate.
                    if let Some(&[_, c1, c2]) = src.get(i..i + 3) {
                        if is_cont(c1) && is_cont(c2) {
                            let cp = (b as u32 & 0x0F) << 12
                                | (c1 as u32 & 0x3F) << 6
                                | (c2 as u32 & 0x3F);
                            let p = if cp <= 0xD7FF { cp - 2_208 } else { cp - 4_256 };
                            dst[o] = 0xE0 | (p >> 12) as u8;
                            dst[o + 1] = 0x80 | ((p >> 6) & 0x3F) as u8;
                            dst[o + 2] = 0x80 | (p & 0x3F) as u8;
                            o += 3;
                            i += 3;
                            continue;
                        }
                    }
                }
                if self.strict && b >= 0xFE {
                    // Standard UTF-8 never has FE/FF: reject the byte alone.
                    i += 1;
                    let m = Malformed {
                        problem: Problem::Reserved(b),
                        len: 1,
                    };
                    return (Status::Malformed(m), i, o);
                }
                if self.strict && b == MAGIC_TEXT[0] {
                    if let Some(s) = self.magic_at(src, &mut i, last) {
                        return (s, i, o);
                    }
                }
                let unit = decode_view_unit(&src[i..], last);
                if unit == ViewUnit::Incomplete {
                    let rest = &src[i..];
                    self.pending[..rest.len()].copy_from_slice(rest);
                    self.plen = rest.len();
                    return (Status::InputEmpty, src.len(), o);
                }
                let len = match unit {
                    ViewUnit::Char { len, .. }
                    | ViewUnit::Unstorable { len, .. }
                    | ViewUnit::Passthrough { len, .. } => len,
                    ViewUnit::Incomplete => 0,
                };
                i += len;
                if let Some(s) = self.unit(unit, &src[i - len..i], dst, &mut o) {
                    return (s, i, o);
                }
            }
            if i == src.len() {
                return (Status::InputEmpty, i, o);
            }
        }
    }

    /// Strict mode, at an F0 lead: refuse the magic number's characters,
    /// hold a start of them cut by the end of a chunk that is not the
    /// last; `None` when the unit is something else.
    #[cold]
    fn magic_at(&mut self, src: &[u8], i: &mut usize, last: bool) -> Option<Status> {
        let rest = &src[*i..];
        if rest.starts_with(&MAGIC_TEXT) {
            *i += MAGIC_TEXT.len();
            return Some(Status::Malformed(Malformed {
                problem: Problem::MagicText,
                len: MAGIC_TEXT.len(),
            }));
        }
        if !last && rest.len() < MAGIC_TEXT.len() && MAGIC_TEXT.starts_with(rest) {
            self.gate.hold(rest, true);
            *i = src.len();
            return Some(Status::InputEmpty);
        }
        None
    }

    /// Write one decided unit whose input bytes are `bytes`; `Some` is the
    /// status to stop with. `dst` has room for what the unit writes.
    #[inline(never)]
    fn unit(&self, unit: ViewUnit, bytes: &[u8], dst: &mut [u8], o: &mut usize) -> Option<Status> {
        let bad = |problem: Problem| {
            Some(Status::Malformed(Malformed {
                problem,
                len: bytes.len(),
            }))
        };
        match unit {
            ViewUnit::Char { cp, .. } => {
                if self.strict && cp > 0x10_FFFF {
                    return bad(Problem::BeyondUnicode(cp));
                }
                match encode_disk(cp, &mut dst[*o..]) {
                    Some(n) => *o += n,
                    // classify_view_value only yields storable code points.
                    None => return bad(Problem::C1Control(cp)),
                }
                None
            }
            ViewUnit::Unstorable { problem, .. } => bad(problem),
            ViewUnit::Passthrough { problem, .. } => {
                if self.strict {
                    return bad(problem);
                }
                dst[*o..*o + bytes.len()].copy_from_slice(bytes);
                *o += bytes.len();
                None
            }
            ViewUnit::Incomplete => None,
        }
    }
}
