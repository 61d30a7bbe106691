//! Real tools writing through a real `cutf8fs` mount, in `cargo test`: vim with every `backupcopy`,
//! `sed -i`, `perl -pi`, shell `>` and `>>`, `cp`, `mv`, `rsync -a`,
//! `tar -x`, `git clone` and `git checkout`, Python's open modes.
//!
//! After each tool, two things must hold (docs/behaviour.md, "The mount"): the mount reads back
//! exactly what the tool wrote, and the backing file is the magic number
//! plus the *strict* Corrected UTF-8 of exactly that (checked by decoding
//! and encoding with the codec's strict converters, never by comparing the
//! mount with itself) — or, where docs/behaviour.md says raw (binary content, U+0000,
//! C1 controls, `-o newfiles=raw`), exactly the written bytes.
//!
//! Expected results are computed in Rust from the test's own inputs, never
//! read back through the mount. Each test mounts a fresh BACKING
//! (`crate::support::mount::Mount`); FUSE missing is a failure.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::mount::Mount;
use crate::support::write::*;
use cutf8::MAGIC;

/// Text touching every kind of unit the view has: ASCII, Latin, Greek,
/// Cyrillic, CJK, emoji, and both ranges whose length differs between view
/// and disk (U+0800–U+089F, U+10000–U+1109F). Every line holds an "a".
const TEXT: &str = "alpha ascii line\n\
    Latin: café naïve à\n\
    Greek/Cyrillic: αβγ жизнь a\n\
    CJK: 中文かな 한국어 a\n\
    emoji: 😀🎉 a\n\
    shifting: \u{800}\u{89F} 𐀀\u{1109F} a\n\
    end a\n";

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

fn write(path: &Path, bytes: &[u8]) {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Longer text (several write(2) calls for any tool), with characters cut
/// at every buffer boundary a tool might use.
fn long_text(lines: usize) -> String {
    let words = [
        "alpha",
        "café",
        "жизнь",
        "中文",
        "😀",
        "\u{800}",
        "\u{89F}",
        "𐀀",
        "\u{1109F}",
        "x",
    ];
    let mut s = String::new();
    for i in 0..lines {
        for k in 0..9 {
            s.push_str(words[(i * 7 + k * 3) % words.len()]);
            s.push(' ');
        }
        s.push_str(&i.to_string());
        s.push('\n');
    }
    s
}

// ---------------------------------------------------------------- editors

fn vim(args: &[&str], file: &Path) {
    let mut c = Command::new("vim");
    c.args(["-Nu", "NONE", "-i", "NONE", "-n", "-es"])
        .args(["--cmd", "set encoding=utf-8"])
        .args(args)
        .arg(file)
        .env("HOME", file.parent().unwrap());
    run(&mut c);
}

#[test]
fn vim_saves_with_backupcopy_auto_yes_and_no() {
    let modes = ["auto", "yes", "no"];
    let m = Mount::new(&[], |b| {
        for mode in modes {
            write(
                &b.join(format!("corrected-{mode}.txt")),
                &corrected_file(TEXT),
            );
            write(&b.join(format!("raw-{mode}.txt")), TEXT.as_bytes());
        }
    });
    let want = TEXT.replace('a', "ä\u{800}");
    for mode in modes {
        for start in ["corrected", "raw"] {
            let name = format!("{start}-{mode}.txt");
            let what = format!("vim backupcopy={mode} on a {start} file");
            let ino_before = ino(&m.b(&name));
            vim(
                &[
                    "-c",
                    &format!("set backupcopy={mode}"),
                    "-c",
                    "%s/a/ä\u{800}/ge",
                    "-c",
                    "wq",
                ],
                &m.m(&name),
            );
            assert_view(&m.m(&name), want.as_bytes(), &what);
            // A raw file is saved corrected too: either vim writes a new
            // file, or it truncates the old one (O_TRUNC empties it).
            assert_corrected(&m.b(&name), want.as_bytes(), &what);
            if mode == "yes" {
                // backupcopy=yes overwrites the file in place: same inode.
                assert_eq!(ino(&m.b(&name)), ino_before, "{what}: inode changed");
            }
        }
    }
    // vim leaves no backup or swap files behind.
    let left: Vec<_> = files_under(&m.backing, &[".cutf8fs-journal", ".cutf8fs-index"]);
    assert_eq!(left.len(), 6, "files left in BACKING: {left:?}");
}

#[test]
fn vim_normal_mode_edit_and_new_file() {
    let m = Mount::new(&[], |b| write(&b.join("t.txt"), &corrected_file(TEXT)));
    // Append a line with normal-mode commands, insert one at the top.
    vim(
        &[
            "-c",
            "normal Go\u{1109F} new last line 中",
            "-c",
            "normal ggOfirst ࠀ",
            "-c",
            "wq",
        ],
        &m.m("t.txt"),
    );
    let want = format!("first ࠀ\n{TEXT}\u{1109F} new last line 中\n");
    assert_view(&m.m("t.txt"), want.as_bytes(), "vim normal-mode edit");
    assert_corrected(&m.b("t.txt"), want.as_bytes(), "vim normal-mode edit");
    // A file vim creates.
    vim(
        &["-c", "normal ihello wörld 😀", "-c", "wq"],
        &m.m("new.txt"),
    );
    assert_view(
        &m.m("new.txt"),
        "hello wörld 😀\n".as_bytes(),
        "vim new file",
    );
    assert_corrected(
        &m.b("new.txt"),
        "hello wörld 😀\n".as_bytes(),
        "vim new file",
    );
}

#[test]
fn sed_i_and_perl_pi_leave_corrected_files() {
    let m = Mount::new(&[], |b| {
        write(&b.join("sed-corrected.txt"), &corrected_file(TEXT));
        write(&b.join("sed-raw.txt"), TEXT.as_bytes());
        write(&b.join("perl-corrected.txt"), &corrected_file(TEXT));
        write(&b.join("perl-raw.txt"), TEXT.as_bytes());
        write(&b.join("big.txt"), &corrected_file(&long_text(4000)));
    });
    let sed_want = TEXT.replace('a', "ä𐀀");
    for start in ["corrected", "raw"] {
        let name = format!("sed-{start}.txt");
        let p = m.m(&name);
        run(Command::new("sed").args(["-i", "s/a/ä𐀀/g"]).arg(&p));
        assert_view(&p, sed_want.as_bytes(), &format!("sed -i on {start}"));
        assert_corrected(
            &m.b(&name),
            sed_want.as_bytes(),
            &format!("sed -i on {start}"),
        );
    }
    // perl in byte mode, writing UTF-8 bytes (ä = C3 A4, U+0800 = E0 A0 80).
    let perl_want = TEXT.replace('a', "ä\u{800}");
    for start in ["corrected", "raw"] {
        let name = format!("perl-{start}.txt");
        let p = m.m(&name);
        run(Command::new("perl")
            .args(["-pi", "-e", r"s/a/\xc3\xa4\xe0\xa0\x80/g"])
            .arg(&p));
        assert_view(&p, perl_want.as_bytes(), &format!("perl -pi on {start}"));
        assert_corrected(
            &m.b(&name),
            perl_want.as_bytes(),
            &format!("perl -pi on {start}"),
        );
    }
    // A file larger than the tools' buffers: characters are cut between
    // write(2) calls.
    let big_want = long_text(4000).replace("x", "\u{1109F}y");
    run(Command::new("sed")
        .args(["-i", "s/x/\u{1109F}y/g"])
        .arg(m.m("big.txt")));
    assert_view(&m.m("big.txt"), big_want.as_bytes(), "sed -i on a big file");
    assert_corrected(&m.b("big.txt"), big_want.as_bytes(), "sed -i on a big file");
    // perl writing a Latin-1 byte: not UTF-8, so the new file is raw.
    run(Command::new("perl")
        .args(["-pi", "-e", r"s/^/\xe9/ if $. == 1"])
        .arg(m.m("perl-raw.txt")));
    let latin1 = [&b"\xe9"[..], perl_want.as_bytes()].concat();
    assert_view(&m.m("perl-raw.txt"), &latin1, "perl writing Latin-1");
    assert_raw(&m.b("perl-raw.txt"), &latin1, "perl writing Latin-1");
}

// ---------------------------------------------------------------- shell

#[test]
fn shell_redirections_truncate_and_append() {
    let m = Mount::new(&[], |b| {
        write(&b.join("raw-text.txt"), "raw é\n".as_bytes());
        write(&b.join("raw-append.txt"), "raw é\n".as_bytes());
        write(&b.join("corrected.txt"), &corrected_file(TEXT));
        write(&b.join("to-c1.txt"), &corrected_file(TEXT));
        write(&b.join("to-empty.txt"), &corrected_file(TEXT));
    });
    let p = |n: &str| m.m(n);
    // `>` on a new file: text → corrected.
    sh_in(r#"cat > "$1""#, &[os(&p("new.txt"))], TEXT.as_bytes());
    assert_view(&p("new.txt"), TEXT.as_bytes(), "> new file");
    assert_corrected(&m.b("new.txt"), TEXT.as_bytes(), "> new file");
    // `printf >` too (one write(2) per format piece).
    sh(
        r#"printf 'x %s y %s\n' 'ж' '😀' > "$1""#,
        &[os(&p("printf.txt"))],
    );
    assert_corrected(&m.b("printf.txt"), "x ж y 😀\n".as_bytes(), "printf >");
    // `>` on a raw file: O_TRUNC empties it, the text makes it corrected.
    sh_in(r#"cat > "$1""#, &[os(&p("raw-text.txt"))], TEXT.as_bytes());
    assert_view(&p("raw-text.txt"), TEXT.as_bytes(), "> over raw");
    assert_corrected(&m.b("raw-text.txt"), TEXT.as_bytes(), "> over raw");
    // `>>` on a corrected file, fifty times: stays corrected.
    let mut want = TEXT.to_string();
    for i in 0..50 {
        let line = format!("line {i} ࠀ 𐀀 中 😀\n");
        sh(
            r#"printf '%s' "$2" >> "$1""#,
            &[os(&p("corrected.txt")), OsStr::new(&line)],
        );
        want.push_str(&line);
    }
    assert_view(&p("corrected.txt"), want.as_bytes(), ">> on corrected");
    assert_corrected(&m.b("corrected.txt"), want.as_bytes(), ">> on corrected");
    // `>>` on a raw file: it has content, so it stays raw.
    sh(r#"printf 'more ü\n' >> "$1""#, &[os(&p("raw-append.txt"))]);
    let want_raw = "raw é\nmore ü\n".as_bytes();
    assert_view(&p("raw-append.txt"), want_raw, ">> on raw");
    assert_raw(&m.b("raw-append.txt"), want_raw, ">> on raw");
    // `>` with binary content (NUL) or a C1 control: raw.
    let bin = b"\x00\x01\x02 binary \xff\xfe\n";
    sh_in(r#"cat > "$1""#, &[os(&p("bin"))], bin);
    assert_view(&p("bin"), bin, "> binary");
    assert_raw(&m.b("bin"), bin, "> binary");
    let c1 = "C1 \u{85} control\n".as_bytes();
    sh_in(r#"cat > "$1""#, &[os(&p("c1.txt"))], c1);
    assert_view(&p("c1.txt"), c1, "> C1 control");
    assert_raw(&m.b("c1.txt"), c1, "> C1 control");
    // `>>` of a C1 control onto a corrected file: it turns raw, nothing lost.
    sh_in(r#"cat >> "$1""#, &[os(&p("to-c1.txt"))], b"\xc2\x85 tail\n");
    let want_c1 = [TEXT.as_bytes(), b"\xc2\x85 tail\n"].concat();
    assert_view(&p("to-c1.txt"), &want_c1, ">> C1 onto corrected");
    assert_raw(&m.b("to-c1.txt"), &want_c1, ">> C1 onto corrected");
    // `: >` empties a corrected file; `>>` then starts it afresh.
    sh(r#": > "$1""#, &[os(&p("to-empty.txt"))]);
    assert_view(&p("to-empty.txt"), b"", ": > corrected");
    assert_empty(&m.b("to-empty.txt"), ": > corrected");
    sh(r#"printf 'fresh ࠀ\n' >> "$1""#, &[os(&p("to-empty.txt"))]);
    assert_corrected(&m.b("to-empty.txt"), "fresh ࠀ\n".as_bytes(), ">> after : >");
    // An emptied file that then receives binary is raw.
    sh(
        r#": > "$1"; printf 'a\000b' >> "$1""#,
        &[os(&p("to-empty.txt"))],
    );
    assert_raw(&m.b("to-empty.txt"), b"a\0b", ": > then binary");
}

// ---------------------------------------------------------------- cp, mv

#[test]
fn cp_into_within_and_over() {
    let outside = tempfile::tempdir().unwrap();
    let big = long_text(20_000); // ~1.4 MB: many write(2) calls
    let bin: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 256) as u8).collect();
    write(&outside.path().join("t.txt"), TEXT.as_bytes());
    write(&outside.path().join("big.txt"), big.as_bytes());
    write(&outside.path().join("bin"), &bin);
    let m = Mount::new(&[], |b| {
        write(&b.join("corrected.txt"), &corrected_file(TEXT));
        write(&b.join("raw.txt"), "raw text ж\n".as_bytes());
        write(&b.join("victim.txt"), "old raw content\n".as_bytes());
        write(
            &b.join("victim2.txt"),
            &corrected_file("old corrected 中\n"),
        );
    });
    // From outside.
    for (name, bytes) in [
        ("t.txt", TEXT.as_bytes()),
        ("big.txt", big.as_bytes()),
        ("bin", &bin[..]),
    ] {
        run(Command::new("cp")
            .arg(outside.path().join(name))
            .arg(m.m(name)));
        assert_view(&m.m(name), bytes, &format!("cp {name} into the mount"));
        assert_written(&m.b(name), bytes, &format!("cp {name} into the mount"));
    }
    // Within the mount: a corrected file, a raw text file (becomes
    // corrected: cp writes a new file), a binary.
    for (from, to, bytes) in [
        ("corrected.txt", "copy-corrected.txt", TEXT.as_bytes()),
        ("raw.txt", "copy-raw.txt", "raw text ж\n".as_bytes()),
        ("bin", "copy-bin", &bin[..]),
        ("big.txt", "copy-big.txt", big.as_bytes()),
    ] {
        run(Command::new("cp").arg(m.m(from)).arg(m.m(to)));
        assert_view(&m.m(to), bytes, &format!("cp {from} {to}"));
        assert_written(&m.b(to), bytes, &format!("cp {from} {to}"));
    }
    // Over existing files (O_TRUNC): a raw one becomes corrected, a
    // corrected one receiving binary becomes raw.
    run(Command::new("cp")
        .arg(m.m("corrected.txt"))
        .arg(m.m("victim.txt")));
    assert_view(&m.m("victim.txt"), TEXT.as_bytes(), "cp over raw");
    assert_corrected(&m.b("victim.txt"), TEXT.as_bytes(), "cp over raw");
    run(Command::new("cp").arg(m.m("bin")).arg(m.m("victim2.txt")));
    assert_view(&m.m("victim2.txt"), &bin, "cp binary over corrected");
    assert_raw(&m.b("victim2.txt"), &bin, "cp binary over corrected");
    // cp -p keeps the mode.
    fs::set_permissions(m.m("t.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    run(Command::new("cp")
        .arg("-p")
        .arg(m.m("t.txt"))
        .arg(m.m("p.txt")));
    assert_eq!(fs::metadata(m.b("p.txt")).unwrap().mode() & 0o7777, 0o640);
    assert_corrected(&m.b("p.txt"), TEXT.as_bytes(), "cp -p");
}

#[test]
fn mv_within_and_from_outside() {
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("in.txt"), TEXT.as_bytes());
    write(&outside.path().join("in.bin"), b"\x00bin\xff");
    let m = Mount::new(&[], |b| {
        write(&b.join("c.txt"), &corrected_file(TEXT));
        write(&b.join("r.txt"), b"raw\n");
        fs::create_dir(b.join("sub")).unwrap();
    });
    // Within the mount, rename moves the backing file as it is.
    let (before_c, ino_c) = (fs::read(m.b("c.txt")).unwrap(), ino(&m.b("c.txt")));
    run(Command::new("mv").arg(m.m("c.txt")).arg(m.m("sub/c2.txt")));
    run(Command::new("mv").arg(m.m("r.txt")).arg(m.m("sub/r2.txt")));
    assert!(!m.b("c.txt").exists() && !m.m("c.txt").exists());
    assert_eq!(
        fs::read(m.b("sub/c2.txt")).unwrap(),
        before_c,
        "mv changed bytes"
    );
    assert_eq!(
        ino(&m.b("sub/c2.txt")),
        ino_c,
        "mv within changed the inode"
    );
    assert_view(&m.m("sub/c2.txt"), TEXT.as_bytes(), "mv within");
    assert_raw(&m.b("sub/r2.txt"), b"raw\n", "mv within (raw)");
    // From outside (another filesystem: mv copies, then unlinks).
    run(Command::new("mv")
        .arg(outside.path().join("in.txt"))
        .arg(m.m("in.txt")));
    run(Command::new("mv")
        .arg(outside.path().join("in.bin"))
        .arg(m.m("in.bin")));
    assert!(!outside.path().join("in.txt").exists());
    assert_view(&m.m("in.txt"), TEXT.as_bytes(), "mv from outside");
    assert_corrected(&m.b("in.txt"), TEXT.as_bytes(), "mv from outside");
    assert_raw(&m.b("in.bin"), b"\x00bin\xff", "mv binary from outside");
    // mv over an existing file replaces it.
    run(Command::new("mv").arg(m.m("in.txt")).arg(m.m("sub/r2.txt")));
    assert_corrected(&m.b("sub/r2.txt"), TEXT.as_bytes(), "mv over");
}

// ---------------------------------------------------------------- trees

/// A source tree outside the mount: text of every kind, a big text file,
/// binaries, an empty file, files that must stay raw, a symlink, modes and
/// old mtimes. Returns (relative path, content) of its regular files.
fn make_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let files: Vec<(String, Vec<u8>)> = vec![
        ("a.txt".into(), TEXT.as_bytes().to_vec()),
        (
            "sub/b.txt".into(),
            "中文かな 한국어\n".repeat(50).into_bytes(),
        ),
        ("sub/deep/big.md".into(), long_text(6000).into_bytes()),
        (
            "bin/blob.bin".into(),
            (0..4096u32).map(|i| (i * 13 % 256) as u8).collect(),
        ),
        ("empty".into(), vec![]),
        ("latin1.txt".into(), b"caf\xe9\n".to_vec()),
        ("c1.txt".into(), "x\u{85}y\n".as_bytes().to_vec()),
        ("nul.txt".into(), b"text\0more\n".to_vec()),
        ("magic-like".into(), [&MAGIC[..7], b"x\n"].concat()),
        ("ü ñame 😀.txt".into(), "name test ࠀ\n".as_bytes().to_vec()),
        ("run.sh".into(), b"#!/bin/sh\necho hi\n".to_vec()),
    ];
    for (rel, bytes) in &files {
        write(&root.join(rel), bytes);
    }
    fs::set_permissions(root.join("sub/b.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    for (rel, _) in &files {
        run(Command::new("touch")
            .args(["-h", "-d", "@1500000000"])
            .arg(root.join(rel)));
    }
    files
}

/// Each file of `files` reads back through `mnt_dir` as its content, with
/// the source's mode and mtime, and its backing file is corrected or raw as
/// docs/behaviour.md, "The mount" says for a new file.
fn check_tree(
    src: &Path,
    mnt_dir: &Path,
    back_dir: &Path,
    files: &[(String, Vec<u8>)],
    what: &str,
) {
    for (rel, bytes) in files {
        let what = format!("{what}: {rel}");
        assert_view(&mnt_dir.join(rel), bytes, &what);
        assert_written(&back_dir.join(rel), bytes, &what);
        let s = fs::metadata(src.join(rel)).unwrap();
        let t = fs::metadata(mnt_dir.join(rel)).unwrap();
        assert_eq!(t.mode() & 0o7777, s.mode() & 0o7777, "{what}: mode");
        assert_eq!(t.mtime(), s.mtime(), "{what}: mtime");
    }
    assert_eq!(
        fs::read_link(mnt_dir.join("link")).unwrap(),
        PathBuf::from("a.txt"),
        "{what}: symlink"
    );
}

/// The first character boundary at or after `at` in UTF-8 `text`.
fn char_boundary(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && text[at] & 0xC0 == 0x80 {
        at += 1;
    }
    at
}

#[test]
fn rsync_a_into_the_mount_and_again_after_changes() {
    let src = tempfile::tempdir().unwrap();
    let mut files = make_tree(src.path());
    let m = Mount::new(&[], |_| {});
    let rsync = |extra: &[&str]| {
        run(Command::new("rsync")
            .arg("-a")
            .args(extra)
            .arg(format!("{}/", src.path().display()))
            .arg(m.m("dst")));
    };
    rsync(&[]);
    check_tree(src.path(), &m.m("dst"), &m.b("dst"), &files, "rsync -a");
    // Change the source; rsync's delta transfer reads the old file through
    // the mount and writes a new one.
    let mut changed = files[2].1.clone();
    let at = char_boundary(&changed, 1000);
    changed.splice(at..at, "inserted 𐀀 text\n".bytes());
    changed.extend_from_slice("appended ࠀ\n".as_bytes());
    write(&src.path().join(&files[2].0), &changed);
    files[2].1 = changed;
    write(&src.path().join("a.txt"), "short now ж\n".as_bytes());
    files[0].1 = "short now ж\n".as_bytes().to_vec();
    for (rel, _) in &files {
        run(Command::new("touch")
            .args(["-h", "-d", "@1600000000"])
            .arg(src.path().join(rel)));
    }
    rsync(&[]);
    check_tree(
        src.path(),
        &m.m("dst"),
        &m.b("dst"),
        &files,
        "rsync -a again",
    );
    // --inplace writes into the existing file: it has content and stays
    // corrected, on the same inode.
    let before = ino(&m.b("dst/sub/deep/big.md"));
    let mut changed = files[2].1.clone();
    changed.truncate(char_boundary(&changed, 50_000));
    changed.extend_from_slice("new end 中\n".as_bytes());
    write(&src.path().join(&files[2].0), &changed);
    files[2].1 = changed;
    rsync(&["--inplace", "--no-whole-file"]);
    check_tree(
        src.path(),
        &m.m("dst"),
        &m.b("dst"),
        &files,
        "rsync -a --inplace",
    );
    assert_eq!(
        ino(&m.b("dst/sub/deep/big.md")),
        before,
        "rsync --inplace changed the inode"
    );
}

#[test]
fn tar_x_of_an_archive_made_outside() {
    let src = tempfile::tempdir().unwrap();
    let files = make_tree(src.path());
    let archive = tempfile::NamedTempFile::new().unwrap();
    run(Command::new("tar")
        .arg("-cf")
        .arg(archive.path())
        .arg("-C")
        .arg(src.path())
        .arg("."));
    let m = Mount::new(&[], |b| fs::create_dir(b.join("dst")).unwrap());
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive.path())
        .arg("-C")
        .arg(m.m("dst")));
    check_tree(src.path(), &m.m("dst"), &m.b("dst"), &files, "tar -x");
    // Extracting again over the existing files.
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive.path())
        .arg("-C")
        .arg(m.m("dst")));
    check_tree(src.path(), &m.m("dst"), &m.b("dst"), &files, "tar -x again");
}

// ---------------------------------------------------------------- git

fn git(dir: &Path, home: &Path, args: &[&str]) -> Vec<u8> {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(dir)
        .args(["-c", "core.quotepath=off", "-c", "init.defaultBranch=main"])
        .args(args)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "T")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "T")
        .env("GIT_COMMITTER_EMAIL", "t@example.org");
    run(&mut c).stdout
}

/// (path, content) of every file of `rev` in the repository `repo`.
fn tree_of(repo: &Path, home: &Path, rev: &str) -> Vec<(String, Vec<u8>)> {
    let list = git(repo, home, &["ls-tree", "-r", "-z", "--name-only", rev]);
    list.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|p| {
            let p = String::from_utf8(p.to_vec()).unwrap();
            let content = git(repo, home, &["cat-file", "blob", &format!("{rev}:{p}")]);
            (p, content)
        })
        .collect()
}

fn check_worktree(m: &Mount, repo: &Path, home: &Path, rev: &str, gone: &[&str]) {
    for (rel, bytes) in tree_of(repo, home, rev) {
        let what = format!("git checkout {rev}: {rel}");
        assert_view(&m.m(&format!("clone/{rel}")), &bytes, &what);
        assert_written(&m.b(&format!("clone/{rel}")), &bytes, &what);
    }
    for rel in gone {
        assert!(
            !m.b(&format!("clone/{rel}")).exists(),
            "git checkout {rev}: {rel} should be gone"
        );
    }
}

#[test]
fn git_clone_checkout_and_commit_inside_the_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let repo = tmp.path().join("src");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&repo).unwrap();
    git(&repo, &home, &["init", "-q"]);
    write(&repo.join("README.md"), TEXT.as_bytes());
    write(
        &repo.join("src/main.c"),
        "/* ж 中 */\nint main(void) { return 0; }\n".as_bytes(),
    );
    write(&repo.join("big.txt"), long_text(3000).as_bytes());
    write(
        &repo.join("data.bin"),
        &(0..3000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(),
    );
    write(&repo.join("docs/ü.txt"), "ü\n".as_bytes());
    git(&repo, &home, &["add", "-A"]);
    git(&repo, &home, &["commit", "-q", "-m", "one"]);
    git(&repo, &home, &["checkout", "-q", "-b", "other"]);
    let mut big = long_text(3000);
    big.insert_str(500, "\u{800}\u{800} shifted\n");
    write(&repo.join("big.txt"), big.as_bytes());
    write(
        &repo.join("README.md"),
        TEXT.replace("alpha", "ALPHA 𐀀").as_bytes(),
    );
    fs::remove_file(repo.join("src/main.c")).unwrap();
    write(&repo.join("new.txt"), "new on other 😀\n".as_bytes());
    write(&repo.join("data.bin"), b"\x00changed binary\xff");
    git(&repo, &home, &["add", "-A"]);
    git(&repo, &home, &["commit", "-q", "-m", "two"]);
    git(&repo, &home, &["checkout", "-q", "main"]);

    let m = Mount::new(&[], |_| {});
    git(
        &m.mnt,
        &home,
        &[
            "clone",
            "-q",
            "--no-hardlinks",
            repo.to_str().unwrap(),
            "clone",
        ],
    );
    let clone = m.m("clone");
    check_worktree(&m, &repo, &home, "main", &["new.txt"]);
    git(&clone, &home, &["checkout", "-q", "other"]);
    check_worktree(&m, &repo, &home, "other", &["src/main.c"]);
    assert!(
        git(&clone, &home, &["status", "--porcelain"]).is_empty(),
        "git status not clean after checkout"
    );
    git(&clone, &home, &["checkout", "-q", "main"]);
    check_worktree(&m, &repo, &home, "main", &["new.txt"]);
    // A commit made inside the mount, checked out again.
    sh(
        r#"printf 'edited in the mount ࠀ\n' >> "$1""#,
        &[os(&clone.join("README.md"))],
    );
    git(&clone, &home, &["commit", "-q", "-am", "three"]);
    assert!(
        git(&clone, &home, &["status", "--porcelain"]).is_empty(),
        "git status not clean after commit"
    );
    git(&clone, &home, &["checkout", "-q", "HEAD~1"]);
    check_worktree(&m, &repo, &home, "main", &["new.txt"]);
    git(&clone, &home, &["checkout", "-q", "main"]);
    let want = [TEXT.as_bytes(), "edited in the mount ࠀ\n".as_bytes()].concat();
    assert_view(&clone.join("README.md"), &want, "README after commit");
    assert_corrected(&m.b("clone/README.md"), &want, "README after commit");
    git(&clone, &home, &["fsck", "--strict", "--no-progress"]);
    // Every file under .git reads through the mount as V of its backing
    // bytes (git's own files are new files under .git: kept raw).
    for rel in files_under(&m.b("clone/.git"), &[]) {
        let back = fs::read(m.b("clone/.git").join(&rel)).unwrap();
        let view = fs::read(m.m("clone/.git").join(&rel)).unwrap();
        assert!(
            crate::support::mount::expected_view(&back) == view,
            ".git/{}: mount and backing disagree",
            rel.display()
        );
    }
}

// ---------------------------------------------------------------- Python

#[test]
fn python_open_modes() {
    let m = Mount::new(&[], |b| {
        write(&b.join("w-over-raw.txt"), b"old raw content\n");
        write(&b.join("a-corrected.txt"), &corrected_file(TEXT));
        write(&b.join("a-raw.txt"), "raw ü\n".as_bytes());
        write(&b.join("rplus.txt"), &corrected_file(TEXT));
        write(&b.join("rplusb.txt"), &corrected_file(TEXT));
        write(&b.join("ab.txt"), &corrected_file(TEXT));
        write(&b.join("a-empty.txt"), b"");
    });
    let t = "Python wrote: é ж 中 😀 \u{800} 𐀀\n";
    let py = |script: &str, name: &str| python(script, &[os(&m.m(name)), OsStr::new(t)]);
    let w = "import sys\nopen(sys.argv[1], 'w', encoding='utf-8').write(sys.argv[2])";
    // w: a new file, and over a raw one.
    for name in ["w-new.txt", "w-over-raw.txt"] {
        py(w, name);
        assert_view(&m.m(name), t.as_bytes(), &format!("python w {name}"));
        assert_corrected(&m.b(name), t.as_bytes(), &format!("python w {name}"));
    }
    // a: corrected stays corrected; raw (with content) stays raw; an empty
    // file takes the text's encoding.
    let a = "import sys\nopen(sys.argv[1], 'a', encoding='utf-8').write(sys.argv[2])";
    py(a, "a-corrected.txt");
    let want = format!("{TEXT}{t}");
    assert_view(
        &m.m("a-corrected.txt"),
        want.as_bytes(),
        "python a corrected",
    );
    assert_corrected(
        &m.b("a-corrected.txt"),
        want.as_bytes(),
        "python a corrected",
    );
    py(a, "a-raw.txt");
    let want = format!("raw ü\n{t}");
    assert_raw(&m.b("a-raw.txt"), want.as_bytes(), "python a raw");
    py(a, "a-empty.txt");
    assert_corrected(&m.b("a-empty.txt"), t.as_bytes(), "python a empty");
    // r+ (text): overwrites from the start, the rest stays.
    py(
        "import sys\nf = open(sys.argv[1], 'r+', encoding='utf-8')\nf.write('ÄÖ')\nf.close()",
        "rplus.txt",
    );
    let want = format!("ÄÖ{}", &TEXT[4..]);
    assert_view(&m.m("rplus.txt"), want.as_bytes(), "python r+");
    assert_corrected(&m.b("rplus.txt"), want.as_bytes(), "python r+");
    // w+: write, seek back, read through the same handle.
    let out = py(
        "import sys\nf = open(sys.argv[1], 'w+', encoding='utf-8')\nf.write(sys.argv[2])\nf.flush()\nf.seek(0)\nsys.stdout.buffer.write(f.read().encode())",
        "wplus.txt",
    );
    assert!(
        out == t.as_bytes(),
        "python w+ read back {:?}",
        String::from_utf8_lossy(&out)
    );
    assert_corrected(&m.b("wplus.txt"), t.as_bytes(), "python w+");
    // x: creates; a second x fails with FileExistsError and changes nothing.
    let x = "import sys\ntry:\n    open(sys.argv[1], 'x', encoding='utf-8').write(sys.argv[2])\n    print('created')\nexcept FileExistsError:\n    print('exists')";
    assert_eq!(py(x, "x.txt"), b"created\n");
    assert_eq!(py(x, "x.txt"), b"exists\n");
    assert_corrected(&m.b("x.txt"), t.as_bytes(), "python x");
    // wb: binary content is raw, text content corrected (content decides,
    // not the mode).
    let wb = "import sys\nopen(sys.argv[1], 'wb').write(bytes.fromhex(sys.argv[2]))";
    let bin = b"\x00\x01\x02text\xff";
    python(wb, &[os(&m.m("wb.bin")), OsStr::new(&hex(bin))]);
    assert_view(&m.m("wb.bin"), bin, "python wb binary");
    assert_raw(&m.b("wb.bin"), bin, "python wb binary");
    python(wb, &[os(&m.m("wb.txt")), OsStr::new(&hex(t.as_bytes()))]);
    assert_corrected(&m.b("wb.txt"), t.as_bytes(), "python wb text");
    // ab: appending UTF-8 bytes to a corrected file.
    python(
        "import sys\nopen(sys.argv[1], 'ab').write(bytes.fromhex(sys.argv[2]))",
        &[
            os(&m.m("ab.txt")),
            OsStr::new(&hex("bin-append 中\n".as_bytes())),
        ],
    );
    let want = format!("{TEXT}bin-append 中\n");
    assert_corrected(&m.b("ab.txt"), want.as_bytes(), "python ab");
    // r+b: overwrite six ASCII bytes with two U+0800 (same view length,
    // shorter on disk: the text after it shifts), append, truncate, and
    // read back through the same handle after every step.
    let off = TEXT.find("shifting").unwrap();
    let mut want = TEXT.as_bytes().to_vec();
    want.splice(off..off + 6, "\u{800}\u{800}".bytes());
    let after_write = want.clone();
    want.extend_from_slice("more 😀\n".as_bytes());
    let after_append = want.clone();
    want.truncate(off + 9);
    let out = python(
        "import sys, os\n\
         f = open(sys.argv[1], 'r+b', buffering=0)\n\
         off = int(sys.argv[2])\n\
         f.seek(off); f.write('\\u0800\\u0800'.encode())\n\
         f.seek(0); a = f.read()\n\
         f.seek(0, 2); f.write('more 😀\\n'.encode())\n\
         f.seek(0); b = f.read()\n\
         f.truncate(off + 9)\n\
         f.seek(0); c = f.read()\n\
         sys.stdout.write(a.hex() + ' ' + b.hex() + ' ' + c.hex())",
        &[os(&m.m("rplusb.txt")), OsStr::new(&off.to_string())],
    );
    let out = String::from_utf8(out).unwrap();
    let parts: Vec<&str> = out.split(' ').collect();
    assert_eq!(parts[0], hex(&after_write), "python r+b: read after write");
    assert_eq!(
        parts[1],
        hex(&after_append),
        "python r+b: read after append"
    );
    assert_eq!(parts[2], hex(&want), "python r+b: read after truncate");
    assert_view(&m.m("rplusb.txt"), &want, "python r+b");
    assert_corrected(&m.b("rplusb.txt"), &want, "python r+b");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ------------------------------------------------- corrected files in place

fn setxattr(path: &Path, name: &str, value: &[u8]) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and a buffer of the given length.
    let rc = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

fn getxattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a buffer of the given length.
    let rc = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (rc >= 0).then(|| {
        buf.truncate(rc as usize);
        buf
    })
}

/// Writes `data` at `off` of `path` in place (r+b, one pwrite); returns
/// "ok" or "errno N".
fn pwrite(path: &Path, off: usize, data: &[u8]) -> String {
    let out = python(
        "import os, sys\n\
         fd = os.open(sys.argv[1], os.O_RDWR)\n\
         try:\n    os.pwrite(fd, bytes.fromhex(sys.argv[2]), int(sys.argv[3])); print('ok')\n\
         except OSError as e:\n    print('errno', e.errno)\n\
         os.close(fd)",
        &[
            os(path),
            OsStr::new(&hex(data)),
            OsStr::new(&off.to_string()),
        ],
    );
    String::from_utf8(out).unwrap().trim().to_string()
}

#[test]
fn hard_links_inode_mode_owner_xattrs_survive_in_place_rewrites() {
    let m = Mount::new(&[], |b| {
        write(&b.join("a.txt"), &corrected_file(TEXT));
        fs::hard_link(b.join("a.txt"), b.join("b.txt")).unwrap();
        fs::set_permissions(b.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(b.join("a.txt"), Some(1234), Some(4321)).unwrap();
        setxattr(&b.join("a.txt"), "user.note", b"kept");
    });
    let ino_b = ino(&m.b("a.txt"));
    let ino_m = ino(&m.m("a.txt"));
    let check = |want: &[u8], corrected: bool, what: &str| {
        for name in ["a.txt", "b.txt"] {
            let what = format!("{what} ({name})");
            assert_view(&m.m(name), want, &what);
            if corrected {
                assert_corrected(&m.b(name), want, &what);
            } else {
                assert_raw(&m.b(name), want, &what);
            }
            let meta = fs::metadata(m.b(name)).unwrap();
            assert_eq!(ino(&m.b(name)), ino_b, "{what}: backing inode changed");
            assert_eq!(
                ino(&m.m(name)),
                ino_m,
                "{what}: inode number in the mount changed"
            );
            assert_eq!(meta.nlink(), 2, "{what}: hard link broken");
            assert_eq!(meta.mode() & 0o7777, 0o640, "{what}: mode");
            assert_eq!((meta.uid(), meta.gid()), (1234, 4321), "{what}: owner");
            assert_eq!(
                getxattr(&m.b(name), "user.note").as_deref(),
                Some(&b"kept"[..]),
                "{what}: xattr"
            );
        }
    };
    let mut want = TEXT.as_bytes().to_vec();
    // Same length on disk and in the view.
    assert_eq!(pwrite(&m.m("a.txt"), 0, b"ALPHA"), "ok");
    want[..5].copy_from_slice(b"ALPHA");
    check(&want, true, "in-place overwrite");
    // Shorter on disk: the text after it shifts (journaled rewrite).
    assert_eq!(pwrite(&m.m("b.txt"), 6, "\u{800}\u{800}".as_bytes()), "ok");
    want.splice(6..12, "\u{800}\u{800}".bytes());
    check(&want, true, "shifting overwrite");
    // Longer on disk than before (ࠀ → ASCII): shifts the other way.
    assert_eq!(pwrite(&m.m("a.txt"), 6, b"abcdef"), "ok");
    want.splice(6..12, *b"abcdef");
    check(&want, true, "shifting overwrite back");
    // Append and truncate.
    sh(r#"printf 'appended 𐀀\n' >> "$1""#, &[os(&m.m("b.txt"))]);
    want.extend_from_slice("appended 𐀀\n".as_bytes());
    check(&want, true, "append");
    run(Command::new("truncate")
        .args(["-s", "40"])
        .arg(m.m("a.txt")));
    want.truncate(40);
    check(&want, true, "truncate");
    // vim with backupcopy=yes writes in place.
    vim(
        &["-c", "set backupcopy=yes", "-c", "%s/a/ä/ge", "-c", "wq"],
        &m.m("a.txt"),
    );
    let want_vim: Vec<u8> = String::from_utf8(want.clone())
        .unwrap()
        .replace('a', "ä")
        .into_bytes();
    let want_vim = if want_vim.ends_with(b"\n") {
        want_vim
    } else {
        [&want_vim[..], b"\n"].concat()
    };
    check(&want_vim, true, "vim backupcopy=yes");
    // vim's backupcopy=auto sees the second name and writes in place too.
    vim(
        &["-c", "set backupcopy=auto", "-c", "%s/ä/ö/ge", "-c", "wq"],
        &m.m("a.txt"),
    );
    let want_vim: Vec<u8> = String::from_utf8(want_vim)
        .unwrap()
        .replace('ä', "ö")
        .into_bytes();
    check(&want_vim, true, "vim backupcopy=auto with a hard link");
    // A C1 control turns the file raw: still one inode, nothing lost.
    assert_eq!(pwrite(&m.m("a.txt"), 2, b"\xc2\x85"), "ok");
    let mut want_raw = want_vim.clone();
    want_raw.splice(2..4, *b"\xc2\x85");
    check(&want_raw, false, "C1 turns raw");
    // sed -i replaces the file by a rename: the tool itself breaks the
    // link, as on any filesystem (docs/behaviour.md promises the inode for in-place
    // writes only). a.txt gets sed's output, b.txt keeps the old content.
    run(Command::new("sed")
        .args(["-i", "s/ö/o/g"])
        .arg(m.m("a.txt")));
    assert_ne!(
        ino(&m.b("a.txt")),
        ino_b,
        "sed -i renames a new file over the old"
    );
    assert_raw(&m.b("b.txt"), &want_raw, "b.txt after sed -i on a.txt");
    let sed_out = String::from_utf8_lossy(&want_raw).replace('ö', "o");
    // sed's output holds the C1 control: it is raw.
    assert_view(&m.m("a.txt"), sed_out.as_bytes(), "sed -i result");
    assert_raw(&m.b("a.txt"), sed_out.as_bytes(), "sed -i result");
    assert!(
        crate::support::write::journal_entries(&m.backing).is_empty(),
        "journal left behind"
    );
}

#[test]
fn unstorable_content_turns_a_corrected_file_raw_with_a_warning() {
    let cases: [(&str, &[u8]); 4] = [
        ("c1.txt", b"\xc2\x85"),
        ("c1-9f.txt", b"\xc2\x9f"),
        ("overlong.txt", b"\xc0\xaf"),
        ("surrogate.txt", b"\xed\xa0\x80"),
    ];
    let m = Mount::new(&[], |b| {
        for (name, _) in cases {
            write(&b.join(name), &corrected_file(TEXT));
        }
    });
    let off = TEXT.find("ascii").unwrap();
    for (name, bytes) in cases {
        let what = format!("{name}: writing {bytes:02X?}");
        assert_eq!(pwrite(&m.m(name), off, bytes), "ok", "{what}");
        let mut want = TEXT.as_bytes().to_vec();
        want[off..off + bytes.len()].copy_from_slice(bytes);
        assert_view(&m.m(name), &want, &what);
        assert_raw(&m.b(name), &want, &what);
        // Raw now, with content: text written later keeps it raw.
        assert_eq!(pwrite(&m.m(name), 0, "ж".as_bytes()), "ok");
        want[..2].copy_from_slice("ж".as_bytes());
        assert_raw(&m.b(name), &want, &format!("{what}, then text"));
    }
    assert!(
        m.log_text().to_lowercase().contains("warn"),
        "no warning in the log for files turned raw:\n{}",
        m.log_text()
    );
}

#[test]
fn magic_at_the_start_of_a_raw_file_is_eilseq_and_changes_nothing() {
    let m = Mount::new(&[], |b| {
        write(&b.join("raw.txt"), b"12345678 rest\n");
        write(&b.join("half.bin"), &MAGIC[..4]);
        write(&b.join("corrected.txt"), &corrected_file(TEXT));
        write(&b.join("empty"), b"");
    });
    // pwrite of the magic at 0 of a raw file.
    assert_eq!(pwrite(&m.m("raw.txt"), 0, &MAGIC), "errno 84");
    assert_raw(&m.b("raw.txt"), b"12345678 rest\n", "raw after EILSEQ");
    assert_view(&m.m("raw.txt"), b"12345678 rest\n", "raw after EILSEQ");
    // Completing a half magic by appending.
    let out = python(
        "import os, sys\n\
         fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n\
         try:\n    os.write(fd, bytes.fromhex(sys.argv[2])); print('ok')\n\
         except OSError as e:\n    print('errno', e.errno)",
        &[os(&m.m("half.bin")), OsStr::new(&hex(&MAGIC[4..]))],
    );
    assert_eq!(
        String::from_utf8(out).unwrap().trim(),
        "errno 84",
        "append completing the magic"
    );
    assert_raw(&m.b("half.bin"), &MAGIC[..4], "half magic after EILSEQ");
    // An empty file (and a new one) whose first write is the magic.
    assert_eq!(
        pwrite(&m.m("empty"), 0, &[&MAGIC[..], b"abc"].concat()),
        "errno 84"
    );
    assert_raw(&m.b("empty"), b"", "empty after EILSEQ");
    let out = python(
        "import os, sys\n\
         try:\n    f = open(sys.argv[1], 'wb', buffering=0); f.write(bytes.fromhex(sys.argv[2])); print('ok')\n\
         except OSError as e:\n    print('errno', e.errno)",
        &[os(&m.m("new.bin")), OsStr::new(&hex(&MAGIC))],
    );
    assert_eq!(
        String::from_utf8(out).unwrap().trim(),
        "errno 84",
        "new file starting with the magic"
    );
    assert_raw(&m.b("new.bin"), b"", "new file after EILSEQ");
    // The magic's bytes hold an encoded surrogate (ED B2 AE): a corrected
    // file receiving them at 0 would turn raw and begin with the magic.
    assert_eq!(pwrite(&m.m("corrected.txt"), 0, &MAGIC), "errno 84");
    assert_corrected(
        &m.b("corrected.txt"),
        TEXT.as_bytes(),
        "corrected after EILSEQ",
    );
    // Anywhere but the start, the magic's bytes are ordinary raw content.
    assert_eq!(pwrite(&m.m("raw.txt"), 8, &MAGIC), "ok");
    let want = [&b"12345678"[..], &MAGIC[..]].concat();
    assert_raw(&m.b("raw.txt"), &want, "magic at offset 8");
}

#[test]
fn newfiles_raw_keeps_new_and_emptied_files_raw() {
    let outside = tempfile::tempdir().unwrap();
    write(&outside.path().join("in.txt"), TEXT.as_bytes());
    let m = Mount::new(&["newfiles=raw"], |b| {
        write(&b.join("corrected.txt"), &corrected_file(TEXT));
        write(&b.join("emptied.txt"), &corrected_file(TEXT));
    });
    sh_in(r#"cat > "$1""#, &[os(&m.m("new.txt"))], TEXT.as_bytes());
    assert_view(&m.m("new.txt"), TEXT.as_bytes(), "newfiles=raw: >");
    assert_raw(&m.b("new.txt"), TEXT.as_bytes(), "newfiles=raw: >");
    run(Command::new("cp")
        .arg(outside.path().join("in.txt"))
        .arg(m.m("cp.txt")));
    assert_raw(&m.b("cp.txt"), TEXT.as_bytes(), "newfiles=raw: cp");
    run(Command::new("sed")
        .args(["-i", "s/a/ä/g"])
        .arg(m.m("cp.txt")));
    assert_raw(
        &m.b("cp.txt"),
        TEXT.replace('a', "ä").as_bytes(),
        "newfiles=raw: sed -i",
    );
    // A corrected file with content stays corrected.
    sh(r#"printf 'more ࠀ\n' >> "$1""#, &[os(&m.m("corrected.txt"))]);
    let want = format!("{TEXT}more ࠀ\n");
    assert_corrected(
        &m.b("corrected.txt"),
        want.as_bytes(),
        "newfiles=raw: >> corrected",
    );
    // Emptied by O_TRUNC: raw from then on.
    sh(r#"printf 'over ࠀ\n' > "$1""#, &[os(&m.m("emptied.txt"))]);
    assert_view(
        &m.m("emptied.txt"),
        "over ࠀ\n".as_bytes(),
        "newfiles=raw: > corrected",
    );
    assert_raw(
        &m.b("emptied.txt"),
        "over ࠀ\n".as_bytes(),
        "newfiles=raw: > corrected",
    );
}

#[test]
fn empty_files_take_the_encoding_of_their_first_write() {
    let m = Mount::new(&[], |b| {
        write(&b.join("c.txt"), &corrected_file(TEXT));
        write(&b.join("d.txt"), &corrected_file(TEXT));
    });
    run(Command::new("touch").arg(m.m("new")));
    assert_raw(&m.b("new"), b"", "touch");
    assert_view(&m.m("new"), b"", "touch");
    // truncate -s 0, then text: corrected again.
    run(Command::new("truncate").args(["-s", "0"]).arg(m.m("c.txt")));
    assert_view(&m.m("c.txt"), b"", "truncate -s 0");
    assert_empty(&m.b("c.txt"), "truncate -s 0");
    sh(r#"printf '中\n' >> "$1""#, &[os(&m.m("c.txt"))]);
    assert_corrected(&m.b("c.txt"), "中\n".as_bytes(), "text after truncate -s 0");
    // truncate -s 0, then binary: raw.
    run(Command::new("truncate").args(["-s", "0"]).arg(m.m("d.txt")));
    sh(r#"printf '\001\000' >> "$1""#, &[os(&m.m("d.txt"))]);
    assert_raw(&m.b("d.txt"), b"\x01\x00", "binary after truncate -s 0");
    // touch, then text appended: corrected.
    sh(r#"printf 'é\n' >> "$1""#, &[os(&m.m("new"))]);
    assert_corrected(&m.b("new"), "é\n".as_bytes(), "text into a touched file");
}

/// docs/format.md's one exception to lossless reading: a corrected file holding FE plus six
/// continuation bytes whose value reads as an extended form cannot be
/// written back unchanged, so it is shown (byte for byte, as V says) but
/// opens for writing with EROFS, and is never damaged.
#[test]
fn a_file_w_cannot_give_back_is_read_only() {
    let unit = [0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80]; // "U+80000000" as a reserved unit
    let mut disk = MAGIC.to_vec();
    disk.extend_from_slice(b"ab");
    disk.extend_from_slice(&unit);
    disk.extend_from_slice(b"\n");
    let m = Mount::new(&[], |b| fs::write(b.join("exempt.txt"), &disk).unwrap());
    let view = fs::read(m.m("exempt.txt")).unwrap();
    let mut expect = b"ab".to_vec();
    expect.extend_from_slice(&unit);
    expect.push(b'\n');
    assert_eq!(view, expect, "V passes the reserved unit through");
    for how in ["write", "append", "truncate"] {
        let mut o = fs::OpenOptions::new();
        match how {
            "write" => o.write(true),
            "append" => o.append(true),
            _ => o.write(true).truncate(true),
        };
        let e = o.open(m.m("exempt.txt")).expect_err(how);
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{how}: {e}");
    }
    assert_eq!(
        fs::read(m.b("exempt.txt")).unwrap(),
        disk,
        "backing file changed"
    );
    // The same file without the exempt value is writable.
    let mut fine = disk.clone();
    fine[11] = 0x81; // value below U+80000000: an ordinary reserved unit
    fs::write(m.b("fine.txt"), &fine).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(m.m("fine.txt"))
        .expect("an ordinary reserved unit does not block writing");
}

/// A corrected file that is the magic number alone holds no content, as
/// an empty file: what is written into it first chooses its encoding
/// (text stays corrected, bytes with a NUL make it raw), written over the
/// magic number, not after it.
#[test]
fn the_magic_number_alone_takes_the_encoding_of_the_first_write() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("bin"), MAGIC).unwrap();
        fs::write(b.join("text"), MAGIC).unwrap();
        fs::write(b.join("over"), MAGIC).unwrap();
    });
    for name in ["bin", "text", "over"] {
        assert_eq!(fs::metadata(m.m(name)).unwrap().len(), 0, "{name}: size");
    }
    let append = |name: &str, bytes: &[u8]| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(m.m(name)).unwrap();
        f.write_all(bytes).unwrap();
    };
    append("bin", b"ab\0\x01");
    append("text", "h\u{e9}llo\n".as_bytes());
    write(&m.m("over"), b"x\0y");
    assert_eq!(fs::read(m.b("bin")).unwrap(), b"ab\0\x01", "raw now");
    assert_eq!(
        fs::read(m.b("text")).unwrap(),
        corrected_file("h\u{e9}llo\n")
    );
    assert_eq!(fs::read(m.b("over")).unwrap(), b"x\0y", "raw now");
    assert_eq!(fs::read(m.m("bin")).unwrap(), b"ab\0\x01");
    assert_eq!(fs::read(m.m("text")).unwrap(), "h\u{e9}llo\n".as_bytes());
}
