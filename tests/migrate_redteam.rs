//! `cutf8 migrate` run by root over a tree a user owns, attacked by that
//! user through what migrate does on root's behalf besides walking and
//! converting (man/cutf8.1 SECURITY; docs/migrate.md, "Security"): the
//! files it creates in the user's directories, what it prints to root's
//! terminal and suggests root type, the programs it runs, the report file
//! root names.
//!
//! The attacker is the real unprivileged `cutf8t-a`, who owns the tree;
//! root keeps files beside it (`outside/`, 0711) that must stay as they
//! were.
//!
//! * A default ACL on the user's directory: migrate's temporary file
//!   inherits it, and the chmod to the original's mode unmasked it, so a
//!   root-only file of the tree became readable to the user.
//! * File and directory names holding escape sequences, newlines,
//!   carriage returns and bidi overrides, printed to root's terminal; a
//!   directory name that turns the `rm -- '…'` migrate suggests for a
//!   refused journal into a command of the user's.
//! * A git repository of the user's with `core.fsmonitor` set: migrate
//!   asks git which files it tracks, as root; with `safe.directory = *` in
//!   root's git config (a common setting) git ran the user's command.
//! * `--report FILE` in a directory the user writes: a symlink or hard link
//!   planted there led root's report over root's file; a file of the
//!   user's let them read it.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Output, Stdio};

use crate::migrate_security::{chmod, Fixture};
use crate::support::cli::BIN;
use crate::support::users::sh_as;

/// What this file adds to `migrate_security`'s fixture.
impl Fixture {
    /// Runs `script` as the user in the tree (`$1` the tree, `$2`… `args`).
    pub(crate) fn as_a_output(&self, script: &str, args: &[&OsStr]) -> Output {
        let full = format!("cd \"$1\" || exit 99; {script}");
        let mut all: Vec<&OsStr> = vec![self.tree.as_os_str()];
        all.extend_from_slice(args);
        sh_as(self.a, &full, &all)
    }

    /// The same; it must succeed.
    pub(crate) fn as_a_checked(&self, script: &str, args: &[&OsStr]) -> Output {
        let out = self.as_a_output(&format!("set -e; {script}"), args);
        crate::support::run::succeeded(&out, format_args!("as the user: {script}"));
        out
    }

    /// `cutf8 migrate ARGS… tree` as root.
    fn migrate_with(&self, args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
        let mut c = Command::new(BIN);
        c.arg("migrate").args(args).arg(&self.tree);
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdin(Stdio::null()).output().expect("run cutf8")
    }
}

use crate::support::run::shown;

// ------------------------------------------------------------ default ACL

/// The user puts a default ACL naming themselves on their directory, where
/// root keeps a root-only text file (mode 0640, group root). The converted
/// file must be as closed to them as the original: its mode, no ACL entry
/// of theirs, and `cat` as the user fails. (Before: the temporary file
/// inherited `user:cutf8t-a:rw-`, masked by its creation mode 0600, and
/// the chmod to 0640 unmasked it: the user read root's file.)
#[test]
fn a_default_acl_on_the_users_directory_opens_no_converted_file_to_them() {
    let fx = Fixture::new();
    let secret = fx.tree.join("secret.txt");
    fs::write(&secret, "root's secret, Grüße\n").unwrap();
    chmod(&secret, 0o640);
    // A multiply linked one takes the in-place path (under a journal in
    // the same directory).
    let linked = fx.tree.join("linked.txt");
    fs::write(&linked, "root's other secret, Grüße\n").unwrap();
    chmod(&linked, 0o660);
    fs::hard_link(&linked, fx.tree.join("linked2.txt")).unwrap();
    fx.as_a_checked(
        "setfacl -d -m u:cutf8t-a:rwx,g:cutf8t-a:rwx .; cat secret.txt 2>/dev/null && exit 1; true",
        &[],
    );
    let out = fx.migrate_with(&[], &[]);
    assert!(out.status.success(), "{}", shown(&out));
    for p in [&secret, &linked] {
        let bytes = fs::read(p).unwrap();
        assert!(
            bytes.starts_with(&cutf8::MAGIC),
            "{} not converted: {}",
            p.display(),
            shown(&out)
        );
        let acl = Command::new("getfacl")
            .args(["--omit-header", "--absolute-names"])
            .arg(p)
            .output()
            .unwrap();
        let acl = String::from_utf8_lossy(&acl.stdout);
        assert!(
            !acl.contains("cutf8t-a"),
            "{} gives the user access:\n{acl}",
            p.display()
        );
        let read = fx.as_a_output("cat \"$2\"", &[p.as_os_str()]);
        assert!(
            !read.status.success() && read.stdout.is_empty(),
            "the user reads root's converted file {}: {:?}",
            p.display(),
            String::from_utf8_lossy(&read.stdout)
        );
    }
    assert_eq!(fs::metadata(&secret).unwrap().mode() & 0o7777, 0o640);
    assert_eq!(fs::metadata(&linked).unwrap().mode() & 0o7777, 0o660);
}

// ------------------------------------------------------ names on a terminal

/// Bytes a name can hold that must never reach root's terminal raw: ESC
/// (CSI, OSC), BEL, CR, LF, the C1 CSI (U+009B) and a right-to-left
/// override (U+202E).
fn raw_controls(out: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let text = String::from_utf8_lossy(out);
    for (i, c) in text.char_indices() {
        if (c.is_control() && c != '\n') || c == '\u{202E}' {
            found.push(format!("U+{:04X} at {i}", c as u32));
        }
    }
    found
}

/// The user names files and directories with escape sequences, control
/// characters and a bidi override, their content such that migrate names
/// them (invalid UTF-8: the summary lists it; a planted journal: an error
/// on stderr); with `-v` every name is printed. Nothing of it reaches
/// root's terminal raw; the report's `path_hex` still gives the exact
/// bytes. A name holding a newline cannot forge a line of the output.
#[test]
fn names_that_would_drive_roots_terminal_are_printed_escaped() {
    let fx = Fixture::new();
    let names: [&[u8]; 5] = [
        b"title\x1b]2;owned\x07.txt",
        b"red\x1b[31m\x1b[2J.txt",
        b"cr\rcutf8: migrate: done.txt",
        b"nl\ncutf8: migrate: everything converted.txt",
        "c1\u{9b}31m-rlo\u{202e}txt.exe".as_bytes(),
    ];
    let src = fx.dir.path().join("latin1.src");
    fs::write(&src, b"caf\xe9\n").unwrap();
    chmod(&src, 0o644);
    for n in names {
        fx.as_a_checked(
            "cp \"$2\" \"$3\"; mkdir \"$3.d\"; printf x > \"$3.d/.cutf8-journal.00000000000000aa\"",
            &[src.as_os_str(), OsStr::from_bytes(n)],
        );
    }
    let report = fx.outside.join("report.jsonl");
    for verbose in [false, true] {
        let mut args = vec![OsStr::new("--report"), report.as_os_str()];
        if verbose {
            args.push(OsStr::new("-v"));
        }
        let out = fx.migrate_with(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
        for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let raw = raw_controls(bytes);
            assert!(
                raw.is_empty(),
                "raw control characters on root's {what}: {raw:?}\n{}",
                shown(&out)
            );
        }
        let all = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(all.contains("title\\x1B]2;owned\\x07.txt"), "{all}");
        assert!(all.contains("nl\\x0Acutf8: migrate: everything"), "{all}");
        assert!(
            !all.lines()
                .any(|l| l.starts_with("cutf8: migrate: everything")),
            "a name forged a line of output:\n{all}"
        );
        // The report keeps the exact bytes.
        let text = fs::read_to_string(&report).unwrap();
        for n in names {
            let hex: String = fx
                .tree
                .join(OsStr::from_bytes(n))
                .as_os_str()
                .as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert!(
                text.lines().any(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["path_hex"] == hex.as_str()
                }),
                "no report line with path_hex {hex}:\n{text}"
            );
        }
    }
}

/// A journal migrate refuses comes with the command that removes it. The
/// user names its directory so that the command, pasted, would run theirs
/// (a quote and `$(…)`), or so that it spans lines. Run with bash, each
/// suggested command removes exactly the journal and runs nothing else.
#[test]
fn the_rm_suggested_for_a_refused_journal_removes_it_and_nothing_else() {
    let fx = Fixture::new();
    let cwd = fx.outside.join("cwd");
    fs::create_dir(&cwd).unwrap();
    let dirs: [&[u8]; 3] = [
        b"q'$(touch INJECTED)'q",
        b"nl\n'; touch INJECTED; '",
        b"back\\slash'\x1b[0m",
    ];
    for d in dirs {
        fx.as_a_checked(
            "mkdir \"$2\"; printf forged > \"$2/.cutf8-journal.00000000000000aa\"",
            &[OsStr::from_bytes(d)],
        );
    }
    let out = fx.migrate_with(&[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let commands: Vec<&str> = stderr
        .split("(rm -- ")
        .skip(1)
        .map(|rest| rest.split(") and run again").next().unwrap())
        .map(|rest| rest.split("), and run again").next().unwrap())
        .collect();
    assert_eq!(commands.len(), dirs.len(), "{stderr}");
    for word in commands {
        let run = Command::new("bash")
            .arg("-c")
            .arg(format!("rm -- {word}"))
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "rm -- {word}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    for d in dirs {
        let j = fx
            .tree
            .join(OsStr::from_bytes(d))
            .join(".cutf8-journal.00000000000000aa");
        assert!(
            fs::symlink_metadata(&j).is_err(),
            "{j:?} not removed by the suggested command"
        );
    }
    let left: Vec<_> = fs::read_dir(&cwd).unwrap().collect();
    assert!(
        left.is_empty(),
        "a suggested command ran more: {left:?}\n{stderr}"
    );
}

// -------------------------------------------------------------------- git

/// The user's tree is a git work tree whose config runs a command of
/// theirs (`core.fsmonitor`, which `git ls-files` runs). Root's git config
/// trusts every repository (`safe.directory = *`, as many set it after
/// git 2.35.2). migrate asks git which files it tracks, to warn: git must
/// not run the user's command as root. The warning is still given.
#[test]
fn git_never_runs_a_command_of_the_users_repository_as_root() {
    let fx = Fixture::new();
    let marker = fx.outside.join("fsmonitor-ran-as-root");
    let log = fx.outside.join("log");
    fs::create_dir(&log).unwrap();
    chmod(&log, 0o777);
    let hook = format!(
        "id -u >> {}/ran; touch {}; false",
        log.display(),
        marker.display()
    );
    fx.as_a_checked(
        "export HOME=\"$1\"; printf 'Grüße\\n' > notes.txt; git init -q .; \
         git add notes.txt; git -c user.name=a -c user.email=a@example.org commit -qm x; \
         git config core.fsmonitor \"$2\"; rm -f .gitconfig",
        &[OsStr::new(&hook)],
    );
    let rootcfg = fx.outside.join("rootgitconfig");
    fs::write(&rootcfg, "[safe]\n\tdirectory = *\n").unwrap();
    let out = fx.migrate_with(&[], &[("GIT_CONFIG_GLOBAL", rootcfg.as_os_str())]);
    assert!(out.status.success(), "{}", shown(&out));
    let ran = fs::read_to_string(log.join("ran")).unwrap_or_default();
    assert!(
        !marker.exists() && !ran.lines().any(|l| l == "0"),
        "the repository's fsmonitor ran as root ({ran:?})\n{}",
        shown(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("git work tree"),
        "{}",
        shown(&out)
    );
}

// ----------------------------------------------------------------- report

/// Root names a report file in a directory the user writes (their tree,
/// or beside it). What the user planted under that name — a symlink to a
/// file of root's, a hard link to one (fs.protected_hardlinks off: made
/// here by root), a file of their own (they would read root's report), a
/// FIFO — is refused (exit 2, nothing done) and root's file is unchanged.
/// A name nobody planted becomes root's own report; `--report /dev/stdout`
/// still works.
#[test]
fn a_report_name_planted_by_the_user_is_not_written_through() {
    let fx = Fixture::new();
    let victim = fx.outside.join("shadow");
    fs::write(&victim, b"root:secret:1:0:99999:7:::\n").unwrap();
    chmod(&victim, 0o600);
    let before = fs::read(&victim).unwrap();
    fs::write(fx.tree.join("notes.txt"), "Grüße\n").unwrap();
    let cases = ["symlink", "hardlink", "theirs", "fifo"];
    for case in cases {
        let name = fx.tree.join(format!("report-{case}.jsonl"));
        match case {
            "symlink" => {
                fx.as_a_checked(
                    "ln -s \"$2\" \"$3\"",
                    &[victim.as_os_str(), name.as_os_str()],
                );
            }
            "hardlink" => fs::hard_link(&victim, &name).unwrap(),
            "theirs" => {
                fx.as_a_checked("touch \"$2\"; chmod 666 \"$2\"", &[name.as_os_str()]);
            }
            _ => {
                fx.as_a_checked("mkfifo \"$2\"", &[name.as_os_str()]);
            }
        }
        let out = fx.migrate_with(&[OsStr::new("--report"), name.as_os_str()], &[]);
        assert_eq!(out.status.code(), Some(2), "{case}: {}", shown(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot create the report"),
            "{case}: {}",
            shown(&out)
        );
        assert_eq!(
            fs::read(&victim).unwrap(),
            before,
            "{case}: root's file changed"
        );
        if case == "theirs" {
            assert_eq!(fs::metadata(&name).unwrap().len(), 0, "{case}");
        }
    }
    assert_eq!(
        fs::read(fx.tree.join("notes.txt")).unwrap(),
        "Grüße\n".as_bytes(),
        "a refused run converted files"
    );
    let fresh = fx.tree.join("sub-report.jsonl");
    let out = fx.migrate_with(&[OsStr::new("--report"), fresh.as_os_str()], &[]);
    assert!(out.status.success(), "{}", shown(&out));
    let md = fs::symlink_metadata(&fresh).unwrap();
    assert!(md.is_file() && md.uid() == 0 && md.nlink() == 1);
    assert!(fs::read_to_string(&fresh).unwrap().contains("notes.txt"));
    let out = fx.migrate_with(
        &[
            OsStr::new("--to"),
            OsStr::new("utf8"),
            OsStr::new("--report"),
            OsStr::new("/dev/stdout"),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", shown(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"action\":\"converted\""),
        "{}",
        shown(&out)
    );
}
