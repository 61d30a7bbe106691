//! The I/O layer: the only place that reads and writes the contents of
//! backing files. It executes the plans of `crate::view` — fetching the
//! disk bytes a [`Reading`] or a [`Span`] asks for, carrying out a write's
//! [`Patch`](crate::view::Patch) — and knows nothing of FUSE, inodes or
//! errno.
//!
//! Every read goes through [`read_full_at`]: it fills its buffer, and a
//! short read is the end of the file (never an error, never a panic), so a
//! file that shrinks behind the mount's back ends a read early; the caller
//! re-checks the file's [`Stamp`] ([`read_view_checked`]) and reads again.
//! A read whose bytes disagree with the index although the stamp did not
//! move ([`Viewed::Stale`]: bytes changed in place without moving ctime,
//! as writes through a shared mapping can) tells the caller, which builds
//! the index again.

mod stamp;
pub mod write;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use nix::errno::Errno as NixErrno;
use nix::unistd::{lseek, Whence};

use crate::view::{self, OffsetIndex, Piece, Reading, Rescan, Span, DATA_START};
use cutf8::MAGIC;

pub use stamp::Stamp;
pub use write::Zeroing;
pub use write::{
    allocate, append, append_raw, start_corrected, to_raw, truncate, write_at, write_raw,
    zero_range, Landed,
};

/// What executing a plan can fail with: the backing file's own error (its
/// errno kept), or a reason of the view's.
#[derive(Debug)]
pub enum Error {
    Os(io::Error),
    View(view::Error),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Os(e)
    }
}

impl From<view::Error> for Error {
    fn from(e: view::Error) -> Error {
        Error::View(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Os(e) => e.fmt(f),
            Error::View(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

/// What the I/O layer returns.
pub type Result<T> = std::result::Result<T, Error>;

/// Fills `buf` from `file` at `off`; fewer bytes only at end of file.
pub fn read_full_at(file: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
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

/// Up to `size` raw bytes at `offset`; short only at end of file.
pub fn read_raw(file: &File, offset: u64, size: usize) -> io::Result<Vec<u8>> {
    let mut buf = reply_buffer(size);
    let n = read_full_at(file, &mut buf, offset)?;
    buf.truncate(n);
    Ok(buf)
}

/// Up to `size` view bytes at `offset` of a corrected file; short only at
/// the view's end (or where the file ends before its index says).
pub fn read_view(
    file: &File,
    index: &OffsetIndex,
    offset: u64,
    size: usize,
) -> io::Result<Vec<u8>> {
    read_view_noting(file, index, offset, size).map(|(data, _)| data)
}

/// [`read_view`], and whether the bytes disagreed with the index
/// (`Reading::stale`).
fn read_view_noting(
    file: &File,
    index: &OffsetIndex,
    offset: u64,
    size: usize,
) -> io::Result<(Vec<u8>, bool)> {
    let len = index.view_len().saturating_sub(offset);
    let mut buf = reply_buffer(size.min(usize::try_from(len).unwrap_or(usize::MAX)));
    let (n, stale) = read_view_parts(file, index, offset, &mut buf)?;
    buf.truncate(n);
    Ok((buf, stale))
}

/// Reads view bytes at `offset` into `buf`; how many.
pub fn read_view_into(
    file: &File,
    index: &OffsetIndex,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    read_view_parts(file, index, offset, buf).map(|(n, _)| n)
}

fn read_view_parts(
    file: &File,
    index: &OffsetIndex,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<(usize, bool)> {
    let mut r: Reading = index.reading(offset, buf.len());
    DISK.with_borrow_mut(|disk| {
        while let Some((pos, len)) = r.need() {
            if disk.len() < len {
                disk.resize(len, 0);
            }
            let n = read_full_at(file, &mut disk[..len], DATA_START + pos)?;
            r.feed(&disk[..n], buf);
        }
        if disk.len() > KEPT {
            *disk = Vec::new();
        }
        Ok((r.got(), r.stale()))
    })
}

/// The largest buffer a thread keeps between reads: a FUSE read of the
/// largest size (256 pages).
const KEPT: usize = (1 << 20) + (64 << 10);

thread_local! {
    /// Disk bytes of a view read, kept between reads, so a read neither
    /// allocates nor zeroes them again: each is read into before it is
    /// used, and only what the read filled is looked at.
    static DISK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A reply buffer given back by [`recycle`] once it was sent.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of `len` bytes for a read's reply: the thread's spare one
/// when it can hold them (its old bytes are overwritten or cut off by the
/// read: the caller truncates it to what was read; only bytes beyond its
/// old length are zeroed), else a new one. Small reads take new ones.
fn reply_buffer(len: usize) -> Vec<u8> {
    if len < 4096 {
        return vec![0u8; len];
    }
    let mut buf = SPARE.take();
    if buf.capacity() < len {
        return vec![0u8; len];
    }
    buf.resize(len, 0);
    buf
}

/// Gives a read's reply buffer back once it is sent, for the thread's
/// next read ([`read_raw`], [`read_view`]); one is kept per thread, up to
/// the largest read's size.
pub fn recycle(buf: Vec<u8>) {
    if buf.capacity() <= KEPT {
        SPARE.with_borrow_mut(|spare| {
            if spare.capacity() <= buf.capacity() {
                *spare = buf;
            }
        });
    }
}

/// What [`read_view_checked`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Viewed {
    /// The view bytes asked for.
    Read(Vec<u8>),
    /// The file changed during the read (its stamp moved): the bytes may
    /// mix two versions; learn the file again and read again.
    Changed,
    /// The file's stamp did not move, but its bytes disagree with the index
    /// (changed in place without moving ctime, as writes through a shared
    /// mapping can): the index is stale. The bytes read are the view of
    /// what is there, at offsets the index placed: build the index again
    /// and read again.
    Stale(Vec<u8>),
}

/// Up to `size` view bytes at `offset`, read through the index of the
/// file's state `stamp`, and the stamp checked again after the read.
pub fn read_view_checked(
    file: &File,
    index: &OffsetIndex,
    stamp: Stamp,
    offset: u64,
    size: usize,
) -> io::Result<Viewed> {
    let (data, stale) = read_view_noting(file, index, offset, size)?;
    Ok(if Stamp::now(file)? != stamp {
        Viewed::Changed
    } else if stale {
        Viewed::Stale(data)
    } else {
        Viewed::Read(data)
    })
}

/// The disk bytes around view bytes `[lo, hi)` the write planner needs.
pub fn span(file: &File, index: &OffsetIndex, (lo, hi): (u64, u64)) -> io::Result<Span> {
    let plan = index.span_plan(lo, hi);
    let bytes = read_raw(file, DATA_START + plan.start, plan.len)?;
    Ok(index.span(plan, bytes))
}

/// Whether `file` begins with the magic number. A file whose first data
/// is not at offset 0 (a hole, or unwritten extents after `fallocate`)
/// starts with NUL bytes, so it cannot: nothing is read then, which keeps
/// the read from pulling unwritten extents into the page cache (where ext4
/// would then report them as data to SEEK_DATA/SEEK_HOLE).
pub fn has_magic(file: &File) -> io::Result<bool> {
    match lseek(file, 0, Whence::SeekData) {
        Ok(0) => {}
        Ok(_) | Err(NixErrno::ENXIO) => return Ok(false),
        // EINVAL/EOPNOTSUPP: the filesystem does not say; read.
        Err(_) => {}
    }
    Ok(read_head(file)? == MAGIC)
}

/// The first bytes of `file` (as many as the magic number; fewer when it
/// is shorter), read without readahead: readahead would bring the pages
/// after the first (unwritten extents after `fallocate`, say) into the
/// page cache, and ext4 would then answer SEEK_DATA/SEEK_HOLE as if they
/// were data (16384 where BACKING says 4096: xfstests generic/436). The
/// descriptor's readahead is normal again after.
pub fn read_head(file: &File) -> io::Result<Vec<u8>> {
    crate::sys::fadvise(file, libc::POSIX_FADV_RANDOM);
    let head = read_raw(file, 0, MAGIC.len());
    crate::sys::fadvise(file, libc::POSIX_FADV_NORMAL);
    head
}

/// Builds the index of a corrected file by one scan of its bytes, holes
/// skipped.
pub fn build_index(file: &File) -> io::Result<OffsetIndex> {
    build_range(file, DATA_START, u64::MAX)
}

/// [`build_index`], storing in `done` how far into the file the scan is
/// after each read (for progress reports of long scans).
pub fn build_index_watched(
    file: &File,
    done: &std::sync::atomic::AtomicU64,
) -> io::Result<OffsetIndex> {
    let end = file.metadata()?.len();
    let mut src = Extents::new(file, DATA_START, end);
    src.progress = Some(done);
    OffsetIndex::build_pieces(|buf| src.next(buf))
}

/// The index of `file[start..end)` (`start` just after the magic number),
/// holes skipped (SEEK_DATA/SEEK_HOLE): a sparse 20 GiB file with 1 MiB of
/// data is scanned in milliseconds.
pub fn build_range(file: &File, start: u64, end: u64) -> io::Result<OffsetIndex> {
    // A hole runs to the end of the file, not past it.
    let end = end.min(file.metadata()?.len());
    let mut src = Extents::new(file, start, end);
    OffsetIndex::build_pieces(|buf| src.next(buf))
}

/// Brings `index` up to date after the disk bytes from `from` changed (see
/// `OffsetIndex::rescan_plan`). `fresh`, when given, holds the new bytes
/// from `from` to the end (an append just written): they are counted where
/// they are, not read back or copied; only the bytes from the start of
/// `from`'s block (less than a block) are read, and none when the fresh
/// bytes start a unit at the old end (`OffsetIndex::append_units`).
pub fn rescan(
    file: &File,
    index: &mut OffsetIndex,
    from: u64,
    changed_to: u64,
    new_disk_len: u64,
    fresh: Option<&[u8]>,
) -> io::Result<()> {
    let fresh = fresh.filter(|b| from + b.len() as u64 == new_disk_len);
    if let Some(fresh) = fresh {
        // An append that starts a unit: counted alone.
        if from == index.disk_len() && index.append_units(fresh) {
            return Ok(());
        }
    }
    match index.rescan_plan(from, changed_to, new_disk_len) {
        Rescan::Tail { start } => {
            let tail = match fresh {
                Some(fresh) => {
                    let head = read_raw(file, DATA_START + start, (from - start) as usize)?;
                    OffsetIndex::from_slices(&[&head, fresh])
                }
                // Holes (a file extended by truncate) are skipped.
                None => build_range(file, DATA_START + start, DATA_START + new_disk_len)?,
            };
            index.apply_tail(from, new_disk_len, tail);
        }
        Rescan::Blocks { start, len } => {
            let disk = read_raw(file, DATA_START + start, len)?;
            index.apply_blocks(from, changed_to, new_disk_len, &disk);
        }
    }
    Ok(())
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
    /// Where `pos` is reported, if anywhere.
    progress: Option<&'a std::sync::atomic::AtomicU64>,
}

impl<'a> Extents<'a> {
    fn new(file: &'a File, pos: u64, end: u64) -> Extents<'a> {
        Extents {
            file,
            pos,
            end: end.max(pos),
            data_to: pos,
            progress: None,
        }
    }

    fn seek(&self, whence: Whence) -> io::Result<Option<u64>> {
        let Ok(at) = i64::try_from(self.pos) else {
            return Ok(None);
        };
        match lseek(self.file, at, whence) {
            Ok(r) => Ok(Some(r as u64)),
            // No data from here on.
            Err(NixErrno::ENXIO) => Ok(Some(u64::MAX)),
            Err(NixErrno::EINVAL | NixErrno::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn next(&mut self, buf: &mut [u8]) -> io::Result<Piece> {
        if self.pos >= self.end {
            return Ok(Piece::End);
        }
        if self.pos >= self.data_to {
            match self.seek(Whence::SeekData)? {
                None => self.data_to = self.end,
                Some(d) if d > self.pos => {
                    let to = d.min(self.end);
                    let len = to - self.pos;
                    self.pos = to;
                    return Ok(Piece::Hole(len));
                }
                Some(_) => {
                    self.data_to = match self.seek(Whence::SeekHole)? {
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
        if let Some(p) = self.progress {
            p.store(self.pos, std::sync::atomic::Ordering::Relaxed);
        }
        if n < want {
            // Shorter than it was: the end is here.
            self.end = self.pos;
        }
        Ok(Piece::Data(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::index::tests::corpus;
    use cutf8::decode_lossless;
    use std::io::Write;

    const DATA: u64 = DATA_START;

    fn file_with(disk: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&MAGIC).unwrap();
        f.write_all(disk).unwrap();
        f
    }

    #[test]
    fn build_range_skips_holes_and_equals_a_full_scan() {
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
        assert_eq!(build_range(&f, DATA, DATA + len).unwrap(), whole);
        assert_eq!(build_index(&f).unwrap(), whole);
        // A file shorter than asked ends where it ends.
        assert_eq!(build_range(&f, DATA, DATA + len + 999).unwrap(), whole);
    }

    #[test]
    fn view_reads_of_a_file_match_v_and_a_shrunk_file_ends_early() {
        let disk = corpus(23, 60_000, 500, true);
        let view = decode_lossless(&disk);
        let idx = OffsetIndex::from_bytes(&disk);
        let f = file_with(&disk);
        for (off, len) in [
            (0, 10),
            (4095, 300),
            (70_000, 200_000),
            (view.len() as u64 - 3, 9),
        ] {
            let got = read_view(&f, &idx, off, len).unwrap();
            let o = off as usize;
            assert_eq!(got, &view[o..(o + len).min(view.len())], "off {off}");
        }
        f.set_len(DATA + 42).unwrap();
        for off in [0, 41, 42, 100, 5000, 300_000, idx.view_len() - 1] {
            // Short, never a panic: the caller re-checks the stamp.
            let got = read_view(&f, &idx, off, 4096).unwrap();
            assert!(got.len() <= 4096);
            let _ = span(&f, &idx, (off, off + 9)).unwrap();
        }
        assert!(!has_magic(&tempfile::tempfile().unwrap()).unwrap());
        assert!(has_magic(&f).unwrap());
    }
}
