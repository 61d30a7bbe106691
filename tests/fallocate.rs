//! fallocate(2) through a real `cutf8fs` mount: on a corrected file every
//! mode the kernel passes to FUSE —
//! allocate (mode 0), KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE with and
//! without KEEP_SIZE — acts on the view exactly as it acts natively on a
//! plain file holding the view's bytes.
//!
//! The model is never the mount: each case runs the same fallocate on a copy
//! of the view on the native filesystem (/tmp), and the mount must read back
//! those bytes, report that size and that result, while the backing file
//! stays the magic number plus lossless W of exactly those bytes. A range
//! boundary that cuts a character leaves the cut bytes as a native file
//! does; the lossless view (docs/format.md) keeps them as they are.
//!
//! Collapse-range and insert-range never reach the daemon (the kernel's
//! FUSE client refuses them with EOPNOTSUPP); the tests pin that down so
//! the man page stays true.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::support::mount::Mount;
use crate::support::write::first_difference;
use cutf8::{self, MAGIC};

const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
const ZERO_KEEP: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
const MODES: [(i32, &str); 5] = [
    (0, "allocate"),
    (KEEP, "allocate KEEP_SIZE"),
    (PUNCH, "punch hole"),
    (ZERO, "zero range"),
    (ZERO_KEEP, "zero range KEEP_SIZE"),
];

/// Text touching every unit kind whose length differs between view and disk
/// (U+0800–U+089F, U+10000–U+1109F) and several that do not.
const TEXT: &str = "alpha ascii line\n\
    Latin: café naïve à\n\
    CJK: 中文かな 한국어 a\n\
    emoji: 😀🎉 a\n\
    shifting: \u{800}\u{89F} 𐀀\u{1109F} a \u{850}\u{10400}\n\
    end a\n";

/// fallocate on `path` opened read-write; the errno on failure.
fn falloc(path: &Path, mode: i32, off: u64, len: u64) -> Result<(), i32> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    // SAFETY: fallocate only reads its integer arguments; `f` is open.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// The same fallocate on a plain file holding `view` on the native
/// filesystem: its result and the bytes it leaves.
fn native(dir: &Path, view: &[u8], mode: i32, off: u64, len: u64) -> (Result<(), i32>, Vec<u8>) {
    let p = dir.join("native-model");
    fs::write(&p, view).unwrap();
    let r = falloc(&p, mode, off, len);
    let got = fs::read(&p).unwrap();
    fs::remove_file(&p).unwrap();
    (r, got)
}

/// View bytes of a corrected disk text.
fn view_of(disk_text: &[u8]) -> Vec<u8> {
    cutf8::decode_lossless(disk_text)
}

/// Runs one case on a fresh corrected file `name` holding `disk` (without
/// magic) and compares everything with the native model.
fn check_case(m: &Mount, name: &str, disk: &[u8], mode: i32, off: u64, len: u64, what: &str) {
    let view = view_of(disk);
    let mut file = MAGIC.to_vec();
    file.extend_from_slice(disk);
    fs::write(m.b(name), &file).unwrap();
    let (want_r, want) = native(m.dir(), &view, mode, off, len);
    let got_r = falloc(&m.m(name), mode, off, len);
    assert_eq!(
        got_r, want_r,
        "{what}: fallocate result through the mount differs from native"
    );
    let got = fs::read(m.m(name)).unwrap();
    assert!(
        got == want,
        "{what}: the view after fallocate is not what a native file holds: {}",
        first_difference(&got, &want)
    );
    assert_eq!(
        fs::metadata(m.m(name)).unwrap().len(),
        want.len() as u64,
        "{what}: st_size through the mount"
    );
    assert_backing(&m.b(name), &want, what);
}

/// The backing file is still corrected: the magic number plus lossless W of
/// `view` (strict W where no character was cut).
fn assert_backing(path: &Path, view: &[u8], what: &str) {
    let backing = fs::read(path).unwrap();
    assert!(
        cutf8::has_magic(&backing),
        "{what}: the backing file lost its magic number (became raw) although the view is storable"
    );
    let body = &backing[MAGIC.len()..];
    let w = cutf8::encode_lossless(view).expect("lossless W");
    assert!(
        body == w.as_slice(),
        "{what}: backing bytes are not lossless W of the view: {}",
        first_difference(body, &w)
    );
}

/// Offsets that cut characters of `view` (a continuation byte follows a
/// lead or another continuation byte), one per kind of lead byte.
fn cuts(view: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..view.len() {
        if view[i] & 0xC0 == 0x80 {
            // Index of the lead byte this continuation belongs to.
            let lead = (0..i).rev().find(|&j| view[j] & 0xC0 != 0x80).unwrap_or(0);
            let key = (view[lead], i - lead);
            if seen.insert(key) {
                out.push(i as u64);
            }
        }
    }
    out
}

#[test]
fn every_mode_on_corrected_files_matches_a_native_file() {
    let m = Mount::new(&[], |_| {});
    let texts: Vec<(&str, Vec<u8>)> = vec![
        (
            "ascii",
            cutf8::encode_strict(b"0123456789 abcdefghij\nline two\n").unwrap(),
        ),
        ("every kind", crate::support::mount::every_kind()),
    ];
    let mut n = 0;
    for (tname, disk) in &texts {
        let view = view_of(disk);
        let vl = view.len() as u64;
        let c = cuts(&view);
        let mut ranges: Vec<(u64, u64)> = vec![
            (0, 1),
            (0, vl),
            (3, 5),
            (vl - 2, 10),
            (vl, 7),
            (vl + 5, 3),
            (2, vl + 100),
        ];
        for (k, &a) in c.iter().enumerate() {
            ranges.push((a, 1));
            ranges.push((a - 1, 2));
            ranges.push((a, vl - a + 4));
            if let Some(&b) = c.get(k + 3) {
                ranges.push((a, b - a));
            }
        }
        for &(off, len) in &ranges {
            for (mode, mname) in MODES {
                n += 1;
                let what = format!("{tname} text, {mname} at {off} length {len} (view {vl})");
                check_case(&m, &format!("f{n}"), disk, mode, off, len, &what);
            }
        }
    }
    // A corrected file holding only the magic number: an empty view.
    for (off, len) in [(0, 1), (3, 5), (0, 100_000)] {
        for (mode, mname) in MODES {
            n += 1;
            let what = format!("empty view, {mname} at {off} length {len}");
            check_case(&m, &format!("f{n}"), b"", mode, off, len, &what);
        }
    }
    eprintln!("{n} cases");
}

#[test]
fn big_ranges_and_shifting_text_stay_bounded_and_exact() {
    // Several MiB, so a shifting rewrite goes through the journal in more
    // than one chunk and zero ranges past the end are longer than a chunk.
    let line = "a café 中文 \u{800}\u{850} 𐀀 😀 end\n";
    let text = line.repeat(3 << 20 >> 5);
    let disk = cutf8::encode_strict(text.as_bytes()).unwrap();
    let view = text.as_bytes();
    let vl = view.len() as u64;
    let m = Mount::new(&[], |_| {});
    let cases: [(i32, u64, u64); 6] = [
        (PUNCH, (1 << 20) + 3, 3 << 19),
        (ZERO_KEEP, 17, vl),
        (ZERO, vl / 2 + 1, vl),
        (ZERO, vl + (1 << 20), 5 << 20),
        (0, vl - 3, 3 << 20),
        (PUNCH, 0, vl - 1),
    ];
    for (k, (mode, off, len)) in cases.into_iter().enumerate() {
        let t = std::time::Instant::now();
        check_case(
            &m,
            &format!("big{k}"),
            &disk,
            mode,
            off,
            len,
            &format!("big file, mode {mode:#x} at {off} length {len}"),
        );
        eprintln!(
            "big case {k} (mode {mode:#x}, {len} bytes): {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn collapse_and_insert_are_refused_and_change_nothing() {
    let disk = cutf8::encode_strict(TEXT.repeat(400).as_bytes()).unwrap();
    let m = Mount::new(&[], |b| {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&disk);
        fs::write(b.join("c"), &f).unwrap();
        fs::write(b.join("raw"), vec![0xFFu8; 16384]).unwrap();
    });
    let before = fs::read(m.b("c")).unwrap();
    let raw_before = fs::read(m.b("raw")).unwrap();
    for mode in [libc::FALLOC_FL_COLLAPSE_RANGE, libc::FALLOC_FL_INSERT_RANGE] {
        for name in ["c", "raw"] {
            assert_eq!(
                falloc(&m.m(name), mode, 4096, 4096),
                Err(libc::EOPNOTSUPP),
                "mode {mode:#x} on {name}"
            );
        }
    }
    assert!(fs::read(m.b("c")).unwrap() == before);
    assert!(fs::read(m.b("raw")).unwrap() == raw_before);
    // Punch without KEEP_SIZE is refused as natively.
    assert_eq!(
        falloc(&m.m("c"), libc::FALLOC_FL_PUNCH_HOLE, 0, 10),
        Err(libc::EOPNOTSUPP)
    );
}

#[test]
fn raw_files_behave_as_native_files() {
    let bytes: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 | 0x80).collect();
    let m = Mount::new(&[], |b| fs::write(b.join("r"), &bytes).unwrap());
    let (want_r, want) = native(m.dir(), &bytes, PUNCH, 5000, 9000);
    assert_eq!(falloc(&m.m("r"), PUNCH, 5000, 9000), want_r);
    assert!(fs::read(m.m("r")).unwrap() == want);
    assert!(fs::read(m.b("r")).unwrap() == want);
    // The hole is a hole in BACKING too.
    let blocks = fs::metadata(m.b("r")).unwrap().blocks();
    assert!(
        blocks * 512 < 20000,
        "{blocks} blocks: punch did not reach BACKING"
    );
}

/// `fallocate(1)` from util-linux on a corrected file: each option acts on
/// the view as on a native file.
#[test]
fn util_linux_fallocate_on_corrected_files() {
    let disk = cutf8::encode_strict(TEXT.repeat(30).as_bytes()).unwrap();
    let view = view_of(&disk);
    let m = Mount::new(&[], |_| {});
    let native_dir = m.dir().join("native");
    fs::create_dir(&native_dir).unwrap();
    let cases: [&[&str]; 6] = [
        &["-p", "-o", "7", "-l", "100"],
        &["-z", "-o", "41", "-l", "3000"],
        &["-z", "-n", "-o", "41", "-l", "3000"],
        &["-o", "100", "-l", "5000"],
        &["-n", "-o", "100", "-l", "9000"],
        &["-l", "50"],
    ];
    for (k, args) in cases.iter().enumerate() {
        let name = format!("u{k}");
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&disk);
        fs::write(m.b(&name), &f).unwrap();
        let nat = native_dir.join(&name);
        fs::write(&nat, &view).unwrap();
        for target in [m.m(&name), nat.clone()] {
            let out = std::process::Command::new("fallocate")
                .args(*args)
                .arg(&target)
                .output()
                .unwrap();
            crate::support::run::succeeded(
                &out,
                format_args!("fallocate {args:?} {}", target.display()),
            );
        }
        let want = fs::read(&nat).unwrap();
        let got = fs::read(m.m(&name)).unwrap();
        assert!(
            got == want,
            "fallocate {args:?}: {}",
            first_difference(&got, &want)
        );
        assert_backing(&m.b(&name), &want, &format!("fallocate {args:?}"));
    }
    // -d (dig holes) finds the zero runs and punches them: the view keeps
    // its bytes.
    let name = "dig";
    let text = format!("{}{}{}", TEXT, "\0".repeat(70000), TEXT);
    let disk = cutf8::encode_lossless(text.as_bytes()).unwrap();
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(&disk);
    fs::write(m.b(name), &f).unwrap();
    let out = std::process::Command::new("fallocate")
        .arg("-d")
        .arg(m.m(name))
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
    assert!(fs::read(m.m(name)).unwrap() == text.as_bytes());
}

/// suid and sgid are dropped by fallocate as by a write, for a caller
/// without CAP_FSETID — compared with the native filesystem doing the same.
#[test]
fn suid_and_sgid_are_dropped_as_natively() {
    let a = crate::support::users::user("cutf8t-a");
    let disk = cutf8::encode_strict(TEXT.as_bytes()).unwrap();
    let view = view_of(&disk);
    // Opened to the user before the mount: a chmod of BACKING's root
    // after it reaches the kernel through the watch, a moment later (CI
    // once ran the user's open first: EACCES).
    let m = Mount::new(&[], |b| {
        fs::set_permissions(b.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    });
    let native_dir = m.dir().join("native");
    fs::create_dir(&native_dir).unwrap();
    fs::set_permissions(&native_dir, fs::Permissions::from_mode(0o755)).unwrap();
    for (k, opt) in [
        "-p -o 3 -l 4",
        "-z -o 3 -l 4",
        "-z -o 3 -l 4000",
        "-l 5000",
        "-n -l 10",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("s{k}");
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&disk);
        let nat = native_dir.join(&name);
        for (p, content) in [(m.b(&name), &f), (nat.clone(), &view)] {
            fs::write(&p, content).unwrap();
            std::os::unix::fs::chown(&p, Some(a.uid), Some(a.gid)).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o6775)).unwrap();
        }
        for target in [m.m(&name), nat.clone()] {
            let out = crate::support::users::sh_as(
                a,
                &format!("fallocate {opt} \"$1\""),
                &[OsStr::new(&target)],
            );
            crate::support::run::succeeded(
                &out,
                format_args!("fallocate {opt} {} as cutf8t-a", target.display()),
            );
        }
        let want = fs::metadata(&nat).unwrap().mode() & 0o7777;
        assert_eq!(want & 0o6000, 0, "test bug: natively {opt} kept suid/sgid");
        let got = fs::metadata(m.b(&name)).unwrap().mode() & 0o7777;
        assert_eq!(
            got, want,
            "fallocate {opt}: mode {got:o} in BACKING, {want:o} natively"
        );
        assert!(fs::read(m.m(&name)).unwrap() == fs::read(&nat).unwrap());
    }
}

/// A tmpfs of our own (a small BACKING), unmounted on drop.
struct SmallTmpfs(tempfile::TempDir);

impl SmallTmpfs {
    fn new(size: &str) -> SmallTmpfs {
        let d = tempfile::Builder::new()
            .prefix("cutf8fs-falloc-")
            .tempdir()
            .unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs");
        SmallTmpfs(d)
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Out of space: allocation fails with ENOSPC as natively and changes
/// nothing; a zeroing that shifts text and cannot get room for its
/// journaled rewrite fails too, leaving the file whole.
#[test]
fn out_of_space_changes_nothing() {
    let t = SmallTmpfs::new("2m");
    let text = "a \u{800}\u{850} 𐀀 b\n".repeat(1_400_000 / 16);
    let disk = cutf8::encode_strict(text.as_bytes()).unwrap();
    let m = Mount::new_in(t.0.path(), &[], |b| {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&disk);
        fs::write(b.join("c"), &f).unwrap();
    });
    let before = fs::read(m.b("c")).unwrap();
    let vl = text.len() as u64;
    for (mode, off, len) in [(0, 0, 50 << 20), (KEEP, vl, 50 << 20), (0, vl - 5, 8 << 20)] {
        let r = falloc(&m.m("c"), mode, off, len);
        assert_eq!(r, Err(libc::ENOSPC), "mode {mode:#x} at {off} length {len}");
        assert!(
            fs::read(m.b("c")).unwrap() == before,
            "mode {mode:#x}: BACKING changed"
        );
        assert_eq!(fs::metadata(m.m("c")).unwrap().len(), vl);
    }
    // Zeroing the first shifting characters moves the whole tail: no room.
    let r = falloc(&m.m("c"), PUNCH, 2, 3);
    assert_eq!(r, Err(libc::ENOSPC));
    assert!(
        fs::read(m.b("c")).unwrap() == before,
        "punch: BACKING changed"
    );
    assert!(fs::read(m.m("c")).unwrap() == text.as_bytes());
    // A range that keeps its disk length needs no room.
    assert_eq!(falloc(&m.m("c"), PUNCH, 0, 1), Ok(()));
    let mut want = text.into_bytes();
    want[0] = 0;
    assert!(fs::read(m.m("c")).unwrap() == want);
    assert_backing(&m.b("c"), &want, "punch in place on a full BACKING");
    drop(m);
}

/// The file changes in BACKING between open and fallocate: the call acts on
/// the new content (never through the old index), as on a native file.
#[test]
fn fallocate_after_a_change_underneath_acts_on_the_new_content() {
    let old = cutf8::encode_strict("ascii only, long enough\n".repeat(50).as_bytes()).unwrap();
    let new_text = TEXT.repeat(3);
    let new = cutf8::encode_strict(new_text.as_bytes()).unwrap();
    let m = Mount::new(&[], |b| {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&old);
        fs::write(b.join("c"), &f).unwrap();
    });
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m("c"))
        .unwrap();
    let mut head = [0u8; 10];
    std::os::unix::fs::FileExt::read_at(&f, &mut head, 0).unwrap();
    // Rewritten in place in BACKING (same inode), text that shifts.
    let mut nf = MAGIC.to_vec();
    nf.extend_from_slice(&new);
    fs::write(m.b("c"), &nf).unwrap();
    let off = new_text.find('\u{800}').unwrap() as u64 + 1;
    // SAFETY: fallocate only reads its integer arguments; `f` is open.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), PUNCH, off as i64, 40) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    drop(f);
    let (r, want) = native(m.dir(), new_text.as_bytes(), PUNCH, off, 40);
    assert_eq!(r, Ok(()));
    assert_backing(&m.b("c"), &want, "punch after a rewrite underneath");
}
