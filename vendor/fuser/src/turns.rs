//! (cutf8fs patch) Requests received but not yet served, queued per caller
//! (the request header's uid) and taken in turns: one of each user's in
//! round-robin, so one user's many requests never wait another's few.
//!
//! [`Ring`] is the policy alone (who goes next); [`Turns`] shares it between
//! the thread that receives requests and the threads that serve them,
//! bounded in requests and bytes.

use std::collections::VecDeque;

use parking_lot::{Condvar, Mutex};

/// Requests waiting, per user, and the order in which users take turns.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    /// Served before any user's (FUSE_INTERRUPT: the kernel's own
    /// priority), first come.
    urgent: VecDeque<T>,
    /// The users with requests waiting, the next to be served first; each
    /// with its requests, first come. A user whose queue empties leaves
    /// the ring; its next request puts it at the back.
    users: VecDeque<(u32, VecDeque<T>)>,
    len: usize,
}

impl<T> Default for Ring<T> {
    fn default() -> Self {
        Ring {
            urgent: VecDeque::new(),
            users: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> Ring<T> {
    /// Queues `item` of user `uid` (or ahead of every user's if `urgent`).
    pub(crate) fn push(&mut self, uid: u32, urgent: bool, item: T) {
        self.len += 1;
        if urgent {
            self.urgent.push_back(item);
        } else if let Some((_, q)) = self.users.iter_mut().find(|(u, _)| *u == uid) {
            q.push_back(item);
        } else {
            self.users.push_back((uid, VecDeque::from([item])));
        }
    }

    /// The next request: an urgent one, else the first of the user whose
    /// turn it is (who then goes to the back of the ring if it has more).
    pub(crate) fn pop(&mut self) -> Option<T> {
        let item = match self.urgent.pop_front() {
            Some(item) => item,
            None => {
                let (uid, mut q) = self.users.pop_front()?;
                let item = q.pop_front()?;
                if !q.is_empty() {
                    self.users.push_back((uid, q));
                }
                item
            }
        };
        self.len -= 1;
        Some(item)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[derive(Debug)]
struct State<T> {
    /// Each request with its length.
    ring: Ring<(T, usize)>,
    bytes: usize,
    /// No more requests come: servers take what is left, then stop.
    closed: bool,
}

/// The [`Ring`] between the receiving thread and the serving ones: at most
/// `max_len` requests or `max_bytes` bytes wait (one always may), else the
/// receiver waits for room and the kernel keeps the rest in its queue.
#[derive(Debug)]
pub(crate) struct Turns<T> {
    state: Mutex<State<T>>,
    work: Condvar,
    room: Condvar,
    max_len: usize,
    max_bytes: usize,
}

impl<T> Turns<T> {
    pub(crate) fn new(max_len: usize, max_bytes: usize) -> Self {
        Turns {
            state: Mutex::new(State {
                ring: Ring::default(),
                bytes: 0,
                closed: false,
            }),
            work: Condvar::new(),
            room: Condvar::new(),
            max_len,
            max_bytes,
        }
    }

    /// Queues `item` (`bytes` long) of `uid`, once there is room.
    pub(crate) fn push(&self, uid: u32, urgent: bool, item: T, bytes: usize) {
        let mut s = self.state.lock();
        while s.ring.len() > 0 && (s.ring.len() >= self.max_len || s.bytes + bytes > self.max_bytes)
        {
            self.room.wait(&mut s);
        }
        s.ring.push(uid, urgent, (item, bytes));
        s.bytes += bytes;
        drop(s);
        self.work.notify_one();
    }

    /// The next request, waiting for one; None once closed and empty.
    pub(crate) fn take(&self) -> Option<T> {
        let mut s = self.state.lock();
        loop {
            if let Some((item, bytes)) = s.ring.pop() {
                s.bytes -= bytes;
                drop(s);
                self.room.notify_one();
                return Some(item);
            }
            if s.closed {
                return None;
            }
            self.work.wait(&mut s);
        }
    }

    /// No more requests: every server takes what is left and stops.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn drain(r: &mut Ring<(u32, u32)>) -> Vec<(u32, u32)> {
        std::iter::from_fn(|| r.pop()).collect()
    }

    #[test]
    fn a_user_with_one_request_waits_at_most_one_of_each_other_users() {
        let mut r = Ring::default();
        for i in 0..100 {
            r.push(1000, false, (1000, i));
        }
        r.push(2000, false, (2000, 0));
        let order = drain(&mut r);
        // 1000's first came first; 2000's is next, not after 100.
        assert_eq!(order[0], (1000, 0));
        assert_eq!(order[1], (2000, 0));
        assert_eq!(order.len(), 101);
    }

    #[test]
    fn users_with_work_waiting_take_one_turn_each_in_order_of_arrival() {
        let mut r = Ring::default();
        for i in 0..3 {
            r.push(1, false, (1, i));
            r.push(1, false, (1, 10 + i));
        }
        r.push(2, false, (2, 0));
        r.push(3, false, (3, 0));
        r.push(3, false, (3, 1));
        let order = drain(&mut r);
        let users: Vec<u32> = order.iter().map(|(u, _)| *u).collect();
        assert_eq!(users, [1, 2, 3, 1, 3, 1, 1, 1, 1]);
        // Each user's own requests stay in the order they came.
        let ones: Vec<u32> = order.iter().filter(|(u, _)| *u == 1).map(|x| x.1).collect();
        assert_eq!(ones, [0, 10, 1, 11, 2, 12]);
    }

    #[test]
    fn a_user_who_comes_back_goes_to_the_back_of_the_ring() {
        let mut r = Ring::default();
        r.push(1, false, (1, 0));
        r.push(2, false, (2, 0));
        r.push(2, false, (2, 1));
        assert_eq!(r.pop(), Some((1, 0)));
        assert_eq!(r.pop(), Some((2, 0)));
        r.push(1, false, (1, 1));
        assert_eq!(r.pop(), Some((2, 1)));
        assert_eq!(r.pop(), Some((1, 1)));
        assert_eq!(r.pop(), None);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn interrupts_go_ahead_of_every_users_requests() {
        let mut r = Ring::default();
        r.push(1, false, (1, 0));
        r.push(0, true, (0, 99));
        assert_eq!(r.pop(), Some((0, 99)));
        assert_eq!(r.pop(), Some((1, 0)));
    }

    #[test]
    fn a_storm_of_one_user_leaves_every_other_user_each_turn() {
        // Served in steps while they keep coming: of every window of
        // requests served while user 2 has one waiting, user 2 gets at
        // least every second.
        let mut r = Ring::default();
        let mut served2 = 0;
        for step in 0..1000u32 {
            for k in 0..8 {
                r.push(1, false, (1, step * 8 + k));
            }
            if step % 4 == 0 {
                r.push(2, false, (2, step));
            }
            let a = r.pop().unwrap();
            let b = r.pop().unwrap();
            if a.0 == 2 || b.0 == 2 {
                served2 += 1;
            }
        }
        assert_eq!(served2, 250, "user 2 waited behind user 1's storm");
    }

    #[test]
    fn the_receiver_waits_for_room_and_servers_end_when_closed() {
        let t = Arc::new(Turns::new(2, 1 << 20));
        t.push(1, false, (1, 10), 10);
        t.push(1, false, (1, 10), 10);
        let t2 = t.clone();
        let pusher = std::thread::spawn(move || {
            // Full: waits until a server takes one.
            t2.push(2, false, (2, 10), 10);
            t2.close();
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!pusher.is_finished(), "pushed past the bound");
        assert_eq!(t.take(), Some((1, 10)));
        pusher.join().unwrap();
        // Closed: what is left is still served, then None.
        assert_eq!(t.take(), Some((1, 10)));
        assert_eq!(t.take(), Some((2, 10)));
        assert_eq!(t.take(), None);
    }

    #[test]
    fn one_request_bigger_than_the_byte_bound_is_taken_when_alone() {
        let t = Turns::new(8, 100);
        t.push(1, false, (1, 1000), 1000);
        assert_eq!(t.take(), Some((1, 1000)));
    }
}
