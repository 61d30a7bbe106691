//! The write path: what a write or a size change does to a regular file,
//! decided under the file's content lock (held alone) from what the file is
//! now — empty, raw, or corrected — not from what it was when the handle was
//! opened, because writes change that.
//!
//! * Empty files (new, O_TRUNC, truncated to 0) take the encoding of what is
//!   written into them first: corrected when it is UTF-8 text without U+0000
//!   that W can store (and `-o newfiles=raw` is not set), raw otherwise. From
//!   then on the file holds content and keeps its encoding (SPEC §3).
//! * Corrected files go through `crate::io::write`, which carries out the
//!   plans of `crate::view::write` (in-place patches, appends or journaled
//!   rewrites). Content W cannot store turns the
//!   file raw (with a warning in the log): nothing is lost.
//! * Raw files are written as they are, except that a write which would make
//!   one begin with the magic number fails with EILSEQ.
//!
//! * fallocate on a corrected file is the same call on the view
//!   (`io::zero_range`, `io::allocate`); on others, BACKING's own.
//!
//! Nothing here picks an errno: the view's reasons (`crate::view::Error`)
//! become one in `super::error`.
//!
//! After every change the per-file state gets the new index under the new
//! stamp, so the next read, getattr or open sees it without a rescan.

use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

use crate::io::{self as backing, Zeroing};
use crate::view::{self, sniff, OffsetIndex};
use cutf8::MAGIC;

use super::content::{self, Class, Content, FileState, Stamp};
use super::error::{io, Result};
use super::handles::FileHandle;
use super::options::NewFiles;
use super::sys;
use super::CutFs;

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
        let stamp = Stamp::of(&st);
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
        state: &FileState,
        content: &mut Content,
        file: &File,
        index: Option<OffsetIndex>,
    ) -> Result<()> {
        let st = sys::fstat(file.as_fd()).map_err(io)?;
        let stamp = Stamp::of(&st);
        state.content_changed();
        match index {
            Some(index) => {
                let index = Arc::new(index);
                state.remember_class(
                    stamp,
                    Class::Corrected {
                        view_len: index.view_len(),
                        lossless: index.lossless(),
                    },
                );
                self.cache.put(stamp, index.clone());
                content.view = Some((stamp, index));
            }
            None => {
                state.remember_class(stamp, Class::Raw);
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
        state: &FileState,
        content: &mut Content,
        file: &File,
        stamp: Stamp,
        index: OffsetIndex,
    ) {
        state.content_changed();
        if matches!(sys::fstat(file.as_fd()), Ok(st) if Stamp::of(&st) == stamp) {
            let index = Arc::new(index);
            self.cache.put(stamp, index.clone());
            content.view = Some((stamp, index));
        }
    }

    /// A write through handle `h` at `offset` (a view offset for corrected
    /// files, a byte offset otherwise).
    pub(super) fn write_file(&self, h: &FileHandle, offset: u64, data: &[u8]) -> Result<u32> {
        let state = h.inode.state();
        let mut content = state.content.write();
        let (now, stamp) = self.now(&content, &h.file)?;
        let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
        match now {
            Now::Empty => {
                if self.newfiles == NewFiles::Auto
                    && offset == 0
                    && sniff::is_text(data)
                    && !self.raw.keeps_raw(&h.inode.path(), data)
                {
                    match backing::start_corrected(&h.file, data) {
                        Ok(index) => {
                            self.changed(state, &mut content, &h.file, Some(index))?;
                            return Ok(n);
                        }
                        Err(backing::Error::View(e)) => log::debug!("new file stays raw: {e}"),
                        Err(e) => return Err(e.into()),
                    }
                }
                let done = self.write_raw(h, offset, data)?;
                self.changed(state, &mut content, &h.file, None)?;
                Ok(done)
            }
            Now::Raw => {
                let done = self.write_raw(h, offset, data)?;
                self.changed(state, &mut content, &h.file, None)?;
                Ok(done)
            }
            Now::Corrected(index) => {
                if !index.lossless() {
                    return Err(view::Error::ReadOnly.into());
                }
                let mut next = content::take_index(&mut content, &self.cache, &stamp, index);
                match backing::write_at(&h.file, &mut next, &self.journal, offset, data) {
                    Ok(()) => {
                        self.changed(state, &mut content, &h.file, Some(next))?;
                    }
                    // Refused before anything was written: `next` is as it was.
                    Err(backing::Error::View(why @ view::Error::Unstorable { .. })) => {
                        let name = self.name_of(&h.inode);
                        if let Err(e) = backing::to_raw(&h.file, &next, &self.journal, offset, data)
                        {
                            log::warn!(
                                "{name}: {why}; the write that would make it raw failed \
                                 ({e}); the file is unchanged and stays corrected"
                            );
                            self.failed(state, &mut content, &h.file, stamp, next);
                            return Err(e.into());
                        }
                        log::warn!(
                            "{name}: {why}; the file is now raw (stored as it reads), so \
                             nothing written is lost"
                        );
                        self.changed(state, &mut content, &h.file, None)?;
                    }
                    Err(e) => {
                        self.failed(state, &mut content, &h.file, stamp, next);
                        return Err(e.into());
                    }
                }
                Ok(n)
            }
        }
    }

    /// A raw write: refused with EILSEQ when it would make the file begin
    /// with the magic number. Returns how much was written: short only when
    /// BACKING ran out of space (or another error) after some bytes went
    /// in, as write(2) is.
    fn write_raw(&self, h: &FileHandle, offset: u64, data: &[u8]) -> Result<u32> {
        let done = backing::write_raw(&h.file, offset, data, || Self::head(h))
            .inspect_err(|e| self.log_magic_refused(h, e))?;
        Ok(u32::try_from(done).unwrap_or(u32::MAX))
    }

    /// The first bytes of the file open as `h` (through a second, readable
    /// descriptor when `h` is write-only).
    fn head(h: &FileHandle) -> std::io::Result<Vec<u8>> {
        backing::read_raw(&h.file, 0, MAGIC.len()).or_else(|e| {
            let r = h
                .inode
                .open_quiet(libc::O_RDONLY)
                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))?;
            backing::read_raw(&r, 0, MAGIC.len()).map_err(|_| e)
        })
    }

    fn log_magic_refused(&self, h: &FileHandle, e: &backing::Error) {
        if matches!(e, backing::Error::View(view::Error::MagicOnRaw)) {
            log::warn!(
                "{}: refused a write (EILSEQ) that would make this raw file begin with the \
                 Corrected UTF-8 magic number: it would read back as something else. To \
                 bring a Corrected UTF-8 file in, copy it into BACKING directly, or decode \
                 it first (cutf8 decode) and copy the result into the mount.",
                self.name_of(&h.inode)
            );
        }
    }

    /// fallocate through handle `h`. Raw and empty files: the backing
    /// fallocate, as they are. Corrected files: each mode as the same call
    /// on a plain file holding the view (see `io::zero_range` and
    /// `io::allocate`); collapse, insert and anything else are EOPNOTSUPP
    /// (the kernel's FUSE client does not send them; refused here too, so
    /// a corrected file never shifts text by block-aligned disk offsets).
    pub(super) fn fallocate_file(
        &self,
        h: &FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<()> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        let state = h.inode.state();
        let mut content = state.content.write();
        let (now, stamp) = self.now(&content, &h.file)?;
        let Now::Corrected(index) = now else {
            if mode & (PUNCH | ZERO) != 0 {
                let zeros = vec![0u8; length.min(MAGIC.len() as u64) as usize];
                backing::write::guard_raw(offset, &zeros, || Self::head(h))?;
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
            _ => return Err(view::Error::Unsupported.into()),
        };
        let mut next = content::take_index(&mut content, &self.cache, &stamp, index);
        let done = match how {
            None => backing::allocate(&h.file, &mut next, offset, length, keep),
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
    pub(super) fn set_size(&self, state: &FileState, file: &File, size: u64) -> Result<()> {
        let mut content = state.content.write();
        let (now, stamp) = self.now(&content, file)?;
        match now {
            Now::Corrected(index) if size != 0 => {
                if !index.lossless() {
                    return Err(view::Error::ReadOnly.into());
                }
                let mut next = content::take_index(&mut content, &self.cache, &stamp, index);
                if let Err(e) = backing::truncate(file, &mut next, size) {
                    self.failed(state, &mut content, file, stamp, next);
                    return Err(e.into());
                }
                self.changed(state, &mut content, file, Some(next))
            }
            _ => {
                // Raw, empty, or emptying a corrected file (its view is
                // then nothing, and so is its backing file).
                file.set_len(size).map_err(io)?;
                self.changed(state, &mut content, file, None)
            }
        }
    }
}
