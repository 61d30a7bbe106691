//! V, streaming: Corrected UTF-8 (disk) → UTF-8 (view).
//!
//! State between calls is only what a chunk edge can cut: a partial
//! sequence (at most five bytes) or the fact that a reserved FE/FF unit is
//! still open. The main loop runs the vector code of [`super::simd`] (ASCII
//! and every well-formed unit up to U+D109F), then decodes a stretch unit by
//! unit: 2- and 3-byte sequences inline, everything else through the scalar
//! reference.

use super::scalar::decode_disk_unit;
use super::scalar::{disk_cp, encode_view, is_cont, lead_len, payload, DiskUnit};
use super::{simd, Malformed, Problem, Status, MAX_CODE_POINT, MAX_UNIT_LEN};

/// How far the scalar loop goes after the vector code stops: past the
/// longest block it refuses, so that the next try starts beyond it.
const SCALAR_STRETCH: usize = 64;

/// Streaming V; see the module doc of [`crate`] for the contract.
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
    /// A sequence cut by the end of the previous chunk: `pending[..plen]`,
    /// starting with its lead byte (never FE/FF, never complete).
    pending: [u8; 8],
    plen: usize,
    /// An FE/FF unit whose continuation bytes may go on in the next chunk.
    reserved: Option<Reserved>,
    /// Reserved units W would not give back unchanged (SPEC §2, invariant 1).
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
    /// V exactly as the mount applies it: never fails.
    pub fn lossless() -> Self {
        Self::new(false)
    }

    /// `cutf8 decode`'s default: stray bytes, truncated sequences, reserved
    /// units and code points above U+10FFFF are [`Status::Malformed`].
    pub fn strict() -> Self {
        Self::new(true)
    }

    fn new(strict: bool) -> Self {
        Decoder {
            strict,
            pending: [0; 8],
            plen: 0,
            reserved: None,
            exempt: 0,
        }
    }

    /// How many reserved units seen so far are FE plus six or more
    /// continuation bytes carrying a value in U+80000000–U+8421109F: the one
    /// input V cannot hand to W unchanged (a mount serves such a file
    /// read-only).
    pub fn exempt_units(&self) -> u64 {
        self.exempt
    }

    /// Convert `src` into `dst`; see [`crate`] for the contract.
    pub fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        let mut i = 0;
        let mut o = 0;
        if let Some(r) = self.reserved.take() {
            if let Some(s) = self.reserved_tail(r, src, dst, &mut i, &mut o, last) {
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
            if dst.len() - o < MAX_UNIT_LEN {
                return (Status::OutputFull, i, o);
            }
            self.plen = 0;
            if have == need {
                let cp = disk_cp(payload(&self.pending, need) as u32, need);
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

    fn run(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        mut i: usize,
        mut o: usize,
        last: bool,
    ) -> (Status, usize, usize) {
        loop {
            // Vector blocks as far as they go (ASCII, and units that keep
            // their length), then scalar code for at least the block the
            // vector code refused.
            let (read, written) = simd::decode_run(&src[i..], &mut dst[o..]);
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
                            } else {
                                o += encode_view(cp, &mut dst[o..]);
                            }
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
            if dst.len() - o < MAX_UNIT_LEN {
                return (Status::OutputFull, i, o);
            }
        }
    }

    /// Any unit starting at `src[i]` (≥ 0x80), through the scalar reference.
    /// `dst` has at least [`MAX_UNIT_LEN`] bytes of room.
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
                self.pending[..rest.len()].copy_from_slice(rest);
                self.plen = rest.len();
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
