//! What `cutf8 migrate` tells its user beyond converting: a warning, once,
//! when it converts files of a git work tree (git outside the mount then
//! sees them all modified); a summary that names the files it could not
//! convert, or says how to list them; a progress bar that does not start
//! full.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::cli::BIN;

fn migrate(args: &[&str], paths: &[&Path]) -> Output {
    let out = Command::new(BIN)
        .arg("migrate")
        .args(args)
        .args(paths)
        .output()
        .expect("run cutf8");
    assert!(
        out.status.code() == Some(0),
        "cutf8 migrate {args:?}: {out:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args(args)
        .output()
        .expect("git is installed (scripts/setup.sh)");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

/// A git work tree with committed text files.
fn repo(at: &Path) {
    fs::create_dir_all(at.join("src")).unwrap();
    fs::write(at.join("README"), "Grüße\n").unwrap();
    fs::write(at.join("src/a.txt"), "déjà\n").unwrap();
    git(at, &["init", "-q"]);
    git(at, &["add", "."]);
    git(at, &["commit", "-q", "-m", "first"]);
}

/// Converting a tree holding two git work trees warns once, on stderr,
/// naming a work tree, what git outside the mount will see, and both ways
/// forward; git status outside indeed shows the files modified. A tree
/// with no git work tree, and a run that converts back, get no warning.
#[test]
fn migrate_warns_once_when_it_converts_a_git_work_tree() {
    let t = tempfile::tempdir().unwrap();
    let archive = t.path().join("archive");
    repo(&archive.join("one"));
    repo(&archive.join("two"));
    fs::write(archive.join("loose.txt"), "naïve\n").unwrap();
    let out = migrate(&[], &[&archive]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("warning:").count(),
        1,
        "one warning expected:\n{err}"
    );
    assert!(err.contains("git work tree"), "{err}");
    assert!(
        err.contains(&archive.join("one").display().to_string())
            || err.contains(&archive.join("two").display().to_string()),
        "the warning names no work tree:\n{err}"
    );
    assert!(err.contains("modified"), "{err}");
    assert!(err.contains("cutf8fs mount"), "{err}");
    assert!(err.contains("working-tree-encoding"), "{err}");
    // What it warns of is true.
    let st = git(&archive.join("one"), &["status", "--porcelain"]);
    assert!(
        String::from_utf8_lossy(&st.stdout).contains(" M README"),
        "{st:?}"
    );

    // Inside a work tree named directly: warned too.
    let inner = t.path().join("inner");
    repo(&inner);
    let out = migrate(&[], &[&inner.join("src")]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("git work tree"),
        "{out:?}"
    );

    // Back to UTF-8, or no git at all: nothing to warn of.
    let out = migrate(&["--to", "utf8"], &[&archive]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let plain = t.path().join("plain");
    fs::create_dir(&plain).unwrap();
    fs::write(plain.join("a.txt"), "é\n").unwrap();
    let out = migrate(&[], &[&plain]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    // Untracked files of a work tree are none of git's business.
    let untracked = t.path().join("untracked");
    repo(&untracked);
    fs::write(untracked.join("new.txt"), "neu: ä\n").unwrap();
    let out = migrate(&[], &[&untracked.join("new.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// The summary names the files that could not be converted, with where
/// and why; past a handful, it says how to list them all (`--report`).
#[test]
fn the_summary_names_the_invalid_files_or_says_how_to_list_them() {
    let t = tempfile::tempdir().unwrap();
    let few = t.path().join("few");
    fs::create_dir(&few).unwrap();
    fs::write(few.join("ok.txt"), "fine\n").unwrap();
    fs::write(few.join("latin1.txt"), b"caf\xe9\n").unwrap();
    fs::write(few.join("c1.txt"), "a\u{85}b\n").unwrap();
    let out = migrate(&[], &[&few]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("invalid-utf8: 1"), "{said}");
    assert!(
        said.lines()
            .any(|l| l.contains("latin1.txt") && l.contains("1:4")),
        "the invalid file is not named with its position:\n{said}"
    );
    assert!(said.lines().any(|l| l.contains("c1.txt")), "{said}");

    let many = t.path().join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..40 {
        fs::write(many.join(format!("bad{i:02}.txt")), b"\xff\n").unwrap();
    }
    let out = migrate(&[], &[&many]);
    let said = String::from_utf8_lossy(&out.stdout);
    let named = said.lines().filter(|l| l.contains("bad")).count();
    assert!(
        (1..=15).contains(&named),
        "{named} of 40 invalid files named:\n{said}"
    );
    assert!(
        said.contains("--report"),
        "no way to list them all:\n{said}"
    );
}

/// On a terminal, the progress bar does not start as a full bar over
/// "0 B/0 B" while the tree is being counted.
#[test]
fn the_progress_bar_does_not_start_full_and_empty() {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    for d in 0..50 {
        let dir = tree.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f}.txt")), "é\n").unwrap();
        }
    }
    let typescript = t.path().join("typescript");
    // script(1) gives migrate a terminal; its output is what was drawn.
    let out = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!("COLUMNS=100 {BIN} migrate {}", tree.display()))
        .arg(&typescript)
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux)");
    assert!(out.status.success(), "{out:?}");
    let drawn = String::from_utf8_lossy(&fs::read(&typescript).unwrap()).into_owned();
    assert!(drawn.contains("converted: 5000 files"), "{drawn}");
    assert!(
        !drawn.contains("0 B/0 B"),
        "the bar was drawn over 0 B/0 B:\n{drawn}"
    );
}
