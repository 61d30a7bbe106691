//! Directories: opendir, readdir and readdirplus (entries looked up and
//! classified in batches, large cold files answered provisionally while
//! they are scanned in the background), releasedir.

use super::*;

impl CutFs {
    /// Opens a directory. The kernel may cache its listing; the cache is
    /// kept across opens only while the directory's stamp is unchanged, so
    /// a change in BACKING is listed on the next opendir (changes through
    /// the mount invalidate the kernel's cache themselves).
    pub(in crate::fs) fn open_dir(&self, ino: u64, uid: u32) -> Result<(u64, FopenFlags)> {
        let inode = self.inodes.get(ino)?;
        let ticket = self.ticket(uid, &inode, "opendir")?;
        let dir = inode.open(libc::O_RDONLY | libc::O_DIRECTORY)?;
        if self.nodiratime {
            sys::set_noatime(dir.as_fd()).map_err(io)?;
        }
        let st = sys::fstat(dir.as_fd()).map_err(io)?;
        let mut flags = FopenFlags::FOPEN_CACHE_DIR;
        if inode.seen().lock().opened_at(Stamp::of(&st)) {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        // Attached: a directory removed while open still answers fstat,
        // and lookups in it use this descriptor.
        let dir = Arc::new(dir);
        let attached = inode.attach(Some(&dir));
        let fh = self.handles.insert(Handle::Dir(DirHandle {
            inode,
            dir,
            entries: Default::default(),
            _attached: attached,
            _ticket: ticket,
        }));
        Ok((fh, flags))
    }

    /// Reads the directory listing afresh (at offset 0: opendir or rewind).
    pub(in crate::fs) fn list(h: &DirHandle) -> Result<Listing> {
        let mut out = Listing::default();
        out.push(h.inode.ino, FileType::Directory, OsStr::new("."));
        out.push(h.inode.ino, FileType::Directory, OsStr::new(".."));
        sys::read_dir(h.dir.as_fd(), |ino, d_type, name| {
            if is_journal(h.inode.ino, name) {
                return Ok(());
            }
            let kind = match d_type {
                libc::DT_DIR => FileType::Directory,
                libc::DT_LNK => FileType::Symlink,
                libc::DT_BLK => FileType::BlockDevice,
                libc::DT_CHR => FileType::CharDevice,
                libc::DT_FIFO => FileType::NamedPipe,
                libc::DT_SOCK => FileType::Socket,
                libc::DT_REG => FileType::RegularFile,
                // A filesystem that does not say: ask.
                _ => match sys::component(name).and_then(|c| sys::statat(h.dir.as_fd(), &c)) {
                    Ok(st) => attr::kind(st.st_mode),
                    Err(_) => FileType::RegularFile,
                },
            };
            match out.push(ino, kind, name) {
                true => Ok(()),
                false => Err(std::io::Error::from_raw_os_error(libc::ENOMEM)),
            }
        })
        .map_err(io)?;
        out.shrink();
        Ok(out)
    }

    pub(in crate::fs) fn dir_handle(&self, fh: u64) -> Result<Arc<Handle>> {
        let h = self.handles.get(fh)?;
        match &*h {
            Handle::Dir(_) => Ok(h),
            Handle::File(_) => Err(Refused::NotDir.into()),
        }
    }

    /// The listing of directory handle `h` for a reply from `offset`. A new
    /// handle may be asked for a later offset first (the kernel served the
    /// start from its cache of the listing): it is listed then too, or the
    /// listing would end early. "." and ".." make a listed directory never
    /// empty.
    fn listing<'h>(
        &self,
        h: &'h Handle,
        offset: u64,
    ) -> Result<(&'h DirHandle, parking_lot::MutexGuard<'h, Listing>)> {
        let Handle::Dir(d) = h else {
            return Err(Refused::NotDir.into());
        };
        let mut entries = d.entries();
        if offset == 0 || entries.is_empty() {
            *entries = self.listed(d)?;
        }
        Ok((d, entries))
    }

    /// Calls `add(offset_of_next, entry)` from `offset` on until it says
    /// the reply is full.
    pub(in crate::fs) fn list_dir(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, &DirEntry) -> bool,
    ) -> Result<()> {
        let h = self.dir_handle(fh)?;
        let (_, entries) = self.listing(&h, offset)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in entries.from(start) {
            if add(i as u64 + 1, &e) {
                break;
            }
        }
        Ok(())
    }

    /// readdirplus: like `readdir`, but `add(next, entry, attr)` also gets
    /// the entry's attributes (None for "." and "..", which the kernel does
    /// not enter). Every attribute sent counts one lookup; when `add` says
    /// the reply is full, that lookup and those of entries prepared but not
    /// sent are given back here.
    ///
    /// No entry is dropped silently: a name gone since the listing was read
    /// (ENOENT) is left out, as readdir racing an unlink would; any other
    /// failure (out of descriptors or memory, EIO, …) is logged with the
    /// path and ends the reply before that entry, so the kernel asks again
    /// from there and the caller gets the errno (at once if it is the first
    /// entry of a reply).
    pub(in crate::fs) fn list_dir_plus(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, &DirEntry, Option<&PlusAttr>) -> bool,
    ) -> Result<()> {
        let h = self.dir_handle(fh)?;
        let (d, mut entries) = self.listing(&h, offset)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(entries.len());
        self.read_ahead(&d.inode, &mut entries, start);
        let end = start.saturating_add(PLUS_BATCH).min(entries.len());
        let batch: Vec<DirEntry> = (start..end).filter_map(|i| entries.get(i)).collect();
        let mut prepared = self.plus_batch(&d.inode, &batch).into_iter();
        let mut sent = 0usize;
        let mut failed = None;
        for (i, e) in entries.from(start) {
            let r = match prepared.next() {
                Some(r) => r,
                None => self.plus_entry(&d.inode, &e),
            };
            let attr = match r {
                None => None,
                Some(Ok(a)) => Some(a),
                Some(Err(Errno::ENOENT)) => continue,
                Some(Err(err)) => {
                    let path = d.inode.path_of(e.name);
                    crate::ratelog::warn("listing-failed", &path, || {
                        format!(
                            "{path}: listing with attributes failed ({}); the listing ends \
                             there with that error{}",
                            std::io::Error::from_raw_os_error(err.code()),
                            if matches!(err, Errno::EMFILE | Errno::ENFILE) {
                                ": out of file descriptors — close files open through the \
                                 mount, or raise the daemon's limit (ulimit -n)"
                            } else {
                                ""
                            }
                        )
                    });
                    failed = Some(err);
                    break;
                }
            };
            if add(i as u64 + 1, &e, attr.as_ref()) {
                if let Some(a) = attr {
                    self.inodes.forget(a.attr.ino.0, 1);
                }
                break;
            }
            sent += 1;
        }
        for r in prepared {
            if let Some(Ok(a)) = r {
                self.inodes.forget(a.attr.ino.0, 1);
            }
        }
        match failed {
            Some(err) if sent == 0 => Err(err),
            _ => Ok(()),
        }
    }

    /// Reads ahead, in one transaction of the index database, the records
    /// of the entries a readdirplus from `start` is about to look up (those
    /// not read ahead before): the index records of the regular files, so
    /// their classes are then found in memory, and the node records of the
    /// entries new to the kernel, so unchanged ones are not stored again
    /// (`export::Nodes`). One transaction per [`READ_AHEAD`] entries, not
    /// one lookup per file: SQLite's read transaction costs more than the
    /// lookup in it. Entry numbers are those of the listing (d_ino): where
    /// they differ from the files' own (overlayfs), nothing is found and
    /// each file is looked up as before.
    fn read_ahead(&self, dir: &Inode, entries: &mut Listing, start: usize) {
        let from = entries.read_ahead.max(start);
        let to = start.saturating_add(READ_AHEAD).min(entries.len());
        if from >= to {
            return;
        }
        let mut files = Vec::with_capacity(to - from);
        let mut inos = Vec::with_capacity(to - from);
        for e in (from..to).filter_map(|i| entries.get(i)) {
            let b = e.name.as_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            if e.kind == FileType::RegularFile {
                files.push(e.ino);
            }
            inos.push(e.ino);
        }
        entries.read_ahead = to;
        self.inodes.prefetch(dir.key.dev, &files, &inos);
    }

    /// The listing of a directory handle, read afresh; a failure is logged
    /// with the path when it is for want of descriptors or memory.
    pub(in crate::fs) fn listed(&self, d: &DirHandle) -> Result<Listing> {
        Self::list(d).inspect_err(|err| {
            if matches!(*err, Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM) {
                let path = d.inode.path().to_string();
                crate::ratelog::warn("out-of-descriptors", &path, || {
                    format!(
                        "{path}: cannot read the directory: {} (out of file descriptors \
                         or memory; close files open through the mount, or raise the \
                         daemon's limit with ulimit -n)",
                        std::io::Error::from_raw_os_error(err.code())
                    )
                });
            }
        })
    }

    /// Looks a batch of entries up; the regular files whose class neither
    /// memory nor the index database knows (a cold cache: each needs its
    /// first bytes read and maybe an index built) are classified on a few
    /// threads at once, so a cold `ls -l` or `find` waits for the disk in
    /// parallel, not file by file. The threads are started only for those
    /// (a listing the database answers starts none: they cost more than
    /// the lookups), and this thread classifies a share itself.
    pub(in crate::fs) fn plus_batch(
        &self,
        dir: &Arc<Inode>,
        batch: &[DirEntry<'_>],
    ) -> Vec<Option<Result<PlusAttr>>> {
        let looked: Vec<Looked> = batch
            .iter()
            .map(|e| {
                let b = e.name.as_bytes();
                if b == b"." || b == b".." {
                    return None;
                }
                Some(
                    sys::component(e.name)
                        .map_err(io)
                        .and_then(|n| self.inodes.lookup(dir, &n)),
                )
            })
            .collect();
        // Which entries only a long scan can class (asked once each).
        let long: Vec<bool> = looked
            .iter()
            .map(|r| match r {
                Some(Ok((inode, st))) => self.needs_scan(inode, st).unwrap_or(false),
                _ => false,
            })
            .collect();
        let unknown: Vec<&(Arc<Inode>, libc::stat)> = looked
            .iter()
            .zip(&long)
            .filter_map(|(r, &long)| match r {
                Some(Ok(x)) if !long => Some(x),
                _ => None,
            })
            .filter(|(inode, st)| {
                inode.is_reg()
                    && (st.st_size as u64) >= MAGIC.len() as u64
                    && content::known(inode.seen(), &self.cache, st).is_none()
            })
            .collect();
        if unknown.len() >= 2 {
            let workers = unknown.len().min(PLUS_WORKERS);
            let per = unknown.len().div_ceil(workers);
            let classify = |chunk: &[&(Arc<Inode>, libc::stat)]| {
                for (inode, st) in chunk {
                    // Errors resurface below, per entry.
                    let _ = self.class(inode, st);
                }
            };
            let mut chunks = unknown.chunks(per);
            let mine = chunks.next().unwrap_or_default();
            std::thread::scope(|s| {
                for chunk in chunks {
                    s.spawn(move || classify(chunk));
                }
                classify(mine);
            });
        }
        looked
            .into_iter()
            .zip(long)
            .map(|(r, long)| r.map(|r| r.and_then(|(inode, st)| self.plus_attr(inode, &st, long))))
            .collect()
    }

    /// The attributes of a looked-up entry for readdirplus (its lookup is
    /// counted and given back if they cannot be had): final ones, or, for a
    /// file only a long scan can class (`needs_scan`), provisional ones
    /// while the scan runs on the scan threads (see `PlusAttr`).
    pub(in crate::fs) fn plus_attr(
        &self,
        inode: Arc<Inode>,
        st: &libc::stat,
        needs_scan: bool,
    ) -> Result<PlusAttr> {
        if !needs_scan {
            return Ok(PlusAttr {
                attr: self.entry(inode, st)?,
                provisional: false,
            });
        }
        let attr = attr_with(&inode, st, Class::Raw, self.blksize);
        // Warms the class for the lookup or getattr that follows; an error
        // resurfaces there.
        self.attr_on_scan_threads("readdirplus", inode, *st, drop);
        Ok(PlusAttr {
            attr,
            provisional: true,
        })
    }

    /// The entry for one name in `dir` (counting one lookup), or None for
    /// "." and "..".
    pub(in crate::fs) fn plus_entry(
        &self,
        dir: &Arc<Inode>,
        e: &DirEntry<'_>,
    ) -> Option<Result<PlusAttr>> {
        let b = e.name.as_bytes();
        if b == b"." || b == b".." {
            return None;
        }
        Some(
            sys::component(e.name)
                .map_err(io)
                .and_then(|n| self.inodes.lookup(dir, &n))
                .and_then(|(inode, st)| {
                    let long = self
                        .needs_scan(&inode, &st)
                        .inspect_err(|_| self.inodes.forget(inode.ino, 1))?;
                    self.plus_attr(inode, &st, long)
                }),
        )
    }

    pub(in crate::fs) fn dir_attr(&self, dir: &Inode) -> Result<FileAttr> {
        let st = dir.stat()?;
        self.attr(dir, &st)
    }

    pub(in crate::fs) fn close_dir(&self, fh: u64) {
        self.handles.remove(fh);
    }
}
