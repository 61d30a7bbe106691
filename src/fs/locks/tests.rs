//! Unit tests of the locks taken for each owner.

use super::waits::{room_for, FEW_WAITS, KEPT_WAITS, MAX_WAITS, WAITS_PER_USER};
use super::*;
use std::sync::mpsc;

fn locks() -> Locks {
    Locks::block_wake_signal().unwrap();
    let shares = Shares::new(crate::fs::state::share::Policy::new(1 << 16, 0));
    Locks::new(Arc::default(), shares)
}

fn asker(owner: u64, fh: u64, unique: u64) -> Asker {
    Asker {
        ino: 7,
        fh,
        owner,
        uid: 1000,
        pid: 4242,
        unique,
    }
}

fn file(dir: &tempfile::TempDir) -> File {
    let p = dir.path().join("f");
    std::fs::write(&p, b"0123456789").unwrap();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap()
}

fn set(
    l: &Locks,
    a: Asker,
    kind: Kind,
    f: &File,
    r: Range,
    typ: i32,
    sleep: bool,
) -> mpsc::Receiver<Result<()>> {
    let (tx, rx) = mpsc::channel();
    let want = Want {
        kind,
        range: r,
        typ,
        sleep,
    };
    l.set(a, want, f, move |r| {
        let _ = tx.send(r);
    });
    rx
}

const ALL: Range = Range {
    start: 0,
    end: sys::lock::OFFSET_MAX,
};

#[test]
fn owners_exclude_each_other_and_flush_releases_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir);
    let l = locks();
    let r = Range { start: 0, end: 4 };
    let got = set(
        &l,
        asker(1, 10, 1),
        Kind::Record,
        &f,
        r,
        libc::F_WRLCK,
        false,
    );
    assert!(got.recv().unwrap().is_ok());
    let got = set(
        &l,
        asker(2, 11, 2),
        Kind::Record,
        &f,
        r,
        libc::F_RDLCK,
        false,
    );
    assert_eq!(got.recv().unwrap().unwrap_err().code(), libc::EAGAIN);
    let c = l
        .test(asker(2, 11, 3), &f, ALL, libc::F_RDLCK)
        .unwrap()
        .unwrap();
    assert_eq!((c.range, c.pid), (r, 4242));
    // Owner 1 closes some descriptor of the file: its locks go.
    l.flush(7, 1);
    let got = set(
        &l,
        asker(2, 11, 4),
        Kind::Record,
        &f,
        r,
        libc::F_RDLCK,
        false,
    );
    assert!(got.recv().unwrap().is_ok());
}

/// A flush clears the owner's locks at once, even while a request that
/// took one still holds the holder (it drops it after its reply, and the
/// owner's close can come in between: a load-dependent failure of
/// `tests/locks.rs`'s passthrough case before).
#[test]
fn flush_and_release_clear_locks_a_late_reference_still_holds() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir);
    let l = locks();
    let r = Range { start: 0, end: 4 };
    for (kind, owner, fh) in [(Kind::Record, 1, 10), (Kind::Flock, 0, 12)] {
        let got = set(&l, asker(owner, fh, 1), kind, &f, r, libc::F_WRLCK, false);
        assert!(got.recv().unwrap().is_ok());
        let late = l
            .table
            .find(7, kind, if kind == Kind::Flock { fh } else { owner })
            .expect("the holder");
        if kind == Kind::Record {
            l.flush(7, owner);
        } else {
            l.release(7, fh);
        }
        let other = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        let free = match kind {
            Kind::Record => sys::lock::ofd_setlk(&other, r, libc::F_WRLCK, false),
            Kind::Flock => sys::lock::flock(&other, libc::F_WRLCK, false),
        };
        assert!(
            free.is_ok(),
            "{kind:?}: the lock outlived its owner's close: {free:?}"
        );
        let _ = match kind {
            Kind::Record => sys::lock::ofd_setlk(&other, r, libc::F_UNLCK, false),
            Kind::Flock => sys::lock::flock(&other, libc::F_UNLCK, false),
        };
        drop(late);
    }
}

#[test]
fn a_wait_is_granted_when_the_holder_lets_go_and_can_be_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir);
    let l = locks();
    let got = set(
        &l,
        asker(1, 10, 1),
        Kind::Flock,
        &f,
        ALL,
        libc::F_WRLCK,
        false,
    );
    assert!(got.recv().unwrap().is_ok());
    let waiting = set(
        &l,
        asker(2, 11, 2),
        Kind::Flock,
        &f,
        ALL,
        libc::F_WRLCK,
        true,
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(waiting.try_recv().is_err(), "granted while held");
    l.release(7, 10);
    let r = waiting.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(r.is_ok());
    // Now 11 holds it: a third waits, and is interrupted.
    let third = set(
        &l,
        asker(3, 12, 3),
        Kind::Flock,
        &f,
        ALL,
        libc::F_RDLCK,
        true,
    );
    std::thread::sleep(Duration::from_millis(50));
    l.interrupt(3);
    let r = third.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.unwrap_err().code(), libc::EINTR);
    assert!(l.waits.state.lock().by_unique.is_empty());
    // An interrupt that overtakes its request still ends it.
    l.interrupt(4);
    let fourth = set(
        &l,
        asker(4, 13, 4),
        Kind::Flock,
        &f,
        ALL,
        libc::F_RDLCK,
        true,
    );
    let r = fourth.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(r.unwrap_err().code(), libc::EINTR);
}

/// Each owner's holder is a descriptor in its user's share: one user
/// locking as many owners as it likes stops at its share (ENOLCK),
/// another still locks, and released holders give their place back.
#[test]
fn holders_count_in_their_users_share() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir);
    Locks::block_wake_signal().unwrap();
    let shares = Shares::new(crate::fs::state::share::Policy::new(40, 0));
    let share = shares.policy().share;
    let l = Locks::new(Arc::default(), shares.clone());
    let mut got = 0;
    for owner in 0..2 * share as u64 {
        // Shared locks on one byte each: no conflict between owners.
        let r = Range {
            start: owner,
            end: owner,
        };
        let a = asker(1 + owner, 10, 1 + owner);
        match set(&l, a, Kind::Record, &f, r, libc::F_RDLCK, false).recv() {
            Ok(Ok(())) => got += 1,
            Ok(Err(e)) => {
                assert_eq!(e.code(), libc::ENOLCK);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(got, share, "one user's holders stop at its share");
    let mut other = asker(5000, 11, 5000);
    other.uid = 1001;
    let r = set(&l, other, Kind::Record, &f, ALL, libc::F_RDLCK, false);
    assert!(r.recv().unwrap().is_ok(), "another user still locks");
    // The first user's handle goes: its holders and their places too.
    l.release(7, 10);
    assert_eq!(shares.held_by(1000), 0);
    let a = asker(9999, 12, 9999);
    let r = set(&l, a, Kind::Flock, &f, ALL, libc::F_RDLCK, false);
    assert!(r.recv().unwrap().is_ok());
}

/// The last places are kept for users who wait for few locks: four
/// users at their limit leave room for others.
#[test]
fn the_last_waiting_places_are_kept_for_users_with_few() {
    let heavy_fill = 4 * WAITS_PER_USER;
    assert_eq!(heavy_fill, MAX_WAITS, "four users at their limit fill it");
    // A heavy user stops where the kept places begin...
    assert!(room_for(WAITS_PER_USER - 1, MAX_WAITS - KEPT_WAITS - 1));
    assert!(!room_for(FEW_WAITS, MAX_WAITS - KEPT_WAITS));
    // ...a user with few still gets one, up to the very last...
    assert!(room_for(0, MAX_WAITS - KEPT_WAITS));
    assert!(room_for(FEW_WAITS - 1, MAX_WAITS - 1));
    assert!(!room_for(0, MAX_WAITS));
    // ...and nobody beyond their own limit.
    assert!(!room_for(WAITS_PER_USER, 0));
}

#[test]
fn one_user_cannot_take_every_waiting_thread() {
    let dir = tempfile::tempdir().unwrap();
    let f = file(&dir);
    let l = locks();
    let got = set(
        &l,
        asker(1, 10, 1),
        Kind::Record,
        &f,
        ALL,
        libc::F_WRLCK,
        false,
    );
    assert!(got.recv().unwrap().is_ok());
    let mut waiting = Vec::new();
    for i in 0..WAITS_PER_USER as u64 {
        waiting.push(set(
            &l,
            asker(100 + i, 10, 100 + i),
            Kind::Record,
            &f,
            ALL,
            libc::F_WRLCK,
            true,
        ));
    }
    let over = set(
        &l,
        asker(999, 10, 999),
        Kind::Record,
        &f,
        ALL,
        libc::F_WRLCK,
        true,
    );
    assert_eq!(over.recv().unwrap().unwrap_err().code(), libc::ENOLCK);
    // Another user still gets a waiter.
    let mut other = asker(1000, 10, 1000);
    other.uid = 1001;
    let theirs = set(&l, other, Kind::Record, &f, ALL, libc::F_WRLCK, true);
    std::thread::sleep(Duration::from_millis(50));
    assert!(theirs.try_recv().is_err());
    for i in 0..WAITS_PER_USER as u64 {
        l.interrupt(100 + i);
    }
    l.interrupt(1000);
    for w in waiting {
        assert_eq!(
            w.recv_timeout(Duration::from_secs(10))
                .unwrap()
                .unwrap_err()
                .code(),
            libc::EINTR
        );
    }
    assert!(theirs
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .is_err());
}
