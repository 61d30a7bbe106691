//! The index database's table of node records: for each inode number the
//! mount has handed the kernel, how to find the backing file again (an
//! opaque record `crate::fs` encodes: a file handle, or a parent and a
//! name), so that a file handle made through the mount opens its file
//! after the kernel forgot the inode and after the daemon restarted.
//! Called by `fs::export`; stored through the writer thread like the
//! index records, collected like them when unused for
//! [`MAX_AGE_DAYS`](super::MAX_AGE_DAYS).
//!
//! A stored value is the day it was last written (4 bytes, little endian)
//! followed by the record. The writer skips a record equal to the stored
//! one unless that was written a week or more ago, so a warm mount's
//! lookups write nothing.

use redb::{ReadableTable, TableDefinition};

use super::{day_of, now, read_one, IndexDb, Op};

/// Inode number → day written + record.
pub(super) const NODES: TableDefinition<u64, &[u8]> = TableDefinition::new("nodes");

/// A stored record is written again once it is this many days old.
const REDATE_DAYS: u32 = 7;

impl IndexDb {
    /// The record stored for inode number `ino`, if any.
    pub fn node(&self, ino: u64) -> Option<Vec<u8>> {
        let (shared, db) = self.db()?;
        read_one(shared, || {
            let r = db.begin_read()?;
            let t = match r.open_table(NODES) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            Ok(t.get(ino)?.map(|v| v.value().to_vec()))
        })
        .and_then(|v| v.get(4..).map(<[u8]>::to_vec))
    }

    /// Stores `record` for inode number `ino` (through the writer thread;
    /// dropped when its queue is full).
    pub fn put_node(&self, ino: u64, record: Vec<u8>) {
        self.send_op(Op::Node(ino, record));
    }
}

/// Writes one node record in the writer's transaction, unless the stored
/// one is the same and recent. Returns whether anything changed.
pub(super) fn write(
    t: &mut redb::Table<'_, u64, &[u8]>,
    ino: u64,
    record: &[u8],
    today: u32,
) -> Result<bool, redb::Error> {
    if let Some(v) = t.get(ino)? {
        let v = v.value();
        if v.get(4..) == Some(record) && day(v).saturating_add(REDATE_DAYS) > today {
            return Ok(false);
        }
    }
    let mut v = Vec::with_capacity(4 + record.len());
    v.extend_from_slice(&today.to_le_bytes());
    v.extend_from_slice(record);
    t.insert(ino, v.as_slice())?;
    Ok(true)
}

/// The day a stored value was written.
pub(super) fn day(v: &[u8]) -> u32 {
    v.get(..4)
        .and_then(|d| d.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Today, for the writer.
pub(super) fn today() -> u32 {
    day_of(now())
}
