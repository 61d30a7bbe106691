//! Reading the records of many files in one read transaction: the next
//! entries of a listing (`crate::fs`'s readdirplus), so a cold `ls -l`
//! starts SQLite's read transaction (its shared-memory locks, the WAL
//! check) once per batch of files instead of once per file.

use rusqlite::OptionalExtension;

use super::{day_of, now, record, IndexDb, Op};
use crate::io::Stamp;
use crate::view::OffsetIndex;

/// What one batched read found.
#[derive(Default)]
pub struct Batch {
    /// Index records, each with the exact state it was learned from (the
    /// caller serves one only for a file found in that state, as
    /// [`IndexDb::get`] does).
    pub indexes: Vec<(Stamp, OffsetIndex)>,
    /// Node records (`nodes`): inode number, the day the row was written,
    /// the record.
    pub nodes: Vec<(u64, u32, Vec<u8>)>,
}

impl IndexDb {
    /// The index records of the files numbered `files` on device `dev`,
    /// and the node records of the inode numbers `nodes`, read in one
    /// transaction; what is not there is left out. Records a week or more
    /// since last used are dated again, as `get` does. None without a
    /// database (or when it cannot be read now).
    pub fn get_batch(&self, dev: u64, files: &[u64], nodes: &[u64]) -> Option<Batch> {
        let pool = &self.inner.as_ref()?.shared.pool;
        if files.is_empty() && nodes.is_empty() {
            return Some(Batch::default());
        }
        let (raw, found_nodes) = pool.read(|db| {
            let tx = db.conn.unchecked_transaction()?;
            let mut raw = Vec::new();
            let mut found_nodes = Vec::new();
            {
                let mut get =
                    tx.prepare_cached("SELECT value FROM records WHERE dev = ?1 AND ino = ?2")?;
                for &ino in files {
                    let bytes = get
                        .query_row([dev as i64, ino as i64], |r| r.get::<_, Vec<u8>>(0))
                        .optional()?;
                    if let Some(bytes) = bytes {
                        raw.push((ino, bytes));
                    }
                }
                let mut node = tx.prepare_cached("SELECT day, rec FROM nodes WHERE ino = ?1")?;
                for &ino in nodes {
                    let row = node
                        .query_row([ino as i64], |r| {
                            Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                        })
                        .optional()?;
                    if let Some((day, rec)) = row {
                        found_nodes.push((ino, u32::try_from(day).unwrap_or(0), rec));
                    }
                }
            }
            tx.commit()?;
            Ok(Some((raw, found_nodes)))
        })?;
        let today = day_of(now());
        let mut indexes = Vec::with_capacity(raw.len());
        for (ino, bytes) in raw {
            let Some(rec) = record::decode(dev, ino, &bytes) else {
                continue;
            };
            let whole = rec
                .state
                .size
                .checked_sub(cutf8::MAGIC.len() as u64)
                .is_some_and(|n| n == rec.index.disk_len());
            if !whole {
                continue;
            }
            if rec.seen_day.saturating_add(7) <= today {
                self.send_op(
                    Op::Put((dev, ino), record::encode(&rec.state, today, &rec.index)),
                    false,
                    false,
                );
            }
            indexes.push((rec.state, rec.index));
        }
        Some(Batch {
            indexes,
            nodes: found_nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{root_of, state, text_index};
    use super::super::Location;
    use super::*;
    use std::os::fd::AsFd;

    /// A batch finds what single lookups find, leaves out what they miss,
    /// and reads node records beside.
    #[test]
    fn a_batch_finds_what_single_lookups_find() {
        let d = tempfile::tempdir().unwrap();
        let index = text_index(2);
        let a = state(5, 8 + index.disk_len());
        let b = state(6, 8 + index.disk_len());
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        db.put(&a, now(), &index);
        db.put(&b, now(), &index);
        db.put_node(6, b"six".to_vec());
        db.close();
        let db = IndexDb::open(root_of(d.path()).as_fd(), &Location::Default, false);
        let got = db.get_batch(1, &[4, 5, 6], &[5, 6]).unwrap();
        let mut inos: Vec<u64> = got.indexes.iter().map(|(s, _)| s.ino).collect();
        inos.sort_unstable();
        assert_eq!(inos, [5, 6]);
        for (st, i) in &got.indexes {
            assert_eq!(Some(i.clone()), db.get(st));
        }
        assert_eq!(got.nodes.len(), 1);
        assert_eq!(
            (got.nodes[0].0, got.nodes[0].2.as_slice()),
            (6, &b"six"[..])
        );
        assert!(db.get_batch(2, &[5], &[]).unwrap().indexes.is_empty());
    }
}
