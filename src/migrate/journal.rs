//! The undo journal that makes an in-place rewrite safe against a kill.
//!
//! A multiply linked file must keep its inode, so it cannot be replaced by
//! a rename; it is overwritten in place instead. Before the first byte is
//! overwritten, a journal in the same directory holds a full copy of the
//! original content, its times and the inode number, ends with a trailer,
//! and is fsynced. Then:
//!
//! * a run killed before the trailer reached the disk left the file
//!   untouched: the next run deletes the incomplete journal;
//! * a run killed after it may have left the file half-written: the next
//!   run copies the original back (a roll-back), deletes the journal, and
//!   converts the file again.
//!
//! Layout (integers little-endian): `CUTF8JNL`, version u32, name length
//! u32, content length u64, inode u64, atime s i64 + ns u32, mtime s i64 +
//! ns u32, the target's name in the directory, the content, `CUTF8END`,
//! content length u64.
//!
//! Knows files and bytes; the conversion itself is the caller's.

use std::ffi::{OsStr, OsString};
use std::fs::{File, FileTimes};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sys;

const HEAD: &[u8; 8] = b"CUTF8JNL";
const TAIL: &[u8; 8] = b"CUTF8END";
const VERSION: u32 = 1;
const FIXED: usize = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 8 + 4;

/// The journal's name for a file whose shard key is `key`.
pub fn name_for(key: u64) -> OsString {
    format!("{}{key:016x}", super::JOURNAL_PREFIX).into()
}

fn time_of(s: i64, ns: u32) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns)
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(ns as u64)
    }
}

/// A complete, durable journal for one file.
pub struct Journal<'a> {
    dir: &'a File,
    name: OsString,
    file: File,
    /// Where the content starts in the journal.
    pub start: u64,
    /// The content's length.
    pub len: u64,
    times: FileTimes,
}

fn copy_range(from: &File, from_at: u64, to: &File, to_at: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
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
        to.write_all_at(&buf[..n], to_at + done)?;
        done += n as u64;
    }
    Ok(())
}

impl<'a> Journal<'a> {
    /// Copy `target` (called `target_name` in `dir`) into a new journal
    /// and make it durable. Fails if a journal of that name exists: another
    /// run is converting the file.
    pub fn begin(
        dir: &'a File,
        key: u64,
        target_name: &OsStr,
        target: &File,
    ) -> io::Result<Journal<'a>> {
        let st = target.metadata()?;
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
        head.extend_from_slice(&st.ino().to_le_bytes());
        head.extend_from_slice(&st.atime().to_le_bytes());
        head.extend_from_slice(&(st.atime_nsec() as u32).to_le_bytes());
        head.extend_from_slice(&st.mtime().to_le_bytes());
        head.extend_from_slice(&(st.mtime_nsec() as u32).to_le_bytes());
        head.extend_from_slice(tname);
        let j = Journal {
            dir,
            name,
            file,
            start: head.len() as u64,
            len: st.len(),
            times: FileTimes::new()
                .set_accessed(time_of(st.atime(), st.atime_nsec() as u32))
                .set_modified(time_of(st.mtime(), st.mtime_nsec() as u32)),
        };
        let written = (|| {
            j.file.write_all_at(&head, 0)?;
            copy_range(target, 0, &j.file, j.start, j.len)?;
            let mut tail = TAIL.to_vec();
            tail.extend_from_slice(&j.len.to_le_bytes());
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
        copy_range(&self.file, self.start, target, 0, self.len)?;
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
pub enum Recovered {
    /// The journal never became complete, so its file was never touched;
    /// the journal was deleted.
    Incomplete,
    /// The named file was rolled back to its original content.
    RolledBack(OsString),
}

/// Deal with journal `name` in `dir`, left by a killed run.
pub fn recover(dir: &File, name: &OsStr) -> io::Result<Recovered> {
    let file = sys::open_at(dir, name, libc::O_RDONLY, 0)?;
    let total = file.metadata()?.len();
    let mut fixed = [0u8; FIXED];
    let complete = (|| -> io::Result<Option<(OsString, u64, u64, FileTimes)>> {
        if total < FIXED as u64 {
            return Ok(None);
        }
        file.read_exact_at(&mut fixed, 0)?;
        let u32_at = |i: usize| u32::from_le_bytes(fixed[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(fixed[i..i + 8].try_into().unwrap());
        if &fixed[..8] != HEAD || u32_at(8) != VERSION {
            return Ok(None);
        }
        let name_len = u32_at(12) as u64;
        let len = u64_at(16);
        let ino = u64_at(24);
        let atime = time_of(u64_at(32) as i64, u32_at(40));
        let mtime = time_of(u64_at(44) as i64, u32_at(52));
        let start = FIXED as u64 + name_len;
        if total != start + len + 16 {
            return Ok(None);
        }
        let mut tail = [0u8; 16];
        file.read_exact_at(&mut tail, start + len)?;
        if &tail[..8] != TAIL || tail[8..] != len.to_le_bytes() {
            return Ok(None);
        }
        let mut tname = vec![0u8; name_len as usize];
        file.read_exact_at(&mut tname, FIXED as u64)?;
        let times = FileTimes::new().set_accessed(atime).set_modified(mtime);
        Ok(Some((OsString::from_vec(tname), len, ino, times)))
    })()?;
    let Some((target_name, len, ino, times)) = complete else {
        sys::unlinkat(dir, name, 0)?;
        dir.sync_all()?;
        return Ok(Recovered::Incomplete);
    };
    let target = sys::open_at(dir, &target_name, libc::O_RDWR, 0).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "journal {} cannot be rolled back into {}: {e}; it was kept",
                name.to_string_lossy(),
                target_name.to_string_lossy()
            ),
        )
    })?;
    if target.metadata()?.ino() != ino {
        return Err(io::Error::other(format!(
            "journal {} belongs to another file than the one now called {}; it was kept",
            name.to_string_lossy(),
            target_name.to_string_lossy()
        )));
    }
    sys::lock_exclusive(&target)?;
    let j = Journal {
        dir,
        name: name.to_owned(),
        file,
        start: FIXED as u64 + target_name.len() as u64,
        len,
        times,
    };
    j.roll_back(&target)?;
    j.finish()?;
    Ok(Recovered::RolledBack(target_name))
}

use std::os::unix::ffi::OsStringExt;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn roll_back_restores_content_and_times() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"original text\n").unwrap();
        let dir = sys::open_dir(d.path()).unwrap();
        let target = sys::open_at(&dir, OsStr::new("f"), libc::O_RDWR, 0).unwrap();
        let old = target.metadata().unwrap();
        let j = Journal::begin(&dir, 7, OsStr::new("f"), &target).unwrap();
        drop(j); // killed: the journal stays
        target.write_all_at(b"half-wri", 0).unwrap();
        target.set_len(5).unwrap();
        // An incomplete journal next to it is simply removed.
        std::fs::write(d.path().join(name_for(8)), b"CUTF8JNL\x01").unwrap();
        assert!(matches!(
            recover(&dir, &name_for(8)).unwrap(),
            Recovered::Incomplete
        ));
        match recover(&dir, &name_for(7)).unwrap() {
            Recovered::RolledBack(n) => assert_eq!(n, "f"),
            Recovered::Incomplete => panic!("journal was complete"),
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
}
