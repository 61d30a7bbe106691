//! The offset index of one corrected file: view offset → disk offset.
//!
//! A corrected file's view (V of its disk bytes after the magic) is as long
//! as the disk bytes plus one byte for every unit that grows (see
//! [`cutf8::length`]). The index records, per 4 KiB block of disk
//! bytes, how many growing units start before the block — but only for blocks
//! where that count changes, so a file whose text keeps its length (almost
//! all text) costs a few words, and a dense one 16 bytes per 4 KiB block.
//!
//! Reading n view bytes at offset o then costs one binary search, a decode of
//! at most one block plus one unit before o, and O(n) (`super::read`).
//!
//! Building ([`OffsetIndex::build_pieces`]) takes data and holes: the I/O
//! layer skips holes (SEEK_DATA/SEEK_HOLE), which are NUL bytes that keep
//! their length, so only a unit cut by the hole's start is decided and the
//! rest costs nothing — a sparse 20 GiB file with 1 MiB of data is indexed
//! in milliseconds. Data is counted per block
//! ([`cutf8::index::count_disk_blocks`]: a popcount per vector where the
//! growing units are dense, not a call per unit); [`OffsetIndex::from_slices`]
//! takes bytes already in memory without copying them. After a change, [`OffsetIndex::rescan_plan`] says which
//! disk bytes to look at again, and `apply_tail` / `apply_blocks` take them.
//!
//! The index knows nothing of files, FUSE or of when a file changed; the
//! mount keys it by the backing file's stamp and rebuilds it when that
//! changes. Offsets here count from the first byte after the magic number.

use std::io::{self, Read};

use cutf8::index::{BlockCount, DiskEvent};

/// Disk bytes per index block.
pub(super) const BLOCK: u64 = 4096;
/// Longest disk unit minus one: how far back a unit covering a block start
/// can begin.
pub(super) const BACK: u64 = 5;
/// Disk bytes read per step when building or reading.
pub(super) const CHUNK: usize = 64 * 1024;

/// [`cutf8::index::count_disk_blocks`] at this process's vector level.
pub(super) fn count_disk_blocks(
    buf: &[u8],
    at_end: bool,
    start: u64,
    block: u64,
    tally: impl FnMut(BlockCount),
) -> usize {
    cutf8::index::count_disk_blocks(crate::codec::level(), buf, at_end, start, block, tally)
}

/// [`cutf8::index::scan_disk`] at this process's vector level.
fn scan_disk(buf: &[u8], at_end: bool, event: impl FnMut(DiskEvent)) -> usize {
    cutf8::index::scan_disk(crate::codec::level(), buf, at_end, event)
}

/// View-offset map of one corrected file; see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    disk_len: u64,
    /// Growing units in the whole file: view length − disk length.
    growth: u64,
    /// docs/format.md's exempt units (W would not give them back unchanged).
    exempt: u64,
    /// `(k, g)`: growing units that start before disk offset `k * BLOCK` is
    /// `g`, for every block `k` from this entry up to the next one. An
    /// implicit `(0, 0)` comes first; `k` and `g` strictly increase.
    steps: Vec<(u64, u64)>,
}

impl OffsetIndex {
    /// Build by one scan of the disk bytes (the reader is positioned just
    /// after the magic number).
    pub fn build(mut reader: impl Read) -> io::Result<OffsetIndex> {
        OffsetIndex::build_pieces(|buf| match reader.read(buf)? {
            0 => Ok(Piece::End),
            n => Ok(Piece::Data(n)),
        })
    }

    /// Build from a source of pieces (data read into the buffer, holes
    /// of NUL bytes not read, the end): the I/O layer's scan of a file with
    /// holes skipped (`crate::io::build_index`). A hole is NUL bytes, which
    /// keep their length and never grow, so only the unit a hole ends (if
    /// one was cut by it) is decided, and the rest of the hole costs nothing.
    pub fn build_pieces(
        mut next: impl FnMut(&mut [u8]) -> io::Result<Piece>,
    ) -> io::Result<OffsetIndex> {
        let mut b = Builder::default();
        let mut buf = vec![0u8; CHUNK];
        loop {
            match next(&mut buf) {
                Ok(Piece::Data(n)) => b.push(&buf[..n]),
                Ok(Piece::Hole(len)) => b.skip_zeros(len),
                Ok(Piece::End) => return Ok(b.finish()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Build from disk bytes in memory (after the magic number).
    pub fn from_bytes(disk: &[u8]) -> OffsetIndex {
        OffsetIndex::from_slices(&[disk])
    }

    /// Build from disk bytes in memory given in pieces, one after the
    /// other (a unit may be cut between two): the index of their
    /// concatenation, without making it.
    pub fn from_slices(parts: &[&[u8]]) -> OffsetIndex {
        let mut b = Builder::default();
        for part in parts {
            b.push(part);
        }
        b.finish()
    }

    /// Takes the growing and exempt units of one block, blocks in order
    /// (a block may come again, cut by a chunk's end).
    fn note(&mut self, c: BlockCount) {
        self.exempt += c.exempt;
        if c.grow > 0 {
            self.growth += c.grow;
            let k = c.block + 1;
            match self.steps.last_mut() {
                Some(last) if last.0 == k => last.1 = self.growth,
                _ => self.steps.push((k, self.growth)),
            }
        }
    }

    /// What the index holds, for `indexdb` to store: disk length, growing
    /// units, exempt units, steps.
    pub fn parts(&self) -> (u64, u64, u64, &[(u64, u64)]) {
        (self.disk_len, self.growth, self.exempt, &self.steps)
    }

    /// An index from stored [`parts`](Self::parts); None unless its
    /// invariants hold (steps strictly increasing, each within the file and
    /// the growth), so a damaged record can never make a read panic.
    pub fn from_parts(
        disk_len: u64,
        growth: u64,
        exempt: u64,
        steps: Vec<(u64, u64)>,
    ) -> Option<OffsetIndex> {
        let last_block = disk_len / BLOCK + 1;
        let mut prev = (0u64, 0u64);
        for &(k, g) in &steps {
            if k <= prev.0 || g <= prev.1 || k > last_block || g > growth {
                return None;
            }
            prev = (k, g);
        }
        let ok = growth <= disk_len && exempt <= disk_len && prev.1 == growth;
        ok.then_some(OffsetIndex {
            disk_len,
            growth,
            exempt,
            steps,
        })
    }

    /// Length of the view (without the magic number).
    pub fn view_len(&self) -> u64 {
        self.disk_len + self.growth
    }

    /// Length of the disk bytes after the magic number.
    pub fn disk_len(&self) -> u64 {
        self.disk_len
    }

    /// False when the file holds a unit W would not write back unchanged
    /// (docs/format.md's exception to lossless reading): serve it read-only.
    pub fn lossless(&self) -> bool {
        self.exempt == 0
    }

    /// Whether every unit keeps its length (view offset = disk offset).
    pub fn is_identity(&self) -> bool {
        self.growth == 0
    }

    /// Memory the index holds beyond its own struct.
    pub fn heap_bytes(&self) -> usize {
        self.steps.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    /// The block to start decoding from for view offset `view_off`:
    /// `(k, g)` with `k * BLOCK + g <= view_off` as large as possible, where
    /// `g` counts growing units starting before disk offset `k * BLOCK`.
    pub(super) fn checkpoint(&self, view_off: u64) -> (u64, u64) {
        let start = |&(k, g): &(u64, u64)| k * BLOCK + g;
        // Entries whose block starts at or before view_off.
        let j = self.steps.partition_point(|s| start(s) <= view_off);
        let (k0, g, next) = match j {
            0 => (0, 0, self.steps.first().map(|s| s.0)),
            _ => {
                let (k, g) = self.steps[j - 1];
                (k, g, self.steps.get(j).map(|s| s.0))
            }
        };
        let mut k = k0.max((view_off - g) / BLOCK);
        if let Some(next) = next {
            k = k.min(next - 1);
        }
        (k, g)
    }
}

impl OffsetIndex {
    /// Growing units that start before disk offset `k * BLOCK`.
    pub(super) fn growth_before_block(&self, k: u64) -> u64 {
        let j = self.steps.partition_point(|s| s.0 <= k);
        if j == 0 {
            0
        } else {
            self.steps[j - 1].1
        }
    }

    /// What bringing the index up to date needs after the disk bytes from
    /// `from` changed (see [`Rescan`]). `changed_to` is where the change
    /// ends in the new content; when it is less than `new_disk_len`,
    /// everything after it is the same bytes at the same offsets as before
    /// (an in-place patch) and only the touched blocks are recounted;
    /// otherwise everything from `from` on is.
    pub fn rescan_plan(&self, from: u64, changed_to: u64, new_disk_len: u64) -> Rescan {
        let k1 = from / BLOCK;
        if changed_to >= new_disk_len {
            return Rescan::Tail { start: k1 * BLOCK };
        }
        let k2 = (changed_to.max(from + 1) - 1) / BLOCK;
        let span_end = ((k2 + 1) * BLOCK).min(new_disk_len);
        Rescan::Blocks {
            start: k1 * BLOCK,
            len: (span_end - k1 * BLOCK) as usize + 8,
        }
    }

    /// Takes `fresh` disk bytes appended at the end when they start a
    /// unit (their first byte is not a continuation byte): the units before
    /// them are closed then, so only `fresh` is counted and the last block
    /// goes on with its count; no byte before them is needed. False, and
    /// nothing changed, otherwise (the caller rescans the block).
    pub fn append_units(&mut self, fresh: &[u8]) -> bool {
        if fresh.first().is_none_or(|&b| super::is_cont(b)) {
            return false;
        }
        let start = self.disk_len;
        count_disk_blocks(fresh, true, start, BLOCK, |c| self.note(c));
        self.disk_len = start + fresh.len() as u64;
        true
    }

    /// Completes [`Rescan::Tail`]: `tail` indexes the new disk bytes from
    /// the plan's `start` to `new_disk_len`.
    pub fn apply_tail(&mut self, from: u64, new_disk_len: u64, tail: OffsetIndex) {
        let k1 = from / BLOCK;
        let g1 = self.growth_before_block(k1);
        // Steps are sorted: cutting them costs nothing per step kept, so
        // an append to a large dense file costs what it appends.
        let keep = self.steps.partition_point(|s| s.0 <= k1);
        self.steps.truncate(keep);
        self.disk_len = new_disk_len;
        // W never writes an exempt unit, and the mount does not write to
        // files that hold one: a rescan can only find none or count them.
        self.exempt += tail.exempt;
        for (k, g) in tail.steps {
            self.steps.push((k1 + k, g1 + g));
        }
        self.growth = g1 + tail.growth;
    }

    /// Completes [`Rescan::Blocks`]: `disk` holds the new disk bytes from
    /// the plan's `start` on, as many as the plan asked for (fewer: the
    /// file ends there). Blocks `from..=changed_to` are recounted, the
    /// rest shift by the difference.
    pub fn apply_blocks(&mut self, from: u64, changed_to: u64, new_disk_len: u64, disk: &[u8]) {
        let k1 = from / BLOCK;
        let g1 = self.growth_before_block(k1);
        let k2 = (changed_to.max(from + 1) - 1) / BLOCK;
        let g_after = self.growth_before_block(k2 + 1);
        let span_end = ((k2 + 1) * BLOCK).min(new_disk_len);
        let n = disk.len();
        let at_end = k1 * BLOCK + n as u64 >= new_disk_len;
        let limit = (span_end.saturating_sub(k1 * BLOCK)) as usize;
        let mut counts = vec![0u64; (k2 - k1 + 1) as usize];
        let mut exempt_new = 0u64;
        if n > limit && !limit.is_multiple_of(BLOCK as usize) {
            // The span ends inside a block (the file's end) and `disk`
            // runs past it (the file grew after the plan): units from
            // `limit` on are not counted. Rare; unit by unit.
            scan_disk(disk, at_end, |e| match e {
                DiskEvent::Grow(p) if p < limit => counts[p / BLOCK as usize] += 1,
                DiskEvent::Exempt(p) if p < limit => exempt_new += 1,
                _ => {}
            });
        } else {
            // The span is whole blocks of `disk`, or all of it.
            count_disk_blocks(disk, at_end, 0, BLOCK, |c| {
                if let Some(g) = counts.get_mut(c.block as usize) {
                    *g += c.grow;
                    exempt_new += c.exempt;
                }
            });
        }
        let new_total: u64 = counts.iter().sum();
        let old_total = g_after - g1;
        let delta = new_total as i64 - old_total as i64;
        // The steps of blocks k1+1..=k2+1 are replaced in place; those
        // after shift by `delta`, which is zero for most in-place patches,
        // so a patch costs what it touches, not the size of the index.
        let lo = self.steps.partition_point(|s| s.0 <= k1);
        let hi = self.steps.partition_point(|s| s.0 <= k2 + 1);
        let mut g = g1;
        let recounted = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                g += c;
                (k1 + i as u64 + 1, g)
            });
        let after = self.steps.splice(lo..hi, recounted).count();
        debug_assert_eq!(after, hi - lo);
        if delta != 0 {
            let first_after = self.steps.partition_point(|s| s.0 <= k2 + 1);
            for s in &mut self.steps[first_after..] {
                s.1 = (s.1 as i64 + delta) as u64;
            }
        }
        // The invariant (k and g strictly increasing, g > 0) holds with no
        // clean-up: recounted steps start above g1, the growth before the
        // span, and the first step after it had more than `g_after`, so it
        // now has more than g1 + new_total.
        self.growth = (self.growth as i64 + delta) as u64;
        self.disk_len = new_disk_len;
        self.exempt += exempt_new;
    }
}

/// Builds an [`OffsetIndex`] from disk bytes pushed in order, counted per
/// block; holds at most one unit cut by the end of a push.
#[derive(Default)]
struct Builder {
    idx: OffsetIndex,
    /// The undecided unit: its lead and the continuation bytes seen.
    carry: [u8; 8],
    clen: usize,
    /// Disk offset of `carry[0]`; of the next byte when nothing is carried.
    base: u64,
}

impl Builder {
    /// The next disk bytes.
    fn push(&mut self, data: &[u8]) {
        let mut data = data;
        if self.clen > 0 {
            // Decide the carried unit with the first few bytes of `data`
            // (eight bytes decide any unit). Its continuation bytes are no
            // candidates, so `data` is then counted from its start.
            let k = data.len().min(8 - self.clen);
            let mut tmp = [0u8; 8];
            tmp[..self.clen].copy_from_slice(&self.carry[..self.clen]);
            tmp[self.clen..self.clen + k].copy_from_slice(&data[..k]);
            let n = self.clen + k;
            if !self.decide_carried(&tmp[..n], false) {
                // Still cut: `data` was all continuation bytes of it.
                self.carry[..n].copy_from_slice(&tmp[..n]);
                self.clen = n;
                return;
            }
            self.base += self.clen as u64;
            self.clen = 0;
        }
        let idx = &mut self.idx;
        let done = count_disk_blocks(data, false, self.base, BLOCK, |c| idx.note(c));
        data = &data[done..];
        self.carry[..data.len()].copy_from_slice(data);
        self.clen = data.len();
        self.base += done as u64;
    }

    /// `len` NUL bytes (a hole): they decide a carried unit (a NUL is a
    /// unit of its own) and never grow.
    fn skip_zeros(&mut self, mut len: u64) {
        if len > 0 && self.clen > 0 {
            self.push(&[0]);
            len -= 1;
        }
        self.base += len;
    }

    /// The index of everything pushed.
    fn finish(mut self) -> OffsetIndex {
        if self.clen > 0 {
            let carry = self.carry;
            self.decide_carried(&carry[..self.clen], true);
        }
        self.idx.disk_len = self.base + self.clen as u64;
        self.idx.steps.shrink_to_fit();
        self.idx
    }

    /// Notes the unit at `unit[0]` (the carried one, at `base`) if it
    /// grows or is exempt; false when `unit` is still too short to say.
    fn decide_carried(&mut self, unit: &[u8], at_end: bool) -> bool {
        let (mut grow, mut exempt) = (0, 0);
        let done = scan_disk(unit, at_end, |e| match e {
            DiskEvent::Grow(0) => grow = 1,
            DiskEvent::Exempt(0) => exempt = 1,
            _ => {}
        });
        if done == 0 && !at_end {
            return false;
        }
        self.idx.note(BlockCount {
            block: self.base / BLOCK,
            grow,
            exempt,
        });
        true
    }
}

/// What [`OffsetIndex::rescan_plan`] needs read: disk offsets count from
/// the first byte after the magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescan {
    /// Index the new disk bytes from `start` to the end (holes skipped),
    /// then [`OffsetIndex::apply_tail`].
    Tail { start: u64 },
    /// Read `len` disk bytes at `start`, then [`OffsetIndex::apply_blocks`].
    Blocks { start: u64, len: usize },
}

/// One step of a scan: bytes read into the buffer, a hole of that many
/// NUL bytes (not read), or the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    Data(usize),
    Hole(u64),
    End,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::view::tests::read_mem;
    use cutf8::{decode_lossless, encode_strict};
    use rand::{Rng, SeedableRng};

    /// A text mixing unchanged and growing characters with the given
    /// density of growing ones (per mille), plus ill-formed bytes.
    pub(crate) fn corpus(seed: u64, chars: usize, dense: u32, junk: bool) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut disk = Vec::new();
        for _ in 0..chars {
            let roll = rng.gen_range(0..1000);
            let piece: Vec<u8> = if roll < dense {
                let c = match rng.gen_range(0..4) {
                    0 => rng.gen_range(0x800..=0x89F),
                    1 => rng.gen_range(0x1_0000..=0x1_109F),
                    2 => rng.gen_range(0x20_0000..=0x21_109F),
                    _ => rng.gen_range(0x8000_0000..=0x8421_109F),
                };
                let mut b = [0u8; 8];
                let n = cutf8::unit::encode_disk(c, &mut b).unwrap();
                b[..n].to_vec()
            } else if junk && roll < dense + 20 {
                match rng.gen_range(0..4) {
                    0 => vec![0x80],
                    1 => vec![0xE4, 0x80],
                    2 => vec![0xFF, 0x80, 0x81],
                    _ => vec![0xFE, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80],
                }
            } else {
                let s = ["a", "é", "ж", "中", "😀", "\n", "𐀀"][rng.gen_range(0..7)];
                encode_strict(s.as_bytes()).unwrap()
            };
            disk.extend_from_slice(&piece);
        }
        disk
    }

    fn check_reads(disk: &[u8], seed: u64, reads: usize) {
        let view = decode_lossless(disk);
        let idx = OffsetIndex::from_bytes(disk);
        assert_eq!(idx.view_len(), view.len() as u64);
        assert_eq!(idx.disk_len(), disk.len() as u64);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut buf = vec![0u8; 70_000];
        for _ in 0..reads {
            let off = rng.gen_range(0..=view.len() as u64 + 3);
            let len = match rng.gen_range(0..3) {
                0 => rng.gen_range(0..8),
                1 => rng.gen_range(0..5000),
                _ => rng.gen_range(0..70_000),
            };
            let got = read_mem(disk, &idx, off, &mut buf[..len]);
            let o = (off as usize).min(view.len());
            let expect = &view[o..(o + len).min(view.len())];
            assert_eq!(&buf[..got], expect, "off {off} len {len}");
        }
    }

    #[test]
    fn identity_text_costs_no_index_memory() {
        let disk = encode_strict(
            "plain ASCII, Ελληνικά, кириллица, 中文, 😀\n"
                .repeat(5000)
                .as_bytes(),
        )
        .unwrap();
        let idx = OffsetIndex::from_bytes(&disk);
        assert!(idx.is_identity());
        assert_eq!(idx.heap_bytes(), 0);
        assert_eq!(idx.view_len(), idx.disk_len());
        check_reads(&disk, 1, 300);
    }

    #[test]
    fn dense_growth_reads_match_v() {
        let disk = corpus(7, 60_000, 500, false);
        let idx = OffsetIndex::from_bytes(&disk);
        assert!(!idx.is_identity());
        assert!(idx.heap_bytes() <= (disk.len() / BLOCK as usize + 2) * 16 * 2);
        check_reads(&disk, 2, 2000);
    }

    #[test]
    fn sparse_growth_and_junk_reads_match_v() {
        for (seed, dense) in [(3, 1), (4, 10), (5, 200)] {
            let disk = corpus(seed, 40_000, dense, true);
            check_reads(&disk, seed, 800);
        }
    }

    #[test]
    fn exempt_units_make_the_file_lossy() {
        let mut disk = b"ab".to_vec();
        disk.extend_from_slice(&[0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80]);
        assert!(!OffsetIndex::from_bytes(&disk).lossless());
        disk[3] = 0x81; // value below U+80000000: not an extended form
        assert!(OffsetIndex::from_bytes(&disk).lossless());
    }

    #[test]
    fn growing_units_on_block_edges() {
        // A growing unit at every offset around the first block boundaries.
        for shift in 0..12usize {
            let mut disk = vec![b'x'; BLOCK as usize - 6 + shift];
            for _ in 0..3 {
                disk.extend_from_slice(&[0xDF, 0xBF]); // U+089F grows
                disk.extend_from_slice(&[0xEF, 0xBF, 0xBF]); // U+1109F grows
                disk.extend(std::iter::repeat_n(b'y', BLOCK as usize - 5));
            }
            let view = decode_lossless(&disk);
            let idx = OffsetIndex::from_bytes(&disk);
            for off in 0..view.len() as u64 {
                if off % 97 != 0 && !(off % BLOCK < 16 || off % BLOCK > BLOCK - 16) {
                    continue;
                }
                let mut b = [0u8; 9];
                let n = read_mem(&disk, &idx, off, &mut b);
                let o = off as usize;
                assert_eq!(
                    &b[..n],
                    &view[o..(o + 9).min(view.len())],
                    "shift {shift} off {off}"
                );
            }
        }
    }

    #[test]
    fn reads_past_a_shrunk_file_are_eof_not_a_panic() {
        let disk = corpus(23, 60_000, 500, false);
        let idx = OffsetIndex::from_bytes(&disk);
        let mut buf = vec![0u8; 4096];
        for off in [0, 41, 42, 100, 5000, 300_000, idx.view_len() - 1] {
            // Any answer but a panic: the caller re-checks the stamp.
            let n = read_mem(&disk[..42], &idx, off, &mut buf);
            assert!(n <= buf.len());
            let plan = idx.span_plan(off, off + 9);
            let short = disk[..42].get(plan.start as usize..).unwrap_or_default();
            let span = idx.span(plan, short.to_vec());
            let _ = span.view_bytes(off, off + 9);
            let _ = span.disk_offset_of(off + 3);
        }
    }

    /// A dense text as units, each one of: a 2- or 3-byte unit that grows,
    /// or one of the same disk length that does not.
    fn units(seed: u64, n: usize) -> Vec<Vec<u8>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let len = rng.gen_range(1..=3);
                unit_like(&mut rng, len)
            })
            .collect()
    }

    fn unit_like(rng: &mut impl Rng, len: usize) -> Vec<u8> {
        let c = match (len, rng.gen_bool(0.5)) {
            (1, _) => 'a' as u32,
            (2, true) => rng.gen_range(0x800..=0x89F),
            (2, false) => 'é' as u32,
            (3, true) => rng.gen_range(0x1_0000..=0x1_109F),
            _ => '中' as u32,
        };
        let mut b = [0u8; 8];
        let n = cutf8::unit::encode_disk(c, &mut b).unwrap();
        assert_eq!(n, len);
        b[..n].to_vec()
    }

    #[test]
    fn block_recounts_in_place_equal_a_full_scan() {
        // In-place patches (same disk length, growth up, down or equal),
        // one unit to many blocks wide, on an index with a step per block.
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        let mut us = units(30, 200_000);
        let mut idx = OffsetIndex::from_bytes(&us.concat());
        for round in 0..300 {
            // The last unit stays: a patch up to the end is a tail rescan.
            let i = rng.gen_range(0..us.len() - 1);
            let j = (i + rng.gen_range(1..[4, 40, 5000][round % 3])).min(us.len() - 1);
            let from: u64 = us[..i].iter().map(|u| u.len() as u64).sum();
            for u in &mut us[i..j] {
                *u = unit_like(&mut rng, u.len());
            }
            let to = from + us[i..j].iter().map(|u| u.len() as u64).sum::<u64>();
            let disk = us.concat();
            let n = disk.len() as u64;
            let Rescan::Blocks { start, len } = idx.rescan_plan(from, to, n) else {
                panic!("an in-place patch rescans blocks");
            };
            let end = (start as usize + len).min(disk.len());
            idx.apply_blocks(from, to, n, &disk[start as usize..end]);
            assert_eq!(idx, OffsetIndex::from_bytes(&disk), "round {round}");
        }
    }

    #[test]
    fn tail_rescans_equal_a_full_scan() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let mut us = units(32, 100_000);
        let mut idx = OffsetIndex::from_bytes(&us.concat());
        for round in 0..200 {
            let i = rng.gen_range(0..=us.len());
            us.truncate(i);
            us.extend(units(round, rng.gen_range(0..3000)));
            let from: u64 = us[..i].iter().map(|u| u.len() as u64).sum();
            let disk = us.concat();
            let n = disk.len() as u64;
            let Rescan::Tail { start } = idx.rescan_plan(from, n, n) else {
                panic!("a change to the end rescans the tail");
            };
            idx.apply_tail(from, n, OffsetIndex::from_bytes(&disk[start as usize..]));
            assert_eq!(idx, OffsetIndex::from_bytes(&disk), "round {round}");
        }
    }

    /// The index as it was built before per-block counts: a `scan_disk`
    /// event per unit.
    fn index_unit_by_unit(disk: &[u8]) -> OffsetIndex {
        let mut idx = OffsetIndex {
            disk_len: disk.len() as u64,
            ..OffsetIndex::default()
        };
        scan_disk(disk, true, |e| match e {
            DiskEvent::Grow(p) => {
                idx.growth += 1;
                let k = p as u64 / BLOCK + 1;
                match idx.steps.last_mut() {
                    Some(last) if last.0 == k => last.1 = idx.growth,
                    _ => idx.steps.push((k, idx.growth)),
                }
            }
            DiskEvent::Exempt(_) => idx.exempt += 1,
        });
        idx
    }

    #[test]
    fn per_block_counts_equal_the_unit_by_unit_index() {
        for (seed, dense, junk) in [
            (41, 0, false),
            (42, 1, true),
            (43, 200, true),
            (44, 500, false),
            (45, 900, true),
        ] {
            let disk = corpus(seed, 50_000, dense, junk);
            let want = index_unit_by_unit(&disk);
            assert_eq!(OffsetIndex::from_bytes(&disk), want, "seed {seed}");
            for skip in [1, 4095, 4097] {
                let d = &disk[skip..];
                assert_eq!(
                    OffsetIndex::from_bytes(d),
                    index_unit_by_unit(d),
                    "seed {seed} skip {skip}"
                );
            }
        }
    }

    #[test]
    fn slices_cut_anywhere_equal_one_buffer() {
        // Growing, exempt and cut units at block edges; pieces cut at every
        // byte near them (the tail rescan's head and fresh bytes), and in
        // three.
        let mut disk = corpus(11, 3000, 300, true);
        for at in [4090usize, 8190] {
            disk.splice(
                at..at,
                [0xEF, 0xBF, 0xBF, 0xDF, 0xBF, 0xFE, 0x82, 0x80, 0x80],
            );
            disk.splice(at + 9..at + 9, [0x80, 0x80, 0x80, 0xEE, 0xBD]);
        }
        let whole = index_unit_by_unit(&disk);
        assert_eq!(OffsetIndex::from_bytes(&disk), whole);
        assert_eq!(OffsetIndex::build(&disk[..]).unwrap(), whole);
        assert!(!whole.lossless() && !whole.is_identity());
        let cuts = (0..disk.len())
            .filter(|&c| c % 397 == 0 || (4080..4110).contains(&c) || (8180..8210).contains(&c));
        for c in cuts {
            assert_eq!(
                OffsetIndex::from_slices(&[&disk[..c], &disk[c..]]),
                whole,
                "cut {c}"
            );
            let d = (c + 4) % disk.len();
            let (a, b) = (c.min(d), c.max(d));
            let parts = [&disk[..a], &disk[a..b], &[][..], &disk[b..]];
            assert_eq!(OffsetIndex::from_slices(&parts), whole, "cuts {a} {b}");
        }
    }

    #[test]
    fn build_streams_through_small_reads() {
        // A reader returning 1..7 bytes at a time gives the same index.
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                self.1 = self.1 % 7 + 1;
                let n = self.1.min(b.len()).min(self.0.len());
                b[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let disk = corpus(9, 20_000, 100, true);
        let whole = OffsetIndex::from_bytes(&disk);
        assert_eq!(OffsetIndex::build(Trickle(&disk, 0)).unwrap(), whole);
    }
}
