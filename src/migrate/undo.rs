//! The undo journal that makes an in-place rewrite safe against a kill.
//!
//! A multiply linked file must keep its inode, so it cannot be replaced by
//! a rename; it is overwritten in place instead. Before the first byte is
//! overwritten, a journal in the same directory holds a full copy of the
//! original content, its times and what binds it to its place, ends with a
//! trailer and a checksum, and is fsynced. Then:
//!
//! * a run killed before the trailer reached the disk left the file
//!   untouched: the next run deletes the incomplete journal;
//! * a run killed after it may have left the file half-written: the next
//!   run copies the original back (a roll-back), deletes the journal, and
//!   converts the file again.
//!
//! A journal is found in a tree that users write, so [`recover`] trusts
//! only its own, by the rules of `crate::trust` (which holds the whole
//! argument): a regular file owned by the user running migrate, no access
//! for group or others, one link, on its directory's filesystem, reached
//! without following a symlink; complete, with the right checksum; written
//! in this very directory (its `(st_dev, st_ino)` is recorded); naming a
//! target by one plain name in that directory (no `/`, not `.` or `..`),
//! reached without following a symlink, whose device, inode, owner and
//! group are the recorded ones. A journal failing any of these is neither
//! rolled back nor deleted: the caller reports it with what to do.
//!
//! Layout (integers little-endian): `CUTF8JNL`, version u32 (2), name
//! length u32, content length u64, the directory's device u64 and inode
//! u64, the target's device u64, inode u64, uid u32 and gid u32, atime s
//! i64 + ns u32, mtime s i64 + ns u32, the target's name in the directory,
//! the content, `CUTF8END`, content length u64, and the [`Checksum`] u64 of
//! everything before it.
//!
//! Knows files and bytes; the conversion itself is the caller's.

use std::ffi::{OsStr, OsString};
use std::fs::{File, FileTimes};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys;
use crate::trust::{self, Access, Checksum, Rule};

const HEAD: &[u8; 8] = b"CUTF8JNL";
const TAIL: &[u8; 8] = b"CUTF8END";
const VERSION: u32 = 2;
/// The fixed part before the name.
const FIXED: usize = 8 + 4 + 4 + 8 + 16 + 16 + 8 + 12 + 12;
/// The trailer: `CUTF8END`, length, checksum.
const TRAILER: u64 = 8 + 8 + 8;

/// The journal's name for a file whose shard key is `key`.
pub fn name_for(key: u64) -> OsString {
    format!("{}{key:016x}", super::JOURNAL_PREFIX).into()
}

fn time_of(s: i64, ns: u32) -> Option<SystemTime> {
    let ns = Duration::from_nanos(u64::from(ns.min(999_999_999)));
    if s >= 0 {
        UNIX_EPOCH
            .checked_add(Duration::from_secs(s as u64))?
            .checked_add(ns)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(s.unsigned_abs()))?
            .checked_add(ns)
    }
}

/// A complete, durable journal for one file.
pub struct UndoJournal<'a> {
    dir: &'a File,
    name: OsString,
    file: File,
    /// Where the content starts in the journal.
    pub start: u64,
    /// The content's length.
    pub len: u64,
    times: FileTimes,
}

/// Copies `len` bytes; every byte copied also goes into `sum`.
fn copy_range(
    from: &File,
    from_at: u64,
    to: &File,
    to_at: u64,
    len: u64,
    mut sum: Option<&mut Checksum>,
) -> io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let want = buf.len().min((len - done) as usize);
        let n = crate::io::read_full_at(from, &mut buf[..want], from_at + done)?;
        if n < want {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shrank while being copied",
            ));
        }
        if let Some(s) = sum.as_deref_mut() {
            s.update(&buf[..n]);
        }
        to.write_all_at(&buf[..n], to_at + done)?;
        done += n as u64;
    }
    Ok(())
}

/// `(st_dev, st_ino)` of a descriptor.
fn id_of(f: &File) -> io::Result<(u64, u64)> {
    let md = f.metadata()?;
    Ok((md.dev(), md.ino()))
}

impl<'a> UndoJournal<'a> {
    /// Copy `target` (called `target_name` in `dir`) into a new journal
    /// and make it durable. Fails if a journal of that name exists: another
    /// run is converting the file.
    pub fn begin(
        dir: &'a File,
        key: u64,
        target_name: &OsStr,
        target: &File,
    ) -> io::Result<UndoJournal<'a>> {
        let st = target.metadata()?;
        let dir_id = id_of(dir)?;
        let name = name_for(key);
        let file = sys::open_at(
            dir,
            &name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )?;
        let tname = target_name.as_bytes();
        let mut head = Vec::with_capacity(FIXED + tname.len());
        head.extend_from_slice(HEAD);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(tname.len() as u32).to_le_bytes());
        head.extend_from_slice(&st.len().to_le_bytes());
        head.extend_from_slice(&dir_id.0.to_le_bytes());
        head.extend_from_slice(&dir_id.1.to_le_bytes());
        head.extend_from_slice(&st.dev().to_le_bytes());
        head.extend_from_slice(&st.ino().to_le_bytes());
        head.extend_from_slice(&st.uid().to_le_bytes());
        head.extend_from_slice(&st.gid().to_le_bytes());
        head.extend_from_slice(&st.atime().to_le_bytes());
        head.extend_from_slice(&(st.atime_nsec() as u32).to_le_bytes());
        head.extend_from_slice(&st.mtime().to_le_bytes());
        head.extend_from_slice(&(st.mtime_nsec() as u32).to_le_bytes());
        head.extend_from_slice(tname);
        let times = FileTimes::new()
            .set_accessed(st.accessed()?)
            .set_modified(st.modified()?);
        let j = UndoJournal {
            dir,
            name,
            file,
            start: head.len() as u64,
            len: st.len(),
            times,
        };
        let written = (|| {
            // Private whatever the umask and the directory's default ACL:
            // it holds a copy of the content.
            trust::drop_inherited_acl(&j.file)?;
            j.file
                .set_permissions(std::fs::Permissions::from_mode(0o600))?;
            let mut sum = Checksum::default();
            sum.update(&head);
            j.file.write_all_at(&head, 0)?;
            copy_range(target, 0, &j.file, j.start, j.len, Some(&mut sum))?;
            let mut tail = TAIL.to_vec();
            tail.extend_from_slice(&j.len.to_le_bytes());
            sum.update(&tail);
            tail.extend_from_slice(&sum.finish().to_le_bytes());
            j.file.write_all_at(&tail, j.start + j.len)?;
            j.file.sync_all()?;
            dir.sync_all()
        })();
        match written {
            Ok(()) => Ok(j),
            Err(e) => {
                let _ = sys::unlinkat(dir, &j.name, 0);
                Err(e)
            }
        }
    }

    /// The journal file (its content region is the original).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Put the original content and times back into `target`, durably.
    pub fn roll_back(&self, target: &File) -> io::Result<()> {
        copy_range(&self.file, self.start, target, 0, self.len, None)?;
        target.set_len(self.len)?;
        target.set_times(self.times)?;
        target.sync_all()
    }

    /// The rewrite is complete and durable: drop the journal.
    pub fn finish(self) -> io::Result<()> {
        sys::unlinkat(self.dir, &self.name, 0)?;
        self.dir.sync_all()
    }
}

/// What [`recover`] did.
#[derive(Debug)]
pub enum Recovered {
    /// The journal never became complete, so its file was never touched;
    /// the journal was deleted.
    Incomplete,
    /// The named file was rolled back to its original content.
    RolledBack(OsString),
    /// Another run finished with the journal while this one waited for
    /// the file: nothing to do.
    Gone,
}

/// What a complete journal records.
struct Record {
    name: OsString,
    len: u64,
    dir: (u64, u64),
    target: (u64, u64),
    owner: (u32, u32),
    times: FileTimes,
}

/// Reads and checks the record of the journal open as `file` (`total`
/// bytes): None when it is incomplete (its trailer never reached the
/// disk), `Err` with why when it is not a record to act on.
fn read_record(file: &File, total: u64) -> Result<Option<Record>, String> {
    let io_err = |e: io::Error| format!("cannot be read ({e})");
    if total < FIXED as u64 {
        return Ok(None);
    }
    let mut fixed = [0u8; FIXED];
    file.read_exact_at(&mut fixed, 0).map_err(io_err)?;
    let u32_at = |i: usize| u32::from_le_bytes(fixed[i..i + 4].try_into().unwrap_or_default());
    let u64_at = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().unwrap_or_default());
    if &fixed[..8] != HEAD {
        return Ok(None);
    }
    if u32_at(8) != VERSION {
        return Err(format!(
            "is a journal of format {} (this cutf8 writes and reads format {VERSION}), which \
             does not record the directory it belongs to",
            u32_at(8)
        ));
    }
    let name_len = u64::from(u32_at(12));
    let len = u64_at(16);
    let start = FIXED as u64 + name_len;
    if start.checked_add(len).and_then(|n| n.checked_add(TRAILER)) != Some(total) {
        return Ok(None);
    }
    let mut trailer = [0u8; TRAILER as usize];
    file.read_exact_at(&mut trailer, start + len)
        .map_err(io_err)?;
    if &trailer[..8] != TAIL || trailer[8..16] != len.to_le_bytes() {
        return Ok(None);
    }
    // Complete: from here on it is kept unless everything matches.
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; (1 << 20).min(total as usize)];
    let mut pos = 0u64;
    let end = start + len + 16;
    while pos < end {
        let want = buf.len().min((end - pos) as usize);
        file.read_exact_at(&mut buf[..want], pos).map_err(io_err)?;
        sum.update(&buf[..want]);
        pos += want as u64;
    }
    if sum.finish().to_le_bytes() != trailer[16..] {
        return Err("does not match its checksum (damaged, or not written by cutf8)".into());
    }
    let mut name = vec![0u8; name_len as usize];
    file.read_exact_at(&mut name, FIXED as u64)
        .map_err(io_err)?;
    let time = |at: usize| time_of(u64_at(at) as i64, u32_at(at + 8));
    let (Some(atime), Some(mtime)) = (time(64), time(76)) else {
        return Err("records times out of range".into());
    };
    Ok(Some(Record {
        name: OsString::from_vec(name),
        len,
        dir: (u64_at(24), u64_at(32)),
        target: (u64_at(40), u64_at(48)),
        owner: (u32_at(56), u32_at(60)),
        times: FileTimes::new().set_accessed(atime).set_modified(mtime),
    }))
}

/// Deal with journal `name` in `dir`, left by a killed run (`shown`: its
/// path, for messages). `Err` is the whole message for the user: which
/// check failed, that nothing was rolled back or deleted, and what to do.
pub fn recover(dir: &File, name: &OsStr, shown: &Path) -> Result<Recovered, String> {
    let refuse =
        |why: String, todo: &str| format!("{why}; it was neither rolled back nor deleted. {todo}",);
    let untrusted = |why: String| {
        refuse(
            format!("not a journal of this cutf8 run's user: {why}"),
            &format!(
                "cutf8 migrate writes its journals itself (owned by the user running it, mode \
                 0600, one link) and trusts no other: check it, remove it (rm -- {}), and \
                 run again",
                super::report::shell_word(shown)
            ),
        )
    };
    let dir_st =
        nix::sys::stat::fstat(dir).map_err(|e| format!("cannot stat its directory ({e})"))?;
    let rule = Rule::our_file(Access::Private).on(dir_st.st_dev);
    let journal = trust::reach(dir.as_fd(), name).map_err(|e| format!("cannot be opened ({e})"))?;
    let jst = journal.1;
    rule.judge(&jst).map_err(untrusted)?;
    let file = trust::open_reached(dir.as_fd(), name, &journal, libc::O_RDONLY, true)
        .map_err(|e| format!("cannot be opened ({e})"))?;
    let still_ours = |d: &File| {
        trust::reach(d.as_fd(), name)
            .is_ok_and(|(_, st)| (st.st_dev, st.st_ino) == (jst.st_dev, jst.st_ino))
    };
    let keep = |why: String| {
        refuse(
            why,
            &format!(
                "If the file it names is half converted, restore it from a backup; then \
                 remove the journal (rm -- {}) and run again",
                super::report::shell_word(shown)
            ),
        )
    };
    let Some(rec) = read_record(&file, jst.st_size as u64).map_err(keep)? else {
        // Ours, and never complete: its file was not touched.
        if still_ours(dir) {
            sys::unlinkat(dir, name, 0).map_err(|e| format!("cannot remove it ({e})"))?;
            dir.sync_all()
                .map_err(|e| format!("cannot sync its directory ({e})"))?;
        }
        return Ok(Recovered::Incomplete);
    };
    let here = (dir_st.st_dev, dir_st.st_ino);
    if rec.dir != here {
        return Err(keep(format!(
            "was written in another directory (device/inode {:?}, this one {:?}): moved here",
            rec.dir, here
        )));
    }
    let tname = rec.name.to_string_lossy().into_owned();
    if sys::component(&rec.name).is_err() {
        return Err(keep(format!(
            "names {tname:?}, which is not a file name in its directory"
        )));
    }
    let reached = trust::reach(dir.as_fd(), &rec.name)
        .map_err(|e| keep(format!("cannot open the file it names, {tname:?} ({e})")))?;
    let tst = reached.1;
    Rule::any_file()
        .on(dir_st.st_dev)
        .judge(&tst)
        .map_err(|why| keep(format!("the file it names, {tname:?}, {why}")))?;
    if (tst.st_dev, tst.st_ino) != rec.target || (tst.st_uid, tst.st_gid) != rec.owner {
        return Err(keep(format!(
            "belongs to another file than the one now called {tname:?} (device/inode/owner \
             {:?}, recorded {:?})",
            (tst.st_dev, tst.st_ino, tst.st_uid, tst.st_gid),
            (rec.target.0, rec.target.1, rec.owner.0, rec.owner.1)
        )));
    }
    let target = trust::open_reached(dir.as_fd(), &rec.name, &reached, libc::O_RDWR, false)
        .map_err(|e| keep(format!("cannot open the file it names, {tname:?} ({e})")))?;
    sys::lock_exclusive(&target).map_err(|e| format!("cannot lock {tname:?} ({e})"))?;
    if !still_ours(dir) {
        return Ok(Recovered::Gone);
    }
    let j = UndoJournal {
        dir,
        name: name.to_owned(),
        file,
        start: FIXED as u64 + rec.name.len() as u64,
        len: rec.len,
        times: rec.times,
    };
    j.roll_back(&target)
        .map_err(|e| keep(format!("rolling {tname:?} back failed ({e})")))?;
    j.finish()
        .map_err(|e| format!("rolled {tname:?} back, but cannot remove the journal ({e})"))?;
    Ok(Recovered::RolledBack(rec.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn journal_of(d: &Path, key: u64) -> std::path::PathBuf {
        d.join(name_for(key))
    }

    #[test]
    fn roll_back_restores_content_and_times() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"original text\n").unwrap();
        let dir = sys::open_dir(d.path()).unwrap();
        let target = sys::open_at(&dir, OsStr::new("f"), libc::O_RDWR, 0).unwrap();
        let old = target.metadata().unwrap();
        let j = UndoJournal::begin(&dir, 7, OsStr::new("f"), &target).unwrap();
        drop(j); // killed: the journal stays
        let md = std::fs::metadata(journal_of(d.path(), 7)).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o600);
        target.write_all_at(b"half-wri", 0).unwrap();
        target.set_len(5).unwrap();
        // An incomplete journal of ours next to it is simply removed.
        let inc = journal_of(d.path(), 8);
        std::fs::write(&inc, b"CUTF8JNL\x02").unwrap();
        std::fs::set_permissions(&inc, std::fs::Permissions::from_mode(0o600)).unwrap();
        let shown = Path::new("x");
        assert!(matches!(
            recover(&dir, &name_for(8), shown).unwrap(),
            Recovered::Incomplete
        ));
        match recover(&dir, &name_for(7), shown).unwrap() {
            Recovered::RolledBack(n) => assert_eq!(n, "f"),
            other => panic!("journal was complete: {other:?}"),
        }
        assert_eq!(
            std::fs::read(d.path().join("f")).unwrap(),
            b"original text\n"
        );
        let new = std::fs::metadata(d.path().join("f")).unwrap();
        assert_eq!(new.mtime(), old.mtime());
        assert_eq!(new.mtime_nsec(), old.mtime_nsec());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_journal_moved_or_damaged_or_shared_is_kept_and_not_replayed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        std::fs::create_dir(d.path().join("b")).unwrap();
        for sub in ["a", "b"] {
            std::fs::write(d.path().join(sub).join("f"), b"original\n").unwrap();
        }
        let a = sys::open_dir(&d.path().join("a")).unwrap();
        let b = sys::open_dir(&d.path().join("b")).unwrap();
        let target = sys::open_at(&a, OsStr::new("f"), libc::O_RDWR, 0).unwrap();
        drop(UndoJournal::begin(&a, 7, OsStr::new("f"), &target).unwrap());
        std::fs::write(d.path().join("a/f"), b"converted\n").unwrap();
        let check = |dir: &File, want: &str| {
            let e = recover(dir, &name_for(7), Path::new("J")).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(e.contains("neither rolled back nor deleted"), "{e}");
            assert!(e.contains("rm -- 'J'"), "{e}");
        };
        // Moved to another directory: the file there is not its file.
        std::fs::rename(
            journal_of(&d.path().join("a"), 7),
            journal_of(&d.path().join("b"), 7),
        )
        .unwrap();
        check(&b, "another directory");
        assert_eq!(std::fs::read(d.path().join("b/f")).unwrap(), b"original\n");
        std::fs::rename(
            journal_of(&d.path().join("b"), 7),
            journal_of(&d.path().join("a"), 7),
        )
        .unwrap();
        // Readable by others.
        let jp = journal_of(&d.path().join("a"), 7);
        std::fs::set_permissions(&jp, std::fs::Permissions::from_mode(0o644)).unwrap();
        check(&a, "mode 0644");
        std::fs::set_permissions(&jp, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A second link.
        std::fs::hard_link(&jp, d.path().join("link")).unwrap();
        check(&a, "2 links");
        std::fs::remove_file(d.path().join("link")).unwrap();
        // A byte changed.
        let j = std::fs::OpenOptions::new().write(true).open(&jp).unwrap();
        j.write_all_at(b"X", FIXED as u64 + 1).unwrap();
        check(&a, "checksum");
        assert_eq!(std::fs::read(d.path().join("a/f")).unwrap(), b"converted\n");
        assert!(jp.exists());
    }
}
