//! The index database's writer thread: records stored by lookups' callers
//! come through a bounded queue and are committed in batches; a batch
//! another daemon's commit holds up waits for it (never dropped for it);
//! at the end (the unmount) every queued record is committed, then old
//! records are collected so the file stays bounded.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Instant;

use rusqlite::{params, Connection};

use super::pool::IDLE;
use super::store::{Db, Failed};
use super::{day_of, nodes, now, record, Op, Shared, BATCH_WAIT, MAX_AGE_DAYS, MAX_RECORDS};

/// Tries of one batch while other daemons keep the database locked (each
/// waits up to `pool::WRITE_WAIT`).
const TRIES: u32 = 6;

/// The writer thread: takes a connection (creating the database when the
/// first record comes if it was not there at mount), commits queued
/// records in batches until the queue closes, closes the connection when
/// idle, then collects garbage.
pub(super) fn writer(shared: &Shared, rx: Receiver<Op>) {
    let mut db: Option<Db> = None;
    let mut used = Instant::now();
    let mut batch = Vec::new();
    let mut told = false;
    loop {
        let first = match rx.recv_timeout(IDLE / 2) {
            Ok(op) => op,
            Err(RecvTimeoutError::Timeout) => {
                if used.elapsed() >= IDLE {
                    db = None;
                }
                shared.pool.release_if_idle();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        batch.push(first);
        // Held until this batch is committed: a daemon of the BACKING that
        // misses a node record meanwhile waits for it (`closing`).
        let pending = super::closing::begin(&shared.pool);
        let closed = gather(&rx, &mut batch);
        // In key order: the records of a listing come in the directory's
        // order, scattered over the table; sorted, a batch touches each
        // page of the table once (stable: two records of one key keep
        // their order).
        batch.sort_by_key(|op| match op {
            Op::Put(key, _) => (0, *key),
            Op::Node(ino, _) => (1, (*ino, 0)),
        });
        let n = batch.len();
        let mut tries = 0;
        loop {
            if shared.pool.off.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            if db.is_none() {
                match shared.pool.writer() {
                    Ok(d) => db = Some(d),
                    Err(Failed::Busy) if tries < TRIES => {
                        tries += 1;
                        continue;
                    }
                    Err(Failed::Busy) => {
                        held_too_long(shared, n);
                        break;
                    }
                    Err(e) => {
                        shared.pool.failed(e);
                        break;
                    }
                }
            }
            let Some(d) = db.as_ref() else { break };
            match commit(&d.conn, &batch) {
                Ok(()) => break,
                Err(e) => match Failed::from(e) {
                    Failed::Busy if tries < TRIES => tries += 1,
                    // Another daemon's write lock held for minutes (stuck,
                    // or hostile): this batch is lost, the database stays
                    // in use and later batches are tried again.
                    Failed::Busy => {
                        held_too_long(shared, n);
                        break;
                    }
                    Failed::Disk(e) => {
                        // The disk, not the database: this batch is lost,
                        // later ones are tried again.
                        if !told {
                            store_failed(shared, &e);
                            told = true;
                        }
                        break;
                    }
                    e => {
                        db = None;
                        shared.pool.failed(e);
                        break;
                    }
                },
            }
        }
        // After the commit, which a read started later sees.
        shared.done(
            n,
            batch.iter().filter_map(|op| match op {
                Op::Node(ino, _) => Some(*ino),
                Op::Put(..) => None,
            }),
        );
        drop(pending);
        batch.clear();
        used = Instant::now();
        if closed {
            break;
        }
    }
    // At the end (the unmount), not at the start, where it would compete
    // with the first lookups of a cold mount for the disk.
    if let Some(d) = db.as_ref() {
        if let Err(e) = collect(&d.conn, day_of(now())) {
            log::warn!(
                "index database {}: collecting old records failed: {e}",
                shared.pool.path.lock().display()
            );
        }
    }
}

/// One line for a batch given up after [`TRIES`] waits for another
/// daemon's commit.
fn held_too_long(shared: &Shared, n: usize) {
    log::warn!(
        "index database {}: another daemon held it locked for over {} s; {n} records not \
         stored (the files' sizes are read again when next needed)",
        shared.pool.path.lock().display(),
        TRIES as u64 * super::pool::WRITE_WAIT.as_secs()
    );
}

fn store_failed(shared: &Shared, e: &str) {
    log::warn!(
        "index database {}: cannot store records: {e}",
        shared.pool.path.lock().display()
    );
}

/// Writes one batch in one transaction (taking the write lock at once,
/// waiting for another daemon's commit).
fn commit(conn: &Connection, batch: &[Op]) -> rusqlite::Result<()> {
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let today = nodes::today();
    {
        let mut put = tx.prepare_cached(
            "INSERT OR REPLACE INTO records(dev, ino, value) VALUES (?1, ?2, ?3)",
        )?;
        let mut node = tx.prepare_cached(nodes::WRITE)?;
        for op in batch {
            match op {
                Op::Put((dev, ino), bytes) => {
                    put.execute(params![*dev as i64, *ino as i64, bytes])?;
                }
                Op::Node(ino, rec) => {
                    node.execute(params![*ino as i64, today, rec])?;
                }
            }
        }
    }
    tx.commit()
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
/// [`MAX_RECORDS`], the least recently used; node records the same by
/// the day they were written.
pub(super) fn collect(conn: &Connection, today: u32) -> rusqlite::Result<()> {
    let mut old: Vec<(i64, i64)> = Vec::new();
    let mut days: Vec<((i64, i64), u32)> = Vec::new();
    let count: i64 = conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0))?;
    {
        let mut st = conn.prepare("SELECT dev, ino, value FROM records")?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let key = (row.get::<_, i64>(0)?, row.get::<_, i64>(1)?);
            let v = row.get_ref(2)?.as_blob().unwrap_or(&[]);
            let seen = record::seen_day(v).unwrap_or(0);
            if seen.saturating_add(MAX_AGE_DAYS) < today {
                old.push(key);
            } else if count as u64 > MAX_RECORDS {
                days.push((key, seen));
            }
        }
    }
    let live = count as u64 - old.len() as u64;
    if live > MAX_RECORDS {
        days.sort_by_key(|&(_, d)| d);
        let extra = (live - MAX_RECORDS) as usize;
        old.extend(days.iter().take(extra).map(|&(k, _)| k));
    }
    let old_day = i64::from(today.saturating_sub(MAX_AGE_DAYS)) - 1;
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut del = tx.prepare("DELETE FROM records WHERE dev = ?1 AND ino = ?2")?;
        for k in &old {
            del.execute(params![k.0, k.1])?;
        }
    }
    let mut nodes_gone = tx.execute("DELETE FROM nodes WHERE day <= ?1", [old_day])?;
    let node_count: i64 = tx.query_row("SELECT count(*) FROM nodes", [], |r| r.get(0))?;
    if node_count as u64 > MAX_RECORDS {
        nodes_gone += tx.execute(
            "DELETE FROM nodes WHERE ino IN (SELECT ino FROM nodes ORDER BY day LIMIT ?1)",
            [node_count - MAX_RECORDS as i64],
        )?;
    }
    tx.commit()?;
    if !old.is_empty() || nodes_gone > 0 {
        log::info!(
            "index database: {} records and {nodes_gone} node records of old or vanished \
             files collected",
            old.len(),
        );
    }
    Ok(())
}
