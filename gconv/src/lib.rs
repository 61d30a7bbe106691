//! `CORRECTED-UTF-8` and `CORRECTED-UTF-8-NOMAGIC` for glibc's iconv: a
//! gconv module (docs/charset.md).
//!
//! Two halves. `shim/gconv.c` speaks glibc's step protocol against the
//! system's `<gconv.h>` (struct layouts, calling the next step, re-running a
//! conversion up to where the next step stopped); this crate does the
//! converting, over [`cutf8`], as pure functions of (input, output room,
//! state word): [`convert`] and [`flush`]. Why a C shim and not Rust alone:
//! the step structures are glibc-internal and their layout is only promised
//! by the header of the glibc at hand (`__gconv_step_data` lost a member in
//! 2.35's lifetime), so the C compiler reads it at build time instead of a
//! hand-copied `#[repr(C)]` that would silently go stale.
//!
//! Each charset is one step each way, to and from UTF-8 (glibc's
//! `ISO-10646/UTF8`); glibc reaches every other charset through its own
//! UTF-8 ⇄ `INTERNAL` step. The conversion is the codec's strict
//! [`Decoder`] and [`Encoder`], magic number handling included, so the
//! module converts exactly as `cutf8 decode` and `cutf8 encode` do:
//!
//! * `CORRECTED-UTF-8` decoding requires the magic number at the start and
//!   drops it (input without it fails at offset 0; empty input is empty);
//!   encoding writes it before the first character (nothing for empty
//!   input).
//! * `CORRECTED-UTF-8-NOMAGIC` decodes text known to be Corrected UTF-8
//!   without the magic number (one at the start is dropped, as by `cutf8
//!   decode --no-magic`); encoding writes none.
//! * Both refuse what strict conversion refuses, a magic number inside the
//!   text included, at the first byte of the offending unit, the byte
//!   offset `cutf8` reports. A unit cut by the end of the input is
//!   `Incomplete` (iconv(3): `EINVAL`, feed it again with more input).
//!
//! Between calls the descriptor keeps one int, glibc's `mbstate_t.__count`:
//! the codec's [`MagicState`] (whether the start of the stream is behind,
//! how much of the magic number went out, and the units of a magic number
//! a call's input ended with, which the next call, or the final flush,
//! decides on). Every call makes a converter from that word, so that a
//! call can be run again from the same word (glibc's re-run up to where the
//! next step stopped), and hands the codec no unit cut by the end of its
//! input (it comes again with the next input), so that the word is the
//! converter's whole state. One exception keeps iconv(3)'s contract: at the
//! start of a `CORRECTED-UTF-8` input, the beginning of a magic number at
//! the end of a call's input is handed back as incomplete, not held, as
//! UTF-16 hands back half a byte order mark.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cutf8::unit::{decode_disk_unit, decode_view_unit, DiskUnit, ViewUnit};
use cutf8::{DecodeMagic, Decoder, EncodeMagic, Encoder, MagicState, Status, MAX_UNIT_LEN};

/// Corrected UTF-8 → UTF-8.
pub const DECODE: c_int = 2;
/// UTF-8 → Corrected UTF-8.
pub const ENCODE: c_int = 3;
/// Flag: the `-NOMAGIC` charset (no magic number written or required).
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
    /// A panic was caught, or a state word this module did not write (a
    /// bug): `__GCONV_INTERNAL_ERROR`.
    Bug = 5,
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

/// FE and FF are no exception: strict encoding refuses them whatever
/// follows.
fn view_incomplete(s: &[u8]) -> bool {
    s[0] < 0xFE && decode_view_unit(s, false) == ViewUnit::Incomplete
}

/// Either converter of a kind, made from a state word.
#[derive(Clone)]
enum Step {
    D(Decoder),
    E(Encoder),
}

impl Step {
    /// `None` for a kind or a state word this module does not make.
    fn new(kind: c_int, state: c_int) -> Option<Step> {
        let saved = MagicState::from_bits(state as u32)?;
        let nomagic = kind & NOMAGIC != 0;
        match kind & !NOMAGIC {
            DECODE => {
                let magic = if nomagic {
                    DecodeMagic::Strip
                } else {
                    DecodeMagic::Expect
                };
                Some(Step::D(Decoder::strict().with_magic(magic).resume(saved)))
            }
            ENCODE => {
                let magic = if nomagic {
                    EncodeMagic::Off
                } else {
                    EncodeMagic::Write
                };
                Some(Step::E(Encoder::strict().with_magic(magic).resume(saved)))
            }
            _ => None,
        }
    }

    fn convert(&mut self, src: &[u8], dst: &mut [u8], last: bool) -> (Status, usize, usize) {
        match self {
            Step::D(d) => d.convert(src, dst, last),
            Step::E(e) => e.convert(src, dst, last),
        }
    }

    fn state(&self) -> MagicState {
        match self {
            Step::D(d) => d.magic_state(),
            Step::E(e) => e.magic_state(),
        }
    }
}

/// Convert as much of `src` into `dst` as fits, stopping at the first unit
/// that cannot be converted. Returns what happened, bytes read and written.
/// On [`Res::Illegal`] and [`Res::Incomplete`] `read` is the offset of the
/// unit's first byte (or 0, when it began in an earlier call); on
/// [`Res::Full`] the next unit does not fit in what is left of `dst` (so a
/// re-run with `dst` cut at a unit boundary, from the same `state`, ends
/// exactly there).
///
/// `state` is the step's word in the descriptor's `mbstate_t` (see the
/// module documentation).
pub fn convert(kind: c_int, src: &[u8], dst: &mut [u8], state: &mut c_int) -> (Res, usize, usize) {
    let Some(step) = Step::new(kind, *state) else {
        return (Res::Bug, 0, 0);
    };
    let decode = kind & !NOMAGIC == DECODE;
    // A unit cut by the end of the input goes back to the caller: it is
    // handed to the codec only to decide on magic number bytes held before
    // it, and taken back.
    let cut = if decode {
        complete_prefix(src, disk_incomplete)
    } else {
        complete_prefix(src, view_incomplete)
    };
    let (status, r, w, after, fed) = if cut < src.len() {
        let tried = run(step.clone(), src, dst);
        if tried.3.held() > 0 && tried.1 == src.len() {
            // What may be a magic number runs into the cut unit (held
            // bytes end where the input does): hold only what comes
            // before it.
            let (status, r, w, after) = run(step, &src[..cut], dst);
            (status, r, w, after, cut)
        } else {
            let (status, r, w, after) = tried;
            (status, r, w, after, src.len())
        }
    } else {
        let (status, r, w, after) = run(step, src, dst);
        (status, r, w, after, src.len())
    };
    // A reserved unit at the end of the input, which strict decoding
    // refuses whatever follows (the decoder waits for its end): the error,
    // everything before it converted.
    let reserved = match status {
        Status::InputEmpty if decode => reserved_at_end(&src[..fed]),
        _ => None,
    };
    let res = match status {
        Status::Malformed(m) => (Res::Illegal, r.saturating_sub(m.len), w),
        Status::OutputFull => (Res::Full, r, w),
        Status::InputEmpty if reserved.is_some() => (Res::Illegal, reserved.unwrap_or(r), w),
        Status::InputEmpty
            if decode && kind & NOMAGIC == 0 && after.at_start() && after.held() > 0 =>
        {
            // The beginning of the magic number the input must start with:
            // incomplete input, handed back, the state as it was.
            return (Res::Incomplete, r - after.held(), w);
        }
        Status::InputEmpty if cut < src.len() => (Res::Incomplete, r.min(cut), w),
        Status::InputEmpty => (Res::Empty, r, w),
    };
    *state = after.to_bits() as c_int;
    res
}

/// Where an FE or FF lead begins the continuation bytes `s` ends with.
fn reserved_at_end(s: &[u8]) -> Option<usize> {
    let lead = s.iter().rposition(|&b| !cutf8::unit::is_cont(b))?;
    (s[lead] >= 0xFE).then_some(lead)
}

/// One conversion of `src` (not the end of the input) by `step`.
fn run(mut step: Step, src: &[u8], dst: &mut [u8]) -> (Status, usize, usize, MagicState) {
    let (status, r, w) = step.convert(src, dst, false);
    (status, r, w, step.state())
}

/// The final flush: units of a magic number held at the end of the input
/// are text after all (or, at the start of a `CORRECTED-UTF-8` encoder's
/// input that began with the magic number's bytes, an error). Returns
/// [`Res::Empty`], [`Res::Full`] or [`Res::Illegal`], and bytes written.
pub fn flush(kind: c_int, dst: &mut [u8], state: &mut c_int) -> (Res, usize) {
    let Some(mut step) = Step::new(kind, *state) else {
        return (Res::Bug, 0);
    };
    let (status, _, w) = step.convert(&[], dst, true);
    *state = step.state().to_bits() as c_int;
    match status {
        Status::InputEmpty => (Res::Empty, w),
        Status::OutputFull => (Res::Full, w),
        Status::Malformed(_) => (Res::Illegal, w),
    }
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
        let mut state = 0;
        assert_eq!(
            convert(DECODE | NOMAGIC, b"a\xC1\x89", &mut dst, &mut state),
            (Res::Full, 1, 1),
            "é needs 2 bytes, 1 left"
        );
    }

    #[test]
    fn a_state_word_it_did_not_write_is_a_bug() {
        let mut dst = [0u8; 8];
        let mut state = -1;
        assert_eq!(
            convert(DECODE, b"a", &mut dst, &mut state),
            (Res::Bug, 0, 0)
        );
        assert_eq!(convert(1, b"a", &mut dst, &mut 0), (Res::Bug, 0, 0));
    }

    /// Feed `input` to a kind in calls cut at `cut`, as a careful iconv(3)
    /// caller does (an incomplete tail comes again with the next call),
    /// then flush: the output and the error's offset.
    fn split(kind: c_int, input: &[u8], cut: usize) -> (Vec<u8>, Option<usize>) {
        let mut state = 0;
        let mut out = Vec::new();
        let mut done = 0;
        for end in [cut, input.len()] {
            let mut buf = [0u8; 64];
            let (res, r, w) = convert(kind, &input[done..end], &mut buf, &mut state);
            out.extend_from_slice(&buf[..w]);
            match res {
                Res::Empty | Res::Incomplete => done += r,
                Res::Illegal => return (out, Some(done + r)),
                other => panic!("{other:?}"),
            }
        }
        if done < input.len() {
            return (out, Some(done));
        }
        let mut buf = [0u8; 64];
        let (res, w) = flush(kind, &mut buf, &mut state);
        out.extend_from_slice(&buf[..w]);
        (out, (res != Res::Empty).then_some(input.len()))
    }

    #[test]
    fn any_split_gives_the_whole_buffer_outcome() {
        let m = cutf8::MAGIC;
        let t = cutf8::MAGIC_TEXT;
        let cases: [(c_int, Vec<u8>); 6] = [
            (ENCODE, t[..4].to_vec()),
            (ENCODE, m[..3].to_vec()),
            (ENCODE, [&m[..3], &b"\xED\x9F\xBF"[..]].concat()),
            (DECODE | NOMAGIC, m[..3].to_vec()),
            (DECODE, [&m[..], &m[..3], &b"\xED\x80\x80z"[..]].concat()),
            (DECODE, [&m[..], "\u{10FFFF}ab".as_bytes()].concat()),
        ];
        for (kind, input) in cases {
            let want = split(kind, &input, input.len());
            for cut in 0..=input.len() {
                assert_eq!(
                    split(kind, &input, cut),
                    want,
                    "{kind} {input:02X?} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn the_start_of_a_required_magic_number_is_incomplete_input() {
        let mut dst = [0u8; 16];
        let mut state = 0;
        let magic = cutf8::MAGIC;
        assert_eq!(
            convert(DECODE, &magic[..3], &mut dst, &mut state),
            (Res::Incomplete, 0, 0)
        );
        assert_eq!(state, 0, "nothing held");
        assert_eq!(
            convert(DECODE, &magic, &mut dst, &mut state),
            (Res::Empty, 8, 0)
        );
        assert_eq!(
            convert(DECODE, b"abc", &mut dst, &mut 0),
            (Res::Illegal, 0, 0)
        );
        // -NOMAGIC holds it: U+10E7D alone is text, written by the flush.
        let mut state = 0;
        assert_eq!(
            convert(DECODE | NOMAGIC, &magic[..3], &mut dst, &mut state),
            (Res::Empty, 3, 0)
        );
        assert_eq!(
            flush(DECODE | NOMAGIC, &mut dst, &mut state),
            (Res::Empty, 4)
        );
        assert_eq!(&dst[..4], "\u{10E7D}".as_bytes());
    }
}
