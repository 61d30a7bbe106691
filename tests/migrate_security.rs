//! `cutf8 migrate` run by root over a tree a user owns lends no rights
//! (docs/behaviour.md, "The converter"; man/cutf8.1 SECURITY; the argument is `src/trust.rs`).
//!
//! The user is the real unprivileged `cutf8t-a`, who owns the tree; root
//! keeps files outside it (`outside/`, searchable, so the user can `stat`
//! them, and a root-only directory) that must stay byte for byte and time
//! for time as they were.
//!
//! * Planted journals: the user writes `.cutf8-journal.*` files in
//!   migrate's own format (perfect forgeries: right checksum, right
//!   bindings) whose target is an absolute path, a `../` path, a file on
//!   another filesystem, a symlink; a journal that is itself a symlink or
//!   hard-linked; a genuine journal of root's moved to another directory;
//!   and, written by root itself, journals naming files outside their
//!   directory. None is rolled back or deleted; migrate names each one,
//!   says why, and what to do.
//! * The walk race: a user process watches the tree with inotify and, each
//!   time migrate opens one of its directories, swaps it for a symlink to a
//!   root-only directory that holds text files of the same names, holds it
//!   a random while, and swaps it back, over many runs. Nothing outside the
//!   tree is touched, and nothing is reported converted that is not a
//!   regular file of the tree. The same race against `cutf8 check`, which
//!   walks with the same walker: nothing outside the tree is read.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{symlink, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cutf8fs::trust::Checksum;

use crate::support::cli::BIN;
use crate::support::users::{sh_as, user, User};

/// A root-only file's content: text (the walk race's victims, which a
/// walk led astray would convert).
const VICTIM: &[u8] = b"root's secret text, mode 0600\n";
/// The same, binary (NUL), for files in the tree that migrate leaves
/// alone, so that only a replayed journal could change them.
const SEALED: &[u8] = b"root's secret\0data, mode 0600\n";
const EVIL: &[u8] = b"the attacker's bytes\n";

// ---------------------------------------------------------------- helpers

/// What must not change about a file: its bytes, mode, owner and times
/// (ctime too: any write or chmod moves it).
#[derive(Debug, PartialEq, Eq)]
struct Sealed {
    bytes: Vec<u8>,
    mode: u32,
    uid: u32,
    nlink: u64,
    mtime: (i64, i64),
    atime: (i64, i64),
    ctime: (i64, i64),
}

fn seal(p: &Path) -> Sealed {
    let mut bytes = Vec::new();
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .read_to_end(&mut bytes)
        .unwrap();
    let md = fs::symlink_metadata(p).unwrap();
    Sealed {
        bytes,
        mode: md.mode(),
        uid: md.uid(),
        nlink: md.nlink(),
        mtime: (md.mtime(), md.mtime_nsec()),
        atime: (md.atime(), md.atime_nsec()),
        ctime: (md.ctime(), md.ctime_nsec()),
    }
}

pub(crate) fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A fresh directory (0755, root's) holding `tree` (the user's, 0755) and
/// `outside` (root's, 0711: searchable, not listable).
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) tree: PathBuf,
    pub(crate) outside: PathBuf,
    pub(crate) a: User,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        let a = user("cutf8t-a");
        let dir = tempfile::Builder::new()
            .prefix("cutf8-msec-")
            .tempdir()
            .unwrap();
        chmod(dir.path(), 0o755);
        let tree = dir.path().join("tree");
        let outside = dir.path().join("outside");
        fs::create_dir(&tree).unwrap();
        fs::create_dir(&outside).unwrap();
        chmod(&tree, 0o755);
        chmod(&outside, 0o711);
        std::os::unix::fs::chown(&tree, Some(a.uid), Some(a.gid)).unwrap();
        Fixture {
            dir,
            tree,
            outside,
            a,
        }
    }

    /// A root-only file (0600) `name` in `dir` holding `bytes`.
    fn victim_in(&self, dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, bytes).unwrap();
        chmod(&p, 0o600);
        p
    }

    /// Runs `script` as the user in the tree (`$1` the tree, `$2`… `args`);
    /// it must succeed.
    fn as_a(&self, script: &str, args: &[&OsStr]) {
        let full = format!("set -e; cd \"$1\"; {script}");
        let mut all: Vec<&OsStr> = vec![self.tree.as_os_str()];
        all.extend_from_slice(args);
        let out = sh_as(self.a, &full, &all);
        crate::support::run::succeeded(&out, format_args!("as the user: {script}"));
    }

    /// The user writes `bytes` to `rel` in the tree (a file of theirs).
    fn a_writes(&self, rel: &str, bytes: &[u8]) {
        let src = self.dir.path().join("forged.src");
        fs::write(&src, bytes).unwrap();
        chmod(&src, 0o644);
        self.as_a(
            "cat \"$2\" > \"$3\"",
            &[src.as_os_str(), self.tree.join(rel).as_os_str()],
        );
        fs::remove_file(&src).unwrap();
    }

    fn migrate(&self) -> Output {
        Command::new(BIN)
            .arg("migrate")
            .arg(&self.tree)
            .stdin(Stdio::null())
            .output()
            .expect("run cutf8")
    }
}

fn dev_ino(p: &Path) -> (u64, u64) {
    let md = fs::symlink_metadata(p).unwrap();
    (md.dev(), md.ino())
}

/// A journal in migrate's format (docs/migrate.md, src/migrate/undo.rs):
/// what a user who read the source can write.
struct Forged<'a> {
    dir: (u64, u64),
    name: &'a [u8],
    target: (u64, u64),
    owner: (u32, u32),
    content: &'a [u8],
}

impl Forged<'_> {
    /// A forgery aimed at `victim` under the name `name`, written as if
    /// in directory `dir`.
    fn at<'a>(dir: &Path, name: &'a [u8], victim: &Path) -> Forged<'a> {
        let md = fs::metadata(victim).unwrap();
        Forged {
            dir: dev_ino(dir),
            name,
            target: (md.dev(), md.ino()),
            owner: (md.uid(), md.gid()),
            content: EVIL,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"CUTF8JNL");
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&(self.name.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.content.len() as u64).to_le_bytes());
        for v in [self.dir.0, self.dir.1, self.target.0, self.target.1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.owner.0.to_le_bytes());
        b.extend_from_slice(&self.owner.1.to_le_bytes());
        for (s, ns) in [(1_000_000_000i64, 0u32), (1_000_000_000, 0)] {
            b.extend_from_slice(&s.to_le_bytes());
            b.extend_from_slice(&ns.to_le_bytes());
        }
        b.extend_from_slice(self.name);
        b.extend_from_slice(self.content);
        b.extend_from_slice(b"CUTF8END");
        b.extend_from_slice(&(self.content.len() as u64).to_le_bytes());
        let mut sum = Checksum::default();
        sum.update(&b);
        b.extend_from_slice(&sum.finish().to_le_bytes());
        b
    }
}

const JOURNAL: &str = ".cutf8-journal.00000000000000aa";

/// migrate refused `journal` (a path shown as it names it): exit 1, the
/// journal named on stderr with what failed and what to do; `why` is part
/// of the message.
#[track_caller]
fn refused(out: &Output, journal: &Path, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    let line = err
        .lines()
        .find(|l| l.contains(&*journal.to_string_lossy()))
        .unwrap_or_else(|| panic!("{} not named:\n{err}", journal.display()));
    assert!(
        line.contains("neither rolled back nor deleted") && line.contains("rm -- '"),
        "{line}"
    );
    assert!(line.contains(why), "{why:?} not in: {line}");
}

// ---------------------------------------------------------- planted journals

#[test]
fn a_forged_journal_aimed_outside_the_tree_is_never_replayed() {
    let f = Fixture::new();
    let victim = f.victim_in(&f.outside, "victim", SEALED);
    let before = seal(&victim);
    let uid = format!("owned by uid {}", f.a.uid);
    let abs = victim.as_os_str().as_encoded_bytes().to_vec();
    let cases: [(&str, &[u8]); 2] = [("absolute", &abs), ("dot-dot", b"../outside/victim")];
    for (case, name) in cases {
        f.a_writes(JOURNAL, &Forged::at(&f.tree, name, &victim).bytes());
        let out = f.migrate();
        refused(&out, &f.tree.join(JOURNAL), &uid);
        assert_eq!(seal(&victim), before, "{case}: the victim changed");
        assert!(
            f.tree.join(JOURNAL).exists(),
            "{case}: the journal was deleted"
        );
        fs::remove_file(f.tree.join(JOURNAL)).unwrap();
    }
}

#[test]
fn a_journal_that_is_a_symlink_or_hard_linked_is_never_followed_or_replayed() {
    let f = Fixture::new();
    let victim = f.victim_in(&f.outside, "victim", SEALED);
    let before = seal(&victim);
    let abs = victim.as_os_str().as_encoded_bytes().to_vec();
    // The forgery lives elsewhere, in a directory of the user's.
    let home = f.dir.path().join("home");
    fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(f.a.uid), Some(f.a.gid)).unwrap();
    let forged = Forged::at(&f.tree, &abs, &victim).bytes();
    let src = f.dir.path().join("forged.src");
    fs::write(&src, &forged).unwrap();
    chmod(&src, 0o644);
    f.as_a(
        "cat \"$2\" > \"$3\"/j; ln -s \"$3\"/j \"$4\"",
        &[src.as_os_str(), home.as_os_str(), OsStr::new(JOURNAL)],
    );
    let out = f.migrate();
    refused(&out, &f.tree.join(JOURNAL), "a symlink");
    assert!(fs::symlink_metadata(f.tree.join(JOURNAL))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(home.join("j")).unwrap(), forged);
    fs::remove_file(f.tree.join(JOURNAL)).unwrap();
    // Hard-linked: the user's own file under two names.
    f.as_a(
        "cat \"$2\" > \"$3\"; ln \"$3\" also",
        &[src.as_os_str(), OsStr::new(JOURNAL)],
    );
    let out = f.migrate();
    refused(&out, &f.tree.join(JOURNAL), "owned by uid");
    assert_eq!(fs::metadata(f.tree.join(JOURNAL)).unwrap().nlink(), 2);
    assert_eq!(seal(&victim), before, "the victim changed");
}

/// A tmpfs of our own (another filesystem), unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn new() -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("cutf8-msec-fs-")
            .tempdir()
            .unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0711", "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount(8)");
        assert!(st.success(), "mount -t tmpfs failed");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn a_forged_entry_for_another_filesystems_inode_or_a_symlink_is_never_replayed() {
    let f = Fixture::new();
    let fs2 = Tmpfs::new();
    let victim = f.victim_in(fs2.0.path(), "victim", SEALED);
    let before = seal(&victim);
    let abs = victim.as_os_str().as_encoded_bytes().to_vec();
    // By absolute name, with the other filesystem's device and inode.
    f.a_writes(JOURNAL, &Forged::at(&f.tree, &abs, &victim).bytes());
    let out = f.migrate();
    refused(&out, &f.tree.join(JOURNAL), "owned by uid");
    assert_eq!(seal(&victim), before);
    // By one plain name that is the user's symlink to the victim.
    f.as_a("ln -s \"$2\" v", &[victim.as_os_str()]);
    f.a_writes(JOURNAL, &Forged::at(&f.tree, b"v", &victim).bytes());
    let out = f.migrate();
    refused(&out, &f.tree.join(JOURNAL), "owned by uid");
    assert_eq!(seal(&victim), before);
    assert!(f.tree.join(JOURNAL).exists());
}

/// Journals in the format and with the owner, mode and link count of
/// migrate's own (as a bug, or an administrator's copy, might leave them):
/// still never used to reach anything outside their directory or any file
/// but the one recorded.
#[test]
fn even_roots_own_journal_never_leaves_its_directory() {
    let f = Fixture::new();
    let victim = f.victim_in(&f.outside, "victim", SEALED);
    let before = seal(&victim);
    let abs = victim.as_os_str().as_encoded_bytes().to_vec();
    let here = f.victim_in(&f.tree, "victim", SEALED);
    let mine = seal(&here);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "absolute",
            Forged::at(&f.tree, &abs, &victim).bytes(),
            "not a file name in its directory",
        ),
        (
            "dot-dot",
            Forged::at(&f.tree, b"../outside/victim", &victim).bytes(),
            "not a file name in its directory",
        ),
        (
            // The name is here, the device and inode are the outside one's.
            "another file's identity",
            Forged::at(&f.tree, b"victim", &victim).bytes(),
            "belongs to another file",
        ),
        (
            "written in another directory",
            Forged::at(&f.outside, b"victim", &here).bytes(),
            "another directory",
        ),
    ];
    for (case, bytes, why) in cases {
        let j = f.tree.join(JOURNAL);
        fs::write(&j, &bytes).unwrap();
        chmod(&j, 0o600);
        let out = f.migrate();
        refused(&out, &j, why);
        assert_eq!(seal(&victim), before, "{case}: the victim changed");
        assert_eq!(seal(&here), mine, "{case}: the file in the tree changed");
        assert!(j.exists(), "{case}: the journal was deleted");
        fs::remove_file(&j).unwrap();
    }
}

/// A genuine journal of root's (a multiply linked root file in the user's
/// directory, its rewrite cut short) moved by the user into another of
/// their directories, where a file of theirs has the same name.
#[test]
fn a_genuine_journal_moved_elsewhere_is_never_replayed() {
    let f = Fixture::new();
    for d in ["x", "y"] {
        f.as_a("mkdir \"$2\"", &[OsStr::new(d)]);
    }
    let secret = f.victim_in(&f.tree.join("x"), "notes.txt", SEALED);
    fs::hard_link(&secret, f.outside.join("notes-link")).unwrap();
    let theirs = f.tree.join("y/notes.txt");
    f.a_writes("y/notes.txt", b"the user's own notes\0\n");
    let (secret_before, theirs_before) = (seal(&secret), seal(&theirs));
    // The journal migrate would have left in x (root's, 0600, one link).
    let mut journal = Forged::at(&f.tree.join("x"), b"notes.txt", &secret);
    journal.content = b"the secret's original content\n";
    let x_journal = f.tree.join("x").join(JOURNAL);
    fs::write(&x_journal, journal.bytes()).unwrap();
    chmod(&x_journal, 0o600);
    f.as_a("mv x/\"$2\" y/\"$2\"", &[OsStr::new(JOURNAL)]);
    let y_journal = f.tree.join("y").join(JOURNAL);
    let out = f.migrate();
    refused(&out, &y_journal, "another directory");
    assert_eq!(seal(&theirs), theirs_before);
    assert_eq!(seal(&secret), secret_before);
    assert!(y_journal.exists());
}

// ------------------------------------------------------------- hard links

const MAGIC: &[u8] = b"\xef\xb7\x9d\xed\xb2\xae\x00\x0a";

/// The summary's count of `code` among the skipped ("  code: N").
fn skipped(out: &Output, code: &str) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix(code)?.strip_prefix(": "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A file of the tree that is also a file outside it (one inode, a name
/// in each) is never rewritten: its other names would see the change.
/// Root's file linked into the user's tree (what a user can do when
/// fs.protected_hardlinks is off) and a world-writable file of root's
/// the user links in themselves (allowed with it on) stay byte for byte
/// as they were; a file whose names are all in the named trees is
/// converted and keeps its inode; the same file, migrated through one
/// of its directories only, is not.
#[test]
fn a_file_with_a_name_outside_the_tree_is_never_converted() {
    let fx = Fixture::new();
    let root_only = fx.victim_in(&fx.outside, "passwd", VICTIM);
    fs::hard_link(&root_only, fx.tree.join("passwd")).unwrap();
    let shared = fx.outside.join("shared.txt");
    fs::write(&shared, "root's shared text, Grüße\n").unwrap();
    chmod(&shared, 0o666);
    fx.as_a("ln \"$2\" shared.txt", &[shared.as_os_str()]);
    fx.a_writes(
        "both.txt",
        "one inode, two names in the tree: é\n".as_bytes(),
    );
    fx.as_a("mkdir sub && ln both.txt sub/both.txt", &[]);
    let sealed = [&root_only, &shared].map(|p| seal(p));

    // The subdirectory alone: both.txt's other name is outside it.
    let out = Command::new(BIN)
        .arg("migrate")
        .arg(fx.tree.join("sub"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "migrate tree/sub");
    assert_eq!(skipped(&out, "linked-outside"), 1, "{out:?}");
    assert!(!fs::read(fx.tree.join("both.txt"))
        .unwrap()
        .starts_with(MAGIC));

    let out = fx.migrate();
    crate::support::run::succeeded(&out, "migrate tree");
    assert_eq!(skipped(&out, "linked-outside"), 2, "{out:?}");
    assert_eq!([&root_only, &shared].map(|p| seal(p)), sealed);
    let both = fs::read(fx.tree.join("both.txt")).unwrap();
    assert!(both.starts_with(MAGIC), "both.txt not converted");
    assert_eq!(fs::read(fx.tree.join("sub/both.txt")).unwrap(), both);
    assert_eq!(
        dev_ino(&fx.tree.join("both.txt")),
        dev_ino(&fx.tree.join("sub/both.txt"))
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!report.contains("converted: 3"), "{report}");
}

/// The user keeps adding and removing names of root's world-writable
/// file in the tree while root migrates it again and again, so that the
/// names migrate counts in the tree may match the link count at some
/// instant. The file outside never changes.
#[test]
fn names_added_and_removed_during_the_run_never_let_a_file_outside_change() {
    let fx = Fixture::new();
    let shared = fx.outside.join("shared.txt");
    let bytes = "root's shared text, Grüße\n".repeat(2000);
    fs::write(&shared, &bytes).unwrap();
    chmod(&shared, 0o666);
    fx.as_a(
        "for n in a b c d; do ln \"$2\" $n.txt; done",
        &[shared.as_os_str()],
    );
    let script = "cd \"$1\"; while [ ! -e \"$3\" ]; do \
                    for n in b c d; do rm -f $n.txt; done; \
                    for n in b c d; do ln \"$2\" $n.txt 2>/dev/null; done; \
                  done";
    let stop = fx.dir.path().join("stop");
    let a = fx.a;
    let (tree, target, stop2) = (fx.tree.clone(), shared.clone(), stop.clone());
    let racer = std::thread::spawn(move || {
        sh_as(
            a,
            script,
            &[tree.as_os_str(), target.as_os_str(), stop2.as_os_str()],
        )
    });
    let started = Instant::now();
    let mut runs = 0;
    while runs < 40 && started.elapsed() < Duration::from_secs(20) {
        let _ = fx.migrate();
        runs += 1;
        assert_eq!(fs::read(&shared).unwrap(), bytes.as_bytes(), "run {runs}");
    }
    fs::write(&stop, "").unwrap();
    racer.join().unwrap();
    assert_eq!(fs::read(&shared).unwrap(), bytes.as_bytes());
    let md = fs::metadata(&shared).unwrap();
    assert_eq!((md.uid(), md.mode() & 0o7777), (0, 0o666));
}

// ------------------------------------------------------------ the walk race

/// The watched directories of the race's tree, and what the attacker
/// puts in their place.
const RACED: [&str; 3] = ["d03", "d05", "d07"];
/// Directories of the race's tree (more than migrate keeps open at once).
const DIRS: usize = 70;

/// The attacker (run as the user by [`walk_race`]): for every open of a
/// watched directory, swap it for a symlink to the root-only directory,
/// hold a random while, swap it back; until killed. Does nothing unless
/// `CUTF8_WALK_ATTACK` is set (`TREE:TARGET`).
#[test]
fn walk_race_attacker() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let Some(spec) = std::env::var_os("CUTF8_WALK_ATTACK") else {
        return;
    };
    let spec = spec.to_string_lossy().into_owned();
    let (tree, target) = spec.split_once(':').expect("TREE:TARGET");
    let (tree, target) = (Path::new(tree), Path::new(target));
    let ino = Inotify::init(InitFlags::IN_CLOEXEC).expect("inotify");
    let mut watched = Vec::new();
    for name in RACED {
        let wd = ino
            .add_watch(&tree.join(name), AddWatchFlags::IN_OPEN)
            .expect("watch");
        watched.push((wd, name));
    }
    let mut seed = u64::from(std::process::id()) | 1;
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    println!("ATTACKER READY");
    loop {
        for ev in ino.read_events().expect("inotify read") {
            let Some(&(_, name)) = watched.iter().find(|(wd, _)| *wd == ev.wd) else {
                continue;
            };
            let (p, real) = (tree.join(name), tree.join(format!("{name}.real")));
            if fs::rename(&p, &real).is_err() {
                continue;
            }
            let _ = symlink(target, &p);
            println!("SWAPPED {name}");
            // The swap held a random while: its timing is what varies.
            std::thread::sleep(Duration::from_micros(random(150_000)));
            let _ = fs::remove_file(&p);
            let _ = fs::rename(&real, &p);
        }
    }
}

/// The test binary, copied where the user can run it.
fn runnable_copy(dir: &Path) -> PathBuf {
    let to = dir.join("tests-bin");
    fs::copy(std::env::current_exe().unwrap(), &to).unwrap();
    chmod(&to, 0o755);
    to
}

/// Puts every raced directory back (an attacker killed mid-swap leaves a
/// symlink and `NAME.real`).
fn restore(tree: &Path) {
    for name in RACED {
        let real = tree.join(format!("{name}.real"));
        if real.exists() {
            let _ = fs::remove_file(tree.join(name));
            fs::rename(&real, tree.join(name)).unwrap();
        }
    }
}

/// The user's tree for the walk race: directories of text files with a
/// subdirectory `priv`, more than the walk keeps descriptors of (so it
/// must reach some again while the attacker is at work); the raced ones
/// hold many files (a long walk of each). All the user's.
fn race_tree(f: &Fixture) {
    for d in 0..DIRS {
        let dir = f.tree.join(format!("d{d:02}"));
        fs::create_dir_all(dir.join("priv")).unwrap();
        let n = if RACED.contains(&&*format!("d{d:02}")) {
            300
        } else {
            10
        };
        for i in 0..n {
            fs::write(
                dir.join(format!("f{i:03}.txt")),
                format!("text {d} {i} é\n"),
            )
            .unwrap();
        }
        fs::write(dir.join("priv/own.txt"), "the user's own text\n").unwrap();
    }
    let chown = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", f.a.uid, f.a.gid))
        .arg(&f.tree)
        .status()
        .unwrap();
    assert!(chown.success());
}

/// Runs `run` while the attacker (the test binary `bin` as the user,
/// [`walk_race_attacker`]) swaps the raced directories for symlinks to
/// `secret`; puts them back after. What `run` gave, and how many swaps
/// the attacker made.
fn under_attack(
    f: &Fixture,
    bin: &Path,
    secret: &Path,
    run: impl FnOnce() -> Output,
) -> (Output, usize) {
    let mut attacker = Command::new("setpriv")
        .arg(format!("--reuid={}", f.a.uid))
        .arg(format!("--regid={}", f.a.gid))
        .arg("--clear-groups")
        .arg(bin)
        .args([
            "--exact",
            "migrate_security::walk_race_attacker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "CUTF8_WALK_ATTACK",
            format!("{}:{}", f.tree.display(), secret.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the attacker");
    let mut lines = BufReader::new(attacker.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("ATTACKER READY"))),
        "the attacker did not start"
    );
    let out = run();
    let _ = attacker.kill();
    let _ = attacker.wait();
    let swaps = lines
        .map_while(Result::ok)
        .filter(|l| l.starts_with("SWAPPED"))
        .count();
    restore(&f.tree);
    (out, swaps)
}

#[test]
fn the_walk_race_never_reaches_outside_the_tree() {
    let f = Fixture::new();
    // A root-only directory with text files of the names the tree holds.
    let secret = f.dir.path().join("secret");
    fs::create_dir(&secret).unwrap();
    chmod(&secret, 0o700);
    fs::create_dir(secret.join("priv")).unwrap();
    chmod(&secret.join("priv"), 0o700);
    let mut victims = Vec::new();
    for i in 0..3 {
        victims.push(f.victim_in(&secret, &format!("f{i:03}.txt"), VICTIM));
        victims.push(f.victim_in(&secret.join("priv"), &format!("victim{i}.txt"), VICTIM));
    }
    race_tree(&f);
    let sealed: Vec<Sealed> = victims.iter().map(|v| seal(v)).collect();
    let bin = runnable_copy(f.dir.path());
    let report = f.dir.path().join("report.jsonl");
    let rounds = 25;
    let started = Instant::now();
    let (mut swaps, mut refusals) = (0, 0);
    for round in 0..rounds {
        let (out, swapped) = under_attack(&f, &bin, &secret, || {
            Command::new(BIN)
                .args(["migrate", "--jobs", "2", "--report"])
                .arg(&report)
                .arg(&f.tree)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        });
        swaps += swapped;
        let err = String::from_utf8_lossy(&out.stderr);
        refusals += err.matches("moved or replaced").count();
        for (v, s) in victims.iter().zip(&sealed) {
            assert_eq!(&seal(v), s, "round {round}: {} changed\n{err}", v.display());
        }
        // Whatever the report says was converted is a regular file of the
        // tree now, and corrected.
        let text = fs::read_to_string(&report).unwrap();
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["action"] != "converted" {
                continue;
            }
            let p = Path::new(v["path"].as_str().unwrap());
            assert!(
                !p.to_string_lossy().contains("victim"),
                "round {round}: {line}"
            );
            let md = fs::symlink_metadata(p)
                .unwrap_or_else(|e| panic!("round {round}: converted {line}, now: {e}"));
            assert!(md.is_file() && md.uid() == f.a.uid, "round {round}: {line}");
            let head = fs::read(p).unwrap();
            assert!(head.starts_with(&cutf8::MAGIC), "round {round}: {line}");
        }
    }
    eprintln!(
        "{rounds} runs in {:?}: the attacker swapped {swaps} times; {refusals} directories or \
         files refused as moved or replaced; nothing outside the tree touched",
        started.elapsed()
    );
    assert!(
        swaps > rounds,
        "the attacker hardly ever swapped ({swaps} times)"
    );
    // Every file of the user's is converted by now or was refused in a run
    // (then converted by the next): nothing of theirs is lost either.
    for d in 0..DIRS {
        let own = f.tree.join(format!("d{d:02}/priv/own.txt"));
        let bytes = fs::read(&own).unwrap();
        assert!(
            bytes == b"the user's own text\n"
                || bytes == [&cutf8::MAGIC[..], b"the user's own text\n"].concat(),
            "{}",
            own.display()
        );
    }
}

/// The walk race against root's `cutf8 check` (the twin of
/// [`the_walk_race_never_reaches_outside_the_tree`]: check walks with
/// migrate's walker, `cutf8fs::walk`). Root's directory holds files of
/// the names the tree's raced directories hold, with a tab and a carriage
/// return in each: a check led into it would print `[tab]` and
/// `[carriage-return]` findings, which no file of the tree has.
#[test]
fn the_walk_race_never_leads_check_outside_the_tree() {
    let f = Fixture::new();
    let secret = f.dir.path().join("secret");
    fs::create_dir_all(secret.join("priv")).unwrap();
    chmod(&secret, 0o700);
    for i in 0..300 {
        f.victim_in(&secret, &format!("f{i:03}.txt"), b"root\tsecret\r\n");
    }
    f.victim_in(&secret.join("priv"), "own.txt", b"root\tsecret\r\n");
    race_tree(&f);
    let bin = runnable_copy(f.dir.path());
    let rounds = 8;
    let (mut swaps, mut refusals) = (0, 0);
    for round in 0..rounds {
        let (out, swapped) = under_attack(&f, &bin, &secret, || {
            Command::new(BIN)
                .args(["check", "-A", "missing-magic"])
                .arg(&f.tree)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        });
        swaps += swapped;
        let text = crate::support::run::shown(&out);
        for leak in ["[tab]", "[carriage-return]"] {
            assert!(
                !text.contains(leak),
                "round {round}: root's check read outside the tree ({leak}):\n{text}"
            );
        }
        refusals += text.matches("moved or replaced").count();
    }
    eprintln!(
        "{rounds} checks: the attacker swapped {swaps} times; {refusals} directories or files \
         refused as moved or replaced; nothing outside the tree read"
    );
    // A check is quick: the attacker lands about once a run.
    assert!(
        swaps > rounds / 2,
        "the attacker hardly ever swapped ({swaps} times)"
    );
}
