//! FUSE passthrough (`FOPEN_PASSTHROUGH`, kernel 6.9+) for raw files: the
//! kernel reads such a file straight from BACKING — `read`, `splice`,
//! `mmap` — without a round trip through the daemon. This module decides,
//! for each open, whether it is served that way, and keeps the kernel's
//! backing-file ids. It knows nothing of the view; `mod.rs` asks it at
//! every open, create and release.
//!
//! **What is served by the kernel, and why only that.** The mount keeps
//! promises about *writes* (docs/behaviour.md, "The mount") that the
//! daemon can only keep by seeing every write: a raw file must never gain the magic number at offset 0 (the
//! write fails with EILSEQ), an empty file takes the encoding of its first
//! write (text becomes corrected), and a file whose content W cannot store
//! turns raw. A passthrough write reaches BACKING without the daemon, so
//! none of these could hold. Reads change nothing, so:
//!
//! * An open **for reading only** of a file that is raw at the open, with
//!   at least `MIN_SIZE` (128 KiB) bytes, is served by the kernel. A
//!   corrected file never is (the kernel would show its disk bytes, not
//!   the view). Smaller files stay with the daemon: measured warm, `cat`
//!   of 1000 16 KiB files took 1.5× longer through passthrough (two ioctls
//!   per open and close, and reads through two files) than from the page
//!   cache the daemon's path keeps across opens, while at 256 KiB and up
//!   both were even and at 1 GiB passthrough was 2–3× faster (and caches
//!   the file once, not twice). An empty file, whose encoding a first
//!   write still decides, is never a candidate; nor, mostly, are the small
//!   files a writer is likely to open while they are being read.
//! * O_DIRECT reads through passthrough go to BACKING as O_DIRECT reads,
//!   with BACKING's alignment rules (ext4: EINVAL when unaligned), as
//!   natively; the daemon's path served them unaligned.
//! * An open **for writing** is never served by the kernel. The cases that
//!   look safe are not: an O_APPEND open of a raw file of eight bytes or
//!   more writes only past the magic number's place, but fcntl(F_SETFL)
//!   clears O_APPEND without a request reaching the daemon, after which
//!   pwrite at offset 0 goes straight to BACKING; a truncation to 0 by
//!   another handle (which the daemon sees) would leave an empty file whose
//!   first write the daemon never sees, so its encoding would not be
//!   decided; and the raw files written most (databases, `.git` objects,
//!   images being edited) write their headers at offset 0. Writes are also
//!   where passthrough gains least here: a raw write through the daemon is
//!   one pwrite, measured at or below the peers (docs/performance.md).
//! * The kernel does not mix modes on one inode: while one open of a file
//!   is in passthrough, every other open of it must be too (else the open
//!   fails with EIO in the kernel), and while a daemon-served open exists,
//!   a passthrough open fails. So the daemon counts, per inode, the open
//!   handles of each kind. A read-only open of a file that daemon-served
//!   handles have open is served by the daemon too. An open **for writing
//!   of a file open in passthrough is refused with ETXTBSY** (as Linux
//!   refuses to write a running program), with a warning naming the file:
//!   serving it through the kernel would let its writes bypass the rules
//!   above, and serving it through the daemon is what the kernel forbids.
//!   `-o passthrough=off` serves everything through the daemon, so such
//!   writers succeed. Because `tail -f log` beside a writer is ordinary
//!   use, that refusal is acceptable only where no writer can exist: the
//!   default (`options::Options::passthrough` None) is on for a read-only
//!   mount (`-o ro` or a read-only BACKING) and off for a read-write one,
//!   where `-o passthrough=on` asks for it with this trade-off. Truncation (setattr) still goes through the daemon
//!   and is allowed: a raw file stays raw, and an emptied one cannot be
//!   written until its passthrough readers close.
//! * A reader's close reaches the daemon after `close` has returned (the
//!   kernel sends RELEASE in the background), so in `cat f; echo >> f` the
//!   writer's open may come first. A writer therefore waits, up to
//!   `RELEASE_WAIT`, for the passthrough handles of its file to be
//!   released before it is refused: a refusal means a reader is really
//!   still there.
//! * A file changed in BACKING into a corrected file while it is open
//!   through passthrough cannot be opened again until those readers close
//!   (EBUSY, logged): the kernel would serve the new open passthrough too,
//!   showing disk bytes instead of the view.
//! * Attributes stay the daemon's: getattr reports the backing file's
//!   stat as before (passthrough reads only invalidate the kernel's atime).
//!
//! The kernel keeps one backing file per inode while it is open in
//! passthrough: all passthrough opens of an inode must name the same
//! backing id, and the id must live until the kernel has attached it. So
//! the id (`BackingId`, closed on drop) is kept here per inode, shared by
//! its passthrough handles, and dropped at the last one's release.
//!
//! **Availability.** The kernel must offer `FUSE_PASSTHROUGH` at init and
//! the daemon must hold CAP_SYS_ADMIN (root) to register backing files;
//! BACKING's filesystem may refuse (a FUSE filesystem stacked too deep,
//! one without `read_iter`). The first refusal turns passthrough off for
//! the mount with one log line; every open then goes through the daemon
//! as before. The stacking depth asked of the kernel is one more than
//! BACKING's (overlayfs: 2, else 1), so a plain BACKING still lets this
//! mount be a lower layer of an overlay.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::{BackingId, InitFlags, KernelConfig};
use parking_lot::{Condvar, Mutex};

use super::error::{Errno, Result};

/// How one open is served.
pub(super) enum Mode {
    /// By the daemon (reads and writes are requests).
    Daemon,
    /// By the kernel, through this backing file.
    Kernel(Arc<BackingId>),
}

/// What an open asks for, as the caller found the file.
pub(super) struct Ask<'a> {
    pub ino: u64,
    pub fh: u64,
    /// Open for writing.
    pub write: bool,
    /// The open descriptor (read-only when `write` is false).
    pub file: BorrowedFd<'a>,
    /// A name for the log.
    pub name: &'a dyn Fn() -> String,
}

/// The opens of one inode.
#[derive(Default)]
struct Opens {
    /// Handles served by the kernel (all through `id`).
    kernel: usize,
    /// Handles served by the daemon.
    daemon: usize,
    /// Set while `kernel > 0`.
    id: Option<Arc<BackingId>>,
}

#[derive(Default)]
struct Table {
    by_ino: HashMap<u64, Opens>,
    /// fh → (ino, served by the kernel).
    by_fh: HashMap<u64, (u64, bool)>,
}

/// The mount's passthrough state (shared by every worker).
pub(super) struct Passthrough {
    /// Wanted (`-o passthrough`, by default on read-only mounts only) and
    /// not refused so far.
    on: AtomicBool,
    /// `-o passthrough=off` was given (for the log line).
    asked_off: bool,
    /// The stacking depth to ask the kernel for (1 + BACKING's).
    depth: u32,
    table: Mutex<Table>,
    /// Signalled when an inode's last passthrough handle is released.
    released: Condvar,
}

/// How long a writer waits for passthrough readers' releases in flight.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Passthrough {
    /// `wanted`: `-o passthrough=on|off`, None for `auto` (on when the
    /// mount is read-only: `read_only` says whether it is); `backing` is
    /// BACKING's root.
    pub(super) fn new(
        wanted: Option<bool>,
        read_only: bool,
        backing: BorrowedFd<'_>,
    ) -> Passthrough {
        use nix::sys::statfs::{fstatfs, OVERLAYFS_SUPER_MAGIC};
        let stacked = fstatfs(backing).is_ok_and(|s| s.filesystem_type() == OVERLAYFS_SUPER_MAGIC);
        Passthrough {
            on: AtomicBool::new(wanted.unwrap_or(read_only)),
            asked_off: wanted == Some(false),
            depth: if stacked { 2 } else { 1 },
            table: Mutex::new(Table::default()),
            released: Condvar::new(),
        }
    }

    /// Asks the kernel for passthrough at init (when wanted).
    pub(super) fn init(&self, config: &mut KernelConfig) {
        if !self.on.load(Ordering::Relaxed) {
            let why = if self.asked_off {
                "-o passthrough=off"
            } else {
                "the default on a read-write mount; -o passthrough=on asks for it"
            };
            log::info!("passthrough off ({why}): every read goes through the daemon");
            return;
        }
        if !nix::unistd::geteuid().is_root() {
            // Registering backing files takes CAP_SYS_ADMIN.
            self.off("the daemon does not run as root");
            return;
        }
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
            self.off(&format!(
                "the kernel lacks {missing:?} (Linux 6.9 or newer has it)"
            ));
            return;
        }
        if let Err(max) = config.set_max_stack_depth(self.depth) {
            self.off(&format!(
                "BACKING is stacked deeper than the kernel allows ({max})"
            ));
            return;
        }
        log::info!(
            "passthrough on: raw files of {} KiB or more opened for reading only are read \
             by the kernel directly",
            MIN_SIZE >> 10
        );
    }

    /// Turns passthrough off for the mount, saying why, once.
    fn off(&self, why: &str) {
        if self.on.swap(false, Ordering::Relaxed) {
            log::warn!(
                "passthrough unavailable: {why}; raw files are read through the daemon \
                 (-o passthrough=off silences this)"
            );
        }
    }

    /// Decides how the open `ask` (a new handle) is served, and records it
    /// until `release`. `open_backing` registers a descriptor with the
    /// kernel (the reply's `open_backing`). On error the caller releases
    /// the handle and answers the errno.
    pub(super) fn open(
        &self,
        ask: &Ask<'_>,
        open_backing: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<BackingId>,
    ) -> Result<Mode> {
        let mut t = self.table.lock();
        if ask.write {
            self.wait_for_release(&mut t, ask.ino);
        }
        let opens = t.by_ino.entry(ask.ino).or_default();
        if let Some(id) = opens.id.clone() {
            // The kernel allows only passthrough opens of this inode now.
            if ask.write {
                let name = (ask.name)();
                crate::ratelog::warn("passthrough-busy", &name, || {
                    format!(
                        "{name}: open for writing refused (ETXTBSY): the file is open for \
                         reading through passthrough, whose readers the daemon cannot keep \
                         in step with a writer; retry when they close, or mount with -o \
                         passthrough=off"
                    )
                });
                return Err(Errno::ETXTBSY);
            }
            if raw_size(ask.file, 0).is_none() {
                let name = (ask.name)();
                crate::ratelog::warn("passthrough-busy", &name, || {
                    format!(
                        "{name}: open refused (EBUSY): the file became corrected in BACKING \
                         while open for reading through passthrough; retry when those \
                         readers close"
                    )
                });
                return Err(Errno::EBUSY);
            }
            opens.kernel += 1;
            t.by_fh.insert(ask.fh, (ask.ino, true));
            return Ok(Mode::Kernel(id));
        }
        if !ask.write
            && opens.daemon == 0
            && self.on.load(Ordering::Relaxed)
            && raw_size(ask.file, MIN_SIZE).is_some()
        {
            match open_backing(ask.file) {
                Ok(id) => {
                    let id = Arc::new(id);
                    opens.id = Some(id.clone());
                    opens.kernel = 1;
                    t.by_fh.insert(ask.fh, (ask.ino, true));
                    return Ok(Mode::Kernel(id));
                }
                Err(e) => self.off(&format!(
                    "registering {} with the kernel failed ({e}; the daemon needs root, \
                     and BACKING's filesystem must allow it)",
                    (ask.name)()
                )),
            }
        }
        opens.daemon += 1;
        t.by_fh.insert(ask.fh, (ask.ino, false));
        Ok(Mode::Daemon)
    }

    /// Records a handle the daemon serves (a create). Refused (ETXTBSY) when
    /// the inode is open in passthrough: the kernel would fail the open.
    pub(super) fn daemon_handle(&self, ino: u64, fh: u64) -> Result<()> {
        let mut t = self.table.lock();
        self.wait_for_release(&mut t, ino);
        let opens = t.by_ino.entry(ino).or_default();
        if opens.kernel > 0 {
            return Err(Errno::ETXTBSY);
        }
        opens.daemon += 1;
        t.by_fh.insert(fh, (ino, false));
        Ok(())
    }

    /// Waits (at most `RELEASE_WAIT`) until `ino` has no passthrough
    /// handle, for releases the kernel has sent but no worker has served.
    fn wait_for_release(&self, t: &mut parking_lot::MutexGuard<'_, Table>, ino: u64) {
        let end = std::time::Instant::now() + RELEASE_WAIT;
        while t.by_ino.get(&ino).is_some_and(|o| o.kernel > 0) {
            if self.released.wait_until(t, end).timed_out() {
                return;
            }
        }
    }

    /// Forgets handle `fh`; the last passthrough handle of an inode drops
    /// its backing id (the kernel closes its backing file).
    pub(super) fn release(&self, fh: u64) {
        let mut t = self.table.lock();
        let Some((ino, kernel)) = t.by_fh.remove(&fh) else {
            return;
        };
        let Some(opens) = t.by_ino.get_mut(&ino) else {
            return;
        };
        if kernel {
            opens.kernel = opens.kernel.saturating_sub(1);
            if opens.kernel == 0 {
                opens.id = None;
                self.released.notify_all();
            }
        } else {
            opens.daemon = opens.daemon.saturating_sub(1);
        }
        if opens.kernel == 0 && opens.daemon == 0 {
            t.by_ino.remove(&ino);
        }
    }
}

/// Files smaller than this are read through the daemon (module doc).
const MIN_SIZE: u64 = 128 << 10;

/// The size of the file behind `fd` if it is not corrected now and holds at
/// least `min` bytes (None otherwise, or when it cannot be told; the head
/// is read only when the size is enough).
fn raw_size(fd: BorrowedFd<'_>, min: u64) -> Option<u64> {
    let st = super::sys::fstat(fd.as_fd()).ok()?;
    let size = u64::try_from(st.st_size).ok().filter(|&n| n >= min)?;
    if size < cutf8::MAGIC.len() as u64 {
        return Some(size);
    }
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    match super::content::has_magic(&file) {
        Ok(false) => Some(size),
        _ => None,
    }
}
