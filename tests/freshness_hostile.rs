//! The kinds of native change `freshness` does not make, made the way a
//! hostile checker would: extended attributes and ACLs (access checked as
//! a real unprivileged user), writes through a hard link outside BACKING
//! and through a second (bind) mount, `O_DIRECT`, `copy_file_range`, `cp`,
//! hole punching and preallocation, a file that gains or loses the magic
//! number, `RENAME_EXCHANGE`, files moved into and out of BACKING,
//! `mkdir`/`rmdir`, symlinks created and retargeted, a directory renamed
//! over an empty one, a reader holding the file open while it grows
//! (`tail -f`), a burst of appends, one inode under two names, a rename's
//! new change time seen through an open descriptor, and BACKING's own root.
//!
//! Each change is made after the mount's view was read (stat, two reads,
//! the listing: the kernel holds names, attributes and pages) and must
//! show within [`AT_ONCE`]; the kernel may keep what it holds for 300 s
//! (the default timeouts while the watch runs), so nothing here can pass
//! by expiry. The control test makes the same changes with no watch and
//! the same long timeouts, and names the kinds that then stay hidden: for
//! those, the first test measures the watch and nothing else.
//!
//! Writes through a shared mapping raise no event (man page, CACHING): the
//! last test checks the documented fallback, the next open.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::freshness::{all_hidden_without_the_watch, all_shown_by_the_watch, names, read, shows};
use crate::support::mount::{corrected, expected_view, Mount};
use crate::support::users::{sh_as, user, User};

/// "At once": far below the kernel's 300 s, and below even the 1 s it
/// falls back to without a watch.
const AT_ONCE: Duration = Duration::from_secs(2);

fn len(p: &Path) -> Option<u64> {
    fs::metadata(p).map(|a| a.len()).ok()
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::getxattr(p, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Whether `u` can read `p` (through `cat`, as that user).
fn can_read(u: User, p: &Path) -> bool {
    sh_as(u, "cat -- \"$1\" >/dev/null 2>&1", &[p.as_os_str()])
        .status
        .success()
}

fn sh(script: &str, args: &[&Path]) {
    let out = Command::new("sh")
        .args(["-c", script, "sh"])
        .args(args)
        .output()
        .expect("sh");
    crate::support::run::succeeded(&out, format_args!("`{script}`"));
}

/// Bytes whose view is longer than they are on disk (characters the view
/// writes with more bytes), so a file that gains or loses the magic number
/// changes its size too.
fn payload() -> Vec<u8> {
    let mut v = b"payload: ".to_vec();
    for _ in 0..50 {
        v.extend(crate::support::mount::every_kind());
    }
    v
}

/// Not the magic number: as long as it, so writing one over the other
/// changes the class and not the size on disk.
const NOT_MAGIC: [u8; 8] = *b"RAWRAW\n\n";

const USER: &str = "cutf8t-a";

fn populate(b: &Path) {
    let top = b.parent().unwrap();
    fs::set_permissions(top, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    for f in [
        "xa", "xa-dir", "outlink", "bindw", "cfr-src", "cfr-dst", "cp-dst", "grow", "falloc",
        "hl1", "ct", "ct-other", "delopen", "tailf", "burst",
    ] {
        fs::write(b.join(f), format!("{f}: raw \u{0} bytes, first version\n")).unwrap();
    }
    fs::remove_file(b.join("xa-dir")).unwrap();
    fs::create_dir(b.join("xa-dir")).unwrap();
    rustix::fs::setxattr(
        b.join("xa"),
        "user.k",
        b"one",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    rustix::fs::setxattr(
        b.join("xa-dir"),
        "user.k",
        b"one",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    fs::write(b.join("acl-deny"), "secret\n").unwrap();
    fs::set_permissions(b.join("acl-deny"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(b.join("acl-grant"), "for a\n").unwrap();
    fs::set_permissions(b.join("acl-grant"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(b.join("acl-dir")).unwrap();
    fs::set_permissions(b.join("acl-dir"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(b.join("acl-dir/in"), "in\n").unwrap();
    fs::hard_link(b.join("outlink"), top.join("outside-link")).unwrap();
    fs::write(b.join("direct"), vec![b'a'; 8192]).unwrap();
    fs::write(b.join("punch"), vec![b'p'; 8192]).unwrap();
    let mut raw = NOT_MAGIC.to_vec();
    raw.extend(payload());
    fs::write(b.join("to-corrected"), &raw).unwrap();
    fs::write(b.join("to-raw"), corrected(&payload())).unwrap();
    fs::write(b.join("x1"), "one\n").unwrap();
    fs::write(b.join("x2"), "two\n").unwrap();
    fs::write(b.join("xf"), "a file\n").unwrap();
    fs::create_dir(b.join("xd")).unwrap();
    fs::write(b.join("xd/in"), "in xd\n").unwrap();
    fs::write(top.join("incoming"), "from outside\n").unwrap();
    fs::write(b.join("outgoing"), "leaving\n").unwrap();
    fs::create_dir(b.join("olddir")).unwrap();
    fs::create_dir(b.join("srcdir")).unwrap();
    fs::write(b.join("srcdir/f"), "moved with its directory\n").unwrap();
    fs::create_dir(b.join("dstdir")).unwrap();
    fs::hard_link(b.join("hl1"), b.join("hl2")).unwrap();
    fs::hard_link(b.join("ct"), b.join("ct-link")).unwrap();
    fs::write(b.join("tailc"), corrected(b"corrected, first line\n")).unwrap();
    fs::write(b.join("rotated"), "a log line\nanother log line\n").unwrap();
    fs::write(b.join("corr-cut"), corrected(&payload())).unwrap();
    let mut blocks = vec![b'a'; 4096];
    blocks.extend(vec![b'b'; 4096]);
    blocks.extend(vec![b'c'; 4096]);
    fs::write(b.join("collapse"), blocks).unwrap();
    // Raw and large enough to be read by passthrough (man page, PASSTHROUGH).
    fs::write(b.join("tailp"), vec![b'r'; 256 << 10]).unwrap();
    fs::write(b.join("mapr"), "mapped through the mount, raw\n").unwrap();
    fs::write(
        b.join("mapc"),
        corrected("mapped through the mount, Grüße\n".as_bytes()),
    )
    .unwrap();
}

/// Every hostile kind, each after the mount's view was read; returns the
/// kinds that did not show within `within`.
fn hostile_changes(m: &Mount, within: Duration) -> Vec<&'static str> {
    let a = user(USER);
    let mut missed = Vec::new();
    let mut check = |what: &'static str, ok: &mut dyn FnMut() -> bool| {
        if !shows(within, ok) {
            missed.push(what);
        }
    };
    // Warm: the name, the attributes, the pages (the second open keeps
    // them) and the listing of its directory in the kernel.
    let warm = |rel: &str| {
        let p = m.m(rel);
        let _ = fs::metadata(&p);
        let _ = fs::read(&p);
        let _ = fs::read(&p);
        let _ = fs::read_link(&p);
        let _ = names(p.parent().unwrap());
    };
    let outside = |name: &str| -> PathBuf { m.dir().join(name) };
    let set = |p: PathBuf, v: &[u8]| {
        rustix::fs::setxattr(p, "user.k", v, rustix::fs::XattrFlags::empty()).unwrap()
    };

    // Extended attributes.
    warm("xa");
    let _ = xattr(&m.m("xa"), "user.k");
    set(m.b("xa"), b"two");
    check("xattr changed", &mut || {
        xattr(&m.m("xa"), "user.k").as_deref() == Some(b"two")
    });
    let _ = xattr(&m.m("xa"), "user.new");
    rustix::fs::setxattr(
        m.b("xa"),
        "user.new",
        b"new",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    check("xattr added", &mut || {
        xattr(&m.m("xa"), "user.new").as_deref() == Some(b"new")
    });
    rustix::fs::removexattr(m.b("xa"), "user.k").unwrap();
    check("xattr removed", &mut || {
        xattr(&m.m("xa"), "user.k").is_none()
    });
    warm("xa-dir");
    let _ = xattr(&m.m("xa-dir"), "user.k");
    set(m.b("xa-dir"), b"two");
    check("xattr of a directory changed", &mut || {
        xattr(&m.m("xa-dir"), "user.k").as_deref() == Some(b"two")
    });

    // ACLs: the kernel checks access with the ACL it caches.
    warm("acl-deny");
    assert!(can_read(a, &m.m("acl-deny")), "{USER} reads acl-deny");
    assert!(can_read(a, &m.m("acl-deny")));
    sh("setfacl -m u:cutf8t-a:--- \"$1\"", &[&m.b("acl-deny")]);
    assert!(!can_read(a, &m.b("acl-deny")), "the ACL denies in BACKING");
    check("ACL that denies", &mut || !can_read(a, &m.m("acl-deny")));
    warm("acl-grant");
    assert!(!can_read(a, &m.m("acl-grant")));
    assert!(!can_read(a, &m.m("acl-grant")));
    sh("setfacl -m u:cutf8t-a:r \"$1\"", &[&m.b("acl-grant")]);
    check("ACL that grants", &mut || can_read(a, &m.m("acl-grant")));
    warm("acl-dir/in");
    assert!(can_read(a, &m.m("acl-dir/in")));
    assert!(can_read(a, &m.m("acl-dir/in")));
    sh("setfacl -m u:cutf8t-a:r \"$1\"", &[&m.b("acl-dir")]);
    check("ACL of a directory (no search)", &mut || {
        !can_read(a, &m.m("acl-dir/in"))
    });

    // Writes that do not go through BACKING's own path.
    warm("outlink");
    fs::OpenOptions::new()
        .write(true)
        .open(outside("outside-link"))
        .unwrap()
        .write_all_at(b"OUTSIDE", 0)
        .unwrap();
    let want = read(&m.b("outlink"));
    check("write through a hard link outside BACKING", &mut || {
        read(&m.m("outlink")) == want
    });

    warm("bindw");
    {
        let bind = Bind::new(&m.backing, &outside("bind"));
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(bind.0.join("bindw"))
            .unwrap();
        f.write_all(b"appended through a bind mount\n").unwrap();
    }
    let want = read(&m.b("bindw"));
    check("append through a bind mount of BACKING", &mut || {
        read(&m.m("bindw")) == want && len(&m.m("bindw")) == Some(want.len() as u64)
    });

    warm("direct");
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.b("direct"))
            .unwrap();
        let mut buf = vec![0u8; 3 * 4096];
        let at = buf.as_ptr().align_offset(4096);
        let block = &mut buf[at..at + 4096];
        block.fill(b'D');
        f.write_all_at(block, 4096).unwrap();
    }
    let mut want = vec![b'a'; 4096];
    want.extend(vec![b'D'; 4096]);
    assert_eq!(read(&m.b("direct")), want);
    check("O_DIRECT write", &mut || read(&m.m("direct")) == want);

    warm("cfr-dst");
    {
        let src = fs::File::open(m.b("cfr-src")).unwrap();
        let dst = fs::OpenOptions::new()
            .write(true)
            .open(m.b("cfr-dst"))
            .unwrap();
        let n = fs::metadata(m.b("cfr-src")).unwrap().len() as usize;
        let (mut from, mut to) = (0u64, 4u64);
        let done =
            rustix::fs::copy_file_range(&src, Some(&mut from), &dst, Some(&mut to), n).unwrap();
        assert_eq!(done, n);
    }
    let want = read(&m.b("cfr-dst"));
    check("copy_file_range into a file", &mut || {
        read(&m.m("cfr-dst")) == want && len(&m.m("cfr-dst")) == Some(want.len() as u64)
    });

    warm("cp-dst");
    fs::write(
        outside("cp-src"),
        "copied over by cp --reflink=auto, longer\n",
    )
    .unwrap();
    sh(
        "cp --reflink=auto \"$1\" \"$2\"",
        &[&outside("cp-src"), &m.b("cp-dst")],
    );
    check("cp --reflink=auto over a file", &mut || {
        read(&m.m("cp-dst")) == b"copied over by cp --reflink=auto, longer\n"
    });

    warm("punch");
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.b("punch"))
            .unwrap();
        rustix::fs::fallocate(
            &f,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            4096,
        )
        .unwrap();
    }
    let mut want = vec![0u8; 4096];
    want.extend(vec![b'p'; 4096]);
    check("fallocate --punch-hole", &mut || {
        read(&m.m("punch")) == want
    });

    warm("falloc");
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.b("falloc"))
            .unwrap();
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, 65536).unwrap();
    }
    let want = read(&m.b("falloc"));
    assert_eq!(want.len(), 65536);
    check("fallocate -l (the size grows)", &mut || {
        len(&m.m("falloc")) == Some(65536) && read(&m.m("falloc")) == want
    });

    warm("collapse");
    {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(m.b("collapse"))
            .unwrap();
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::COLLAPSE_RANGE, 4096, 4096).unwrap();
    }
    let mut want = vec![b'a'; 4096];
    want.extend(vec![b'c'; 4096]);
    assert_eq!(read(&m.b("collapse")), want);
    check("fallocate --collapse-range (the size shrinks)", &mut || {
        len(&m.m("collapse")) == Some(8192) && read(&m.m("collapse")) == want
    });

    warm("grow");
    fs::OpenOptions::new()
        .write(true)
        .open(m.b("grow"))
        .unwrap()
        .set_len(100_000)
        .unwrap();
    let want = read(&m.b("grow"));
    check("truncate to a larger size", &mut || {
        len(&m.m("grow")) == Some(100_000) && read(&m.m("grow")) == want
    });

    // The class changes under the same size on disk.
    warm("to-corrected");
    fs::OpenOptions::new()
        .write(true)
        .open(m.b("to-corrected"))
        .unwrap()
        .write_all_at(&cutf8::MAGIC, 0)
        .unwrap();
    let want = expected_view(&read(&m.b("to-corrected")));
    assert_ne!(want.len() as u64, len(&m.b("to-corrected")).unwrap());
    check("raw file becomes corrected (magic written)", &mut || {
        len(&m.m("to-corrected")) == Some(want.len() as u64) && read(&m.m("to-corrected")) == want
    });
    warm("to-raw");
    fs::OpenOptions::new()
        .write(true)
        .open(m.b("to-raw"))
        .unwrap()
        .write_all_at(&NOT_MAGIC, 0)
        .unwrap();
    let want = read(&m.b("to-raw"));
    check(
        "corrected file becomes raw (magic overwritten)",
        &mut || len(&m.m("to-raw")) == Some(want.len() as u64) && read(&m.m("to-raw")) == want,
    );

    warm("corr-cut");
    fs::OpenOptions::new()
        .write(true)
        .open(m.b("corr-cut"))
        .unwrap()
        .set_len(4)
        .unwrap();
    check(
        "corrected file truncated inside its magic number",
        &mut || len(&m.m("corr-cut")) == Some(4) && read(&m.m("corr-cut")) == cutf8::MAGIC[..4],
    );

    // Names.
    warm("x1");
    warm("x2");
    let (i1, i2) = (ino(&m.m("x1")), ino(&m.m("x2")));
    exchange(&m.b("x1"), &m.b("x2"));
    check("RENAME_EXCHANGE of two files", &mut || {
        read(&m.m("x1")) == b"two\n"
            && read(&m.m("x2")) == b"one\n"
            && (ino(&m.m("x1")), ino(&m.m("x2"))) == (i2, i1)
    });

    warm("xf");
    warm("xd/in");
    exchange(&m.b("xf"), &m.b("xd"));
    check("RENAME_EXCHANGE of a file and a directory", &mut || {
        m.m("xf").is_dir()
            && names(&m.m("xf")) == ["in"]
            && read(&m.m("xf/in")) == b"in xd\n"
            && read(&m.m("xd")) == b"a file\n"
    });

    warm("incoming");
    fs::rename(outside("incoming"), m.b("incoming")).unwrap();
    check("file moved into BACKING", &mut || {
        read(&m.m("incoming")) == b"from outside\n"
            && names(&m.mnt).contains(&"incoming".to_string())
    });

    warm("outgoing");
    fs::rename(m.b("outgoing"), outside("outgoing")).unwrap();
    check("file moved out of BACKING", &mut || {
        !m.m("outgoing").exists() && !names(&m.mnt).contains(&"outgoing".to_string())
    });

    warm("newdir");
    fs::create_dir(m.b("newdir")).unwrap();
    check("mkdir", &mut || {
        m.m("newdir").is_dir() && names(&m.mnt).contains(&"newdir".to_string())
    });

    warm("olddir");
    let _ = names(&m.m("olddir"));
    fs::remove_dir(m.b("olddir")).unwrap();
    check("rmdir", &mut || {
        !m.m("olddir").exists() && !names(&m.mnt).contains(&"olddir".to_string())
    });

    warm("sl");
    std::os::unix::fs::symlink("target-a", m.b("sl")).unwrap();
    check("symlink created", &mut || {
        fs::read_link(m.m("sl")).ok() == Some("target-a".into())
    });
    warm("sl");
    sh("ln -sfn target-b \"$1\"", &[&m.b("sl")]);
    check("symlink retargeted (ln -sfn)", &mut || {
        fs::read_link(m.m("sl")).ok() == Some("target-b".into())
    });

    warm("srcdir/f");
    warm("dstdir");
    let _ = names(&m.m("dstdir"));
    fs::rename(m.b("srcdir"), m.b("dstdir")).unwrap();
    check("directory renamed over an empty one", &mut || {
        !m.m("srcdir").exists()
            && names(&m.m("dstdir")) == ["f"]
            && read(&m.m("dstdir/f")) == b"moved with its directory\n"
    });

    // Readers that hold the file.
    for (rel, more, what) in [
        (
            "tailf",
            &b"appended while a reader waits\n"[..],
            "tail -f: an open reader sees appended bytes (raw)",
        ),
        (
            "tailc",
            &b"corrected, second line\n"[..],
            "tail -f: an open reader sees appended bytes (corrected)",
        ),
        (
            "tailp",
            &b"appended to a file read by passthrough\n"[..],
            "tail -f: an open reader sees appended bytes (passthrough)",
        ),
    ] {
        warm(rel);
        let mut f = fs::File::open(m.m(rel)).unwrap();
        let mut seen = Vec::new();
        f.read_to_end(&mut seen).unwrap();
        let mut w = fs::OpenOptions::new().append(true).open(m.b(rel)).unwrap();
        w.write_all(more).unwrap();
        drop(w);
        let want = expected_view(&read(&m.b(rel)));
        check(what, &mut || {
            let _ = f.read_to_end(&mut seen);
            seen == want && f.metadata().map(|a| a.len()).ok() == Some(want.len() as u64)
        });
    }

    // A reader's shared mapping through the mount: the kernel's pages are
    // dropped (and unmapped), the next access faults the new bytes in.
    for (rel, what) in [
        (
            "mapr",
            "a mapping through the mount sees a native write (raw)",
        ),
        (
            "mapc",
            "a mapping through the mount sees a native write (corrected)",
        ),
    ] {
        warm(rel);
        let f = fs::File::open(m.m(rel)).unwrap();
        // SAFETY: a read-only mapping; the file's length stays the same
        // below (a write in place), so no access goes past its end.
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        let old = map.to_vec();
        let w = fs::OpenOptions::new().write(true).open(m.b(rel)).unwrap();
        let at = if rel == "mapc" { cutf8::MAGIC.len() } else { 0 };
        w.write_all_at(b"MAPPED", at as u64).unwrap();
        drop(w);
        let want = expected_view(&read(&m.b(rel)));
        assert_eq!(want.len(), old.len());
        check(what, &mut || map[..] == want[..]);
    }

    // A log rotated by copytruncate under a reader at its end.
    warm("rotated");
    {
        let mut f = fs::File::open(m.m("rotated")).unwrap();
        let mut seen = Vec::new();
        f.read_to_end(&mut seen).unwrap();
        let w = fs::OpenOptions::new()
            .write(true)
            .open(m.b("rotated"))
            .unwrap();
        w.set_len(0).unwrap();
        w.write_all_at(b"new log\n", 0).unwrap();
        drop(w);
        check("truncated under an open reader (copytruncate)", &mut || {
            let mut head = [0u8; 64];
            f.metadata().map(|a| a.len()).ok() == Some(8)
                && f.read_at(&mut head, 0).ok() == Some(8)
                && head[..8] == *b"new log\n"
        });
    }

    warm("burst");
    {
        let mut w = fs::OpenOptions::new()
            .append(true)
            .open(m.b("burst"))
            .unwrap();
        let start = Instant::now();
        for i in 0..1000 {
            w.write_all(format!("burst line {i:04}\n").as_bytes())
                .unwrap();
        }
        eprintln!("1000 appends in {:?}", start.elapsed());
    }
    let want = read(&m.b("burst"));
    check("1000 appends in a burst: the last state", &mut || {
        len(&m.m("burst")) == Some(want.len() as u64) && read(&m.m("burst")) == want
    });

    warm("hl1");
    warm("hl2");
    {
        let w = fs::OpenOptions::new().write(true).open(m.b("hl1")).unwrap();
        w.write_all_at(b"HL", 0).unwrap();
        let end = w.metadata().unwrap().len();
        w.write_all_at(b"longer now\n", end).unwrap();
    }
    let want = read(&m.b("hl1"));
    check(
        "one inode under two names: both show the write",
        &mut || {
            read(&m.m("hl1")) == want
                && read(&m.m("hl2")) == want
                && len(&m.m("hl2")) == Some(want.len() as u64)
        },
    );

    warm("ct");
    warm("ct-link");
    let held = fs::File::open(m.m("ct")).unwrap();
    let before = held.metadata().unwrap();
    // The clock moves past the change time's granularity: no event.
    std::thread::sleep(Duration::from_millis(20));
    fs::rename(m.b("ct"), m.b("ct-renamed")).unwrap();
    let after = fs::metadata(m.b("ct-renamed")).unwrap();
    assert_ne!(
        (before.ctime(), before.ctime_nsec()),
        (after.ctime(), after.ctime_nsec()),
        "rename moves the change time in BACKING"
    );
    check(
        "a rename's change time, through an open descriptor",
        &mut || {
            held.metadata().map(|a| (a.ctime(), a.ctime_nsec())).ok()
                == Some((after.ctime(), after.ctime_nsec()))
        },
    );
    check("a rename's change time, through another name", &mut || {
        fs::metadata(m.m("ct-link"))
            .map(|a| (a.ctime(), a.ctime_nsec()))
            .ok()
            == Some((after.ctime(), after.ctime_nsec()))
    });
    drop(held);

    warm("delopen");
    let held = fs::File::open(m.m("delopen")).unwrap();
    assert_eq!(held.metadata().unwrap().nlink(), 1);
    fs::remove_file(m.b("delopen")).unwrap();
    check("deleted while open: fstat shows no link", &mut || {
        held.metadata().map(|a| a.nlink()).ok() == Some(0)
    });
    drop(held);

    let _ = fs::metadata(&m.mnt);
    fs::set_permissions(&m.backing, fs::Permissions::from_mode(0o775)).unwrap();
    check("chmod of BACKING's root", &mut || {
        fs::metadata(&m.mnt).map(|a| a.mode() & 0o7777).ok() == Some(0o775)
    });

    missed
}

fn ino(p: &Path) -> Option<u64> {
    fs::metadata(p).map(|a| a.ino()).ok()
}

/// `renameat2(RENAME_EXCHANGE)`.
fn exchange(a: &Path, b: &Path) {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        a,
        rustix::fs::CWD,
        b,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .unwrap();
}

/// A bind mount of a directory, unmounted on drop.
struct Bind(PathBuf);

impl Bind {
    fn new(from: &Path, at: &Path) -> Bind {
        fs::create_dir_all(at).unwrap();
        sh("mount --bind \"$1\" \"$2\"", &[from, at]);
        Bind(at.to_path_buf())
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn hostile_native_changes_show_at_once_with_the_default_options() {
    let m = Mount::new(&["allow_other"], populate);
    all_shown_by_the_watch(&m, &hostile_changes(&m, AT_ONCE), AT_ONCE);
}

/// The control: the same changes with the same long timeouts and no
/// watch. The kinds listed stay hidden then, so for them the test above
/// measures the watch; the others show without it (a new open finds the
/// file's stamp moved, the kernel asks the daemon for every extended
/// attribute, the daemon itself opens the file as the caller and BACKING
/// checks the ACL, a listing is read again).
#[test]
fn without_the_watch_long_timeouts_hide_hostile_changes() {
    let run = || {
        let m = Mount::new(
            &[
                "allow_other",
                "watch=off",
                "attr_timeout=300",
                "entry_timeout=300",
            ],
            populate,
        );
        hostile_changes(&m, Duration::from_millis(300))
    };
    all_hidden_without_the_watch(
        run,
        &[
            "ACL of a directory (no search)",
            "fallocate --collapse-range (the size shrinks)",
            "fallocate -l (the size grows)",
            "truncate to a larger size",
            "raw file becomes corrected (magic written)",
            "corrected file becomes raw (magic overwritten)",
            "RENAME_EXCHANGE of two files",
            "RENAME_EXCHANGE of a file and a directory",
            "corrected file truncated inside its magic number",
            "file moved out of BACKING",
            "symlink retargeted (ln -sfn)",
            "directory renamed over an empty one",
            "tail -f: an open reader sees appended bytes (raw)",
            "tail -f: an open reader sees appended bytes (corrected)",
            "truncated under an open reader (copytruncate)",
            "a mapping through the mount sees a native write (raw)",
            "a mapping through the mount sees a native write (corrected)",
            "1000 appends in a burst: the last state",
            "a rename's change time, through an open descriptor",
            "a rename's change time, through another name",
            "deleted while open: fstat shows no link",
            "chmod of BACKING's root",
        ],
    );
}

/// Bytes written through a shared writable mapping in BACKING raise no
/// event; the documented fallback holds: the next open through the mount
/// reads them (the first write to a clean page moves the file's times, so
/// the open finds the stamp moved and drops the kernel's pages).
#[test]
fn a_shared_mapping_written_natively_shows_at_the_next_open() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("mapped"), vec![b'm'; 8192]).unwrap()
    });
    let mut f = fs::File::open(m.m("mapped")).unwrap();
    let mut first = Vec::new();
    f.read_to_end(&mut first).unwrap();
    assert_eq!(read(&m.m("mapped")), vec![b'm'; 8192]);
    let times = |p: &Path| {
        let a = fs::metadata(p).unwrap();
        (a.mtime(), a.mtime_nsec(), a.ctime(), a.ctime_nsec())
    };
    let before = times(&m.m("mapped"));
    let mut want = vec![b'm'; 8192];
    {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.b("mapped"))
            .unwrap();
        // SAFETY: the mapping covers the file, which nothing truncates
        // while it is mapped; the test writes it as any process may.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        map[100..106].copy_from_slice(b"MAPPED");
        want[100..106].copy_from_slice(b"MAPPED");
        // Not synced: the bytes are in BACKING's page cache only.
    }
    assert!(
        shows(AT_ONCE, || read(&m.m("mapped")) == want),
        "a new open through the mount still reads the old bytes"
    );
    assert_ne!(
        times(&m.b("mapped")),
        before,
        "the first write fault moves the times"
    );
    assert_eq!(
        times(&m.m("mapped")),
        times(&m.b("mapped")),
        "the times after the next open"
    );
    // The descriptor opened before reads them too, once the kernel's pages
    // were dropped by that open.
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut again = Vec::new();
    f.read_to_end(&mut again).unwrap();
    assert_eq!(again, want);
}

/// Two daemons serve one BACKING: what one writes is a native change for
/// the other, which shows it at once.
#[test]
fn a_write_through_a_second_daemon_shows_at_once_in_the_first() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("shared"), "first version\n").unwrap();
        fs::write(b.join("shared.txt"), corrected("Grüße, first\n".as_bytes())).unwrap();
    });
    let mnt2 = m.dir().join("mnt2");
    fs::create_dir(&mnt2).unwrap();
    let second = Mount::with(&[]).on(&m.backing, &mnt2, &m.dir().join("log2"));
    for rel in ["shared", "shared.txt"] {
        let _ = fs::metadata(m.m(rel));
        let _ = fs::read(m.m(rel));
        let _ = fs::read(m.m(rel));
    }
    let held = fs::File::open(m.m("shared.txt")).unwrap();
    fs::write(second.m("shared"), "second version, longer\n").unwrap();
    let mut w = fs::OpenOptions::new()
        .append(true)
        .open(second.m("shared.txt"))
        .unwrap();
    w.write_all("appended through the second daemon: ÄÖÜ\n".as_bytes())
        .unwrap();
    drop(w);
    let want = read(&second.m("shared.txt"));
    // Sizes first, by stat and through a descriptor opened before, so that
    // no open of this check's own refreshes them.
    assert!(
        shows(AT_ONCE, || len(&m.m("shared")) == Some(23)
            && held.metadata().map(|a| a.len()).ok()
                == Some(want.len() as u64)
            && read(&m.m("shared")) == b"second version, longer\n"
            && read(&m.m("shared.txt")) == want),
        "the first mount still shows {:?} and {:?}",
        String::from_utf8_lossy(&read(&m.m("shared"))),
        String::from_utf8_lossy(&read(&m.m("shared.txt")))
    );
    assert!(
        m.log_text().contains("watching BACKING's filesystem"),
        "{}",
        m.log_text()
    );
    drop(second);
}

/// A loop device backed by a file in BACKING writes it from inside the
/// kernel, raising no event either; the same fallback holds: the next
/// open through the mount reads what the device wrote.
#[test]
fn a_loop_device_written_natively_shows_at_the_next_open() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("disk.img"), vec![0u8; 64 << 10]).unwrap()
    });
    assert_eq!(read(&m.m("disk.img")), vec![0u8; 64 << 10]);
    assert_eq!(read(&m.m("disk.img")), vec![0u8; 64 << 10]);
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(m.b("disk.img"))
        .output()
        .expect("losetup");
    crate::support::run::succeeded(&out, "losetup --find --show");
    let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
    let _detach = Detach(dev.clone());
    sh(
        "printf 'WRITTEN BY A LOOP DEVICE' | dd of=\"$1\" bs=512 conv=notrunc,sync oflag=direct status=none",
        &[&dev],
    );
    let mut want = vec![0u8; 64 << 10];
    want[..24].copy_from_slice(b"WRITTEN BY A LOOP DEVICE");
    assert_eq!(
        read(&m.b("disk.img")),
        want,
        "the device wrote BACKING's file"
    );
    assert!(
        shows(AT_ONCE, || read(&m.m("disk.img")) == want),
        "a new open through the mount still reads the old bytes"
    );
}
