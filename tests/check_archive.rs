//! `cutf8 check` on a real archive: errors are always printed, each one;
//! a warning repeated in a file is shown once, with a count, and summed
//! per rule at the end; rules are turned off and on as compilers' warnings
//! are (`-A`/`--allow`, `-W`/`--warn`, `-D`/`--deny`); an empty file draws
//! no warning; a path on a cutf8fs mount is reported as such.

use std::fs;

use crate::support::cli::Dir;
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
