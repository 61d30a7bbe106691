//! Reads of a view, planned: [`Reading`] says which disk bytes a read of
//! view bytes needs next and turns the bytes it is given into view bytes;
//! [`Span`] is a few disk bytes around a view offset, from a unit boundary,
//! for the write planner (`super::write`). Neither reads anything itself:
//! the I/O layer (`crate::io`) fetches what they ask for, and a short read
//! (the file shrank meanwhile) is simply the end.
//!
//! Whatever the bytes it is given, a reading never goes beyond them nor
//! beyond the buffer, and never panics: an index that no longer matches
//! the bytes (they were changed without the file's stamp moving, as writes
//! through a shared mapping can) only makes it return the view of the
//! bytes that are there at shifted offsets. It notices such an index
//! cheaply where the index promises something it can check
//! ([`Reading::stale`]): the count of length-changing units in the first
//! whole block it decodes, and, when the read reaches the end of the view,
//! that the bytes end exactly there.

use cutf8::unit::{decode_disk_unit, encode_view, DiskUnit};
use cutf8::{max_view_len, Decoder, Status, MAX_UNIT_LEN, MIN_DST};

use super::index::{count_disk_blocks, OffsetIndex, BACK, BLOCK, CHUNK};
use super::Error;

/// How many disk bytes at a time go through a reading's own buffer (the
/// bytes before the view offset asked for, a unit the read cuts).
const OUT_PART: usize = 8 << 10;

/// One read of view bytes `[view_off, view_off + len)` (clamped to the
/// view), driven by the I/O layer: while [`Reading::need`] names disk
/// bytes, read them and pass them to [`Reading::feed`].
pub struct Reading {
    disk_len: u64,
    view_off: u64,
    want: usize,
    got: usize,
    block: u64,
    g: u64,
    back: u64,
    /// The disk offset of the next bytes needed, and how many.
    pos: u64,
    len: usize,
    first: bool,
    skip: u64,
    dec: Decoder,
    out: Vec<u8>,
    done: bool,
    view_len: u64,
    /// Growing units the index says start in block `block / BLOCK`.
    block_growth: u64,
    /// The bytes disagree with the index (see [`Reading::stale`]).
    stale: bool,
}

impl OffsetIndex {
    /// Plans a read of `len` view bytes at `view_off`: one binary search,
    /// a decode from at most one block plus one unit before `view_off`.
    pub fn reading(&self, view_off: u64, len: usize) -> Reading {
        let view_len = self.view_len();
        let want = if view_off >= view_len {
            0
        } else {
            (len as u64).min(view_len - view_off) as usize
        };
        let (k, g) = self.checkpoint(view_off.min(view_len));
        let block = k * BLOCK;
        let back = block.min(BACK);
        // Disk bytes never outnumber their view: the skip to view_off, the
        // request, the unit before the block start and one unit of slack
        // are enough, so a small read decodes a small range.
        let need = view_off.saturating_sub(block + g) + back + want as u64 + SLACK;
        // CHUNK at a time, not a whole request's disk bytes at once: the
        // bytes are decoded while they are still in the CPU's cache (a
        // 1 MiB read made the copy from the page cache three times as
        // costly: docs/performance.md, "Mount, reads").
        let first = chunk_for(need);
        Reading {
            disk_len: self.disk_len(),
            view_off,
            want,
            got: 0,
            block,
            g,
            back,
            pos: block - back,
            len: first,
            first: true,
            skip: 0,
            dec: Decoder::lossless().with_simd_level(crate::codec::level()),
            out: Vec::new(),
            done: want == 0,
            view_len,
            block_growth: self
                .growth_before_block(k + 1)
                .saturating_sub(self.growth_before_block(k)),
            stale: false,
        }
    }
}

impl Reading {
    /// The disk bytes to read next, `(offset after the magic, length)`;
    /// None when the read is complete.
    pub fn need(&self) -> Option<(u64, usize)> {
        (!self.done).then_some((self.pos, self.len))
    }

    /// View bytes delivered so far (into the `buf` given to `feed`).
    pub fn got(&self) -> usize {
        self.got
    }

    /// Whether the bytes fed disagree with the index the reading was
    /// planned with: the first whole block decoded holds another number of
    /// length-changing units than the index says, or the bytes end before
    /// or after the view's end where the read reaches it. (A file changed
    /// while read does the same; its stamp tells the two apart.) What was
    /// delivered is then the view of the bytes that are there, at offsets
    /// the index placed wrongly.
    pub fn stale(&self) -> bool {
        self.stale
    }

    /// Compares the growing units in block `self.block` of `disk` (whose
    /// first byte is at `pos`, a unit boundary at or before the block's
    /// start) with the index, when `disk` covers the block whole.
    fn check_block(&mut self, disk: &[u8], pos: u64, at_end: bool) {
        let end = self.block + BLOCK;
        let covered = pos + disk.len() as u64 >= (end + 8).min(self.disk_len);
        if !covered {
            return;
        }
        let upto = ((end + 8).min(self.disk_len).saturating_sub(pos) as usize).min(disk.len());
        let last = at_end && upto == disk.len();
        let k = self.block / BLOCK;
        let mut grow = 0;
        count_disk_blocks(&disk[..upto], last, pos, BLOCK, |c| {
            if c.block == k {
                grow += c.grow;
            }
        });
        if grow != self.block_growth {
            self.stale = true;
        }
    }

    /// Takes the disk bytes [`Reading::need`] asked for (fewer when the
    /// file ends there) and appends their view bytes to `buf` (as long as
    /// the `len` planned).
    pub fn feed(&mut self, disk: &[u8], buf: &mut [u8]) {
        if self.done {
            return;
        }
        let n = disk.len().min(self.len);
        let at_end = self.pos + n as u64 >= self.disk_len || n < self.len;
        let from = if self.first {
            self.first = false;
            let rel = self.back as usize;
            if n < rel {
                // The file is shorter than the index says (it changed).
                self.stale = true;
                self.done = true;
                return;
            }
            let (dstart, vpos) = unit_start_near(&disk[..n], rel, self.block, self.g, at_end);
            self.skip = self.view_off.saturating_sub(vpos);
            let from = (dstart - self.pos) as usize;
            self.check_block(&disk[from..n], dstart, at_end);
            from
        } else {
            0
        };
        let want = self.want.min(buf.len());
        let mut src = disk.get(from..n).unwrap_or_default();
        // Decoded straight into `buf` while nothing is to be skipped and
        // any unit fits in what is left of it (the decoder writes whole
        // units only); through `out` for the bytes before `view_off` and
        // for a last unit the read cuts.
        let mut direct = true;
        loop {
            let (status, r, took, left) =
                if direct && self.skip == 0 && want - self.got >= MAX_UNIT_LEN {
                    let (status, r, w) = self.dec.convert(src, &mut buf[self.got..want], at_end);
                    // Only a unit that does not fit stops it: the rest goes
                    // through `out`.
                    direct = status != Status::OutputFull;
                    (status, r, w, 0)
                } else {
                    // A few KiB at a time: what is skipped lies within a block
                    // and a cut unit is short.
                    let part = &src[..src.len().min(OUT_PART)];
                    let size = max_view_len(part.len()).max(MIN_DST);
                    if self.out.len() < size {
                        self.out.resize(size, 0);
                    }
                    let last = at_end && part.len() == src.len();
                    let (mut status, r, w) = self.dec.convert(part, &mut self.out, last);
                    if status == Status::InputEmpty && part.len() < src.len() {
                        // More of `src` to go.
                        status = Status::OutputFull;
                    }
                    let mut produced = &self.out[..w];
                    let s = (self.skip as usize).min(produced.len());
                    self.skip -= s as u64;
                    produced = &produced[s..];
                    let take = produced.len().min(want - self.got);
                    buf[self.got..self.got + take].copy_from_slice(&produced[..take]);
                    (status, r, take, produced.len() - take)
                };
            src = &src[r..];
            self.got += took;
            if self.got == want {
                // At the view's end, the bytes must end here too.
                if self.view_off + self.want as u64 == self.view_len {
                    let ended = left == 0
                        && src.is_empty()
                        && status != Status::OutputFull
                        && self.pos + n as u64 >= self.disk_len;
                    self.stale |= !ended;
                }
                self.done = true;
                return;
            }
            if status != Status::OutputFull {
                break;
            }
        }
        if at_end {
            // The bytes ended before the view the index promised.
            self.stale |= self.got < want;
            self.done = true;
            return;
        }
        self.pos += n as u64;
        // No more than the read still needs: the view bytes still wanted
        // or skipped (they never take more disk bytes than view ones) and
        // the slack of a unit straddling the end. A short ask costs only
        // another pread (the bytes end only where a pread comes back short).
        let left = (self.want - self.got) as u64 + self.skip + SLACK;
        self.len = chunk_for(left);
    }
}

/// Disk bytes asked beyond the view bytes a read needs: a unit the read's
/// end cuts (at most `MAX_UNIT_LEN` bytes) and the bytes that tell it ends.
const SLACK: u64 = 16;

/// The next pread's length when `need` disk bytes at most remain: CHUNK,
/// or all of them when they are few more than CHUNK (so a 1 MiB READ does
/// not end in a pread for a few bytes past its 16 chunks).
fn chunk_for(need: u64) -> usize {
    let most = (CHUNK + CHUNK / 8) as u64;
    if need <= most {
        need as usize
    } else {
        CHUNK
    }
}

/// Disk bytes starting at a unit boundary, known to cover a small view
/// range: what the write planner needs to find a change's window.
#[derive(Debug, Clone)]
pub struct Span {
    /// Disk offset (after the magic) and view offset of the first byte.
    disk: u64,
    view: u64,
    bytes: Vec<u8>,
    at_end: bool,
    /// The read ended before the disk bytes the index says are there: the
    /// file changed, and nothing planned from this span is right.
    short: bool,
    disk_len: u64,
    view_len: u64,
}

/// What the I/O layer reads for a [`Span`]: `len` disk bytes at `start`.
#[derive(Debug, Clone, Copy)]
pub struct SpanPlan {
    pub start: u64,
    pub len: usize,
    block: u64,
    g: u64,
}

impl OffsetIndex {
    /// Plans the disk bytes that cover view bytes `[lo, hi)` (clamped to
    /// the view): at most two blocks and a unit before `lo`.
    pub fn span_plan(&self, lo: u64, hi: u64) -> SpanPlan {
        let view_len = self.view_len();
        let (lo, hi) = (lo.min(view_len), hi.min(view_len).max(lo.min(view_len)));
        let (k, g) = self.checkpoint(lo);
        let block = k * BLOCK;
        let back = block.min(BACK);
        SpanPlan {
            start: block - back,
            len: (hi - (block + g) + back + 16) as usize,
            block,
            g,
        }
    }

    /// The span from the bytes read for `plan` (fewer: the file ends there).
    pub fn span(&self, plan: SpanPlan, mut bytes: Vec<u8>) -> Span {
        bytes.truncate(plan.len);
        let reaches_end = plan.start + bytes.len() as u64 >= self.disk_len();
        let short = bytes.len() < plan.len && !reaches_end;
        let at_end = reaches_end || short;
        let rel = (plan.block - plan.start) as usize;
        let (disk, view) = if bytes.len() < rel {
            // Shorter than the index says (it changed): nothing is known.
            bytes.clear();
            (plan.block, plan.block + plan.g)
        } else {
            let (d, v) = unit_start_near(&bytes, rel, plan.block, plan.g, at_end);
            bytes.drain(..(d - plan.start) as usize);
            (d, v)
        };
        Span {
            disk,
            view,
            bytes,
            at_end,
            short,
            disk_len: self.disk_len(),
            view_len: self.view_len(),
        }
    }
}

/// How many of a file's last disk bytes [`OffsetIndex::end_span`] takes:
/// a unit boundary and [`super::write::REACH`] view bytes after it, in
/// any text but a run of stray continuation bytes.
pub const END_SPAN: usize = 16;

impl OffsetIndex {
    /// The span of the view's last bytes, from `tail`: the last
    /// `min(END_SPAN, disk length)` disk bytes. A write at the view's end
    /// that continues a character the file ends in needs only these (the
    /// window reaches [`super::write::REACH`] view bytes back), not the
    /// bytes from a block's start that [`OffsetIndex::span_plan`] asks for.
    /// The span starts at the first byte of `tail` that begins a unit (a
    /// byte that is not a continuation byte, where V restarts; or the
    /// file's first byte) and covers at least `REACH` view bytes. `None`
    /// when `tail` has no such start (stray continuation bytes) or is not
    /// as long as asked (the file changed): plan from `span_plan` then.
    pub fn end_span(&self, tail: &[u8]) -> Option<Span> {
        let disk_len = self.disk_len();
        if tail.len() as u64 != disk_len.min(END_SPAN as u64) {
            return None;
        }
        let whole = tail.len() as u64 == disk_len;
        let p = if whole {
            0
        } else {
            tail.iter().position(|&b| !super::is_cont(b))?
        };
        let bytes = tail[p..].to_vec();
        let view = self
            .view_len()
            .checked_sub(crate::codec::view_len(&bytes))?;
        if !whole && view + super::write::REACH > self.view_len() {
            return None;
        }
        Some(Span {
            disk: disk_len - bytes.len() as u64,
            view,
            bytes,
            at_end: true,
            short: false,
            disk_len,
            view_len: self.view_len(),
        })
    }
}

impl Span {
    /// The whole view as one span: for a file whose disk bytes are all in
    /// memory.
    pub fn whole(index: &OffsetIndex, disk: &[u8]) -> Span {
        Span {
            disk: 0,
            view: 0,
            bytes: disk.to_vec(),
            at_end: true,
            short: false,
            disk_len: index.disk_len(),
            view_len: index.view_len(),
        }
    }

    /// The empty span at the view's end: all a write there needs on its
    /// right.
    pub fn end(index: &OffsetIndex) -> Span {
        Span {
            disk: index.disk_len(),
            view: index.view_len(),
            bytes: Vec::new(),
            at_end: true,
            short: false,
            disk_len: index.disk_len(),
            view_len: index.view_len(),
        }
    }

    /// The view offset of the span's first byte.
    pub fn view_start(&self) -> u64 {
        self.view
    }

    /// Fails with [`Error::Changed`] when the file was shorter than its
    /// index says.
    pub fn check(&self) -> Result<(), Error> {
        if self.short {
            Err(Error::Changed)
        } else {
            Ok(())
        }
    }

    /// View bytes `[from, to)`, as far as the span covers them.
    pub fn view_bytes(&self, from: u64, to: u64) -> Vec<u8> {
        let to = to.min(self.view_len);
        if from >= to || from < self.view {
            return Vec::new();
        }
        let mut out = vec![0u8; max_view_len(self.bytes.len()).max(MIN_DST)];
        let mut dec = Decoder::lossless().with_simd_level(crate::codec::level());
        let (_, _, w) = dec.convert(&self.bytes, &mut out, self.at_end);
        out.truncate(w);
        let a = ((from - self.view) as usize).min(out.len());
        let b = ((to - self.view) as usize).min(out.len());
        out[a..b].to_vec()
    }

    /// Disk offset (after the magic) of the unit that starts at view offset
    /// `view_off`, which must be a unit boundary of the content (a byte that
    /// is not a continuation byte, a continuation byte beyond the reach of
    /// any lead, or the end). Where the span ends first (the file changed),
    /// the end of what it knows.
    pub fn disk_offset_of(&self, view_off: u64) -> u64 {
        if view_off >= self.view_len {
            return self.disk_len;
        }
        let (mut i, mut v) = (0usize, self.view);
        let n = self.bytes.len();
        while i < n && v < view_off {
            let (dl, vl) = match decode_disk_unit(&self.bytes[i..], self.at_end) {
                DiskUnit::Char { cp, len } => (len, grows(cp, len) as usize + len),
                DiskUnit::Truncated { len, .. } => (len, len),
                DiskUnit::Stray | DiskUnit::ReservedLead => (1, 1),
                DiskUnit::Incomplete => break,
            };
            i += dl;
            v += vl as u64;
        }
        self.disk + i as u64
    }
}

/// Given disk bytes `head` where `head[rel]` is at disk offset `block` and
/// `g` growing units start before `block`: the unit boundary to decode from,
/// `(disk offset, view offset)` — `block` itself, or the lead of a complete
/// unit that covers it (everything else decodes the same from any byte).
fn unit_start_near(head: &[u8], rel: usize, block: u64, g: u64, at_end: bool) -> (u64, u64) {
    if rel < head.len() && super::is_cont(head[rel]) {
        if let Some(t) = head[..rel].iter().rposition(|&b| !super::is_cont(b)) {
            if let DiskUnit::Char { cp, len } = decode_disk_unit(&head[t..], at_end) {
                if t + len > rel {
                    let d = block - (rel - t) as u64;
                    return (d, d + g - grows(cp, len) as u64);
                }
            }
        }
    }
    (block, block + g)
}

/// Whether the disk unit `cp` of `len` bytes is one byte longer in the view.
fn grows(cp: u32, len: usize) -> bool {
    let mut tmp = [0u8; 8];
    encode_view(cp, &mut tmp) > len
}
