//! `cutf8 check` on a real archive: errors are always printed, each one;
//! a warning repeated in a file is shown once, with a count, and summed
//! per rule at the end; rules are turned off and on as compilers' warnings
//! are (`-A`/`--allow`, `-W`/`--warn`, `-D`/`--deny`); an empty file draws
//! no warning; a path on a cutf8fs mount is reported as such.

use std::fs;

use crate::support::cli::{with_magic, Dir};
use crate::support::mount::{corrected, Mount};

fn tabs(lines: usize) -> Vec<u8> {
    corrected(&"a\tb\n".repeat(lines).into_bytes())
}

#[test]
fn a_thousand_tab_lines_print_a_handful_of_lines() {
    let d = Dir::new();
    d.write("tabs.cu8", &tabs(1000));
    let r = d.run(&["check", "tabs.cu8"], b"").exits(0);
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.len() <= 3,
        "{} lines printed for one repeated warning:\n{out}",
        lines.len()
    );
    assert!(
        out.contains("tabs.cu8:1:2: warning: tab (U+0009) [tab]"),
        "the first occurrence is not shown:\n{out}"
    );
    assert!(out.contains("999"), "no count of the rest:\n{out}");
    assert!(
        r.stderr.contains("tab: 1000"),
        "no per-rule summary:\n{}",
        r.stderr
    );
}

#[test]
fn errors_are_always_printed_among_grouped_warnings() {
    let d = Dir::new();
    let mut disk = "a\tb\n".repeat(500).into_bytes();
    for at in [100, 1000, 1900] {
        disk.insert(at, 0x80);
    }
    d.write("mixed.cu8", &corrected(&disk));
    let r = d.run(&["check", "mixed.cu8"], b"").exits(1);
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    assert_eq!(
        out.matches(": error: ").count(),
        3,
        "every error is printed:\n{out}"
    );
    assert_eq!(out.matches(": warning: ").count(), 1, "{out}");
    assert!(out.lines().count() <= 6, "{out}");
    assert!(r.stderr.contains("stray-byte: 3"), "{}", r.stderr);
}

#[test]
fn rules_turn_off_and_on_like_compiler_warnings() {
    let d = Dir::new();
    d.write("tabs.cu8", &tabs(10));
    let r = d.run(&["check", "-A", "tab", "tabs.cu8"], b"").exits(0);
    assert!(
        r.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&r.stdout)
    );
    let r = d
        .run(&["check", "--allow", "tab", "tabs.cu8"], b"")
        .exits(0);
    assert!(r.stdout.is_empty());
    let r = d.run(&["check", "-D", "tab", "tabs.cu8"], b"").exits(1);
    assert!(String::from_utf8_lossy(&r.stdout).contains(": error: tab"));
    let r = d.run(&["check", "--deny", "tab", "tabs.cu8"], b"").exits(1);
    assert!(String::from_utf8_lossy(&r.stdout).contains(": error: tab"));
    // As documented: --warn wins over --allow, whatever the order.
    for args in [["-A", "tab", "-W", "tab"], ["-W", "tab", "-A", "tab"]] {
        let mut all = vec!["check"];
        all.extend(args);
        all.push("tabs.cu8");
        let r = d.run(&all, b"").exits(0);
        assert!(String::from_utf8_lossy(&r.stdout).contains(": warning: tab"));
    }
}

#[test]
fn an_empty_file_draws_no_warning() {
    let d = Dir::new();
    d.write("empty", b"");
    let r = d.run(&["check", "empty"], b"").exits(0);
    assert!(
        r.stdout.is_empty(),
        "an empty file was warned about:\n{}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert!(r.stderr.contains("0 warnings"), "{}", r.stderr);
}

#[test]
fn a_path_on_a_mount_is_reported_as_such() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("c.txt"), corrected("fine\n".as_bytes())).unwrap();
    });
    let d = Dir::new();
    let r = d
        .run(&["check", m.m("c.txt").to_str().unwrap()], b"")
        .exits(2);
    assert!(
        !String::from_utf8_lossy(&r.stdout).contains("missing-magic"),
        "{}",
        String::from_utf8_lossy(&r.stdout)
    );
    assert!(r.stderr.contains("cutf8fs mount"), "{}", r.stderr);
    assert!(
        r.stderr.contains(&m.b("c.txt").display().to_string()),
        "the file in BACKING is not named:\n{}",
        r.stderr
    );
}

// ---- directories, binaries, JSON ----

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
