//! Convert one regular file in place, all or nothing.
//!
//! A singly linked file is converted into a temporary file in its own
//! directory (`.cutf8-tmp.<key>.<n>`), given the original's owner, xattrs,
//! mode and times, verified by converting it back, fsynced and renamed over
//! the original. A multiply linked file (or one whose owner this user
//! cannot give away) is rewritten in place under a [`undo`] journal. Every call
//! goes through a descriptor of the directory the walk saw (`crate::walk::Dirs`:
//! reached from its parent's descriptor, identity checked), and the file is
//! reached in it by its one name without following a symlink and opened
//! for I/O only once `fstat` says it is a regular file (`crate::trust`), so
//! nothing outside the tree is ever touched.
//!
//! Called by the workers of [`super::run`]; knows nothing of walking,
//! sharding or reporting.

use std::ffi::OsString;
use std::fs::{File, FileTimes, Metadata, Permissions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use super::report::{Outcome, Reason};
use super::transcode::{self, At, Buffers, Count, Direction, Region, Stop};
use super::undo::{self, UndoJournal};
use super::walk::Entry;
use crate::io::Stamp;
use crate::walk::{is_denied, special_kind, Dirs, Lost};
use crate::{sys, trust};

/// What a worker needs to know about the run.
pub struct Job {
    pub direction: Direction,
    pub dry_run: bool,
    /// Convert scripts too (`--include-scripts`).
    pub include_scripts: bool,
    /// Files the run writes itself (device, inode): never converted.
    pub own: Vec<(u64, u64)>,
}

fn times_of(md: &Metadata) -> io::Result<FileTimes> {
    Ok(FileTimes::new()
        .set_accessed(md.accessed()?)
        .set_modified(md.modified()?))
}

fn skip_or_fail(stop: Stop, what: &str) -> Outcome {
    match stop {
        Stop::Skip(r) => Outcome::Skipped(r),
        Stop::Io(e) => Outcome::Failed(format!("{what}: {e}")),
    }
}

/// What [`process`] left to do.
pub enum Step {
    /// The file is dealt with.
    Done(Outcome),
    /// Converted and verified into a temporary file that still has to be
    /// made durable (one `syncfs` for a batch of files, see [`Batch`]) and
    /// renamed into place ([`commit`]).
    Pending(Box<Pending>),
}

/// Opens the file `name` in `dir` for reading (and writing, if `write`)
/// without following a symlink and only if it is a regular file; the
/// outcome for anything else.
fn open_regular(dir: &File, name: &OsString, write: bool) -> Result<File, Outcome> {
    let reached = match trust::reach(dir.as_fd(), name) {
        Ok(x) => x,
        Err(e) if is_denied(&e) => {
            let r = Reason::PermissionDenied("cannot read the file".into());
            return Err(Outcome::Skipped(r));
        }
        Err(e) => return Err(Outcome::Failed(format!("cannot open: {e}"))),
    };
    let st = &reached.1;

    match nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT {
        nix::sys::stat::SFlag::S_IFREG => {}
        nix::sys::stat::SFlag::S_IFLNK => return Err(Outcome::Skipped(Reason::Symlink)),
        _ => return Err(Outcome::Skipped(Reason::Special(special_kind(st.st_mode)))),
    }
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
    trust::open_reached(dir.as_fd(), name, &reached, flags, true).map_err(|e| {
        if is_denied(&e) {
            let what = if write {
                "cannot write the file (it must keep its inode)"
            } else {
                "cannot read the file"
            };
            Outcome::Skipped(Reason::PermissionDenied(what.into()))
        } else {
            Outcome::Failed(format!("cannot open: {e}"))
        }
    })
}

/// Convert the file `entry` names (its directory one of `dirs`), or say
/// why not.
pub fn process(job: &Job, dirs: &Dirs, entry: &Entry, bufs: &mut Buffers) -> Step {
    let dir = match dirs.open(entry.dir) {
        Ok(d) => d,
        Err(Lost::Replaced) => {
            let msg = "its directory was moved or replaced during the run; left as it is";
            return Step::Done(Outcome::Failed(msg.into()));
        }
        Err(Lost::Io(e)) if is_denied(&e) => {
            let r = Reason::PermissionDenied("cannot open its directory".into());
            return Step::Done(Outcome::Skipped(r));
        }
        Err(Lost::Io(e)) => {
            return Step::Done(Outcome::Failed(format!("cannot open its directory: {e}")))
        }
    };
    let file = match open_regular(&dir, &entry.name, false) {
        Ok(f) => f,
        Err(outcome) => return Step::Done(outcome),
    };
    let md = match file.metadata() {
        Ok(md) => md,
        Err(e) => return Step::Done(Outcome::Failed(format!("cannot stat: {e}"))),
    };
    if job.own.contains(&(md.dev(), md.ino())) {
        return Step::Done(Outcome::Skipped(Reason::OwnReport));
    }
    if md.nlink() > 1 {
        drop(file);
        return Step::Done(in_place(job, dirs, &dir, entry, bufs));
    }
    let bom = match transcode::precheck(
        job.direction,
        job.include_scripts,
        Region::upto(&file, md.len()),
        bufs,
    ) {
        Ok(bom) => bom,
        Err(stop) => return Step::Done(skip_or_fail(stop, "cannot read")),
    };
    if job.dry_run {
        let src = Region::upto(&file, md.len());
        let r = transcode::convert(job.direction, src, &mut Count(0), bufs);
        return Step::Done(match r {
            Ok(after) => Outcome::WouldConvert {
                before: md.len(),
                after,
                bom,
            },
            Err(stop) => skip_or_fail(stop, "cannot read"),
        });
    }
    match by_rename(job, &dir, entry, file, md, bom, bufs) {
        Ok(step) => step,
        // This user cannot give the new file the old one's owner: keep the
        // inode instead.
        Err(Fallback) => Step::Done(in_place(job, dirs, &dir, entry, bufs)),
    }
}

/// Use the in-place path instead.
struct Fallback;

/// A temporary file that is removed unless it was renamed into place.
struct Temp {
    dir: Arc<File>,
    name: OsString,
    armed: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.armed {
            let _ = sys::unlinkat(&self.dir, &self.name, 0);
        }
    }
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

fn create_temp(dir: &Arc<File>, key: u64) -> io::Result<(Temp, File)> {
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
                let temp = Temp {
                    dir: Arc::clone(dir),
                    name,
                    armed: true,
                };
                // The mode (and ACL) it gets are the original's, nothing
                // the directory's default ACL adds.
                trust::drop_inherited_acl(&file)?;
                return Ok((temp, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A verified conversion waiting to be made durable and renamed.
pub struct Pending {
    temp: Temp,
    /// The original, held open so that the rename does not free its
    /// blocks: the last close does, in a closer thread (see [`Batch`]).
    original: File,
    name: OsString,
    md: Metadata,
    after: u64,
    bom: bool,
}

impl Pending {
    /// A descriptor on the file's filesystem, for `syncfs`.
    pub fn dir(&self) -> &Arc<File> {
        &self.temp.dir
    }
}

fn by_rename(
    job: &Job,
    dir: &Arc<File>,
    entry: &Entry,
    file: File,
    md: Metadata,
    bom: bool,
    bufs: &mut Buffers,
) -> Result<Step, Fallback> {
    let fail = |msg: String| Ok(Step::Done(Outcome::Failed(msg)));
    let (temp, tfile) = match create_temp(dir, entry.key) {
        Ok(t) => t,
        Err(e) if is_denied(&e) => {
            let r = Reason::PermissionDenied("cannot create a file in its directory".into());
            return Ok(Step::Done(Outcome::Skipped(r)));
        }
        Err(e) => return fail(format!("cannot create a temporary file: {e}")),
    };
    let src = Region::upto(&file, md.len());
    let mut sink = At {
        file: &tfile,
        pos: 0,
    };
    let after = match transcode::convert(job.direction, src, &mut sink, bufs) {
        Ok(n) => n,
        Err(stop) => return Ok(Step::Done(skip_or_fail(stop, "cannot convert"))),
    };
    // Owner first: chown clears set-id bits and file capabilities, which
    // the mode and xattrs below put back.
    match std::os::unix::fs::fchown(&tfile, Some(md.uid()), Some(md.gid())) {
        Ok(()) => {}
        Err(e) if is_denied(&e) => return Err(Fallback),
        Err(e) => return fail(format!("cannot keep the owner: {e}")),
    }
    let finish = (|| -> Result<(), String> {
        let xattrs =
            sys::xattr::all(file.as_fd()).map_err(|e| format!("cannot read xattrs: {e}"))?;
        sys::xattr::set_all(tfile.as_fd(), &xattrs).map_err(|e| e.to_string())?;
        tfile
            .set_permissions(Permissions::from_mode(md.mode() & 0o7777))
            .map_err(|e| format!("cannot keep the mode: {e}"))?;
        transcode::verify(job.direction, src, Region::whole(&tfile), bufs)?;
        let times = times_of(&md).map_err(|e| e.to_string())?;
        tfile
            .set_times(times)
            .map_err(|e| format!("cannot keep the times: {e}"))
    })();
    match finish {
        Ok(()) => Ok(Step::Pending(Box::new(Pending {
            temp,
            original: file,
            name: entry.name.clone(),
            md,
            after,
            bom,
        }))),
        Err(msg) => fail(msg),
    }
}

/// Rename a pending conversion into place. Call only once its data is
/// durable ([`Batch::flush`]). Gives back the original's descriptor.
fn commit(p: Pending) -> (Outcome, File) {
    let Pending {
        mut temp,
        original,
        name,
        md,
        after,
        bom,
    } = p;
    match sys::statat(&temp.dir, &name).map(|st| Stamp::of(&st)) {
        Ok(now) if now == Stamp::of_metadata(&md) => {}
        Ok(_) => {
            let msg = "the file changed while it was being converted; left as it is";
            return (Outcome::Failed(msg.into()), original);
        }
        Err(e) => {
            let msg = format!("cannot stat before renaming: {e}");
            return (Outcome::Failed(msg), original);
        }
    }
    if let Err(e) = sys::renameat2(&temp.dir, &temp.name, &temp.dir, &name, 0) {
        let msg = format!("cannot rename into place: {e}");
        return (Outcome::Failed(msg), original);
    }
    temp.armed = false;
    let before = md.len();
    (Outcome::Converted { before, after, bom }, original)
}

/// A worker's pending conversions: their data is made durable with one
/// `syncfs` per filesystem, then they are renamed into place. A run killed
/// before the rename leaves only temporary files, which the next run
/// removes; a rename never exposes data that is not on disk.
///
/// The replaced originals are closed by `closer`'s threads: the last close
/// frees the blocks, which on some filesystems (ext4 mounted with
/// `discard`) costs a millisecond or more per file, and is better done
/// several at a time, off the converting thread.
pub struct Batch {
    closer: SyncSender<File>,
    items: Vec<(usize, Pending)>,
    bytes: u64,
    /// One directory per filesystem renamed into, for the final sync.
    renamed: Vec<(u64, Arc<File>)>,
}

/// A batch is flushed at this many files or bytes, whichever comes first.
pub const BATCH_BYTES: u64 = 64 << 20;

impl Batch {
    pub fn new(closer: SyncSender<File>) -> Self {
        Batch {
            closer,
            items: Vec::new(),
            bytes: 0,
            renamed: Vec::new(),
        }
    }

    pub fn push(&mut self, id: usize, p: Pending) {
        self.bytes += p.after;
        self.items.push((id, p));
    }

    pub fn is_full(&self, max_files: usize) -> bool {
        self.items.len() >= max_files || self.bytes >= BATCH_BYTES
    }

    fn sync_each_fs<'a>(dirs: impl Iterator<Item = &'a Arc<File>>) -> io::Result<()> {
        let mut seen: Vec<u64> = Vec::new();
        for d in dirs {
            let dev = d.metadata()?.dev();
            if !seen.contains(&dev) {
                seen.push(dev);
                sys::syncfs(d)?;
            }
        }
        Ok(())
    }

    /// Make the pending data durable, rename each file into place, hand
    /// each outcome to `done`.
    pub fn flush(&mut self, done: &mut dyn FnMut(usize, Outcome)) {
        let items = std::mem::take(&mut self.items);
        self.bytes = 0;
        if let Err(e) = Self::sync_each_fs(items.iter().map(|(_, p)| p.dir())) {
            for (id, _) in items {
                done(
                    id,
                    Outcome::Failed(format!("cannot sync the filesystem: {e}")),
                );
            }
            return;
        }
        for (id, p) in items {
            let dir = Arc::clone(p.dir());
            let (outcome, original) = commit(p);
            // With no closer left, the send fails and drops it here.
            let _ = self.closer.send(original);
            if matches!(outcome, Outcome::Converted { .. }) {
                if let Ok(md) = dir.metadata() {
                    if !self.renamed.iter().any(|(dev, _)| *dev == md.dev()) {
                        self.renamed.push((md.dev(), dir));
                    }
                }
            }
            done(id, outcome);
        }
    }

    /// After the last flush: make the renames durable.
    pub fn finish(&mut self) -> io::Result<()> {
        Self::sync_each_fs(self.renamed.iter().map(|(_, d)| d))
    }
}

/// How many of the names the walk found for `entry`'s inode still name
/// the inode `md` describes.
fn names_inside(dirs: &Dirs, entry: &Entry, md: &Metadata) -> u64 {
    let names = std::iter::once((entry.dir, &entry.name))
        .chain(entry.links.iter().map(|l| (l.dir, &l.name)));
    let mut inside = 0;
    for (d, name) in names {
        let Ok(dir) = dirs.open(d) else { continue };
        match crate::walk::stat_at(&dir, name) {
            Ok(st) if st.st_dev == md.dev() && st.st_ino == md.ino() => inside += 1,
            _ => {}
        }
    }
    inside
}

/// The in-place rewrite under a journal, for files that must keep their
/// inode.
///
/// Only a file all of whose names are in the named trees is rewritten:
/// the rewrite changes the inode under every name, and a name elsewhere
/// (a tree's owner may give any file they may link a name in their tree,
/// and with fs.protected_hardlinks off, root's files) would be a change
/// outside the tree. The names are counted after the `fstat` that gives
/// the link count, and a link or unlink meanwhile moves the ctime that
/// the check before writing compares.
fn in_place(job: &Job, dirs: &Dirs, dir: &File, entry: &Entry, bufs: &mut Buffers) -> Outcome {
    let file = match open_regular(dir, &entry.name, !job.dry_run) {
        Ok(f) => f,
        Err(outcome) => return outcome,
    };
    if !job.dry_run {
        if let Err(e) = sys::lock_exclusive(&file) {
            return Outcome::Failed(format!("cannot lock: {e}"));
        }
    }
    let md = match file.metadata() {
        Ok(md) if md.is_file() => md,
        Ok(md) => return Outcome::Skipped(Reason::Special(special_kind(md.mode()))),
        Err(e) => return Outcome::Failed(format!("cannot stat: {e}")),
    };
    let inside = names_inside(dirs, entry, &md);
    if inside < md.nlink() {
        return Outcome::Skipped(Reason::LinkedOutside {
            names: md.nlink(),
            inside,
        });
    }
    // Writing the file back with its times needs ownership (or root):
    // futimens refuses anyone else, and roll-back would need it too.
    let euid = nix::unistd::geteuid().as_raw();
    if !job.dry_run && euid != 0 && euid != md.uid() {
        return Outcome::Skipped(Reason::PermissionDenied(
            "someone else's file: its owner and times cannot be kept".into(),
        ));
    }
    let src = Region::upto(&file, md.len());
    let bom = match transcode::precheck(job.direction, job.include_scripts, src, bufs) {
        Ok(bom) => bom,
        Err(stop) => return skip_or_fail(stop, "cannot read"),
    };
    // Classify the whole file before writing anything.
    let after = match transcode::convert(job.direction, src, &mut Count(0), bufs) {
        Ok(n) => n,
        Err(stop) => return skip_or_fail(stop, "cannot read"),
    };
    if job.dry_run {
        return Outcome::WouldConvert {
            before: md.len(),
            after,
            bom,
        };
    }
    let xattrs = match sys::xattr::all(file.as_fd()) {
        Ok(x) => x,
        Err(e) => return Outcome::Failed(format!("cannot read xattrs: {e}")),
    };
    let journal = match UndoJournal::begin(dir, entry.key, &entry.name, &file) {
        Ok(j) => j,
        Err(e) if is_denied(&e) => {
            return Outcome::Skipped(Reason::PermissionDenied(
                "cannot create a journal in its directory".into(),
            ))
        }
        Err(e) => return Outcome::Failed(format!("cannot write the journal: {e}")),
    };
    match file.metadata() {
        // The one change check (`io::Stamp`, as at commit time): size,
        // times (a link or unlink changes ctime), inode and device.
        Ok(now) if Stamp::of_metadata(&now) == Stamp::of_metadata(&md) => {}
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
        sys::xattr::set_all(file.as_fd(), &xattrs).map_err(|e| e.to_string())?;
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
                bom,
            },
            Err(e) => Outcome::Failed(format!(
                "converted, but its journal could not be removed: {e}"
            )),
        },
        Err(msg) => match journal.roll_back(&file) {
            Ok(()) => {
                // Put back what the writes may have cleared; best effort,
                // the content and times are back already.
                let _ = sys::xattr::set_all(file.as_fd(), &xattrs);
                let _ = file.set_permissions(Permissions::from_mode(md.mode() & 0o7777));
                let _ = times_of(&md).and_then(|t| file.set_times(t));
                let _ = journal.finish();
                Outcome::Failed(format!("{msg}; rolled back"))
            }
            Err(e) => Outcome::Failed(format!(
                "{msg}; roll-back failed ({e}): the journal {} in its directory holds the original and the next run restores it",
                undo::name_for(entry.key).to_string_lossy()
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The walk's view of `name` in `dir`: `dir` a named root, or (with
    /// `sub`) its subdirectory.
    fn entry(dir: &std::path::Path, sub: Option<&str>, name: &str) -> (Dirs, Entry) {
        let mut dirs = Dirs::default();
        let (root, _, _) = dirs.add_root(dir.to_path_buf(), false).unwrap();
        let (d, path) = match sub {
            None => (root, dir.to_path_buf()),
            Some(s) => {
                let p = dir.join(s);
                let m = std::fs::symlink_metadata(&p).unwrap();
                (dirs.add(root, s.into(), (m.dev(), m.ino())), p)
            }
        };
        let e = Entry {
            path: path.join(name),
            dir: d,
            root,
            name: name.into(),
            size: 0,
            key: 1,
            links: Vec::new(),
        };
        (dirs, e)
    }

    const JOB: Job = Job {
        direction: Direction::Encode,
        dry_run: false,
        include_scripts: false,
        own: Vec::new(),
    };

    /// Flush a batch holding one pending file; its outcome.
    fn flush(step: Step) -> Outcome {
        let Step::Pending(p) = step else {
            panic!("expected a pending conversion")
        };
        let (tx, _rx) = std::sync::mpsc::sync_channel(4);
        let mut batch = Batch::new(tx);
        batch.push(0, *p);
        let mut out = None;
        batch.flush(&mut |_, o| out = Some(o));
        batch.finish().unwrap();
        out.unwrap()
    }

    #[test]
    fn a_file_changed_during_its_conversion_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), "before\n").unwrap();
        let (dirs, e) = entry(d.path(), None, "f");
        let step = process(&JOB, &dirs, &e, &mut Buffers::default());
        // Someone writes to the file between conversion and rename.
        std::fs::write(d.path().join("f"), "changed\n").unwrap();
        let outcome = flush(step);
        assert!(
            matches!(outcome, Outcome::Failed(ref m) if m.contains("changed")),
            "{outcome:?}"
        );
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"changed\n");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_replaced_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/f"), "text\n").unwrap();
        let (dirs, e) = entry(d.path(), Some("sub"), "f");
        // The walked directory is swapped for a symlink to another one.
        std::fs::rename(d.path().join("sub"), d.path().join("old")).unwrap();
        std::fs::create_dir(d.path().join("elsewhere")).unwrap();
        std::fs::write(d.path().join("elsewhere/f"), "text\n").unwrap();
        std::os::unix::fs::symlink("elsewhere", d.path().join("sub")).unwrap();
        let step = process(&JOB, &dirs, &e, &mut Buffers::default());
        assert!(matches!(step, Step::Done(Outcome::Failed(_))));
        assert_eq!(
            std::fs::read(d.path().join("elsewhere/f")).unwrap(),
            b"text\n"
        );
    }

    #[test]
    fn converts_and_keeps_mode_and_times() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, "Grüße\n").unwrap();
        std::fs::set_permissions(&p, Permissions::from_mode(0o640)).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000_000, 5);
        File::open(&p)
            .unwrap()
            .set_times(FileTimes::new().set_modified(t).set_accessed(t))
            .unwrap();
        let (dirs, e) = entry(d.path(), None, "f");
        let step = process(&JOB, &dirs, &e, &mut Buffers::default());
        let outcome = flush(step);
        let want = Outcome::Converted {
            before: 8,
            after: 16,
            bom: false,
        };
        assert_eq!(outcome, want);
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!(md.modified().unwrap(), t);
        assert_eq!(md.accessed().unwrap(), t);
    }
}
