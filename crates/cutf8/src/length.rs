//! Length-only passes: how long the other side of some bytes is, without
//! converting them ([`view_len`], [`disk_len`], [`LengthCounter`]).
//!
//! The key fact: most units keep their length. A disk unit grows by
//! one byte in the view exactly when it is a complete sequence whose code
//! point needs a longer form there (U+0800–U+089F, U+10000–U+1109F, and the
//! ranges just above U+1FFFFF, U+3FFFFFF and U+7FFFFFFF); ill-formed bytes
//! pass through one for one. Such units all begin with one of the lead bytes
//! DD DE DF EE EF F7 FB FD, and a lead byte (≥ C0) always begins a unit, so the
//! scan only has to look at those bytes, skipping everything else a vector
//! at a time. FE units are watched as well: FE plus six
//! continuation bytes with a value in U+80000000–U+8421109F is the one unit
//! W would not give back unchanged (an *exempt* unit).
//!
//! In the other direction, a view unit shrinks by one byte on disk exactly
//! when W stores it in the next shorter form: lead bytes E0 F0 F8 FC FE.

use super::index::{BlockCount, DiskEvent};
use super::scalar::{
    classify_view_value, disk_cp, is_cont, lead_len, payload, view_len_of, ViewUnit,
};
use super::simd::{Level, Path};
use super::MAX_CODE_POINT;

/// `Some(len)` when `s` (starting at a lead announcing `len`) holds a
/// complete sequence, `None` when it is cut by a non-continuation byte, and
/// `Err` when the end of `s` cuts it and more input may follow.
#[inline(always)]
fn complete(s: &[u8], len: usize, at_end: bool) -> Result<bool, ()> {
    for k in 1..len {
        match s.get(k) {
            Some(&c) if is_cont(c) => {}
            Some(_) => return Ok(false),
            None if at_end => return Ok(false),
            None => return Err(()),
        }
    }
    Ok(true)
}

/// Scan Corrected UTF-8 bytes for units whose view length differs.
///
/// Returns how many bytes were decided: all of `buf` when `at_end`,
/// otherwise possibly all but a last unit (at most six bytes) that the next
/// chunk decides — hand those bytes in again at the front of it. `buf` may
/// start anywhere except inside a complete sequence whose lead it lacks.
pub(crate) fn scan_disk(
    p: Path,
    buf: &[u8],
    at_end: bool,
    mut event: impl FnMut(DiskEvent),
) -> usize {
    scan(p, buf, false, |i, sure| {
        if sure {
            event(DiskEvent::Grow(i));
            Ok(())
        } else {
            disk_unit(buf, i, at_end, &mut event)
        }
    })
}

/// Scan view bytes for units W stores one byte shorter; `shrink` gets each
/// unit's offset. Same chunking contract as [`scan_disk`].
pub(crate) fn scan_view(p: Path, buf: &[u8], at_end: bool, mut shrink: impl FnMut(usize)) -> usize {
    scan(p, buf, true, |i, sure| {
        if sure {
            shrink(i);
            Ok(())
        } else {
            view_unit(buf, i, at_end, &mut shrink)
        }
    })
}

/// Call `unit` on every candidate byte of `buf` in order (see
/// `Path::find_disk_candidate`), with `true` when the vector code found
/// that the unit there certainly changes length; `unit` returns `Err` when
/// the unit is cut by the end of `buf`, which ends the scan at that offset.
/// Sparse candidates are skipped to a vector at a time; where they are
/// dense, each block's candidates come from its masks, block after block
/// until one holds none (no search before each).
#[inline(always)]
fn scan(
    p: Path,
    buf: &[u8],
    view: bool,
    mut unit: impl FnMut(usize, bool) -> Result<(), ()>,
) -> usize {
    let mut i = 0;
    loop {
        i = if view {
            p.find_view_candidate(buf, i)
        } else {
            p.find_disk_candidate(buf, i)
        };
        if i == buf.len() {
            return i;
        }
        let Some((exact, other, lanes)) = p.candidate_block(buf, i, view) else {
            // The last bytes: this candidate alone.
            if unit(i, false).is_err() {
                return i;
            }
            i += 1;
            continue;
        };
        let (mut exact, mut other, mut lanes) = (exact, other, lanes);
        loop {
            let mut mask = exact | other;
            while mask != 0 {
                let k = mask.trailing_zeros();
                mask &= mask - 1;
                let j = i + k as usize;
                if unit(j, exact >> k & 1 == 1).is_err() {
                    return j;
                }
            }
            i += lanes;
            match p.candidate_block(buf, i, view) {
                Some(next) if next.0 | next.1 != 0 => (exact, other, lanes) = next,
                _ => break,
            }
        }
    }
}

/// The candidate at `buf[i]` of a disk scan: report it if it grows or is
/// exempt.
#[inline(always)]
fn disk_unit(
    buf: &[u8],
    i: usize,
    at_end: bool,
    event: &mut impl FnMut(DiskEvent),
) -> Result<(), ()> {
    if let Some(e) = decide_disk(buf, i, at_end)? {
        event(e);
    }
    Ok(())
}

/// Whether the unit at `buf[i]` grows or is exempt (`None`: neither);
/// `Err` when the end of `buf` cuts it and more input may follow.
#[inline(always)]
fn decide_disk(buf: &[u8], i: usize, at_end: bool) -> Result<Option<DiskEvent>, ()> {
    let b = buf[i];
    let len = if b == 0xFE { 7 } else { lead_len(b) };
    if !complete(&buf[i..], len, at_end)? {
        return Ok(None);
    }
    let v = payload(&buf[i..], len);
    Ok(if b == 0xFE {
        (0x8000_0000..=MAX_CODE_POINT as u64)
            .contains(&v)
            .then_some(DiskEvent::Exempt(i))
    } else {
        (view_len_of(disk_cp(v as u32, len)) > len).then_some(DiskEvent::Grow(i))
    })
}

/// Count, per block of `block` bytes, the units of Corrected UTF-8 bytes
/// whose view length differs: what [`scan_disk`] reports one by one,
/// without a call per unit, for an index that only needs the counts.
///
/// `start` is the offset of `buf[0]` in the data the blocks divide (it
/// need not be a block's start); a unit at `buf[p]` belongs to block
/// `(start + p) / block`. `tally` gets the blocks holding any such unit,
/// in increasing order, each once per call (a block cut by the end of one
/// chunk is tallied again by the call for the next). Same chunking
/// contract as [`scan_disk`]: returns how many bytes were decided; hand
/// the rest in again at the front of the next chunk (`start` moved on by
/// the return value).
///
/// Where the vector code runs, whole vectors whose candidates all
/// certainly grow are counted with a popcount each; the other candidates
/// (cut or ill-formed sequences, F7 FB FD FE leads) are decided one by one.
///
/// # Panics
///
/// When `block` is 0.
pub(crate) fn count_disk_blocks(
    p: Path,
    buf: &[u8],
    at_end: bool,
    start: u64,
    block: u64,
    tally: impl FnMut(BlockCount),
) -> usize {
    assert!(block > 0, "count_disk_blocks: a block of 0 bytes");
    count_blocks(p, buf, at_end, start, block, false, tally)
}

/// [`count_disk_blocks`], and with `view` its mirror on view bytes: `grow`
/// counts the units W stores one byte shorter (what [`scan_view`]
/// reports), `exempt` stays 0. `block` is not 0.
fn count_blocks(
    p: Path,
    buf: &[u8],
    at_end: bool,
    start: u64,
    block: u64,
    view: bool,
    mut tally: impl FnMut(BlockCount),
) -> usize {
    let mut cur = BlockCount {
        block: start / block,
        grow: 0,
        exempt: 0,
    };
    // Where block `k` ends, counted in `buf`.
    let block_end = |k: u64| {
        let end = k.saturating_add(1).saturating_mul(block) - start;
        usize::try_from(end).unwrap_or(usize::MAX)
    };
    let mut end = block_end(cur.block);
    let mut flush = |cur: &mut BlockCount| {
        if cur.grow | cur.exempt != 0 {
            tally(*cur);
        }
        cur.grow = 0;
        cur.exempt = 0;
    };
    let decide = |i: usize| {
        if view {
            decide_view(buf, i, at_end).map(|shrinks| shrinks.then_some(DiskEvent::Grow(i)))
        } else {
            decide_disk(buf, i, at_end)
        }
    };
    let below = |k: usize| if k >= 64 { u64::MAX } else { (1u64 << k) - 1 };
    let mut i = 0;
    loop {
        if i >= end {
            flush(&mut cur);
            cur.block = (start + i as u64) / block;
            end = block_end(cur.block);
        }
        // Whole vectors inside the block whose candidates all certainly
        // change length: a popcount each.
        let (j, n) = p.count_changing(buf, i, end, view);
        cur.grow += n;
        i = j;
        if i >= end {
            continue;
        }
        // A vector that holds other candidates or reaches into the next
        // block: its masks, cut at the block's end, the other candidates
        // decided one by one.
        if let Some((exact, mut other, lanes)) = p.candidate_block(buf, i, view) {
            let take = lanes.min(end - i);
            let exact = exact & below(take);
            other &= below(take);
            while other != 0 {
                let k = other.trailing_zeros() as usize;
                other &= other - 1;
                match decide(i + k) {
                    Ok(Some(DiskEvent::Grow(_))) => cur.grow += 1,
                    Ok(Some(DiskEvent::Exempt(_))) => cur.exempt += 1,
                    Ok(None) => {}
                    Err(()) => {
                        cur.grow += (exact & below(k)).count_ones() as u64;
                        flush(&mut cur);
                        return i + k;
                    }
                }
            }
            cur.grow += exact.count_ones() as u64;
            i += take;
            continue;
        }
        // The portable path, and the last bytes: candidate by candidate.
        let c = if view {
            p.find_view_candidate(buf, i)
        } else {
            p.find_disk_candidate(buf, i)
        };
        if c == buf.len() {
            flush(&mut cur);
            return c;
        }
        if c >= end {
            i = c;
            continue;
        }
        match decide(c) {
            Ok(Some(DiskEvent::Grow(_))) => cur.grow += 1,
            Ok(Some(DiskEvent::Exempt(_))) => cur.exempt += 1,
            Ok(None) => {}
            Err(()) => {
                flush(&mut cur);
                return c;
            }
        }
        i = c + 1;
    }
}

/// The candidate at `buf[i]` of a view scan: report it if W stores it
/// shorter.
#[inline(always)]
fn view_unit(buf: &[u8], i: usize, at_end: bool, shrink: &mut impl FnMut(usize)) -> Result<(), ()> {
    if decide_view(buf, i, at_end)? {
        shrink(i);
    }
    Ok(())
}

/// Whether W stores the unit at `buf[i]` shorter; `Err` when the end of
/// `buf` cuts it and more input may follow.
#[inline(always)]
fn decide_view(buf: &[u8], i: usize, at_end: bool) -> Result<bool, ()> {
    let len = lead_len(buf[i]);
    if !complete(&buf[i..], len, at_end)? {
        return Ok(false);
    }
    Ok(match classify_view_value(payload(&buf[i..], len), len) {
        ViewUnit::Char { cp, len } => {
            let mut tmp = [0u8; 8];
            super::scalar::encode_disk(cp, &mut tmp).is_some_and(|n| n < len)
        }
        _ => false,
    })
}

/// Which way a [`LengthCounter`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Disk bytes in, view length out (V).
    DiskToView,
    /// View bytes in, disk length out (W, for content W can store).
    ViewToDisk,
}

/// Streaming length pass: feed chunks of any size, get the other side's
/// length. Holds at most one undecided unit between chunks.
///
/// ```
/// use cutf8::length::LengthCounter;
/// let mut c = LengthCounter::disk_to_view();
/// c.push(&[0xDF]); // U+089F: two bytes on disk, three in the view
/// c.push(&[0xBF, b'\n']);
/// assert_eq!(c.finish(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct LengthCounter {
    dir: Direction,
    path: Path,
    carry: [u8; 8],
    clen: usize,
    input: u64,
    changed: u64,
    exempt: u64,
}

impl LengthCounter {
    /// Count the view length of Corrected UTF-8 bytes (V's output length).
    pub fn disk_to_view() -> Self {
        Self::new(Direction::DiskToView)
    }

    /// Count the disk length of view bytes (W's output length, for content
    /// W can store).
    pub fn view_to_disk() -> Self {
        Self::new(Direction::ViewToDisk)
    }

    fn new(dir: Direction) -> Self {
        LengthCounter {
            dir,
            path: Path::best(),
            carry: [0; 8],
            clen: 0,
            input: 0,
            changed: 0,
            exempt: 0,
        }
    }

    /// Use vector code up to `max` (never more than the CPU has; the
    /// default is the best it has, [`Level::best`]).
    pub fn with_simd_level(mut self, max: Level) -> Self {
        self.path = Path::at_most(max);
        self
    }

    fn scan(&mut self, buf: &[u8], at_end: bool, only_first: bool) -> usize {
        let (changed, exempt, p) = (&mut self.changed, &mut self.exempt, self.path);
        if !only_first {
            let view = self.dir == Direction::ViewToDisk;
            return count_blocks(p, buf, at_end, 0, u64::MAX, view, |c| {
                *changed += c.grow;
                *exempt += c.exempt;
            });
        }
        match self.dir {
            Direction::DiskToView => scan_disk(p, buf, at_end, |e| match e {
                DiskEvent::Grow(p) if !only_first || p == 0 => *changed += 1,
                DiskEvent::Exempt(p) if !only_first || p == 0 => *exempt += 1,
                _ => {}
            }),
            Direction::ViewToDisk => scan_view(p, buf, at_end, |at| {
                if !only_first || at == 0 {
                    *changed += 1
                }
            }),
        }
    }

    /// Count one more chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        self.input += chunk.len() as u64;
        if self.clen > 0 {
            // The carry is one undecided unit: its lead and continuation
            // bytes. Decide it with the first few bytes of this chunk.
            let k = chunk.len().min(8 - self.clen);
            let mut tmp = [0u8; 16];
            tmp[..self.clen].copy_from_slice(&self.carry[..self.clen]);
            tmp[self.clen..self.clen + k].copy_from_slice(&chunk[..k]);
            let n = self.clen + k;
            if self.scan(&tmp[..n], false, true) == 0 {
                self.carry[..n].copy_from_slice(&tmp[..n]);
                self.clen = n;
                return;
            }
            self.clen = 0;
        }
        // Continuation bytes of the carried unit are no candidates, so the
        // chunk can be scanned from its start.
        let done = self.scan(chunk, false, false);
        let rest = &chunk[done..];
        self.carry[..rest.len()].copy_from_slice(rest);
        self.clen = rest.len();
    }

    /// Exempt units seen: FE plus six or more continuation bytes carrying
    /// a value in U+80000000–U+8421109F, the one unit W would not give
    /// back unchanged (disk direction only).
    pub fn exempt_units(&self) -> u64 {
        self.exempt
    }

    /// The length of the other side of everything pushed.
    pub fn finish(mut self) -> u64 {
        if self.clen > 0 {
            let carry = self.carry;
            let n = self.clen;
            self.scan(&carry[..n], true, true);
        }
        match self.dir {
            Direction::DiskToView => self.input + self.changed,
            Direction::ViewToDisk => self.input - self.changed,
        }
    }
}

/// View length of a whole buffer of Corrected UTF-8 (no magic handling).
///
/// ```
/// // U+089F is two bytes on disk and three in the view.
/// assert_eq!(cutf8::length::view_len(&[0xDF, 0xBF, b'\n']), 4);
/// ```
pub fn view_len(disk: &[u8]) -> u64 {
    disk.len() as u64 + changing_units(Path::best(), disk, false)
}

/// Disk length of a whole buffer of view bytes, for content W can store.
///
/// ```
/// // U+0800 is three bytes in UTF-8 and two on disk.
/// assert_eq!(cutf8::length::disk_len("\u{800}\n".as_bytes()), 3);
/// ```
pub fn disk_len(view: &[u8]) -> u64 {
    view.len() as u64 - changing_units(Path::best(), view, true)
}

/// The units of a whole buffer whose length changes (disk bytes: those
/// that grow in the view; `view`: those W stores shorter), counted as one
/// block: a popcount per vector where the vector code runs.
fn changing_units(p: Path, buf: &[u8], view: bool) -> u64 {
    let mut n = 0;
    count_blocks(p, buf, true, 0, u64::MAX, view, |c| n += c.grow);
    n
}

/// [`view_len`] on the path `p` (for the tests of every path).
#[cfg(test)]
pub(crate) fn view_len_on(p: Path, disk: &[u8]) -> u64 {
    disk.len() as u64 + changing_units(p, disk, false)
}

/// [`disk_len`] on the path `p`.
#[cfg(test)]
pub(crate) fn disk_len_on(p: Path, view: &[u8]) -> u64 {
    view.len() as u64 - changing_units(p, view, true)
}
