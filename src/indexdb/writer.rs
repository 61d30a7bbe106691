//! The index database's writer thread: records stored by lookups' callers
//! come through a bounded queue and are committed in batches; at the end
//! (the unmount) old records are collected so the file stays bounded.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};

use super::lease::IDLE;
use super::{
    day_of, nodes, now, record, Op, Shared, BATCH_WAIT, LOCK_TRIES, MAX_AGE_DAYS, MAX_RECORDS,
    RECORDS,
};
use redb::{ReadableTable, ReadableTableMetadata};

/// The writer thread: takes the database (`lease`; creating it when the
/// first record comes if it was not there at mount), commits queued
/// records in batches until the queue closes, lets the database go when
/// it is idle, then collects garbage.
pub(super) fn writer(shared: &Shared, rx: Receiver<Op>) {
    let collected = |db: &redb::Database| {
        if let Err(e) = collect(db, day_of(now())) {
            log::warn!(
                "index database {}: collecting old records failed: {e}",
                shared.path.lock().display()
            );
        }
    };
    let mut batch = Vec::new();
    let mut failed = false;
    loop {
        let first = match rx.recv_timeout(IDLE / 2) {
            Ok(op) => op,
            Err(RecvTimeoutError::Timeout) => {
                shared.lease.release_if_idle();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        batch.push(first);
        let closed = gather(&rx, &mut batch);
        // In key order: the records of a listing come in the directory's
        // order, scattered over the table; sorted, a batch reads and
        // dirties each page of the table once (stable: two records of one
        // key keep their order).
        batch.sort_by_key(|op| match op {
            Op::Put(key, _) => (0, *key),
            Op::Node(ino, _) => (1, (*ino, 0)),
        });
        // Held by another mount: wait for it a little (a batch is small),
        // else the batch is dropped (it costs only speed).
        let Some(db) = shared.lease.get(shared, LOCK_TRIES, true) else {
            batch.clear();
            if closed {
                break;
            }
            continue;
        };
        let r = (|| -> Result<(), redb::Error> {
            let w = db.begin_write()?;
            let today = nodes::today();
            let mut changed = false;
            {
                let mut t = w.open_table(RECORDS)?;
                let mut n = w.open_table(nodes::NODES)?;
                for op in batch.drain(..) {
                    match op {
                        Op::Put(key, bytes) => {
                            t.insert(key, bytes.as_slice())?;
                            changed = true;
                        }
                        Op::Node(ino, record) => {
                            changed |= nodes::write(&mut n, ino, &record, today)?;
                        }
                    }
                }
            }
            if changed {
                w.commit()?;
            } else {
                w.abort()?;
            }
            Ok(())
        })();
        batch.clear();
        if let Err(e) = r {
            if !failed {
                log::warn!(
                    "index database {}: cannot store records: {e}",
                    shared.path.lock().display()
                );
                failed = true;
            }
        }
        drop(db);
        if closed {
            break;
        }
    }
    // At the end (the unmount), not at the start, where it would compete
    // with the first lookups of a cold mount for the disk.
    if let Some(db) = shared.lease.held() {
        collected(&db);
    }
}

/// Records a batch holds at most.
const BATCH: usize = 4096;

/// How often the queue is drained while a batch gathers.
const DRAIN_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Adds to `batch` what comes within [`BATCH_WAIT`] (at most [`BATCH`]
/// records in all); true if the queue closed. The queue is drained every
/// [`DRAIN_EVERY`], not waited on record by record: a first `ls -l` of a
/// million files sends a million node records, and waking this thread for
/// each would cost the threads answering the kernel a CPU's worth of
/// wake-ups. (The queue, [`super::QUEUE`] records, holds what comes in
/// between.)
fn gather(rx: &Receiver<Op>, batch: &mut Vec<Op>) -> bool {
    let until = std::time::Instant::now() + BATCH_WAIT;
    loop {
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return true,
            }
        }
        let left = until.saturating_duration_since(std::time::Instant::now());
        if batch.len() >= BATCH || left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(DRAIN_EVERY));
    }
}

/// Removes records not used for [`MAX_AGE_DAYS`] and, beyond
/// [`MAX_RECORDS`], the least recently used.
pub(super) fn collect(db: &redb::Database, today: u32) -> Result<(), redb::Error> {
    let r = db.begin_read()?;
    let t = r.open_table(RECORDS)?;
    let count = t.len()?;
    let mut days: Vec<((u64, u64), u32)> = Vec::new();
    let mut old = Vec::new();
    for item in t.iter()? {
        let (k, v) = item?;
        let key = k.value();
        let seen = record::seen_day(v.value()).unwrap_or(0);
        if seen.saturating_add(MAX_AGE_DAYS) < today {
            old.push(key);
        } else if count > MAX_RECORDS {
            days.push((key, seen));
        }
    }
    drop(t);
    drop(r);
    let live = count - old.len() as u64;
    if live > MAX_RECORDS {
        days.sort_by_key(|&(_, d)| d);
        let extra = (live - MAX_RECORDS) as usize;
        old.extend(days.iter().take(extra).map(|&(k, _)| k));
    }
    let old_nodes = old_nodes(&db.begin_read()?, today)?;
    if old.is_empty() && old_nodes.is_empty() {
        return Ok(());
    }
    let w = db.begin_write()?;
    {
        let mut t = w.open_table(RECORDS)?;
        for k in &old {
            t.remove(*k)?;
        }
        let mut n = w.open_table(nodes::NODES)?;
        for k in &old_nodes {
            n.remove(*k)?;
        }
    }
    w.commit()?;
    log::info!(
        "index database: {} records and {} node records of old or vanished files collected",
        old.len(),
        old_nodes.len()
    );
    Ok(())
}

/// The node records not written for [`MAX_AGE_DAYS`] (a live file's is
/// written again weekly while the mount looks it up) and, beyond
/// [`MAX_RECORDS`], the oldest.
fn old_nodes(r: &redb::ReadTransaction, today: u32) -> Result<Vec<u64>, redb::Error> {
    let t = match r.open_table(nodes::NODES) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let count = t.len()?;
    let mut old = Vec::new();
    let mut days = Vec::new();
    for item in t.iter()? {
        let (k, v) = item?;
        let day = nodes::day(v.value());
        if day.saturating_add(MAX_AGE_DAYS) < today {
            old.push(k.value());
        } else if count > MAX_RECORDS {
            days.push((k.value(), day));
        }
    }
    let live = count - old.len() as u64;
    if live > MAX_RECORDS {
        days.sort_by_key(|&(_, d)| d);
        let extra = (live - MAX_RECORDS) as usize;
        old.extend(days.iter().take(extra).map(|&(k, _)| k));
    }
    Ok(old)
}
