//! `CORRECTED-UTF-8` for glibc's iconv: a gconv module (SPEC §5).
//!
//! Two halves. `shim/gconv.c` speaks glibc's step protocol against the
//! system's `<gconv.h>` (struct layouts, calling the next step, re-running a
//! conversion up to where the next step stopped); this crate does the
//! converting, over [`cutf8`], as pure functions of (input, output
//! room): [`convert`] and [`prologue`]. Why a C shim and not Rust alone: the
//! step structures are glibc-internal and their layout is only promised by
//! the header of the glibc at hand (`__gconv_step_data` lost a member in
//! 2.35's lifetime), so the C compiler reads it at build time instead of a
//! hand-copied `#[repr(C)]` that would silently go stale.
//!
//! Kinds of step (one module file serves all): Corrected UTF-8 ⇄ glibc's
//! `INTERNAL` (host-endian UCS-4, so every charset glibc knows is reachable),
//! and Corrected UTF-8 ⇄ UTF-8 directly (one step instead of two for the
//! common case, on the codec's vector paths, with `cutf8`'s exact strict
//! rules for UTF-8 input).
//!
//! Semantics are `cutf8 decode`/`encode` in strict mode: decoding rejects
//! stray continuation bytes, truncated sequences, reserved units and code
//! points above U+10FFFF; encoding rejects ill-formed UTF-8 (overlong forms
//! and encoded surrogates included), C1 controls and anything above U+10FFFF.
//! The error is reported at the first byte of the offending unit, the byte
//! offset `cutf8` reports. A unit cut by the end of the input is
//! `Incomplete` (iconv(3): `EINVAL`, feed it again with more input).
//!
//! The magic number is handled as glibc's `UTF-16` handles a BOM, with
//! `cutf8 decode`'s strict rule on top: at the start of a stream decoding
//! drops it (and decodes input without it, as `cutf8 decode --no-magic`);
//! anywhere later it is an error at its first byte (`cutf8 decode`: "a
//! second Corrected UTF-8 magic number"); encoding writes it. The
//! `CORRECTED-UTF-8-NOMAGIC` variant writes none and refuses text that
//! would encode to it at the start (`cutf8 encode --no-magic`); decoding is
//! the same as for `CORRECTED-UTF-8` (`cutf8 decode --no-magic` drops a
//! leading one too).
//!
//! Finding the magic number across iconv(3)'s buffer boundaries: a call
//! whose input ends in a proper prefix of it that ends at a unit boundary
//! (U+10E7D, then U+ED4E, then U+0000) takes those units into the
//! descriptor's state instead of converting them ([`Held`], in glibc's
//! `mbstate_t`). The next call decides: the rest of the magic number is an
//! error (at the first byte of that call's input, the earliest one it can
//! name), anything else makes the held units text, written before what
//! follows; the final flush (`iconv(cd, NULL, NULL, &out, &n)`, which
//! iconv(1) and careful callers make at the end) writes them as text, as
//! `cutf8 decode` converts a text that merely ends with them. Handing them
//! back as incomplete input instead would make such a text fail at its end.
//! The same mechanism holds the start of an encoding: `-NOMAGIC` refuses
//! text beginning with V(MAGIC), the encoder from UTF-8 refuses input that
//! already begins with the magic number (`cutf8 encode`: at byte 0).
//!
//! Size: about 790 lines before its tests: the four converters share the
//! held-unit state and the magic-number rules, so they stay in one file.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cutf8::unit::{
    decode_disk_unit, decode_view_unit, encode_disk, encode_view, DiskUnit, ViewUnit,
};
use cutf8::{Decoder, Encoder, Status, MAGIC, MAX_UNIT_LEN};

/// Corrected UTF-8 → UCS-4 (glibc `INTERNAL`, host byte order).
pub const DECODE_UCS4: c_int = 0;
/// UCS-4 → Corrected UTF-8.
pub const ENCODE_UCS4: c_int = 1;
/// Corrected UTF-8 → UTF-8.
pub const DECODE_UTF8: c_int = 2;
/// UTF-8 → Corrected UTF-8.
pub const ENCODE_UTF8: c_int = 3;
/// Flag: the `-NOMAGIC` variant (no magic number written or dropped).
pub const NOMAGIC: c_int = 8;

/// What a call achieved (mapped to `__GCONV_*` by the shim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub enum Res {
    /// All input consumed.
    Empty = 0,
    /// The output has no room for the next character.
    Full = 1,
    /// The input ends inside a unit: the caller feeds it again with more.
    Incomplete = 2,
    /// The unit at the read position cannot be converted.
    Illegal = 3,
    /// Prologue only: go on converting.
    Proceed = 4,
    /// A panic was caught (a bug): `__GCONV_INTERNAL_ERROR`.
    Bug = 5,
}

/// The highest code point strict conversion accepts.
const MAX_UNICODE: u32 = 0x10_FFFF;

/// V(MAGIC): the text whose encoding is the magic number.
const VIEW_MAGIC: [u8; 9] = [0xF0, 0x90, 0xB9, 0xBD, 0xEE, 0xB5, 0x8E, 0x00, 0x0A];
/// The same as UCS-4 code points.
const UCS_MAGIC: [u32; 4] = [0x1_0E7D, 0xED4E, 0, 0x0A];

/// The magic number in each form a step reads or writes: its bytes and
/// where each of its four units ends.
struct Form {
    bytes: &'static [u8],
    ends: [usize; 4],
}

/// On disk: the magic number itself.
const DISK_FORM: Form = Form {
    bytes: &MAGIC,
    ends: [3, 6, 7, 8],
};
/// In UTF-8: V(MAGIC).
const VIEW_FORM: Form = Form {
    bytes: &VIEW_MAGIC,
    ends: [4, 7, 8, 9],
};
/// In glibc's INTERNAL (UCS-4, host byte order).
const UCS_FORM: Form = Form {
    bytes: &UCS_MAGIC_BYTES,
    ends: [4, 8, 12, 16],
};
const UCS_MAGIC_BYTES: [u8; 16] = {
    let mut b = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        b[k] = UCS_MAGIC[k / 4].to_ne_bytes()[k % 4];
        k += 1;
    }
    b
};

impl Form {
    /// Bytes of the first `units` units.
    fn end(&self, units: usize) -> usize {
        if units == 0 {
            0
        } else {
            self.ends[units - 1]
        }
    }

    /// How many whole units the first `n` bytes hold.
    fn units_in(&self, n: usize) -> usize {
        self.ends.iter().take_while(|&&e| e <= n).count()
    }

    /// The unit `k` (0..4).
    fn unit(&self, k: usize) -> &'static [u8] {
        &self.bytes[self.end(k)..self.ends[k]]
    }

    /// Where a proper prefix of the magic number begins that runs to the
    /// end of `src` (`src.len()` if none). Its first byte occurs once in
    /// it, so at most one candidate exists.
    fn tail_prefix(&self, src: &[u8]) -> usize {
        let n = src.len();
        (n.saturating_sub(self.bytes.len() - 1)..n)
            .find(|&p| src[p] == self.bytes[0] && self.bytes.starts_with(&src[p..]))
            .unwrap_or(n)
    }
}

/// The forms a step reads and writes.
fn forms(kind: c_int) -> (&'static Form, &'static Form) {
    if is_already_check(kind) {
        return (&ALREADY_FORM, &DISK_FORM);
    }
    match kind & !NOMAGIC {
        DECODE_UCS4 => (&DISK_FORM, &UCS_FORM),
        DECODE_UTF8 => (&DISK_FORM, &VIEW_FORM),
        ENCODE_UCS4 => (&UCS_FORM, &DISK_FORM),
        _ => (&VIEW_FORM, &DISK_FORM),
    }
}

fn is_decode(kind: c_int) -> bool {
    matches!(kind & !NOMAGIC, DECODE_UCS4 | DECODE_UTF8)
}

/// Whether a step keeps [`Held`] in its state word: all but the encoder
/// from UCS-4 that writes the magic number (whose input cannot begin with
/// it: code points, and U+ED4E is no surrogate there).
fn holds(kind: c_int) -> bool {
    kind != ENCODE_UCS4
}

/// The encoder from UTF-8 that writes the magic number: it refuses input
/// that already begins with it (`cutf8 encode`: "already encoded").
fn is_already_check(kind: c_int) -> bool {
    kind == ENCODE_UTF8
}

/// For [`is_already_check`]: the magic number's bytes read as UTF-8. Only
/// the first unit is one (U+FDDD); ED B2 is the start of an encoded
/// surrogate, an error at its first byte whatever follows.
const ALREADY_FORM: Form = Form {
    bytes: &MAGIC,
    ends: [3, 99, 99, 99],
};
/// U+FDDD, held by [`ALREADY_FORM`], as written when it turns out to be text.
const FDDD: u32 = 0xFDDD;

/// Where an encoder that writes the magic number keeps how many of its
/// bytes are out, above [`Held`]'s bits in the state word.
const SENT_SHIFT: u32 = 8;

/// What a step keeps between calls, in `mbstate_t.__count` (zeroed by
/// glibc's reset and by our flush): the first `held` units of the magic
/// number, read in earlier calls and not yet written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Units of the magic number taken from the input (0..=3).
    held: usize,
    /// Of those, how many went out as text already.
    done: usize,
    /// They are text (the input went on otherwise): write them.
    text: bool,
    /// The stream started with them: the rest of the magic number makes
    /// it the leading one (dropped by a decoder, refused by an encoder).
    start: bool,
    /// The start of the stream has been seen (set once per descriptor).
    begun: bool,
}

impl Held {
    /// Read from the state word (its low 7 bits).
    pub fn load(word: c_int) -> Held {
        let w = word as u32;
        Held {
            held: (w & 3) as usize,
            done: ((w >> 2) & 3) as usize,
            text: w & 16 != 0,
            start: w & 32 != 0,
            begun: w & 64 != 0,
        }
    }

    /// The low 7 bits of the state word.
    pub fn store(self) -> c_int {
        (self.held as u32
            | (self.done as u32) << 2
            | (self.text as u32) << 4
            | (self.start as u32) << 5
            | (self.begun as u32) << 6) as c_int
    }

    /// Hold the whole units of a proper prefix of `n` bytes of `form`, on
    /// top of the `had` held already; return the call's result and how
    /// many bytes of input that took.
    fn take(&mut self, form: &Form, n: usize) -> (Res, usize) {
        let had = form.end(self.held);
        self.held = form.units_in(n);
        let took = form.end(self.held) - had;
        let res = if form.end(self.held) == n {
            Res::Empty
        } else {
            // A unit of the magic number cut by the end of the input.
            Res::Incomplete
        };
        (res, took)
    }
}

/// The end of the longest prefix of `src` that does not end inside a unit
/// (one the codec's scalar reference calls incomplete).
fn complete_prefix(src: &[u8], incomplete: fn(&[u8]) -> bool) -> usize {
    let n = src.len();
    (n.saturating_sub(MAX_UNIT_LEN)..n)
        .find(|&p| incomplete(&src[p..]))
        .unwrap_or(n)
}

fn disk_incomplete(s: &[u8]) -> bool {
    decode_disk_unit(s, false) == DiskUnit::Incomplete
}

fn view_incomplete(s: &[u8]) -> bool {
    decode_view_unit(s, false) == ViewUnit::Incomplete
}

/// Convert as much of `src` into `dst` as fits, stopping at the first unit
/// that cannot be converted. Returns what happened, bytes read and written.
/// On [`Res::Illegal`] and [`Res::Incomplete`] `read` is the offset of the
/// unit's first byte; on [`Res::Full`] the next unit does not fit in what is
/// left of `dst` (so a re-run with `dst` cut at a unit boundary, from the
/// same `state`, ends exactly there).
///
/// `state` is the step's word in the descriptor's `mbstate_t` (see
/// [`Held`]).
pub fn convert(kind: c_int, src: &[u8], dst: &mut [u8], state: &mut c_int) -> (Res, usize, usize) {
    if !holds(kind) {
        return convert_plain(kind, src, dst);
    }
    let mut h = Held::load(*state);
    let r = convert_held(kind, src, dst, &mut h);
    *state = (*state & !0x7F) | h.store();
    r
}

/// The conversion alone, no magic number anywhere.
fn convert_plain(kind: c_int, src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    match kind & !NOMAGIC {
        DECODE_UCS4 => decode_ucs4(src, dst),
        ENCODE_UCS4 => encode_ucs4(src, dst),
        DECODE_UTF8 => decode_utf8(src, dst),
        ENCODE_UTF8 => encode_utf8(src, dst),
        _ => (Res::Bug, 0, 0),
    }
}

/// Write the held units that are not out yet, as text.
fn write_held(kind: c_int, dst: &mut [u8], h: &mut Held) -> (Res, usize) {
    let (_, out) = forms(kind);
    let mut fddd = [0u8; 8];
    let mut o = 0;
    while h.done < h.held {
        let u = if is_already_check(kind) {
            let n = encode_disk(FDDD, &mut fddd).unwrap_or(0);
            &fddd[..n]
        } else {
            out.unit(h.done)
        };
        if o + u.len() > dst.len() {
            return (Res::Full, o);
        }
        dst[o..o + u.len()].copy_from_slice(u);
        o += u.len();
        h.done += 1;
    }
    *h = Held {
        begun: h.begun,
        ..Held::default()
    };
    (Res::Empty, o)
}

/// [`convert`] for steps that look for the magic number: decoders (at the
/// start: dropped; later: an error) and `-NOMAGIC` encoders (at the start:
/// an error).
fn convert_held(kind: c_int, src: &[u8], dst: &mut [u8], h: &mut Held) -> (Res, usize, usize) {
    let (form, _) = forms(kind);
    let decode = is_decode(kind);
    let magic = form.bytes;
    // An encoder's input that begins EF B7 9D ED B2 (U+FDDD, then the start
    // of an encoded surrogate) is an error at byte 0 if the magic number
    // follows, else at byte 3 with U+FDDD written first: no use holding it
    // longer, write it (`cutf8 encode`'s outcome for a whole buffer).
    let undecided = |n: usize| is_already_check(kind) && n >= 5 && n < magic.len();
    let (mut i, mut o) = (0, 0);
    // Units held by earlier calls: does this input finish the magic number?
    if h.held > 0 && !h.text {
        let k = form.end(h.held);
        let n = src.len().min(magic.len() - k);
        if src[..n] != magic[k..k + n] || undecided(k + n) {
            h.text = true;
            h.start = false;
        } else if k + n < magic.len() {
            let (res, took) = h.take(form, k + n);
            return (res, took, 0);
        } else if h.start && decode {
            *h = Held {
                begun: true,
                ..Held::default()
            };
            i = n;
        } else {
            return (Res::Illegal, 0, 0);
        }
    }
    if h.text {
        let (res, w) = write_held(kind, dst, h);
        o = w;
        if res != Res::Empty {
            return (res, 0, o);
        }
    }
    if h.start {
        let rest = &src[i..];
        if rest.is_empty() {
            return (Res::Empty, i, o);
        }
        if rest.starts_with(magic) {
            if !decode {
                return (Res::Illegal, i, o);
            }
            i += magic.len();
        } else if magic.starts_with(rest) && !undecided(rest.len()) {
            let (res, took) = h.take(form, rest.len());
            return (res, i + took, o);
        }
        h.start = false;
    }
    if !decode {
        let (res, r, w) = convert_plain(kind, &src[i..], &mut dst[o..]);
        return (res, i + r, o + w);
    }
    // The body: text up to the next magic number, or up to a proper prefix
    // of one at the end of the input. A call converts at most as many input
    // bytes as it has room for output bytes (no unit is shorter in UTF-8 or
    // UCS-4 than on disk), so the search looks no further than that: with a
    // small output buffer and a long input (iconv(1) hands over whole
    // files) each call stays proportional to what it converts.
    let rest = &src[i..];
    let reach = dst.len() - o + 2 * magic.len();
    let window = &rest[..rest.len().min(reach)];
    let cut_short = window.len() < rest.len();
    let (limit, found) = match memchr::memmem::find(window, magic) {
        Some(p) => (p, true),
        None if cut_short => (window.len(), false),
        None => (form.tail_prefix(window), false),
    };
    let (res, r, w) = convert_plain(kind, &rest[..limit], &mut dst[o..]);
    let (i, o) = (i + r, o + w);
    match res {
        Res::Empty | Res::Incomplete if cut_short && !found => {
            // Cannot happen (see above); refuse rather than guess.
            (Res::Bug, i, o)
        }
        // A unit cut short by the magic number's first byte (not a
        // continuation byte): truncated, as `cutf8 decode` says.
        Res::Incomplete if limit < rest.len() => (Res::Illegal, i, o),
        Res::Empty if found => (Res::Illegal, i, o),
        Res::Empty if limit < rest.len() => {
            let (res, took) = h.take(form, rest.len() - limit);
            (res, i + took, o)
        }
        other => (other, i, o),
    }
}

/// The final flush of a decoder or `-NOMAGIC` encoder: held units are
/// text. Returns [`Res::Empty`] or [`Res::Full`] and bytes written.
pub fn flush(kind: c_int, dst: &mut [u8], state: &mut c_int) -> (Res, usize) {
    if !holds(kind) {
        return (Res::Empty, 0);
    }
    let mut h = Held::load(*state);
    if h.held > 0 {
        h.text = true;
    }
    let r = write_held(kind, dst, &mut h);
    *state = (*state & !0x7F) | h.store();
    r
}

/// The first call of a descriptor: the magic number. Returns
/// [`Res::Proceed`] to go on with [`convert`], or a result to return.
///
/// `state` is per-descriptor (in glibc's `mbstate_t`, zeroed by a reset):
/// for an encoder that writes the magic number, how many of its bytes
/// earlier calls wrote; for the others, [`Held`], where this marks the
/// start of the stream for [`convert`] to decide on.
pub fn prologue(
    kind: c_int,
    _src: &[u8],
    dst: &mut [u8],
    state: &mut c_int,
) -> (Res, usize, usize) {
    let mut n = 0;
    if matches!(kind, ENCODE_UCS4 | ENCODE_UTF8) {
        // Written piecewise if the output is short (iconv(3) with a tiny
        // buffer): the state counts what earlier calls wrote.
        let word = *state as u32;
        let done = ((word >> SENT_SHIFT) as usize).min(MAGIC.len());
        n = (MAGIC.len() - done).min(dst.len());
        dst[..n].copy_from_slice(&MAGIC[done..done + n]);
        *state = ((word & ((1 << SENT_SHIFT) - 1)) | ((done + n) as u32) << SENT_SHIFT) as c_int;
        if done + n < MAGIC.len() {
            return (Res::Full, 0, n);
        }
    }
    if holds(kind) {
        // `convert` decides on the start of the stream: a decoder drops a
        // magic number there, an encoder from UTF-8 refuses it (`cutf8
        // encode`: already encoded), a -NOMAGIC encoder refuses text that
        // would encode to it.
        let mut h = Held::load(*state);
        if !h.begun {
            h.begun = true;
            h.start = true;
        }
        *state = (*state & !0x7F) | h.store();
    }
    (Res::Proceed, 0, n)
}

fn read_u32(s: &[u8]) -> u32 {
    u32::from_ne_bytes([s[0], s[1], s[2], s[3]])
}

fn decode_ucs4(src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    let (mut i, mut o) = (0, 0);
    while i < src.len() {
        if o + 4 > dst.len() {
            return (Res::Full, i, o);
        }
        let b = src[i];
        let (cp, len) = if b < 0x80 {
            (b as u32, 1)
        } else {
            match decode_disk_unit(&src[i..], false) {
                DiskUnit::Char { cp, len } if cp <= MAX_UNICODE => (cp, len),
                DiskUnit::Incomplete => return (Res::Incomplete, i, o),
                _ => return (Res::Illegal, i, o),
            }
        };
        dst[o..o + 4].copy_from_slice(&cp.to_ne_bytes());
        i += len;
        o += 4;
    }
    (Res::Empty, i, o)
}

fn encode_ucs4(src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    let (mut i, mut o) = (0, 0);
    let mut tmp = [0u8; 8];
    while i < src.len() {
        if src.len() - i < 4 {
            return (Res::Incomplete, i, o);
        }
        let cp = read_u32(&src[i..]);
        if cp > MAX_UNICODE {
            return (Res::Illegal, i, o);
        }
        let Some(n) = encode_disk(cp, &mut tmp) else {
            return (Res::Illegal, i, o);
        };
        if o + n > dst.len() {
            return (Res::Full, i, o);
        }
        dst[o..o + n].copy_from_slice(&tmp[..n]);
        i += 4;
        o += n;
    }
    (Res::Empty, i, o)
}

/// Bulk through the codec's strict [`Decoder`] (vector paths), then unit by
/// unit for the tail it leaves: an output too short for its next step, or a
/// unit cut by the end of `src`.
fn decode_utf8(src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    let safe = complete_prefix(src, disk_incomplete);
    let (status, r, w) = Decoder::strict().convert(&src[..safe], dst, true);
    if let Status::Malformed(m) = status {
        return (Res::Illegal, r - m.len, w);
    }
    let (mut i, mut o) = (r, w);
    let mut tmp = [0u8; 8];
    while i < src.len() {
        let (cp, len) = match decode_disk_unit(&src[i..], false) {
            DiskUnit::Char { cp, len } if cp <= MAX_UNICODE => (cp, len),
            DiskUnit::Incomplete => return (Res::Incomplete, i, o),
            _ => return (Res::Illegal, i, o),
        };
        let n = encode_view(cp, &mut tmp);
        if o + n > dst.len() {
            return (Res::Full, i, o);
        }
        dst[o..o + n].copy_from_slice(&tmp[..n]);
        i += len;
        o += n;
    }
    (Res::Empty, i, o)
}

/// As [`decode_utf8`], the other way, over the strict [`Encoder`].
fn encode_utf8(src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    let safe = complete_prefix(src, view_incomplete);
    let (status, r, w) = Encoder::strict().convert(&src[..safe], dst, true);
    if let Status::Malformed(m) = status {
        return (Res::Illegal, r - m.len, w);
    }
    let (mut i, mut o) = (r, w);
    let mut tmp = [0u8; 8];
    while i < src.len() {
        if src[i] >= 0xFE {
            // Strict: FE and FF are errors at once, whatever follows
            // (`cutf8 encode` names the byte).
            return (Res::Illegal, i, o);
        }
        let (cp, len) = match decode_view_unit(&src[i..], false) {
            ViewUnit::Char { cp, len } if cp <= MAX_UNICODE => (cp, len),
            ViewUnit::Incomplete => return (Res::Incomplete, i, o),
            _ => return (Res::Illegal, i, o),
        };
        let Some(n) = encode_disk(cp, &mut tmp) else {
            return (Res::Illegal, i, o);
        };
        if o + n > dst.len() {
            return (Res::Full, i, o);
        }
        dst[o..o + n].copy_from_slice(&tmp[..n]);
        i += len;
        o += n;
    }
    (Res::Empty, i, o)
}

/// Run `f` over the raw buffers and move the pointers by what it read and
/// wrote.
///
/// # Safety
/// `*inp..inend` and `*outp..outend` are valid ranges (glibc's buffers).
unsafe fn with_buffers(
    inp: *mut *const u8,
    inend: *const u8,
    outp: *mut *mut u8,
    outend: *mut u8,
    f: impl FnOnce(&[u8], &mut [u8]) -> (Res, usize, usize),
) -> c_int {
    // SAFETY: the caller passes glibc's in/out ranges; an empty or null
    // range becomes an empty slice.
    let (src, dst) = unsafe {
        let start = *inp;
        let out = *outp;
        let n_in = if start.is_null() || inend <= start {
            0
        } else {
            inend.offset_from(start) as usize
        };
        let n_out = if out.is_null() || outend <= out {
            0
        } else {
            outend.offset_from(out) as usize
        };
        let src: &[u8] = if n_in == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(start, n_in)
        };
        let dst: &mut [u8] = if n_out == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(out, n_out)
        };
        (src, dst)
    };
    let (res, r, w) =
        catch_unwind(AssertUnwindSafe(|| f(src, &mut *dst))).unwrap_or((Res::Bug, 0, 0));
    // SAFETY: r ≤ src.len() and w ≤ dst.len(), so both stay in range.
    unsafe {
        if r > 0 {
            *inp = (*inp).add(r);
        }
        if w > 0 {
            *outp = (*outp).add(w);
        }
    }
    res as c_int
}

/// C entry for [`convert`] (called by shim/gconv.c).
///
/// # Safety
/// See `with_buffers`.
#[no_mangle]
pub unsafe extern "C" fn cutf8_gconv_convert(
    kind: c_int,
    inp: *mut *const u8,
    inend: *const u8,
    outp: *mut *mut u8,
    outend: *mut u8,
    state: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract; `state` points into the descriptor's
    // mbstate_t (the shim passes &data->__statep->__count).
    unsafe {
        let state = &mut *state;
        with_buffers(inp, inend, outp, outend, |s, d| convert(kind, s, d, state))
    }
}

/// C entry for [`flush`] (called by shim/gconv.c).
///
/// # Safety
/// `*outp..outend` is a valid range; `state` is valid.
#[no_mangle]
pub unsafe extern "C" fn cutf8_gconv_flush(
    kind: c_int,
    outp: *mut *mut u8,
    outend: *mut u8,
    state: *mut c_int,
) -> c_int {
    let mut none: *const u8 = std::ptr::null();
    // SAFETY: forwarded contract (an empty input range); `state` as in
    // cutf8_gconv_convert.
    unsafe {
        let state = &mut *state;
        with_buffers(&mut none, std::ptr::null(), outp, outend, |_, d| {
            let (res, w) = flush(kind, d, state);
            (res, 0, w)
        })
    }
}

/// C entry for [`prologue`] (called by shim/gconv.c).
///
/// # Safety
/// See `with_buffers`; `state` is valid.
#[no_mangle]
pub unsafe extern "C" fn cutf8_gconv_prologue(
    kind: c_int,
    inp: *mut *const u8,
    inend: *const u8,
    outp: *mut *mut u8,
    outend: *mut u8,
    state: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract; `state` points into the descriptor's
    // mbstate_t (the shim passes &data->__statep->__count).
    unsafe {
        let state = &mut *state;
        with_buffers(inp, inend, outp, outend, |s, d| prologue(kind, s, d, state))
    }
}

/// Opaque glibc types: only the shim looks inside.
#[repr(C)]
pub struct GconvStep {
    _opaque: [u8; 0],
}
/// See [`GconvStep`].
#[repr(C)]
pub struct GconvStepData {
    _opaque: [u8; 0],
}

extern "C" {
    fn cutf8_shim_init(step: *mut GconvStep) -> c_int;
    fn cutf8_shim_end(step: *mut GconvStep);
    #[allow(clippy::too_many_arguments)]
    fn cutf8_shim_gconv(
        step: *mut GconvStep,
        data: *mut GconvStepData,
        inptrp: *mut *const u8,
        inend: *const u8,
        outbufstart: *mut *mut u8,
        irreversible: *mut usize,
        do_flush: c_int,
        consume_incomplete: c_int,
    ) -> c_int;
}

/// glibc's entry: set up one conversion step.
///
/// # Safety
/// Called by glibc with a valid step.
#[no_mangle]
pub unsafe extern "C" fn gconv_init(step: *mut GconvStep) -> c_int {
    // SAFETY: glibc's pointer, passed through.
    unsafe { cutf8_shim_init(step) }
}

/// glibc's entry: drop a step (nothing allocated).
///
/// # Safety
/// Called by glibc with a valid step.
#[no_mangle]
pub unsafe extern "C" fn gconv_end(step: *mut GconvStep) {
    // SAFETY: glibc's pointer, passed through.
    unsafe { cutf8_shim_end(step) }
}

/// glibc's entry: convert (see shim/gconv.c).
///
/// # Safety
/// Called by glibc per its step protocol.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn gconv(
    step: *mut GconvStep,
    data: *mut GconvStepData,
    inptrp: *mut *const u8,
    inend: *const u8,
    outbufstart: *mut *mut u8,
    irreversible: *mut usize,
    do_flush: c_int,
    consume_incomplete: c_int,
) -> c_int {
    // SAFETY: glibc's pointers, passed through unchanged.
    unsafe {
        cutf8_shim_gconv(
            step,
            data,
            inptrp,
            inend,
            outbufstart,
            irreversible,
            do_flush,
            consume_incomplete,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_prefix_stops_before_a_cut_unit() {
        assert_eq!(complete_prefix(b"ab\xE0\x80", disk_incomplete), 2);
        assert_eq!(complete_prefix(b"ab\xE0\x80\x80", disk_incomplete), 5);
        assert_eq!(complete_prefix(b"\x80\x80", disk_incomplete), 2);
        assert_eq!(complete_prefix(b"ab\xF0\x90", view_incomplete), 2);
    }

    #[test]
    fn full_output_is_exact() {
        // "aé" view: 61 C3 A9; disk: 61 C1 89. Room for 2 bytes: 'a' only.
        let mut dst = [0u8; 2];
        assert_eq!(
            decode_utf8(b"a\xC1\x89", &mut dst),
            (Res::Full, 1, 1),
            "é needs 2 bytes, 1 left"
        );
    }
}
