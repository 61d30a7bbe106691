//! An inode's open state: what each file and directory handle attaches
//! ([`Attached`]) — its descriptor, which then serves as the inode's, and a
//! regular file's shared state (`content::OpenFile`) — let go with the last.

use super::*;

/// While alive, keeps an inode's open state: the per-file state of a
/// regular file and, for a handle, its descriptor as one the inode can be
/// reached by (see the module doc).
pub struct Attached {
    inode: Arc<Inode>,
    fd: Option<Fd>,
    state: Option<Arc<OpenFile>>,
}

impl Attached {
    /// The shared state of the regular file (None for a directory).
    pub fn state(&self) -> Option<&Arc<OpenFile>> {
        self.state.as_ref()
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let gone = {
            let mut i = self.inode.inner.lock();
            let Some(held) = i.held.as_mut() else {
                return;
            };
            if let Some(fd) = &self.fd {
                if let Some(k) = held.fds.iter().position(|f| Arc::ptr_eq(f, fd)) {
                    held.fds.swap_remove(k);
                }
            }
            held.users = held.users.saturating_sub(1);
            if held.users > 0 {
                None
            } else if held.cached.is_none() {
                i.held.take().map(|h| h.state)
            } else {
                Some(held.state.take())
            }
        };
        // The state (and its index) goes here, outside the lock.
        drop(gone);
    }
}

impl Inode {
    /// Attaches a user of the inode's open state: a handle whose descriptor
    /// is `fd` (it then also serves as the inode's), or a change made
    /// without one (`fd` None). A regular file gets its shared state.
    pub fn attach(self: &Arc<Self>, fd: Option<&Fd>) -> Attached {
        let mut i = self.inner.lock();
        let open = i.held.get_or_insert_with(Box::default);
        open.users += 1;
        if let Some(fd) = fd {
            open.fds.push(fd.clone());
        }
        if self.is_reg() && open.state.is_none() {
            open.state = Some(Arc::new(OpenFile::new()));
        }
        let state = open.state.clone();
        drop(i);
        Attached {
            inode: self.clone(),
            fd: fd.cloned(),
            state,
        }
    }

    /// The shared state of a regular file while it is open or being
    /// changed (None otherwise: then nothing is held back for it).
    pub fn open_state(&self) -> Option<Arc<OpenFile>> {
        self.inner.lock().held.as_ref()?.state.clone()
    }

    /// Whether a handle has the inode open.
    pub fn is_open(&self) -> bool {
        self.inner
            .lock()
            .held
            .as_ref()
            .is_some_and(|o| !o.fds.is_empty())
    }
}
