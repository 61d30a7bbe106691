//! What `cutf8 migrate` tells its user beyond converting: a warning, once,
//! when it converts files of a git work tree (git outside the mount then
//! sees them all modified); a summary that names the files it could not
//! convert, or says how to list them; a progress bar that does not start
//! full.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::cli::{cutf8, with_magic, Dir, BIN};

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
    crate::support::run::succeeded(&out, "command failed");
    let drawn = String::from_utf8_lossy(&fs::read(&typescript).unwrap()).into_owned();
    assert!(drawn.contains("converted: 5000 files"), "{drawn}");
    assert!(
        !drawn.contains("0 B/0 B"),
        "the bar was drawn over 0 B/0 B:\n{drawn}"
    );
}

use cutf8::MAGIC;

// ---- words and exit statuses ----

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

// ---- version-control metadata is left alone ----

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

// ---- Ctrl-C ----

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

// ---- a path on a mount ----

#[test]
fn migrate_refuses_a_path_on_a_mount() {
    let m = crate::support::mount::Mount::new(&[], |b| {
        fs::write(b.join("a.txt"), "a\n").unwrap();
    });
    let out = Command::new(crate::support::cli::BIN)
        .arg("migrate")
        .arg(m.m("a.txt"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is on a cutf8fs mount") && err.contains(&*m.backing.to_string_lossy()),
        "names the mount and BACKING: {err}"
    );
    assert_eq!(fs::read(m.b("a.txt")).unwrap(), b"a\n", "nothing converted");
    // The same file, named in BACKING, converts.
    let out = Command::new(crate::support::cli::BIN)
        .args(["migrate", "-q"])
        .arg(m.b("a.txt"))
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
}

/// `cutf8 migrate` says what a file it cannot convert looks like, with
/// the command that fixes it, as `cutf8 encode` does (one diagnosis:
/// `cutf8fs::diagnose`), and `cutf8 check` says the same of it.
#[test]
fn migrate_and_check_diagnose_a_latin1_file_as_encode_does() {
    let d = Dir::new();
    d.write("latin.txt", b"caf\xe9 cr\xe8me\n");
    let out = migrate(&["-v"], &[d.path()]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("looks like Latin-1"), "{text}");
    assert!(text.contains("iconv -f LATIN1 -t UTF-8"), "{text}");
    let enc = cutf8(
        &["encode", d.path().join("latin.txt").to_str().unwrap()],
        b"",
    );
    assert!(enc.stderr.contains("looks like Latin-1"), "{}", enc.stderr);
    let check = cutf8(&["check", d.path().to_str().unwrap()], b"");
    let so = String::from_utf8_lossy(&check.stdout);
    assert!(so.contains("note: this looks like Latin-1"), "{so}");
}

/// After migrate, `cutf8 check` says of each script migrate left raw
/// that it did so on purpose: a note, not a warning, and the exit status
/// is 0.
#[test]
fn check_notes_the_scripts_migrate_left_raw() {
    let d = Dir::new();
    d.write("run.sh", "#!/bin/sh\necho déjà\n".as_bytes());
    d.write("a.txt", "déjà\n".as_bytes());
    migrate(&[], &[d.path()]);
    assert_eq!(d.read("run.sh"), "#!/bin/sh\necho déjà\n".as_bytes());
    let check = cutf8(&["check", d.path().to_str().unwrap()], b"").exits(0);
    let so = String::from_utf8_lossy(&check.stdout).into_owned();
    let line = so
        .lines()
        .find(|l| l.contains("run.sh"))
        .unwrap_or_else(|| panic!("no line for run.sh: {so}"))
        .to_string();
    assert!(
        line.contains("note:") && line.contains("raw on purpose"),
        "{line}"
    );
    assert!(!so.contains("warning"), "{so}");
    assert!(check.stderr.contains("0 warnings"), "{}", check.stderr);
}

/// `--dry-run` and real runs print their lines sorted by path, the same
/// every run, whatever order the --jobs workers finish in.
#[test]
fn migrate_prints_in_path_order_every_run() {
    let make = |d: &Dir| {
        for i in 0..40 {
            let sub = format!("d{}/e{}", i % 3, i % 5);
            std::fs::create_dir_all(d.path().join(&sub)).unwrap();
            let body: &[u8] = match i % 4 {
                _ if i % 7 == 0 => "déjà vu\n".as_bytes(),
                0 => b"caf\xe9\n",
                1 => b"#!/bin/sh\necho \xc3\xa9\n",
                2 => b"bin\0ary",
                _ => "déjà vu\n".as_bytes(),
            };
            // A few large files among small ones: the workers finish out
            // of order.
            let n = if i % 7 == 0 { 300_000 } else { 1 + i % 5 };
            d.write(&format!("{sub}/f{i:02}"), &body.repeat(n));
        }
    };
    let lines = |out: &Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("time:"))
            .map(str::to_string)
            .collect()
    };
    let d = Dir::new();
    make(&d);
    let first = lines(&migrate(&["-n", "-v", "-j", "4"], &[d.path()]));
    let paths: Vec<&str> = first
        .iter()
        .filter(|l| l.starts_with("skipped ") || l.starts_with("would-convert "))
        .map(|l| l.split_whitespace().nth(1).unwrap().trim_end_matches(':'))
        .collect();
    assert_eq!(paths.len(), 40, "{first:#?}");
    let mut sorted = paths.clone();
    sorted.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
    assert_eq!(paths, sorted, "not sorted by path");
    for _ in 0..4 {
        assert_eq!(
            lines(&migrate(&["-n", "-v", "-j", "4"], &[d.path()])),
            first
        );
    }
    // Real runs too, on copies of the same tree.
    let mut real = Vec::new();
    for _ in 0..3 {
        let c = Dir::new();
        make(&c);
        let out = lines(&migrate(&["-v", "-j", "4"], &[c.path()]));
        real.push(
            out.iter()
                .map(|l| l.replace(c.path().to_str().unwrap(), "ROOT"))
                .filter(|l| !l.starts_with("size:"))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(real[0], real[1]);
    assert_eq!(real[0], real[2]);
    // Completion order is there when asked for.
    migrate(&["-n", "-v", "-j", "4", "--completion-order"], &[d.path()]);
}

/// The git recipe migrate's warning gives, followed on a real repository
/// with the CORRECTED-UTF-8 module: `git add --renormalize .` is what
/// makes git status clean, and the repository keeps UTF-8.
#[test]
fn the_git_recipe_leaves_git_status_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().join("repo");
    repo(&at);
    fs::write(at.join("run.sh"), "#!/bin/sh\necho é\n").unwrap();
    fs::write(at.join("data.bin"), b"x\0\xe9y").unwrap();
    git(&at, &["add", "."]);
    git(&at, &["commit", "-q", "-m", "more"]);
    let out = migrate(&[], &[&at]);
    let warning = String::from_utf8_lossy(&out.stderr).into_owned();
    for step in [
        "'* text working-tree-encoding=CORRECTED-UTF-8' '.gitattributes -working-tree-encoding'",
        "'PATH -text -working-tree-encoding'",
        "git add --renormalize .",
        "git add .gitattributes && git commit",
    ] {
        assert!(
            warning.contains(step),
            "the warning lacks {step:?}: {warning}"
        );
    }
    let g = |args: &[&str]| -> String {
        let out = Command::new("git")
            .current_dir(&at)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
            .args(args)
            .env("GCONV_PATH", crate::gconv::gconv_dir())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let attrs = "* text working-tree-encoding=CORRECTED-UTF-8\n\
                 .gitattributes -working-tree-encoding\n\
                 run.sh -text -working-tree-encoding\n\
                 data.bin -text -working-tree-encoding\n";
    fs::write(at.join(".gitattributes"), attrs).unwrap();
    assert!(
        g(&["status", "--porcelain"]).contains(" M README"),
        "before --renormalize git sees the converted files modified"
    );
    g(&["add", "--renormalize", "."]);
    g(&["add", ".gitattributes"]);
    g(&["commit", "-q", "-m", "Corrected UTF-8 working tree"]);
    assert_eq!(g(&["status", "--porcelain"]), "");
    assert_eq!(g(&["show", "HEAD:README"]), "Grüße\n");
    assert_eq!(
        g(&["diff", "--name-only", "HEAD~1"]),
        ".gitattributes\n",
        "the commit adds .gitattributes only"
    );
}
