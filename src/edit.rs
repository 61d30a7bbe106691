//! Writes to a corrected file, in view terms: the mount's write path below
//! FUSE. Knows backing files (pread/pwrite/ftruncate) and the journal; knows
//! nothing of inodes, handles or the kernel.
//!
//! A write of `data` at view offset `o` changes the disk bytes of only a
//! small window: W (SPEC §2) restarts at every byte that is not a
//! continuation byte, so the window runs from the last such byte before `o`
//! (when `data` could extend the unit it starts) to the first such byte at or
//! after `o + data.len()` (at most seven bytes on each side). The window's new
//! disk bytes then go back:
//!
//! * in place, when they are as long as the old ones (almost all edits of
//!   almost all text): one `pwrite`, O(k);
//! * at the end, when the window reaches the end of the file (appends):
//!   one `pwrite` that extends the file, O(k);
//! * otherwise through the [`Journal`] (`crate::journal`): the new tail of
//!   the file (window plus everything after it) is written to the journal
//!   and made durable, then copied over the file in place and the journal
//!   entry removed. A kill at any point leaves the old content or, after the
//!   next mount replays the journal, the new.
//!
//! Every change happens in one syscall or under the journal, so a killed
//! daemon never leaves a file half-converted (SPEC §3). The inode is always
//! the same one: hard links, owner, mode and xattrs survive.
//!
//! fallocate's zeroing modes ([`zero_range`]) use the same window and the
//! same three ways back; its allocating modes ([`allocate`]) only reserve
//! backing blocks and extend like [`truncate`].
//!
//! Content W cannot store (C1 controls, overlong forms, surrogates) makes the
//! caller turn the file raw with [`to_raw`], under the journal as well.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use crate::index::{read_full_at, read_view_at, OffsetIndex};
pub use crate::journal::Journal;
use cutf8::{decode_disk_unit, encode_view, DiskUnit, Encoder, Malformed, Status, MAGIC};

/// Where the text starts in a corrected file.
pub const DATA_START: u64 = MAGIC.len() as u64;

/// Longest unit minus one, in either encoding: how far a write can reach
/// into its neighbours.
const REACH: u64 = 7;

/// Bytes copied per step when streaming a tail.
const CHUNK: usize = 1 << 20;

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written; the index is updated.
    Written,
    /// W cannot store the new content (e.g. a C1 control): nothing was
    /// changed; the caller turns the file raw with [`to_raw`].
    Unstorable(Malformed),
}

fn is_cont(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Reads view bytes `[from, to)` (clamped to the view) of a corrected file.
fn view_range(file: &File, index: &OffsetIndex, from: u64, to: u64) -> io::Result<Vec<u8>> {
    let to = to.min(index.view_len());
    if from >= to {
        return Ok(Vec::new());
    }
    let mut v = vec![0u8; (to - from) as usize];
    let n = read_view_at(file, DATA_START, index, from, &mut v)?;
    v.truncate(n);
    Ok(v)
}

/// Disk offset (after the magic) of the unit that starts at view offset
/// `view_off`, which must be a unit boundary of the current content (a byte
/// that is not a continuation byte, a continuation byte beyond the reach of
/// any lead, or the end).
fn disk_offset_of(file: &File, index: &OffsetIndex, view_off: u64) -> io::Result<u64> {
    if view_off >= index.view_len() {
        return Ok(index.disk_len());
    }
    if index.is_identity() {
        return Ok(view_off);
    }
    // Walk units from the index's checkpoint (at most one block away).
    let (disk0, view0) = index.unit_start_before(file, DATA_START, view_off)?;
    let (mut d, mut v) = (disk0, view0);
    let mut buf = vec![0u8; 8192];
    loop {
        let n = read_full_at(file, &mut buf, DATA_START + d)?;
        let at_end = d + n as u64 >= index.disk_len();
        let mut i = 0;
        while i < n {
            if v >= view_off {
                return Ok(d + i as u64);
            }
            let (dl, vl) = match decode_disk_unit(&buf[i..n], at_end) {
                DiskUnit::Char { cp, len } => {
                    let mut tmp = [0u8; 8];
                    (len, encode_view(cp, &mut tmp))
                }
                DiskUnit::Truncated { len, .. } => (len, len),
                DiskUnit::Stray | DiskUnit::ReservedLead => (1, 1),
                DiskUnit::Incomplete => break,
            };
            i += dl;
            v += vl as u64;
        }
        if v >= view_off {
            return Ok(d + i as u64);
        }
        if n == 0 || at_end && i >= n {
            return Ok(d + i as u64);
        }
        d += i as u64;
    }
}

fn write_all_at(file: &File, buf: &[u8], off: u64) -> io::Result<()> {
    file.write_all_at(buf, off)
}

/// W of a whole window (`last`: nothing follows that could extend its last
/// unit).
fn encode_window(view: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut out = vec![0u8; view.len() + 16];
    let mut e = Encoder::lossless();
    let (mut r, mut w) = (0, 0);
    loop {
        let (status, rr, ww) = e.convert(&view[r..], &mut out[w..], true);
        r += rr;
        w += ww;
        match status {
            Status::InputEmpty => {
                out.truncate(w);
                return Ok(out);
            }
            Status::OutputFull => out.resize(out.len() * 2, 0),
            Status::Malformed(m) => return Err(m),
        }
    }
}

/// The edges of the window a change of `view[view_off..end)` re-encodes
/// (module doc): the start of the unit `view_off` is inside of (`view_off`
/// itself when it starts a unit and `extends_left` is false: the change's
/// first byte cannot complete the unit before), and the view bytes from
/// `end` up to the first non-continuation byte (or the end, or past every
/// lead's reach).
fn window_edges(
    file: &File,
    index: &OffsetIndex,
    view_off: u64,
    end: u64,
    extends_left: bool,
) -> io::Result<(u64, Vec<u8>)> {
    let base = view_off.saturating_sub(REACH);
    let before = view_range(file, index, base, view_off + 1)?;
    let at = (view_off - base) as usize;
    let mut u = view_off;
    if extends_left || before.get(at).is_some_and(|&b| is_cont(b)) {
        if let Some(t) = before[..at].iter().rposition(|&b| !is_cont(b)) {
            u = base + t as u64;
        }
    }
    let mut after = view_range(file, index, end, end + REACH + 1)?;
    let keep = after
        .iter()
        .position(|&b| !is_cont(b))
        .unwrap_or(after.len().min(REACH as usize));
    after.truncate(keep);
    Ok((u, after))
}

/// Writes `data` at view offset `view_off` of the corrected `file` (opened
/// read-write, not O_APPEND), updating `index`. Writing past the end fills
/// the gap with zeros, as a native file would read.
pub fn write_at(
    file: &File,
    index: &mut OffsetIndex,
    journal: &Journal,
    view_off: u64,
    data: &[u8],
) -> io::Result<Outcome> {
    let vlen = index.view_len();
    if view_off > vlen {
        // Zeros fill the gap, as a native file reads. A small gap goes in
        // the same single write as the data; a large one is first made by
        // extending the file (zeros look the same on both sides), so memory
        // stays bounded.
        if view_off - vlen > CHUNK as u64 {
            truncate(file, index, view_off)?;
            return write_at(file, index, journal, view_off, data);
        }
        let mut filled = vec![0u8; (view_off - vlen) as usize];
        filled.extend_from_slice(data);
        return write_at(file, index, journal, vlen, &filled);
    }
    if data.is_empty() {
        return Ok(Outcome::Written);
    }
    let end = view_off + data.len() as u64;

    // `data` starting with a continuation byte may complete the unit before.
    let (u, after) = window_edges(file, index, view_off, end, is_cont(data[0]))?;
    let p = end + after.len() as u64;
    let mut window = view_range(file, index, u, view_off)?;
    window.extend_from_slice(data);
    window.extend_from_slice(&after);
    let new_disk = match encode_window(&window) {
        Ok(d) => d,
        Err(m) => return Ok(Outcome::Unstorable(m)),
    };
    let du = disk_offset_of(file, index, u)?;
    let dp = disk_offset_of(file, index, p)?;
    let old_len = dp - du;
    let disk_len = index.disk_len();

    if new_disk.len() as u64 == old_len || (dp == disk_len && new_disk.len() as u64 > old_len) {
        // One pwrite: in place, or extending the file at its end. If the
        // backing store fails part way (ENOSPC, EIO), put the old bytes of
        // the window back and cut the file to its old length, so the last
        // content stays whole.
        let old_window = if dp == disk_len && old_len < CHUNK as u64 {
            let mut b = vec![0u8; old_len as usize];
            let n = read_full_at(file, &mut b, DATA_START + du)?;
            b.truncate(n);
            Some(b)
        } else {
            None
        };
        if let Err(e) = write_all_at(file, &new_disk, DATA_START + du) {
            if let Some(old) = old_window {
                let _ = file.set_len(DATA_START + disk_len);
                let _ = write_all_at(file, &old, DATA_START + du);
            }
            return Err(e);
        }
        let new_disk_len = disk_len - old_len + new_disk.len() as u64;
        // In place, everything after the window stays where it was.
        let changed_to = if new_disk_len == disk_len {
            dp
        } else {
            new_disk_len
        };
        index.rescan(
            file,
            DATA_START,
            du,
            changed_to,
            new_disk_len,
            Some(&new_disk),
        )?;
        return Ok(Outcome::Written);
    }
    // The text shifts: rewrite the tail under the journal.
    let new_disk_len = disk_len - old_len + new_disk.len() as u64;
    journal.rewrite(file, DATA_START + du, |out| {
        out.write_all(&new_disk)?;
        copy_range(file, DATA_START + dp, DATA_START + disk_len, out)
    })?;
    index.rescan(file, DATA_START, du, new_disk_len, new_disk_len, None)?;
    Ok(Outcome::Written)
}

/// Copies `file[from..to)` to `out` in bounded memory.
fn copy_range(file: &File, from: u64, to: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK.min((to - from) as usize).max(1)];
    let mut pos = from;
    while pos < to {
        let want = ((to - pos) as usize).min(buf.len());
        let n = read_full_at(file, &mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        pos += n as u64;
    }
    Ok(())
}

/// Truncates (or extends with zeros) the view of a corrected file to
/// `new_len` bytes. Zero empties the backing file entirely (magic included):
/// a file with no content takes the encoding of what is next written to it.
pub fn truncate(file: &File, index: &mut OffsetIndex, new_len: u64) -> io::Result<()> {
    let vlen = index.view_len();
    if new_len == 0 {
        file.set_len(0)?;
        *index = OffsetIndex::default();
        return Ok(());
    }
    if new_len >= vlen {
        // Zeros are ASCII: they look the same on both sides.
        let d = index.disk_len() + (new_len - vlen);
        file.set_len(DATA_START + d)?;
        index.rescan(file, DATA_START, index.disk_len(), d, d, None)?;
        return Ok(());
    }
    // Cut at the last unit boundary at or before new_len; the bytes of a
    // unit cut in two stay as they are in the view (W passes them through).
    let probe = view_range(file, index, new_len.saturating_sub(REACH), new_len + 1)?;
    let base = new_len.saturating_sub(REACH);
    let at = (new_len - base) as usize;
    let mut u = new_len;
    if probe.get(at).is_some_and(|&b| is_cont(b)) {
        if let Some(t) = probe[..at].iter().rposition(|&b| !is_cont(b)) {
            u = base + t as u64;
        }
    }
    let keep = view_range(file, index, u, new_len)?;
    let du = disk_offset_of(file, index, u)?;
    let tail = encode_window(&keep).map_err(|_| io::Error::from_raw_os_error(libc::EILSEQ))?;
    // Cut first, then append: a kill in between leaves a prefix of the
    // result, as a native truncate-then-write would.
    file.set_len(DATA_START + du)?;
    write_all_at(file, &tail, DATA_START + du)?;
    let d = du + tail.len() as u64;
    index.rescan(file, DATA_START, du, d, d, Some(&tail))?;
    Ok(())
}

/// How [`zero_range`] makes the bytes it zeroes in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zeroing {
    /// FALLOC_FL_PUNCH_HOLE: the backing range becomes a hole where it can.
    Punch,
    /// FALLOC_FL_ZERO_RANGE: the backing range is zeroed (and allocated).
    Zero,
}

/// Replaces view bytes `[view_off, view_off + len)` of the corrected `file`
/// with NULs (U+0000, one byte on both sides), extending the view when the
/// range reaches past its end: fallocate's PUNCH_HOLE and ZERO_RANGE on a
/// view. The caller clamps the range for KEEP_SIZE.
///
/// The window around the range is the one [`write_at`] uses: bytes of a
/// character cut by either boundary stay as they are (a lead byte and its
/// first continuation bytes before the range, stray continuation bytes after
/// it), which the lossless view shows unchanged — exactly what a native file
/// holds after the same call. Where the disk length of the window does not
/// change, the zeros are made in place by the backing fallocate (so a
/// punched range is a hole in BACKING too); where it does, the tail is
/// rewritten under the journal (zeros streamed, never held in memory). A
/// range past the end extends the file like [`truncate`].
pub fn zero_range(
    file: &File,
    index: &mut OffsetIndex,
    journal: &Journal,
    view_off: u64,
    len: u64,
    how: Zeroing,
) -> io::Result<()> {
    let vlen = index.view_len();
    let end = view_off
        .checked_add(len)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
    if len == 0 {
        return Ok(());
    }
    if view_off >= vlen {
        // Only the extension: zeros look the same on both sides.
        return truncate(file, index, end);
    }
    if end > vlen {
        // Zero what exists, then extend with zeros.
        zero_range(file, index, journal, view_off, vlen - view_off, how)?;
        return truncate(file, index, end);
    }
    // A range starting inside a unit keeps that unit's first bytes
    // (re-encoded alone: a truncated sequence W passes through); the
    // continuation bytes right after it stay (stray).
    let (u, after) = window_edges(file, index, view_off, end, false)?;
    let p = end + after.len() as u64;
    let unstorable = |_| io::Error::from_raw_os_error(libc::EILSEQ);
    let left = encode_window(&view_range(file, index, u, view_off)?).map_err(unstorable)?;
    let right = encode_window(&after).map_err(unstorable)?;
    let du = disk_offset_of(file, index, u)?;
    let dp = disk_offset_of(file, index, p)?;
    let disk_len = index.disk_len();
    let old_len = dp - du;
    let new_len = left.len() as u64 + len + right.len() as u64;
    let new_disk_len = disk_len - old_len + new_len;

    if new_len == old_len || (dp == disk_len && new_len > old_len) {
        // In place (growing at the end first when the window is the end):
        // everything after the window stays where it is.
        if new_disk_len > disk_len {
            file.set_len(DATA_START + new_disk_len)?;
        }
        let z = DATA_START + du + left.len() as u64;
        write_all_at(file, &left, DATA_START + du)?;
        zero_in_place(file, z, len, how)?;
        write_all_at(file, &right, z + len)?;
        // A long range is rescanned as a stream (the in-place rescan holds
        // its span in memory).
        let changed_to = if new_disk_len != disk_len || dp - du > CHUNK as u64 {
            new_disk_len
        } else {
            dp
        };
        index.rescan(file, DATA_START, du, changed_to, new_disk_len, None)?;
        return Ok(());
    }
    // The text shifts: rewrite the tail under the journal.
    journal.rewrite(file, DATA_START + du, |out| {
        out.write_all(&left)?;
        let zeros = vec![0u8; CHUNK.min(len as usize)];
        let mut left_to_write = len;
        while left_to_write > 0 {
            let n = left_to_write.min(zeros.len() as u64) as usize;
            out.write_all(&zeros[..n])?;
            left_to_write -= n as u64;
        }
        out.write_all(&right)?;
        copy_range(file, DATA_START + dp, DATA_START + disk_len, out)
    })?;
    index.rescan(file, DATA_START, du, new_disk_len, new_disk_len, None)?;
    Ok(())
}

/// Zeroes `file[off..off + len)` in place, without changing its size: by
/// the backing filesystem's fallocate as asked, or by writing zeros where it
/// has none.
fn zero_in_place(file: &File, off: u64, len: u64, how: Zeroing) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let mode = libc::FALLOC_FL_KEEP_SIZE
        | match how {
            Zeroing::Punch => libc::FALLOC_FL_PUNCH_HOLE,
            Zeroing::Zero => libc::FALLOC_FL_ZERO_RANGE,
        };
    match backing_fallocate(file, mode, off, len) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) => {}
        r => return r,
    }
    let zeros = vec![0u8; CHUNK.min(len as usize)];
    let mut pos = off;
    while pos < off + len {
        let n = (off + len - pos).min(zeros.len() as u64) as usize;
        write_all_at(file, &zeros[..n], pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// fallocate(2) on a backing file (byte offsets).
fn backing_fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    crate::sys::fallocate(file, mode, offset, len)
}

/// fallocate's allocating modes (0 and KEEP_SIZE) on the view range
/// `[view_off, view_off + len)` of the corrected `file`: the view keeps its
/// bytes; the backing blocks that hold (or will hold) the range are
/// allocated, so later writes there do not fail for lack of space; without
/// `keep_size` a range past the end extends the view with NULs.
///
/// A view byte never takes more bytes on disk than in the view, so the
/// range's disk bytes lie in `[view_off - growth, view_off + len)` (growth:
/// how much longer the whole view is than the disk); that is what is
/// allocated, with KEEP_SIZE, before the size changes — out of space
/// changes nothing.
pub fn allocate(
    file: &File,
    index: &mut OffsetIndex,
    view_off: u64,
    len: u64,
    keep_size: bool,
) -> io::Result<()> {
    let end = view_off
        .checked_add(len)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
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
    backing_fallocate(
        file,
        libc::FALLOC_FL_KEEP_SIZE,
        DATA_START + from,
        to.max(from + 1) - from,
    )?;
    if !keep_size && end > vlen {
        truncate(file, index, end)?;
    }
    Ok(())
}

/// Starts an empty file as a corrected file holding `data` (which the caller
/// found to be text W can store): magic number and W(data) in one write.
pub fn start_corrected(file: &File, data: &[u8]) -> io::Result<Result<OffsetIndex, Malformed>> {
    let disk = match encode_window(data) {
        Ok(d) => d,
        Err(m) => return Ok(Err(m)),
    };
    let mut all = Vec::with_capacity(disk.len() + MAGIC.len());
    all.extend_from_slice(&MAGIC);
    all.extend_from_slice(&disk);
    file.set_len(0)?;
    if let Err(e) = write_all_at(file, &all, 0) {
        // Out of space (or I/O error) part way: the file was empty and
        // stays empty, never a torn magic number.
        let _ = file.set_len(0);
        return Err(e);
    }
    Ok(Ok(OffsetIndex::from_bytes(&disk)))
}

/// Turns a corrected file raw: its content becomes its view with `data`
/// written at `view_off` (zeros filling any gap), all at once under the
/// journal. Fails with EILSEQ, changing nothing, when the result would begin
/// with the magic number.
pub fn to_raw(
    file: &File,
    index: &OffsetIndex,
    journal: &Journal,
    view_off: u64,
    data: &[u8],
) -> io::Result<u64> {
    let vlen = index.view_len();
    let new_len = vlen.max(view_off + data.len() as u64);
    let mut head = view_range(file, index, 0, 8)?;
    head.resize(8.min(new_len as usize), 0);
    for (k, &b) in data.iter().enumerate() {
        let pos = view_off + k as u64;
        if pos >= 8 {
            break;
        }
        head[pos as usize] = b;
    }
    if head == MAGIC {
        return Err(io::Error::from_raw_os_error(libc::EILSEQ));
    }
    journal.rewrite(file, 0, |out| {
        let mut pos = 0u64;
        let mut buf = vec![0u8; CHUNK];
        while pos < new_len {
            let want = ((new_len - pos) as usize).min(buf.len());
            let n = if pos < vlen {
                read_view_at(file, DATA_START, index, pos, &mut buf[..want])?
            } else {
                0
            };
            buf[n..want].fill(0);
            // Overlay the write.
            let (lo, hi) = (pos, pos + want as u64);
            let (wlo, whi) = (view_off, view_off + data.len() as u64);
            if wlo < hi && whi > lo {
                let s = wlo.max(lo);
                let e = whi.min(hi);
                buf[(s - lo) as usize..(e - lo) as usize]
                    .copy_from_slice(&data[(s - wlo) as usize..(e - wlo) as usize]);
            }
            out.write_all(&buf[..want])?;
            pos += want as u64;
        }
        Ok(())
    })?;
    Ok(new_len)
}

/// Whether writing `data` at `off` of a raw file would make it begin with
/// the magic number (SPEC §3: such a write fails with EILSEQ).
pub fn raw_write_makes_magic(file: &File, off: u64, data: &[u8]) -> io::Result<bool> {
    if off >= MAGIC.len() as u64 || data.is_empty() {
        return Ok(false);
    }
    let mut head = [0u8; 8];
    let n = read_full_at(file, &mut head, 0)?;
    let mut len = n;
    for (k, &b) in data.iter().enumerate() {
        let pos = off as usize + k;
        if pos >= 8 {
            break;
        }
        head[pos] = b;
        len = len.max(pos + 1);
    }
    // A gap before `off` reads as zeros.
    Ok(len == 8 && head == MAGIC)
}

/// Whether the first write to an empty file makes it corrected: UTF-8 text
/// (a sequence cut at the very end may be finished by the next write)
/// without U+0000 and without C1 controls.
pub fn is_text(data: &[u8]) -> bool {
    if memchr_zero(data) {
        return false;
    }
    let valid = match simdutf8::compat::from_utf8(data) {
        Ok(_) => data.len(),
        Err(e) => {
            if e.error_len().is_some() {
                return false;
            }
            e.valid_up_to()
        }
    };
    let s = match std::str::from_utf8(&data[..valid]) {
        Ok(s) => s,
        Err(_) => return false,
    };
    !s.chars().any(|c| ('\u{80}'..='\u{9F}').contains(&c))
}

fn memchr_zero(data: &[u8]) -> bool {
    data.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutf8::{decode_to_vec, encode_to_vec};
    use rand::{Rng, SeedableRng};
    use std::fs::{self, OpenOptions};
    use std::os::fd::AsFd;
    use std::path::PathBuf;

    struct Fixture {
        _dir: tempfile::TempDir,
        file: File,
        path: PathBuf,
        journal: Journal,
        index: OffsetIndex,
        model: Vec<u8>,
    }

    impl Fixture {
        fn new(text: &str) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.txt");
            let mut disk = MAGIC.to_vec();
            disk.extend(encode_to_vec(text.as_bytes(), true).unwrap());
            fs::write(&path, &disk).unwrap();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let root = File::open(dir.path()).unwrap();
            let journal = Journal::open(root.as_fd(), false).unwrap();
            let index = OffsetIndex::from_bytes(&disk[8..]);
            Fixture {
                _dir: dir,
                file,
                path,
                journal,
                index,
                model: text.as_bytes().to_vec(),
            }
        }

        /// Writes through `write_at`; the outcome must be `Written` exactly
        /// when W can store the new content, and then the model follows.
        fn write(&mut self, off: u64, data: &[u8]) -> Outcome {
            let mut next = self.model.clone();
            let off = off as usize;
            let end = off + data.len();
            if next.len() < end {
                next.resize(end, 0);
            }
            next[off..end].copy_from_slice(data);
            let storable = encode_to_vec(&next, false).is_ok();
            let before = fs::read(&self.path).unwrap();
            let r = write_at(&self.file, &mut self.index, &self.journal, off as u64, data).unwrap();
            match r {
                Outcome::Written => {
                    assert!(storable, "wrote content W cannot store");
                    self.model = next;
                }
                Outcome::Unstorable(_) => {
                    assert!(!storable, "refused storable content");
                    assert_eq!(
                        fs::read(&self.path).unwrap(),
                        before,
                        "a refused write changed the file"
                    );
                }
            }
            r
        }

        fn truncate(&mut self, len: u64) {
            truncate(&self.file, &mut self.index, len).unwrap();
            self.model.resize(len as usize, 0);
        }

        /// The backing file is exactly magic + W(model), the index equals a
        /// fresh one, and reads through it give the model.
        fn check(&self, what: &str) {
            let disk = fs::read(&self.path).unwrap();
            if self.model.is_empty() {
                assert!(disk.is_empty() || disk == MAGIC, "{what}: {disk:02X?}");
                return;
            }
            assert_eq!(&disk[..8], &MAGIC, "{what}");
            let expect = encode_to_vec(&self.model, false).unwrap();
            assert_eq!(
                &disk[8..],
                &expect[..],
                "{what}: disk differs from W(model)"
            );
            assert_eq!(
                decode_to_vec(&disk[8..], false).unwrap(),
                self.model,
                "{what}"
            );
            assert_eq!(
                self.index,
                OffsetIndex::from_bytes(&disk[8..]),
                "{what}: stale index"
            );
            let mut buf = vec![0u8; self.model.len() + 5];
            let n = read_view_at(&self.file, DATA_START, &self.index, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], &self.model[..], "{what}: read back");
            assert!(
                fs::read_dir(self._dir.path().join(crate::journal::JOURNAL_DIR))
                    .map_or(true, |mut d| d.next().is_none()),
                "journal left behind"
            );
        }
    }

    const PIECES: &[&str] = &[
        "a",
        "bc\n",
        "é",
        "ж",
        "中文",
        "😀",
        "\u{800}",
        "\u{89F}",
        "𐀀",
        "\u{1109F}",
        "x y z",
    ];

    fn random_text(rng: &mut impl Rng, n: usize) -> String {
        (0..n)
            .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
            .collect()
    }

    #[test]
    fn random_edits_match_a_model() {
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let start = {
                let n = rng.gen_range(0..3000);
                random_text(&mut rng, n)
            };
            let mut f = Fixture::new(&start);
            f.check("start");
            for step in 0..60 {
                let vlen = f.model.len() as u64;
                let what = format!("seed {seed} step {step}");
                match rng.gen_range(0..10) {
                    0..=4 => {
                        // overwrite at any byte offset (inside characters too)
                        let off = rng.gen_range(0..=vlen);
                        let text = {
                            let n = rng.gen_range(1..20);
                            random_text(&mut rng, n)
                        };
                        f.write(off, text.as_bytes());
                    }
                    5 | 6 => {
                        let text = {
                            let n = rng.gen_range(1..50);
                            random_text(&mut rng, n)
                        };
                        assert_eq!(f.write(vlen, text.as_bytes()), Outcome::Written, "{what}");
                    }
                    7 => {
                        // bytes that split a character: may pass through
                        let off = rng.gen_range(0..=vlen);
                        let pick = [
                            "中".as_bytes(),
                            &"😀".as_bytes()[1..3],
                            &[0xE4],
                            &[0x80, 0x80],
                            &[0xFF],
                        ][rng.gen_range(0..5)];
                        f.write(off, pick);
                    }
                    8 => {
                        let len = rng.gen_range(0..=vlen + 10);
                        f.truncate(len);
                    }
                    _ => {
                        let off = vlen + rng.gen_range(1..10);
                        f.write(off, b"gap");
                    }
                }
                f.check(&what);
                if f.model.is_empty() {
                    break;
                }
            }
        }
    }

    #[test]
    fn a_write_far_past_the_end_fills_the_gap_with_zeros() {
        let mut f = Fixture::new("start ࠀ\n");
        let off = f.model.len() as u64 + 3 * CHUNK as u64 + 5;
        assert_eq!(f.write(off, "end ࠁ\n".as_bytes()), Outcome::Written);
        f.check("far write");
    }

    #[test]
    fn unstorable_content_changes_nothing_and_goes_raw() {
        let mut f = Fixture::new("héllo wörld\n");
        let before = fs::read(&f.path).unwrap();
        let r = f.write(3, &[0xC2, 0x85]);
        assert!(
            matches!(r, Outcome::Unstorable(m) if m.problem == cutf8::Problem::C1Control(0x85))
        );
        assert_eq!(fs::read(&f.path).unwrap(), before);
        let len = to_raw(&f.file, &f.index, &f.journal, 3, &[0xC2, 0x85]).unwrap();
        let mut expect = "héllo wörld\n".as_bytes().to_vec();
        expect[3..5].copy_from_slice(&[0xC2, 0x85]);
        assert_eq!(fs::read(&f.path).unwrap(), expect);
        assert_eq!(len, expect.len() as u64);
    }

    #[test]
    fn to_raw_refuses_to_produce_the_magic() {
        let f = Fixture::new("12345678 and more\n");
        let before = fs::read(&f.path).unwrap();
        let e = to_raw(&f.file, &f.index, &f.journal, 0, &MAGIC).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EILSEQ));
        assert_eq!(fs::read(&f.path).unwrap(), before);
    }

    #[test]
    fn raw_magic_detection() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raw");
        fs::write(&p, [0xEF, 0xB7, 0x9D, 0xED, b'x', b'y']).unwrap();
        let f = File::open(&p).unwrap();
        assert!(raw_write_makes_magic(&f, 4, &[0xB2, 0xAE, 0x00, 0x0A]).unwrap());
        assert!(!raw_write_makes_magic(&f, 4, &[0xB2, 0xAE, 0x00]).unwrap());
        assert!(!raw_write_makes_magic(&f, 8, &MAGIC).unwrap());
        assert!(raw_write_makes_magic(&f, 0, &MAGIC).unwrap());
    }

    #[test]
    fn text_detection() {
        assert!(is_text(b"plain\n"));
        assert!(is_text("中文".as_bytes()));
        assert!(
            is_text(&"中文".as_bytes()[..4]),
            "a character cut at the end is still text"
        );
        assert!(!is_text(b"nul\0"));
        assert!(!is_text(&[0xC2, 0x85]));
        assert!(!is_text(&[0xFF, b'a']));
        assert!(!is_text(&[0xC0, 0xAF]));
    }
}
