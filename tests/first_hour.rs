//! The first hour of a new user (issue 13): each finding as the newcomer
//! met it, run against the built binaries. decode's honest defaults, an
//! encode that writes nothing when its input is missing, migrate's
//! messages and exit statuses, `check` on directories.
//!
//! Mount findings (VCS files kept raw, `#!` scripts, stale and doubled
//! mounts, options) live in tests/first_hour_mount.rs.

use crate::support::cli::{cutf8, Dir};

const MAGIC: [u8; 8] = [0xEF, 0xB7, 0x9D, 0xED, 0xB2, 0xAE, 0x00, 0x0A];

fn with_magic(b: &[u8]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(b);
    v
}

/// Chunk sizes: 1, 3 and 7 bytes put the magic number across every edge.
const CHUNKS: [&str; 4] = ["1", "3", "7", "65536"];

// ---- finding 2: decode's defaults ----

#[test]
fn decode_refuses_plain_utf8_instead_of_garbling_it() {
    // What a git clean filter built on decode saw: "café" as plain UTF-8.
    for chunk in CHUNKS {
        let r = cutf8(&["decode", "--buffer-size", chunk], "café\n".as_bytes());
        r.exits(1)
            .stderr_has("<stdin>:1:1: input does not begin with the Corrected UTF-8 magic number")
            .stderr_has("--no-magic")
            .stdout_is(b"", "nothing decoded");
        // --lossless is no excuse either.
        cutf8(&["decode", "--lossless"], "café\n".as_bytes()).exits(1);
    }
    // Told that it is Corrected UTF-8 without the magic number, decode does.
    cutf8(&["decode", "--no-magic"], &[b'a', 0xC1, 0x89, b'\n'])
        .ok()
        .stdout_is("aé\n".as_bytes(), "decoded");
    // --no-magic still drops a magic number that is there.
    cutf8(&["decode", "--no-magic"], &with_magic(b"x\n"))
        .ok()
        .stdout_is(b"x\n", "magic dropped");
    // An empty input has nothing to garble.
    cutf8(&["decode"], b"").ok().stdout_is(b"", "empty");
    // One bad input among good ones: the good ones decode, exit 1.
    let d = Dir::new();
    d.write("good.cu8", &with_magic(b"good\n"));
    d.write("plain.txt", b"plain\n");
    d.run(&["decode", "plain.txt", "good.cu8"], b"")
        .exits(1)
        .stderr_has("plain.txt:1:1: input does not begin")
        .stdout_is(b"good\n", "the good one");
}

#[test]
fn a_second_magic_number_is_an_error_in_strict_mode() {
    // cat a.cu8 b.cu8 | cutf8 decode
    let a = with_magic("línea\nzwei ".as_bytes());
    let mut cat = a.clone();
    cat.extend_from_slice(&with_magic(b"b\n"));
    let want_prefix = cutf8(&["decode"], &a).ok().stdout;
    for chunk in CHUNKS {
        let r = cutf8(&["decode", "--buffer-size", chunk], &cat);
        // "línea\n" is line 1; "zwei " puts the magic at line 2, column 6.
        r.exits(1)
            .stderr_has(&format!(
                "<stdin>:2:6: a second Corrected UTF-8 magic number (byte offset {})",
                a.len()
            ))
            .stderr_has("decode each file on its own")
            .stdout_is(&want_prefix, "the first file's text, no NUL, nothing after");
        // --lossless reads it as text, as the mount does.
        let r = cutf8(&["decode", "--lossless", "--buffer-size", chunk], &cat).ok();
        assert!(
            r.stdout.contains(&0),
            "lossless carries the magic's NUL through"
        );
    }
}

#[test]
fn the_magic_number_is_found_at_every_position_and_chunk_edge() {
    for before in 0..12usize {
        let mut input = with_magic(&b"abcdefghijkl"[..before]);
        input.extend_from_slice(&MAGIC);
        input.extend_from_slice(b"tail\n");
        for chunk in ["1", "2", "3", "5", "7", "8", "9"] {
            cutf8(&["decode", "--buffer-size", chunk], &input)
                .exits(1)
                .stderr_has(&format!(
                    "<stdin>:1:{}: a second Corrected UTF-8 magic number (byte offset {})",
                    before + 1,
                    8 + before
                ))
                .stdout_is(&b"abcdefghijkl"[..before], "text before it");
        }
    }
}

#[test]
fn text_that_merely_begins_like_the_magic_number_decodes() {
    // The magic number's proper prefixes that end on a unit boundary are
    // text (EF B7 9D, ED B2 AE, 00); held back at a chunk edge, they must
    // still come out when what follows is not the rest of the magic.
    for k in [3, 6, 7] {
        for after in [
            &b""[..],
            b"x",
            b"\xEF\xB7\x9D",
            b"\xEF\xB7\x9D\xED\xB2\xAE\x00x",
        ] {
            let mut body = b"a".to_vec();
            body.extend_from_slice(&MAGIC[..k]);
            body.extend_from_slice(after);
            let want = cutf8(&["decode", "--lossless"], &with_magic(&body))
                .ok()
                .stdout;
            for chunk in ["1", "2", "3", "4", "7", "65536"] {
                cutf8(&["decode", "--buffer-size", chunk], &with_magic(&body))
                    .ok()
                    .stdout_is(&want, &format!("{body:02X?} chunk {chunk}"));
            }
        }
    }
}

#[test]
fn decode_exit_status_2_for_an_unreadable_input() {
    cutf8(&["decode", "nosuch.cu8"], b"")
        .exits(2)
        .stderr_is("cutf8: nosuch.cu8: No such file or directory\n");
}

// ---- finding 9: encode of a missing input ----

#[test]
fn encode_of_a_missing_input_writes_nothing() {
    cutf8(&["encode", "nosuch.txt"], b"")
        .exits(2)
        .stderr_is("cutf8: nosuch.txt: No such file or directory\n")
        .stdout_is(b"", "no magic number alone");
    // The magic number comes with the first input that opens.
    let d = Dir::new();
    d.write("a.txt", b"a\n");
    d.run(&["encode", "nosuch.txt", "a.txt"], b"")
        .exits(2)
        .stdout_is(&with_magic(b"a\n"), "magic once, then a");
    d.run(&["encode", "nosuch.txt", "-o", "out.cu8"], b"")
        .exits(2);
    assert_eq!(d.names(), ["a.txt"], "no output file");
    // Empty stdin is an empty text: an empty output, no magic number (as
    // iconv writes for it; tests/cli.rs, an_empty_text_is_an_empty_file).
    cutf8(&["encode"], b"").ok().stdout_is(b"", "nothing");
}

// ---- finding 9 and 8: migrate's words and exit statuses ----

#[test]
fn migrate_counts_in_words_and_one_unit() {
    let d = Dir::new();
    d.write("one.txt", b"one\n");
    let r = d.run(&["migrate", "--no-progress", "."], b"").ok();
    assert_eq!(d.read("one.txt"), with_magic(b"one\n"));
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(out.contains("converted: 1 file\n"), "{out}");
    assert!(out.contains("failed:    0 files\n"), "{out}");
    assert!(out.contains("size:      4 B before, 12 B after\n"), "{out}");
    assert!(
        !out.contains(" files\n") || out.contains("0 files"),
        "{out}"
    );
    let r = d.run(&["migrate", "--dry-run", "."], b"").ok();
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(out.contains("dry run: 0 files would be converted"), "{out}");
    assert!(out.contains("skipped:   1 path\n"), "{out}");
    assert!(
        !out.contains("1 paths") && !out.contains("1 files"),
        "{out}"
    );
}

/// migrate's exit 1: a file that cannot be replaced (immutable, so not even
/// root may) fails, is named, and is left as it was; the others convert.
#[test]
fn migrate_exits_1_when_a_file_fails_and_leaves_it_unchanged() {
    let d = Dir::new();
    d.write("ok.txt", b"fine\n");
    d.write("locked.txt", "caf\u{e9}\n".as_bytes());
    let chattr = |flag: &str| {
        let st = std::process::Command::new("chattr")
            .arg(flag)
            .arg(d.path().join("locked.txt"))
            .status()
            .expect("chattr (e2fsprogs)");
        assert!(st.success(), "chattr {flag}: needs root on ext4-like /tmp");
    };
    chattr("+i");
    let r = d.run(&["migrate", "--no-progress", "."], b"");
    chattr("-i");
    let r = r.exits(1).stderr_has("locked.txt");
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(out.contains("failed:    1 file\n"), "{out}");
    assert_eq!(d.read("locked.txt"), "caf\u{e9}\n".as_bytes(), "unchanged");
    assert_eq!(d.read("ok.txt"), with_magic(b"fine\n"));
}

/// Every exit status `cutf8 --help` documents, produced by the command it
/// names.
#[test]
fn each_documented_exit_status_happens() {
    let help = String::from_utf8(cutf8(&["--help"], b"").ok().stdout).unwrap();
    let d = Dir::new();
    d.write("good.txt", b"good\n");
    d.write("bad.txt", b"\xC0\xAF\n");
    d.write("good.cu8", &with_magic(b"good\n"));
    d.write("tab.cu8", &with_magic(b"a\tb\n"));
    let cases: &[(&str, &[&str], i32)] = &[
        ("0", &["encode", "good.txt"], 0),
        ("0", &["decode", "good.cu8"], 0),
        ("0", &["check", "good.cu8"], 0),
        ("1", &["encode", "bad.txt"], 1),
        ("1", &["decode", "good.txt"], 1),
        ("1", &["check", "--error", "tab", "tab.cu8"], 1),
        ("2", &["encode", "--bogus"], 2),
        ("2", &["encode", "nosuch.txt"], 2),
        ("2", &["decode", "nosuch.cu8"], 2),
        ("2", &["check", "nosuch.cu8"], 2),
        ("2", &["migrate", "nosuch"], 2),
        ("2", &["decode", "good.cu8", "-o", "no/such/dir/out"], 2),
        // Last: it converts good.txt.
        ("0", &["migrate", "--no-progress", "good.txt"], 0),
    ];
    for (code, args, want) in cases {
        assert!(
            help.contains(&format!("  {code}  ")),
            "--help documents {code}:\n{help}"
        );
        d.run(args, b"").exits(*want);
    }
}

// ---- finding 7: check on directories, binaries, JSON ----

#[test]
fn check_walks_directories_skips_vcs_and_binaries() {
    let d = Dir::new();
    let p = d.path();
    for sub in ["docs/deep", ".git/objects", ".hg", ".svn"] {
        std::fs::create_dir_all(p.join(sub)).unwrap();
    }
    d.write("docs/a.cu8", &with_magic(b"tab\there\n"));
    d.write("docs/deep/b.cu8", &with_magic(b"fine\n"));
    d.write("docs/image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    d.write(".git/HEAD", &with_magic(b"\t\t\t\n"));
    d.write(".git/objects/x", b"\t\n");
    d.write(".hg/x", b"\t\n");
    d.write(".svn/x", b"\t\n");
    std::os::unix::fs::symlink("docs/a.cu8", p.join("link")).unwrap();
    let r = d.run(&["check", "."], b"").exits(0);
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(
        out,
        "./docs/a.cu8:1:4: warning: tab (U+0009) [tab]\n\
         ./docs/image.png: note: binary (a NUL byte in the first 8000 bytes and no magic number): not checked\n",
        "one finding, one note; nothing from .git, .hg, .svn or the symlink"
    );
    assert!(
        r.stderr
            .contains("checked 2 files: 0 errors, 1 warning, 1 file skipped as binary"),
        "{}",
        r.stderr
    );
    // A corrected file holding NULs is not binary: it is checked.
    d.write("nul.cu8", &with_magic(b"a\0b\n"));
    d.run(&["check", "nul.cu8"], b"").exits(1).stdout_is(
        b"nul.cu8:1:2: error: U+0000 (NUL) outside the magic number [nul]\n",
        "nul",
    );
}

#[test]
fn check_emits_json_lines() {
    let d = Dir::new();
    d.write("a.cu8", &with_magic(b"x\r\n\"q\"\t"));
    d.write("bin", b"\0\x01");
    let r = d.run(&["check", "--format", "json", "a.cu8", "bin"], b"");
    let r = r.exits(0);
    let lines: Vec<serde_json::Value> = String::from_utf8(r.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let rules: Vec<&str> = lines
        .iter()
        .map(|v| v["rule"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        rules,
        ["carriage-return", "tab", "no-final-newline", "-"],
        "{lines:?}"
    );
    assert_eq!(lines[0]["file"], "a.cu8");
    assert_eq!(lines[0]["line"], 1);
    assert_eq!(lines[0]["column"], 2);
    assert_eq!(lines[0]["level"], "warning");
    assert_eq!(lines[3]["level"], "note");
    assert_eq!(lines[3]["file"], "bin");
    d.run(&["check", "--format", "yaml", "a.cu8"], b"")
        .exits(2)
        .stderr_has("json");
}

// ---- finding 3: migrate leaves VCS metadata alone ----

#[test]
fn migrate_leaves_a_git_repository_working() {
    let d = Dir::new();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=N", "-c", "user.email=n@example.org"])
            .args(args)
            .current_dir(d.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", d.path())
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q", "-b", "main"]);
    d.write("a.txt", "café\n".as_bytes());
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "one"]);
    std::fs::create_dir_all(d.path().join(".hg")).unwrap();
    d.write(".hg/requires", b"store\n");
    // One warning: converting a tracked file changes it for git outside a
    // mount (tests/migrate_feedback.rs).
    let r = d
        .run(&["migrate", "--no-progress", "."], b"")
        .exits(0)
        .stderr_has("git work tree");
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("converted: 1 file\n"),
        "only a.txt: {}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert_eq!(d.read(".git/HEAD"), b"ref: refs/heads/main\n");
    assert_eq!(d.read(".hg/requires"), b"store\n");
    assert_eq!(git(&["log", "--format=%s"]), "one\n");
    // --include-vcs goes in (and breaks the repository, as documented).
    d.run(&["migrate", "--no-progress", "--include-vcs", "."], b"")
        .exits(0);
    assert!(d.read(".git/HEAD").starts_with(&MAGIC));
}

// ---- finding 6: options as users expect ----

#[test]
fn every_mount_option_is_in_help_and_in_the_man_page() {
    let out = std::process::Command::new(crate::support::mount::BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/cutf8fs.1"))
        .unwrap()
        .replace("\\-", "-");
    for (form, default, ..) in cutf8fs::fs::options::OPTIONS {
        let key = form.split('=').next().unwrap();
        assert!(help.contains(form), "--help lists {form}:\n{help}");
        if !default.is_empty() {
            assert!(
                help.contains(&format!("[{default}]")),
                "--help gives {form}'s default"
            );
        }
        let documented = man.lines().any(|l| {
            (l.starts_with(".B") || l.starts_with(".TP"))
                && l.split([' ', '=', '"']).any(|w| w == key)
        });
        assert!(documented, "man/cutf8fs.1 documents {key}");
    }
    for (opt, want) in [
        ("newfiles=utf8", "allowed: auto, raw"),
        ("threads=0", "from 1 to 256"),
        ("nwefiles=raw", "did you mean 'newfiles'"),
    ] {
        let out = std::process::Command::new(crate::support::mount::BIN)
            .args(["-o", opt, "/nonexistent-b", "/nonexistent-m"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt}: {err}");
        assert!(err.contains(want), "{opt}: {err}");
    }
}

// ---- finding 1 and 8: docs that ship ----

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_relative_link_in_readme_and_docs_resolves_inside_the_repository() {
    let mut pages = vec![std::path::PathBuf::from(ROOT).join("README.md")];
    for e in std::fs::read_dir(format!("{ROOT}/docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let root = std::fs::canonicalize(ROOT).unwrap();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap().split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = page.parent().unwrap().join(target);
            let real = std::fs::canonicalize(&resolved)
                .unwrap_or_else(|_| panic!("{}: link {target} does not resolve", page.display()));
            assert!(
                real.starts_with(&root),
                "{}: {target} leaves the repository",
                page.display()
            );
        }
        assert!(
            !text.contains("SPEC.md"),
            "{} cites SPEC.md, which does not ship",
            page.display()
        );
    }
    for man in ["man/cutf8.1", "man/cutf8fs.1"] {
        let text = std::fs::read_to_string(format!("{ROOT}/{man}")).unwrap();
        assert!(
            !text.contains("SPEC"),
            "{man} cites SPEC, which does not ship"
        );
    }
}

#[test]
fn man_pages_render_without_warnings() {
    for page in ["man/cutf8.1", "man/cutf8fs.1"] {
        let out = std::process::Command::new("man")
            .args(["-l", "--warnings"])
            .arg(format!("{ROOT}/{page}"))
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "")
            .output()
            .expect("man(1) is installed");
        assert!(out.status.success(), "{page}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.is_empty(), "{page} renders with warnings:\n{err}");
        assert!(out.stdout.len() > 2000, "{page} renders to text");
    }
}

#[test]
fn the_install_command_puts_man_pages_where_man_finds_them() {
    let prefix = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(crate::support::cli::BIN)
        .parent()
        .unwrap();
    let out = std::process::Command::new(format!("{ROOT}/scripts/install.sh"))
        .arg(prefix.path())
        .env("CUTF8_BIN_DIR", bin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for page in ["cutf8fs", "cutf8"] {
        let out = std::process::Command::new("man")
            .arg("-M")
            .arg(prefix.path().join("share/man"))
            .arg(page)
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap();
        assert!(out.status.success(), "man {page}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("SYNOPSIS"),
            "man {page}"
        );
    }
    let installed = prefix.path().join("bin/cutf8");
    let out = std::process::Command::new(installed)
        .arg("-V")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(prefix.path().join("share/doc/cutf8fs/format.md").is_file());
    // The bash completions load and complete.
    for b in ["cutf8", "cutf8fs"] {
        let script = prefix
            .path()
            .join("share/bash-completion/completions")
            .join(b);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && complete -p {b}", script.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{b}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(b), "{out:?}");
    }
}

#[test]
fn cutf8_man_page_is_a_real_page() {
    let page = std::fs::read_to_string(format!("{ROOT}/man/cutf8.1")).unwrap();
    assert!(!page.contains("CUTF8 HELP"), "no empty help section");
    assert!(
        page.contains("\\fBcutf8 decode [OPTIONS] [FILE]...\\fR"),
        "synopsis with ..."
    );
    assert!(page.contains("OUT"), "-o names its value");
    assert!(
        page.contains("How migrate works"),
        "migrate section from docs/migrate.man.txt"
    );
    assert!(
        page.contains("include\\-vcs"),
        "migrate documents --include-vcs"
    );
}

// ---- finding 9: Ctrl-C during migrate ----

#[test]
fn ctrl_c_during_migrate_says_how_to_resume_and_a_rerun_finishes() {
    use std::io::BufRead;
    // A run that finishes before SIGINT arrives checks nothing: try again
    // on a larger tree, and fail if even the largest is too quick.
    for n in [4000, 16_000, 64_000] {
        let d = Dir::new();
        for k in 0..n {
            d.write(&format!("f{k:05}.txt"), format!("file {k} é\n").as_bytes());
        }
        let mut child = std::process::Command::new(crate::support::cli::BIN)
            .args(["migrate", "--verbose", "--jobs", "1", "."])
            .current_dir(d.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once a file is reported converted, the run is under way.
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(0) {
            eprintln!("migrate of {n} files finished before SIGINT arrived; a larger tree");
            continue;
        }
        assert_eq!(out.status.code(), Some(130), "{err}");
        assert!(
            err.contains("interrupted") && err.contains("run the same command again"),
            "{err}"
        );
        d.run(&["migrate", "--no-progress", "-q", "."], b"").ok();
        for k in (0..n).step_by(397) {
            let name = format!("f{k:05}.txt");
            assert!(d.read(&name).starts_with(&MAGIC), "{name} converted");
            d.run(&["decode", &name], b"")
                .ok()
                .stdout_is(format!("file {k} é\n").as_bytes(), &name);
        }
        assert!(
            d.names().iter().all(|n| n.ends_with(".txt")),
            "no leftovers"
        );
        return;
    }
    panic!("every migrate finished before SIGINT arrived: the interruption was never tested");
}

// ---- finding 9: colour only on a terminal ----

#[test]
fn diagnostics_are_coloured_on_a_terminal_only() {
    let d = Dir::new();
    d.write("t.cu8", &with_magic(b"a\tb\n"));
    d.write("bad.txt", b"\xC0\xAF\n");
    // Through a pipe: plain.
    let r = d.run(&["check", "t.cu8"], b"").exits(0);
    assert!(!r.stdout.contains(&0x1b) && !r.stderr.contains('\x1b'));
    let r = d.run(&["encode", "bad.txt"], b"").exits(1);
    assert!(!r.stderr.contains('\x1b'));
    // On a terminal (script(1) gives it one): coloured, unless NO_COLOR.
    let bin = crate::support::cli::BIN;
    for (no_color, want) in [("", true), ("1", false)] {
        let out = std::process::Command::new("script")
            .args([
                "-qec",
                &format!("{bin} check t.cu8; {bin} encode bad.txt"),
                "/dev/null",
            ])
            .current_dir(d.path())
            .env("NO_COLOR", no_color)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tab (U+0009)"), "{text}");
        assert_eq!(
            text.contains("\x1b[1;33mwarning:\x1b[0m") && text.contains("\x1b[1;31mcutf8:"),
            want,
            "NO_COLOR={no_color:?}: {text:?}"
        );
    }
}
