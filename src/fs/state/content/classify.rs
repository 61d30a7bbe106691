//! Learning a file's class (raw, or corrected with its view length) for a
//! stamp: the head read, the scan, one classification per file at a time
//! (scan turns), and the scan threads long scans run on.

use super::*;

/// Held while a file is classified (its head read, maybe a scan), so two
/// requests for one cold file scan it once. The turn is the inode's own:
/// a classification of another file never waits for it (a small file's
/// first `cat` used to wait out a 2 GiB scan whenever the two inode
/// numbers fell on one of a fixed set of locks). What it holds is one
/// entry per file being classified right now.
#[derive(Default)]
pub struct ScanTurns {
    pub(super) busy: Mutex<std::collections::HashSet<u64>>,
    freed: parking_lot::Condvar,
}

impl ScanTurns {
    /// Waits for `ino`'s turn: until no other caller holds one for it.
    pub fn take(&self, ino: u64) -> ScanTurn<'_> {
        let mut busy = self.busy.lock();
        while busy.contains(&ino) {
            self.freed.wait(&mut busy);
        }
        busy.insert(ino);
        ScanTurn(self, ino)
    }
}

/// One inode's turn to be classified ([`ScanTurns::take`]); the next
/// caller for that inode goes on when it is dropped.
#[must_use]
pub struct ScanTurn<'a>(&'a ScanTurns, u64);

impl Drop for ScanTurn<'_> {
    fn drop(&mut self) {
        let ScanTurn(ScanTurns { busy, freed }, ino) = self;
        let mut set = busy.lock();
        set.remove(ino);
        // Shrink what a burst of classifications grew (months of uptime).
        let len = set.len();
        if set.capacity() > 64 && len < set.capacity() / 4 {
            set.shrink_to(len * 2);
        }
        drop(set);
        freed.notify_all();
    }
}

/// Records what the file is at `stamp` (under the content lock).
pub(super) fn learn(
    content: &mut Content,
    seen: &Mutex<KnownContent>,
    cache: &IndexCache,
    reader: &File,
    stamp: Stamp,
    corrected: bool,
) -> Result<()> {
    if corrected {
        let index = index_for(cache, reader, stamp)?;
        seen.lock().remember(
            stamp,
            Class::Corrected {
                view_len: index.view_len(),
                lossless: index.lossless(),
            },
        );
        content.view = Some((stamp, index));
    } else {
        seen.lock().remember(stamp, Class::Raw);
        content.view = None;
    }
    Ok(())
}

/// The class of a regular file (inode number `ino`, what is known of it
/// `seen`) whose backing state is `st`, learned through a fresh descriptor
/// from `open` when not known for its stamp: the head is read (a file
/// starting with a hole is raw, unread), and a corrected file is scanned
/// (holes skipped) unless its index is cached. One classification per file
/// at a time; a second caller waits and takes the first one's answer.
pub fn classify(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
) -> Result<Class> {
    let class = learn_class(seen, ino, cache, st, open, true)?;
    // With `scan`, learn_class always answers.
    Ok(class.unwrap_or(Class::Raw))
}

/// Like `classify`, but never scans: None when only a scan can tell
/// (a corrected file whose index is not cached). Raw files, however
/// large, are answered by their head alone.
pub fn peek(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
) -> Result<Option<Class>> {
    learn_class(seen, ino, cache, st, open, false)
}

/// The class of a regular file in state `st` when it is known without
/// reading the file: remembered for that stamp, or proved by an index
/// learned from exactly that stamp (in memory or in the index database).
/// None when only the file's bytes can tell.
pub fn known(seen: &Mutex<KnownContent>, cache: &IndexCache, st: &libc::stat) -> Option<Class> {
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) < DATA_START {
        return Some(Class::Raw);
    }
    let stamp = Stamp::of(st);
    if let Some(c) = seen.lock().class(&stamp) {
        return Some(c);
    }
    let index = cache.get(&stamp)?;
    let class = Class::Corrected {
        view_len: index.view_len(),
        lossless: index.lossless(),
    };
    seen.lock().remember(stamp, class);
    Some(class)
}

fn learn_class(
    seen: &Mutex<KnownContent>,
    ino: u64,
    cache: &IndexCache,
    st: &libc::stat,
    open: impl FnOnce() -> io::Result<File>,
    scan: bool,
) -> Result<Option<Class>> {
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || (st.st_size as u64) < DATA_START {
        return Ok(Some(Class::Raw));
    }
    let stamp = Stamp::of(st);
    if let Some(c) = seen.lock().class(&stamp) {
        return Ok(Some(c));
    }
    let _one = scan.then(|| cache.turns.take(ino));
    if let Some(c) = seen.lock().class(&stamp) {
        return Ok(Some(c));
    }
    // An index learned from exactly this stamp (in memory, or in the
    // index database) proves the content, magic number included: the
    // file is not even opened.
    if let Some(index) = cache.get(&stamp) {
        let class = Class::Corrected {
            view_len: index.view_len(),
            lossless: index.lossless(),
        };
        seen.lock().remember(stamp, class);
        return Ok(Some(class));
    }
    let file = open().map_err(io)?;
    // `has_magic` reads one page for the head, not a readahead window
    // (`io::read_head`).
    let class = if has_magic(&file).map_err(io)? {
        let index = match cache.get(&stamp) {
            Some(index) => index,
            None if !scan => return Ok(None),
            None => {
                crate::sys::fadvise(&file, libc::POSIX_FADV_SEQUENTIAL);
                scan_index(cache, &file, stamp)?
            }
        };
        Class::Corrected {
            view_len: index.view_len(),
            lossless: index.lossless(),
        }
    } else {
        Class::Raw
    };
    seen.lock().remember(stamp, class);
    Ok(Some(class))
}

/// Files larger than this whose class is not known are classified on the
/// scan threads (a scan of a dense file costs about a millisecond per MiB),
/// so the FUSE workers stay free for other requests.
pub const SCAN_INLINE: u64 = 8 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// A few threads for long scans; the request's reply goes with the job.
pub struct ScanPool {
    tx: Mutex<mpsc::Sender<Job>>,
}

impl ScanPool {
    pub fn new(threads: usize) -> io::Result<ScanPool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("scan-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().recv();
                    let Ok(job) = job else { break };
                    // A panicking job drops its reply, which answers EIO;
                    // the hook has logged it; the thread goes on.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                })?;
        }
        Ok(ScanPool { tx: Mutex::new(tx) })
    }

    /// Queues `job`; runs it here if the pool is gone.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        if let Err(mpsc::SendError(job)) = self.tx.lock().send(Box::new(job)) {
            job();
        }
    }
}
