//! `cutf8 migrate` end to end (docs/behaviour.md, "The converter"): the
//! real binary on a
//! generated archive with text in many scripts, every skip reason, hard
//! links, symlinks, fifos, odd names, a read-only directory and deep
//! nesting. Each test builds its own trees in a fresh temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use cutf8::{decode_strict, encode_strict, MAGIC};
use rand::{Rng, SeedableRng};

use crate::support::cli::BIN;

// ---------------------------------------------------------------- helpers

fn cutf8(args: &[&OsStr]) -> Output {
    let out = Command::new(BIN)
        .arg("migrate")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cutf8");
    out
}

/// Run migrate and insist on `code`; on failure print everything.
fn migrate(args: &[&OsStr], code: i32) -> Output {
    let out = cutf8(args);
    if out.status.code() != Some(code) {
        panic!(
            "cutf8 migrate {:?}: expected exit {code}, got {:?}\nstdout:\n{}\nstderr:\n{}",
            args,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let cp = CString::new(p.as_os_str().as_bytes()).unwrap();
    let cn = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings; pointer and length describe `value`.
    let r = unsafe {
        libc::lsetxattr(
            cp.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {p:?}: {}", std::io::Error::last_os_error());
}

fn xattrs(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let cp = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: pointer and length describe `names`.
    let n = unsafe { libc::llistxattr(cp.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "listxattr {p:?}");
    let mut out = BTreeMap::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 4096];
        // SAFETY: NUL-terminated name; pointer and length describe `v`.
        let m =
            unsafe { libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(m >= 0);
        v.truncate(m as usize);
        out.insert(name.to_vec(), v);
    }
    out
}

/// Set atime and mtime of `p` itself (symlinks and fifos included).
fn set_mtime(p: &Path, secs: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: 123_456_789,
    };
    // SAFETY: valid NUL-terminated path and a two-element array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {p:?}");
}

/// Everything a run may or may not change about one path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    ino: u64,
    nlink: u64,
    content: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

type Snapshot = BTreeMap<Vec<u8>, Node>;

fn snapshot(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = fs::symlink_metadata(&p).unwrap();
        let t = md.file_type();
        let mut internal_dirs = 0;
        let (kind, content) = if t.is_symlink() {
            (
                "symlink",
                fs::read_link(&p).unwrap().into_os_string().into_vec(),
            )
        } else if t.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                let e = e.unwrap();
                // The index database migrate records into is
                // the mount's, not part of the archive.
                if !e.file_name().as_bytes().starts_with(b".cutf8fs-") {
                    stack.push(e.path());
                } else if e.file_type().unwrap().is_dir() {
                    internal_dirs += 1;
                }
            }
            ("dir", Vec::new())
        } else if t.is_file() {
            ("file", fs::read(&p).unwrap())
        } else {
            ("special", Vec::new())
        };
        let rel = p
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        out.insert(
            rel,
            Node {
                kind,
                mode: md.mode(),
                uid: md.uid(),
                gid: md.gid(),
                mtime: (md.mtime(), md.mtime_nsec()),
                ino: md.ino(),
                nlink: md.nlink() - internal_dirs,
                content,
                xattrs: if kind == "symlink" {
                    BTreeMap::new()
                } else {
                    xattrs(&p)
                },
            },
        );
    }
    out
}

/// Snapshot comparison that names the first differing path.
fn assert_same(a: &Snapshot, b: &Snapshot, what: &str, ignore_ino: bool) {
    let ka: BTreeSet<_> = a.keys().collect();
    let kb: BTreeSet<_> = b.keys().collect();
    assert_eq!(ka, kb, "{what}: different paths");
    for (k, na) in a {
        let mut nb = b[k].clone();
        if ignore_ino {
            nb.ino = na.ino;
        }
        if na.kind == "dir" {
            // A directory's mtime changes when a file in it is replaced.
            nb.mtime = na.mtime;
        }
        assert_eq!(na, &nb, "{what}: {}", String::from_utf8_lossy(k));
    }
}

/// What a file of the archive should become.
#[derive(Debug, Clone)]
enum Expect {
    Convert,
    Skip(&'static str),
}

struct Archive {
    root: PathBuf,
    outside: PathBuf,
    /// Root-relative path → expectation, for regular files.
    files: BTreeMap<Vec<u8>, Expect>,
}

fn mixed_text(rng: &mut impl Rng, len: usize) -> String {
    const PIECES: &[&str] = &[
        "The quick brown fox ",
        "Grüße, déjà vu, œuvre, ĳ ",
        "Ἐν ἀρχῇ ἦν ὁ λόγος ",
        "Съешь же ещё этих мягких ",
        "天地玄黄宇宙洪荒 ",
        "日本語のテキスト ",
        "🦀🎉👩‍👩‍👧 ",
        "\u{800}\u{81A}\u{85F}\u{89F} ",
        "\u{10000}\u{10E7D}\u{1109F} ",
        "\u{110A0}\u{1F600}\u{10FFFF} ",
        "tab\there ",
        "\n",
    ];
    let mut s = String::with_capacity(len + 64);
    while s.len() < len {
        s.push_str(PIECES[rng.gen_range(0..PIECES.len())]);
    }
    s.push('\n');
    s
}

fn write(root: &Path, rel: &[u8], bytes: &[u8]) -> PathBuf {
    let p = root.join(OsStr::from_bytes(rel));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, bytes).unwrap();
    p
}

/// The archive of the issue. Deterministic: two calls give equal trees
/// (names, bytes, modes, mtimes, link structure).
fn build(base: &Path, big: bool) -> Archive {
    let root = base.join("archive");
    let outside = base.join("outside");
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&outside).unwrap();
    let mut files = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let text = |rel: &[u8], s: &str, files: &mut BTreeMap<Vec<u8>, Expect>| {
        write(&root, rel, s.as_bytes());
        files.insert(rel.to_vec(), Expect::Convert);
    };
    // Text in many scripts.
    text(
        b"latin.txt",
        "Grüße, déjà vu, œuvre, Ærøskøbing\n",
        &mut files,
    );
    text(b"greek.txt", "Ἐν ἀρχῇ ἦν ὁ λόγος\n", &mut files);
    text(
        b"cyrillic.txt",
        "Съешь же ещё этих мягких французских булок\n",
        &mut files,
    );
    text(
        b"cjk.txt",
        "天地玄黄，宇宙洪荒。日本語、한국어\n",
        &mut files,
    );
    text(b"emoji.txt", "🦀 🎉 👩‍👩‍👧 🏳️‍🌈\n", &mut files);
    text(
        b"samaritan.txt",
        "\u{800}\u{815}\u{840}\u{85E}\u{860}\u{89F}\n",
        &mut files,
    );
    text(
        b"linear-b.txt",
        "\u{10000}\u{10E7D}\u{11000}\u{1109F}\n",
        &mut files,
    );
    text(
        b"no-final-newline.txt",
        "ascii only, no newline",
        &mut files,
    );
    text(b"crlf.txt", "dos\r\nlines\r\n", &mut files);
    let n_mixed = if big { 40 } else { 6 };
    for i in 0..n_mixed {
        let len = if i == 0 {
            600_000
        } else {
            rng.gen_range(1..40_000)
        };
        let s = mixed_text(&mut rng, len);
        text(format!("mixed/m{i:03}.txt").as_bytes(), &s, &mut files);
    }
    // Every skip reason.
    let skip = |rel: &[u8], bytes: &[u8], code: &'static str, files: &mut BTreeMap<_, _>| {
        write(&root, rel, bytes);
        files.insert(rel.to_vec(), Expect::Skip(code));
    };
    skip(
        b"skip/image.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        "binary",
        &mut files,
    );
    let mut late = vec![b'a'; 9000];
    late.extend_from_slice(b"\0tail\n");
    skip(b"skip/late-nul.txt", &late, "contains-nul", &mut files);
    skip(
        b"skip/c1.txt",
        "line one\nnext \u{85} line\n".as_bytes(),
        "c1-control",
        &mut files,
    );
    skip(
        b"skip/latin1.txt",
        b"caf\xe9 au lait\n",
        "invalid-utf8",
        &mut files,
    );
    skip(
        b"skip/overlong.txt",
        b"slash \xc0\xaf\n",
        "invalid-utf8",
        &mut files,
    );
    skip(
        b"skip/surrogate.txt",
        b"half \xed\xa0\x80 pair\n",
        "invalid-utf8",
        &mut files,
    );
    let mut corrected = MAGIC.to_vec();
    corrected.extend_from_slice(&encode_strict("déjà corrigé\n".as_bytes()).unwrap());
    skip(
        b"skip/corrected.txt",
        &corrected,
        "already-corrected",
        &mut files,
    );
    // Corrected text with a code point above U+10FFFF: `--to utf8` must
    // leave it alone.
    let mut beyond = MAGIC.to_vec();
    beyond.extend_from_slice(b"big \xf7\xbf\xbf\xbf\n");
    skip(b"skip/beyond.txt", &beyond, "already-corrected", &mut files);
    skip(b"skip/empty.txt", b"", "empty", &mut files);
    let fifo = root.join("skip/fifo");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    // Symlinks: inside, outside, to a directory outside.
    write(&outside, b"victim.txt", "outside the tree\n".as_bytes());
    write(&outside, b"dir/victim2.txt", "also outside\n".as_bytes());
    symlink("../latin.txt", root.join("skip/link-inside")).unwrap();
    symlink("../../outside/victim.txt", root.join("skip/link-outside")).unwrap();
    symlink("../../outside/dir", root.join("skip/link-dir")).unwrap();
    symlink("/nonexistent/target", root.join("skip/link-dangling")).unwrap();
    // Hard links: three names, two directories, one inode.
    text(
        b"links/a.txt",
        "one inode, three names: ĳ ∑ 🦀\n",
        &mut files,
    );
    fs::create_dir_all(root.join("links/sub")).unwrap();
    fs::hard_link(root.join("links/a.txt"), root.join("links/sub/b.txt")).unwrap();
    fs::hard_link(root.join("links/a.txt"), root.join("links/c.txt")).unwrap();
    files.insert(b"links/sub/b.txt".to_vec(), Expect::Convert);
    files.insert(b"links/c.txt".to_vec(), Expect::Convert);
    // A hard-linked binary stays as it is.
    skip(b"links/bin", b"\0\x01\x02", "binary", &mut files);
    fs::hard_link(root.join("links/bin"), root.join("links/bin2")).unwrap();
    files.insert(b"links/bin2".to_vec(), Expect::Skip("binary"));
    // Odd names.
    text(b"odd/with space.txt", "space\n", &mut files);
    text(b"odd/new\nline.txt", "newline in the name\n", &mut files);
    text(b"odd/latin1-\xe9.txt", "non-UTF-8 name\n", &mut files);
    text(b"odd/back\\slash.txt", "backslash\n", &mut files);
    text(b"odd/-dash.txt", "leading dash\n", &mut files);
    // Deep nesting.
    let deep: Vec<u8> = b"deep/".repeat(60);
    let mut deep_file = deep.clone();
    deep_file.extend_from_slice(b"bottom.txt");
    text(&deep_file, "at the bottom\n", &mut files);
    // Modes, owner, xattrs, times.
    let p = root.join("meta/script.sh");
    text(
        b"meta/script.sh",
        "# sourced, not run: no #! line\necho Grüße\n",
        &mut files,
    );
    // A script run by the kernel stays raw (it must still run from here).
    skip(
        b"meta/run.sh",
        "#!/bin/sh\necho Grüße\n".as_bytes(),
        "script",
        &mut files,
    );
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4751)).unwrap();
    let p2 = root.join("meta/private.txt");
    text(b"meta/private.txt", "privé\n", &mut files);
    fs::set_permissions(&p2, fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&p2, Some(65534), Some(65534)).unwrap();
    set_xattr(&p2, "user.note", b"keep me");
    set_xattr(&p2, "user.empty", b"");
    // A read-only directory (root may still write in it).
    text(b"readonly/inside.txt", "read-only directory\n", &mut files);
    fs::set_permissions(root.join("readonly"), fs::Permissions::from_mode(0o555)).unwrap();
    // A stable time on everything, directories last.
    let snap = snapshot(&root);
    for (rel, node) in snap.iter().rev() {
        if node.kind != "dir" {
            set_mtime(&root.join(OsStr::from_bytes(rel)), 1_500_000_000);
        }
    }
    for (rel, node) in snap.iter().rev() {
        if node.kind == "dir" {
            set_mtime(&root.join(OsStr::from_bytes(rel)), 1_400_000_000);
        }
    }
    Archive {
        root,
        outside,
        files,
    }
}

fn expected_cutf8(orig: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&encode_strict(orig).unwrap());
    v
}

/// The report's lines, keyed by path relative to `root`.
fn read_report(p: &Path, root: &Path) -> BTreeMap<Vec<u8>, serde_json::Value> {
    let text = fs::read_to_string(p).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let bytes = match v.get("path_hex") {
            Some(h) => {
                let h = h.as_str().unwrap();
                (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
                    .collect()
            }
            None => v["path"].as_str().unwrap().as_bytes().to_vec(),
        };
        let rel = Path::new(OsStr::from_bytes(&bytes))
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        assert!(
            out.insert(rel.clone(), v).is_none(),
            "reported twice: {rel:?}"
        );
    }
    out
}

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cutf8-migrate-")
        .tempdir()
        .unwrap()
}

fn own_leftovers(snap: &Snapshot) -> Vec<String> {
    snap.keys()
        .filter(|k| {
            let name = k.rsplit(|&b| b == b'/').next().unwrap();
            name.starts_with(b".cutf8-")
        })
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect()
}

// ------------------------------------------------------------------ tests

#[test]
fn dry_run_changes_nothing() {
    let t = tmpdir();
    let a = build(t.path(), false);
    // Leftovers of a killed run are left alone too.
    fs::write(a.root.join(".cutf8-tmp.0000000000000000.1-1"), "half").unwrap();
    let before = snapshot(t.path());
    let elsewhere = tmpdir();
    let report = elsewhere.path().join("dry.jsonl");
    let out = migrate(
        &[
            os("--dry-run"),
            os("--jobs"),
            os("3"),
            a.root.as_os_str(),
            os("--report"),
            report.as_os_str(),
        ],
        0,
    );
    let after = snapshot(t.path());
    assert_same(&before, &after, "after --dry-run", false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("would-convert"), "{stdout}");
    assert!(stdout.contains("dry run: "), "{stdout}");
    // The report says what a real run would do, sizes included.
    let lines = read_report(&report, &a.root);
    for (rel, exp) in &a.files {
        let v = &lines[rel];
        match exp {
            Expect::Convert => {
                let old = &before[&[b"archive/", &rel[..]].concat()].content;
                assert_eq!(v["action"], "would-convert");
                assert_eq!(v["bytes_after"], expected_cutf8(old).len() as u64);
            }
            Expect::Skip(code) => assert_eq!(v["code"], *code),
        }
    }
}

/// A directory on another filesystem is not entered unless asked.
#[test]
fn other_filesystems_are_left_alone_unless_asked() {
    let t = tmpdir();
    fs::write(t.path().join("here.txt"), "here\n").unwrap();
    let mnt = t.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "cutf8-test", mnt.to_str().unwrap()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        mounted,
        "cannot mount a tmpfs: this test needs root and mount rights, as CI has"
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    fs::write(mnt.join("there.txt"), "there\n").unwrap();
    let report = mnt.join("r.jsonl");
    migrate(
        &[
            t.path().as_os_str(),
            os("--exclude"),
            os("r.jsonl"),
            os("--report"),
            report.as_os_str(),
        ],
        0,
    );
    assert_eq!(fs::read(mnt.join("there.txt")).unwrap(), b"there\n");
    assert_eq!(
        fs::read(t.path().join("here.txt")).unwrap(),
        expected_cutf8(b"here\n")
    );
    let lines = read_report(&report, t.path());
    assert_eq!(lines[&b"mnt"[..]]["code"], "other-filesystem");
    migrate(
        &[
            os("--cross-filesystems"),
            os("--exclude"),
            os("r.jsonl"),
            t.path().as_os_str(),
        ],
        0,
    );
    assert_eq!(
        fs::read(mnt.join("there.txt")).unwrap(),
        expected_cutf8(b"there\n")
    );
}

#[test]
fn migrate_converts_exactly_the_text_and_back() {
    let t = tmpdir();
    let a = build(t.path(), false);
    let before = snapshot(&a.root);
    let outside_before = snapshot(&a.outside);
    let report = t.path().join("report.jsonl");

    let out = migrate(&[a.root.as_os_str(), os("--report"), report.as_os_str()], 0);
    // No progress bar without a terminal, no messages when nothing failed.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let after = snapshot(&a.root);
    assert_eq!(own_leftovers(&after), Vec::<String>::new());
    assert_same(
        &outside_before,
        &snapshot(&a.outside),
        "outside the tree",
        false,
    );
    for (rel, node) in &before {
        let new = &after[rel];
        let name = String::from_utf8_lossy(rel);
        match a.files.get(rel) {
            Some(Expect::Convert) => {
                assert_eq!(new.content, expected_cutf8(&node.content), "{name}");
                // Checked with the strict decoder: exactly the original.
                assert_eq!(decode_strict(&new.content[8..]).unwrap(), node.content);
                // Mode (set-uid included), owner, times, xattrs kept.
                let mut same = new.clone();
                same.content = node.content.clone();
                same.ino = node.ino;
                assert_eq!(&same, node, "{name}: metadata");
            }
            _ if node.kind == "dir" => {
                assert_eq!((new.mode, new.ino), (node.mode, node.ino), "{name}")
            }
            // Skipped files, symlinks, the fifo: untouched, same inode.
            _ => assert_eq!(new, node, "{name}"),
        }
    }
    // Hard links: one inode, still three names, converted once.
    let ino = after[&b"links/a.txt"[..]].ino;
    assert_eq!(ino, before[&b"links/a.txt"[..]].ino);
    assert_eq!(after[&b"links/sub/b.txt"[..]].ino, ino);
    assert_eq!(after[&b"links/c.txt"[..]].ino, ino);
    assert_eq!(after[&b"links/a.txt"[..]].nlink, 3);

    // The report: one line per path, the right action and reason.
    let lines = read_report(&report, &a.root);
    for (rel, exp) in &a.files {
        let v = &lines[rel];
        let name = String::from_utf8_lossy(rel);
        match exp {
            Expect::Convert => {
                assert_eq!(v["action"], "converted", "{name}");
                assert_eq!(v["bytes_before"], before[rel].content.len() as u64);
                assert_eq!(v["bytes_after"], after[rel].content.len() as u64);
            }
            Expect::Skip(code) => {
                assert_eq!(v["action"], "skipped", "{name}");
                assert_eq!(v["code"], *code, "{name}: {}", v["reason"]);
            }
        }
    }
    assert_eq!(lines[&b"skip/c1.txt"[..]]["line"], 2);
    assert_eq!(lines[&b"skip/c1.txt"[..]]["col"], 6);
    assert_eq!(lines[&b"skip/latin1.txt"[..]]["col"], 4);
    assert_eq!(lines[&b"skip/fifo"[..]]["code"], "special-file");
    for l in [
        "skip/link-inside",
        "skip/link-outside",
        "skip/link-dir",
        "skip/link-dangling",
    ] {
        assert_eq!(lines[l.as_bytes()]["code"], "symlink", "{l}");
    }
    assert!(lines[&b"odd/latin1-\xe9.txt"[..]]["path"]
        .as_str()
        .unwrap()
        .ends_with("latin1-\\xE9.txt"));
    assert_eq!(
        lines.len(),
        before.len() - before.values().filter(|n| n.kind == "dir").count()
    );

    // A second run is a no-op: nothing changes, not even an inode.
    let out = migrate(&[a.root.as_os_str(), os("--jobs"), os("1")], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("converted: 0 files"));
    assert_same(&after, &snapshot(&a.root), "second run", false);

    // --to utf8 restores every converted file byte for byte.
    let back_report = t.path().join("back.jsonl");
    migrate(
        &[
            os("--to"),
            os("utf8"),
            a.root.as_os_str(),
            os("--report"),
            back_report.as_os_str(),
        ],
        0,
    );
    let back = snapshot(&a.root);
    let mut expect = before.clone();
    // The file that was corrected before the first run goes back too.
    expect.get_mut(&b"skip/corrected.txt"[..]).unwrap().content = "déjà corrigé\n".into();
    assert_same(&expect, &back, "after --to utf8", true);
    let lines = read_report(&back_report, &a.root);
    assert_eq!(lines[&b"skip/beyond.txt"[..]]["code"], "not-convertible");
    assert_eq!(lines[&b"skip/latin1.txt"[..]]["code"], "not-corrected");
    assert_eq!(back[&b"links/c.txt"[..]].ino, ino);
}

#[test]
fn sharded_runs_together_equal_one_full_run() {
    let t = tmpdir();
    let full = build(&t.path().join("full"), false);
    let sharded = build(&t.path().join("sharded"), false);
    let report = t.path().join("full.jsonl");
    migrate(
        &[full.root.as_os_str(), os("--report"), report.as_os_str()],
        0,
    );
    let full_lines = read_report(&report, &full.root);
    let mut union = BTreeMap::new();
    let n = 3;
    for k in 1..=n {
        let r = t.path().join(format!("shard{k}.jsonl"));
        let shard = format!("{k}/{n}");
        migrate(
            &[
                os("--shard"),
                os(&shard),
                sharded.root.as_os_str(),
                os("--report"),
                r.as_os_str(),
            ],
            0,
        );
        let lines = read_report(&r, &sharded.root);
        assert!(
            !lines.is_empty() && lines.len() < full_lines.len(),
            "shard {shard}: {}",
            lines.len()
        );
        for (rel, v) in lines {
            assert!(
                union.insert(rel.clone(), v).is_none(),
                "{rel:?} in two shards"
            );
        }
    }
    let keys = |m: &BTreeMap<Vec<u8>, serde_json::Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&union), keys(&full_lines));
    for (rel, v) in &full_lines {
        assert_eq!(
            union[rel]["action"],
            v["action"],
            "{}",
            String::from_utf8_lossy(rel)
        );
    }
    assert_same(
        &snapshot(&full.root),
        &snapshot(&sharded.root),
        "sharded vs full",
        true,
    );
}

#[test]
fn exit_codes_and_usage() {
    let t = tmpdir();
    fs::write(t.path().join("a.txt"), "ok\n").unwrap();
    let root = t.path().as_os_str();
    // Usage errors: 2, nothing touched.
    for bad in [
        vec![os("--shard"), os("0/3"), root],
        vec![os("--shard"), os("4/3"), root],
        vec![os("--shard"), os("x"), root],
        vec![os("--jobs"), os("0"), root],
        vec![os("--to"), os("latin1"), root],
        vec![os("--exclude"), os("a{"), root],
        vec![os("--no-such-flag"), root],
        vec![],
    ] {
        let out = cutf8(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
    assert_eq!(fs::read(t.path().join("a.txt")).unwrap(), b"ok\n");
    // A named path that does not exist is named and nothing is converted
    // (2, as for encode and decode).
    let missing = t.path().join("missing");
    let out = migrate(&[missing.as_os_str(), root], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");
    assert_eq!(fs::read(t.path().join("a.txt")).unwrap(), b"ok\n");
    migrate(&[root], 0);
    assert_eq!(
        fs::read(t.path().join("a.txt")).unwrap(),
        expected_cutf8(b"ok\n")
    );
    // Excluded and named files.
    fs::write(t.path().join("b.log"), "log\n").unwrap();
    fs::create_dir(t.path().join("build")).unwrap();
    fs::write(t.path().join("build/c.txt"), "c\n").unwrap();
    migrate(
        &[
            os("--exclude"),
            os("*.log"),
            os("--exclude"),
            os("build"),
            root,
        ],
        0,
    );
    assert_eq!(fs::read(t.path().join("b.log")).unwrap(), b"log\n");
    assert_eq!(fs::read(t.path().join("build/c.txt")).unwrap(), b"c\n");
    let named = t.path().join("build/c.txt");
    migrate(&[named.as_os_str()], 0);
    assert_eq!(fs::read(&named).unwrap(), expected_cutf8(b"c\n"));
    // Overlapping paths: each file is taken once.
    fs::write(t.path().join("build/d.txt"), "d\n").unwrap();
    let build = t.path().join("build");
    let out = migrate(&[root, build.as_os_str(), os("--jobs"), os("4")], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("converted: 2 files")); // b.log and d.txt
    assert_eq!(
        fs::read(build.join("d.txt")).unwrap(),
        expected_cutf8(b"d\n")
    );
}

#[test]
fn stray_files_of_a_killed_run_are_cleaned() {
    let t = tmpdir();
    fs::write(t.path().join("a.txt"), "text\n").unwrap();
    fs::write(t.path().join(".cutf8-tmp.0123456789abcdef.1-2"), "half").unwrap();
    // An incomplete journal as migrate leaves it: its own, mode 0600.
    let journal = t.path().join(".cutf8-journal.0123456789abcdef");
    fs::write(&journal, "CUTF8JNL").unwrap();
    fs::set_permissions(&journal, fs::Permissions::from_mode(0o600)).unwrap();
    migrate(&[t.path().as_os_str()], 0);
    let names: BTreeSet<OsString> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, BTreeSet::from([OsString::from("a.txt")]));
}

/// Whether `now` is `old` or its conversion.
fn old_or_new(old: &[u8], now: &[u8]) -> bool {
    now == old || now == expected_cutf8(old)
}

#[test]
fn killed_runs_leave_every_file_old_or_new_and_a_rerun_finishes() {
    let t = tmpdir();
    let pristine = t.path().join("pristine");
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut originals = BTreeMap::new();
    for i in 0..150 {
        let len = rng.gen_range(1_000..60_000);
        let rel = format!("d{}/f{i:03}.txt", i % 7);
        let s = mixed_text(&mut rng, len);
        write(&pristine, rel.as_bytes(), s.as_bytes());
        originals.insert(rel, s.into_bytes());
    }
    // Multiply linked big files take the journal path.
    for i in 0..4 {
        let rel = format!("links/h{i}.txt");
        let s = mixed_text(&mut rng, 1_000_000);
        write(&pristine, rel.as_bytes(), s.as_bytes());
        let alias = format!("d{i}/alias{i}.txt");
        fs::hard_link(pristine.join(&rel), pristine.join(&alias)).unwrap();
        originals.insert(alias, s.clone().into_bytes());
        originals.insert(rel, s.into_bytes());
    }
    let check = |root: &Path, when: &str, finished: bool| {
        let snap = snapshot(root);
        let journals = snap
            .keys()
            .filter(|k| k.windows(15).any(|w| w == b".cutf8-journal."))
            .count();
        for (rel, old) in &originals {
            let node = &snap[rel.as_bytes()];
            if finished {
                assert_eq!(
                    node.content,
                    expected_cutf8(old),
                    "{when}: {rel} not converted"
                );
            } else if !old_or_new(old, &node.content) {
                // Only a file being rewritten in place under a journal may
                // be half-written, and the next run rolls it back.
                assert!(
                    node.nlink > 1 && journals > 0,
                    "{when}: {rel} is half-converted with no journal"
                );
            }
        }
        if finished {
            assert_eq!(own_leftovers(&snap), Vec::<String>::new(), "{when}");
            assert_eq!(
                snap[&b"links/h0.txt"[..]].ino,
                snap[&b"d0/alias0.txt"[..]].ino
            );
            assert_eq!(snap[&b"links/h0.txt"[..]].nlink, 2);
        }
        journals
    };
    let copy = |name: &str| {
        let root = t.path().join(name);
        let cp = Command::new("cp")
            .arg("-a")
            .arg(&pristine)
            .arg(&root)
            .status();
        assert!(cp.unwrap().success());
        root
    };
    // How long an undisturbed run takes here.
    let root = copy("timing");
    let started = Instant::now();
    migrate(&[root.as_os_str(), os("--jobs"), os("2")], 0);
    let full = started.elapsed();
    eprintln!("an undisturbed run takes {full:?}");
    let (mut kills, mut half_written) = (0, 0);
    for round in 0..4 {
        let root = copy(&format!("round{round}"));
        // Kill a run, then kill the run that resumes it, then finish.
        for attempt in 0..2 {
            let delay = full.mul_f64(rng.gen_range(0.02..0.9));
            let mut child = Command::new(BIN)
                .args([os("migrate"), os("--jobs"), os("2"), root.as_os_str()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // A random moment of the run: the kill's timing is what varies.
            std::thread::sleep(delay);
            // SAFETY: plain syscall on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            if child.wait().unwrap().code().is_none() {
                kills += 1;
            }
            let when = format!("round {round}, kill {attempt} after {delay:?}");
            half_written += check(&root, &when, false);
        }
        migrate(&[root.as_os_str()], 0);
        check(&root, &format!("round {round}, final run"), true);
    }
    eprintln!("{kills} of 8 runs were killed; {half_written} times a journal was left");
    assert!(
        kills > 0,
        "no run was killed: the tree is too small to test this"
    );
}

/// Permission denied, for real: the binary runs as `nobody`.
#[test]
fn permission_denied_is_a_reported_skip() {
    // SAFETY: getuid has no preconditions.
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "this test needs root to drop to nobody, as CI has"
    );
    let t = tmpdir();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = t.path().join("cutf8");
    fs::copy(BIN, &bin).unwrap();
    let root = t.path().join("tree");
    let nobody = |p: &Path| std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    let mode = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    write(&root, b"mine.txt", b"nobody's text\n");
    write(&root, b"secret.txt", b"root's secret\n");
    write(&root, b"roots.txt", b"root's, readable\n");
    write(&root, b"shared.txt", b"root's, writable by all\n");
    write(&root, b"ro/inside.txt", b"in a read-only directory\n");
    write(&root, b"closed/hidden.txt", b"unlistable\n");
    for p in ["", "mine.txt", "ro", "ro/inside.txt"] {
        nobody(&root.join(p));
    }
    mode(&root.join("secret.txt"), 0o600);
    mode(&root.join("shared.txt"), 0o666);
    let shared_ino = fs::metadata(root.join("shared.txt")).unwrap().ino();
    mode(&root.join("ro"), 0o555);
    mode(&root.join("closed"), 0o700);
    let out_dir = t.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    nobody(&out_dir);
    let report = out_dir.join("r.jsonl");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args([
            os("migrate"),
            root.as_os_str(),
            os("--report"),
            report.as_os_str(),
        ])
        .output()
        .expect("setpriv");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines = read_report(&report, &root);
    assert_eq!(lines[&b"mine.txt"[..]]["action"], "converted");
    for p in ["secret.txt", "roots.txt", "ro/inside.txt", "closed"] {
        assert_eq!(
            lines[p.as_bytes()]["code"],
            "permission-denied",
            "{p}: {}",
            lines[p.as_bytes()]
        );
    }
    assert_eq!(
        fs::read(root.join("secret.txt")).unwrap(),
        b"root's secret\n"
    );
    assert_eq!(
        fs::read(root.join("roots.txt")).unwrap(),
        b"root's, readable\n"
    );
    assert_eq!(
        fs::read(root.join("ro/inside.txt")).unwrap(),
        b"in a read-only directory\n"
    );
    // nobody can write root's file but cannot keep its owner (a new file)
    // or its times (in place): left alone.
    assert_eq!(lines[&b"shared.txt"[..]]["code"], "permission-denied");
    let shared = fs::metadata(root.join("shared.txt")).unwrap();
    assert_eq!((shared.uid(), shared.ino()), (0, shared_ino));
    assert_eq!(
        fs::read(root.join("shared.txt")).unwrap(),
        b"root's, writable by all\n"
    );
    let mine = fs::metadata(root.join("mine.txt")).unwrap();
    assert_eq!((mine.uid(), mine.gid()), (65534, 65534));
}

/// The walk holds a bounded set of directory descriptors, not one per
/// directory: a tree of 1000 directories, three levels deep, converts
/// under a descriptor limit of 512, each file reached again through its
/// directory after the walk has long moved on.
#[test]
fn a_tree_of_many_directories_converts_within_a_small_descriptor_limit() {
    let t = tmpdir();
    let root = t.path().join("tree");
    for i in 0..1000 {
        let rel = format!("a{}/b{}/c{i}", i % 10, i % 100);
        write(&root, format!("{rel}/x.txt").as_bytes(), b"x\n");
        write(&root, format!("{rel}/y.txt").as_bytes(), b"y\n");
    }
    let mut cmd = Command::new(BIN);
    cmd.args([os("migrate"), os("--jobs"), os("2"), root.as_os_str()]);
    crate::support::run::limit_nofile(&mut cmd, 512);
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("converted: 2000 files"), "{stdout}");
    assert_eq!(
        fs::read(root.join("a7/b57/c957/y.txt")).unwrap(),
        expected_cutf8(b"y\n")
    );
}

/// `--report` inside a named tree: the run's own report is never
/// converted (a conversion would rename a copy over it, and the lines
/// written after would go to the unlinked original: the report lost). It
/// is reported as the run's own file, and holds every line.
#[test]
fn a_report_inside_the_tree_is_left_to_the_run_and_complete() {
    let t = tmpdir();
    let root = t.path().join("tree");
    for d in 0..20 {
        let dir = root.join(format!("d{d:02}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f:03}.txt")), format!("text {d} {f}\n")).unwrap();
        }
    }
    // Walked after the directories whose files fill it.
    fs::create_dir(root.join("zz")).unwrap();
    let report = root.join("zz/report.jsonl");
    for jobs in ["1", "4"] {
        let out = cutf8(&[
            root.as_os_str(),
            os("--jobs"),
            os(jobs),
            os("--report"),
            report.as_os_str(),
        ]);
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "--jobs {jobs}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = fs::read(&report).unwrap();
        assert!(
            !bytes.starts_with(&MAGIC),
            "--jobs {jobs}: the report was converted while it was written"
        );
        let lines = read_report(&report, &root);
        let own = lines
            .get(b"zz/report.jsonl".as_slice())
            .unwrap_or_else(|| panic!("--jobs {jobs}: the report does not list itself"));
        assert_eq!(own["code"], "own-report", "--jobs {jobs}: {own}");
        assert_eq!(
            lines.len(),
            2001,
            "--jobs {jobs}: every file and the report itself, once each"
        );
        // Converted on the first run, already corrected on the second.
        let line = &lines[b"d07/f042.txt".as_slice()];
        if jobs == "1" {
            assert_eq!(line["action"], "converted", "--jobs {jobs}: {line}");
        } else {
            assert_eq!(line["code"], "already-corrected", "--jobs {jobs}: {line}");
        }
    }
}

/// Directories named like a killed run's temporary file or journal are a
/// user's, not the run's leftovers: walked as any other, nothing failed.
#[test]
fn a_directory_named_like_a_leftover_is_walked_as_any_other() {
    let t = tmpdir();
    let root = t.path().join("tree");
    let tmp_dir = root.join(".cutf8-tmp.0123456789abcdef.1-1");
    let journal_dir = root.join(".cutf8-journal.0123456789abcdef");
    for d in [&tmp_dir, &journal_dir] {
        fs::create_dir_all(d).unwrap();
        fs::write(d.join("inside.txt"), "text\n").unwrap();
    }
    let report = t.path().join("report.jsonl");
    let out = migrate(&[root.as_os_str(), os("--report"), report.as_os_str()], 0);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    for d in [&tmp_dir, &journal_dir] {
        assert_eq!(
            fs::read(d.join("inside.txt")).unwrap(),
            expected_cutf8(b"text\n"),
            "{}: entered and converted",
            d.display()
        );
    }
}
