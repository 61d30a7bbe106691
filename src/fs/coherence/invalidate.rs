//! Tells the kernel when something it caches about an inode changed
//! without a reply that carries the change:
//!
//! * [`Invalidator::attributes`]: set-id bits and capabilities the daemon
//!   removes itself on a write or fallocate (the kernel leaves that to it,
//!   `FUSE_HANDLE_KILLPRIV_V2`), a file whose class changed (raw ↔
//!   corrected), bytes held back that could not be written after all. The
//!   kernel then asks again before it answers `stat`
//!   (`FUSE_NOTIFY_INVAL_INODE` with a negative offset: attributes only,
//!   no page-cache work, so it never waits on the request being served and
//!   may be sent from inside one).
//! * [`Invalidator::pages`]: a lock granted through the mount (`locks`):
//!   the holder must read what others wrote, through BACKING or another
//!   mount, before they let go, so the kernel drops the file's attributes
//!   and every cached page, as an NFS client does when it gets a lock.
//!   Dropping pages may wait for a page that a read in progress holds,
//!   and that read needs a FUSE worker: the notice is sent by a thread of
//!   its own and waited for at most [`PAGES_WAIT`], so a worker never
//!   waits for it unbounded.
//!   [`Invalidator::pages_later`] is the same without the wait, for an
//!   append that went to the file's real end, not where the kernel put it
//!   (its pages there are wrong): the kernel drops them once it has the
//!   write's reply.
//! * The watch of BACKING (`watch`), on its own thread, for what others
//!   changed in BACKING: a name ([`Invalidator::entry`]), an inode's
//!   contents ([`Invalidator::contents`]: attributes, ACLs and pages; it
//!   may wait on a read in flight, so never from a request handler), and
//!   everything at once after lost events ([`Invalidator::everything`]).
//!
//! The notifier exists only once the session has made the FUSE handshake;
//! the daemon connects it then (`daemon`), and before that (and in unit
//! tests) there is nothing the kernel could have cached.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::fs::coherence::inflight::Reads;

/// How long a lock's reply waits for the kernel to drop a file's pages.
pub const PAGES_WAIT: Duration = Duration::from_millis(500);

/// A request to drop the kernel's pages of an inode, and where to say it
/// is done.
type DropPages = (u64, mpsc::SyncSender<()>);

/// `FUSE_NOTIFY_INC_EPOCH` (protocol 7.44, Linux 6.16): every name the
/// kernel caches is looked up again before its next use. fuser has no
/// sender for it; it carries no payload.
const NOTIFY_INC_EPOCH: i32 = 8;

/// The session's way to the kernel, once connected.
#[derive(Default)]
pub struct Invalidator {
    notifier: OnceLock<fuser::Notifier>,
    /// To the thread that drops pages (started at connect).
    pages: OnceLock<Mutex<mpsc::Sender<DropPages>>>,
    /// A duplicate of the session's `/dev/fuse` descriptor, for the
    /// notifications fuser cannot send.
    dev: OnceLock<OwnedFd>,
    /// Reads in flight, told of every invalidation (`inflight`).
    reads: Arc<Reads>,
}

impl Invalidator {
    /// Connects the session's notifier and a duplicate of its device
    /// descriptor (once; later calls are ignored) and starts the thread
    /// that drops pages.
    pub fn connect(&self, notifier: fuser::Notifier, dev: Option<OwnedFd>) {
        if self.notifier.set(notifier.clone()).is_err() {
            return;
        }
        if let Some(d) = dev {
            let _ = self.dev.set(d);
        }
        let (tx, rx) = mpsc::channel::<DropPages>();
        let reads = self.reads.clone();
        let spawned = std::thread::Builder::new()
            .name("inval-pages".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                for (ino, done) in rx {
                    reads.invalidating(ino);
                    // ENOENT (passed as Ok): the kernel holds nothing of it.
                    if let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), 0, -1) {
                        log::debug!("inode {ino}: the kernel did not drop its pages: {e}");
                    }
                    let _ = done.send(());
                }
            });
        match spawned {
            Ok(_) => {
                let _ = self.pages.set(Mutex::new(tx));
            }
            Err(e) => log::warn!(
                "cannot start the thread that drops cached pages when a lock is granted: {e}; \
                 a lock holder may read what the kernel cached before the lock"
            ),
        }
    }

    /// The attributes the kernel holds for `ino` are stale: it is told to
    /// drop them (and its cached ACLs) before it is sent the reply of the
    /// request that changed them.
    pub fn attributes(&self, ino: u64) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        self.reads.invalidating(ino);
        if let Err(e) = n.inval_inode(fuser::INodeNo(ino), -1, 0) {
            // The kernel may have forgotten the inode already (fuser
            // passes ENOENT as Ok); anything else means the session ends.
            log::debug!("inode {ino}: the kernel did not take an invalidation: {e}");
        }
    }

    /// Everything the kernel caches of `ino` (attributes and pages) is
    /// stale: it is told to drop it, and this waits for that, at most
    /// [`PAGES_WAIT`].
    pub fn pages(&self, ino: u64) {
        let Some(sender) = self.pages.get() else {
            return;
        };
        let (tx, rx) = mpsc::sync_channel(1);
        if sender.lock().send((ino, tx)).is_ok() && rx.recv_timeout(PAGES_WAIT).is_err() {
            log::debug!("inode {ino}: the kernel did not drop its pages within {PAGES_WAIT:?}");
        }
    }

    /// Like [`Invalidator::pages`], without waiting: for a request whose
    /// reply the kernel awaits holding the very pages (a write), so the
    /// kernel drops them once it has the reply.
    pub fn pages_later(&self, ino: u64) {
        let Some(sender) = self.pages.get() else {
            return;
        };
        let (tx, _rx) = mpsc::sync_channel(1);
        let _ = sender.lock().send((ino, tx));
    }

    /// The contents of `ino` changed in BACKING: the kernel drops its
    /// attributes, its ACLs and its cached pages (for a directory, its
    /// cached listing). Waits for reads in flight on the inode first
    /// (`inflight`), and the kernel may wait for them too: only from a
    /// thread that serves no request (the watch's).
    pub fn contents(&self, ino: u64) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        self.reads.settle(ino);
        self.reads.invalidating(ino);
        if let Err(e) = n.inval_inode(fuser::INodeNo(ino), 0, 0) {
            log::debug!("inode {ino}: the kernel did not drop its contents: {e}");
        }
    }

    /// The entry `name` of directory `parent` changed in BACKING (created,
    /// removed, renamed, replaced): the kernel drops the name, and the
    /// directory's attributes and cached listing.
    pub fn entry(&self, parent: u64, name: &OsStr) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        if let Err(e) = n.inval_entry(fuser::INodeNo(parent), name) {
            log::debug!("inode {parent}: the kernel did not take an entry invalidation: {e}");
        }
    }

    /// Reads in flight, as the invalidations see them.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// Every name the kernel caches is to be looked up again before its
    /// next use. False if this kernel does not know the notification (or
    /// no session is connected).
    pub fn everything(&self) -> bool {
        let Some(dev) = self.dev.get() else {
            return false;
        };
        // struct fuse_out_header { len: u32, error: i32 (the code), unique: u64 (0) }
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(&16u32.to_ne_bytes());
        h[4..8].copy_from_slice(&NOTIFY_INC_EPOCH.to_ne_bytes());
        match nix::unistd::write(dev.as_fd(), &h) {
            Ok(_) => true,
            Err(e) => {
                log::debug!("the kernel did not take FUSE_NOTIFY_INC_EPOCH: {e}");
                false
            }
        }
    }
}
