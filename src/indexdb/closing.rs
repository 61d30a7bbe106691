//! The hand-over between a daemon that is closing and one starting on the
//! same BACKING (`umount && mount` at once; xfstests' generic/477): a
//! daemon holds a shared `flock` on the database's `-closing` companion
//! while it has records queued and not yet committed (the writer, from a
//! batch's first record to its commit; `close`, until the last), and a
//! lookup of a node record that finds none, or one whose file is gone (a
//! new file took a deleted one's number), waits for that lock (exclusive,
//! at most [`WAIT`]) before it looks again. The old daemon may not even
//! have seen the unmount yet when the new one is asked. A file handle
//! taken through the old mount a moment before the unmount so opens
//! through the new one; a node that is really unknown costs the wait only
//! while some daemon is closing. Called by `IndexDb::close` and
//! `IndexDb::node`.

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pool::Pool;
use super::store::Pinned;

/// The longest a lookup waits for a closing daemon.
pub(super) const WAIT: Duration = Duration::from_secs(3);
/// How often it tries the lock meanwhile.
const POLL: Duration = Duration::from_millis(5);
/// The companion's suffix.
const SUFFIX: &str = "-closing";

/// Held while this daemon commits its last records.
pub(super) struct Closing {
    _file: File,
    _pin: Arc<Pinned>,
}

/// Takes the closing lock (creating the database and the lock file when
/// records are queued for a database that does not exist yet).
pub(super) fn begin(pool: &Pool) -> Option<Closing> {
    let pin = pool.pinned(true, true)?;
    let file = pin.companion(SUFFIX, true)?;
    crate::sys::lock_shared(&file).ok()?;
    Some(Closing {
        _file: file,
        _pin: pin,
    })
}

/// Waits, at most [`WAIT`], for every daemon that is closing to have
/// committed; true if one was (so a second look may find more).
pub(super) fn waited(pool: &Pool) -> bool {
    let Some(pin) = pool.pinned(false, true) else {
        return false;
    };
    let Some(file) = pin.companion(SUFFIX, false) else {
        return false;
    };
    let until = Instant::now() + WAIT;
    let mut waited = false;
    loop {
        match crate::sys::try_lock_exclusive(&file) {
            Ok(true) => return waited,
            Ok(false) if Instant::now() < until => {
                waited = true;
                std::thread::sleep(POLL);
            }
            _ => return waited,
        }
    }
}
