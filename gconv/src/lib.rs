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
//! The magic number is handled as glibc's `UTF-16` handles a BOM: on the
//! first call for a descriptor, decoding drops it when the input begins with
//! it (and decodes input without it), encoding writes it. The
//! `CORRECTED-UTF-8-NOMAGIC` variant does neither (like `cutf8
//! --no-magic`), for tools that must not see it.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cutf8::unit::{
    decode_disk_unit, decode_view_unit, encode_disk, encode_view, DiskUnit, ViewUnit,
};
use cutf8::{Decoder, Encoder, Status, MAGIC};

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

fn is_cont(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Length a lead byte announces on disk; FE/FF count as 1 (the strict
/// decoder rejects them at their first byte, whatever follows).
fn disk_lead_len(b: u8) -> usize {
    match b {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        0xF8..=0xFB => 5,
        0xFC..=0xFD => 6,
        _ => 1,
    }
}

/// Length a lead byte announces in UTF-8 plus the extended forms.
/// (FE, the extended form's lead, counts as 1: strict encoding rejects it
/// at once.)
fn view_lead_len(b: u8) -> usize {
    disk_lead_len(b)
}

/// The end of the longest prefix of `src` that does not end inside a unit
/// (a lead byte followed by fewer continuation bytes than it announces).
fn complete_prefix(src: &[u8], lead_len: fn(u8) -> usize) -> usize {
    let n = src.len();
    for p in (n.saturating_sub(7)..n).rev() {
        if !is_cont(src[p]) {
            return if lead_len(src[p]) > n - p { p } else { n };
        }
    }
    n
}

/// Convert as much of `src` into `dst` as fits, stopping at the first unit
/// that cannot be converted. Returns what happened, bytes read and written.
/// On [`Res::Illegal`] and [`Res::Incomplete`] `read` is the offset of the
/// unit's first byte; on [`Res::Full`] the next unit does not fit in what is
/// left of `dst` (so a re-run with `dst` cut at a unit boundary ends exactly
/// there).
pub fn convert(kind: c_int, src: &[u8], dst: &mut [u8]) -> (Res, usize, usize) {
    match kind & !NOMAGIC {
        DECODE_UCS4 => decode_ucs4(src, dst),
        ENCODE_UCS4 => encode_ucs4(src, dst),
        DECODE_UTF8 => decode_utf8(src, dst),
        ENCODE_UTF8 => encode_utf8(src, dst),
        _ => (Res::Bug, 0, 0),
    }
}

/// The first call of a descriptor: the magic number. Returns
/// [`Res::Proceed`] to go on with [`convert`], or a result to return.
///
/// `sent` is per-descriptor state (in glibc's `mbstate_t`, zeroed by a
/// reset): how many bytes of the magic number earlier calls wrote.
pub fn prologue(kind: c_int, src: &[u8], dst: &mut [u8], sent: &mut c_int) -> (Res, usize, usize) {
    let nomagic = kind & NOMAGIC != 0;
    match (kind & !NOMAGIC, nomagic) {
        (DECODE_UCS4 | DECODE_UTF8, false) => {
            if src.is_empty() {
                // Nothing to decide on yet: this call does not count as the
                // first (utf-16.c does the same).
                (Res::Empty, 0, 0)
            } else if src.starts_with(&MAGIC) {
                (Res::Proceed, MAGIC.len(), 0)
            } else if !src.is_empty() && src.len() < MAGIC.len() && MAGIC.starts_with(src) {
                // Undecided until more input comes, as utf-16.c with one
                // byte of a BOM.
                (Res::Incomplete, 0, 0)
            } else {
                (Res::Proceed, 0, 0)
            }
        }
        (DECODE_UCS4 | DECODE_UTF8, true) => (Res::Proceed, 0, 0),
        (ENCODE_UCS4 | ENCODE_UTF8, false) => {
            // Written piecewise if the output is short (iconv(3) with a
            // tiny buffer): `*sent` counts what earlier calls wrote.
            let done = (*sent).clamp(0, MAGIC.len() as c_int) as usize;
            let n = (MAGIC.len() - done).min(dst.len());
            dst[..n].copy_from_slice(&MAGIC[done..done + n]);
            *sent = (done + n) as c_int;
            if done + n < MAGIC.len() {
                return (Res::Full, 0, n);
            }
            // `cutf8 encode`: input that already begins with the magic
            // number is an error at byte 0.
            if kind & !NOMAGIC == ENCODE_UTF8 && src.starts_with(&MAGIC) {
                return (Res::Illegal, 0, n);
            }
            (Res::Proceed, 0, n)
        }
        (ENCODE_UCS4 | ENCODE_UTF8, true) => {
            // `cutf8 encode --no-magic`: text that would encode to the magic
            // number would be read back without it.
            let hit = if kind & !NOMAGIC == ENCODE_UTF8 {
                src.starts_with(&VIEW_MAGIC)
            } else {
                src.len() >= 16
                    && UCS_MAGIC
                        .iter()
                        .enumerate()
                        .all(|(k, &c)| read_u32(&src[4 * k..]) == c)
            };
            if hit {
                (Res::Illegal, 0, 0)
            } else {
                (Res::Proceed, 0, 0)
            }
        }
        _ => (Res::Bug, 0, 0),
    }
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
    let safe = complete_prefix(src, disk_lead_len);
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
    let safe = complete_prefix(src, view_lead_len);
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
/// See [`with_buffers`].
#[no_mangle]
pub unsafe extern "C" fn cutf8_gconv_convert(
    kind: c_int,
    inp: *mut *const u8,
    inend: *const u8,
    outp: *mut *mut u8,
    outend: *mut u8,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { with_buffers(inp, inend, outp, outend, |s, d| convert(kind, s, d)) }
}

/// C entry for [`prologue`] (called by shim/gconv.c).
///
/// # Safety
/// See [`with_buffers`]; `sent` is valid.
#[no_mangle]
pub unsafe extern "C" fn cutf8_gconv_prologue(
    kind: c_int,
    inp: *mut *const u8,
    inend: *const u8,
    outp: *mut *mut u8,
    outend: *mut u8,
    sent: *mut c_int,
) -> c_int {
    // SAFETY: forwarded contract; `sent` points into the descriptor's
    // mbstate_t (the shim passes &data->__statep->__count).
    unsafe {
        let sent = &mut *sent;
        with_buffers(inp, inend, outp, outend, |s, d| prologue(kind, s, d, sent))
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
        assert_eq!(complete_prefix(b"ab\xE0\x80", disk_lead_len), 2);
        assert_eq!(complete_prefix(b"ab\xE0\x80\x80", disk_lead_len), 5);
        assert_eq!(complete_prefix(b"\xFE\x80", view_lead_len), 2);
        assert_eq!(complete_prefix(b"\x80\x80", disk_lead_len), 2);
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
