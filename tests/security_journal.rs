//! The redo journal trusts only what the daemon wrote, and a
//! read-only mount writes nothing (docs/behaviour.md, "The mount").
//!
//! Every test plays the owner of BACKING (the real unprivileged user
//! `cutf8t-a`, through `setpriv`) against a daemon running as root: planted
//! journal entries whose `target` or `tail` is a symlink to a root-only
//! file, a journal directory that is a symlink or belongs to the user, a
//! genuine journal renamed away, a journal swapped for a symlink while the
//! daemon rewrites files through it. The daemon must refuse to start with a
//! message naming the path (and never replay or delete through what it
//! found), or, while mounted, keep using the directory it checked. Then
//! `-o ro` and a read-only bind mount of BACKING: BACKING stays byte for
//! byte and mtime for mtime as it was, no journal is created; a genuine
//! committed entry refuses a read-only start and is finished by a
//! read-write one. Last, `cutf8 migrate` never touches the mount's files.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::mount::Mount;
use crate::support::users::{sh_as, user, User};
use cutf8::{encode_strict, MAGIC};

const JOURNAL: &str = ".cutf8fs-journal";
const SECRET: &[u8] = b"root's secret, mode 0600\n";

// ---------------------------------------------------------------- helpers

/// Starts `cutf8fs -f backing mnt -o opts…` (its log beside MOUNTPOINT):
/// the running daemon, or the daemon's output when it exited instead of
/// mounting.
fn start(backing: &Path, mnt: &Path, opts: &[&str]) -> Result<Mount, String> {
    Mount::with(opts).try_on(backing, mnt, &mnt.with_extension("log"))
}

/// A fresh tree: `dir` (0755) holding `backing` (owned by user A), `mnt`,
/// and root-only things outside BACKING (`secret`, 0600).
struct Fixture {
    dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
    a: User,
}

impl Fixture {
    fn new() -> Fixture {
        let a = user("cutf8t-a");
        let dir = tempfile::Builder::new()
            .prefix("cutf8fs-secj-")
            .tempdir()
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let backing = dir.path().join("backing");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&backing).unwrap();
        fs::create_dir(&mnt).unwrap();
        fs::set_permissions(&backing, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&backing, Some(a.uid), Some(a.gid)).unwrap();
        let secret = dir.path().join("secret");
        fs::write(&secret, SECRET).unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        Fixture {
            dir,
            backing,
            mnt,
            a,
        }
    }

    fn b(&self, rel: &str) -> PathBuf {
        self.backing.join(rel)
    }

    fn secret(&self) -> PathBuf {
        self.dir.path().join("secret")
    }

    /// Runs `script` as user A in BACKING (`$1` = BACKING, `$2` = the
    /// secret, `$3` = the fixture's directory); it must succeed.
    fn as_a(&self, script: &str) {
        let full = format!("set -e; cd \"$1\"; {script}");
        let out = sh_as(
            self.a,
            &full,
            &[
                self.backing.as_os_str(),
                self.secret().as_os_str(),
                self.dir.path().as_os_str(),
            ],
        );
        crate::support::run::succeeded(&out, format_args!("as user A: {script}"));
    }

    /// A file owned by A in BACKING.
    fn a_file(&self, rel: &str, bytes: &[u8]) {
        let p = self.b(rel);
        fs::write(&p, bytes).unwrap();
        std::os::unix::fs::chown(&p, Some(self.a.uid), Some(self.a.gid)).unwrap();
    }

    /// The mount must refuse to start: its message names `named` and says
    /// what to do (`todo`).
    fn refused(&self, opts: &[&str], named: &Path, todo: &str) -> String {
        match start(&self.backing, &self.mnt, opts) {
            Ok(_) => panic!("the mount started with -o {opts:?}; it must refuse"),
            Err(msg) => {
                let named = named.to_string_lossy();
                assert!(
                    msg.contains(&*named),
                    "the refusal does not name {named}:\n{msg}"
                );
                assert!(
                    msg.contains(todo),
                    "the refusal does not say {todo:?}:\n{msg}"
                );
                msg
            }
        }
    }

    fn assert_secret_intact(&self) {
        assert_eq!(
            fs::read(self.secret()).unwrap(),
            SECRET,
            "the root-only file was changed"
        );
    }
}

/// Every path below `root` (not following symlinks): kind, bytes, mode,
/// owner, mtime and ctime.
/// What [`snapshot`] keeps of one path.
type Seen = (u32, Vec<u8>, u32, i64, i64, i64, i64);

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Seen> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = fs::symlink_metadata(&p).unwrap();
        let bytes = if md.is_file() {
            fs::read(&p).unwrap()
        } else if md.file_type().is_symlink() {
            fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec()
        } else {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
            Vec::new()
        };
        out.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            (
                md.mode(),
                bytes,
                md.uid(),
                md.mtime(),
                md.mtime_nsec(),
                md.ctime(),
                md.ctime_nsec(),
            ),
        );
    }
    out
}

/// Everything below `dir`, for "nothing was created there".
/// [`listing`] without the daemons' own files in a journal directory
/// (`recover.lock`, owner files): what is left of entries.
fn entries(dir: &Path) -> Vec<PathBuf> {
    listing(dir)
        .into_iter()
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n != "recover.lock" && !n.ends_with(".owner")
        })
        .collect()
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in fs::read_dir(&p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out.sort();
    out
}

/// A directory's mtime and ctime: they change when anything is created in
/// it or removed from it, even if the listing ends the same.
fn stamp(p: &Path) -> (i64, i64, i64, i64) {
    let md = fs::symlink_metadata(p).unwrap();
    (md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec())
}

fn corrected(view: &str) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend(encode_strict(view.as_bytes()).unwrap());
    v
}

/// The tree the read-only tests serve: corrected, raw, empty, nested,
/// linked, A's and root's.
fn fill_tree(f: &Fixture) {
    f.a_file(
        "doc.txt",
        &corrected("Grüße, 世界 😀\n".repeat(50).as_str()),
    );
    f.a_file("raw.bin", &[0u8, 1, 2, 0xFF, 0xFE]);
    f.a_file("empty", b"");
    fs::create_dir(f.b("sub")).unwrap();
    fs::write(f.b("sub/deep.txt"), corrected("ࠀ deep\n")).unwrap();
    fs::hard_link(f.b("doc.txt"), f.b("sub/doc-link.txt")).unwrap();
    // Old times, so any write would show.
    for p in ["doc.txt", "raw.bin", "empty", "sub/deep.txt", "sub", ""] {
        let t = libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        };
        let c = std::ffi::CString::new(f.b(p).as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string and two timespecs that outlive the call.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
        assert_eq!(rc, 0);
    }
}

/// Reads everything through the mount and tries every kind of change; all
/// changes must fail with EROFS.
fn exercise_read_only(d: &Mount) {
    assert_eq!(
        fs::read(d.m("doc.txt")).unwrap(),
        "Grüße, 世界 😀\n".repeat(50).as_bytes()
    );
    assert_eq!(
        fs::read(d.m("sub/deep.txt")).unwrap(),
        "ࠀ deep\n".as_bytes()
    );
    assert_eq!(fs::read(d.m("raw.bin")).unwrap(), [0u8, 1, 2, 0xFF, 0xFE]);
    let names: Vec<_> = fs::read_dir(d.m(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!names.iter().any(|n| n == JOURNAL), "{names:?}");
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs(
        OpenOptions::new()
            .write(true)
            .open(d.m("doc.txt"))
            .and_then(|f| f.write_all_at("ࠀ".as_bytes(), 3)),
        "a shifting write",
    );
    erofs(fs::create_dir(d.m("newdir")), "mkdir");
    erofs(fs::write(d.m("new.txt"), b"x").map(drop), "create");
    erofs(fs::remove_file(d.m("raw.bin")), "unlink");
}

// ---------------------------------------------------------------- planted journals

#[test]
fn a_planted_entry_with_a_symlinked_target_is_never_replayed() {
    for opts in [&[][..], &["ro"][..]] {
        let f = Fixture::new();
        f.as_a(
            "mkdir -p .cutf8fs-journal/e.commit; cd .cutf8fs-journal/e.commit; \
             ln -s \"$2\" target; printf 'OWNED BY A' > tail; printf 0 > offset",
        );
        f.refused(opts, &f.b(JOURNAL), "rm -r");
        f.assert_secret_intact();
        assert!(
            f.b(".cutf8fs-journal/e.commit/tail").exists(),
            "the planted entry was deleted"
        );
    }
}

#[test]
fn a_planted_tail_symlink_never_copies_a_secret() {
    for opts in [&[][..], &["ro"][..]] {
        let f = Fixture::new();
        f.a_file("mine", b"A's own file\n");
        f.as_a(
            "mkdir -p .cutf8fs-journal/1-1.commit; cd .cutf8fs-journal/1-1.commit; \
             ln -s \"$1/mine\" target; ln -s \"$2\" tail; printf 0 > offset",
        );
        f.refused(opts, &f.b(JOURNAL), "rm -r");
        assert_eq!(fs::read(f.b("mine")).unwrap(), b"A's own file\n");
        f.assert_secret_intact();
    }
}

#[test]
fn a_journal_that_is_a_symlink_is_neither_followed_nor_emptied() {
    for opts in [&[][..], &["ro"][..]] {
        let f = Fixture::new();
        let victim = f.dir.path().join("victim");
        fs::create_dir_all(victim.join("a/inner")).unwrap();
        fs::create_dir_all(victim.join("b.commit")).unwrap();
        fs::write(victim.join("b.commit/keep"), b"keep").unwrap();
        let before = listing(&victim);
        f.as_a("ln -s \"$3/victim\" .cutf8fs-journal");
        f.refused(opts, &f.b(JOURNAL), "rm -r");
        assert_eq!(
            listing(&victim),
            before,
            "something was deleted through the symlink"
        );
    }
}

#[test]
fn a_journal_owned_by_the_backing_owner_is_refused_and_kept() {
    for opts in [&[][..], &["ro"][..]] {
        let f = Fixture::new();
        f.a_file("mine", b"A's own file\n");
        f.as_a(
            "mkdir -m 700 .cutf8fs-journal; mkdir -m 700 .cutf8fs-journal/1-1; \
             printf x > .cutf8fs-journal/1-1/tail; \
             mkdir -m 700 .cutf8fs-journal/2-2.commit; \
             ln \"$1/mine\" .cutf8fs-journal/2-2.commit/target; \
             printf 'REPLAYED' > .cutf8fs-journal/2-2.commit/tail; \
             printf 0 > .cutf8fs-journal/2-2.commit/offset",
        );
        let msg = f.refused(opts, &f.b(JOURNAL), "rm -r");
        assert!(msg.contains(&format!("uid {}", f.a.uid)), "{msg}");
        assert!(f.b(".cutf8fs-journal/1-1/tail").exists(), "entry deleted");
        assert_eq!(fs::read(f.b("mine")).unwrap(), b"A's own file\n");
    }
}

/// A view of `slots` ASCII slots of three bytes, with the slot at `i`
/// holding U+0800 (three view bytes, a different length on disk) when
/// `wide[i]`.
fn slots_view(wide: &[bool]) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, &w) in wide.iter().enumerate() {
        if w {
            v.extend_from_slice("ࠀ".as_bytes());
        } else {
            v.extend_from_slice(&[b'a' + (i % 26) as u8, b'b', b'\n']);
        }
    }
    v
}

/// Toggles slot `i` through the mount (a write that shifts the text).
fn toggle(file: &File, wide: &mut [bool], i: usize) {
    try_toggle(file, wide, i).unwrap();
}

/// Like [`toggle`]; a failed write leaves `wide` as it was.
fn try_toggle(file: &File, wide: &mut [bool], i: usize) -> std::io::Result<()> {
    wide[i] = !wide[i];
    let view = slots_view(wide);
    let r = file.write_all_at(&view[3 * i..3 * i + 3], 3 * i as u64);
    if r.is_err() {
        wide[i] = !wide[i];
    }
    r
}

#[test]
fn a_genuine_journal_renamed_away_and_replaced_is_refused() {
    let f = Fixture::new();
    let mut wide = vec![false; 300];
    f.a_file(
        "doc.txt",
        &corrected(std::str::from_utf8(&slots_view(&wide)).unwrap()),
    );
    {
        let d = start(&f.backing, &f.mnt, &[]).unwrap();
        let file = OpenOptions::new().write(true).open(d.m("doc.txt")).unwrap();
        toggle(&file, &mut wide, 10);
    }
    let md = fs::symlink_metadata(f.b(JOURNAL)).expect("the shifting write made no journal");
    assert!(md.is_dir() && md.uid() == 0 && md.mode() & 0o7777 == 0o700);
    f.as_a(
        "mv .cutf8fs-journal .cutf8fs-journal.old; \
         mkdir -m 700 .cutf8fs-journal; mkdir -m 700 .cutf8fs-journal/9-9.commit; \
         cd .cutf8fs-journal/9-9.commit; ln -s \"$2\" target; printf PWN > tail; printf 0 > offset",
    );
    f.refused(&[], &f.b(JOURNAL), "rm -r");
    f.assert_secret_intact();
    // The genuine one, renamed, is not the journal any more but stays hidden.
    let d = {
        f.as_a("rm -r .cutf8fs-journal");
        start(&f.backing, &f.mnt, &[]).unwrap()
    };
    let names: Vec<_> = fs::read_dir(d.m(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n.as_bytes().starts_with(b".cutf8fs-")),
        "{names:?}"
    );
    assert_eq!(fs::read(d.m("doc.txt")).unwrap(), slots_view(&wide));
}

#[test]
fn a_journal_swapped_while_mounted_misdirects_nothing() {
    let f = Fixture::new();
    let outside = f.dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    std::os::unix::fs::chown(&outside, Some(f.a.uid), Some(f.a.gid)).unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o777)).unwrap();
    let outside_stamp = stamp(&outside);
    let mut wide = vec![false; 2000];
    f.a_file(
        "doc.txt",
        &corrected(std::str::from_utf8(&slots_view(&wide)).unwrap()),
    );
    fs::hard_link(f.b("doc.txt"), f.b("doc-link.txt")).unwrap();
    let d = start(&f.backing, &f.mnt, &["allow_other"]).unwrap();
    let file = OpenOptions::new().write(true).open(d.m("doc.txt")).unwrap();

    // Before the journal exists: A's symlink in its place. The rewrite that
    // needs it fails and changes nothing; nothing appears outside.
    f.as_a("mv -T .cutf8fs-journal .cutf8fs-j0 2>/dev/null || true; ln -s \"$3/outside\" .cutf8fs-journal");
    let before = fs::read(f.b("doc.txt")).unwrap();
    let r = file.write_all_at("ࠀ".as_bytes(), 30);
    eprintln!("a rewrite with a planted journal symlink: {r:?}");
    let got = listing(&outside);
    assert!(got.is_empty(), "the daemon wrote outside BACKING: {got:?}");
    assert_eq!(
        stamp(&outside),
        outside_stamp,
        "the daemon wrote outside BACKING"
    );
    assert!(r.is_err(), "a rewrite went through A's journal");
    assert_eq!(fs::read(f.b("doc.txt")).unwrap(), before);
    f.as_a("rm .cutf8fs-journal");

    // The daemon makes its own, then A swaps it for a symlink over and over
    // while the rewrites go on.
    toggle(&file, &mut wide, 1);
    let md = fs::symlink_metadata(f.b(JOURNAL)).expect("the shifting write made no journal");
    assert!(md.is_dir() && md.uid() == 0 && md.mode() & 0o7777 == 0o700);
    let attacker = {
        // Each round: move whatever has the name away, plant a symlink to
        // `outside`, and every other round free the name again (so the
        // daemon makes new journals that the next round moves away).
        let script = "cd \"$1\"; for i in $(seq 1 200); do \
             mv -T .cutf8fs-journal .cutf8fs-j$i 2>/dev/null; \
             ln -sn \"$3/outside\" .cutf8fs-journal 2>/dev/null; \
             if [ $((i % 2)) = 0 ]; then rm -f .cutf8fs-journal 2>/dev/null; fi; \
             done; true"
            .to_string();
        let a = f.a;
        let args = [
            f.backing.clone().into_os_string(),
            f.secret().into_os_string(),
            f.dir.path().as_os_str().to_owned(),
        ];
        std::thread::spawn(move || {
            let refs: Vec<&OsStr> = args.iter().map(|s| s.as_os_str()).collect();
            sh_as(a, &script, &refs)
        })
    };
    // A rewrite that finds the name taken by A's symlink fails (EPERM) and
    // changes nothing; the others go through the daemon's own directory.
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let (mut ok, mut failed) = (0, 0);
    while ok + failed < 400 || !attacker.is_finished() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // A write across a page boundary may reach the daemon as two
        // requests, the first done before the second is refused (a short
        // write, as POSIX allows): keep refusals whole by not crossing.
        let i = (rng % 2000) as usize;
        if (3 * i) / 4096 != (3 * i + 2) / 4096 {
            continue;
        }
        match try_toggle(&file, &mut wide, i) {
            Ok(()) => ok += 1,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                failed += 1;
            }
        }
    }
    let out = attacker.join().unwrap();
    crate::support::run::succeeded(&out, "command failed");
    let moved = fs::read_dir(&f.backing)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .as_bytes()
                .starts_with(b".cutf8fs-j")
        })
        .count();
    eprintln!("rewrites: {ok} done, {failed} refused; {moved} journals or symlinks moved away");
    assert!(ok > 0, "no rewrite went through while the name was free");
    // Once the name is free again, the daemon makes a new journal of its own.
    // (The last round freed the name, so it may hold the daemon's own.)
    f.as_a("if [ -L .cutf8fs-journal ]; then rm .cutf8fs-journal; fi");
    toggle(&file, &mut wide, 7);
    drop(file);

    // Nothing appeared outside BACKING (not even for a while: the
    // directory's times would show it).
    let got = listing(&outside);
    assert!(got.is_empty(), "the daemon wrote outside BACKING: {got:?}");
    assert_eq!(
        stamp(&outside),
        outside_stamp,
        "the daemon wrote outside BACKING"
    );
    let want = slots_view(&wide);
    for name in ["doc.txt", "doc-link.txt"] {
        let got = fs::read(d.m(name)).unwrap();
        let disk = fs::read(f.b(name)).unwrap();
        let first = (0..want.len().min(got.len())).find(|&k| got[k] != want[k]);
        assert!(
            got == want,
            "{name}: view differs from the model (lengths {} / {}, first at {first:?}); \
             disk is{} the model's encoding",
            got.len(),
            want.len(),
            if disk == corrected(std::str::from_utf8(&want).unwrap()) {
                ""
            } else {
                " not"
            }
        );
    }
    assert_eq!(fs::metadata(f.b("doc.txt")).unwrap().nlink(), 2);
    // Every journal directory the daemon made is private and empty again.
    for e in fs::read_dir(&f.backing).unwrap() {
        let e = e.unwrap();
        let md = fs::symlink_metadata(e.path()).unwrap();
        let journal = e.file_name().to_string_lossy().starts_with(".cutf8fs-j");
        if md.is_dir() && md.uid() == 0 && journal {
            assert_eq!(md.mode() & 0o7777, 0o700, "{:?}", e.path());
            assert!(entries(&e.path()).is_empty(), "{:?}", listing(&e.path()));
        }
    }
}

// ---------------------------------------------------------------- read-only

#[test]
fn a_read_only_mount_writes_nothing_to_backing() {
    let f = Fixture::new();
    fill_tree(&f);
    let before = snapshot(&f.backing);
    {
        let d = start(&f.backing, &f.mnt, &["ro"]).unwrap();
        exercise_read_only(&d);
    }
    assert!(!f.b(JOURNAL).exists(), "-o ro created the journal");
    assert_eq!(snapshot(&f.backing), before, "-o ro changed BACKING");
}

/// A read-only bind mount of BACKING at `dir/robind`; undone on drop.
struct RoBind(PathBuf);

impl RoBind {
    fn new(f: &Fixture) -> RoBind {
        let p = f.dir.path().join("robind");
        fs::create_dir(&p).unwrap();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("mount").arg("--bind").arg(&f.backing).arg(&p));
        let r = RoBind(p);
        ok(Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&r.0));
        r
    }
}

impl Drop for RoBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_read_only_backing_is_served_and_never_written() {
    let f = Fixture::new();
    fill_tree(&f);
    let before = snapshot(&f.backing);
    {
        let ro = RoBind::new(&f);
        let d = start(&ro.0, &f.mnt, &[])
            .unwrap_or_else(|m| panic!("a read-only BACKING was not served:\n{m}"));
        exercise_read_only(&d);
    }
    assert!(!f.b(JOURNAL).exists());
    assert_eq!(snapshot(&f.backing), before, "BACKING changed");
}

#[test]
fn a_committed_entry_refuses_a_read_only_start_and_a_read_write_one_finishes_it() {
    let f = Fixture::new();
    fs::create_dir(f.b("dir")).unwrap();
    let old_view = "old text ".repeat(100) + "ࠀ end\n";
    let new_view = "NEW ࠀ text, longer than before ".repeat(40);
    f.a_file("dir/f.txt", &corrected(&old_view));
    // What a daemon killed right after its commit point leaves.
    {
        let root = File::open(&f.backing).unwrap();
        let j = cutf8fs::redo::RedoJournal::open(root.as_fd(), false).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(f.b("dir/f.txt"))
            .unwrap();
        let tail = encode_strict(new_view.as_bytes()).unwrap();
        j.commit_only(&file, MAGIC.len() as u64, |w| w.write_all(&tail))
            .unwrap();
    }
    let old_disk = corrected(&old_view);
    assert_eq!(fs::read(f.b("dir/f.txt")).unwrap(), old_disk);
    let before = snapshot(&f.backing);
    let msg = f.refused(&["ro"], &f.b(JOURNAL), "Mount read-write once");
    assert!(
        msg.contains("dir/f.txt"),
        "the refusal does not name the file:\n{msg}"
    );
    {
        let ro = RoBind::new(&f);
        match start(&ro.0, &f.mnt, &[]) {
            Ok(_) => panic!("a read-only BACKING with a committed entry was served"),
            Err(m) => assert!(
                m.contains("dir/f.txt") && m.contains("read-write once"),
                "{m}"
            ),
        }
    }
    assert_eq!(
        snapshot(&f.backing),
        before,
        "a refused start changed BACKING"
    );
    let d = start(&f.backing, &f.mnt, &[]).unwrap();
    assert_eq!(fs::read(d.m("dir/f.txt")).unwrap(), new_view.as_bytes());
    assert_eq!(fs::read(f.b("dir/f.txt")).unwrap(), corrected(&new_view));
    assert_eq!(fs::metadata(f.b("dir/f.txt")).unwrap().nlink(), 1);
    assert!(
        entries(&f.b(JOURNAL)).is_empty(),
        "{:?}",
        listing(&f.b(JOURNAL))
    );
}

// ---------------------------------------------------------------- migrate

#[test]
fn migrate_never_enters_converts_or_reports_the_mounts_files() {
    let f = Fixture::new();
    fs::create_dir_all(f.b(".cutf8fs-journal/1-1.commit")).unwrap();
    fs::write(f.b(".cutf8fs-journal/1-1.commit/tail"), "journal text ü\n").unwrap();
    fs::create_dir(f.b("sub")).unwrap();
    fs::write(f.b("sub/.cutf8fs-index"), "index text ü\n").unwrap();
    fs::write(f.b("a.txt"), "plain text ü\n").unwrap();
    fs::write(f.b("sub/b.txt"), "more text ü\n").unwrap();
    let report = f.dir.path().join("report.jsonl");
    let cutf8 = crate::support::cli::BIN;
    let run = |args: &[&OsStr]| {
        let out = Command::new(cutf8)
            .arg("migrate")
            .args(args)
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{all}");
        assert!(
            !all.contains(".cutf8fs-"),
            "migrate reported the mount's files:\n{all}"
        );
    };
    run(&[
        OsStr::new("--report"),
        report.as_os_str(),
        f.backing.as_os_str(),
    ]);
    let rep = fs::read_to_string(&report).unwrap();
    assert!(!rep.contains(".cutf8fs-"), "{rep}");
    assert!(fs::read(f.b("a.txt")).unwrap().starts_with(&MAGIC));
    assert!(fs::read(f.b("sub/b.txt")).unwrap().starts_with(&MAGIC));
    // Named directly, still left alone.
    run(&[f.b(".cutf8fs-journal").as_os_str()]);
    run(&[f.b(".cutf8fs-journal/1-1.commit/tail").as_os_str()]);
    assert_eq!(
        fs::read(f.b(".cutf8fs-journal/1-1.commit/tail")).unwrap(),
        "journal text ü\n".as_bytes()
    );
    assert_eq!(
        fs::read(f.b("sub/.cutf8fs-index")).unwrap(),
        "index text ü\n".as_bytes()
    );
}
