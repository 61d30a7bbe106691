//! The write path: what a write or a size change does to a regular file,
//! decided under the file's content lock (held alone) from what the file is
//! now — empty, raw, or corrected — not from what it was when the handle was
//! opened, because writes change that.
//!
//! * Empty files (new, O_TRUNC, truncated to 0) take the encoding of what is
//!   written into them first: corrected when it is UTF-8 text without U+0000
//!   that W can store (and `-o newfiles=raw` is not set), raw otherwise, and
//!   raw while the file is open in the kernel's passthrough mode, whose
//!   handles see its bytes (`crate::fs::state::passthrough`). From
//!   then on the file holds content and keeps its encoding (docs/behaviour.md, "The mount").
//! * Corrected files go through `crate::io::write`, which carries out the
//!   plans of `crate::view::write` (in-place patches, appends or journaled
//!   rewrites). Content W cannot store turns the
//!   file raw (with a warning in the log): nothing is lost.
//! * Raw files are written as they are, except that a write which would make
//!   one begin with the magic number fails with EILSEQ.
//! * A character the kernel's page split cut is held back and joined with
//!   the next write ([`HeldBytes`]), so one write(2) of text neither turns a
//!   file raw nor leaves half a character in BACKING.
//!
//! * fallocate on a corrected file is the same call on the view
//!   (`io::zero_range`, `io::allocate`); on others, BACKING's own.
//!
//! Nothing here picks an errno: the view's reasons (`crate::view::Error`)
//! become one in `crate::fs::frontend::error`.
//!
//! After every change the per-file state gets the new index under the new
//! stamp, so the next read, getattr or open sees it without a rescan; a
//! change the kernel's cached attributes cannot know of (a file turned raw,
//! held bytes that could not be written) is told to it (`invalidate`).

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

use crate::io::{self as backing, Zeroing};
use crate::view::pieces::{piece_end, LOOK_BACK, PAGE};
use crate::view::{self, sniff, OffsetIndex};
use cutf8::MAGIC;

use crate::fs::frontend::error::{io, Result};
use crate::fs::frontend::options::NewFiles;
use crate::fs::state::content::{self, Class, Content, HeldBytes, OpenFile, Stamp};
use crate::fs::state::handles::FileHandle;
use crate::fs::state::inodes::Fd;
use crate::fs::state::inodes::Inode;
use crate::fs::CutFs;
use crate::sys;

/// How many more times a change is planned again when the file changed
/// between its index and the bytes the plan read (`view::Error::Changed`).
const CHANGED_TRIES: u8 = 3;

/// What a regular file is right now.
enum Now {
    Empty,
    Raw,
    Corrected(Arc<OffsetIndex>),
}

impl CutFs {
    /// Classifies the file open as `file` under the content lock.
    fn now(&self, content: &Content, file: &File) -> Result<(Now, Stamp)> {
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        self.now_of(content, file, &st)
    }

    /// [`CutFs::now`] of the file in state `st`.
    fn now_of(&self, content: &Content, file: &File, st: &libc::stat) -> Result<(Now, Stamp)> {
        let stamp = Stamp::of(st);
        if st.st_size == 0 {
            return Ok((Now::Empty, stamp));
        }
        if let Some((s, index)) = &content.view {
            if *s == stamp {
                return Ok((Now::Corrected(index.clone()), stamp));
            }
        }
        if content::has_magic(file).map_err(io)? {
            let index = content::index_for(&self.cache, file, stamp)?;
            Ok((Now::Corrected(index), stamp))
        } else {
            Ok((Now::Raw, stamp))
        }
    }

    /// Records what the file is after a change made through the mount.
    fn changed(
        &self,
        inode: &Inode,
        content: &mut Content,
        file: &File,
        index: Option<OffsetIndex>,
    ) -> Result<()> {
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let stamp = Stamp::of(&st);
        let mut seen = inode.seen().lock();
        seen.forget();
        match index {
            Some(index) => {
                let index = Arc::new(index);
                seen.remember(
                    stamp,
                    Class::Corrected {
                        view_len: index.view_len(),
                        lossless: index.lossless(),
                    },
                );
                drop(seen);
                self.cache.put(stamp, index.clone());
                content.view = Some((stamp, index));
            }
            None => {
                seen.remember(stamp, Class::Raw);
                content.view = None;
            }
        }
        Ok(())
    }

    /// After a change of a corrected file that failed: `index` (taken by
    /// `content::take_index` at `stamp`) goes back when the file is still
    /// at `stamp`, so nothing changed and a retry (a full disk) needs no
    /// rescan; otherwise it is dropped and the file is learned again.
    fn failed(
        &self,
        inode: &Inode,
        content: &mut Content,
        file: &File,
        stamp: Stamp,
        index: OffsetIndex,
    ) {
        inode.seen().lock().forget();
        if matches!(sys::fstat(file.as_fd()), Ok(st) if Stamp::of(&st) == stamp) {
            let index = Arc::new(index);
            self.cache.put(stamp, index.clone());
            content.view = Some((stamp, index));
        }
    }

    /// After a change of a corrected file planned from an index the bytes
    /// no longer agree with (`view::Error::Changed`: another daemon, or a
    /// writer in BACKING, changed the file since it was indexed): the
    /// index goes, from the cache too (its stamp may not have moved), so
    /// the next try learns the file as it is now.
    fn changed_meanwhile(&self, inode: &Inode, content: &mut Content, stamp: Stamp) {
        inode.seen().lock().forget();
        self.cache.remove(&stamp);
        content.view = None;
    }

    /// A write through handle `h` at `offset` (a view offset for corrected
    /// files, a byte offset otherwise). A lead held back by the last write
    /// (see [`HeldBytes`]) is joined with this one when this one continues it,
    /// and written as it is first otherwise.
    ///
    /// `append` (a handle open with O_APPEND): the write goes to the
    /// file's end as it is when its bytes land, not to `offset`, which is
    /// where the kernel's cached size put it: another mount, or a writer
    /// in BACKING, may have appended since the kernel last asked (it does
    /// not ask before a write), and may append at the same moment (the
    /// backing file's own append, `io::append`). Returns how much was
    /// written and whether it went somewhere else than `offset`.
    pub(in crate::fs) fn write_file(
        &self,
        h: &FileHandle,
        offset: u64,
        data: &[u8],
        append: bool,
    ) -> Result<(u32, bool)> {
        let mut content = h.state.content.write();
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        // Held bytes this write continues are joined with it: an append
        // continues an append's (the end is wherever it is now), any other
        // write the one that ended at `offset`. Others go where their
        // write put them first.
        let held = match content.held.take() {
            Some(held)
                if held.append == append
                    && (append || held.at + held.bytes.len() as u64 == offset) =>
            {
                Some(held)
            }
            Some(held) => {
                self.write_held(&h.inode, &mut content, held)?;
                None
            }
            None => None,
        };
        let lead = held.as_ref().map_or(0, |held| held.bytes.len());
        let joined = match &held {
            Some(held) => std::borrow::Cow::Owned([&held.bytes[..], data].concat()),
            None => std::borrow::Cow::Borrowed(data),
        };
        let start = offset.saturating_sub(lead as u64);
        let how = (true, append);
        match self.write_locked(
            &h.inode,
            &h.file,
            &mut content,
            start,
            &joined,
            how,
            CHANGED_TRIES,
        ) {
            Ok((done, at)) => Ok((done.saturating_sub(lead as u32).min(n), at != Some(start))),
            Err(e) => {
                // Still owed: written at the next flush point.
                if let Some(held) = held {
                    content.held.get_or_insert(held);
                }
                Err(e)
            }
        }
    }

    /// Writes bytes held back by an earlier write (see [`HeldBytes`]) as they
    /// are: what the writer left, if nothing continued it. If that fails,
    /// the bytes are lost: the error goes to the caller (a close(2), an
    /// fsync, the write or read that came next) and is kept for every
    /// handle open now, the writer's too (`errseq`: its close(2) or fsync
    /// reports it), the log says so, and the kernel, which counted them in
    /// the file's size, is told to ask again.
    fn write_held(&self, inode: &Inode, content: &mut Content, held: HeldBytes) -> Result<()> {
        let how = (false, held.append);
        self.write_locked(
            inode,
            &held.file,
            content,
            held.at,
            &held.bytes,
            how,
            CHANGED_TRIES,
        )
        .map(drop)
        .inspect_err(|e| {
            content.lost.record(e.code());
            let path = self.name_of(inode);
            crate::ratelog::warn("held-bytes-lost", &path, || {
                format!(
                    "{path}: the last {} bytes of a write, held to be joined with the \
                         next one, could not be written at view offset {} ({}); the caller \
                         is told",
                    held.bytes.len(),
                    held.at,
                    std::io::Error::from_raw_os_error(e.code())
                )
            });
            self.kernel.attributes(inode.ino);
        })
    }

    /// Writes a lead held back by an earlier write, if any: before
    /// anything else reads or changes the file (a read, a size change,
    /// fallocate, fsync, a close).
    pub(in crate::fs) fn settle(&self, inode: &Inode, state: &OpenFile) -> Result<()> {
        if state.content.read().held.is_none() {
            return Ok(());
        }
        let mut content = state.content.write();
        match content.held.take() {
            Some(held) => self.write_held(inode, &mut content, held),
            None => Ok(()),
        }
    }

    /// What of `data` (a write at `offset` through `file`) is held back
    /// when only its first `k` bytes were written (see [`HeldBytes`]).
    fn hold_rest(
        &self,
        file: &Fd,
        offset: Option<u64>,
        data: &[u8],
        k: usize,
        append: bool,
    ) -> Result<Option<HeldBytes>> {
        if k >= data.len() {
            return Ok(None);
        }
        Ok(Some(HeldBytes {
            at: offset.map_or(u64::MAX, |o| o + k as u64),
            bytes: data[k..].to_vec(),
            file: file.clone(),
            append,
        }))
    }

    /// A write of `data` at `offset` through `file` (read-write) of
    /// `inode`, under the content lock held alone. `hold`: a lead the
    /// kernel's split left at the end may be held back (see [`HeldBytes`]).
    /// `append`: at the file's end as it is when the bytes land, whatever
    /// `offset` says (see [`CutFs::write_file`]). Returns how much was
    /// written and where it began (`None`: after another appender's bytes,
    /// at a view offset not known until the file is learned again). Tried
    /// again from a fresh look at the file up to `tries` more times when
    /// it changed between its index and the bytes the write read (last
    /// writer wins, as on one filesystem, not an EIO the backing
    /// filesystem never gave).
    #[allow(clippy::too_many_arguments)]
    fn write_locked(
        &self,
        inode: &Inode,
        file: &Fd,
        content: &mut Content,
        offset: u64,
        data: &[u8],
        (hold, append): (bool, bool),
        tries: u8,
    ) -> Result<(u32, Option<u64>)> {
        let state = inode;
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let (mut now, stamp) = self.now_of(content, file, &st)?;
        if matches!(&now, Now::Corrected(index) if index.view_len() == 0) && (append || offset == 0)
        {
            // The magic number alone holds no content: what is written
            // first chooses the encoding, as for an empty file (SPEC §3).
            file.set_len(0).map_err(io)?;
            now = Now::Empty;
        }
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        match now {
            Now::Empty => {
                let offset = if append { 0 } else { offset };
                // A file open in passthrough stays raw: the kernel shows
                // its bytes to those handles (`crate::fs::state::passthrough`).
                if self.newfiles == NewFiles::Auto
                    && offset == 0
                    && sniff::is_text(data)
                    && !self.raw.keeps_raw(&inode.path(), data)
                    && !self.passthrough.in_kernel(inode.ino)
                {
                    // A first write the kernel cut inside its last
                    // character: that character waits for the rest (`HeldBytes`).
                    let cut = hold.then(|| piece_end(offset, data, 0, &[])).flatten();
                    let first = cut.filter(|&k| k > 0).map_or(data, |k| &data[..k]);
                    match backing::start_corrected(file, first) {
                        Ok(index) => {
                            let held =
                                self.hold_rest(file, Some(offset), data, first.len(), append)?;
                            self.changed(state, content, file, Some(index))?;
                            content.held = held;
                            self.stats.view_written(u64::from(n));
                            return Ok((n, Some(offset)));
                        }
                        Err(backing::Error::View(e)) => log::debug!("new file stays raw: {e}"),
                        Err(e) => return Err(e.into()),
                    }
                }
                let done = self.write_raw(inode, file, offset, data)?;
                self.changed(state, content, file, None)?;
                Ok((done, Some(offset)))
            }
            Now::Raw if append => {
                let size = st.st_size as u64;
                let (done, at) = backing::append_raw(file, size, data, || Self::head(inode, file))
                    .inspect_err(|e| self.log_magic_refused(inode, e))?;
                self.changed(state, content, file, None)?;
                Ok((u32::try_from(done).unwrap_or(u32::MAX), Some(at)))
            }
            Now::Raw => {
                let done = self.write_raw(inode, file, offset, data)?;
                self.changed(state, content, file, None)?;
                Ok((done, Some(offset)))
            }
            Now::Corrected(index) => {
                if !index.lossless() {
                    return Err(view::Error::ReadOnly.into());
                }
                let offset = if append { index.view_len() } else { offset };
                let mut next = content::take_index(content, &self.cache, &stamp, index);
                // A write the kernel cut inside a character (its own last
                // one, or the old one it overwrites): that character waits
                // for the rest (`HeldBytes`), so BACKING never holds half a
                // character the writer did not leave.
                let cut = match hold.then(|| Self::cut_inside(file, &next, offset, data)) {
                    Some(Ok(cut)) => cut,
                    None => None,
                    Some(Err(e)) => {
                        self.failed(state, content, file, stamp, next);
                        return Err(e);
                    }
                };
                let first = cut.map_or(data, |k| &data[..k]);
                let written = match append {
                    true => backing::append(file, &mut next, &self.journal, first),
                    false => backing::write_at(file, &mut next, &self.journal, offset, first)
                        .map(|()| backing::Landed::AtEnd),
                };
                let mut at = Some(offset);
                match written {
                    Ok(backing::Landed::AtEnd) => {
                        let held = self.hold_rest(file, at, data, first.len(), append)?;
                        self.changed(state, content, file, Some(next))?;
                        content.held = held;
                    }
                    Ok(backing::Landed::After) => {
                        // Whole, after another appender's bytes: the file
                        // is learned again when next used.
                        at = None;
                        inode.seen().lock().forget();
                        content.view = None;
                        content.held = self.hold_rest(file, at, data, first.len(), append)?;
                    }
                    // Refused before anything was written: `next` is as it
                    // was. (The cut character, held, is not what W refused:
                    // the whole write turns the file raw.)
                    Err(backing::Error::View(why @ view::Error::Unstorable { .. })) => {
                        let name = self.name_of(inode);
                        if let Err(e) = backing::to_raw(file, &next, &self.journal, offset, data) {
                            crate::ratelog::warn("make-raw-failed", &name, || {
                                format!(
                                    "{name}: {why}; the write that would make it raw \
                                     failed ({e}); the file is unchanged and stays corrected"
                                )
                            });
                            self.failed(state, content, file, stamp, next);
                            return Err(e.into());
                        }
                        crate::fs::observe::explain::now_raw(&name, &why);
                        self.changed(state, content, file, None)?;
                        // Its class changed behind the kernel's cached
                        // attributes (the blocks it takes, for one).
                        self.kernel.attributes(inode.ino);
                    }
                    Err(backing::Error::View(view::Error::Changed)) if tries > 0 => {
                        self.changed_meanwhile(inode, content, stamp);
                        let how = (hold, append);
                        return self.write_locked(
                            inode,
                            file,
                            content,
                            offset,
                            data,
                            how,
                            tries - 1,
                        );
                    }
                    Err(e) => {
                        self.failed(state, content, file, stamp, next);
                        return Err(e.into());
                    }
                }
                self.stats.view_written(u64::from(n));
                Ok((n, at))
            }
        }
    }

    /// [`piece_end`] of a write of `data` at view offset `offset` of the
    /// corrected `file` (indexed by `index`), with the old view bytes it
    /// needs, read only when the write ends on a page boundary inside the
    /// file.
    fn cut_inside(
        file: &File,
        index: &OffsetIndex,
        offset: u64,
        data: &[u8],
    ) -> Result<Option<usize>> {
        let end = offset + data.len() as u64;
        if !end.is_multiple_of(PAGE) {
            return Ok(None);
        }
        let from = data.len().saturating_sub(LOOK_BACK);
        let lo = offset + from as u64;
        // (An append has no old bytes there: no read.)
        let old = if lo < index.view_len() {
            backing::read_view(file, index, lo, (end + 1 - lo) as usize).map_err(io)?
        } else {
            Vec::new()
        };
        Ok(piece_end(offset, data, from, &old))
    }

    /// A raw write: refused with EILSEQ when it would make the file begin
    /// with the magic number. Returns how much was written: short only when
    /// BACKING ran out of space (or another error) after some bytes went
    /// in, as write(2) is.
    fn write_raw(&self, inode: &Inode, file: &File, offset: u64, data: &[u8]) -> Result<u32> {
        let done = backing::write_raw(file, offset, data, || Self::head(inode, file))
            .inspect_err(|e| self.log_magic_refused(inode, e))?;
        Ok(u32::try_from(done).unwrap_or(u32::MAX))
    }

    /// The first bytes of `inode` open as `file` (through a second,
    /// readable descriptor when `file` is write-only).
    fn head(inode: &Inode, file: &File) -> std::io::Result<Vec<u8>> {
        backing::read_head(file).or_else(|e| {
            let r = inode
                .open_quiet(libc::O_RDONLY)
                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))?;
            backing::read_head(&r).map_err(|_| e)
        })
    }

    fn log_magic_refused(&self, inode: &Inode, e: &backing::Error) {
        if matches!(e, backing::Error::View(view::Error::MagicOnRaw)) {
            crate::fs::observe::explain::magic_on_raw(&self.name_of(inode));
        }
    }

    /// fallocate through handle `h`. Raw and empty files: the backing
    /// fallocate, as they are. Corrected files: each mode as the same call
    /// on a plain file holding the view (see `io::zero_range` and
    /// `io::allocate`); collapse, insert and anything else are EOPNOTSUPP
    /// (the kernel's FUSE client does not send them; refused here too, so
    /// a corrected file never shifts text by block-aligned disk offsets).
    pub(in crate::fs) fn fallocate_file(
        &self,
        h: &FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<()> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        let state = &*h.inode;
        let mut content = h.state.content.write();
        if let Some(held) = content.held.take() {
            self.write_held(&h.inode, &mut content, held)?;
        }
        let (now, stamp) = self.now(&content, &h.file)?;
        let Now::Corrected(index) = now else {
            if mode & (PUNCH | ZERO) != 0 {
                let zeros = vec![0u8; length.min(MAGIC.len() as u64) as usize];
                backing::write::guard_raw(offset, &zeros, || Self::head(&h.inode, &h.file))?;
            }
            sys::fallocate(&h.file, mode, offset, length).map_err(io)?;
            return self.changed(state, &mut content, &h.file, None);
        };
        if !index.lossless() {
            return Err(view::Error::ReadOnly.into());
        }
        let keep = mode & KEEP != 0;
        let end = offset.checked_add(length).ok_or(view::Error::TooLarge)?;
        let how = match mode & !KEEP {
            0 => None,
            PUNCH if keep => Some(Zeroing::Punch),
            ZERO => Some(Zeroing::Zero),
            _ => {
                crate::fs::observe::explain::fallocate_mode(&self.name_of(&h.inode), mode);
                return Err(view::Error::Unsupported.into());
            }
        };
        let mut next = content::take_index(&mut content, &self.cache, &stamp, index);
        let done = match how {
            None => backing::allocate(&h.file, &mut next, &self.journal, offset, length, keep),
            Some(how) => {
                let stop = if keep { end.min(next.view_len()) } else { end };
                if offset < stop {
                    let len = stop - offset;
                    backing::zero_range(&h.file, &mut next, &self.journal, offset, len, how)
                } else {
                    Ok(())
                }
            }
        };
        if let Err(e) = done {
            self.failed(state, &mut content, &h.file, stamp, next);
            return Err(e.into());
        }
        self.changed(state, &mut content, &h.file, Some(next))
    }

    /// Sets the size of a regular file (truncate, ftruncate, O_TRUNC):
    /// a view length for corrected files.
    pub(in crate::fs) fn set_size(
        &self,
        inode: &Inode,
        file_state: &OpenFile,
        file: &File,
        size: u64,
    ) -> Result<()> {
        let state = inode;
        let mut content = file_state.content.write();
        if let Some(held) = content.held.take() {
            self.write_held(inode, &mut content, held)?;
        }
        let mut tries = CHANGED_TRIES;
        loop {
            let (now, stamp) = self.now(&content, file)?;
            match now {
                Now::Corrected(index) if size != 0 => {
                    if !index.lossless() {
                        return Err(view::Error::ReadOnly.into());
                    }
                    let mut next = content::take_index(&mut content, &self.cache, &stamp, index);
                    match backing::truncate(file, &mut next, &self.journal, size) {
                        Ok(()) => return self.changed(state, &mut content, file, Some(next)),
                        // Changed since indexed: again, as it is now
                        // (see `write_locked`).
                        Err(backing::Error::View(view::Error::Changed)) if tries > 0 => {
                            tries -= 1;
                            self.changed_meanwhile(inode, &mut content, stamp);
                        }
                        Err(e) => {
                            self.failed(state, &mut content, file, stamp, next);
                            return Err(e.into());
                        }
                    }
                }
                _ => {
                    // Raw, empty, or emptying a corrected file (its view is
                    // then nothing, and so is its backing file).
                    file.set_len(size).map_err(io)?;
                    return self.changed(state, &mut content, file, None);
                }
            }
        }
    }
}
