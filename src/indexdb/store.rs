//! Opening the redb file of an index database: our own lock on it first,
//! then redb; a database that is damaged or another BACKING's is emptied
//! and started afresh, one that the disk will not let us write is left as
//! it is. Called by `IndexDb::open` and the writer thread.

// redb's error type is large; it travels only on the rare failure path,
// where it is logged once.
#![allow(clippy::result_large_err)]

use std::fs::File;
use std::path::Path;
use std::time::Duration;

use super::{quiet, META, RECORDS, ROOT};

/// redb's page cache: 1 MiB, not its default of a GiB, so what a burst of
/// writes caches is little and goes when the database is let go. (The
/// node records a first `ls -l` of a huge directory stores fill any cache:
/// 4 MiB here came to 17 bytes an inode at 200 000, docs/performance.md;
/// the pages themselves stay in the kernel's page cache.)
const CACHE: usize = 1 << 20;

/// An open database, closed under the same guard as its use: redb
/// checks the file again as it closes it, and a damaged one (redb's
/// header intact, garbage after it) made that check panic on the
/// daemon's main thread at the unmount (exit 101).
pub(super) struct Db(Option<redb::Database>);

impl Db {
    fn new(db: redb::Database) -> Db {
        Db(Some(db))
    }
}

impl std::ops::Deref for Db {
    type Target = redb::Database;

    fn deref(&self) -> &redb::Database {
        // Taken only by `drop`.
        self.0
            .as_ref()
            .expect("a database is open until it is dropped")
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            if quiet(move || drop(db)).is_err() {
                log::warn!(
                    "index database: redb failed an internal check closing it (a damaged \
                     database; the next open checks it again and rebuilds it if needed)"
                );
            }
        }
    }
}

/// What opening the database came to.
pub(super) enum Opened {
    Db(Db),
    /// Another process holds it.
    Busy,
    /// Damaged beyond rebuilding, or the disk refuses it (logged).
    Failed,
}

/// Opens the database in `file` (rebuilding it when damaged or foreign),
/// trying `tries` times, 50 ms apart, while another process holds it.
pub(super) fn start_db(file: File, path: &Path, root_id: (u64, u64), tries: u32) -> Opened {
    // Our own lock on the open file, held while redb opens (redb's flock
    // on a dup of it shares it), so that emptying a damaged file can never
    // hit a database another mount is using.
    let mut tried = 0;
    // An error (not EWOULDBLOCK) is treated as "busy".
    while !crate::sys::try_lock_exclusive(&file).unwrap_or(false) {
        tried += 1;
        if tried < tries {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        return Opened::Busy;
    }
    // Only an empty file or a redb database is ever rebuilt or written: a
    // directory of ours renamed into the database's place by whoever owns
    // BACKING's root may hold a file of ours under that name that is
    // something else, which must stay as it is.
    match is_redb(&file) {
        Ok(true) => {}
        Ok(false) => {
            log::warn!(
                "index database {} is not a database (it does not begin with redb's \
                 header): left as it is; indexes kept in memory only (move it away to let \
                 the mount create its database)",
                path.display()
            );
            return Opened::Failed;
        }
        Err(e) => {
            disk_failed(path, &e);
            return Opened::Failed;
        }
    }
    // Lookups of a cold mount touch most pages: one sequential read-ahead
    // instead of a random read each (small databases only).
    if file.metadata().is_ok_and(|m| m.len() <= 64 << 20) {
        crate::sys::fadvise(&file, libc::POSIX_FADV_WILLNEED);
    }
    let create = |f: &File| -> Result<Db, Failed> {
        let dup = f.try_clone().map_err(|e| Failed::of(e.into()))?;
        match quiet(|| redb::Builder::new().set_cache_size(CACHE).create_file(dup)) {
            Ok(r) => r.map(Db::new).map_err(|e| Failed::of(e.into())),
            Err(_) => Err(Failed::Damaged(
                "redb failed an internal check reading it".into(),
            )),
        }
    };
    // `file` (our lock's descriptor) closes on return; redb's dup holds
    // the lock from then on.
    let db = match create(&file) {
        Ok(db) => match check_root(&db, root_id) {
            Ok(true) => Some(db),
            Ok(false) => {
                log::warn!(
                    "index database {} belongs to another BACKING (or BACKING moved to \
                     another device); starting it afresh",
                    path.display()
                );
                match clear(&db, root_id) {
                    Ok(()) => Some(db),
                    Err(e) => {
                        drop(db);
                        rebuild(&file, path, e, &create, root_id)
                    }
                }
            }
            Err(e) => {
                drop(db);
                rebuild(&file, path, e, &create, root_id)
            }
        },
        Err(e) => rebuild(&file, path, e, &create, root_id),
    };
    match db {
        Some(db) => Opened::Db(db),
        None => Opened::Failed,
    }
}

/// redb's magic number, the first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Whether `file` may be opened (and, when damaged, rebuilt) as the
/// database: empty (ours, just created) or beginning with redb's magic
/// number, which redb writes first and never changes. Anything else under
/// its name is not ours, whatever its mode: a file of root's of mode 0600
/// (the mode the database is created with), in a directory of root's that
/// the owner of BACKING's root renamed into the database's place, used to
/// be taken for a database with a damaged header and emptied.
fn is_redb(file: &File) -> std::io::Result<bool> {
    let mut head = [0u8; REDB_MAGIC.len()];
    let got = crate::io::read_full_at(file, &mut head, 0)?;
    Ok(got == 0 || (got == head.len() && head == REDB_MAGIC))
}

/// Why the database could not be opened or written: its content (rebuilt),
/// or the disk under it (a full disk, a quota, an I/O error: the file may
/// be perfectly good, so it is left as it is).
#[derive(Debug)]
enum Failed {
    Damaged(String),
    Disk(std::io::Error),
}

impl Failed {
    fn of(e: redb::Error) -> Failed {
        match e {
            redb::Error::Io(io)
                if matches!(
                    io.raw_os_error(),
                    Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
                ) =>
            {
                Failed::Disk(io)
            }
            other => Failed::Damaged(other.to_string()),
        }
    }
}

/// The one line for a database the disk would not let us write: not
/// damaged, so not rebuilt; this mount keeps its indexes in memory.
fn disk_failed(path: &Path, e: &std::io::Error) {
    log::warn!(
        "index database {}: cannot write it ({}); this mount keeps its indexes in memory \
         only (a full or failing disk, not a fault of the database: it is kept, and used \
         again once it can be written)",
        path.display(),
        crate::convert::io_message(e)
    );
}

fn rebuild(
    file: &File,
    path: &Path,
    why: Failed,
    create: &dyn Fn(&File) -> Result<Db, Failed>,
    root_id: (u64, u64),
) -> Option<Db> {
    let why = match why {
        Failed::Disk(e) => {
            disk_failed(path, &e);
            return None;
        }
        Failed::Damaged(why) => why,
    };
    log::warn!(
        "index database {} is damaged ({why}); rebuilding it (sizes are learned again by \
         reading the files)",
        path.display()
    );
    if let Err(e) = file.set_len(0) {
        log::warn!(
            "index database {}: cannot empty it ({e}); indexes kept in memory only",
            path.display()
        );
        return None;
    }
    match create(file).and_then(|db| clear(&db, root_id).map(|()| db)) {
        Ok(db) => Some(db),
        Err(Failed::Disk(e)) => {
            disk_failed(path, &e);
            None
        }
        Err(Failed::Damaged(e)) => {
            log::warn!(
                "index database {}: cannot create it ({e}); indexes kept in memory only",
                path.display()
            );
            None
        }
    }
}

/// Whether the database is BACKING's (an empty one becomes so).
fn check_root(db: &redb::Database, root_id: (u64, u64)) -> Result<bool, Failed> {
    let found = quiet(|| -> Result<Option<(u64, u64)>, redb::Error> {
        let r = db.begin_read()?;
        let t = match r.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(t.get(ROOT)?.map(|v| v.value()))
    })
    .map_err(|_| Failed::Damaged("redb failed an internal check reading it".into()))?
    .map_err(Failed::of)?;
    match found {
        Some(id) => Ok(id == root_id),
        None => clear(db, root_id).map(|()| true),
    }
}

/// Empties the records and makes the database BACKING's.
fn clear(db: &redb::Database, root_id: (u64, u64)) -> Result<(), Failed> {
    quiet(|| -> Result<(), redb::Error> {
        let w = db.begin_write()?;
        w.delete_table(RECORDS)?;
        w.open_table(RECORDS)?;
        w.delete_table(super::nodes::NODES)?;
        w.open_table(super::nodes::NODES)?;
        w.open_table(META)?.insert(ROOT, root_id)?;
        w.commit()?;
        Ok(())
    })
    .map_err(|_| Failed::Damaged("redb failed an internal check writing it".into()))?
    .map_err(Failed::of)
}
