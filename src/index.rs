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
//! at most one block plus one unit before o, and O(n): [`read_view_at`].
//!
//! Building skips holes ([`OffsetIndex::build_file`], SEEK_DATA/SEEK_HOLE):
//! a hole is NUL bytes, which keep their length, so only a unit cut by the
//! hole's start is decided and the rest costs nothing — a sparse 20 GiB file
//! with 1 MiB of data is indexed in milliseconds. A rescan after an
//! extension (truncate up) skips the new hole the same way.
//!
//! The index knows nothing of FUSE or of when a file changed; the caller
//! (`fs`) keys it by the backing file's identity and rebuilds it when that
//! changes. Should the file still be shorter than its index says (it changed
//! between the caller's check and the read), a short read is the end of the
//! view: [`read_view_at`] returns fewer bytes, never panics, and the caller
//! re-checks the stamp. Offsets here count from the first byte after the
//! magic number.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use cutf8::length::{scan_disk, DiskEvent};
use cutf8::{decode_disk_unit, max_view_len, Decoder, DiskUnit, Status, MIN_DST};

/// Disk bytes per index block.
const BLOCK: u64 = 4096;
/// Longest disk unit minus one: how far back a unit covering a block start
/// can begin.
const BACK: u64 = 5;
/// Disk bytes read per step when building or reading.
const CHUNK: usize = 64 * 1024;

/// View-offset map of one corrected file; see the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    disk_len: u64,
    /// Growing units in the whole file: view length − disk length.
    growth: u64,
    /// SPEC §2's exempt units (W would not give them back unchanged).
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

    /// Build from `file[start..end)` (`start` just after the magic number),
    /// skipping holes: a hole is NUL bytes, which keep their length and
    /// never grow, so only the unit a hole ends (if one was cut by it) is
    /// decided, and the rest of the hole costs nothing. A sparse 20 GiB file
    /// with 1 MiB of data is scanned in milliseconds.
    pub fn build_file(file: &File, start: u64, end: u64) -> io::Result<OffsetIndex> {
        // A hole runs to the end of the file, not past it.
        let end = end.min(file.metadata()?.len());
        let mut src = Extents::new(file, start, end);
        OffsetIndex::build_pieces(|buf| src.next(buf))
    }

    fn build_pieces(
        mut next: impl FnMut(&mut [u8]) -> io::Result<Piece>,
    ) -> io::Result<OffsetIndex> {
        let mut idx = OffsetIndex::default();
        let mut buf = vec![0u8; CHUNK + 8];
        // buf[..carry] holds an undecided unit from the previous chunk,
        // which starts at disk offset `base`.
        let mut carry = 0usize;
        let mut base = 0u64;
        loop {
            let piece = match next(&mut buf[carry..CHUNK + carry]) {
                Ok(p) => p,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let mut hole = match piece {
                Piece::Data(n) => {
                    let end = carry + n;
                    let done = scan_disk(&buf[..end], false, |e| idx.note(base, e));
                    buf.copy_within(done..end, 0);
                    carry = end - done;
                    base += done as u64;
                    continue;
                }
                Piece::Hole(len) => len,
                Piece::End => {
                    let end = carry;
                    scan_disk(&buf[..end], true, |e| idx.note(base, e));
                    idx.disk_len = base + end as u64;
                    idx.steps.shrink_to_fit();
                    return Ok(idx);
                }
            };
            // Zeros decide a unit the hole cut (a NUL is a unit of its
            // own); once nothing is carried, the rest is skipped.
            while hole > 0 {
                if carry == 0 {
                    base += hole;
                    break;
                }
                let z = usize::try_from(hole).unwrap_or(CHUNK).min(CHUNK);
                buf[carry..carry + z].fill(0);
                let end = carry + z;
                let done = scan_disk(&buf[..end], false, |e| idx.note(base, e));
                buf.copy_within(done..end, 0);
                carry = end - done;
                base += done as u64;
                hole -= z as u64;
            }
        }
    }

    /// Build from disk bytes in memory (after the magic number).
    pub fn from_bytes(disk: &[u8]) -> OffsetIndex {
        // Reading a slice cannot fail.
        OffsetIndex::build(disk).unwrap_or_default()
    }

    fn note(&mut self, base: u64, e: DiskEvent) {
        match e {
            DiskEvent::Grow(p) => {
                self.growth += 1;
                let k = (base + p as u64) / BLOCK + 1;
                match self.steps.last_mut() {
                    Some(last) if last.0 == k => last.1 = self.growth,
                    _ => self.steps.push((k, self.growth)),
                }
            }
            DiskEvent::Exempt(_) => self.exempt += 1,
        }
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
    /// (SPEC §2 invariant 1's exception): serve it read-only.
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

    /// The block to start decoding from for view offset `view_off`:
    /// `(k, g)` with `k * BLOCK + g <= view_off` as large as possible, where
    /// `g` counts growing units starting before disk offset `k * BLOCK`.
    fn checkpoint(&self, view_off: u64) -> (u64, u64) {
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
    fn growth_before_block(&self, k: u64) -> u64 {
        let j = self.steps.partition_point(|s| s.0 <= k);
        if j == 0 {
            0
        } else {
            self.steps[j - 1].1
        }
    }

    /// A unit boundary at or before view offset `view_off`, at most one
    /// block plus one unit before it: `(disk offset, view offset)`.
    pub fn unit_start_before(
        &self,
        file: &File,
        data_start: u64,
        view_off: u64,
    ) -> io::Result<(u64, u64)> {
        let (k, g) = self.checkpoint(view_off.min(self.view_len()));
        let block = k * BLOCK;
        let back = block.min(BACK);
        let mut head = [0u8; 16];
        let n = read_full_at(
            file,
            &mut head[..(back + 8) as usize],
            data_start + block - back,
        )?;
        let at_end = block - back + n as u64 >= self.disk_len;
        Ok(unit_start_near(&head[..n], back as usize, block, g, at_end))
    }

    /// Brings the index up to date after the disk bytes from `from` changed.
    /// `changed_to` is where the change ends in the new content; when it is
    /// less than `new_disk_len`, everything after it is the same bytes at the
    /// same offsets as before (an in-place patch) and only the touched blocks
    /// are rescanned; otherwise everything from `from` on is. `fresh`, when
    /// given, holds the new bytes from `from` to the end (an append just
    /// written): they are scanned from memory, not read back.
    pub fn rescan(
        &mut self,
        file: &File,
        data_start: u64,
        from: u64,
        changed_to: u64,
        new_disk_len: u64,
        fresh: Option<&[u8]>,
    ) -> io::Result<()> {
        let k1 = from / BLOCK;
        let g1 = self.growth_before_block(k1);
        if changed_to >= new_disk_len {
            self.steps.retain(|s| s.0 <= k1);
            let fresh = fresh.filter(|b| from + b.len() as u64 == new_disk_len);
            let tail = match fresh {
                Some(fresh) => OffsetIndex::build(
                    PosRead {
                        file,
                        pos: data_start + k1 * BLOCK,
                        end: data_start + from,
                    }
                    .chain(fresh),
                )?,
                // Holes (a file extended by truncate) are skipped.
                None => OffsetIndex::build_file(
                    file,
                    data_start + k1 * BLOCK,
                    data_start + new_disk_len,
                )?,
            };
            self.disk_len = new_disk_len;
            // W never writes an exempt unit, and the mount does not write to
            // files that hold one: a rescan can only find none or count them.
            self.exempt += tail.exempt;
            for (k, g) in tail.steps {
                self.steps.push((k1 + k, g1 + g));
            }
            self.growth = g1 + tail.growth;
            return Ok(());
        }
        // In place: recount blocks k1..=k2, shift the rest by the delta.
        let k2 = (changed_to.max(from + 1) - 1) / BLOCK;
        let g_after = self.growth_before_block(k2 + 1);
        let span_end = ((k2 + 1) * BLOCK).min(new_disk_len);
        let mut buf = vec![0u8; (span_end - k1 * BLOCK) as usize + 8];
        let n = read_full_at(file, &mut buf, data_start + k1 * BLOCK)?;
        let at_end = k1 * BLOCK + n as u64 >= new_disk_len;
        let limit = (span_end - k1 * BLOCK) as usize;
        let mut counts = vec![0u64; (k2 - k1 + 1) as usize];
        let mut exempt_new = 0u64;
        cutf8::length::scan_disk(&buf[..n], at_end, |e| match e {
            DiskEvent::Grow(p) if p < limit => counts[p / BLOCK as usize] += 1,
            DiskEvent::Exempt(p) if p < limit => exempt_new += 1,
            _ => {}
        });
        let new_total: u64 = counts.iter().sum();
        let old_total = g_after - g1;
        let mut steps: Vec<(u64, u64)> = self.steps.iter().copied().filter(|s| s.0 <= k1).collect();
        let mut g = g1;
        for (i, c) in counts.iter().enumerate() {
            if *c > 0 {
                g += c;
                steps.push((k1 + i as u64 + 1, g));
            }
        }
        let delta = new_total as i64 - old_total as i64;
        for &(k, og) in self.steps.iter().filter(|s| s.0 > k2 + 1) {
            steps.push((k, (og as i64 + delta) as u64));
        }
        // Keep the invariant: strictly increasing k and g, first g > 0.
        steps.dedup_by(|b, a| b.1 == a.1);
        steps.retain(|s| s.1 > 0);
        self.steps = steps;
        self.growth = (self.growth as i64 + delta) as u64;
        self.disk_len = new_disk_len;
        self.exempt += exempt_new;
        Ok(())
    }
}

/// Reads `file[pos..end)`.
struct PosRead<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for PosRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.end.saturating_sub(self.pos)) as usize;
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// One step of a scan: bytes read into the buffer, a hole of that many
/// NUL bytes (not read), or the end.
enum Piece {
    Data(usize),
    Hole(u64),
    End,
}

/// `file[pos..end)` as data and holes (SEEK_DATA/SEEK_HOLE; where the
/// filesystem does not tell, everything is data). A file that shrinks
/// meanwhile ends early: a short read is the end.
struct Extents<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
    /// Data is known to go on up to here (the next hole or `end`).
    data_to: u64,
}

impl<'a> Extents<'a> {
    fn new(file: &'a File, pos: u64, end: u64) -> Extents<'a> {
        Extents {
            file,
            pos,
            end: end.max(pos),
            data_to: pos,
        }
    }

    fn seek(&self, whence: libc::c_int) -> io::Result<Option<u64>> {
        let Ok(at) = i64::try_from(self.pos) else {
            return Ok(None);
        };
        // SAFETY: lseek on a descriptor we borrow; it moves only the file
        // offset, which nobody here uses (all I/O is positioned).
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), at, whence) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                // No data from here on.
                Some(libc::ENXIO) => Ok(Some(u64::MAX)),
                Some(libc::EINVAL | libc::EOPNOTSUPP) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(r as u64))
    }

    fn next(&mut self, buf: &mut [u8]) -> io::Result<Piece> {
        if self.pos >= self.end {
            return Ok(Piece::End);
        }
        if self.pos >= self.data_to {
            match self.seek(libc::SEEK_DATA)? {
                None => self.data_to = self.end,
                Some(d) if d > self.pos => {
                    let to = d.min(self.end);
                    let len = to - self.pos;
                    self.pos = to;
                    return Ok(Piece::Hole(len));
                }
                Some(_) => {
                    self.data_to = match self.seek(libc::SEEK_HOLE)? {
                        Some(h) if h > self.pos => h.min(self.end),
                        _ => self.end,
                    };
                }
            }
        }
        let want = (buf.len() as u64).min(self.data_to - self.pos) as usize;
        let n = read_full_at(self.file, &mut buf[..want], self.pos)?;
        if n == 0 {
            return Ok(Piece::End);
        }
        self.pos += n as u64;
        if n < want {
            // Shorter than it was: the end is here.
            self.end = self.pos;
        }
        Ok(Piece::Data(n))
    }
}

/// Given disk bytes `head` where `head[rel]` is at disk offset `block` and
/// `g` growing units start before `block`: the unit boundary to decode from,
/// `(disk offset, view offset)` — `block` itself, or the lead of a complete
/// unit that covers it (everything else decodes the same from any byte).
fn unit_start_near(head: &[u8], rel: usize, block: u64, g: u64, at_end: bool) -> (u64, u64) {
    if rel < head.len() && head[rel] & 0xC0 == 0x80 {
        if let Some(t) = head[..rel].iter().rposition(|&b| b & 0xC0 != 0x80) {
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
    cutf8::encode_view(cp, &mut tmp) > len
}

/// Fill `buf` from `file` at `off`, short only at end of file.
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], off) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                off += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Read the view of a corrected file: V of its disk bytes from view offset
/// `view_off`, into `buf`. `data_start` is where the disk bytes begin in
/// `file` (8, after the magic). Returns fewer bytes than `buf.len()` only at
/// the end of the view.
pub fn read_view_at(
    file: &File,
    data_start: u64,
    index: &OffsetIndex,
    view_off: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    let view_len = index.view_len();
    if view_off >= view_len || buf.is_empty() {
        return Ok(0);
    }
    let want = (buf.len() as u64).min(view_len - view_off) as usize;
    let (k, g) = index.checkpoint(view_off);
    let block = k * BLOCK;
    let back = block.min(BACK);

    // Disk bytes never outnumber their view: the skip to view_off, the
    // request, the unit before the block start and one unit of slack are
    // enough, so a small read decodes a small range.
    let need = (view_off - (block + g)) + back + want as u64 + 16;
    let first = need.min(CHUNK as u64) as usize;
    let mut disk = vec![0u8; first];
    let mut out = vec![0u8; max_view_len(first).max(MIN_DST)];
    let mut pos = block - back;
    let mut n = read_full_at(file, &mut disk, data_start + pos)?;
    let mut at_end = pos + (n as u64) >= index.disk_len() || n < disk.len();

    let rel = back as usize;
    if n < rel {
        // The file is shorter than the index says (it changed): the end.
        return Ok(0);
    }
    let (dstart, vpos) = unit_start_near(&disk[..n], rel, block, g, at_end);
    let mut from = (dstart - pos) as usize;

    let mut skip = view_off - vpos;
    let mut got = 0usize;
    let mut dec = Decoder::lossless();
    loop {
        // A short read (the file shrank meanwhile) is the end.
        let mut src = disk.get(from..n).unwrap_or_default();
        loop {
            let (status, r, w) = dec.convert(src, &mut out, at_end);
            src = &src[r..];
            let mut produced = &out[..w];
            let s = (skip as usize).min(produced.len());
            skip -= s as u64;
            produced = &produced[s..];
            let take = produced.len().min(want - got);
            buf[got..got + take].copy_from_slice(&produced[..take]);
            got += take;
            if got == want {
                return Ok(got);
            }
            match status {
                Status::OutputFull => continue,
                _ => break,
            }
        }
        if at_end {
            return Ok(got);
        }
        pos += n as u64;
        from = 0;
        if disk.len() < CHUNK {
            disk.resize(CHUNK, 0);
            out.resize(max_view_len(CHUNK), 0);
        }
        n = read_full_at(file, &mut disk, data_start + pos)?;
        at_end = pos + (n as u64) >= index.disk_len() || n < disk.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutf8::{decode_to_vec, encode_to_vec, MAGIC};
    use rand::{Rng, SeedableRng};
    use std::io::Write;

    const DATA: u64 = MAGIC.len() as u64;

    fn file_with(disk: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&MAGIC).unwrap();
        f.write_all(disk).unwrap();
        f
    }

    /// A text mixing unchanged and growing characters with the given
    /// density of growing ones (per mille), plus ill-formed bytes.
    fn corpus(seed: u64, chars: usize, dense: u32, junk: bool) -> Vec<u8> {
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
                let n = cutf8::encode_disk(c, &mut b).unwrap();
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
                encode_to_vec(s.as_bytes(), true).unwrap()
            };
            disk.extend_from_slice(&piece);
        }
        disk
    }

    fn check_reads(disk: &[u8], seed: u64, reads: usize) {
        let view = decode_to_vec(disk, false).unwrap();
        let idx = OffsetIndex::from_bytes(disk);
        assert_eq!(idx.view_len(), view.len() as u64);
        assert_eq!(idx.disk_len(), disk.len() as u64);
        let f = file_with(disk);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut buf = vec![0u8; 70_000];
        for _ in 0..reads {
            let off = rng.gen_range(0..=view.len() as u64 + 3);
            let len = match rng.gen_range(0..3) {
                0 => rng.gen_range(0..8),
                1 => rng.gen_range(0..5000),
                _ => rng.gen_range(0..70_000),
            };
            let got = read_view_at(&f, 8, &idx, off, &mut buf[..len]).unwrap();
            let o = (off as usize).min(view.len());
            let expect = &view[o..(o + len).min(view.len())];
            assert_eq!(&buf[..got], expect, "off {off} len {len}");
        }
    }

    #[test]
    fn identity_text_costs_no_index_memory() {
        let disk = encode_to_vec(
            "plain ASCII, Ελληνικά, кириллица, 中文, 😀\n"
                .repeat(5000)
                .as_bytes(),
            true,
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
            let view = decode_to_vec(&disk, false).unwrap();
            let idx = OffsetIndex::from_bytes(&disk);
            let f = file_with(&disk);
            for off in 0..view.len() as u64 {
                if off % 97 != 0 && !(off % BLOCK < 16 || off % BLOCK > BLOCK - 16) {
                    continue;
                }
                let mut b = [0u8; 9];
                let n = read_view_at(&f, 8, &idx, off, &mut b).unwrap();
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
    fn build_file_skips_holes_and_equals_a_full_scan() {
        // Data, a hole that cuts a growing unit in two, data far away, and
        // a hole up to the end.
        let mut head = corpus(21, 5000, 300, true);
        head.extend_from_slice(&[0xEF, 0xBF]); // a unit the hole cuts
        let tail = corpus(22, 5000, 300, true);
        let far = 3 << 20;
        let len = far + tail.len() as u64 + (1 << 20);
        let f = file_with(&head);
        f.write_all_at(&tail, DATA + far).unwrap();
        f.set_len(DATA + len).unwrap();
        let mut full = vec![0u8; len as usize];
        full[..head.len()].copy_from_slice(&head);
        full[far as usize..far as usize + tail.len()].copy_from_slice(&tail);
        let whole = OffsetIndex::from_bytes(&full);
        assert_eq!(
            OffsetIndex::build_file(&f, DATA, DATA + len).unwrap(),
            whole
        );
        // A file shorter than asked ends where it ends.
        let short = OffsetIndex::build_file(&f, DATA, DATA + len + 999).unwrap();
        assert_eq!(short, whole);
    }

    #[test]
    fn reads_past_a_shrunk_file_are_eof_not_a_panic() {
        let disk = corpus(23, 60_000, 500, false);
        let idx = OffsetIndex::from_bytes(&disk);
        let f = file_with(&disk);
        f.set_len(DATA + 42).unwrap();
        let mut buf = vec![0u8; 4096];
        for off in [0, 41, 42, 100, 5000, 300_000, idx.view_len() - 1] {
            // Any answer but a panic: the caller re-checks the stamp.
            let _ = read_view_at(&f, DATA, &idx, off, &mut buf);
        }
        let _ = idx.unit_start_before(&f, DATA, 300_000);
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
