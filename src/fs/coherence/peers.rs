//! What the mount does around a rewrite it finishes for another daemon of
//! its BACKING that died mid-rewrite (`crate::redo`'s peer watch, on a
//! thread of the journal's that serves no request): the file holds still
//! for the mount's own readers and writers while the tail is copied, and
//! afterwards nothing the mount or the kernel cached of it survives.
//!
//! * If the kernel holds the inode, the replay attaches to its open state
//!   (`inodes`' `attach`, as a change made without a handle does) and
//!   holds the content lock alone across the copy: reads and writes of
//!   its open handles, and of handles opened meanwhile, wait for it.
//! * Afterwards the offset index kept for the file (`Content::view`), the
//!   class known under its stamp (`KnownContent`) and the index cache's
//!   entry for the stamp seen before the copy are dropped (a stamp taken
//!   within the clock's granularity of the copy could match again), and
//!   the kernel drops the file's attributes and pages
//!   (`Invalidator::contents`). The watch of BACKING would not do it: it
//!   skips the events the daemon caused itself.
//! * An inode the kernel does not hold has nothing cached: the copy just
//!   runs.

use std::io;
use std::sync::Arc;

use crate::fs::coherence::invalidate::Invalidator;
use crate::fs::state::content::{IndexCache, Stamp};
use crate::fs::state::inodes::{InodeTable, Key};

/// The mount's side of a peer's replay (`crate::redo::Replaying`).
pub struct Finishing {
    pub inodes: Arc<InodeTable>,
    pub cache: Arc<IndexCache>,
    pub kernel: Arc<Invalidator>,
}

impl crate::redo::Replaying for Finishing {
    fn replaying(
        &self,
        (dev, ino): (u64, u64),
        replay: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        let Some(inode) = self.inodes.entry_of(Key { dev, ino }) else {
            return replay();
        };
        let before = inode.stat().ok().map(|st| Stamp::of(&st));
        let attached = inode.attach(None);
        let done = match attached.state() {
            Some(state) => {
                let mut content = state.content.write();
                let done = replay();
                content.view = None;
                inode.seen().lock().forget();
                if let Some(s) = &before {
                    drop(self.cache.remove(s));
                }
                done
            }
            None => replay(),
        };
        drop(attached);
        self.kernel.contents(inode.ino);
        done
    }
}
