//! The node records the index database holds for entries about to be
//! handed to the kernel, read ahead with their listing, so a record equal
//! to the stored one is not sent to the writer again (a cold `ls -l` of a
//! directory listed before sends none).
//!
//! A row read is believed only where this daemon cannot have changed it
//! unseen: a node with a record of ours waiting for the writer as the
//! read starts is not read (`IndexDb::not_pending`: for the others, what
//! we stored is committed and the read shows it), and the row of a node
//! we send a record for while the read runs is dropped (the last sends
//! are logged for that). Each row is used once: the next record of that
//! node is compared with it and the row dropped, so a node recorded twice
//! (its file replaced meanwhile) sends its second record whatever was
//! read. Another daemon's writes are not ordered with ours anyway.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

/// At most this many rows are remembered; a read ahead that would pass it
/// forgets the older ones (entries listed and never looked up).
const MAX: usize = 1 << 14;

/// The last sends logged: a read during which more were sent believes
/// none of its rows.
const LOG: usize = 1 << 12;

#[derive(Default)]
struct Inner {
    /// Node id → (day written, encoded record).
    rows: HashMap<u64, (u32, Vec<u8>)>,
    /// Records sent to the writer so far.
    sent: u64,
    /// The nodes of the last [`LOG`] records sent, oldest first.
    log: VecDeque<u64>,
}

/// See the module doc.
#[derive(Default)]
pub(super) struct Stored(Mutex<Inner>);

/// A read ahead begun ([`Stored::begin`]): the count of records sent when
/// it started.
pub(super) struct Reading(u64);

impl Stored {
    /// Starts a read ahead: called before the nodes with records on their
    /// way are left out of it (`IndexDb::not_pending`), which is before
    /// the read.
    pub(super) fn begin(&self) -> Reading {
        Reading(self.0.lock().sent)
    }

    /// Keeps the rows a read begun as `r` found, but those of nodes a
    /// record was sent for while it ran.
    pub(super) fn found(&self, r: Reading, mut rows: Vec<(u64, u32, Vec<u8>)>) {
        if rows.is_empty() {
            return;
        }
        let mut s = self.0.lock();
        let since = usize::try_from(s.sent - r.0).unwrap_or(usize::MAX);
        if since > s.log.len() {
            return;
        }
        if since > 0 {
            let sent: std::collections::HashSet<u64> =
                s.log.iter().rev().take(since).copied().collect();
            rows.retain(|(ino, ..)| !sent.contains(ino));
        }
        if s.rows.len() + rows.len() > MAX {
            s.rows.clear();
        }
        for (ino, day, rec) in rows {
            s.rows.insert(ino, (day, rec));
        }
    }

    /// Whether `rec` must be sent for node `ino`: not when the row read
    /// ahead for it holds `rec` and needs no new date (`current`). The row
    /// is used up either way; a record to send is logged, and marked on
    /// its way (`mark`) under the same lock, so that a read begun after
    /// this leaves the node out until the record is committed.
    pub(super) fn to_send(
        &self,
        ino: u64,
        rec: &[u8],
        current: impl Fn(u32) -> bool,
        mark: impl FnOnce(),
    ) -> bool {
        let mut s = self.0.lock();
        if let Some((day, old)) = s.rows.remove(&ino) {
            if old == rec && current(day) {
                return false;
            }
        }
        mark();
        s.sent += 1;
        if s.log.len() == LOG {
            s.log.pop_front();
        }
        s.log.push_back(ino);
        true
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().rows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_used_once_and_only_an_equal_current_one_saves_a_send() {
        let s = Stored::default();
        let r = s.begin();
        s.found(
            r,
            vec![
                (5, 100, b"a".to_vec()),
                (6, 100, b"b".to_vec()),
                (7, 1, b"c".to_vec()),
            ],
        );
        let current = |day: u32| day >= 100;
        assert!(!s.to_send(5, b"a", current, || ()), "equal: not sent");
        assert!(s.to_send(5, b"a", current, || ()), "a row is used once");
        assert!(
            s.to_send(6, b"changed", current, || ()),
            "a changed record is sent"
        );
        assert!(
            s.to_send(7, b"c", current, || ()),
            "an old row is dated again"
        );
        assert!(s.to_send(8, b"d", current, || ()), "no row: sent");
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn the_row_of_a_node_sent_during_the_read_is_dropped() {
        let s = Stored::default();
        let r = s.begin();
        assert!(s.to_send(9, b"new", |_| true, || ()));
        s.found(r, vec![(9, 100, b"old".to_vec()), (5, 100, b"a".to_vec())]);
        assert_eq!(s.len(), 1);
        assert!(
            s.to_send(9, b"old", |_| true, || ()),
            "the old row was believed"
        );
        assert!(!s.to_send(5, b"a", |_| true, || ()));
        // More sends during a read than the log holds: nothing believed.
        let r = s.begin();
        for ino in 0..=LOG as u64 {
            s.to_send(1000 + ino, b"x", |_| true, || ());
        }
        s.found(r, vec![(5, 100, b"a".to_vec())]);
        assert_eq!(s.len(), 0);
    }
}
