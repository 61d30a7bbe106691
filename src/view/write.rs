//! Writes to a view, planned: what a write, a truncate or a zeroed range
//! does to the disk bytes, decided from the index and two small [`Span`]s,
//! without touching a file. The I/O layer (`crate::io::write`) reads the
//! spans it asks for and carries the plan out.
//!
//! A change of view bytes `[o, e)` changes the disk bytes of only a small
//! window: W (docs/format.md) restarts at every byte that is not a continuation
//! byte, so the window runs from the last such byte before `o` (when the
//! change could extend the unit it starts) to the first such byte at or
//! after `e` (at most [`REACH`] bytes on each side). The window's new disk
//! bytes then go back one of three ways ([`Way`]): in place when they are as
//! long as the old ones, as an extension when the window is the end of the
//! file, or by rewriting the tail of the file (under the journal).

use crate::codec::encode_lossless;
use cutf8::MAGIC;

use super::{is_cont, Error, OffsetIndex, Span};

/// Longest unit minus one, in either encoding: how far a change can reach
/// into its neighbours.
pub const REACH: u64 = 7;

/// How the new disk bytes of a window go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// As long as the old ones: overwritten in place, O(k).
    InPlace,
    /// Longer, and the window is the end of the file: one write that
    /// extends it.
    Extend,
    /// Anything else shifts the text after the window: the new tail of the
    /// file (window, then the old bytes from `old_end`) replaces the old.
    Tail,
}

/// A change of disk bytes `[at, old_end)` (offsets after the magic) to
/// `new` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub at: u64,
    pub old_end: u64,
    pub new: Vec<u8>,
    pub way: Way,
}

impl Patch {
    /// The disk length after the patch.
    pub fn new_disk_len(&self, disk_len: u64) -> u64 {
        disk_len - (self.old_end - self.at) + self.new.len() as u64
    }
}

/// A zeroed range: disk bytes `[at, old_end)` become `left`, `zeros` NUL
/// bytes, then `right`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZeroPatch {
    pub at: u64,
    pub old_end: u64,
    pub left: Vec<u8>,
    pub zeros: u64,
    pub right: Vec<u8>,
    pub way: Way,
}

impl ZeroPatch {
    pub fn new_len(&self) -> u64 {
        self.left.len() as u64 + self.zeros + self.right.len() as u64
    }
}

/// A size change of the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resize {
    /// To nothing: the backing file is emptied, magic number included (a
    /// file with no content takes the encoding of what is next written).
    Empty,
    /// Longer: the disk bytes grow to `disk_len` with NULs (which look the
    /// same on both sides).
    Extend { disk_len: u64 },
    /// Shorter: cut the disk bytes at `at`, then append `tail` (the first
    /// bytes of a unit the cut falls in, re-encoded alone).
    Cut { at: u64, tail: Vec<u8> },
}

/// The view ranges whose spans [`plan_write`] and [`plan_zero`] need for
/// a change of `[view_off, end)`: left and right.
pub fn spans_for(view_off: u64, end: u64) -> [(u64, u64); 2] {
    [
        (view_off.saturating_sub(REACH), view_off + 1),
        (end, end + REACH + 1),
    ]
}

/// W of a window, or why W cannot store it (`base`: the window's view
/// offset, to name where).
fn encode(view: &[u8], base: u64) -> Result<Vec<u8>, Error> {
    encode_lossless(view).map_err(|e| Error::Unstorable {
        problem: e.malformed.problem,
        offset: base + e.offset,
    })
}

/// The edges of the window a change of `[view_off, end)` re-encodes: the
/// start of the unit `view_off` is inside of (`view_off` itself when it
/// starts a unit and `extends_left` is false: the change's first byte
/// cannot complete the unit before), and the view bytes from `end` up to
/// the first non-continuation byte (or the end, or past every lead's reach).
fn edges(left: &Span, right: &Span, view_off: u64, end: u64, extends_left: bool) -> (u64, Vec<u8>) {
    let [(base, hi), (rlo, rhi)] = spans_for(view_off, end);
    let before = left.view_bytes(base, hi);
    let at = (view_off - base) as usize;
    let mut u = view_off;
    if extends_left || before.get(at).is_some_and(|&b| is_cont(b)) {
        if let Some(t) = before[..at.min(before.len())]
            .iter()
            .rposition(|&b| !is_cont(b))
        {
            u = base + t as u64;
        }
    }
    let mut after = right.view_bytes(rlo, rhi);
    let keep = after
        .iter()
        .position(|&b| !is_cont(b))
        .unwrap_or(after.len().min(REACH as usize));
    after.truncate(keep);
    (u, after)
}

/// The disk range of the window `[u, p)` of the view; [`Error::Changed`]
/// when the spans do not agree with the index (the file changed).
fn disk_window(
    index: &OffsetIndex,
    left: &Span,
    right: &Span,
    u: u64,
    p: u64,
) -> Result<(u64, u64), Error> {
    let at = left.disk_offset_of(u);
    let old_end = right.disk_offset_of(p);
    if at > old_end || old_end > index.disk_len() {
        return Err(Error::Changed);
    }
    Ok((at, old_end))
}

fn way(index: &OffsetIndex, old_end: u64, old_len: u64, new_len: u64) -> Way {
    if new_len == old_len {
        Way::InPlace
    } else if old_end == index.disk_len() && new_len > old_len {
        Way::Extend
    } else {
        Way::Tail
    }
}

/// Plans writing `data` at `view_off` (at most the view's length; the
/// caller fills a gap first) from the spans of [`spans_for`]`(view_off,
/// view_off + data.len())`. Fails, planning nothing, when W cannot store the
/// result.
pub fn plan_write(
    index: &OffsetIndex,
    left: &Span,
    right: &Span,
    view_off: u64,
    data: &[u8],
) -> Result<Patch, Error> {
    let end = view_off + data.len() as u64;
    left.check()?;
    right.check()?;
    // `data` starting with a continuation byte may complete the unit before.
    let (u, after) = edges(
        left,
        right,
        view_off,
        end,
        data.first().is_some_and(|&b| is_cont(b)),
    );
    let p = end + after.len() as u64;
    let before = left.view_bytes(u, view_off);
    let new = if before.is_empty() && after.is_empty() {
        // The usual case (a write on unit boundaries, as every sequential
        // one): `data` is the window, encoded without a copy.
        encode(data, u)?
    } else {
        let mut window = before;
        window.extend_from_slice(data);
        window.extend_from_slice(&after);
        encode(&window, u)?
    };
    let (at, old_end) = disk_window(index, left, right, u, p)?;
    let way = way(index, old_end, old_end - at, new.len() as u64);
    Ok(Patch {
        at,
        old_end,
        new,
        way,
    })
}

/// Plans an append that starts a unit: `data` at the view's end, its
/// first byte not a continuation byte. W restarts at every byte that is
/// not a continuation byte, so the bytes already in the file stay as they
/// are and the window is `data` alone: no span is needed (every sequential
/// write but one that continues a character the last write cut). `None`
/// when that is not the case: [`plan_write`] plans it then, and where
/// both plan, they plan the same.
pub fn plan_append(
    index: &OffsetIndex,
    view_off: u64,
    data: &[u8],
) -> Option<Result<Patch, Error>> {
    if view_off != index.view_len() || data.first().is_none_or(|&b| is_cont(b)) {
        return None;
    }
    let at = index.disk_len();
    Some(encode(data, view_off).map(|new| Patch {
        at,
        old_end: at,
        way: way(index, at, 0, new.len() as u64),
        new,
    }))
}

/// Plans replacing view bytes `[view_off, view_off + len)` (inside the
/// view) with NULs, from the spans of [`spans_for`]. Bytes of a character
/// cut by either boundary stay as they are (a lead byte and its first
/// continuation bytes before the range, stray continuation bytes after it),
/// which the lossless view shows unchanged: what a native file holds after
/// the same call.
pub fn plan_zero(
    index: &OffsetIndex,
    left: &Span,
    right: &Span,
    view_off: u64,
    len: u64,
) -> Result<ZeroPatch, Error> {
    let end = view_off + len;
    left.check()?;
    right.check()?;
    let (u, after) = edges(left, right, view_off, end, false);
    let p = end + after.len() as u64;
    let lbytes = encode(&left.view_bytes(u, view_off), u)?;
    let rbytes = encode(&after, end)?;
    let (at, old_end) = disk_window(index, left, right, u, p)?;
    let new_len = lbytes.len() as u64 + len + rbytes.len() as u64;
    let way = way(index, old_end, old_end - at, new_len);
    Ok(ZeroPatch {
        at,
        old_end,
        left: lbytes,
        zeros: len,
        right: rbytes,
        way,
    })
}

/// The view range whose span [`plan_resize`] needs to shorten to `new_len`.
pub fn span_for_resize(new_len: u64) -> (u64, u64) {
    (new_len.saturating_sub(REACH), new_len + 1)
}

/// Plans a size change to `new_len` view bytes; `span` is of
/// [`span_for_resize`] (unused unless the view gets shorter). The cut is at
/// the last unit boundary at or before `new_len`; the bytes of a unit cut
/// in two stay as they are in the view (W passes them through).
pub fn plan_resize(index: &OffsetIndex, span: &Span, new_len: u64) -> Result<Resize, Error> {
    let vlen = index.view_len();
    if new_len == 0 {
        return Ok(Resize::Empty);
    }
    if new_len >= vlen {
        return Ok(Resize::Extend {
            disk_len: index.disk_len() + (new_len - vlen),
        });
    }
    span.check()?;
    let (base, hi) = span_for_resize(new_len);
    let probe = span.view_bytes(base, hi);
    let at = (new_len - base) as usize;
    let mut u = new_len;
    if probe.get(at).is_some_and(|&b| is_cont(b)) {
        if let Some(t) = probe[..at.min(probe.len())]
            .iter()
            .rposition(|&b| !is_cont(b))
        {
            u = base + t as u64;
        }
    }
    let tail = encode(&span.view_bytes(u, new_len), u)?;
    let at = span.disk_offset_of(u);
    if at > index.disk_len() {
        return Err(Error::Changed);
    }
    Ok(Resize::Cut { at, tail })
}

/// The disk range (offsets after the magic) that holds, or will hold, view
/// bytes `[view_off, view_off + len)`: a view byte never takes more bytes on
/// disk than in the view, so the range's disk bytes lie in `[view_off -
/// growth, view_off + len)` (growth: how much longer the view is than the
/// disk); past the end, view and disk offsets differ by the growth.
pub fn plan_allocate(index: &OffsetIndex, view_off: u64, len: u64) -> Result<(u64, u64), Error> {
    let end = view_off.checked_add(len).ok_or(Error::TooLarge)?;
    let vlen = index.view_len();
    let growth = vlen.saturating_sub(index.disk_len());
    let from = if view_off >= vlen {
        index.disk_len() + (view_off - vlen)
    } else {
        view_off.saturating_sub(growth)
    };
    let to = if end > vlen {
        index.disk_len() + (end - vlen)
    } else {
        end
    };
    Ok((from, to.max(from + 1)))
}

/// The whole content of a new corrected file holding `data`: the magic
/// number and W(data), with its index.
pub fn plan_start(data: &[u8]) -> Result<(Vec<u8>, OffsetIndex), Error> {
    let disk = encode(data, 0)?;
    let index = OffsetIndex::from_bytes(&disk);
    let mut all = Vec::with_capacity(disk.len() + MAGIC.len());
    all.extend_from_slice(&MAGIC);
    all.extend_from_slice(&disk);
    Ok((all, index))
}

/// Copies the part of a write of `data` at view offset `data_off` that
/// falls in `buf`, which holds bytes from offset `buf_off`.
pub fn overlay(buf: &mut [u8], buf_off: u64, data_off: u64, data: &[u8]) {
    let (lo, hi) = (buf_off, buf_off + buf.len() as u64);
    let (wlo, whi) = (data_off, data_off + data.len() as u64);
    if wlo < hi && whi > lo {
        let s = wlo.max(lo);
        let e = whi.min(hi);
        buf[(s - lo) as usize..(e - lo) as usize]
            .copy_from_slice(&data[(s - wlo) as usize..(e - wlo) as usize]);
    }
}
