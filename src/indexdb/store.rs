//! The SQLite file of an index database: judged ours before it is used
//! (empty, or SQLite with our application id: a file of anyone else's
//! under its name is left as it is), opened through the descriptor of the
//! directory it was found in (`crate::sys::sqlite`), made BACKING's (a
//! database from another BACKING is emptied), and rebuilt when damaged.
//! Called by the connection pool (`pool`), which knows when to open it.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::finder::Place;

/// `PRAGMA application_id` of our databases ("cu8i"): an SQLite file
/// without it is somebody else's and never written.
pub(super) const APP_ID: i64 = 0x6375_3869;
/// `PRAGMA user_version` of the schema below.
const SCHEMA: i64 = 1;
/// SQLite's page cache per connection, in KiB (its default is 2 MiB): what
/// a burst caches is little and goes when the connection closes.
const CACHE_KIB: i64 = 512;

/// A database file judged ours, with the directory descriptor SQLite
/// reaches it (and its `-wal`, `-shm`, `-journal`) through. Kept while a
/// connection of this process uses it: closing any descriptor of an SQLite
/// file would drop the POSIX locks SQLite holds on it, so the file's own
/// descriptor is closed only once no connection is open (`pool`).
pub(super) struct Pinned {
    place: Place,
    /// `/proc/self/fd/N/NAME`, N `place.dir`.
    sqlite_name: String,
    /// The schema and BACKING's identity were checked once for this file.
    checked: AtomicBool,
}

impl Pinned {
    /// The file's path, for messages.
    pub(super) fn path(&self) -> &Path {
        &self.place.path
    }

    /// Opens `NAME` + `suffix` beside the database (the closing lock,
    /// `closing`): created when `create`, checked like the database.
    pub(super) fn companion(&self, suffix: &str, create: bool) -> Option<File> {
        let mut name = self.place.name.clone().into_os_string();
        name.push(suffix);
        let rule = crate::trust::Rule::our_file(crate::trust::Access::NotShared);
        crate::trust::open_file(self.place.dir.as_fd(), &name, libc::O_RDWR, &rule, create).ok()
    }
}

/// Why a database could not be used.
#[derive(Debug)]
pub(super) enum Failed {
    /// Its content: rebuilt at the next mount's start (`rebuild`).
    Damaged(String),
    /// The disk under it (full, read-only, an I/O error): kept as it is.
    Disk(String),
    /// Not ours (no SQLite header, or another application's): left alone.
    NotOurs(String),
    /// Another connection holds a lock longer than the wait allowed.
    Busy,
}

impl From<rusqlite::Error> for Failed {
    fn from(e: rusqlite::Error) -> Failed {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Failed::Busy,
            // SQLite's code does not carry the errno: ENOSPC or EDQUOT.
            Some(ErrorCode::DiskFull) => {
                Failed::Disk("No space left on device, or a quota is reached".into())
            }
            Some(
                ErrorCode::ReadOnly
                | ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::NoLargeFileSupport
                | ErrorCode::OutOfMemory,
            ) => Failed::Disk(e.to_string()),
            _ => Failed::Damaged(e.to_string()),
        }
    }
}

/// SQLite's header, the first bytes of every SQLite database.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Judges the file `place` found: empty (just created) or an SQLite file.
/// Anything else under its name is somebody's (a directory of root's that
/// the owner of BACKING's root renamed into the database's place may hold
/// a file of root's of that name) and is left as it is.
pub(super) fn pin(place: Place) -> Result<Arc<Pinned>, Failed> {
    if !crate::sys::sqlite::register() {
        return Err(Failed::Disk("SQLite has no default VFS".into()));
    }
    let mut head = [0u8; SQLITE_MAGIC.len()];
    let got = crate::io::read_full_at(&place.file, &mut head, 0)
        .map_err(|e| Failed::Disk(crate::convert::io_message(&e)))?;
    if got != 0 && (got != head.len() || head != *SQLITE_MAGIC) {
        return Err(Failed::NotOurs(
            "it is not a database (it does not begin with SQLite's header)".into(),
        ));
    }
    let dir = format!("/proc/self/fd/{}", place.dir.as_raw_fd());
    // Without /proc the directory could only be named by a path resolved
    // again at each open, which the owner of BACKING's root could redirect.
    if !nix::sys::stat::stat(dir.as_str()).is_ok_and(|st| {
        nix::sys::stat::fstat(&place.dir)
            .is_ok_and(|d| (d.st_dev, d.st_ino) == (st.st_dev, st.st_ino))
    }) {
        return Err(Failed::Disk(
            "/proc is not mounted, so its directory cannot be pinned".into(),
        ));
    }
    let sqlite_name = format!("{dir}/{}", place.name.display());
    Ok(Arc::new(Pinned {
        place,
        sqlite_name,
        checked: AtomicBool::new(false),
    }))
}

/// One connection to a pinned database.
pub(super) struct Db {
    // Declared first: closed before `pin` lets go of the file.
    pub(super) conn: Connection,
    pin: Arc<Pinned>,
}

impl Db {
    pub(super) fn pin(&self) -> &Arc<Pinned> {
        &self.pin
    }
}

/// Opens a connection, waiting up to `busy` for another's lock; the first
/// connection to a file checks (or creates) its schema and makes it
/// BACKING's `root_id`.
pub(super) fn open(pin: &Arc<Pinned>, root_id: (u64, u64), busy: Duration) -> Result<Db, Failed> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn =
        Connection::open_with_flags_and_vfs(&pin.sqlite_name, flags, crate::sys::sqlite::VFS)?;
    conn.busy_timeout(busy)?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    if !pin.checked.load(Ordering::Acquire) {
        init(&conn, pin, root_id)?;
        pin.checked.store(true, Ordering::Release);
    }
    let mut wal: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if !wal.eq_ignore_ascii_case("wal") && local_dir(pin) {
        // A new database is made WAL after its application id (`init`);
        // another connection's lock may have refused that switch then:
        // tried again at each open, never waited for.
        if let Ok(mode) = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            wal = mode;
        }
    }
    // WAL: a commit is durable against a crash of the process at once and
    // against power loss at the next checkpoint; rollback journal: every
    // commit synced (SQLite's default).
    let sync = if wal.eq_ignore_ascii_case("wal") {
        "NORMAL"
    } else {
        "FULL"
    };
    conn.pragma_update(None, "synchronous", sync)?;
    Ok(Db {
        conn,
        pin: pin.clone(),
    })
}

/// Whether the database's directory is on a [`local`] filesystem.
fn local_dir(pin: &Pinned) -> bool {
    nix::sys::statfs::fstatfs(&pin.place.dir).is_ok_and(|s| local(s.filesystem_type().0))
}

/// Filesystems whose shared memory and locks every opener of the file
/// shares (one kernel): WAL mode, where readers never wait for a writer.
/// On anything else (NFS, SMB, CephFS, a FUSE filesystem: possibly several
/// hosts) the rollback journal, which needs only POSIX locks.
fn local(fs_type: i64) -> bool {
    const LOCAL: [i64; 13] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0xCA45_1A4E, // bcachefs
        0x3153_464A, // jfs
        0x5265_4973, // reiserfs
        0x2011_BAB0, // exfat
        0x4D44,      // vfat
        0x3434,      // nilfs
        0x794C_7630, // overlayfs
    ];
    LOCAL.contains(&fs_type)
}

/// Checks the database is ours and BACKING's, creating the schema in an
/// empty file; empties one that is another BACKING's.
fn init(conn: &Connection, pin: &Pinned, root_id: (u64, u64)) -> Result<(), Failed> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    if pages == 0 {
        // The application id alone, first: the header it writes says ours
        // at once to a connection of another thread or daemon opening the
        // file meanwhile (made WAL first, the file had a header without it
        // for a moment, and such a reader took it for another program's
        // and went without the database for the rest of its mount). WAL
        // comes after, on a local filesystem (`open`).
        conn.pragma_update(None, "application_id", APP_ID)?;
        // A test's openers meet the file here, just made (`tests`).
        #[cfg(test)]
        tests::after_first_write();
    } else {
        let app: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        if app != APP_ID {
            return Err(Failed::NotOurs(
                "it is another program's SQLite database".into(),
            ));
        }
    }
    // Reads first, with no transaction of ours: a database in use by
    // another daemon (the usual case: a second mount, or the same BACKING
    // mounted again while the old daemon still exits) needs no write.
    let ours = (root_id.0 as i64, root_id.1 as i64);
    if schema_and_root(conn)? != (SCHEMA, Some(ours)) {
        // Something to write: the write lock taken at once (IMMEDIATE),
        // waiting for another daemon's commit. A read transaction upgraded
        // to a write (DEFERRED) would fail at once, without waiting, had
        // another daemon committed since it began (SQLite's BUSY_SNAPSHOT):
        // the mount would then go without its database.
        let tx =
            rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
        let (version, found) = schema_and_root(&tx)?;
        if version != 0 && version != SCHEMA {
            return Err(Failed::Damaged(format!("schema version {version}")));
        }
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, a INTEGER NOT NULL, \
                 b INTEGER NOT NULL) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS records(dev INTEGER NOT NULL, ino INTEGER NOT NULL, \
                 value BLOB NOT NULL, PRIMARY KEY(dev, ino)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS nodes(ino INTEGER PRIMARY KEY, day INTEGER NOT NULL, \
                 rec BLOB NOT NULL);",
        )?;
        tx.pragma_update(None, "user_version", SCHEMA)?;
        if found.is_some_and(|id| id != ours) {
            log::warn!(
                "index database {} belongs to another BACKING (or BACKING moved to another \
                 device); starting it afresh",
                pin.path().display()
            );
            tx.execute_batch("DELETE FROM records; DELETE FROM nodes;")?;
        }
        tx.execute(
            "INSERT OR REPLACE INTO meta(key, a, b) VALUES ('root', ?1, ?2)",
            [ours.0, ours.1],
        )?;
        tx.commit()?;
    }
    // Reads the whole file once: a damaged page fails here, at the start,
    // not in a lookup later (cheap for a database of a few MB; a large
    // one is read by the lookups of a cold mount anyway). A read: it waits
    // for no daemon and makes none wait.
    let ok: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if ok != "ok" {
        return Err(Failed::Damaged(ok));
    }
    Ok(())
}

/// The schema version and BACKING's identity a database holds (version
/// 0 and none in a new file; an unknown version is damage).
fn schema_and_root(conn: &Connection) -> Result<(i64, Option<(i64, i64)>), Failed> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == 0 {
        return Ok((0, None));
    }
    if version != SCHEMA {
        return Err(Failed::Damaged(format!("schema version {version}")));
    }
    let found = conn
        .query_row("SELECT a, b FROM meta WHERE key = 'root'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    Ok((version, found))
}

/// Removes a damaged database and its companions from their directory
/// (by name in the pinned directory, never by a path): a daemon still
/// using the old file keeps its own descriptors to it until it lets go,
/// and every later open makes a fresh one.
pub(super) fn remove(pin: &Pinned) {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = pin.place.name.clone().into_os_string();
        name.push(suffix);
        let _ = unlinkat(&pin.place.dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
}

/// The one line for a database the disk would not let us use: not
/// damaged, so not rebuilt; this mount keeps its indexes in memory.
pub(super) fn disk_failed(path: &Path, e: &str) {
    log::warn!(
        "index database {}: cannot write it ({e}); this mount keeps its indexes in memory \
         only (a full or failing disk, not a fault of the database: it is kept, and used \
         again once it can be written)",
        path.display(),
    );
}

/// Whether the open file behind `pin` is still the one at its name (a
/// damaged database removed by another daemon is not).
pub(super) fn current(pin: &Pinned) -> bool {
    let at = nix::sys::stat::fstatat(
        &pin.place.dir,
        pin.place.name.as_path(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    );
    let now = nix::sys::stat::fstat(&pin.place.file);
    matches!((at, now), (Ok(a), Ok(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::path::PathBuf;
    use std::sync::{Barrier, Mutex};

    use crate::indexdb::place;

    thread_local! {
        /// Run by `init` on this thread right after its first write to a
        /// new file (the application id): the moment another opener could
        /// meet a file that is SQLite's but not yet fully made.
        static AFTER_FIRST_WRITE: RefCell<Option<Box<dyn FnMut()>>> =
            const { RefCell::new(None) };
    }

    pub(super) fn after_first_write() {
        AFTER_FIRST_WRITE.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f();
            }
        });
    }

    const ROOT: (u64, u64) = (1, 2);

    /// The database file `place::FILE` in `dir`, found as `finder` finds
    /// it (created empty if missing) and pinned.
    fn pinned(dir: &Path) -> Result<Arc<Pinned>, Failed> {
        let d = place::open_given_dir(dir).unwrap();
        let file = place::open_file(d.as_fd(), Path::new(place::FILE)).unwrap();
        pin(Place {
            dir: d,
            name: PathBuf::from(place::FILE),
            file,
            path: dir.join(place::FILE),
        })
    }

    /// One opener of its own (as another daemon is): pins and opens.
    fn opener(dir: &Path) -> Result<Db, Failed> {
        open(&pinned(dir)?, ROOT, Duration::from_secs(5))
    }

    /// The database in `dir` is ours, of this schema and BACKING, made
    /// once: each table once, one BACKING row, nothing else.
    fn made_once(dir: &Path) {
        let db = opener(dir).unwrap_or_else(|e| panic!("opened alone: {e:?}"));
        let c = &db.conn;
        let one = |q: &str| -> i64 { c.query_row(q, [], |r| r.get(0)).unwrap() };
        assert_eq!(one("PRAGMA application_id"), APP_ID);
        assert_eq!(one("PRAGMA user_version"), SCHEMA);
        let mut st = c
            .prepare("SELECT type, name FROM sqlite_master ORDER BY name")
            .unwrap();
        let objects: Vec<(String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let table = |n: &str| ("table".to_string(), n.to_string());
        assert_eq!(objects, [table("meta"), table("nodes"), table("records")]);
        assert_eq!(one("SELECT count(*) FROM meta"), 1);
        assert_eq!(
            one("SELECT count(*) FROM meta WHERE key = 'root' AND a = 1 AND b = 2"),
            1
        );
        if local_dir(db.pin()) {
            let mode: String = c
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal", "a later open makes it WAL");
        }
    }

    /// Many openers (daemons, or a daemon's lookup and its writer thread)
    /// meet one new file at the same moment: every one takes it as ours
    /// and the schema is made once. (Made WAL before its application id, a
    /// file was another program's to an opener reading it in between.)
    #[test]
    fn many_openers_of_a_new_file_at_once_all_take_it_as_ours() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 50;
        let mut refused = Vec::new();
        for round in 0..ROUNDS {
            let d = tempfile::tempdir().unwrap();
            let start = Barrier::new(THREADS);
            let got: Vec<Result<(), Failed>> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            opener(d.path()).map(drop)
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            refused.extend(
                got.into_iter()
                    .filter_map(Result::err)
                    .map(|e| format!("round {round}: {e:?}")),
            );
            made_once(d.path());
        }
        assert!(
            refused.is_empty(),
            "{} of {} openers refused a new database:\n{}",
            refused.len(),
            THREADS * ROUNDS,
            refused.join("\n")
        );
    }

    /// The same at the exact moment: openers arriving while the first one
    /// has made the file (its first write done) and written nothing else.
    #[test]
    fn an_opener_meeting_a_file_being_made_takes_it_as_ours() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let met: Arc<Mutex<Vec<Result<(), Failed>>>> = Arc::default();
        let (at_hook, dir2) = (met.clone(), dir.clone());
        AFTER_FIRST_WRITE.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                let got: Vec<_> = std::thread::scope(|s| {
                    let threads: Vec<_> = (0..3)
                        .map(|_| s.spawn(|| opener(&dir2).map(drop)))
                        .collect();
                    threads.into_iter().map(|t| t.join().unwrap()).collect()
                });
                at_hook.lock().unwrap().extend(got);
            }))
        });
        let first = opener(&dir);
        AFTER_FIRST_WRITE.with(|h| h.borrow_mut().take());
        first.unwrap_or_else(|e| panic!("the first opener: {e:?}"));
        let met = std::mem::take(&mut *met.lock().unwrap());
        assert_eq!(met.len(), 3, "the hook did not run: no new file made?");
        for r in met {
            if let Err(e) = r {
                panic!("an opener meeting the file being made refused it: {e:?}");
            }
        }
        made_once(&dir);
    }

    /// Another program's SQLite file under the database's name is refused
    /// as such and left byte for byte as it was.
    #[test]
    fn another_programs_sqlite_file_is_refused_and_left_as_it_is() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join(place::FILE);
        let other = Connection::open(&file).unwrap();
        other
            .execute_batch(
                "PRAGMA application_id = 1234; CREATE TABLE theirs(x); \
                 INSERT INTO theirs VALUES ('kept');",
            )
            .unwrap();
        drop(other);
        let before = std::fs::read(&file).unwrap();
        match opener(d.path()) {
            Err(Failed::NotOurs(why)) => {
                assert_eq!(why, "it is another program's SQLite database")
            }
            Err(e) => panic!("refused for another reason: {e:?}"),
            Ok(_) => panic!("another program's database was taken as ours"),
        }
        assert!(std::fs::read(&file).unwrap() == before, "it was changed");
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [place::FILE], "companions were left beside it");
    }
}
