//! (cutf8fs patch) Fair turns between users: which request an event loop
//! thread serves next, so one user's many requests never make another
//! user's few wait behind them.
//!
//! Every event loop thread reads requests from the kernel itself and serves
//! what it read at once, as 0.18.0 does, while one user alone is at work or
//! the reader's user has fewer requests in service than its share of the
//! threads. A request of a user at its share is queued (per user, first
//! come). Then the thread that read it serves the queued request of the
//! user with the fewest in service if another thread is reading; else it
//! keeps reading, so the kernel's queue is drained and another user's
//! request is found, and served, at once. A thread that ends a request
//! takes the next queued one while another thread reads, else it becomes
//! the reader. The last reader never takes a queued request while another
//! thread serves: if every other thread is stuck in a long request, the
//! session adds a thread ([`Turns::queued`]; fuser's grower), and another
//! user's request is still read and served at once.
//!
//! A user is at work while it has requests in service or queued, and for
//! [`ACTIVE`] after its last request: a user alone (the usual case) never
//! has a request queued and costs no hand-over between threads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a user counts as at work after its last request (a victim's
/// next `cat` comes within it; an idle user stops taking a share).
pub(crate) const ACTIVE: Duration = Duration::from_millis(100);

/// How many interrupts of requests not (yet) queued are remembered.
const MISSED: usize = 64;

/// Requests queued for their turn so far, in this process (every session).
static QUEUED: AtomicU64 = AtomicU64::new(0);

/// How many requests have waited for their user's turn so far, in this
/// process: none while one user alone is at work.
pub fn turns_queued() -> u64 {
    QUEUED.load(Ordering::Relaxed)
}

/// What a thread that read a request does with it ([`Turns::received`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Got<T> {
    /// Serve it now, then call [`Turns::done`].
    Now,
    /// It was queued: serve this one instead, then call [`Turns::done`]
    /// for its user.
    Instead(u32, T),
    /// It was queued: read the next (the thread is still the reader).
    Deferred,
}

/// What a free thread does next ([`Turns::next`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<T> {
    /// Serve this queued request of this user, then call [`Turns::done`].
    Serve(u32, T),
    /// Read a request.
    Read,
}

#[derive(Debug)]
struct User<T> {
    serving: usize,
    seen: Instant,
    /// Requests queued, each with its length, first come.
    queue: VecDeque<(T, usize)>,
}

#[derive(Debug)]
struct State<T> {
    users: HashMap<u32, User<T>>,
    /// The users with requests queued, in the order of their turns.
    ring: VecDeque<u32>,
    len: usize,
    bytes: usize,
    threads: usize,
    /// Threads reading (or about to) from the kernel.
    readers: usize,
    /// Interrupts whose request was not queued when they came, last
    /// [`MISSED`] (its reader may not have queued it yet: [`Turns::cancel_missed`]).
    missed: VecDeque<u64>,
    /// Threads serving a request taken in turns.
    serving: usize,
}

/// The turns of one session, shared by its event loop threads: at most
/// `max_len` requests or `max_bytes` bytes are queued (beyond, a request
/// is served by the thread that read it, and the kernel keeps the rest).
#[derive(Debug)]
pub(crate) struct Turns<T> {
    state: Mutex<State<T>>,
    max_len: usize,
    max_bytes: usize,
}

impl<T> State<T> {
    /// `uid`'s share of the threads now (`uid` was just seen): unbounded
    /// while it is the only user at work; else the threads but one (the
    /// reader) divided among the users at work, at least one. Forgets the
    /// users no longer at work.
    fn share(&mut self, uid: u32, now: Instant) -> usize {
        self.users
            .entry(uid)
            .or_insert_with(|| User {
                serving: 0,
                seen: now,
                queue: VecDeque::new(),
            })
            .seen = now;
        self.users.retain(|_, u| {
            u.serving > 0 || !u.queue.is_empty() || now.saturating_duration_since(u.seen) < ACTIVE
        });
        let active = self.users.len();
        if active <= 1 {
            usize::MAX
        } else {
            (self.threads.saturating_sub(1)).div_ceil(active).max(1)
        }
    }

    /// Takes the first queued request of the user with the fewest in
    /// service (the ring's order among equals; that user then goes to the
    /// back of the ring), counting it in service.
    fn take(&mut self) -> Option<(u32, T)> {
        let users = &self.users;
        let (at, _) = self
            .ring
            .iter()
            .enumerate()
            .min_by_key(|(i, uid)| (users.get(uid).map_or(0, |u| u.serving), *i))?;
        let uid = self.ring.remove(at)?;
        let u = self.users.get_mut(&uid)?;
        let (item, bytes) = u.queue.pop_front()?;
        if !u.queue.is_empty() {
            self.ring.push_back(uid);
        }
        u.serving += 1;
        self.serving += 1;
        self.len -= 1;
        self.bytes -= bytes;
        Some((uid, item))
    }
}

impl<T> Turns<T> {
    /// Turns for `threads` event loop threads (see [`Turns::add_thread`]).
    pub(crate) fn new(threads: usize, max_len: usize, max_bytes: usize) -> Self {
        Turns {
            state: Mutex::new(State {
                users: HashMap::new(),
                ring: VecDeque::new(),
                len: 0,
                bytes: 0,
                threads,
                readers: 0,
                serving: 0,
                missed: VecDeque::new(),
            }),
            max_len,
            max_bytes,
        }
    }

    /// One more event loop thread (the pool grew).
    pub(crate) fn add_thread(&self) {
        self.state.lock().threads += 1;
    }

    /// A free thread's next work: a queued request if another thread
    /// reads (or none serves, so none would come back for it), else
    /// reading.
    pub(crate) fn next(&self) -> Next<T> {
        let mut s = self.state.lock();
        if s.len > 0 && (s.readers > 0 || s.serving == 0) {
            if let Some((uid, item)) = s.take() {
                return Next::Serve(uid, item);
            }
        }
        s.readers += 1;
        Next::Read
    }

    /// Requests are queued (the grower then adds a thread when every
    /// thread that is not reading has been stuck in one request).
    pub(crate) fn queued(&self) -> bool {
        self.state.lock().len > 0
    }

    /// The reader read a request not taken in turns (an interrupt, a
    /// forget: the kernel's own, served at once and not counted).
    pub(crate) fn unqueued(&self) {
        self.state.lock().readers -= 1;
    }

    /// The reader read a request of `uid`, `bytes` long, at `now`; `queue`
    /// makes what is queued of it (called only if it is).
    pub(crate) fn received(
        &self,
        uid: u32,
        bytes: usize,
        now: Instant,
        queue: impl FnOnce() -> T,
    ) -> Got<T> {
        let mut s = self.state.lock();
        s.readers -= 1;
        let share = s.share(uid, now);
        let full = s.len >= self.max_len || (s.len > 0 && s.bytes + bytes > self.max_bytes);
        let Some(u) = s.users.get_mut(&uid) else {
            unreachable!("share() keeps the user it saw")
        };
        if (u.serving < share && u.queue.is_empty()) || full {
            u.serving += 1;
            s.serving += 1;
            return Got::Now;
        }
        u.queue.push_back((queue(), bytes));
        QUEUED.fetch_add(1, Ordering::Relaxed);
        if u.queue.len() == 1 {
            s.ring.push_back(uid);
        }
        s.len += 1;
        s.bytes += bytes;
        if s.readers > 0 || s.serving == 0 {
            let (uid, item) = s.take().expect("one was just queued");
            return Got::Instead(uid, item);
        }
        s.readers += 1;
        Got::Deferred
    }

    /// Takes out of its queue the first queued request `matches` picks
    /// (one the kernel interrupted, which the caller then answers): it was
    /// never in service, so nothing else is to be told. When none is
    /// queued, the interrupt's `unique` is remembered: the thread that read
    /// its request may queue it only now ([`Turns::cancel_missed`]).
    pub(crate) fn cancel(&self, unique: u64, matches: impl Fn(&T) -> bool) -> Option<T> {
        let mut s = self.state.lock();
        let found = s.take_matching(matches);
        if found.is_none() {
            if s.missed.len() == MISSED {
                s.missed.pop_front();
            }
            s.missed.push_back(unique);
        }
        found
    }

    /// After a reader queued request `unique`: if an interrupt of it came
    /// first ([`Turns::cancel`] found nothing then), takes it out of its
    /// queue when `matches` picks it, for the caller to answer. Costs a
    /// look through at most [`MISSED`] uniques; the queue only then.
    pub(crate) fn cancel_missed(&self, unique: u64, matches: impl Fn(&T) -> bool) -> Option<T> {
        let mut s = self.state.lock();
        let at = s.missed.iter().position(|&m| m == unique)?;
        s.missed.remove(at);
        s.take_matching(matches)
    }
}

impl<T> State<T> {
    /// Takes out of its queue the first queued request `matches` picks.
    fn take_matching(&mut self, matches: impl Fn(&T) -> bool) -> Option<T> {
        let s = self;
        let (uid, at) = s.users.iter().find_map(|(uid, u)| {
            u.queue
                .iter()
                .position(|(item, _)| matches(item))
                .map(|at| (*uid, at))
        })?;
        let u = s.users.get_mut(&uid)?;
        let (item, bytes) = u.queue.remove(at)?;
        if u.queue.is_empty() {
            s.ring.retain(|&r| r != uid);
        }
        s.len -= 1;
        s.bytes -= bytes;
        Some(item)
    }
}

impl<T> Turns<T> {
    /// A request of `uid` taken in turns was answered.
    pub(crate) fn done(&self, uid: u32) {
        let mut s = self.state.lock();
        s.serving -= 1;
        if let Some(u) = s.users.get_mut(&uid) {
            u.serving -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// A thread that read a request of `uid` (it was a reader).
    fn read(t: &Turns<u32>, uid: u32, tag: u32, now: Instant) -> Got<u32> {
        assert!(t.next() == Next::Read, "expected to read");
        t.received(uid, 10, now, || tag)
    }

    #[test]
    fn a_user_alone_never_has_a_request_queued() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        for i in 0..50 {
            assert_eq!(read(&t, 1000, i, at(t0, 0)), Got::Now);
        }
        // 50 in service at once, none queued: first come, as without turns.
        assert_eq!(t.state.lock().len, 0);
        assert_eq!(t.state.lock().serving, 50);
    }

    #[test]
    fn a_second_user_at_work_is_served_at_once_past_the_first_users_storm() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        // User 2 did something a moment ago: two users at work, share 1.
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        // Thread A serves one of user 1's; thread B, the last reader, reads
        // the rest of the storm and queues it, reading on.
        assert_eq!(read(&t, 1, 10, at(t0, 1)), Got::Now);
        assert!(t.next() == Next::Read);
        for i in 11..18 {
            assert_eq!(t.received(1, 10, at(t0, 2), || i), Got::Deferred);
        }
        // User 2's request, behind the storm in the kernel's queue, is
        // read at once and served at once.
        assert_eq!(t.received(2, 10, at(t0, 3), || 99), Got::Now);
        // A ends user 1's request: with nobody reading, it becomes the
        // reader (another user's may be in the kernel's queue)...
        t.done(1);
        assert_eq!(t.next(), Next::Read);
        // ... and B, ending user 2's, takes user 1's next, first come.
        t.done(2);
        assert_eq!(t.next(), Next::Serve(1, 11));
    }

    #[test]
    fn the_user_with_the_fewest_in_service_goes_first() {
        let t = Turns::new(3, 1024, 1 << 20);
        let t0 = Instant::now();
        // Users 1 and 2 each at their share (one of the two threads but
        // the reader) with one more queued; user 1 queued first.
        assert_eq!(read(&t, 1, 10, t0), Got::Now);
        assert_eq!(read(&t, 2, 20, t0), Got::Now);
        assert!(t.next() == Next::Read);
        assert_eq!(t.received(1, 10, t0, || 11), Got::Deferred);
        assert_eq!(t.received(2, 10, t0, || 21), Got::Deferred);
        // User 1's ends: user 1 now has fewer in service, its turn.
        t.done(1);
        assert_eq!(t.next(), Next::Serve(1, 11));
        // It ends: user 2's is next; the reader stays the reader.
        t.done(1);
        assert_eq!(t.next(), Next::Serve(2, 21));
        assert!(!t.queued());
        assert_eq!(t.state.lock().readers, 1);
    }

    #[test]
    fn a_thread_that_reads_while_another_reads_serves_a_turn_not_the_queue_order() {
        let t = Turns::new(4, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        // Share of 3 threads but the reader between 2 users: 2 each.
        assert_eq!(read(&t, 1, 10, t0), Got::Now);
        assert_eq!(read(&t, 1, 11, t0), Got::Now);
        // Two threads read: one of them reads user 1's third...
        assert!(t.next() == Next::Read);
        assert!(t.next() == Next::Read);
        // ... it is queued, and the thread serves the queue's choice (the
        // same request: nobody else waits), the other thread still reads.
        assert_eq!(t.received(1, 10, t0, || 12), Got::Instead(1, 12));
        assert_eq!(t.state.lock().readers, 1);
    }

    #[test]
    fn a_user_idle_for_the_active_window_stops_taking_a_share() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        assert_eq!(read(&t, 1, 1, t0), Got::Now);
        // Within the window user 1 is at its share...
        assert!(t.next() == Next::Read);
        assert_eq!(t.received(1, 10, at(t0, 50), || 2), Got::Deferred);
        t.done(1);
        assert_eq!(t.next(), Next::Serve(1, 2));
        t.done(1);
        // ... after it, user 1 is alone again: no queue.
        let later = t0 + ACTIVE + Duration::from_millis(1);
        assert_eq!(read(&t, 1, 3, later), Got::Now);
        assert_eq!(read(&t, 1, 4, later), Got::Now);
        assert_eq!(t.state.lock().users.len(), 1, "user 2 was forgotten");
    }

    #[test]
    fn a_full_queue_leaves_the_request_to_the_thread_that_read_it() {
        let t = Turns::new(2, 2, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        assert_eq!(read(&t, 1, 10, t0), Got::Now);
        assert!(t.next() == Next::Read);
        assert_eq!(t.received(1, 10, t0, || 11), Got::Deferred);
        assert_eq!(t.received(1, 10, t0, || 12), Got::Deferred);
        assert_eq!(t.received(1, 10, t0, || 13), Got::Now);
        assert_eq!(t.state.lock().len, 2);
    }

    #[test]
    fn nothing_is_queued_where_no_thread_would_come_back_for_it() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        // User 1 has one queued behind its own (keeping its order), but no
        // thread serves: the reader serves it itself.
        assert_eq!(read(&t, 1, 10, t0), Got::Now);
        assert!(t.next() == Next::Read);
        assert_eq!(t.received(1, 10, t0, || 11), Got::Deferred);
        t.done(1);
        // The reader reads user 1's next: it goes behind 11, and with no
        // thread serving, the reader serves 11.
        assert_eq!(t.received(1, 10, t0, || 12), Got::Instead(1, 11));
        // The other thread reads; this one, ending 11, takes 12.
        assert_eq!(t.next(), Next::Read);
        t.done(1);
        assert_eq!(t.next(), Next::Serve(1, 12));
    }

    #[test]
    fn the_last_reader_keeps_reading_while_every_other_thread_is_stuck() {
        // Thread A is stuck in user 1's request; the reader B queues user
        // 1's next ones and stays the reader however long A takes, so user
        // 2's are still served at once (the session adds threads for the
        // queue: `queued`).
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        assert_eq!(read(&t, 1, 10, t0), Got::Now);
        assert_eq!(t.next(), Next::Read);
        for i in 11..50 {
            assert_eq!(t.received(1, 10, at(t0, 1), || i), Got::Deferred);
        }
        assert!(t.queued());
        for ms in 2..60 {
            assert_eq!(t.received(2, 10, at(t0, ms), || 0), Got::Now);
            t.done(2);
            assert_eq!(t.next(), Next::Read);
        }
        // A thread the session adds serves the queue, first come.
        t.add_thread();
        assert_eq!(t.next(), Next::Serve(1, 11));
    }

    #[test]
    fn a_storm_leaves_another_user_served_at_once_every_time() {
        // Two threads; user 1 always has requests outstanding (two more
        // arrive each step), user 2 one every fourth step. Simulated: each
        // step the reader reads what arrived, and the serving thread ends
        // its request and takes what `next` gives it.
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        // User 2 was at work a moment ago (else user 1 is alone).
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        assert_eq!(read(&t, 1, 0, t0), Got::Now);
        assert_eq!(t.next(), Next::Read);
        let mut served2 = 0;
        for step in 0..400u32 {
            let now = at(t0, u64::from(step) / 10);
            for k in 0..2 {
                assert_eq!(t.received(1, 10, now, || step * 2 + k), Got::Deferred);
            }
            if step % 4 == 0 {
                // Read behind the storm, served at once by the reader,
                // which then reads again.
                assert_eq!(t.received(2, 10, now, || u32::MAX), Got::Now);
                t.done(2);
                assert_eq!(t.next(), Next::Read);
                served2 += 1;
            }
            t.done(1);
            assert!(matches!(t.next(), Next::Serve(1, _)), "the queue was not served");
        }
        assert_eq!(served2, 100);
    }

    #[test]
    fn an_interrupted_request_leaves_its_queue_and_the_rest_keep_their_turns() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        // User 1 at its share (one), three more of its queued by the reader.
        assert_eq!(read(&t, 1, 10, at(t0, 1)), Got::Now);
        assert!(t.next() == Next::Read);
        for i in 11..14 {
            assert_eq!(t.received(1, 10, at(t0, 2), || i), Got::Deferred);
        }
        assert_eq!(t.cancel(12, |&i| i == 12), Some(12));
        assert_eq!(t.cancel(12, |&i| i == 12), None, "taken once");
        {
            let s = t.state.lock();
            assert_eq!((s.len, s.bytes), (2, 20));
        }
        // The others are served in their order, then the queue is empty and
        // user 1 out of the ring.
        t.done(1);
        assert_eq!(t.next(), Next::Serve(1, 11));
        t.done(1);
        assert_eq!(t.next(), Next::Serve(1, 13));
        assert_eq!(t.cancel(13, |&i| i == 13), None, "in service, not queued");
        t.done(1);
        assert!(t.state.lock().ring.is_empty());
        assert!(!t.queued());
    }

    #[test]
    fn an_interrupt_read_before_its_request_was_queued_still_takes_it_out() {
        let t = Turns::new(2, 1024, 1 << 20);
        let t0 = Instant::now();
        assert_eq!(read(&t, 2, 0, t0), Got::Now);
        t.done(2);
        assert_eq!(read(&t, 1, 10, at(t0, 1)), Got::Now);
        assert!(t.next() == Next::Read);
        // The interrupt of 12 is read by another thread before the reader
        // of 12 queued it: nothing to take yet, so it is remembered.
        assert_eq!(t.cancel(12, |&i| i == 12), None);
        assert_eq!(t.received(1, 10, at(t0, 2), || 11), Got::Deferred);
        assert_eq!(t.cancel_missed(11, |&i| i == 11), None, "11 was not interrupted");
        // (Still the reader after a deferred request.)
        assert_eq!(t.received(1, 10, at(t0, 2), || 12), Got::Deferred);
        assert_eq!(t.cancel_missed(12, |&i| i == 12), Some(12));
        assert_eq!(t.cancel_missed(12, |&i| i == 12), None, "taken once");
        assert!(t.state.lock().missed.is_empty());
        let s = t.state.lock();
        assert_eq!((s.len, s.bytes), (1, 10));
        drop(s);
        // Only the last MISSED are kept.
        for u in 0..(MISSED as u64 + 5) {
            assert_eq!(t.cancel(1000 + u, |_| false), None);
        }
        assert_eq!(t.state.lock().missed.len(), MISSED);
    }
}