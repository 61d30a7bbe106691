//! Who holds how many of the daemon's descriptors: each file or directory
//! open through the mount holds one descriptor of the daemon's, taken from
//! a pool shared by every user, and no one user may take what the others
//! need. `ops` asks for a [`Ticket`] before it opens a handle's descriptor
//! and keeps it in the handle until release; this module only counts.
//!
//! The policy (man cutf8fs(1), RESOURCES), from the daemon's open-file
//! limit at start (the soft limit, raised to the hard one):
//!
//! * the daemon's **own** descriptors come off the top: those open at start
//!   (BACKING, the journal, the index database, the log), one per worker
//!   for the FUSE device, a few per thread that may work at once (a request
//!   reopens an inode, lists a directory, rewrites a file) and, when inodes
//!   are reopened by name, the cache of directory descriptors;
//! * the rest is the **pool** for handles. A user (uid) may hold at most
//!   half of it (its **share**); beyond that, opens fail with EMFILE;
//! * the last eighth of the pool is a **reserve**: a user already holding
//!   its **floor** (a sixteenth of the pool, at most 1024) gets EMFILE
//!   there too, so users holding little (a shell's `ls`, an editor) still
//!   find descriptors while others hold many;
//! * once the pool is empty, everyone gets ENFILE.
//!
//! A refusal is logged, at most a few lines a minute per user
//! (`crate::ratelog`). The numbers are logged at start.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Descriptors one thread of the daemon may hold at once for its own work.
pub const PER_THREAD: usize = 4;

/// The numbers of the policy (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Descriptors for handles, all users together.
    pub pool: usize,
    /// The most one user may hold.
    pub share: usize,
    /// The part of the pool only users under their floor may take.
    pub reserve: usize,
    /// What a user may always take while the pool lasts.
    pub floor: usize,
}

impl Policy {
    /// The policy for a daemon whose open-file limit is `limit`, of which
    /// `own` are its own (module doc).
    pub fn new(limit: usize, own: usize) -> Policy {
        let pool = limit.saturating_sub(own).max(8);
        Policy {
            pool,
            share: (pool / 2).max(1),
            reserve: pool / 8,
            floor: (pool / 16).clamp(1, 1024),
        }
    }
}

/// Why a ticket was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The user holds its share (or its floor while only the reserve is
    /// left): EMFILE.
    OverShare { held: usize },
    /// No descriptor is left for anyone: ENFILE.
    Exhausted,
}

#[derive(Default)]
struct UserCounts {
    by_uid: HashMap<u32, usize>,
    total: usize,
}

/// The daemon's count of handle descriptors by user.
pub struct Shares {
    policy: Policy,
    held: Mutex<UserCounts>,
}

/// One descriptor held by one user; given back when dropped.
pub struct Ticket {
    shares: Arc<Shares>,
    uid: u32,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut h = self.shares.held.lock();
        h.total = h.total.saturating_sub(1);
        if let Some(n) = h.by_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                h.by_uid.remove(&self.uid);
            }
        }
    }
}

impl Shares {
    pub fn new(policy: Policy) -> Arc<Shares> {
        Arc::new(Shares {
            policy,
            held: Mutex::new(UserCounts::default()),
        })
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// One descriptor for `uid`, if the policy allows it.
    pub fn take(self: &Arc<Self>, uid: u32) -> Result<Ticket, Refusal> {
        let p = &self.policy;
        let mut h = self.held.lock();
        let held = h.by_uid.get(&uid).copied().unwrap_or(0);
        let free = p.pool.saturating_sub(h.total);
        if free == 0 {
            return Err(Refusal::Exhausted);
        }
        if held >= p.share || (held >= p.floor && free <= p.reserve) {
            return Err(Refusal::OverShare { held });
        }
        h.total += 1;
        *h.by_uid.entry(uid).or_insert(0) += 1;
        Ok(Ticket {
            shares: self.clone(),
            uid,
        })
    }

    /// Descriptors `uid` holds now.
    #[cfg(test)]
    pub fn held_by(&self, uid: u32) -> usize {
        self.held.lock().by_uid.get(&uid).copied().unwrap_or(0)
    }

    /// Descriptors all users hold now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_follow_the_limit() {
        let p = Policy::new(1024, 100);
        assert_eq!(p.pool, 924);
        assert_eq!(p.share, 462);
        assert_eq!(p.reserve, 115);
        assert_eq!(p.floor, 57);
        let big = Policy::new(1 << 20, 200);
        assert_eq!(big.floor, 1024);
        assert!(Policy::new(10, 100).pool >= 8, "a pool is never empty");
    }

    /// One user is stopped at its share; a second still gets its share of
    /// what is left; a third, holding nothing, gets its floor from the
    /// reserve; the pool's end is ENFILE for everyone.
    #[test]
    fn no_user_takes_what_the_others_need() {
        let s = Shares::new(Policy::new(200, 40));
        let p = s.policy();
        assert_eq!((p.pool, p.share, p.reserve, p.floor), (160, 80, 20, 10));
        let mut a = Vec::new();
        while let Ok(t) = s.take(1) {
            a.push(t);
        }
        assert_eq!(a.len(), p.share);
        assert_eq!(s.take(1).err(), Some(Refusal::OverShare { held: 80 }));
        let mut b = Vec::new();
        while let Ok(t) = s.take(2) {
            b.push(t);
        }
        // b stops where only the reserve is left.
        assert_eq!(b.len(), p.pool - p.reserve - p.share);
        let mut c = Vec::new();
        while let Ok(t) = s.take(3) {
            c.push(t);
        }
        assert_eq!(c.len(), p.floor, "the third user gets its floor");
        let mut d = Vec::new();
        while let Ok(t) = s.take(4) {
            d.push(t);
        }
        assert_eq!(d.len(), p.reserve - p.floor);
        assert_eq!(s.held(), p.pool);
        assert_eq!(s.take(5).err(), Some(Refusal::Exhausted));
        // Closing gives back at once.
        a.truncate(10);
        assert_eq!(s.held_by(1), 10);
        assert!(s.take(5).is_ok());
        drop((a, b, c, d));
        assert_eq!(s.held(), 0);
        assert_eq!(s.held_by(2), 0);
        assert!(
            s.held.lock().by_uid.is_empty(),
            "users holding nothing are forgotten"
        );
    }
}
