//! The index database's table of node records: for each inode number the
//! mount has handed the kernel, how to find the backing file again (an
//! opaque record `crate::fs` encodes: a file handle, or a parent and a
//! name), so that a file handle made through the mount opens its file
//! after the kernel forgot the inode and after the daemon restarted.
//! Called by `fs::export`; stored through the writer thread like the
//! index records (a full queue makes the caller wait, bounded, instead of
//! dropping one: `IndexDb::put_node`), collected like them when unused for
//! [`MAX_AGE_DAYS`](super::MAX_AGE_DAYS).
//!
//! A row is the inode number, the day it was last written and the record.
//! The writer leaves a row equal to the new record alone unless it was
//! written a week or more ago ([`WRITE`]), so a warm mount's lookups
//! change nothing.

use rusqlite::OptionalExtension;

use super::{day_of, now, IndexDb, Op};

/// A stored record is written again once it is this many days old.
const REDATE_DAYS: u32 = 7;

/// The writer's statement: `?1` inode, `?2` today, `?3` the record.
pub(super) const WRITE: &str = "INSERT INTO nodes(ino, day, rec) VALUES (?1, ?2, ?3) \
     ON CONFLICT(ino) DO UPDATE SET day = excluded.day, rec = excluded.rec \
     WHERE nodes.rec != excluded.rec OR nodes.day + 7 <= excluded.day";

const _: () = assert!(REDATE_DAYS == 7, "WRITE names the week");

impl IndexDb {
    /// The record stored for inode number `ino`, if any. When there is
    /// none but a daemon of this BACKING is still committing what it
    /// queued before it closed (a restart at once after an unmount), waits
    /// for that, at most three seconds (`closing`), and looks again.
    pub fn node(&self, ino: u64) -> Option<Vec<u8>> {
        stored(&self.inner.as_ref()?.shared.pool, ino).or_else(|| self.node_after_closing(ino))
    }

    /// The record stored for `ino` once every daemon of this BACKING that
    /// is closing has committed (waiting at most three seconds, as
    /// [`IndexDb::node`]); None when none was closing. For a record found
    /// stale: a new file with a deleted one's number, made through a
    /// daemon that ended a moment ago and whose record of it may still be
    /// on its way.
    pub fn node_after_closing(&self, ino: u64) -> Option<Vec<u8>> {
        let pool = &self.inner.as_ref()?.shared.pool;
        super::closing::waited(pool)
            .then(|| stored(pool, ino))
            .flatten()
    }

    /// Stores `record` for inode number `ino` (through the writer thread;
    /// waits while its queue is full).
    pub fn put_node(&self, ino: u64, record: Vec<u8>) {
        self.send_op(Op::Node(ino, record), true, false);
    }

    /// `put_node` for a record marked on its way (`mark_node`) already.
    pub fn put_node_marked(&self, ino: u64, record: Vec<u8>) {
        self.send_op(Op::Node(ino, record), true, true);
    }
}

/// The row of inode number `ino`, read now.
fn stored(pool: &super::pool::Pool, ino: u64) -> Option<Vec<u8>> {
    pool.read(|db| {
        db.conn
            .prepare_cached("SELECT rec FROM nodes WHERE ino = ?1")?
            .query_row([ino as i64], |r| r.get::<_, Vec<u8>>(0))
            .optional()
    })
}

/// Whether a node record stored on `day` needs no writing again today
/// (the writer's `WRITE` statement would leave an equal one alone).
pub fn node_current(day: u32) -> bool {
    day.saturating_add(REDATE_DAYS) > today()
}

/// Today, for the writer.
pub(super) fn today() -> u32 {
    day_of(now())
}
