//! W, streaming: UTF-8 (view, extended forms included) → Corrected UTF-8.
//!
//! The only state between calls is a sequence cut by a chunk edge (at most
//! six bytes: FE plus five). The main loop runs the vector code of
//! [`super::simd`], then encodes a stretch unit by unit: 2- and 3-byte
//! sequences inline, everything else through the scalar reference.

use super::scalar::decode_view_unit;
use super::scalar::{encode_disk, is_cont, lead_len, ViewUnit};
use super::{simd, Malformed, Problem, Status, MAX_UNIT_LEN};

/// How far the scalar loop goes after the vector code stops (see the
/// decoder).
const SCALAR_STRETCH: usize = 64;

/// Streaming W; see the module doc of [`crate`] for the contract.
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
    /// A sequence cut by the end of the previous chunk, lead byte first.
    pending: [u8; 8],
    plen: usize,
}

impl Encoder {
    /// W exactly as the mount applies it: structurally ill-formed bytes pass
    /// through; C1 controls, overlong forms and surrogates are errors.
    pub fn lossless() -> Self {
        Self::new(false)
    }

    /// `cutf8 encode`'s default: anything but well-formed RFC 3629 UTF-8
    /// without C1 controls is [`Status::Malformed`].
    pub fn strict() -> Self {
        Self::new(true)
    }

    fn new(strict: bool) -> Self {
        Encoder {
            strict,
            pending: [0; 8],
            plen: 0,
        }
    }

    /// Convert `src` into `dst`; see [`crate`] for the contract.
    pub fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        let mut i = 0;
        let mut o = 0;
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
            if dst.len() - o < MAX_UNIT_LEN {
                return (Status::OutputFull, i, o);
            }
            let have = self.plen;
            self.plen = 0;
            let pending = self.pending;
            let unit = decode_view_unit(&pending[..have], true);
            if let Some(s) = self.unit(unit, &pending[..have], dst, &mut o) {
                return (s, i, o);
            }
        }
        self.run(src, dst, i, o, last)
    }

    fn run(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        mut i: usize,
        mut o: usize,
        last: bool,
    ) -> (Status, usize, usize) {
        loop {
            // As in the decoder: vector blocks, then a scalar stretch.
            let (read, written) = simd::encode_run(&src[i..], &mut dst[o..]);
            i += read;
            o += written;
            if i == src.len() {
                return (Status::InputEmpty, i, o);
            }
            let stop = i + SCALAR_STRETCH;
            while i < src.len() && i < stop && dst.len() - o >= MAX_UNIT_LEN {
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
            if dst.len() - o < MAX_UNIT_LEN {
                return (Status::OutputFull, i, o);
            }
        }
    }

    /// Write one decided unit whose input bytes are `bytes`; `Some` is the
    /// status to stop with. `dst` has at least [`MAX_UNIT_LEN`] bytes of room.
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
