//! The cache directory of index databases (trees whose own place cannot
//! hold one: read-only, `-o ro`, a refused `.cutf8fs-index`): every daemon,
//! as it starts, removes the databases of trees that are gone, those
//! unused for `index_db_cache_days`, and the least recently used beyond
//! `index_db_cache_max`; never a mounted tree's, never a file not ours.
//! Each test has a cache directory of its own (`CUTF8FS_CACHE_DIR`).

use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::support::mount::{enc, Mount};

const DAY: Duration = Duration::from_secs(86_400);

/// The cache database's file name for BACKING `tree`, as the daemon
/// makes it (FNV-1a of the path).
fn name_for(tree: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in tree.as_os_str().as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let base: String = tree
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    format!("index-{base}-{h:016x}.sqlite")
}

/// Sets `p`'s mtime `age` ago.
fn age(p: &Path, age: Duration) {
    let f = File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

/// A database of ours for `tree` in `cache` (an SQLite header with our
/// application id, `bytes` long) and its tree file, last used `ago`.
fn entry(cache: &Path, tree: &Path, bytes: usize, ago: Duration) -> PathBuf {
    let mut v = b"SQLite format 3\0".to_vec();
    v.resize(68, 0);
    v.extend(0x6375_3869u32.to_be_bytes());
    v.resize(bytes, 0);
    let db = cache.join(name_for(tree));
    fs::write(&db, v).unwrap();
    let tree_file = PathBuf::from(format!("{}-tree", db.display()));
    fs::write(&tree_file, tree.as_os_str().as_bytes()).unwrap();
    age(&db, ago);
    age(&tree_file, ago);
    db
}

/// A private cache directory (mode 0700, as the daemon wants it).
fn cache_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("cutf8fs-cache-")
        .tempdir()
        .unwrap();
    let c = d.path().join("cache");
    fs::create_dir(&c).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&c, fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// Starts (and stops) a daemon on a fresh tree of its own with `opts`
/// and the cache directory `cache`; returns its log.
fn start_one(cache: &Path, opts: &[&str]) -> String {
    let d = Mount::with(opts)
        .env("CUTF8FS_CACHE_DIR", cache.to_str().unwrap())
        .fresh(|_| {});
    let log = d.log_text();
    drop(d);
    log
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_tree_unmounted_and_deleted_leaves_no_cache_file_after_the_next_start() {
    let tmp = cache_dir();
    let cache = tmp.path().join("cache");
    let tree = tmp.path().join("gone");
    fs::create_dir(&tree).unwrap();
    let mut v = cutf8::MAGIC.to_vec();
    for i in 0..200_000u32 {
        v.extend(enc(0x800 + i % 0xA0));
    }
    fs::write(tree.join("f"), v).unwrap();
    // Older than the racy margin (300 ms), so its index is kept: a time
    // window, so time passing is the event itself.
    std::thread::sleep(Duration::from_millis(400));
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let d = Mount::with(&["ro"])
        .env("CUTF8FS_CACHE_DIR", cache.to_str().unwrap())
        .env("CUTF8FS_RACY_MARGIN_MS", "300")
        .on(&tree, &mnt, &tmp.path().join("gone.log"));
    fs::metadata(d.m("f")).unwrap();
    drop(d);
    let ours = name_for(&tree);
    assert!(
        names(&cache).contains(&ours),
        "the read-only mount kept its database in the cache directory: {:?}",
        names(&cache)
    );
    fs::remove_dir_all(&tree).unwrap();
    let log = start_one(&cache, &[]);
    let left: Vec<String> = names(&cache)
        .into_iter()
        .filter(|n| n.starts_with(&ours))
        .collect();
    assert!(
        left.is_empty(),
        "left after the next start: {left:?}\n{log}"
    );
    assert!(log.contains("is gone"), "the removal is logged:\n{log}");
}

#[test]
fn a_cache_beyond_its_bound_is_trimmed_oldest_first() {
    let tmp = cache_dir();
    let cache = tmp.path().join("cache");
    let trees: Vec<PathBuf> = (0..3).map(|i| tmp.path().join(format!("t{i}"))).collect();
    for (i, t) in trees.iter().enumerate() {
        fs::create_dir(t).unwrap();
        // t0 used 3 days ago, t1 2 days ago, t2 yesterday.
        entry(&cache, t, 1 << 20, DAY * (3 - i as u32));
    }
    let log = start_one(&cache, &["index_db_cache_max=2500k"]);
    let left = names(&cache);
    assert!(
        !left.iter().any(|n| n.starts_with(&name_for(&trees[0]))),
        "the least recently used went: {left:?}\n{log}"
    );
    for t in &trees[1..] {
        assert!(
            left.contains(&name_for(t)),
            "{} kept: {left:?}\n{log}",
            t.display()
        );
    }
    // A bound that holds two still: nothing more goes.
    start_one(&cache, &["index_db_cache_max=2500k"]);
    assert_eq!(names(&cache), left);
}

#[test]
fn an_expired_entry_goes_and_a_recent_one_stays() {
    let tmp = cache_dir();
    let cache = tmp.path().join("cache");
    let (old, new) = (tmp.path().join("old"), tmp.path().join("new"));
    fs::create_dir(&old).unwrap();
    fs::create_dir(&new).unwrap();
    entry(&cache, &old, 4096, DAY * 91);
    entry(&cache, &new, 4096, DAY * 89);
    let log = start_one(&cache, &[]);
    let left = names(&cache);
    assert!(
        !left.iter().any(|n| n.starts_with(&name_for(&old))),
        "unused for 91 days went (default 90): {left:?}\n{log}"
    );
    assert!(left.contains(&name_for(&new)), "{left:?}\n{log}");
    start_one(&cache, &["index_db_cache_days=30"]);
    assert!(
        names(&cache).is_empty(),
        "-o index_db_cache_days=30: {:?}",
        names(&cache)
    );
}

#[test]
fn files_in_the_cache_that_are_not_ours_are_left_alone() {
    let tmp = cache_dir();
    let cache = tmp.path().join("cache");
    let gone = tmp.path().join("gone");
    let long_ago = DAY * 400;
    // Names not ours.
    fs::write(cache.join("notes.txt"), "mine").unwrap();
    fs::write(cache.join("index-x-0123456789abcdef.sqlite.bak"), "mine").unwrap();
    // Our name, but not an SQLite database of ours.
    fs::write(
        cache.join("index-other-0123456789abcdef.sqlite"),
        "from source",
    )
    .unwrap();
    let mut sqlite = b"SQLite format 3\0".to_vec();
    sqlite.resize(4096, 0);
    fs::write(cache.join("index-foreign-0123456789abcdef.sqlite"), &sqlite).unwrap();
    // Ours, for a tree that is gone, but a companion is another user's.
    let theirs = entry(&cache, &gone, 4096, long_ago);
    let wal = PathBuf::from(format!("{}-wal", theirs.display()));
    fs::write(&wal, "x").unwrap();
    std::os::unix::fs::chown(&wal, Some(65534), Some(65534)).unwrap();
    // Ours, for a tree that is gone, but a symbolic link.
    let target = tmp.path().join("target.sqlite");
    fs::write(&target, &sqlite).unwrap();
    let other_gone = tmp.path().join("gone2");
    std::os::unix::fs::symlink(&target, cache.join(name_for(&other_gone))).unwrap();
    // Ours, for a tree that is gone, with a second link.
    let linked = entry(&cache, &tmp.path().join("gone3"), 4096, long_ago);
    fs::hard_link(&linked, tmp.path().join("second-name")).unwrap();
    for n in names(&cache) {
        let p = cache.join(&n);
        if !p.is_symlink() {
            age(&p, long_ago);
        }
    }
    let before = names(&cache);
    let log = start_one(&cache, &["index_db_cache_max=1", "index_db_cache_days=1"]);
    assert_eq!(names(&cache), before, "{log}");
    assert_eq!(fs::read(&target).unwrap(), sqlite);
}

#[test]
fn a_mounted_trees_entry_stays_however_old() {
    let tmp = cache_dir();
    let cache = tmp.path().join("cache");
    let tree = tmp.path().join("mounted");
    fs::create_dir(&tree).unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let d = Mount::with(&["ro"])
        .env("CUTF8FS_CACHE_DIR", cache.to_str().unwrap())
        .on(&tree, &mnt, &tmp.path().join("mounted.log"));
    let db = entry(&cache, &tree, 4096, DAY * 400);
    let log = start_one(&cache, &["index_db_cache_max=1"]);
    assert!(db.exists(), "{log}");
    drop(d);
    start_one(&cache, &["index_db_cache_max=1"]);
    assert!(!db.exists(), "once unmounted, beyond the bound it goes");
}
