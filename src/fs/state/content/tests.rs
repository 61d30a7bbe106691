//! Unit tests of what the mount knows of a file's content.

use super::index_cache::index_cost;
use super::*;

fn stamp(n: u64) -> Stamp {
    Stamp {
        dev: 1,
        ino: n,
        size: 0,
        mtime: (0, 0),
        ctime: (0, 0),
    }
}

/// An index with growth in every block, so it costs real memory.
fn dense_index(blocks: usize) -> Arc<OffsetIndex> {
    let mut disk = Vec::new();
    for _ in 0..blocks {
        let mut unit = [0u8; 8];
        let n = cutf8::unit::encode_disk(0x800, &mut unit).unwrap(); // grows by one
        disk.extend_from_slice(&unit[..n]);
        disk.resize(disk.len() + 4096 - n, b'a');
    }
    Arc::new(OffsetIndex::from_bytes(&disk))
}

/// A file's classification never waits for another file's, whatever
/// their inode numbers (the striped locks it replaced made 1 of 64
/// pairs wait); a second caller for the same file waits its turn.
#[test]
fn a_scan_turn_is_the_files_own() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let turns = Arc::new(ScanTurns::default());
    let base = 0x5CA0_0000_0000u64;
    let held = turns.take(base);
    let others = std::thread::spawn({
        let turns = turns.clone();
        move || {
            for ino in base + 1..base + 1000 {
                drop(turns.take(ino));
            }
        }
    });
    let t = std::time::Instant::now();
    while !others.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "another file's classification waited for this one's"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    others.join().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let second = {
        let (done, turns) = (done.clone(), turns.clone());
        std::thread::spawn(move || {
            let _t = turns.take(base);
            done.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !done.load(Ordering::SeqCst),
        "two turns of one file at once"
    );
    drop(held);
    second.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    assert!(
        !turns.busy.lock().contains(&base),
        "a finished turn is kept"
    );
}

#[test]
fn cache_stays_within_its_bound_and_evicts_least_recently_used() {
    let one = index_cost(&dense_index(64));
    let cache = IndexCache::new(one * 3 + one / 2);
    for n in 0..3 {
        cache.put(stamp(n), dense_index(64));
    }
    assert!(cache.get(&stamp(0)).is_some()); // 0 is now the most recent
    cache.put(stamp(3), dense_index(64));
    assert!(
        cache.get(&stamp(1)).is_none(),
        "least recently used evicted"
    );
    assert!(cache.get(&stamp(0)).is_some());
    assert!(cache.get(&stamp(3)).is_some());
    assert!(cache.inner.lock().used <= one * 3 + one / 2);
}

/// One state per file is kept: a newer one replaces the older (which
/// nothing asks for again), and a file deleted through the mount takes
/// its index with it; the memory count follows.
#[test]
fn a_files_newer_state_replaces_the_older_and_a_deleted_file_goes() {
    let cache = IndexCache::new(1 << 30);
    let old = stamp(7);
    let new = Stamp { size: 9, ..old };
    cache.put(old, dense_index(16));
    cache.put(stamp(8), dense_index(16));
    cache.put(new, dense_index(16));
    assert!(cache.get(&old).is_none(), "the older state kept");
    assert!(cache.get(&new).is_some());
    let one = cache.inner.lock().used / 2;
    cache.forget_file(1, 7);
    assert!(cache.get(&new).is_none());
    assert!(cache.get(&stamp(8)).is_some());
    assert_eq!(cache.inner.lock().used, one);
    cache.forget_file(1, 8);
    let c = cache.inner.lock();
    assert_eq!(
        (c.used, c.map.len(), c.lru.len(), c.by_file.len()),
        (0, 0, 0, 0)
    );
}

#[test]
fn an_index_larger_than_the_bound_is_not_kept() {
    let cache = IndexCache::new(64);
    cache.put(stamp(1), dense_index(64));
    assert!(cache.get(&stamp(1)).is_none());
    assert_eq!(cache.inner.lock().used, 0);
}

#[test]
fn an_index_taken_for_a_change_is_the_kept_one_not_a_copy() {
    // As after a write: the open file's state and the cache hold it,
    // and `now` found it.
    let cache = IndexCache::new(1 << 30);
    let mut content = Content::default();
    let kept = dense_index(64);
    assert_eq!(kept.parts().3.len(), 64);
    let steps = kept.parts().3.as_ptr();
    cache.put(stamp(1), kept.clone());
    content.view = Some((stamp(1), kept));
    let found = content.view.as_ref().unwrap().1.clone();
    let owned = take_index(&mut content, &cache, &stamp(1), found);
    assert_eq!(owned.parts().3.as_ptr(), steps, "copied");
    assert!(content.view.is_none());
    assert!(cache.get(&stamp(1)).is_none());
    // Someone else holding it (a stat at that moment): a copy, and the
    // other holder's index is untouched.
    let other = Arc::new(owned);
    let mut copy = take_index(&mut content, &cache, &stamp(1), other.clone());
    assert_ne!(copy.parts().3.as_ptr(), steps);
    assert_eq!(copy, *other);
    copy.apply_tail(0, 0, OffsetIndex::default());
    assert_ne!(copy, *other);
}

#[test]
fn carrying_an_index_to_a_new_stamp_moves_it() {
    let cache = IndexCache::new(1 << 30);
    let st = OpenFile::new();
    let seen = Mutex::new(KnownContent::default());
    let mut content = Content::default();
    let index = dense_index(8);
    cache.put(stamp(1), index.clone());
    content.view = Some((stamp(1), index));
    let mut new = stamp(1);
    new.ctime = (1, 0);
    st.carry(&mut content, &seen, &cache, stamp(1), new);
    assert!(
        cache.get(&stamp(1)).is_none(),
        "the old stamp's entry stays"
    );
    let (s, index) = content.view.take().unwrap();
    assert_eq!(s, new);
    drop(cache.remove(&new));
    assert!(Arc::try_unwrap(index).is_ok(), "a reference left behind");
}

/// A stamp of the same inode at another moment.
fn later(n: i64) -> Stamp {
    let mut s = stamp(1);
    s.mtime = (n, 0);
    s.ctime = (n, 5);
    s
}

#[test]
fn class_and_open_stamps_are_per_stamp() {
    let mut st = KnownContent::default();
    assert_eq!(st.class(&later(1)), None);
    st.remember(later(1), Class::Raw);
    assert_eq!(st.class(&later(1)), Some(Class::Raw));
    assert_eq!(st.class(&later(2)), None);
    assert!(!st.opened_at(later(1)));
    assert!(st.opened_at(later(1)));
    // Learning the class at the same stamp keeps the open.
    st.remember(later(1), Class::Raw);
    assert!(st.opened_at(later(1)));
    assert!(!st.opened_at(later(2)));
    assert_eq!(st.class(&later(1)), None, "one stamp at a time");
    let c = Class::Corrected {
        view_len: 12345,
        lossless: false,
    };
    st.remember(later(2), c);
    assert_eq!(st.class(&later(2)), Some(c));
    assert!(st.opened_at(later(2)), "the open at this stamp is kept");
    st.forget();
    assert_eq!(st.class(&later(2)), None);
    assert!(!st.opened_at(later(2)));
}

/// Times a record cannot hold exactly are never recorded, so two
/// stamps never share one; a metadata change carries the class only.
#[test]
fn seen_records_only_what_it_can_hold_exactly() {
    let mut st = KnownContent::default();
    let mut far = stamp(1);
    far.mtime = (i64::MAX / 2, 0);
    st.remember(far, Class::Raw);
    assert_eq!(st.class(&far), None);
    let mut odd = stamp(1);
    odd.ctime = (0, 1_000_000_000);
    assert!(!st.opened_at(odd) && !st.opened_at(odd));
    let huge = Class::Corrected {
        view_len: 1 << 60,
        lossless: true,
    };
    st.remember(later(3), huge);
    assert_eq!(st.class(&later(3)), None);
    st.remember(later(3), Class::Raw);
    st.opened_at(later(3));
    st.carry(&later(3), &later(4));
    assert_eq!(st.class(&later(4)), Some(Class::Raw));
    assert!(!st.opened_at(later(4)), "the page cache is not carried");
    assert!(std::mem::size_of::<KnownContent>() <= 32);
}
