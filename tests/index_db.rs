//! The persistent index database. A mount learns a corrected
//! file's view length by reading it once; the next mount of the same
//! BACKING takes it from the database instead — but never for a file that
//! changed since, however the change hid itself (same size, same mtime,
//! rename, tar restore, inode reuse), and never from a database that is
//! damaged, foreign, busy or planted by BACKING's owner.
//!
//! Every check runs through a fresh mount of the same BACKING (the kernel
//! caches nothing across mounts). Whether the database was used is read
//! from the daemon's own `/proc/PID/io` (`rchar`, bytes its read calls
//! returned): a file served from the database is not read.

use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::mount::{enc, expected_view, Mount};
use crate::support::users::{sh_as, user};

const DB_DIR: &str = ".cutf8fs-index";
const DB_FILE: &str = ".cutf8fs-index/index.sqlite";

/// The racy margin the daemons and `cutf8 migrate` of these tests use
/// (`CUTF8FS_RACY_MARGIN_MS`; 2.1 s by default), far above any timestamp
/// tick of the filesystems the tests run on.
const MARGIN_MS: u64 = 300;

/// Waits out [`MARGIN_MS`] since whatever the test changed last: a scan
/// after this stores its result (a time window: time passing is the
/// event itself).
fn settle() {
    std::thread::sleep(Duration::from_millis(MARGIN_MS + 50));
}

/// `cutf8` with this file's racy margin.
fn cutf8_cmd() -> Command {
    let mut c = Command::new(crate::support::cli::BIN);
    c.env("CUTF8FS_RACY_MARGIN_MS", MARGIN_MS.to_string());
    c
}

/// `n` units that grow in the view (2 disk bytes, 3 view bytes each).
fn growing(n: usize) -> Vec<u8> {
    let mut v = cutf8::MAGIC.to_vec();
    for i in 0..n {
        v.extend(enc(0x800 + (i as u32 % 0xA0)));
    }
    v
}

/// Same disk size as `growing(n)`, a different view length.
fn flat(n: usize) -> Vec<u8> {
    let mut v = cutf8::MAGIC.to_vec();
    v.resize(8 + 2 * n, b'x');
    v
}

// ---------------------------------------------------------------- daemon

/// The one mount guard of the harness.
type Daemon = Mount;

/// A BACKING that is mounted again and again, each time on a fresh
/// mount point.
struct Env {
    dir: tempfile::TempDir,
    backing: PathBuf,
    n: std::cell::Cell<u32>,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("cutf8fs-idb-")
            .tempdir()
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let backing = dir.path().join("backing");
        fs::create_dir(&backing).unwrap();
        Env {
            dir,
            backing,
            n: std::cell::Cell::new(0),
        }
    }

    fn b(&self, rel: &str) -> PathBuf {
        self.backing.join(rel)
    }

    fn mount(&self, opts: &[&str]) -> Daemon {
        self.mount_at(&self.backing, opts)
    }

    fn mount_at(&self, backing: &Path, opts: &[&str]) -> Daemon {
        self.n.set(self.n.get() + 1);
        let mnt = self.dir.path().join(format!("mnt{}", self.n.get()));
        fs::create_dir(&mnt).unwrap();
        let log = mnt.with_extension("log");
        Mount::with(opts)
            .env("CUTF8FS_RACY_MARGIN_MS", &MARGIN_MS.to_string())
            .on(backing, &mnt, &log)
    }
}

/// Every name's size through the mount is its view's length, and (for
/// `read`) its bytes are the view.
fn check_sizes(d: &Daemon, backing: &Path, names: &[&str], read: bool) {
    for name in names {
        let disk = fs::read(backing.join(name)).unwrap();
        let want = expected_view(&disk);
        let size = fs::metadata(d.m(name)).unwrap().len();
        assert_eq!(
            size,
            want.len() as u64,
            "{name}: size through the mount is not its view's length"
        );
        if read {
            assert!(fs::read(d.m(name)).unwrap() == want, "{name}: wrong bytes");
        }
    }
}

/// Stats `names` through a fresh mount; returns the bytes the daemon read.
fn stat_all(d: &Daemon, names: &[&str]) -> u64 {
    let before = d.rchar();
    for name in names {
        fs::metadata(d.m(name)).unwrap();
    }
    d.rchar() - before
}

// ---------------------------------------------------------------- tests

#[test]
fn the_next_mount_takes_sizes_from_the_database_and_reads_nothing() {
    let env = Env::new();
    let names = ["a", "b", "c", "d"];
    for (i, n) in names.iter().enumerate() {
        fs::write(env.b(n), growing(200_000 + i * 1000)).unwrap();
    }
    let total: u64 = names
        .iter()
        .map(|n| fs::metadata(env.b(n)).unwrap().len())
        .sum();
    settle();
    {
        let d = env.mount(&[]);
        let read = stat_all(&d, &names);
        assert!(
            read >= total,
            "the first mount reads every file ({read} bytes)"
        );
        check_sizes(&d, &env.backing, &names, false);
        let listed: Vec<_> = fs::read_dir(&d.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !listed
                .iter()
                .any(|n| n.to_string_lossy().starts_with(".cutf8fs-")),
            "the database shows through the mount: {listed:?}"
        );
    }
    let st = fs::symlink_metadata(env.b(DB_FILE)).expect("the database is in BACKING");
    assert!(st.is_file() && st.mode() & 0o077 == 0 && st.uid() == 0);
    let d = env.mount(&[]);
    let read = stat_all(&d, &names);
    assert!(
        read < total / 8,
        "the second mount read {read} bytes of {total} to size files the database knows"
    );
    check_sizes(&d, &env.backing, &names, true);
}

#[test]
fn a_changed_file_is_never_served_with_its_old_size() {
    let env = Env::new();
    let n = 50_000;
    let names = ["inplace", "touch_r", "renamed", "tar", "reused", "link1"];
    for name in names {
        fs::write(env.b(name), growing(n)).unwrap();
    }
    fs::hard_link(env.b("link1"), env.b("link2")).unwrap();
    settle();
    {
        let d = env.mount(&[]);
        check_sizes(&d, &env.backing, &names, false);
    }
    assert!(env.b(DB_FILE).exists());
    let mtime = |name: &str| fs::metadata(env.b(name)).unwrap().modified().unwrap();
    let set_mtime = |name: &str, t| {
        File::options()
            .write(true)
            .open(env.b(name))
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    // Rewritten in place: same size, within the same second.
    fs::write(env.b("inplace"), flat(n)).unwrap();
    // Rewritten, then the old mtime put back (touch -r).
    let old = mtime("touch_r");
    fs::write(env.b("touch_r"), flat(n)).unwrap();
    set_mtime("touch_r", old);
    assert_eq!(mtime("touch_r"), old);
    // Replaced by rename, the new file given the old one's mtime.
    let old = mtime("renamed");
    fs::write(env.b("renamed.new"), flat(n)).unwrap();
    set_mtime("renamed.new", old);
    fs::rename(env.b("renamed.new"), env.b("renamed")).unwrap();
    // Restored from a tar whose copy has the same size and mtime.
    let stage = env.dir.path().join("stage");
    fs::create_dir(&stage).unwrap();
    fs::write(stage.join("tar"), flat(n)).unwrap();
    File::options()
        .write(true)
        .open(stage.join("tar"))
        .unwrap()
        .set_modified(mtime("tar"))
        .unwrap();
    let tarball = env.dir.path().join("t.tar");
    let ok = Command::new("tar")
        .arg("--format=posix")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&stage)
        .arg("tar")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&env.backing)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(
        mtime("tar"),
        fs::metadata(stage.join("tar")).unwrap().modified().unwrap()
    );
    // Deleted and created again (the inode number is often reused).
    let old = mtime("reused");
    fs::remove_file(env.b("reused")).unwrap();
    fs::write(env.b("reused"), flat(n)).unwrap();
    set_mtime("reused", old);
    // Changed through its other hard link.
    let old = mtime("link2");
    fs::write(env.b("link2"), flat(n)).unwrap();
    set_mtime("link2", old);
    for name in names {
        assert_eq!(fs::metadata(env.b(name)).unwrap().len(), 8 + 2 * n as u64);
    }
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &names, true);
    check_sizes(&d, &env.backing, &["link2"], true);
}

#[test]
fn a_damaged_database_costs_one_log_line_and_is_rebuilt() {
    let env = Env::new();
    let names = ["a", "b"];
    fs::write(env.b("a"), growing(100_000)).unwrap();
    fs::write(env.b("b"), growing(90_000)).unwrap();
    settle();
    check_sizes(&env.mount(&[]), &env.backing, &names, false);
    let len = fs::metadata(env.b(DB_FILE)).unwrap().len();
    // Garbage of the same length after SQLite's header (which holds the
    // application id that makes the file ours), then a database cut short.
    for damage in ["garbage", "truncated"] {
        match damage {
            "garbage" => {
                let mut bytes = fs::read(env.b(DB_FILE)).unwrap();
                bytes[SQLITE_HEADER..].fill(0xA5);
                fs::write(env.b(DB_FILE), bytes).unwrap();
            }
            _ => {
                drop(env.mount(&[]).m("a").metadata());
                let db_len = fs::metadata(env.b(DB_FILE)).unwrap().len();
                File::options()
                    .write(true)
                    .open(env.b(DB_FILE))
                    .unwrap()
                    .set_len(db_len / 2)
                    .unwrap();
            }
        }
        let d = env.mount(&[]);
        check_sizes(&d, &env.backing, &names, true);
        drop(d);
    }
    // Rebuilt: the next mount reads nothing again.
    let d = env.mount(&[]);
    let read = stat_all(&d, &names);
    assert!(
        read < 100_000,
        "the rebuilt database was not used ({read} bytes read)"
    );
    let logs: String = (1..=env.n.get())
        .map(|i| fs::read_to_string(env.dir.path().join(format!("mnt{i}.log"))).unwrap())
        .collect();
    assert!(
        logs.matches("is damaged").count() >= 1,
        "no log line says the database was damaged:\n{logs}"
    );

    // Garbage over the header too: not a database, whatever its mode (the
    // daemon's 0600): left as it is, and the mount serves without it.
    drop(d);
    let garbage = vec![0xA5u8; len as usize];
    fs::write(env.b(DB_FILE), &garbage).unwrap();
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &names, true);
    let log = d.log_text();
    drop(d);
    assert!(
        fs::read(env.b(DB_FILE)).unwrap() == garbage,
        "a file without SQLite's header was rewritten:\n{log}"
    );
    assert!(log.contains("not a database"), "{log}");
}

/// The length of SQLite's database header at the start of its file.
const SQLITE_HEADER: usize = 100;

#[test]
fn a_database_from_another_backing_is_emptied_not_trusted() {
    let one = Env::new();
    let two = Env::new();
    // Same names, same sizes, different views.
    fs::write(one.b("f"), growing(80_000)).unwrap();
    fs::write(two.b("f"), flat(80_000)).unwrap();
    settle();
    drop(one.mount(&[]).m("f").metadata());
    assert!(one.b(DB_FILE).exists());
    fs::create_dir(two.b(DB_DIR)).unwrap();
    fs::set_permissions(two.b(DB_DIR), fs::Permissions::from_mode(0o700)).unwrap();
    fs::copy(one.b(DB_FILE), two.b(DB_FILE)).unwrap();
    let d = two.mount(&[]);
    check_sizes(&d, &two.backing, &["f"], true);
    assert!(
        d.log_text().contains("belongs to another BACKING"),
        "{}",
        d.log_text()
    );
    drop(d);
    // Through -o index_db= too: BACKING one's database, mounted on two.
    let path = format!("index_db={}", one.b(DB_FILE).display());
    let d = two.mount(&[&path]);
    check_sizes(&d, &two.backing, &["f"], true);
    drop(d);
    let d = one.mount(&[]);
    check_sizes(&d, &one.backing, &["f"], true);
}

/// Another program's SQLite database under the database's name (another
/// application id): the mount serves without it, says so in one line
/// naming the file, and leaves the file byte for byte as it was, at the
/// start and at the unmount.
#[test]
fn another_programs_sqlite_database_is_refused_by_name_and_left_as_it_is() {
    let env = Env::new();
    fs::write(env.b("f"), growing(50_000)).unwrap();
    fs::create_dir(env.b(DB_DIR)).unwrap();
    fs::set_permissions(env.b(DB_DIR), fs::Permissions::from_mode(0o700)).unwrap();
    let theirs = rusqlite::Connection::open(env.b(DB_FILE)).unwrap();
    theirs
        .execute_batch(
            "PRAGMA application_id = 1234; CREATE TABLE notes(x); \
             INSERT INTO notes VALUES ('theirs');",
        )
        .unwrap();
    drop(theirs);
    let before = fs::read(env.b(DB_FILE)).unwrap();
    settle();
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &["f"], true);
    let log_file = d.log.clone();
    drop(d);
    let log = fs::read_to_string(log_file).unwrap();
    let named = env.b(DB_FILE).display().to_string();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("another program's SQLite database"))
        .collect();
    assert_eq!(lines.len(), 1, "not one line saying why:\n{log}");
    assert!(
        lines[0].contains(&named) && lines[0].contains("left as it is"),
        "the line does not name {named}:\n{log}"
    );
    assert!(
        fs::read(env.b(DB_FILE)).unwrap() == before,
        "another program's database was written:\n{log}"
    );
    let mut names: Vec<_> = fs::read_dir(env.b(DB_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["index.sqlite"], "files left beside it:\n{log}");
}

#[test]
fn a_read_only_backing_keeps_its_database_in_the_cache_directory() {
    let env = Env::new();
    fs::write(env.b("f"), growing(300_000)).unwrap();
    settle();
    let d = env.mount(&["ro"]);
    check_sizes(&d, &env.backing, &["f"], false);
    drop(d);
    assert!(
        !env.b(DB_DIR).exists(),
        "a read-only mount wrote into BACKING"
    );
    let d = env.mount(&["ro"]);
    let read = stat_all(&d, &["f"]);
    let log_file = d.log.clone();
    drop(d);
    let log = fs::read_to_string(log_file).unwrap();
    let cache = log
        .lines()
        .find_map(|l| l.split("index database kept in ").nth(1))
        .map(|p| PathBuf::from(p.trim()))
        .expect("the log names where the database is");
    assert!(
        cache.starts_with("/var/cache/cutf8fs"),
        "{}",
        cache.display()
    );
    let _ = fs::remove_file(&cache);
    assert!(
        read < 100_000,
        "the cache directory's database was not used ({read} bytes read)"
    );
}

#[test]
fn two_mounts_at_once_never_corrupt_it() {
    let env = Env::new();
    let names: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    for (i, n) in names.iter().enumerate() {
        fs::write(env.b(n), growing(10_000 + i)).unwrap();
    }
    settle();
    let a = env.mount(&[]);
    let b = env.mount(&[]);
    std::thread::scope(|s| {
        s.spawn(|| check_sizes(&a, &env.backing, &names, false));
        s.spawn(|| check_sizes(&b, &env.backing, &names, false));
    });
    drop(a);
    drop(b);
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &names, true);
    assert!(!d.log_text().contains("damaged"), "{}", d.log_text());
    drop(d);
    let read = stat_all(&env.mount(&[]), &names);
    assert!(
        read < 100_000,
        "the database was not used ({read} bytes read)"
    );
}

#[test]
fn kill_9_while_the_database_is_written_then_the_next_mount_serves_right_sizes() {
    let env = Env::new();
    let names: Vec<String> = (0..400).map(|i| format!("f{i}")).collect();
    let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    for (i, n) in names.iter().enumerate() {
        fs::write(env.b(n), growing(2_000 + 7 * i)).unwrap();
    }
    settle();
    for round in 0..3 {
        let mut d = env.mount(&[]);
        // Records are committed in batches while these stats go on.
        for (i, n) in names.iter().enumerate() {
            fs::metadata(d.m(n)).unwrap();
            if i == 150 + 100 * round {
                break;
            }
        }
        d.kill9();
        // Change some files behind its back.
        for n in names.iter().skip(round).step_by(5) {
            fs::write(env.b(n), flat(2_000)).unwrap();
        }
    }
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &names, false);
}

#[test]
fn a_hostile_backing_owner_cannot_plant_or_redirect_the_database() {
    let a = user("cutf8t-a");
    let env = Env::new();
    fs::set_permissions(&env.backing, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&env.backing, Some(a.uid), Some(a.gid)).unwrap();
    fs::write(env.b("f"), growing(50_000)).unwrap();
    // Root's files outside BACKING that a followed symlink would damage.
    let victim_dir = env.dir.path().join("victim");
    fs::create_dir(&victim_dir).unwrap();
    fs::set_permissions(&victim_dir, fs::Permissions::from_mode(0o700)).unwrap();
    let victim = env.dir.path().join("victim.txt");
    fs::write(&victim, b"root's file\n").unwrap();
    let run = |script: &str| {
        let out = sh_as(
            a,
            &format!("set -e; cd \"$1\"; {script}"),
            &[
                env.backing.as_os_str(),
                victim_dir.as_os_str(),
                victim.as_os_str(),
            ],
        );
        crate::support::run::succeeded(&out, format_args!("{script}"));
    };
    settle();
    let cases = [
        // The directory is a symlink to a directory of root's.
        "ln -s \"$2\" .cutf8fs-index",
        // The directory is the owner's, its file a symlink to root's file.
        "mkdir .cutf8fs-index && ln -s \"$3\" .cutf8fs-index/index.sqlite",
        // The owner's directory, open to all, with a file of the owner's.
        "mkdir -m 777 .cutf8fs-index && head -c 8192 /dev/urandom > .cutf8fs-index/index.sqlite",
    ];
    for case in cases {
        run("rm -rf .cutf8fs-index");
        run(case);
        let d = env.mount(&[]);
        check_sizes(&d, &env.backing, &["f"], true);
        let log_file = d.log.clone();
        drop(d);
        let log = fs::read_to_string(log_file).unwrap();
        assert!(log.contains("not used"), "{case}: nothing logged:\n{log}");
        if let Some(p) = log
            .lines()
            .find_map(|l| l.split(" instead").next()?.split("kept in ").nth(1))
        {
            let _ = fs::remove_file(p.trim());
        }
        assert_eq!(fs::read(&victim).unwrap(), b"root's file\n", "{case}");
        assert_eq!(fs::read_dir(&victim_dir).unwrap().count(), 0, "{case}");
        let st = fs::symlink_metadata(env.b(DB_DIR)).unwrap();
        assert_eq!(st.uid(), a.uid, "{case}: the planted entry was replaced");
    }
}

#[test]
fn index_db_none_creates_nothing_and_index_db_path_is_used() {
    let env = Env::new();
    fs::write(env.b("f"), growing(100_000)).unwrap();
    settle();
    let d = env.mount(&["index_db=none"]);
    check_sizes(&d, &env.backing, &["f"], false);
    drop(d);
    assert!(!env.b(DB_DIR).exists());
    let file = env.dir.path().join("my.sqlite");
    let opt = format!("index_db={}", file.display());
    drop(env.mount(&[&opt]).m("f").metadata());
    let d = env.mount(&[&opt]);
    let read = stat_all(&d, &["f"]);
    assert!(file.exists() && !env.b(DB_DIR).exists());
    assert!(
        read < 50_000,
        "-o index_db=PATH was not used ({read} bytes read)"
    );
}

#[test]
fn the_first_mount_after_cutf8_migrate_is_already_warm() {
    let env = Env::new();
    let names = ["a.txt", "b.txt", "sub/c.txt"];
    fs::create_dir(env.b("sub")).unwrap();
    for (i, n) in names.iter().enumerate() {
        let text = "ࠀ𐀀 text\n".repeat(20_000 + i);
        fs::write(env.b(n), text).unwrap();
    }
    let out = cutf8_cmd()
        .args(["migrate", "--no-progress"])
        .arg(&env.backing)
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
    for n in names {
        assert!(
            cutf8::has_magic(&fs::read(env.b(n)).unwrap()),
            "{n} not migrated"
        );
    }
    assert!(env.b(DB_FILE).exists(), "migrate recorded nothing");
    // Small files only: nothing recorded, nothing created.
    let small = Env::new();
    fs::write(small.b("s.txt"), "ࠀ small\n").unwrap();
    let out = cutf8_cmd()
        .args(["migrate", "--no-progress"])
        .arg(&small.backing)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(cutf8::has_magic(&fs::read(small.b("s.txt")).unwrap()));
    assert!(!small.b(DB_DIR).exists());
    let d = env.mount(&[]);
    let read = stat_all(&d, &names);
    assert!(
        read < 100_000,
        "the first mount after migrate read {read} bytes"
    );
    check_sizes(&d, &env.backing, &names, true);
}

#[test]
fn migrate_of_a_subdirectory_records_into_the_archives_database() {
    let env = Env::new();
    fs::write(env.b("top.txt"), "ࠀ top\n".repeat(20_000)).unwrap();
    fs::create_dir(env.b("sub")).unwrap();
    let run = |dir: &Path| {
        let out = cutf8_cmd()
            .args(["migrate", "--no-progress"])
            .arg(dir)
            .output()
            .unwrap();
        crate::support::run::succeeded(&out, "command failed");
    };
    run(&env.backing);
    assert!(env.b(DB_FILE).exists());
    fs::write(env.b("sub/later.txt"), "𐀀 later\n".repeat(20_000)).unwrap();
    run(&env.b("sub"));
    assert!(
        !env.b("sub").join(DB_DIR).exists(),
        "a second database in sub/"
    );
    let d = env.mount(&[]);
    let read = stat_all(&d, &["top.txt", "sub/later.txt"]);
    assert!(read < 100_000, "the first mount read {read} bytes");
    check_sizes(&d, &env.backing, &["top.txt", "sub/later.txt"], true);
}

/// With `-o ro` on a writable BACKING, the log says the database is kept
/// elsewhere because of the option, not that BACKING "is read-only or not
/// the daemon's to write" (neither is true).
#[test]
fn a_read_only_mount_says_why_the_database_is_kept_elsewhere() {
    let env = Env::new();
    fs::write(env.b("f"), growing(100_000)).unwrap();
    settle();
    let d = env.mount(&["ro"]);
    check_sizes(&d, &env.backing, &["f"], false);
    let log_file = d.log.clone();
    drop(d);
    let log = fs::read_to_string(log_file).unwrap();
    if let Some(p) = log
        .lines()
        .find_map(|l| l.split("index database kept in ").nth(1))
    {
        let _ = fs::remove_file(p.trim());
    }
    assert!(
        !log.contains("BACKING is read-only or not the daemon's to write"),
        "the log blames BACKING for -o ro:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("-o ro") && l.contains("index database kept in")),
        "the log does not say -o ro keeps the database elsewhere:\n{log}"
    );
}

/// `cutf8 migrate --to utf8` of a whole archive removes the index database
/// it (or a mount) kept there: nothing of cutf8fs is left in a tree that is
/// plain UTF-8 again. Not while a mount uses it, and never a
/// `.cutf8fs-index` that is not the runner's own.
#[test]
fn migrate_back_to_utf8_removes_the_archives_index_database() {
    let migrate = |args: &[&str], root: &Path| {
        let out = cutf8_cmd()
            .args(["migrate", "--no-progress"])
            .args(args)
            .arg(root)
            .output()
            .unwrap();
        crate::support::run::succeeded(&out, format_args!("migrate {args:?}"));
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let env = Env::new();
    fs::write(env.b("a.txt"), "ࠀ𐀀 text\n".repeat(20_000)).unwrap();
    migrate(&[], &env.backing);
    assert!(env.b(DB_FILE).exists(), "migrate recorded nothing");

    // A mount holds the database: it stays, and the output says why.
    let d = env.mount(&[]);
    check_sizes(&d, &env.backing, &["a.txt"], false);
    let said = migrate(&["--to", "utf8"], &env.backing);
    assert!(env.b(DB_FILE).exists(), "removed under a live mount");
    assert!(
        said.contains(DB_DIR),
        "nothing said of the database:\n{said}"
    );
    drop(d);

    // Unused: removed, directory and all.
    migrate(&[], &env.backing);
    let said = migrate(&["--to", "utf8"], &env.backing);
    assert!(
        !env.b(DB_DIR).exists(),
        "{DB_DIR} left behind in a plain UTF-8 tree:\n{said}"
    );
    assert!(
        said.contains(DB_DIR),
        "the removal is not reported:\n{said}"
    );
    // A subdirectory's run leaves the archive's database alone.
    fs::create_dir(env.b("sub")).unwrap();
    fs::write(env.b("sub/b.txt"), "ࠀ𐀀 text\n".repeat(20_000)).unwrap();
    migrate(&[], &env.backing);
    assert!(env.b(DB_FILE).exists());
    migrate(&["--to", "utf8"], &env.b("sub"));
    assert!(env.b(DB_FILE).exists(), "a subdirectory's run removed it");
    migrate(&["--to", "utf8"], &env.backing);
    assert!(!env.b(DB_DIR).exists());

    // Someone else's: left as it is.
    let a = user("cutf8t-a");
    fs::create_dir(env.b(DB_DIR)).unwrap();
    fs::write(env.b(DB_FILE), b"not a database").unwrap();
    std::os::unix::fs::chown(env.b(DB_DIR), Some(a.uid), Some(a.gid)).unwrap();
    std::os::unix::fs::chown(env.b(DB_FILE), Some(a.uid), Some(a.gid)).unwrap();
    migrate(&["--to", "utf8"], &env.backing);
    assert_eq!(fs::read(env.b(DB_FILE)).unwrap(), b"not a database");
}

/// A full BACKING is not a damaged database: when the database cannot be
/// created for lack of space, the log says so (and the mount goes on with
/// its indexes in memory), rather than "index.sqlite is damaged".
#[test]
fn a_full_disk_is_not_logged_as_a_damaged_database() {
    let env = Env::new();
    let tmpfs = env.dir.path().join("small");
    fs::create_dir(&tmpfs).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2M,mode=0755", "tmpfs"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(st.success(), "mount -t tmpfs (the test runs as root)");
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _umount = Umount(tmpfs.clone());
    fs::write(tmpfs.join("f"), growing(100_000)).unwrap();
    settle();
    // Fill what is left.
    let mut fill = File::create(tmpfs.join("fill")).unwrap();
    let chunk = vec![b'x'; 64 << 10];
    while std::io::Write::write_all(&mut fill, &chunk).is_ok() {}
    drop(fill);
    let d = env.mount_at(&tmpfs, &[]);
    check_sizes(&d, &tmpfs, &["f"], true);
    let log_file = d.log.clone();
    drop(d);
    let log = fs::read_to_string(log_file).unwrap();
    assert!(
        !log.contains("damaged"),
        "a full disk logged as a damaged database:\n{log}"
    );
    assert!(
        log.contains("No space left on device"),
        "the log does not say the disk is full:\n{log}"
    );
}
