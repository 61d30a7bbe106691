//! Executes the write planner's plans (`crate::view::write`) on backing
//! files: the mount's write path below FUSE. Knows backing files
//! (pread/pwrite/ftruncate/fallocate) and the journal; knows nothing of
//! inodes, handles, the kernel or errno.
//!
//! A write reads two small spans around the change (`super::span`), lets
//! the planner decide, and carries the [`Patch`] out:
//!
//! * [`Way::InPlace`] and [`Way::Extend`]: one `pwrite`, O(k). If the
//!   backing store fails part way (ENOSPC, EIO), the old bytes of a window
//!   at the end are put back and the file cut to its old length, so the
//!   last content stays whole;
//! * [`Way::Tail`]: through the [`RedoJournal`] (`crate::redo`): the new tail
//!   of the file (window plus everything after it) is written to the journal
//!   and made durable, then copied over the file in place and the journal
//!   entry removed. A kill at any point leaves the old content or, after the
//!   next mount replays the journal, the new.
//!
//! Every change happens in one syscall or under the journal, so a killed
//! daemon never leaves a file half-converted (docs/behaviour.md, "The mount"). The inode is always
//! the same one: hard links, owner, mode and xattrs survive. After each
//! change the index is brought up to date (`super::rescan`).
//!
//! fallocate's zeroing modes ([`zero_range`]) use the same window and the
//! same three ways; its allocating modes ([`allocate`]) only reserve
//! backing blocks and extend like [`truncate`]. Content W cannot store
//! (C1 controls, overlong forms, surrogates) fails a write with
//! `view::Error::Unstorable`; the caller then turns the file raw with
//! [`to_raw`], under the journal as well.
//!
//! (Over 600 lines with its tests: the code is about 350, the model-based
//! tests on real files with a real journal the rest.)

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

use nix::errno::Errno as NixErrno;
use nix::fcntl::{fallocate, FallocateFlags};

use crate::redo::RedoJournal;
use crate::view::write::{
    overlay, plan_allocate, plan_append, plan_resize, plan_start, plan_write, plan_zero,
    span_for_resize, spans_for,
};
use crate::view::{
    magic, Error as ViewError, OffsetIndex, Patch, Resize, Span, Way, DATA_START, END_SPAN,
};

use super::{read_full_at, read_raw, read_view_into, rescan, span, Result};

/// Bytes copied per step when streaming a tail.
const CHUNK: usize = 1 << 20;

/// Writes `data` at view offset `view_off` of the corrected `file` (opened
/// read-write, not O_APPEND), updating `index`. Writing past the end fills
/// the gap with zeros, as a native file would read. Content W cannot store
/// fails with `view::Error::Unstorable`, changing nothing.
pub fn write_at(
    file: &File,
    index: &mut OffsetIndex,
    journal: &RedoJournal,
    view_off: u64,
    data: &[u8],
) -> Result<()> {
    let vlen = index.view_len();
    if view_off > vlen {
        // Zeros fill the gap, as a native file reads. A small gap goes in
        // the same single write as the data; a large one is first made by
        // extending the file (zeros look the same on both sides), so memory
        // stays bounded.
        if view_off - vlen > CHUNK as u64 {
            truncate(file, index, journal, view_off)?;
            return write_at(file, index, journal, view_off, data);
        }
        let mut filled = vec![0u8; (view_off - vlen) as usize];
        filled.extend_from_slice(data);
        return write_at(file, index, journal, vlen, &filled);
    }
    if data.is_empty() {
        return Ok(());
    }
    if view_off == index.view_len() {
        // Appends: no span from a block's start. One that starts a unit
        // needs no bytes of the file; one that continues the character the
        // file ends in, its last few.
        if let Some(patch) = plan_append(index, view_off, data) {
            return apply(file, index, journal, &patch?);
        }
        let n = index.disk_len().min(END_SPAN as u64);
        let tail = read_raw(file, DATA_START + index.disk_len() - n, n as usize)?;
        if let Some(left) = index.end_span(&tail) {
            let patch = plan_write(index, &left, &Span::end(index), view_off, data)?;
            return apply(file, index, journal, &patch);
        }
    }
    let [l, r] = spans_for(view_off, view_off + data.len() as u64);
    let (left, right) = (span(file, index, l)?, span(file, index, r)?);
    let patch = plan_write(index, &left, &right, view_off, data)?;
    apply(file, index, journal, &patch)
}

/// Where an append ([`append`], [`append_raw`]) landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// At the end the caller's index (or size) knew: the index is the
    /// file's.
    AtEnd,
    /// After bytes another appender (another daemon, a program in BACKING)
    /// put there first: the bytes are whole, the index no longer
    /// describes the file, and the file must be learned again.
    After,
}

/// Appends `data` to the view of a corrected file, at its end as it is
/// when the bytes land: the backing file's own append
/// ([`crate::sys::append`]), so no appender, in this daemon or out of it,
/// overwrites another's bytes. An append that must rewrite the file's last
/// bytes (it continues the character the file ends in) goes as
/// [`write_at`] at the index's end.
pub fn append(
    file: &File,
    index: &mut OffsetIndex,
    journal: &RedoJournal,
    data: &[u8],
) -> Result<Landed> {
    let end = index.view_len();
    let patch = match plan_append(index, end, data) {
        Some(Ok(p)) if p.way == Way::Extend => p,
        Some(Err(e)) => return Err(e.into()),
        _ => return write_at(file, index, journal, end, data).map(|()| Landed::AtEnd),
    };
    let disk_len = index.disk_len();
    let (n, at) = crate::sys::append(std::os::fd::AsFd::as_fd(file), &patch.new)?;
    if n < patch.new.len() {
        // Out of room partway: the part would end inside a character.
        // Taken back when nothing followed it.
        if let Ok(st) = crate::sys::fstat(std::os::fd::AsFd::as_fd(file)) {
            if st.st_size as u64 == at + n as u64 {
                let _ = file.set_len(at);
            }
        }
        return Err(io::Error::from_raw_os_error(libc::ENOSPC).into());
    }
    if at != DATA_START + disk_len {
        return Ok(Landed::After);
    }
    let new_disk_len = disk_len + patch.new.len() as u64;
    rescan(
        file,
        index,
        patch.at,
        new_disk_len,
        new_disk_len,
        Some(&patch.new),
    )?;
    Ok(Landed::AtEnd)
}

/// Appends `data` to a raw file of `size` bytes (as the caller knew it),
/// at its end as it is when the bytes land (see [`append`]); how many
/// were written (short only when the filesystem ran out of room after
/// some) and the offset they landed at. `head` as for [`write_raw`],
/// which a file shorter than the magic number needs.
pub fn append_raw(
    file: &File,
    size: u64,
    data: &[u8],
    head: impl FnOnce() -> io::Result<Vec<u8>>,
) -> Result<(usize, u64)> {
    guard_raw(size, data, head)?;
    Ok(crate::sys::append(std::os::fd::AsFd::as_fd(file), data)?)
}

/// Carries out a write's patch and rescans.
fn apply(file: &File, index: &mut OffsetIndex, journal: &RedoJournal, p: &Patch) -> Result<()> {
    let disk_len = index.disk_len();
    let new_disk_len = p.new_disk_len(disk_len);
    if p.way == Way::Tail {
        // The text shifts: rewrite the tail under the journal.
        journal.rewrite(file, DATA_START + p.at, |out| {
            out.write_all(&p.new)?;
            copy_range(file, DATA_START + p.old_end, DATA_START + disk_len, out)
        })?;
        rescan(file, index, p.at, new_disk_len, new_disk_len, None)?;
        return Ok(());
    }
    // One pwrite: in place, or extending the file at its end.
    let old_len = p.old_end - p.at;
    let old_window = if p.old_end == disk_len && old_len < CHUNK as u64 {
        Some(read_raw(file, DATA_START + p.at, old_len as usize)?)
    } else {
        None
    };
    if let Err(e) = file.write_all_at(&p.new, DATA_START + p.at) {
        if let Some(old) = old_window {
            let _ = file.set_len(DATA_START + disk_len);
            let _ = file.write_all_at(&old, DATA_START + p.at);
        }
        return Err(e.into());
    }
    // In place, everything after the window stays where it was.
    let changed_to = if p.way == Way::InPlace {
        p.old_end
    } else {
        new_disk_len
    };
    rescan(file, index, p.at, changed_to, new_disk_len, Some(&p.new))?;
    Ok(())
}

/// Copies `file[from..to)` to `out` in bounded memory.
fn copy_range(file: &File, from: u64, to: u64, out: &mut dyn Write) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK.min((to.saturating_sub(from)) as usize).max(1)];
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
/// Each way is one syscall but a cut inside a character, which goes under
/// the journal: all-or-nothing, as ftruncate(2) is.
pub fn truncate(
    file: &File,
    index: &mut OffsetIndex,
    journal: &RedoJournal,
    new_len: u64,
) -> Result<()> {
    let sp = if new_len != 0 && new_len < index.view_len() {
        span(file, index, span_for_resize(new_len))?
    } else {
        crate::view::Span::whole(index, &[])
    };
    match plan_resize(index, &sp, new_len)? {
        Resize::Empty => {
            file.set_len(0)?;
            *index = OffsetIndex::default();
        }
        Resize::Extend { disk_len } => {
            file.set_len(DATA_START + disk_len)?;
            let old = index.disk_len();
            rescan(file, index, old, disk_len, disk_len, None)?;
        }
        Resize::Cut { at, tail } if tail.is_empty() => {
            file.set_len(DATA_START + at)?;
            rescan(file, index, at, at, at, Some(&[]))?;
        }
        Resize::Cut { at, tail } => {
            // The first bytes of the character the cut falls in replace
            // everything from its start: cut then written, a kill in
            // between would leave the file shorter than asked.
            journal.rewrite(file, DATA_START + at, |out| out.write_all(&tail))?;
            let d = at + tail.len() as u64;
            rescan(file, index, at, d, d, Some(&tail))?;
        }
    }
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
/// The window is the one [`write_at`] uses (`view::write::plan_zero`).
/// Where the disk length of the window does not change, the zeros are made
/// in place by the backing fallocate (so a punched range is a hole in
/// BACKING too); where it does, the tail is rewritten under the journal
/// (zeros streamed, never held in memory). A range past the end extends
/// the file like [`truncate`].
pub fn zero_range(
    file: &File,
    index: &mut OffsetIndex,
    journal: &RedoJournal,
    view_off: u64,
    len: u64,
    how: Zeroing,
) -> Result<()> {
    let vlen = index.view_len();
    let end = view_off.checked_add(len).ok_or(ViewError::TooLarge)?;
    if len == 0 {
        return Ok(());
    }
    if view_off >= vlen {
        // Only the extension: zeros look the same on both sides.
        return truncate(file, index, journal, end);
    }
    if end > vlen {
        // Zero what exists, then extend with zeros.
        zero_range(file, index, journal, view_off, vlen - view_off, how)?;
        return truncate(file, index, journal, end);
    }
    let [l, r] = spans_for(view_off, end);
    let (left, right) = (span(file, index, l)?, span(file, index, r)?);
    let z = plan_zero(index, &left, &right, view_off, len)?;
    let disk_len = index.disk_len();
    let old_len = z.old_end - z.at;
    let new_disk_len = disk_len - old_len + z.new_len();

    if z.way != Way::Tail {
        // In place (growing at the end first when the window is the end):
        // everything after the window stays where it is.
        if new_disk_len > disk_len {
            file.set_len(DATA_START + new_disk_len)?;
        }
        let zs = DATA_START + z.at + z.left.len() as u64;
        file.write_all_at(&z.left, DATA_START + z.at)?;
        zero_in_place(file, zs, len, how)?;
        file.write_all_at(&z.right, zs + len)?;
        // A long range is rescanned as a stream (the in-place rescan holds
        // its span in memory).
        let changed_to = if new_disk_len != disk_len || old_len > CHUNK as u64 {
            new_disk_len
        } else {
            z.old_end
        };
        rescan(file, index, z.at, changed_to, new_disk_len, None)?;
        return Ok(());
    }
    // The text shifts: rewrite the tail under the journal.
    journal.rewrite(file, DATA_START + z.at, |out| {
        out.write_all(&z.left)?;
        let zeros = vec![0u8; CHUNK.min(len as usize)];
        let mut left_to_write = len;
        while left_to_write > 0 {
            let n = left_to_write.min(zeros.len() as u64) as usize;
            out.write_all(&zeros[..n])?;
            left_to_write -= n as u64;
        }
        out.write_all(&z.right)?;
        copy_range(file, DATA_START + z.old_end, DATA_START + disk_len, out)
    })?;
    rescan(file, index, z.at, new_disk_len, new_disk_len, None)?;
    Ok(())
}

/// Zeroes `file[off..off + len)` in place, without changing its size: by
/// the backing filesystem's fallocate as asked, or by writing zeros where it
/// has none.
fn zero_in_place(file: &File, off: u64, len: u64, how: Zeroing) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let mode = FallocateFlags::FALLOC_FL_KEEP_SIZE
        | match how {
            Zeroing::Punch => FallocateFlags::FALLOC_FL_PUNCH_HOLE,
            Zeroing::Zero => FallocateFlags::FALLOC_FL_ZERO_RANGE,
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
        file.write_all_at(&zeros[..n], pos)?;
        pos += n as u64;
    }
    Ok(())
}

/// fallocate(2) on a backing file (byte offsets).
fn backing_fallocate(file: &File, mode: FallocateFlags, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(NixErrno::EFBIG.into());
    };
    Ok(fallocate(file, mode, off, len)?)
}

/// fallocate's allocating modes (0 and KEEP_SIZE) on the view range
/// `[view_off, view_off + len)` of the corrected `file`: the view keeps its
/// bytes; the backing blocks that hold (or will hold) the range
/// (`view::write::plan_allocate`) are allocated, with KEEP_SIZE, before the
/// size changes — out of space changes nothing; without `keep_size` a range
/// past the end then extends the view with NULs.
pub fn allocate(
    file: &File,
    index: &mut OffsetIndex,
    journal: &RedoJournal,
    view_off: u64,
    len: u64,
    keep_size: bool,
) -> Result<()> {
    let (from, to) = plan_allocate(index, view_off, len)?;
    backing_fallocate(
        file,
        FallocateFlags::FALLOC_FL_KEEP_SIZE,
        DATA_START + from,
        to - from,
    )?;
    let end = view_off + len;
    if !keep_size && end > index.view_len() {
        truncate(file, index, journal, end)?;
    }
    Ok(())
}

/// Starts an empty file as a corrected file holding `data` (which the caller
/// found to be text): magic number and W(data) in one write. Content W
/// cannot store fails with `view::Error::Unstorable`, changing nothing.
pub fn start_corrected(file: &File, data: &[u8]) -> Result<OffsetIndex> {
    let (all, index) = plan_start(data)?;
    file.set_len(0)?;
    if let Err(e) = file.write_all_at(&all, 0) {
        // Out of space (or I/O error) part way: the file was empty and
        // stays empty, never a torn magic number.
        let _ = file.set_len(0);
        return Err(e.into());
    }
    Ok(index)
}

/// Turns a corrected file raw: its content becomes its view with `data`
/// written at `view_off` (zeros filling any gap), all at once under the
/// journal; returns the new length. Fails with `view::Error::MagicOnRaw`,
/// changing nothing, when the result would begin with the magic number.
pub fn to_raw(
    file: &File,
    index: &OffsetIndex,
    journal: &RedoJournal,
    view_off: u64,
    data: &[u8],
) -> Result<u64> {
    let vlen = index.view_len();
    let new_len = vlen.max(view_off + data.len() as u64);
    let mut head = [0u8; 8];
    let n = read_view_into(file, index, 0, &mut head)?;
    magic::guard(&head[..n], view_off, data)?;
    journal.rewrite(file, 0, |out| {
        let mut pos = 0u64;
        let mut buf = vec![0u8; CHUNK];
        while pos < new_len {
            let want = ((new_len - pos) as usize).min(buf.len());
            let n = if pos < vlen {
                read_view_into(file, index, pos, &mut buf[..want])?
            } else {
                0
            };
            buf[n..want].fill(0);
            overlay(&mut buf[..want], pos, view_off, data);
            out.write_all(&buf[..want])?;
            pos += want as u64;
        }
        Ok(())
    })?;
    Ok(new_len)
}

/// Writes `data` at `offset` of a raw file, as it is: refused with
/// `view::Error::MagicOnRaw` when it would make the file begin with the
/// magic number (`head` reads the file's first bytes; it is called only
/// then). Returns how much was written: short only when BACKING ran out of
/// space (or another error) after some bytes went in, as write(2) is.
pub fn write_raw(
    file: &File,
    offset: u64,
    data: &[u8],
    head: impl FnOnce() -> io::Result<Vec<u8>>,
) -> Result<usize> {
    guard_raw(offset, data, head)?;
    let mut done = 0;
    while done < data.len() {
        match file.write_at(&data[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if done > 0 => {
                log::debug!("short write after {done} bytes: {e}");
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// Refuses a change of a raw file that would make it begin with the magic
/// number; `head` reads its first bytes (only when the change reaches them).
pub fn guard_raw(
    offset: u64,
    data: &[u8],
    head: impl FnOnce() -> io::Result<Vec<u8>>,
) -> Result<()> {
    if offset >= DATA_START || data.is_empty() {
        return Ok(());
    }
    Ok(magic::guard(&head()?, offset, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::PIECES;
    use cutf8::{decode_lossless, encode_lossless, encode_strict, MAGIC};
    use rand::{Rng, SeedableRng};
    use std::fs::{self, OpenOptions};
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    /// What became of a write.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Outcome {
        Written,
        Unstorable(cutf8::Problem),
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        file: File,
        path: PathBuf,
        journal: RedoJournal,
        index: OffsetIndex,
        model: Vec<u8>,
    }

    impl Fixture {
        fn new(text: &str) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f.txt");
            let mut disk = MAGIC.to_vec();
            disk.extend(encode_strict(text.as_bytes()).unwrap());
            fs::write(&path, &disk).unwrap();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let root = File::open(dir.path()).unwrap();
            let journal = RedoJournal::open(root.as_fd(), false).unwrap();
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
            let storable = encode_lossless(&next).is_ok();
            let before = fs::read(&self.path).unwrap();
            let r = match write_at(&self.file, &mut self.index, &self.journal, off as u64, data) {
                Ok(()) => Outcome::Written,
                Err(super::super::Error::View(ViewError::Unstorable { problem, .. })) => {
                    Outcome::Unstorable(problem)
                }
                Err(e) => panic!("{e}"),
            };
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
            truncate(&self.file, &mut self.index, &self.journal, len).unwrap();
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
            let expect = encode_lossless(&self.model).unwrap();
            assert_eq!(
                &disk[8..],
                &expect[..],
                "{what}: disk differs from W(model)"
            );
            assert_eq!(decode_lossless(&disk[8..]), self.model, "{what}");
            assert_eq!(
                self.index,
                OffsetIndex::from_bytes(&disk[8..]),
                "{what}: stale index"
            );
            let mut buf = vec![0u8; self.model.len() + 5];
            let n = read_view_into(&self.file, &self.index, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], &self.model[..], "{what}: read back");
            assert!(
                fs::read_dir(self._dir.path().join(crate::redo::DIR)).map_or(true, |d| {
                    !d.flatten()
                        .any(|e| crate::redo::is_entry_name(e.file_name().as_bytes()))
                }),
                "journal left behind"
            );
        }
    }

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
        assert!(matches!(r, Outcome::Unstorable(p) if p == cutf8::Problem::C1Control(0x85)));
        assert_eq!(fs::read(&f.path).unwrap(), before);
        let len = to_raw(&f.file, &f.index, &f.journal, 3, &[0xC2, 0x85]).unwrap();
        let mut expect = "héllo wörld\n".as_bytes().to_vec();
        expect[3..5].copy_from_slice(&[0xC2, 0x85]);
        assert_eq!(fs::read(&f.path).unwrap(), expect);
        assert_eq!(len, expect.len() as u64);
    }

    #[test]
    fn a_truncation_inside_a_character_is_all_or_nothing() {
        // Through the journal: with one that cannot write (a read-only
        // mount's), the cut inside "中" fails and changes nothing, where
        // cutting first and writing after would have left the file short.
        let mut f = Fixture::new("ab中cd\n");
        let before = fs::read(&f.path).unwrap();
        let root = File::open(f._dir.path()).unwrap();
        let ro = RedoJournal::open(root.as_fd(), true).unwrap();
        let e = truncate(&f.file, &mut f.index, &ro, 3).unwrap_err();
        assert!(e.to_string().contains("Read-only"), "{e}");
        assert_eq!(fs::read(&f.path).unwrap(), before);
        // At a character's start it needs no journal.
        truncate(&f.file, &mut f.index, &ro, 2).unwrap();
        f.model.truncate(2);
        f.check("cut at a boundary");
        // With the mount's own journal, inside a character: done, and the
        // journal left empty.
        let mut f = Fixture::new("ab中cd\n");
        f.truncate(4);
        f.check("cut inside a character");
        assert_eq!(&f.model[..], &"ab中".as_bytes()[..4]);
    }

    #[test]
    fn to_raw_refuses_to_produce_the_magic() {
        let f = Fixture::new("12345678 and more\n");
        let before = fs::read(&f.path).unwrap();
        let e = to_raw(&f.file, &f.index, &f.journal, 0, &MAGIC).unwrap_err();
        assert!(
            matches!(e, super::super::Error::View(ViewError::MagicOnRaw)),
            "{e}"
        );
        assert_eq!(fs::read(&f.path).unwrap(), before);
    }
}
