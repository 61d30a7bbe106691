//! `-o archive`: a read-only mount whose regular files cost no request per
//! open once their pages are cached (no OPEN, FLUSH or RELEASE), read
//! exactly as on a default mount, corrected and raw, with the kernel's
//! permission checks, changes in BACKING seen, deleted files released, and
//! locks kept in the mount.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use crate::locks::Locker;
use crate::support::mount::{corrected, expected_view, random_disk, wait_for, Mount};
use crate::support::users::{sh_as, user};

fn tree(b: &std::path::Path) {
    for i in 0..300 {
        let text = format!("héllo wörld {i}\nsecond line ✓ {i}\n").repeat(1 + i % 7);
        fs::write(
            b.join(format!("c{i}.txt")),
            corrected(&cutf8::encode_strict(text.as_bytes()).unwrap()),
        )
        .unwrap();
    }
    fs::create_dir(b.join("sub")).unwrap();
    fs::write(b.join("sub/plain.txt"), "plain ascii, raw on disk\n").unwrap();
    fs::write(b.join("big.bin"), random_disk(3 << 20, 7)).unwrap();
    fs::write(b.join("big.cu8"), corrected(&random_disk(3 << 20, 8))).unwrap();
}

/// Every file reads through the archive as its view, the same bytes a
/// default mount gives; warm passes over the whole tree cost no OPEN,
/// FLUSH or RELEASE, and no READ while the kernel keeps the pages.
///
/// What the kernel does (fs/fuse/file.c, `fuse_file_open`; `fuse_flush`):
/// it stops sending OPEN (FLUSH) once one is answered ENOSYS, so an OPEN
/// or FLUSH already on its way then is sent too, and answered the same.
/// The first pass here opens one file at a time, but whoever else opens a
/// file of the mount at that moment adds one: 7 runs of 15 asked 2 or 3
/// OPENs with two `cat` loops opening files of the mount. Hence "at least
/// one" before the warm passes and "not one more" during them. An OPEN
/// answered with a handle would show as a RELEASE at its close: none.
///
/// The kernel may also drop cached pages (memory pressure, or a
/// `drop_caches`: tests/memory.rs and tests/export.rs write it, for the
/// whole machine, maybe while this test runs) and READ them again, which
/// the mount could not have spared: 8 runs of 10 sent READs in a warm pass
/// with `echo 2 > /proc/sys/vm/drop_caches` every 0.2 s, and one run of
/// 17 beside the `cat` loops READ 3, 0, 1, 587 and 119 times in its warm
/// passes. So the warm passes go on until one sends no READ, up to
/// [`WARM_PASSES`]: a mount that lost its cache at each open would READ in
/// every one.
#[test]
fn warm_reads_cost_no_request_and_read_as_a_default_mount() {
    const WARM_PASSES: usize = 5;
    let m = Mount::new(&["archive"], tree);
    let names: Vec<String> = (0..300)
        .map(|i| format!("c{i}.txt"))
        .chain(["sub/plain.txt", "big.bin", "big.cu8"].map(String::from))
        .collect();
    for n in &names {
        let want = expected_view(&fs::read(m.b(n)).unwrap());
        assert!(fs::read(m.m(n)).unwrap() == want, "{n} reads wrong");
    }
    let counts = || ["open", "flush", "release", "read"].map(|k| m.requests(k));
    let [open, flush, _, _] = counts();
    assert!(
        open >= 1 && flush >= 1,
        "no OPEN or no FLUSH was asked (open {open}, flush {flush})"
    );
    let mut reads = Vec::new();
    for pass in 1..=WARM_PASSES {
        let [_, _, _, read_before] = counts();
        let out = std::process::Command::new("grep")
            .args(["-r", "-c", "wörld"])
            .arg(m.m(""))
            .output()
            .unwrap();
        assert!(out.status.success());
        for n in &names {
            let mut f = fs::File::open(m.m(n)).unwrap();
            let mut v = Vec::new();
            f.read_to_end(&mut v).unwrap();
        }
        let [o, f, r, read] = counts();
        assert_eq!(
            [o, f, r],
            [open, flush, 0],
            "warm pass {pass} asked OPEN, FLUSH or RELEASE (open, flush, release):\n{}",
            m.log_text()
        );
        reads.push(read - read_before);
        // At least two passes, for OPEN, FLUSH and RELEASE.
        if pass >= 2 && reads.contains(&0) {
            break;
        }
    }
    assert!(
        reads.contains(&0),
        "every warm pass sent READs (by pass: {reads:?}):\n{}",
        m.log_text()
    );
    // The same through a default mount of the same tree, byte for byte.
    let dflt = Mount::new(&[], tree);
    for n in &names {
        assert!(
            fs::read(m.m(n)).unwrap() == fs::read(dflt.m(n)).unwrap(),
            "{n}"
        );
    }
}

/// Nothing is written: every kind of change fails with EROFS, and BACKING
/// is as it was.
#[test]
fn every_change_is_refused_read_only() {
    let m = Mount::new(&["archive"], tree);
    let before = fs::read(m.b("c1.txt")).unwrap();
    let erofs = |r: std::io::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{what}: {e}");
    };
    erofs(
        fs::OpenOptions::new()
            .write(true)
            .open(m.m("c1.txt"))
            .map(drop),
        "open for writing",
    );
    erofs(fs::write(m.m("new.txt"), "x"), "create");
    erofs(fs::create_dir(m.m("d")), "mkdir");
    erofs(fs::remove_file(m.m("c2.txt")), "unlink");
    erofs(fs::rename(m.m("c3.txt"), m.m("c4.txt")), "rename");
    erofs(
        fs::set_permissions(m.m("c1.txt"), fs::Permissions::from_mode(0o600)),
        "chmod",
    );
    assert_eq!(fs::read(m.b("c1.txt")).unwrap(), before);
    assert!(m.b("c2.txt").exists() && m.b("c3.txt").exists() && !m.b("new.txt").exists());
}

/// The kernel's permission checks hold without OPEN: a user cannot read a
/// file its mode bits refuse, and reads one they allow.
#[test]
fn a_user_reads_only_what_the_mode_bits_allow() {
    let u = user("cutf8t-a");
    let m = Mount::new(&["archive", "allow_other"], |b| {
        tree(b);
        fs::set_permissions(b.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b.join("c5.txt"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(b.join("c6.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    });
    // Root read it first: its pages are cached, the kernel still checks.
    fs::read(m.m("c5.txt")).unwrap();
    let out = sh_as(
        u,
        "cat \"$1\" >/dev/null; echo \"private=$?\"; cat \"$2\" >/dev/null; echo \"public=$?\"",
        &[m.m("c5.txt").as_os_str(), m.m("c6.txt").as_os_str()],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("private=1"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("public=0"), "{said}");
}

/// A file changed in BACKING reads as changed (the watch drops the
/// kernel's cached pages); a file deleted in BACKING is released by the
/// daemon within its idle time although nothing through the mount closed
/// it (no RELEASE comes in this mode).
#[test]
fn changes_in_backing_show_and_deleted_files_are_released() {
    let m = Mount::new(&["archive"], tree);
    assert!(fs::read(m.m("c7.txt"))
        .unwrap()
        .starts_with("héllo wörld 7".as_bytes()));
    let new = "changed beside the mount ✓\n";
    let tmp = m.b("c7.tmp");
    fs::write(
        &tmp,
        corrected(&cutf8::encode_strict(new.as_bytes()).unwrap()),
    )
    .unwrap();
    fs::rename(&tmp, m.b("c7.txt")).unwrap();
    assert!(
        wait_for(5.0, || fs::read(m.m("c7.txt"))
            .is_ok_and(|v| v == new.as_bytes())),
        "the change in BACKING never showed"
    );
    // In place too (same inode, new size and mtime).
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.b("sub/plain.txt"))
        .unwrap();
    fs::read(m.m("sub/plain.txt")).unwrap();
    f.write_all(b"appended\n").unwrap();
    drop(f);
    assert!(wait_for(5.0, || fs::read(m.m("sub/plain.txt"))
        .is_ok_and(|v| v.ends_with(b"appended\n"))));
    // Read, then deleted in BACKING: the daemon lets go of it.
    fs::read(m.m("big.bin")).unwrap();
    fs::remove_file(m.b("big.bin")).unwrap();
    let held = || {
        fs::read_dir(format!("/proc/{}/fd", m.pid()))
            .unwrap()
            .filter_map(|e| fs::read_link(e.unwrap().path()).ok())
            .any(|p| p.to_string_lossy().contains("big.bin"))
    };
    assert!(
        wait_for(10.0, || !held()),
        "the daemon still holds the deleted file open"
    );
}

/// Locks work among the mount's processes, kept by the kernel in the
/// mount (man cutf8fs, MOUNT OPTIONS, archive): a read lock taken through
/// one process is seen by another's F_GETLK, goes when its holder closes
/// any descriptor of the file, and flock excludes as natively. They do not
/// reach BACKING (no close is heard of, so none could be released there).
#[test]
fn locks_hold_among_the_mounts_processes_and_stay_in_the_mount() {
    let m = Mount::new(&["archive"], tree);
    let path = m.m("c8.txt").display().to_string();
    let mut a = Locker::new();
    let mut b = Locker::new();
    let mut native = Locker::new();
    a.ok(&format!("open f {path} ro"));
    a.ok("dup g f");
    b.ok(&format!("open f {path} ro"));
    native.ok(&format!("open f {} ro", m.b("c8.txt").display()));
    a.ok("posix f rd 0 0 nowait");
    let seen = b.run("getlk posix f wr 0 0");
    assert!(
        seen.starts_with("ok rd"),
        "the holder's lock is not seen: {seen}"
    );
    assert_eq!(
        native.run("getlk posix f wr 0 0"),
        "ok un 0 0 0",
        "the lock reached BACKING"
    );
    // Closing another descriptor of the holder releases it (POSIX).
    a.ok("close g");
    assert_eq!(
        b.run("getlk posix f wr 0 0"),
        "ok un 0 0 0",
        "not released at close"
    );
    a.ok("flock f wr nb");
    assert_eq!(b.run("flock f wr nb"), "err EAGAIN");
    a.ok("close f");
    b.ok("flock f wr nb");
}
