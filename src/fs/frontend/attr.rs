//! Backing `stat` → FUSE attributes, and FUSE times → `timespec`.
//!
//! The size is passed in by the caller: for a corrected file it is the
//! view's length plus the bytes held back at its end (`ops::attr_with`
//! decides it, for every reply that carries attributes: `CutFs::attr`'s,
//! the scan threads' and readdirplus's). Nothing else is translated.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo, TimeOrNow};

pub fn kind(mode: libc::mode_t) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = u32::try_from(nsec.clamp(0, 999_999_999)).unwrap_or(0);
    if sec >= 0 {
        UNIX_EPOCH
            .checked_add(Duration::new(sec.unsigned_abs(), nsec))
            .unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::new(sec.unsigned_abs(), 0))
            .and_then(|t| t.checked_add(Duration::new(0, nsec)))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// FUSE attributes for FUSE inode `ino` from its backing `st`, showing `size`.
pub fn from_stat(ino: u64, st: &libc::stat, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec_of(t: SystemTime) -> libc::timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => libc::timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        },
        Err(e) => {
            // Before 1970: seconds rounded down, nanoseconds non-negative.
            let d = e.duration();
            let mut sec = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let mut nsec = i64::from(d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            }
        }
    }
}

/// A setattr time as utimensat wants it (`None` leaves it unchanged).
pub fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => timespec_of(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_before_and_after_1970() {
        for (s, n) in [(0i64, 0i64), (1, 5), (-1, 0), (-1, 999_999_999), (-100, 3)] {
            let ts = timespec(Some(TimeOrNow::SpecificTime(time(s, n))));
            assert_eq!((ts.tv_sec, ts.tv_nsec), (s, n));
        }
    }
}
