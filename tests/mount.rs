//! Real-mount tests of `cutf8fs`: the mirror and the read path.
//!
//! Each test mounts a fresh temporary BACKING with the built daemon (see
//! `crate::support::mount::Mount`), checks what the mount shows against what the
//! codec says it must show (computed without the mount), and unmounts. They
//! need root and FUSE; without FUSE they fail.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::support::mount::*;

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

#[test]
fn views_of_every_kind_of_corrected_file_equal_v() {
    let mut disk = every_kind();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("every-kind.txt", corrected(&disk)),
        ("random.txt", corrected(&random_disk(200_000, 7))),
        ("empty", vec![]),
        ("magic-only", corrected(b"")),
        ("near-magic-7", cutf8::MAGIC[..7].to_vec()),
        ("near-magic-8", {
            let mut m = cutf8::MAGIC.to_vec();
            m[7] = b'X';
            m
        }),
        ("magic-then-one", corrected(b"x")),
        ("ends-truncated", corrected(&[b'a', 0xF7, 0xBF])),
        (
            "raw-utf8.txt",
            "plain UTF-8, not corrected: é ࠀ 😀\n".as_bytes().to_vec(),
        ),
    ];
    disk.truncate(0);
    let m = Mount::new(&[], |b| {
        for (name, bytes) in &cases {
            write(&b.join(name), bytes);
        }
    });
    for (name, bytes) in &cases {
        let want = expected_view(bytes);
        let got = fs::read(m.m(name)).unwrap();
        assert!(
            got == want,
            "{name}: view differs from V ({} vs {} bytes)",
            got.len(),
            want.len()
        );
        let meta = fs::metadata(m.m(name)).unwrap();
        assert_eq!(
            meta.len(),
            want.len() as u64,
            "{name}: st_size is not the view length"
        );
        // Read in odd chunk sizes too (offsets inside characters).
        for chunk in [1usize, 7, 4093] {
            let mut f = fs::File::open(m.m(name)).unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == want, "{name}: chunked ({chunk}) read differs");
        }
    }
    // The backing files are untouched.
    for (name, bytes) in &cases {
        assert!(
            fs::read(m.b(name)).unwrap() == *bytes,
            "{name}: backing changed"
        );
    }
}

#[test]
fn thousands_of_random_preads_equal_slices_of_v() {
    let file = corrected(&random_disk(3 << 20, 42));
    let want = expected_view(&file);
    assert!(want.len() > file.len(), "test text must change length");
    // A tiny index cache forces eviction and rebuilds along the way.
    let m = Mount::new(&["index_cache=64k", "attr_timeout=0"], |b| {
        write(&b.join("big.txt"), &file);
        write(&b.join("other.txt"), &corrected(&random_disk(300_000, 9)));
    });
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..4 {
        // Close and reopen (the index comes from the cache or a rebuild).
        let f = fs::File::open(m.m("big.txt")).unwrap();
        let _ = fs::read(m.m("other.txt")).unwrap();
        for _ in 0..1500 {
            let off = rnd(want.len() as u64 + 100);
            let span = if rnd(4) == 0 { 300_000 } else { 9000 };
            let len = 1 + rnd(span) as usize;
            let mut buf = vec![0u8; len];
            let mut got = 0;
            while got < len {
                let n = f.read_at(&mut buf[got..], off + got as u64).unwrap();
                if n == 0 {
                    break;
                }
                got += n;
            }
            let s = (off as usize).min(want.len());
            let e = (s + len).min(want.len());
            assert!(
                buf[..got] == want[s..e],
                "round {round}: pread({off}, {len}) differs"
            );
        }
    }
}

#[test]
fn mmap_reads_the_view() {
    let file = corrected(&random_disk(500_000, 3));
    let want = expected_view(&file);
    let m = Mount::new(&[], |b| write(&b.join("t.txt"), &file));
    let f = fs::File::open(m.m("t.txt")).unwrap();
    // SAFETY: the file is not modified while mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert_eq!(map.len(), want.len());
    assert!(map[..] == want[..], "mmap differs from V");
}

#[test]
fn grep_find_and_stat_over_the_mount() {
    let mut expect_hits = 0;
    let mut files = Vec::new();
    for i in 0..300u64 {
        let mut disk = random_disk(2000 + (i as usize * 37) % 5000, i + 1);
        if i % 3 == 0 {
            // U+0800: C0 A0 on disk in a corrected file, E0 A0 80 in a raw one.
            if i % 2 == 0 {
                disk.extend(enc(0x0800));
            } else {
                disk.extend_from_slice("\u{800}".as_bytes());
            }
            disk.extend_from_slice(b" needle \n");
        }
        let bytes = if i % 2 == 0 {
            corrected(&disk)
        } else {
            disk.clone()
        };
        if i % 3 == 0 {
            expect_hits += 1;
        }
        files.push((format!("d{}/f{i}.txt", i % 7), bytes));
    }
    let m = Mount::new(&[], |b| {
        for (name, bytes) in &files {
            let p = b.join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            write(&p, bytes);
        }
    });
    // grep sees the view: the corrected U+0800 is E0 A0 80 before " needle".
    let out = Command::new("grep")
        .args(["-rl", "--binary-files=text", "-P", "\\xE0\\xA0\\x80 needle"])
        .arg(&m.mnt)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(
        listed, expect_hits,
        "grep -r found {listed} files, expected {expect_hits}"
    );
    let out = Command::new("find")
        .arg(&m.mnt)
        .args(["-type", "f"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        files.len()
    );
    for (name, bytes) in &files {
        let meta = fs::symlink_metadata(m.m(name)).unwrap();
        let back = fs::symlink_metadata(m.b(name)).unwrap();
        assert_eq!(
            meta.len(),
            expected_view(bytes).len() as u64,
            "{name}: size"
        );
        assert_eq!(meta.ino(), back.ino(), "{name}: inode number");
        assert_eq!(meta.mode(), back.mode(), "{name}: mode");
        assert_eq!(meta.mtime(), back.mtime(), "{name}: mtime");
        assert_eq!(
            (meta.uid(), meta.gid()),
            (back.uid(), back.gid()),
            "{name}: owner"
        );
    }
}

#[test]
fn change_in_backing_is_seen_on_next_open() {
    let v1 = corrected(&every_kind());
    let m = Mount::new(&["attr_timeout=0.2"], |b| write(&b.join("t.txt"), &v1));
    assert!(fs::read(m.m("t.txt")).unwrap() == expected_view(&v1));
    // Same length, different content, written behind the mount's back.
    let mut v2 = v1.clone();
    let at = v2.len() / 2;
    v2[at..at + 4].copy_from_slice(b"ABCD");
    write(&m.b("t.txt"), &v2);
    assert!(
        fs::read(m.m("t.txt")).unwrap() == expected_view(&v2),
        "same-size change not seen"
    );
    // Different length: content on next open, size once attributes expire.
    let v3 = corrected(&random_disk(70_000, 5));
    write(&m.b("t.txt"), &v3);
    let len = expected_view(&v3).len() as u64;
    assert!(
        wait_for(0.4, || fs::metadata(m.m("t.txt")).unwrap().len() == len),
        "new size not seen within 0.4 s"
    );
    assert!(
        fs::read(m.m("t.txt")).unwrap() == expected_view(&v3),
        "new content not seen"
    );
    // Listings: a name added or removed in BACKING shows on the next
    // opendir, although the kernel caches listings.
    let names = |m: &Mount| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&m.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&m), ["t.txt"]);
    assert_eq!(names(&m), ["t.txt"]);
    write(&m.b("added"), b"");
    assert_eq!(names(&m), ["added", "t.txt"]);
    fs::remove_file(m.b("added")).unwrap();
    assert_eq!(names(&m), ["t.txt"]);
    // Corrected → raw behind the mount's back.
    write(&m.b("t.txt"), b"now raw\n");
    assert!(
        wait_for(0.4, || fs::read(m.m("t.txt")).unwrap() == b"now raw\n"),
        "raw content not seen within 0.4 s"
    );
}

#[test]
fn raw_files_symlinks_hard_links_and_xattrs_pass_through() {
    let binary: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let m = Mount::new(&[], |b| {
        write(&b.join("bin"), &binary);
        fs::set_permissions(b.join("bin"), fs::Permissions::from_mode(0o751)).unwrap();
        write(&b.join("c.txt"), &corrected(&every_kind()));
        std::os::unix::fs::symlink("c.txt", b.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", b.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../outside", b.join("up")).unwrap();
        fs::hard_link(b.join("c.txt"), b.join("hard.txt")).unwrap();
        assert!(Command::new("setfattr")
            .args(["-n", "user.k", "-v", "v1"])
            .arg(b.join("bin"))
            .status()
            .unwrap()
            .success());
    });
    assert!(fs::read(m.m("bin")).unwrap() == binary);
    assert_eq!(fs::metadata(m.m("bin")).unwrap().mode() & 0o7777, 0o751);
    // Symlinks are shown, never followed by the daemon.
    assert_eq!(fs::read_link(m.m("link")).unwrap(), Path::new("c.txt"));
    assert_eq!(fs::read_link(m.m("abs")).unwrap(), Path::new("/etc/passwd"));
    assert_eq!(
        fs::read_link(m.m("up")).unwrap(),
        Path::new("../../outside")
    );
    assert!(fs::read(m.m("link")).unwrap() == expected_view(&fs::read(m.b("c.txt")).unwrap()));
    // Hard links are one inode.
    let a = fs::metadata(m.m("c.txt")).unwrap();
    let h = fs::metadata(m.m("hard.txt")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (h.ino(), 2));
    fs::hard_link(m.m("bin"), m.m("bin2")).unwrap();
    assert_eq!(fs::metadata(m.m("bin")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(m.b("bin2")).unwrap().ino(),
        fs::metadata(m.b("bin")).unwrap().ino()
    );
    // Xattrs both ways.
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", "user.k"])
        .arg(m.m("bin"))
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"v1");
    assert!(Command::new("setfattr")
        .args(["-n", "user.n", "-v", "v2"])
        .arg(m.m("bin"))
        .status()
        .unwrap()
        .success());
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", "user.n"])
        .arg(m.b("bin"))
        .output()
        .unwrap();
    assert_eq!(out.stdout, b"v2");
    // Raw files are read-write; appends and overwrites land as they are.
    {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(m.m("bin"))
            .unwrap();
        f.write_all(b"tail").unwrap();
    }
    let mut want = binary.clone();
    want.extend_from_slice(b"tail");
    assert!(fs::read(m.b("bin")).unwrap() == want);
    {
        let mut f = fs::OpenOptions::new().write(true).open(m.m("bin")).unwrap();
        f.seek(SeekFrom::Start(10)).unwrap();
        f.write_all(b"XYZ").unwrap();
    }
    want[10..13].copy_from_slice(b"XYZ");
    assert!(fs::read(m.b("bin")).unwrap() == want);
    assert!(fs::read(m.m("bin")).unwrap() == want);
    // mkdir, rename, unlink through the mount reach BACKING.
    fs::create_dir(m.m("newdir")).unwrap();
    fs::rename(m.m("bin2"), m.m("newdir/bin3")).unwrap();
    assert!(m.b("newdir/bin3").exists());
    fs::remove_file(m.m("newdir/bin3")).unwrap();
    assert!(!m.b("newdir/bin3").exists());
}

#[test]
fn regular_files_show_a_1_mib_blksize_unless_asked_for_backings() {
    let setup = |b: &Path| {
        write(&b.join("raw.bin"), &[0xFFu8; 5000]);
        write(&b.join("c.txt"), &corrected(&every_kind()));
        fs::create_dir(b.join("d")).unwrap();
    };
    // -o blksize=backing: every attribute as BACKING's, st_blksize too.
    let m = Mount::new(&["blksize=backing"], setup);
    for name in ["raw.bin", "c.txt", "d"] {
        assert_eq!(
            fs::metadata(m.m(name)).unwrap().blksize(),
            fs::metadata(m.b(name)).unwrap().blksize(),
            "{name}"
        );
    }
    drop(m);
    // The default: regular files show 1 MiB, raw or corrected, by getattr
    // and by the attributes ls -l's listing brings (readdirplus); a
    // directory keeps BACKING's.
    let m = Mount::new(&[], setup);
    let listed = Command::new("ls").arg("-l").arg(m.m("")).output().unwrap();
    assert!(listed.status.success());
    for name in ["raw.bin", "c.txt"] {
        assert_eq!(
            fs::metadata(m.m(name)).unwrap().blksize(),
            1 << 20,
            "{name}"
        );
    }
    assert_eq!(
        fs::metadata(m.m("d")).unwrap().blksize(),
        fs::metadata(m.b("d")).unwrap().blksize()
    );
    // cp sizes its calls by it: 1 MiB writes of text, cut anywhere in a
    // character, store the text corrected and read back equal.
    let view: String = (0u32..1_000_000)
        .map(|i| match i % 7 {
            0 => ' ',
            1 => char::from_u32(0x800 + i % 0xA0).unwrap(),
            2 => char::from_u32(0x10000 + i % 0x10A0).unwrap(),
            3 => char::from_u32(0x4E00 + i % 0x5000).unwrap(),
            4 => char::from_u32(0x391 + i % 0x18).unwrap(),
            5 => '\n',
            _ => char::from_u32(0x61 + i % 26).unwrap(),
        })
        .collect();
    let view = view.into_bytes();
    assert!(view.len() > 2 << 20);
    let src = m.dir().join("src.txt");
    write(&src, &view);
    let cp = Command::new("cp")
        .arg(&src)
        .arg(m.m("copy.txt"))
        .status()
        .unwrap();
    assert!(cp.success());
    assert_eq!(fs::metadata(m.m("copy.txt")).unwrap().blksize(), 1 << 20);
    assert!(fs::read(m.m("copy.txt")).unwrap() == view);
    assert_eq!(&fs::read(m.b("copy.txt")).unwrap()[..8], &cutf8::MAGIC);
    fs::remove_file(src).unwrap();
}

#[test]
fn magic_at_the_start_of_a_raw_file_is_refused() {
    // (Writes to corrected files are tested with the write path, mount_write.)
    let text = corrected(&every_kind());
    let m = Mount::new(&[], |b| {
        write(&b.join("c.txt"), &text);
        write(&b.join("raw.txt"), b"12345678rest");
    });
    // A raw file may not come to begin with the magic number.
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.m("raw.txt"))
        .unwrap();
    let e = f.write_at(&cutf8::MAGIC, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ));
    // Five of the eight bytes are harmless alone ...
    f.write_at(&cutf8::MAGIC[3..], 3).unwrap();
    let mut want = b"123".to_vec();
    want.extend_from_slice(&cutf8::MAGIC[3..]);
    want.extend_from_slice(b"rest");
    assert_eq!(fs::read(m.b("raw.txt")).unwrap(), want);
    // ... but not together with the other three.
    let e = f.write_at(&cutf8::MAGIC[..3], 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ));
    assert_eq!(fs::read(m.b("raw.txt")).unwrap(), want);
    let e = fs::write(m.m("new.bin"), cutf8::MAGIC).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ));
    assert_eq!(fs::read(m.b("new.bin")).unwrap(), b"");
    // Emptying a corrected file is fine (it then holds no content).
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(m.m("c.txt"))
        .unwrap();
    assert_eq!(fs::read(m.b("c.txt")).unwrap(), b"");
}

fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("setpriv")
}

#[test]
fn other_users_get_exactly_what_the_modes_allow() {
    let m = Mount::new(&[], |b| {
        write(&b.join("secret"), b"root only\n");
        fs::set_permissions(b.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
        write(&b.join("public"), &corrected(b"for all\n"));
        fs::set_permissions(b.join("public"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::create_dir(b.join("shared")).unwrap();
        fs::set_permissions(b.join("shared"), fs::Permissions::from_mode(0o777)).unwrap();
        fs::create_dir(b.join("closed")).unwrap();
        fs::set_permissions(b.join("closed"), fs::Permissions::from_mode(0o700)).unwrap();
    });
    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    let s = |p: &str| m.m(p).to_string_lossy().into_owned();
    let out = as_nobody(&["cat", &s("secret")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{out:?}"
    );
    let out = as_nobody(&["cat", &s("public")]);
    crate::support::run::succeeded(&out, "command failed");
    assert_eq!(out.stdout, b"for all\n");
    let out = as_nobody(&["sh", "-c", &format!("echo hi > {}", s("public"))]);
    assert!(!out.status.success(), "nobody wrote a 0644 root file");
    let out = as_nobody(&["ls", &s("closed")]);
    assert!(!out.status.success(), "nobody listed a 0700 root dir");
    let out = as_nobody(&[
        "sh",
        "-c",
        &format!("echo mine > {}/n && mkdir {}/d", s("shared"), s("shared")),
    ]);
    crate::support::run::succeeded(&out, "command failed");
    for name in ["shared/n", "shared/d"] {
        let meta = fs::metadata(m.b(name)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65534, 65534),
            "{name}: created as the caller"
        );
    }
}

#[test]
fn statfs_readdir_and_mount_table() {
    let m = Mount::new(&[], |b| {
        for i in 0..500 {
            write(&b.join(format!("file-{i:04}")), b"x");
        }
    });
    let mut names: Vec<String> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 500);
    assert_eq!(names[0], "file-0000");
    let out = Command::new("ls").arg("-a").arg(&m.mnt).output().unwrap();
    let ls = String::from_utf8_lossy(&out.stdout);
    assert!(ls.lines().any(|l| l == ".") && ls.lines().any(|l| l == ".."));
    let out = Command::new("df").arg("-T").arg(&m.mnt).output().unwrap();
    let df = String::from_utf8_lossy(&out.stdout);
    assert!(df.contains("fuse.cutf8fs"), "df: {df}");
    let out = Command::new("mount").output().unwrap();
    let line = format!(
        "{} on {} type fuse.cutf8fs",
        m.backing.display(),
        m.mnt.display()
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&line),
        "mount does not show {line}"
    );
}

#[test]
fn sigterm_unmounts_and_exits_zero() {
    let mut m = Mount::new(&[], |_| {});
    let mut child = m.take_child().unwrap();
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut status = None;
    assert!(wait_for(10.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert!(status.unwrap().success(), "exit status {status:?}");
    assert!(!is_mounted(&m.mnt));
    // No "Transport endpoint is not connected" left behind.
    fs::read_dir(&m.mnt).unwrap();
}

#[test]
fn fusermount_u_ends_the_daemon() {
    let mut m = Mount::new(&[], |_| {});
    let mut child = m.take_child().unwrap();
    assert!(Command::new("fusermount3")
        .arg("-u")
        .arg(&m.mnt)
        .status()
        .unwrap()
        .success());
    let mut status = None;
    assert!(wait_for(10.0, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }));
    assert!(status.unwrap().success());
}

use crate::support::run::dirs;

#[test]
fn daemonizes_and_exits_zero_only_once_mounted() {
    let (_d, b, mnt) = dirs();
    write(&b.join("x"), b"x");
    let st = Command::new(BIN).arg(&b).arg(&mnt).status().unwrap();
    assert!(st.success());
    // Ready the moment the parent exits.
    let ok = fs::read(mnt.join("x")).map(|v| v == b"x").unwrap_or(false);
    let mounted = is_mounted(&mnt);
    let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
    assert!(mounted && ok, "not ready when the parent exited");
    assert!(wait_for(5.0, || !is_mounted(&mnt)));
}

#[test]
fn errors_name_the_problem_with_documented_exit_codes() {
    let (d, b, mnt) = dirs();
    let run = |args: &[&Path], opts: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(args);
        for o in opts {
            c.arg("-o").arg(o);
        }
        c.output().unwrap()
    };
    let missing = d.path().join("missing");
    let out = run(&[&b, &missing], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
    let out = run(&[&b, &mnt], &["no_such_option"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_option"));
    write(&mnt.join("occupied"), b"");
    let out = run(&[&b, &mnt], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    fs::remove_file(mnt.join("occupied")).unwrap();
    let inner = b.join("inner");
    fs::create_dir(&inner).unwrap();
    let out = run(&[&b, &inner], &[]);
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(BIN).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!is_mounted(&mnt));
}

#[test]
fn mount_t_fuse_cutf8fs_and_fstab_options() {
    let (d, b, mnt) = dirs();
    write(&b.join("c.txt"), &corrected(&every_kind()));
    // mount(8) runs /sbin/mount.fuse.cutf8fs (or mount.fuse3, which runs
    // `cutf8fs` from a fixed PATH); install the helper for this test if none
    // is installed, and remove it afterwards.
    let _ = &d;
    let installed = install_helper();
    let out = Command::new("mount")
        .args([
            "-t",
            "fuse.cutf8fs",
            "-o",
            "defaults,nofail,_netdev,ro,attr_timeout=2",
        ])
        .arg(&b)
        .arg(&mnt)
        .output()
        .unwrap();
    let mounted = is_mounted(&mnt);
    let view = fs::read(mnt.join("c.txt")).ok();
    let ro = fs::write(mnt.join("new"), b"x").is_err();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(
        out.status.success(),
        "mount -t fuse.cutf8fs failed: {out:?}"
    );
    assert!(mounted);
    assert!(view.as_deref() == Some(&expected_view(&fs::read(b.join("c.txt")).unwrap())[..]));
    assert!(ro, "-o ro not honoured");
    assert!(wait_for(5.0, || !is_mounted(&mnt)));
    drop(installed);
}

/// `mount -o remount,...` (mount(8) runs the helper with `remount`):
/// read-only and back changes the kernel's flag of the running mount and
/// keeps nosuid and nodev; the daemon goes on serving throughout. mount(8)
/// passes the whole new set of flags (exec after noexec), a direct call
/// only what changes. A file
/// open for writing keeps the mount writable (EBUSY), an access-time
/// change is refused with the option named, and a directory that is not
/// a cutf8fs mount is left alone.
#[test]
fn mount_o_remount_changes_ro_and_keeps_the_other_flags() {
    let (_d, b, mnt) = dirs();
    write(&b.join("c.txt"), &corrected(&every_kind()));
    let installed = install_helper();
    let mount = |opts: &str, on: &Path| {
        let mut c = Command::new("mount");
        if !opts.is_empty() {
            c.args(["-o", opts]);
        }
        c.arg(on).output().unwrap()
    };
    let flags = || {
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = info
            .lines()
            .find(|l| l.split(' ').nth(4) == Some(mnt.to_str().unwrap()))
            .map(str::to_string);
        line.and_then(|l| l.split(' ').nth(5).map(str::to_string))
            .unwrap_or_default()
    };
    // The mount is `now` ("ro" or "rw") and still nosuid and nodev.
    let safe = |now: &str, what: &str| {
        let f = flags();
        assert!(
            f.starts_with(&format!("{now},")) && f.contains("nosuid") && f.contains("nodev"),
            "{what}: {f}"
        );
    };
    let out = Command::new("mount")
        .args(["-t", "fuse.cutf8fs"])
        .arg(&b)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount: {out:?}");
    let view = expected_view(&fs::read(b.join("c.txt")).unwrap());
    let result = std::panic::catch_unwind(|| {
        fs::write(mnt.join("before"), b"x").expect("rw at first");

        // A writer holds the mount writable.
        let mut w = fs::OpenOptions::new()
            .append(true)
            .open(mnt.join("before"))
            .unwrap();
        let busy = mount("remount,ro", &mnt);
        assert!(
            !busy.status.success(),
            "remount ro under a writer: {busy:?}"
        );
        assert!(
            String::from_utf8_lossy(&busy.stderr).contains("open for writing"),
            "{busy:?}"
        );
        w.write_all(b"y").unwrap();
        drop(w);

        let ro = mount("remount,ro", &mnt);
        assert!(ro.status.success(), "remount,ro: {ro:?}");
        safe("ro", "remount,ro");
        assert_eq!(
            fs::write(mnt.join("after"), b"x")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EROFS)
        );
        assert_eq!(
            fs::read(mnt.join("c.txt")).unwrap(),
            view,
            "served while ro"
        );
        assert!(!b.join("after").exists());

        let atime = mount("remount,noatime", &mnt);
        assert!(!atime.status.success());
        assert!(
            String::from_utf8_lossy(&atime.stderr).contains("'noatime'"),
            "{atime:?}"
        );

        let rw = mount("remount,rw", &mnt);
        assert!(rw.status.success(), "remount,rw: {rw:?}");
        safe("rw", "remount,rw");

        // mount(8) hands the helper the whole new set: a flag turned off
        // arrives as a flag left out.
        assert!(mount("remount,noexec", &mnt).status.success());
        assert!(flags().contains("noexec"), "{}", flags());
        assert!(mount("remount,exec", &mnt).status.success());
        assert!(!flags().contains("noexec"), "{}", flags());

        // Run directly, only what is named changes.
        for (opts, now) in [("remount,ro", "ro"), ("remount,rw", "rw")] {
            let out = Command::new(BIN)
                .arg(&b)
                .arg(&mnt)
                .args(["-o", opts])
                .output()
                .unwrap();
            assert!(out.status.success(), "{opts}: {out:?}");
            safe(now, opts);
        }
        fs::write(mnt.join("after"), b"z").expect("rw again");
        assert_eq!(fs::read(mnt.join("before")).unwrap(), b"xy");
        assert_eq!(fs::read(mnt.join("after")).unwrap(), b"z");
        assert!(b.join("after").exists());

        // Not a cutf8fs mount: refused by the helper, nothing changed.
        let other = Command::new(BIN)
            .arg(&b)
            .arg(&b)
            .args(["-o", "remount,ro"])
            .output()
            .unwrap();
        assert!(!other.status.success());
        assert!(
            String::from_utf8_lossy(&other.stderr).contains("not a cutf8fs mount point"),
            "{other:?}"
        );
    });
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(wait_for(5.0, || !is_mounted(&mnt)));
    drop(installed);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A daemon started read-only (`-o ro`, `-o archive`) stays so after
/// `mount -o remount,rw` cleared the kernel's flag: it refuses every
/// change itself (EROFS, as the kernel would), and BACKING is untouched.
#[test]
fn a_read_only_daemon_refuses_changes_after_remount_rw() {
    for opt in ["ro", "archive"] {
        let m = Mount::new(&[opt], |b| {
            write(&b.join("c.txt"), &corrected(&every_kind()));
            fs::create_dir(b.join("d")).unwrap();
        });
        let before = fs::read(m.b("c.txt")).unwrap();
        let out = Command::new(BIN)
            .arg(m.b(""))
            .arg(&m.mnt)
            .args(["-o", "remount,rw"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{opt}: remount,rw: {out:?}");
        let rofs = |what: &str, r: std::io::Result<()>| {
            assert_eq!(
                r.map_err(|e| e.raw_os_error()),
                Err(Some(libc::EROFS)),
                "{opt}: {what}"
            )
        };
        // In archive mode the kernel opens files itself (no request): the
        // write that follows is refused.
        let open = |o: &mut fs::OpenOptions| {
            let mut f = o.open(m.m("c.txt"))?;
            f.write_all(b"x")?;
            f.sync_all()
        };
        rofs("open for writing", open(fs::OpenOptions::new().write(true)));
        rofs("open to append", open(fs::OpenOptions::new().append(true)));
        rofs(
            "truncate",
            open(fs::OpenOptions::new().write(true).truncate(true)),
        );
        rofs("create", fs::write(m.m("new"), b"x"));
        rofs("mkdir", fs::create_dir(m.m("e")));
        rofs("rmdir", fs::remove_dir(m.m("d")));
        rofs("unlink", fs::remove_file(m.m("c.txt")));
        rofs("rename", fs::rename(m.m("c.txt"), m.m("d/c.txt")));
        rofs("link", fs::hard_link(m.m("c.txt"), m.m("l")));
        rofs("symlink", std::os::unix::fs::symlink("c.txt", m.m("s")));
        rofs(
            "chmod",
            fs::set_permissions(m.m("c.txt"), fs::Permissions::from_mode(0o600)),
        );
        assert_eq!(
            fs::read(m.m("c.txt")).unwrap(),
            expected_view(&before),
            "{opt}"
        );
        assert_eq!(fs::read(m.b("c.txt")).unwrap(), before, "{opt}");
        let mut names: Vec<_> = fs::read_dir(m.b(""))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["c.txt", "d"], "{opt}");
    }
}

/// /sbin/mount.fuse.cutf8fs, which mount(8) runs, installed for a test
/// if none is (removed when the guard drops). The tests that use it take
/// turns (`SBIN_HELPER`): one test's guard would otherwise remove it under
/// another.
fn install_helper() -> HelperGuard {
    let turn = SBIN_HELPER.lock().unwrap_or_else(|e| e.into_inner());
    let helper = Path::new("/sbin/mount.fuse.cutf8fs");
    let installed = !helper.exists();
    if installed {
        std::os::unix::fs::symlink(BIN, helper).expect("install /sbin/mount.fuse.cutf8fs");
    }
    HelperGuard {
        installed: installed.then_some(helper),
        _turn: turn,
    }
}

struct HelperGuard {
    installed: Option<&'static Path>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Drop for HelperGuard {
    fn drop(&mut self) {
        if let Some(h) = self.installed {
            let _ = fs::remove_file(h);
        }
    }
}

#[test]
fn truncating_a_running_program_fails_and_leaves_it_intact() {
    let sleep = fs::read("/bin/sleep").unwrap();
    let m = Mount::new(&[], |b| {
        write(&b.join("sleep"), &sleep);
        fs::set_permissions(b.join("sleep"), fs::Permissions::from_mode(0o755)).unwrap();
    });
    let mut child = Command::new(m.m("sleep")).arg("10").spawn().unwrap();
    let r = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_TRUNC)
        .open(m.m("sleep"));
    let w = fs::OpenOptions::new().write(true).open(m.m("sleep"));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::ETXTBSY));
    assert_eq!(w.err().and_then(|e| e.raw_os_error()), Some(libc::ETXTBSY));
    assert_eq!(
        fs::read(m.b("sleep")).unwrap().len(),
        sleep.len(),
        "program truncated"
    );
}

#[test]
fn concurrent_readers_see_the_same_view() {
    let files: Vec<Vec<u8>> = (0..4)
        .map(|i| corrected(&random_disk(400_000, 100 + i)))
        .collect();
    let m = Mount::new(&["index_cache=128k"], |b| {
        for (i, f) in files.iter().enumerate() {
            write(&b.join(format!("f{i}")), f);
        }
    });
    let views: Vec<Vec<u8>> = files.iter().map(|f| expected_view(f)).collect();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (m, views) = (&m, &views);
            s.spawn(move || {
                let mut seed = 0x1234_5678 + t;
                for _ in 0..300 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let i = (seed % 4) as usize;
                    let want = &views[i];
                    let off = (seed >> 8) % want.len() as u64;
                    let len = 1 + ((seed >> 40) % 20_000) as usize;
                    let f = fs::File::open(m.m(&format!("f{i}"))).unwrap();
                    let mut buf = vec![0u8; len];
                    let mut got = 0;
                    while got < len {
                        let n = f.read_at(&mut buf[got..], off + got as u64).unwrap();
                        if n == 0 {
                            break;
                        }
                        got += n;
                    }
                    let e = (off as usize + len).min(want.len());
                    assert!(
                        buf[..got] == want[off as usize..e],
                        "thread {t}: f{i} at {off}"
                    );
                }
            });
        }
    });
}

#[test]
fn seek_data_and_hole() {
    let text = corrected(&every_kind());
    let m = Mount::new(&[], |b| {
        write(&b.join("c.txt"), &text);
        let f = fs::File::create(b.join("sparse")).unwrap();
        f.set_len(4 << 20).unwrap();
        f.write_at(b"data", 2 << 20).unwrap();
    });
    let seek = |p: &Path, off: i64, whence: i32| -> i64 {
        let f = fs::File::open(p).unwrap();
        // SAFETY: lseek on a descriptor we own.
        unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&f), off, whence) }
    };
    let view_len = expected_view(&text).len() as i64;
    assert_eq!(seek(&m.m("c.txt"), 0, libc::SEEK_DATA), 0);
    assert_eq!(seek(&m.m("c.txt"), 5, libc::SEEK_HOLE), view_len);
    assert_eq!(seek(&m.m("c.txt"), view_len, libc::SEEK_DATA), -1);
    // Raw files: whatever BACKING says (ext4 and tmpfs know holes).
    let back_data = seek(&m.b("sparse"), 0, libc::SEEK_DATA);
    assert_eq!(seek(&m.m("sparse"), 0, libc::SEEK_DATA), back_data);
    let back_hole = seek(&m.b("sparse"), back_data, libc::SEEK_HOLE);
    assert_eq!(seek(&m.m("sparse"), back_data, libc::SEEK_HOLE), back_hole);
}

/// xfstests generic/436 (seek_sanity_test 13): a file fallocated over
/// four pages whose first and third pages were written has a hole at
/// 4096 through the mount as natively: opening it reads no more than the
/// page it looks at (readahead would bring the unwritten pages into the
/// page cache, where ext4 reports them as data).
#[test]
fn seek_hole_after_fallocate_is_backings() {
    let m = Mount::new(&[], |_| {});
    let page = 4096usize;
    let case = |p: &Path| -> (i64, i64) {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: fallocate on a descriptor we own.
        assert_eq!(unsafe { libc::fallocate(fd, 0, 0, 4 * page as i64) }, 0);
        f.write_at(&vec![b'a'; page], 0).unwrap();
        f.write_at(&vec![b'a'; page], 2 * page as u64).unwrap();
        drop(f);
        let f = fs::File::open(p).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: lseek on a descriptor we own.
        unsafe {
            (
                libc::lseek(fd, 0, libc::SEEK_HOLE),
                libc::lseek(fd, page as i64, libc::SEEK_DATA),
            )
        }
    };
    let native = case(&m.b("native"));
    assert_eq!(
        native,
        (page as i64, 2 * page as i64),
        "BACKING's own answer"
    );
    assert_eq!(case(&m.m("through")), native);
}

#[test]
fn without_allow_other_other_users_are_refused() {
    let m = Mount::new(&["noallow_other"], |b| {
        write(&b.join("public"), b"x");
        fs::set_permissions(b.join("public"), fs::Permissions::from_mode(0o644)).unwrap();
    });
    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    let out = as_nobody(&["cat", &m.m("public").to_string_lossy()]);
    assert!(!out.status.success(), "nobody read a noallow_other mount");
    assert_eq!(fs::read(m.m("public")).unwrap(), b"x");
}

#[test]
fn content_changed_under_an_open_handle_never_kills_the_daemon() {
    let big = corrected(&random_disk(600_000, 77));
    let m = Mount::new(&["attr_timeout=0"], |b| {
        write(&b.join("c.txt"), &big);
        write(&b.join("other.txt"), &corrected(b"still here\n"));
    });
    for (round, replacement) in [
        corrected(b"short"),
        vec![],
        big[..1000].to_vec(),
        random_disk(700_000, 5),
        corrected(&[0xFE, 0x80, 0x80, 0xC0]),
    ]
    .into_iter()
    .enumerate()
    {
        let f = fs::File::open(m.m("c.txt")).unwrap();
        let mut b = [0u8; 10];
        let _ = f.read_at(&mut b, 0);
        // Rewritten in place behind the mount's back (same inode).
        write(&m.b("c.txt"), &replacement);
        let mut buf = vec![0u8; 70_000];
        for off in [0u64, 1, 4095, 65_536, 300_001, 599_990, 800_000] {
            // Data or an error: both are fine; a dead daemon is not.
            let _ = f.read_at(&mut buf, off);
        }
        drop(f);
        assert_eq!(
            fs::read(m.m("other.txt")).unwrap(),
            b"still here\n",
            "round {round}: mount broken"
        );
        write(&m.b("c.txt"), &big);
    }
    assert!(fs::read(m.m("c.txt")).unwrap() == expected_view(&big));
}
