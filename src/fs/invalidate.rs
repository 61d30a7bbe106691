//! Tells the kernel when the daemon changed something the kernel caches
//! about an inode without a reply that carries the change: set-id bits and
//! capabilities the daemon removes itself on a write or fallocate (the
//! kernel leaves that to it, `FUSE_HANDLE_KILLPRIV_V2`), a file whose
//! class changed (raw ↔ corrected), bytes held back that could not be
//! written after all. The kernel then asks again before it answers
//! `stat` (`FUSE_NOTIFY_INVAL_INODE` with a negative offset: attributes
//! only, no page-cache work, so it never waits on the request being
//! served and may be sent from inside one).
//!
//! The notifier exists only once the session has made the FUSE handshake;
//! the daemon connects it then (`daemon`), and before that (and in unit
//! tests) there is nothing the kernel could have cached.

use std::sync::OnceLock;

/// The session's way to the kernel, once connected.
#[derive(Default)]
pub struct Invalidator {
    notifier: OnceLock<fuser::Notifier>,
}

impl Invalidator {
    /// Connects the session's notifier (once; later calls are ignored).
    pub fn connect(&self, notifier: fuser::Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// The attributes the kernel holds for `ino` are stale: it is told to
    /// drop them (and its cached ACLs) before it is sent the reply of the
    /// request that changed them.
    pub fn attributes(&self, ino: u64) {
        let Some(n) = self.notifier.get() else {
            return;
        };
        if let Err(e) = n.inval_inode(fuser::INodeNo(ino), -1, 0) {
            // The kernel may have forgotten the inode already (fuser
            // passes ENOENT as Ok); anything else means the session ends.
            log::debug!("inode {ino}: the kernel did not take an invalidation: {e}");
        }
    }
}
