//! fanotify with file identifiers: a notification group that reports, for
//! every change on a whole filesystem, the changed inode's file handle and
//! (for changes to a directory's entries) the directory's handle and the
//! entry's name, never an open descriptor (`FAN_REPORT_FID |
//! FAN_REPORT_DFID_NAME`). `nix` makes the group and its mark; its reader
//! knows no identifier records, so they are parsed here (from bytes, no
//! `unsafe`). Used
//! by the mount's watch of BACKING (`crate::fs`'s `watch`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// A changed file's contents (`FAN_MODIFY`).
pub const MODIFY: u64 = libc::FAN_MODIFY;
/// A changed inode's attributes: mode, owner, times, link count, xattrs.
pub const ATTRIB: u64 = libc::FAN_ATTRIB;
/// An inode itself was renamed (its change time moved; the names are
/// reported by [`MOVED_FROM`] and [`MOVED_TO`]).
pub const MOVE_SELF: u64 = libc::FAN_MOVE_SELF;
/// An entry moved out of a directory.
pub const MOVED_FROM: u64 = libc::FAN_MOVED_FROM;
/// An entry moved into a directory.
pub const MOVED_TO: u64 = libc::FAN_MOVED_TO;
/// An entry created in a directory.
pub const CREATE: u64 = libc::FAN_CREATE;
/// An entry removed from a directory.
pub const DELETE: u64 = libc::FAN_DELETE;
/// The group's queue overflowed: events were lost.
pub const OVERFLOW: u64 = libc::FAN_Q_OVERFLOW;
/// Report events on directories too.
pub const ONDIR: u64 = libc::FAN_ONDIR;

/// A file identifier: the filesystem's id and a file handle on it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fid {
    pub fsid: [i32; 2],
    pub ty: i32,
    pub handle: Box<[u8]>,
}

/// One event, as reported.
#[derive(Debug, Default)]
pub struct Event {
    pub mask: u64,
    /// The process that caused it (its thread group id).
    pub pid: i32,
    /// The directory whose entry `name` changed (or that holds the inode).
    pub dir: Option<(Fid, Box<[u8]>)>,
    /// The inode itself.
    pub object: Option<Fid>,
}

/// A notification group.
pub struct Fanotify {
    group: nix::sys::fanotify::Fanotify,
}

impl Fanotify {
    /// A group that reports identifiers and names (needs CAP_SYS_ADMIN for
    /// a filesystem mark). Its queue holds the kernel's default of 16384
    /// events; beyond, one [`OVERFLOW`] event says some were lost.
    pub fn new() -> io::Result<Fanotify> {
        use nix::sys::fanotify::{EventFFlags, InitFlags};
        // nix names no FAN_REPORT_* identifier flags; the kernel's bits are
        // passed as they are.
        let flags = InitFlags::from_bits_retain(
            libc::FAN_CLASS_NOTIF
                | libc::FAN_CLOEXEC
                | libc::FAN_REPORT_FID
                | libc::FAN_REPORT_DFID_NAME,
        );
        let group = nix::sys::fanotify::Fanotify::init(
            flags,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE,
        )
        .map_err(io::Error::from)?;
        Ok(Fanotify { group })
    }

    /// Watches the whole filesystem `any` lies on for the events in `mask`.
    pub fn mark_filesystem(&self, any: BorrowedFd<'_>, mask: u64) -> io::Result<()> {
        use nix::sys::fanotify::{MarkFlags, MaskFlags};
        self.group
            .mark(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_FILESYSTEM,
                MaskFlags::from_bits_retain(mask),
                any,
                None::<&std::path::Path>,
            )
            .map_err(io::Error::from)
    }

    /// Reads the events queued now into `buf` (blocking until there is at
    /// least one), and returns how many bytes hold them. (nix's own reader
    /// knows no identifier records: [`events`] parses them.)
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match nix::unistd::read(self.group.as_fd(), buf) {
                Err(nix::Error::EINTR) => continue,
                r => return r.map_err(io::Error::from),
            }
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `struct fanotify_event_metadata`: event_len, vers, reserved,
/// metadata_len, mask, fd, pid.
const METADATA: usize = 24;

/// The events in `buf` (as [`Fanotify::read`] filled it), in order; a
/// malformed record ends the walk.
pub fn events(buf: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(len) = u32_at(buf, at).map(|l| l as usize) {
        let (Some(meta_len), Some(mask), Some(pid)) = (
            u16_at(buf, at + 6).map(usize::from),
            u64_at(buf, at + 8),
            i32_at(buf, at + 20),
        ) else {
            break;
        };
        if len < METADATA || meta_len < METADATA || at + len > buf.len() {
            break;
        }
        let mut e = Event {
            mask,
            pid,
            ..Event::default()
        };
        info_records(&buf[at + meta_len..at + len], &mut e);
        out.push(e);
        at += len;
    }
    out
}

/// Fills `e` from its info records: `{type u8, pad u8, len u16}` then
/// `fsid` (two i32), `struct file_handle` (bytes u32, type i32, bytes) and,
/// for a directory record with a name, the name with its terminating NUL.
fn info_records(mut b: &[u8], e: &mut Event) {
    while b.len() >= 4 {
        let ty = b[0];
        let len = usize::from(u16_at(b, 2).unwrap_or(0));
        if len < 4 || len > b.len() {
            return;
        }
        let rec = &b[..len];
        b = &b[len..];
        let (Some(f0), Some(f1), Some(hlen), Some(hty)) = (
            i32_at(rec, 4),
            i32_at(rec, 8),
            u32_at(rec, 12).map(|n| n as usize),
            i32_at(rec, 16),
        ) else {
            continue;
        };
        let Some(handle) = rec.get(20..20 + hlen) else {
            continue;
        };
        let fid = Fid {
            fsid: [f0, f1],
            ty: hty,
            handle: handle.into(),
        };
        match ty {
            libc::FAN_EVENT_INFO_TYPE_FID => e.object = Some(fid),
            libc::FAN_EVENT_INFO_TYPE_DFID => e.dir = Some((fid, Box::default())),
            libc::FAN_EVENT_INFO_TYPE_DFID_NAME => {
                let rest = &rec[20 + hlen..];
                let name = rest.split(|&c| c == 0).next().unwrap_or_default();
                e.dir = Some((fid, name.into()));
            }
            _ => {}
        }
    }
}

/// The type of the filesystem behind `fd` (`statfs`'s `f_type`, its
/// magic number: NFS, CIFS, FUSE…).
pub fn filesystem_type(fd: BorrowedFd<'_>) -> io::Result<i64> {
    let s = nix::sys::statfs::fstatfs(fd).map_err(io::Error::from)?;
    #[allow(clippy::unnecessary_cast)]
    Ok(s.filesystem_type().0 as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ty: u8, fsid: [i32; 2], hty: i32, handle: &[u8], name: &[u8]) -> Vec<u8> {
        let mut r = vec![ty, 0, 0, 0];
        r.extend(fsid[0].to_ne_bytes());
        r.extend(fsid[1].to_ne_bytes());
        r.extend((handle.len() as u32).to_ne_bytes());
        r.extend(hty.to_ne_bytes());
        r.extend(handle);
        if !name.is_empty() {
            r.extend(name);
            r.push(0);
        }
        while r.len() % 4 != 0 {
            r.push(0);
        }
        let len = r.len() as u16;
        r[2..4].copy_from_slice(&len.to_ne_bytes());
        r
    }

    fn event(mask: u64, pid: i32, records: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = records.concat();
        let len = (METADATA + body.len()) as u32;
        let mut e = Vec::new();
        e.extend(len.to_ne_bytes());
        e.extend([3u8, 0]);
        e.extend((METADATA as u16).to_ne_bytes());
        e.extend(mask.to_ne_bytes());
        e.extend((-1i32).to_ne_bytes());
        e.extend(pid.to_ne_bytes());
        e.extend(body);
        e
    }

    #[test]
    fn events_carry_directory_name_and_object() {
        let mut buf = event(
            CREATE,
            42,
            &[record(
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME,
                [7, 8],
                1,
                &[1, 2, 3, 4, 5, 6, 7, 8],
                b"n\xffme",
            )],
        );
        buf.extend(event(
            MODIFY,
            43,
            &[
                record(
                    libc::FAN_EVENT_INFO_TYPE_DFID_NAME,
                    [7, 8],
                    1,
                    &[9; 8],
                    b"f",
                ),
                record(libc::FAN_EVENT_INFO_TYPE_FID, [7, 8], 1, &[10; 8], b""),
            ],
        ));
        buf.extend(event(OVERFLOW, 0, &[]));
        let ev = events(&buf);
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[0].mask, CREATE);
        assert_eq!(ev[0].pid, 42);
        let (d, n) = ev[0].dir.as_ref().unwrap();
        assert_eq!(
            (d.fsid, d.ty, &*d.handle, &**n),
            ([7, 8], 1, &[1, 2, 3, 4, 5, 6, 7, 8][..], &b"n\xffme"[..])
        );
        assert!(ev[0].object.is_none());
        assert_eq!(&*ev[1].object.as_ref().unwrap().handle, &[10; 8]);
        assert_eq!(&*ev[1].dir.as_ref().unwrap().1, b"f");
        assert_eq!(ev[2].mask, OVERFLOW);
        // A truncated buffer ends the walk without a partial event.
        assert_eq!(events(&buf[..buf.len() - 10]).len(), 2);
    }
}
