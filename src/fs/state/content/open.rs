//! A regular file's state while it is open or being changed through the
//! mount, shared by its handles: the content lock, the offset index of the
//! stamp it serves, bytes held back.

use super::*;

/// Per-file state while a regular file is open (or being changed by the
/// mount), shared by all its handles; what outlives the open is in the
/// inode's [`KnownContent`].
///
/// Lock order: `content` before the inode's `KnownContent` and a scan turn, and
/// any of these before the [`IndexCache`]'s lock; `KnownContent` and the cache's
/// lock are leaves. The inode table's locks (`inodes`) may be taken under
/// `content`, never the other way round.
pub struct OpenFile {
    /// The content lock. Reads hold it shared; anything that changes the
    /// content or the index (a write, a rebuild) holds it alone.
    pub content: RwLock<Content>,
    /// The size the kernel was last told of the file while it is open:
    /// attribute replies set it, writes through the mount raise it, short
    /// reads lower it; unknown (`u64::MAX`) until then (`fs::inflight`).
    pub told: std::sync::atomic::AtomicU64,
}

impl Default for OpenFile {
    fn default() -> OpenFile {
        OpenFile {
            content: RwLock::default(),
            told: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }
}

impl OpenFile {
    pub fn new() -> OpenFile {
        OpenFile::default()
    }

    /// After a change of metadata only (owner, mode, times, links, xattrs)
    /// made through the mount under the content lock: what was known of
    /// the content under `old` holds under `new` too, so a `touch` or a
    /// `chmod` costs no rescan. Only when the size did not change.
    pub fn carry(
        &self,
        content: &mut Content,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        old: Stamp,
        new: Stamp,
    ) {
        if old == new || old.size != new.size || old.ino != new.ino || old.dev != new.dev {
            return;
        }
        seen.lock().carry(&old, &new);
        // The old stamp's entry moves: it can never match again, and a
        // second reference would make the next write copy the index.
        let cached = cache.remove(&old);
        if let Some((s, index)) = &content.view {
            if *s == old {
                let index = index.clone();
                cache.put(new, index.clone());
                content.view = Some((new, index));
                return;
            }
        }
        if let Some(index) = cached.or_else(|| cache.get(&old)) {
            // (`get` may have brought it from the index database.)
            drop(cache.remove(&old));
            cache.put(new, index);
        }
    }

    /// What the file open as `file` holds now: its stamp and, when it is
    /// corrected, the index built from exactly that stamp; returned with the
    /// content lock held shared, so the mount's own writes cannot change it
    /// meanwhile. A stamp the state does not know (BACKING changed the file
    /// behind the mount's back) is learned first, under the lock held alone:
    /// an index is never applied to bytes it was not built from. `second`
    /// opens a readable descriptor when `file` is write-only.
    pub fn current<'a>(
        &'a self,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        file: &File,
        second: impl Fn() -> io::Result<File>,
    ) -> Result<(
        RwLockReadGuard<'a, Content>,
        Stamp,
        Option<Arc<OffsetIndex>>,
    )> {
        for _ in 0..4 {
            let content = self.content.read();
            let st = crate::sys::fstat(file.as_fd()).map_err(io)?;
            let stamp = Stamp::of(&st);
            if (st.st_size as u64) < DATA_START {
                return Ok((content, stamp, None));
            }
            match &content.view {
                Some((s, index)) if *s == stamp => {
                    let index = index.clone();
                    return Ok((content, stamp, Some(index)));
                }
                None if seen.lock().class(&stamp) == Some(Class::Raw) => {
                    return Ok((content, stamp, None));
                }
                _ => {}
            }
            drop(content);
            let mut content = self.content.write();
            let st = crate::sys::fstat(file.as_fd()).map_err(io)?;
            let stamp = Stamp::of(&st);
            let learned;
            let second_file;
            let reader = match has_magic(file) {
                Ok(m) => {
                    learned = m;
                    file
                }
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    second_file = second().map_err(io)?;
                    learned = has_magic(&second_file).map_err(io)?;
                    &second_file
                }
                Err(e) => return Err(io(e)),
            };
            learn(&mut content, seen, cache, reader, stamp, learned)?;
        }
        crate::ratelog::warn("keeps-changing", "", || {
            "a file keeps changing in BACKING while it is read; the read fails with EIO".into()
        });
        Err(crate::fs::frontend::error::Refused::KeepsChanging.into())
    }

    /// The index kept for `stamp` disagrees with the file's bytes although
    /// the stamp did not move (they were changed in place without moving
    /// ctime, as writes through a shared mapping can; see
    /// `crate::io::Viewed::Stale`): it is forgotten — here, in the cache and
    /// in the index database, whose record is replaced — and built again
    /// from the bytes, under the content lock held alone. `second` opens a
    /// readable descriptor when `file` is write-only.
    pub fn rebuild(
        &self,
        seen: &Mutex<KnownContent>,
        cache: &IndexCache,
        file: &File,
        stamp: Stamp,
        second: impl Fn() -> io::Result<File>,
    ) -> Result<()> {
        let mut content = self.content.write();
        if content.view.as_ref().is_some_and(|(s, _)| *s == stamp) {
            content.view = None;
        }
        drop(cache.remove(&stamp));
        seen.lock().forget();
        let second_file;
        let reader = match has_magic(file) {
            Ok(_) => file,
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                second_file = second().map_err(io)?;
                &second_file
            }
            Err(e) => return Err(io(e)),
        };
        if Stamp::now(reader).map_err(io)? != stamp || !has_magic(reader).map_err(io)? {
            // Changed after all: the next look learns it.
            return Ok(());
        }
        let started = crate::indexdb::now();
        let index = Arc::new(build_index(reader).map_err(io)?);
        if Stamp::now(reader).map_err(io)? == stamp {
            cache.put(stamp, index.clone());
            cache.db.put(&stamp, started, &index);
            seen.lock().remember(
                stamp,
                Class::Corrected {
                    view_len: index.view_len(),
                    lossless: index.lossless(),
                },
            );
            content.view = Some((stamp, index));
        }
        Ok(())
    }
}
