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
use crate::sys::lease::{self, Lease};
use crate::walk::{is_denied, special_kind, DirId, Dirs, Lost};
use crate::{sys, trust};

/// A file someone changed, or began to open for writing, during its
/// conversion.
const CHANGED: &str = "the file changed while it was being converted; left as it is";
/// A file someone began to open while it was being renamed into place.
const OPENED: &str = "another process opened the file while it was being converted; left as \
                      it was, with what that process writes";

/// The outcome for a file whose directory cannot be had.
fn lost(l: Lost) -> Outcome {
    match l {
        Lost::Replaced => Outcome::Failed(
            "its directory was moved or replaced during the run; left as it is".into(),
        ),
        Lost::Io(e) if is_denied(&e) => {
            Outcome::Skipped(Reason::PermissionDenied("cannot open its directory".into()))
        }
        Lost::Io(e) => Outcome::Failed(format!("cannot open its directory: {e}")),
    }
}

/// Takes `kind` of lease on `file` (see [`lease`]): Ok(true) if taken,
/// Ok(false) if the filesystem grants none or this user may not take one
/// (the stamp checks alone guard the file then), the outcome if the file
/// is open elsewhere.
fn take_lease(file: &File, kind: Lease) -> Result<bool, Outcome> {
    match lease::take(file, kind) {
        Ok(()) => Ok(true),
        Err(e) if lease::unsupported(&e) => Ok(false),
        // Someone else's file, and no CAP_LEASE: such a user cannot keep
        // its owner (by rename) or times (in place) either, and the checks
        // after this one skip it before anything is written.
        Err(e) if is_denied(&e) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Err(Outcome::Failed(match kind {
            Lease::Read => "open for writing in another process; left as it is (run again \
                            once it is closed)"
                .into(),
            Lease::Write => "open in another process; a file converted in place must be \
                             open nowhere else; left as it is (run again once it is closed)"
                .into(),
        })),
        Err(e) => Err(Outcome::Failed(format!("cannot take a lease: {e}"))),
    }
}

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
        Err(l) => return Step::Done(lost(l)),
    };
    if !job.dry_run {
        if let Err(l) = dirs.still_there(entry.dir) {
            return Step::Done(lost(l));
        }
    }
    let file = match open_regular(&dir, &entry.name, false) {
        Ok(f) => f,
        Err(outcome) => return Step::Done(outcome),
    };
    // The run's own report is open for writing here: known by its inode
    // before any lease is asked for.
    match file.metadata() {
        Ok(md) if job.own.contains(&(md.dev(), md.ino())) => {
            return Step::Done(Outcome::Skipped(Reason::OwnReport))
        }
        Ok(_) => {}
        Err(e) => return Step::Done(Outcome::Failed(format!("cannot stat: {e}"))),
    }
    // The lease before the fstat whose size and times the conversion
    // stands on: a write before it shows in them, one after it breaks it.
    let leased = if job.dry_run {
        false
    } else {
        match take_lease(&file, Lease::Read) {
            Ok(l) => l,
            Err(outcome) => return Step::Done(outcome),
        }
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
    match by_rename(job, &dir, entry, (file, leased), md, bom, bufs) {
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
    /// The converted file (open only here), and whether the original holds
    /// a read lease and it a write lease ([`commit`]).
    converted: File,
    leased: bool,
    name: OsString,
    /// The directory, to check that it is still in the tree.
    dir_id: DirId,
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
    // The original, and whether it holds a read lease.
    (file, leased): (File, bool),
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
    // Nobody but root can open the temporary file (root's, 0600): the
    // write lease is granted, and from the rename on it makes anyone who
    // opens the converted file wait until [`commit`] has decided.
    let finish = finish.and_then(|()| match leased {
        true => lease::take(&tfile, Lease::Write)
            .map_err(|e| format!("cannot take a lease on the converted file: {e}")),
        false => Ok(()),
    });
    match finish {
        Ok(()) => Ok(Step::Pending(Box::new(Pending {
            temp,
            original: file,
            converted: tfile,
            leased,
            dir_id: entry.dir,
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
///
/// Why no write that returned is lost (man/cutf8.1, SECURITY, "Files
/// changed during the run"). The original X holds a read lease from before
/// the fstat that gave `md`: no one had it open for writing then, and
/// every open for writing and every truncate since waits in the kernel and
/// breaks the lease (`crate::sys::lease`). Any write needs such an open,
/// so while X's lease is whole, X holds exactly what was converted. The
/// converted file Y holds a write lease: anyone who opens it waits too.
/// X and Y then trade names (`RENAME_EXCHANGE`), and both leases are read:
///
/// * X's whole: no one opened X for writing since `md`; X, now under the
///   temporary name, is removed, and Y stays (whoever waits on Y appends
///   to the converted file, which is where their name now leads).
/// * X's broken, Y's whole: someone waits to write to X; the names are
///   traded back, Y is removed, and they append to X under its name: the
///   file is as it was plus their writes, reported failed.
/// * both broken: each waits to write to its own inode; Y stays, and X
///   keeps a name of its own beside it, reported, so nothing is lost.
///
/// What remains: an open(2) that looked the name up before the exchange
/// but reaches its lease check only after the leases were read (a few
/// instructions inside one system call, between the path lookup and the
/// open) is not seen, and its writes go to X after X is removed. Without
/// leases (a filesystem that grants none) only the stamp compared before
/// the rename guards the file, and a write between that check and the
/// rename is lost with X.
fn commit(p: Pending, dirs: &Dirs) -> (Outcome, File) {
    let Pending {
        mut temp,
        original,
        converted,
        leased,
        name,
        dir_id,
        md,
        after,
        bom,
    } = p;
    if let Err(l) = dirs.still_there(dir_id) {
        return (lost(l), original);
    }
    match sys::statat(&temp.dir, &name).map(|st| Stamp::of(&st)) {
        Ok(now) if now == Stamp::of_metadata(&md) => {}
        Ok(_) => return (Outcome::Failed(CHANGED.into()), original),
        Err(e) => {
            let msg = format!("cannot stat before renaming: {e}");
            return (Outcome::Failed(msg), original);
        }
    }
    let before = md.len();
    if !leased {
        if let Err(e) = sys::renameat2(&temp.dir, &temp.name, &temp.dir, &name, 0) {
            let msg = format!("cannot rename into place: {e}");
            return (Outcome::Failed(msg), original);
        }
        temp.armed = false;
        return (Outcome::Converted { before, after, bom }, original);
    }
    if !lease::intact(&original, Lease::Read) {
        return (Outcome::Failed(CHANGED.into()), original);
    }
    let exchange = || {
        sys::renameat2(
            &temp.dir,
            &temp.name,
            &temp.dir,
            &name,
            libc::RENAME_EXCHANGE,
        )
    };
    if let Err(e) = exchange() {
        let msg = format!("cannot rename into place: {e}");
        return (Outcome::Failed(msg), original);
    }
    // The temporary name is now the original's; the armed `temp` removes
    // it unless it is kept.
    let x_whole = lease::intact(&original, Lease::Read);
    let y_whole = lease::intact(&converted, Lease::Write);
    let outcome = if x_whole {
        Outcome::Converted { before, after, bom }
    } else if y_whole {
        match exchange() {
            Ok(()) => Outcome::Failed(OPENED.into()),
            Err(e) => {
                temp.armed = false;
                Outcome::Failed(format!(
                    "another process opened the file while it was being renamed into place, \
                     and the names could not be traded back ({e}): the original, with what \
                     that process writes, is {} in its directory",
                    temp.name.to_string_lossy()
                ))
            }
        }
    } else {
        temp.armed = false;
        let kept: OsString = format!("{}.cutf8-before", name.to_string_lossy()).into();
        let at = match sys::renameat2(
            &temp.dir,
            &temp.name,
            &temp.dir,
            &kept,
            libc::RENAME_NOREPLACE,
        ) {
            Ok(()) => kept,
            Err(_) => temp.name.clone(),
        };
        Outcome::Failed(format!(
            "other processes opened both the original and the converted file while it was \
             being renamed into place: the converted file is in place, and the original, with \
             what was written to it meanwhile, is {} in its directory; merge them and remove it",
            at.to_string_lossy()
        ))
    };
    lease::release(&original);
    lease::release(&converted);
    (outcome, original)
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
    pub fn flush(&mut self, dirs: &Dirs, done: &mut dyn FnMut(usize, Outcome)) {
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
            let (outcome, original) = commit(p, dirs);
            // Whoever waits to open it goes on now, not at the close.
            lease::release(&original);
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

/// Another process began to open a file converted in place.
const OPENED_IN_PLACE: &str = "another process opened the file while it was being converted";

/// [`At`], cut short once another process has begun to open the file:
/// the sooner the roll-back, the shorter that process waits.
struct Alone<'a, F: Fn() -> bool> {
    at: At<'a>,
    alone: &'a F,
}

impl<F: Fn() -> bool> transcode::Sink for Alone<'_, F> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !(self.alone)() {
            return Err(io::Error::other(OPENED_IN_PLACE));
        }
        self.at.put(bytes)
    }
}

/// The in-place rewrite under a journal, for files that must keep their
/// inode.
///
/// Why no write that returned is lost (man/cutf8.1, SECURITY, "Files
/// changed during the run"). The file holds a write lease from before the
/// fstat that gives `md` (`crate::sys::lease`): it was open nowhere else
/// then, and since then anyone who opens it (for reading or writing, by
/// any of its names) or truncates it waits in the kernel, and the lease
/// reads broken. Nothing writes to a file it has not opened, so while the
/// lease is whole the file holds exactly what this function wrote. It is
/// read before the first byte is written, at every buffer written, and
/// after the last: broken, the journal's copy is put back (roll-back)
/// while the other process still waits, and only then is the file closed;
/// whole at the last look, the file is converted and whoever opens it
/// next finds it so, under the same inode. Either way every write of
/// theirs lands after migrate's, on the whole file: converted, or as it
/// was, plus their appends.
///
/// What remains: the kernel lets a waiting open go on after
/// /proc/sys/fs/lease-break-time seconds (45 by default) even if the lease
/// is not given up; a conversion that takes longer than that from the
/// moment someone opens the file to the end of its roll-back (gigabytes on
/// a slow disk) writes alongside them. On a filesystem that grants no
/// leases only the stamp compared before the first write guards the file.
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
    let mut leased = false;
    if !job.dry_run {
        if let Err(e) = sys::lock_exclusive(&file) {
            return Outcome::Failed(format!("cannot lock: {e}"));
        }
        // Before the fstat the journal and the conversion stand on.
        leased = match take_lease(&file, Lease::Write) {
            Ok(l) => l,
            Err(outcome) => return outcome,
        };
    }
    // Whether no one has opened the file since the lease was granted.
    let alone = || !leased || lease::intact(&file, Lease::Write);
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
    if let Err(l) = dirs.still_there(entry.dir) {
        return lost(l);
    }
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
        Ok(now) if Stamp::of_metadata(&now) == Stamp::of_metadata(&md) && alone() => {}
        _ => {
            let _ = journal.finish();
            return Outcome::Failed(CHANGED.into());
        }
    }
    let original = Region {
        file: journal.file(),
        start: journal.start,
        end: Some(journal.start + journal.len),
    };
    let rewrite = (|| -> Result<u64, String> {
        let mut sink = Alone {
            at: At {
                file: &file,
                pos: 0,
            },
            alone: &alone,
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
        // The last look: whoever opens the file from now on waits for the
        // close and then finds it converted, under the same inode.
        if !alone() {
            return Err(OPENED_IN_PLACE.into());
        }
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
    fn flush(dirs: &Dirs, step: Step) -> Outcome {
        let Step::Pending(p) = step else {
            panic!("expected a pending conversion")
        };
        let (tx, _rx) = std::sync::mpsc::sync_channel(4);
        let mut batch = Batch::new(tx);
        batch.push(0, *p);
        let mut out = None;
        batch.flush(dirs, &mut |_, o| out = Some(o));
        batch.finish().unwrap();
        out.unwrap()
    }

    #[test]
    fn a_file_changed_during_its_conversion_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), "before\n").unwrap();
        let (dirs, e) = entry(d.path(), None, "f");
        let step = process(&JOB, &dirs, &e, &mut Buffers::default());
        // Someone writes to the file between conversion and rename: their
        // open waits on the lease until the commit has decided.
        let writer = std::thread::spawn({
            let p = d.path().join("f");
            move || std::fs::write(p, "changed\n").unwrap()
        });
        if let Step::Pending(p) = &step {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while lease::intact(&p.original, Lease::Read) {
                assert!(std::time::Instant::now() < deadline, "the open never began");
                std::thread::yield_now();
            }
        }
        let outcome = flush(&dirs, step);
        writer.join().unwrap();
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
        let outcome = flush(&dirs, step);
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
