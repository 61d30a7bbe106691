//! FUSE passthrough (`FOPEN_PASSTHROUGH`, kernel 6.9+) for raw files: the
//! kernel reads such a file straight from BACKING — `read`, `splice`,
//! `mmap` — without a round trip through the daemon. This module decides,
//! for each open, whether it is served that way, and keeps the kernel's
//! backing-file ids. It knows nothing of the view; `mod.rs` asks it at
//! every open, create and release.
//!
//! **What the kernel serves, and what still reaches the daemon.** The
//! mount keeps promises about *writes* (docs/behaviour.md, "The mount")
//! that the daemon can only keep by seeing every write: a raw file never
//! gains the magic number at offset 0 (the write fails with EILSEQ), an
//! empty file takes the encoding of its first write (text becomes
//! corrected), and a file whose content W cannot store turns raw. Reads
//! change nothing. The kernel's rules for one inode: while any open of it
//! is in passthrough mode, every other open must be too (else the open
//! fails with EIO), and while a page-cached open served by the daemon
//! exists, a passthrough open fails. Within passthrough mode, an open
//! answered with `FOPEN_DIRECT_IO` as well has its reads and writes sent
//! to the daemon as requests (direct I/O overrides passthrough for
//! `read`, `write` and `splice`); only its `mmap` maps the backing file.
//! So:
//!
//! * A **reader** of a file that is raw at the open, with at least
//!   `MIN_SIZE` (128 KiB) bytes, is served in passthrough mode: its reads
//!   and mappings go straight to BACKING.
//! * A **writer** of a file that some open has in passthrough mode joins
//!   that mode with `FOPEN_DIRECT_IO`: its reads, writes, `splice`,
//!   `copy_file_range`, `fallocate` and truncation are requests, so every
//!   rule above holds for it as for any writer — including after
//!   fcntl(F_SETFL) clears O_APPEND, which no request reports. Readers see
//!   its writes at once (the daemon writes the backing file whose page
//!   cache they read), so `tail -f` beside an appender, or a reader beside
//!   a database or a disk image, works, and readers that open later join
//!   passthrough too. A writer with no passthrough handle beside it is the
//!   daemon's, with the kernel's page cache: as a direct-I/O handle, each
//!   of its reads would be a request, measured 11× slower than the page
//!   cache for 4 KiB random reads (docs/performance.md). So a reader that
//!   opens a file already open for writing is served by the daemon.
//! * Smaller files stay with the daemon and its page cache: measured
//!   warm, `cat` of 1000 16 KiB files took 1.5× longer through passthrough
//!   (two ioctls per open and close, and reads through two files) than
//!   from the page cache the daemon's path keeps across opens, while at
//!   256 KiB and up both were even and at 1 GiB passthrough was 2–3×
//!   faster (and caches the file once, not twice). A file opened while it
//!   was small (or empty, or corrected) keeps its page-cached handles as
//!   it grows, and the kernel forbids passthrough beside them: later opens
//!   are served by the daemon until those handles close.
//! * A corrected file is never in passthrough mode (the kernel would show
//!   its disk bytes, not the view). An open of a file that became
//!   corrected in BACKING while other opens have it in passthrough mode
//!   fails with EBUSY (logged) until those close.
//! * **An empty file open in passthrough mode stays raw** at its first
//!   write: its open handles see its bytes, and a corrected file cannot
//!   be in that mode. This arises when a file held open in passthrough
//!   mode (a `tail -f`, a writer's own handle) is emptied by truncation or
//!   O_TRUNC while open; the rule that the first write decides holds for
//!   every file with no such handle. A reader's close reaches the daemon
//!   after `close` has returned (the kernel sends RELEASE in the
//!   background), so in `cat f; : > f; echo text >> f` the writer's open
//!   may come before the reader's release: an open for writing of an
//!   empty file waits, up to `RELEASE_WAIT`, for passthrough handles of
//!   it to be released, so only a handle really still open keeps it raw.
//! * **A writer's shared writable mapping writes BACKING directly.** The
//!   kernel maps the backing file for any mmap of a passthrough-mode
//!   handle and asks the daemon nothing, so it can neither be refused
//!   (the kernel's ENODEV is for handles not in passthrough mode, which
//!   the kernel forbids here) nor checked. The alternative, refusing every
//!   writer while a reader is in passthrough mode (ETXTBSY), broke
//!   `tail -f` beside an appender; serving writers without passthrough
//!   forbids passthrough for every reader. Allowed, the mapping is
//!   coherent with the daemon's writes and with readers, at native speed,
//!   and the file stays raw; the one rule it can break is the magic
//!   number: eight bytes written through a mapping at offset 0 of a raw
//!   file of 128 KiB or more make it a corrected file from its next open,
//!   as the same bytes written in BACKING directly would, with nothing
//!   lost on disk. The close of such a writer checks the file's head and
//!   logs it, naming the file (`closing_writer`). A mapping cannot write
//!   past the end of the file, so it cannot fill an empty one.
//! * O_DIRECT reads through passthrough go to BACKING as O_DIRECT reads,
//!   with BACKING's alignment rules (ext4: EINVAL when unaligned), as
//!   natively; the daemon's path served them unaligned.
//! * Attributes stay the daemon's: getattr reports the backing file's
//!   stat as before; a write through the daemon updates the kernel's size
//!   and drops its cached times; passthrough reads only invalidate the
//!   kernel's atime.
//! * `-o passthrough=off` serves every open through the daemon, with its
//!   page cache.
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
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::{BackingId, InitFlags, KernelConfig};
use parking_lot::{Condvar, Mutex};

use crate::fs::frontend::error::{Errno, Result};

/// How one open is served.
pub(in crate::fs) enum Mode {
    /// By the daemon (reads and writes are requests).
    Daemon,
    /// In the kernel's passthrough mode, through this backing file: a
    /// reader's reads and mappings go straight to it; a writer (`writer`)
    /// is answered with `FOPEN_DIRECT_IO` too, so its reads and writes
    /// still reach the daemon and only its mappings are the backing
    /// file's.
    Kernel { id: Arc<BackingId>, writer: bool },
}

/// What an open asks for, as the caller found the file.
pub(in crate::fs) struct Ask<'a> {
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
pub(in crate::fs) struct Passthrough {
    /// Wanted (`-o passthrough`, on by default) and not refused so far.
    on: AtomicBool,
    /// The stacking depth to ask the kernel for (1 + BACKING's).
    depth: u32,
    table: Mutex<Table>,
    /// Signalled when an inode's last passthrough handle is released.
    released: Condvar,
}

/// How long a writer waits for passthrough readers' releases in flight.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Passthrough {
    /// `wanted`: `-o passthrough=on|off`, None for `auto` (on); `backing`
    /// is BACKING's root.
    pub(in crate::fs) fn new(wanted: Option<bool>, backing: BorrowedFd<'_>) -> Passthrough {
        use nix::sys::statfs::{fstatfs, OVERLAYFS_SUPER_MAGIC};
        let stacked = fstatfs(backing).is_ok_and(|s| s.filesystem_type() == OVERLAYFS_SUPER_MAGIC);
        Passthrough {
            on: AtomicBool::new(wanted.unwrap_or(true)),
            depth: if stacked { 2 } else { 1 },
            table: Mutex::new(Table::default()),
            released: Condvar::new(),
        }
    }

    /// Asks the kernel for passthrough at init (when wanted).
    pub(in crate::fs) fn init(&self, config: &mut KernelConfig) {
        if !self.on.load(Ordering::Relaxed) {
            log::info!("passthrough off (-o passthrough=off): every read goes through the daemon");
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
            "passthrough on: raw files of {} KiB or more are read by the kernel directly; \
             writes still reach the daemon",
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
    pub(in crate::fs) fn open(
        &self,
        ask: &Ask<'_>,
        open_backing: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<BackingId>,
    ) -> Result<Mode> {
        let size = size_of(ask.file);
        let mut t = self.table.lock();
        if ask.write && size == Some(0) {
            // An empty file's first write decides its encoding, unless the
            // file is open in passthrough then (module doc): readers that
            // have just closed do not count.
            self.wait_for_release(&mut t, ask.ino);
        }
        let opens = t.by_ino.entry(ask.ino).or_default();
        if let Some(id) = opens.id.clone() {
            // The kernel allows only passthrough opens of this inode now.
            if !is_raw(ask.file, size) {
                let name = (ask.name)();
                crate::ratelog::warn("passthrough-busy", &name, || {
                    format!(
                        "{name}: open refused (EBUSY): the file became corrected in BACKING \
                         while open through passthrough; retry when those handles close"
                    )
                });
                return Err(Errno::EBUSY);
            }
            opens.kernel += 1;
            t.by_fh.insert(ask.fh, (ask.ino, true));
            return Ok(Mode::Kernel {
                id,
                writer: ask.write,
            });
        }
        if !ask.write
            && opens.daemon == 0
            && self.on.load(Ordering::Relaxed)
            && size.is_some_and(|n| n >= MIN_SIZE)
            && is_raw(ask.file, size)
        {
            match open_backing(ask.file) {
                Ok(id) => {
                    let id = Arc::new(id);
                    opens.id = Some(id.clone());
                    opens.kernel = 1;
                    t.by_fh.insert(ask.fh, (ask.ino, true));
                    return Ok(Mode::Kernel {
                        id,
                        writer: ask.write,
                    });
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

    /// Whether inode `ino` is open in passthrough now (a write that would
    /// make it corrected keeps it raw instead: module doc).
    pub(in crate::fs) fn in_kernel(&self, ino: u64) -> bool {
        self.table
            .lock()
            .by_ino
            .get(&ino)
            .is_some_and(|o| o.kernel > 0)
    }

    /// At the close of writer `fh`: if it is in passthrough mode and the
    /// file now begins with the magic number (written through its shared
    /// mapping, which the daemon does not see: module doc), says so in the
    /// log, naming the file.
    pub(in crate::fs) fn closing_writer(
        &self,
        fh: u64,
        file: BorrowedFd<'_>,
        name: &dyn Fn() -> String,
    ) {
        if !self.table.lock().by_fh.get(&fh).is_some_and(|&(_, k)| k) {
            return;
        }
        let size = size_of(file);
        if size.is_some_and(|n| n >= cutf8::MAGIC.len() as u64) && !is_raw(file, size) {
            let name = name();
            crate::ratelog::warn("passthrough-magic", &name, || {
                format!(
                    "{name}: now begins with the magic number, written through a shared \
                     mapping (which reaches BACKING without the daemon) or in BACKING \
                     directly; from its next open it reads as a corrected file"
                )
            });
        }
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

    /// Whether handle `fh` is in the kernel's passthrough mode (a READ
    /// that comes to the daemon through it is then a writer's direct I/O).
    pub(in crate::fs) fn by_kernel(&self, fh: u64) -> bool {
        self.table.lock().by_fh.get(&fh).is_some_and(|&(_, k)| k)
    }

    /// Forgets handle `fh`; the last passthrough handle of an inode drops
    /// its backing id (the kernel closes its backing file).
    pub(in crate::fs) fn release(&self, fh: u64) {
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

/// The size of the file behind `fd`, if it can be told.
fn size_of(fd: BorrowedFd<'_>) -> Option<u64> {
    let st = crate::sys::fstat(fd).ok()?;
    u64::try_from(st.st_size).ok()
}

/// Whether the file behind `fd`, of `size` bytes, is not corrected now
/// (false when it cannot be told; the head is read only when the file is
/// long enough to hold the magic number).
fn is_raw(fd: BorrowedFd<'_>, size: Option<u64>) -> bool {
    let Some(size) = size else {
        return false;
    };
    if size < cutf8::MAGIC.len() as u64 {
        return true;
    }
    let Ok(owned) = fd.try_clone_to_owned() else {
        return false;
    };
    matches!(
        crate::fs::state::content::has_magic(&std::fs::File::from(owned)),
        Ok(false)
    )
}
