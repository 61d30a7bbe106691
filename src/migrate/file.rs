//! Convert one regular file in place, all or nothing.
//!
//! A singly linked file is converted into a temporary file in its own
//! directory (`.cutf8-tmp.<key>.<n>`), given the original's owner, xattrs,
//! mode and times, verified by converting it back, fsynced and renamed over
//! the original. A multiply linked file (or one whose owner this user
//! cannot give away) is rewritten in place under a [`journal`]. Every call
//! goes through a descriptor of the directory the walk saw, with
//! `O_NOFOLLOW`, so nothing outside the tree is ever touched.
//!
//! Called by the workers of [`super::run`]; knows nothing of walking,
//! sharding or reporting.

use std::ffi::{OsStr, OsString};
use std::fs::{File, FileTimes, Metadata, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::atomic::{AtomicU64, Ordering};

use super::journal::{self, Journal};
use super::report::{Outcome, Reason};
use super::sys;
use super::transcode::{self, At, Buffers, Count, Direction, Region, Stop};
use super::walk::Entry;

/// What a worker needs to know about the run.
pub struct Job {
    pub direction: Direction,
    pub dry_run: bool,
}

fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

fn special_kind(md: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_dir() {
        "directory"
    } else {
        "unknown type"
    }
}

fn times_of(md: &Metadata) -> io::Result<FileTimes> {
    Ok(FileTimes::new()
        .set_accessed(md.accessed()?)
        .set_modified(md.modified()?))
}

/// Whether the file changed since `before` was taken.
fn changed(before: &Metadata, now: &Metadata) -> bool {
    before.len() != now.len()
        || before.mtime() != now.mtime()
        || before.mtime_nsec() != now.mtime_nsec()
        || before.ctime() != now.ctime()
        || before.ctime_nsec() != now.ctime_nsec()
        || before.ino() != now.ino()
}

fn skip_or_fail(stop: Stop, what: &str) -> Outcome {
    match stop {
        Stop::Skip(r) => Outcome::Skipped(r),
        Stop::Io(e) => Outcome::Failed(format!("{what}: {e}")),
    }
}

/// Convert the file `entry` names, or say why not.
pub fn process(job: &Job, entry: &Entry, bufs: &mut Buffers) -> Outcome {
    let dir = match sys::open_dir(&entry.dir) {
        Ok(d) => d,
        Err(e) if denied(&e) => {
            return Outcome::Skipped(Reason::PermissionDenied("cannot open its directory".into()))
        }
        Err(e) => return Outcome::Failed(format!("cannot open its directory: {e}")),
    };
    match dir.metadata() {
        Ok(md) if (md.dev(), md.ino()) == entry.dir_id => {}
        Ok(_) => return Outcome::Failed("its directory was replaced during the run".into()),
        Err(e) => return Outcome::Failed(format!("cannot stat its directory: {e}")),
    }
    let file = match sys::open_read_at(&dir, &entry.name, false) {
        Ok(f) => f,
        Err(e) if denied(&e) => {
            return Outcome::Skipped(Reason::PermissionDenied("cannot read the file".into()))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Outcome::Skipped(Reason::Symlink)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Outcome::Skipped(Reason::Special("socket"))
        }
        Err(e) => return Outcome::Failed(format!("cannot open: {e}")),
    };
    let md = match file.metadata() {
        Ok(md) => md,
        Err(e) => return Outcome::Failed(format!("cannot stat: {e}")),
    };
    if !md.is_file() {
        return Outcome::Skipped(Reason::Special(special_kind(&md)));
    }
    if md.nlink() > 1 {
        drop(file);
        return in_place(job, &dir, entry, bufs);
    }
    if let Err(stop) = transcode::precheck(job.direction, Region::whole(&file), bufs) {
        return skip_or_fail(stop, "cannot read");
    }
    if job.dry_run {
        return match transcode::convert(job.direction, Region::whole(&file), &mut Count(0), bufs) {
            Ok(after) => Outcome::WouldConvert {
                before: md.len(),
                after,
            },
            Err(stop) => skip_or_fail(stop, "cannot read"),
        };
    }
    match by_rename(job, &dir, entry, &file, &md, bufs) {
        Ok(outcome) => outcome,
        // This user cannot give the new file the old one's owner: keep the
        // inode instead.
        Err(Fallback) => {
            drop(file);
            in_place(job, &dir, entry, bufs)
        }
    }
}

/// Use the in-place path instead.
struct Fallback;

/// A temporary file that is removed unless it was renamed into place.
struct Temp<'a> {
    dir: &'a File,
    name: OsString,
    file: File,
    armed: bool,
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = sys::unlink_at(self.dir, &self.name);
        }
    }
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn create_temp<'a>(dir: &'a File, key: u64) -> io::Result<Temp<'a>> {
    loop {
        let n = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let name: OsString =
            format!("{}{key:016x}.{}-{n}", super::TMP_PREFIX, std::process::id()).into();
        match sys::open_at(
            dir,
            &name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o600,
        ) {
            Ok(file) => {
                return Ok(Temp {
                    dir,
                    name,
                    file,
                    armed: true,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn by_rename(
    job: &Job,
    dir: &File,
    entry: &Entry,
    file: &File,
    md: &Metadata,
    bufs: &mut Buffers,
) -> Result<Outcome, Fallback> {
    let temp = match create_temp(dir, entry.key) {
        Ok(t) => t,
        Err(e) if denied(&e) => {
            return Ok(Outcome::Skipped(Reason::PermissionDenied(
                "cannot create a file in its directory".into(),
            )))
        }
        Err(e) => {
            return Ok(Outcome::Failed(format!(
                "cannot create a temporary file: {e}"
            )))
        }
    };
    let src = Region::whole(file);
    let mut sink = At {
        file: &temp.file,
        pos: 0,
    };
    let after = match transcode::convert(job.direction, src, &mut sink, bufs) {
        Ok(n) => n,
        Err(stop) => return Ok(skip_or_fail(stop, "cannot convert")),
    };
    // Owner first: chown clears set-id bits and file capabilities, which
    // the mode and xattrs below put back.
    match std::os::unix::fs::fchown(&temp.file, Some(md.uid()), Some(md.gid())) {
        Ok(()) => {}
        Err(e) if denied(&e) => return Err(Fallback),
        Err(e) => return Ok(Outcome::Failed(format!("cannot keep the owner: {e}"))),
    }
    let finish = (|| -> Result<(), String> {
        let xattrs = sys::list_xattrs(file).map_err(|e| format!("cannot read xattrs: {e}"))?;
        sys::set_xattrs(&temp.file, &xattrs).map_err(|e| e.to_string())?;
        temp.file
            .set_permissions(Permissions::from_mode(md.mode() & 0o7777))
            .map_err(|e| format!("cannot keep the mode: {e}"))?;
        transcode::verify(job.direction, src, Region::whole(&temp.file), bufs)?;
        let times = times_of(md).map_err(|e| e.to_string())?;
        temp.file
            .set_times(times)
            .map_err(|e| format!("cannot keep the times: {e}"))?;
        temp.file
            .sync_all()
            .map_err(|e| format!("cannot fsync: {e}"))?;
        let now = file.metadata().map_err(|e| e.to_string())?;
        if changed(md, &now) {
            return Err("the file changed while it was being converted; left as it is".into());
        }
        Ok(())
    })();
    if let Err(msg) = finish {
        return Ok(Outcome::Failed(msg));
    }
    let mut temp = temp;
    if let Err(e) = sys::rename_at(dir, &temp.name, &entry.name) {
        return Ok(Outcome::Failed(format!("cannot rename into place: {e}")));
    }
    temp.armed = false;
    if let Err(e) = dir.sync_all() {
        return Ok(Outcome::Failed(format!(
            "converted, but fsync of its directory failed: {e}"
        )));
    }
    Ok(Outcome::Converted {
        before: md.len(),
        after,
    })
}

/// The in-place rewrite under a journal, for files that must keep their
/// inode.
fn in_place(job: &Job, dir: &File, entry: &Entry, bufs: &mut Buffers) -> Outcome {
    let file = match sys::open_read_at(dir, &entry.name, !job.dry_run) {
        Ok(f) => f,
        Err(e) if denied(&e) => {
            return Outcome::Skipped(Reason::PermissionDenied(
                "cannot write the file (it must keep its inode)".into(),
            ))
        }
        Err(e) => return Outcome::Failed(format!("cannot open: {e}")),
    };
    if !job.dry_run {
        if let Err(e) = sys::lock_exclusive(&file) {
            return Outcome::Failed(format!("cannot lock: {e}"));
        }
    }
    let md = match file.metadata() {
        Ok(md) if md.is_file() => md,
        Ok(md) => return Outcome::Skipped(Reason::Special(special_kind(&md))),
        Err(e) => return Outcome::Failed(format!("cannot stat: {e}")),
    };
    let src = Region::whole(&file);
    if let Err(stop) = transcode::precheck(job.direction, src, bufs) {
        return skip_or_fail(stop, "cannot read");
    }
    // Classify the whole file before writing anything.
    let after = match transcode::convert(job.direction, src, &mut Count(0), bufs) {
        Ok(n) => n,
        Err(stop) => return skip_or_fail(stop, "cannot read"),
    };
    if job.dry_run {
        return Outcome::WouldConvert {
            before: md.len(),
            after,
        };
    }
    let xattrs = match sys::list_xattrs(&file) {
        Ok(x) => x,
        Err(e) => return Outcome::Failed(format!("cannot read xattrs: {e}")),
    };
    let journal = match Journal::begin(dir, entry.key, &entry.name, &file) {
        Ok(j) => j,
        Err(e) if denied(&e) => {
            return Outcome::Skipped(Reason::PermissionDenied(
                "cannot create a journal in its directory".into(),
            ))
        }
        Err(e) => return Outcome::Failed(format!("cannot write the journal: {e}")),
    };
    match file.metadata() {
        Ok(now) if !changed(&md, &now) => {}
        _ => {
            let _ = journal.finish();
            return Outcome::Failed(
                "the file changed while it was being converted; left as it is".into(),
            );
        }
    }
    let original = Region {
        file: journal.file(),
        start: journal.start,
        end: Some(journal.start + journal.len),
    };
    let rewrite = (|| -> Result<u64, String> {
        let mut sink = At {
            file: &file,
            pos: 0,
        };
        let n =
            transcode::convert(job.direction, original, &mut sink, bufs).map_err(|s| match s {
                Stop::Skip(r) => format!("journal copy does not convert: {r}"),
                Stop::Io(e) => format!("cannot rewrite: {e}"),
            })?;
        file.set_len(n)
            .map_err(|e| format!("cannot truncate: {e}"))?;
        file.sync_all().map_err(|e| format!("cannot fsync: {e}"))?;
        transcode::verify(job.direction, original, Region::whole(&file), bufs)?;
        // A write may have cleared set-id bits and file capabilities.
        sys::set_xattrs(&file, &xattrs).map_err(|e| e.to_string())?;
        file.set_permissions(Permissions::from_mode(md.mode() & 0o7777))
            .map_err(|e| format!("cannot keep the mode: {e}"))?;
        let times = times_of(&md).map_err(|e| e.to_string())?;
        file.set_times(times)
            .map_err(|e| format!("cannot keep the times: {e}"))?;
        file.sync_all().map_err(|e| format!("cannot fsync: {e}"))?;
        Ok(n)
    })();
    match rewrite {
        Ok(after) => match journal.finish() {
            Ok(()) => Outcome::Converted {
                before: md.len(),
                after,
            },
            Err(e) => Outcome::Failed(format!(
                "converted, but its journal could not be removed: {e}"
            )),
        },
        Err(msg) => match journal.roll_back(&file) {
            Ok(()) => {
                let _ = journal.finish();
                Outcome::Failed(format!("{msg}; rolled back"))
            }
            Err(e) => Outcome::Failed(format!(
                "{msg}; roll-back failed ({e}): the journal {} in its directory holds the original and the next run restores it",
                journal::name_for(entry.key).to_string_lossy()
            )),
        },
    }
}

/// Whether a name in a directory is the given prefix followed by a shard
/// key in hex; returns the key.
pub fn key_of(name: &OsStr, prefix: &str) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let rest = name.as_bytes().strip_prefix(prefix.as_bytes())?;
    let hex = std::str::from_utf8(rest.get(..16)?).ok()?;
    u64::from_str_radix(hex, 16).ok()
}
