//! Text written through the mount that tools outside it must still read:
//! git's metadata and `#!` scripts stay raw (`rawdirs=` changes the list),
//! and a corrected file copied into the mount is refused with the remedy
//! in the log.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::support::mount::Mount;

use cutf8::MAGIC;

#[track_caller]
fn run(dir: &Path, prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    crate::support::run::succeeded(&out, format_args!("{prog} {args:?} in {}", dir.display()));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const GIT_ID: [&str; 4] = [
    "-c",
    "user.name=New User",
    "-c",
    "user.email=new@example.org",
];

fn git(dir: &Path, args: &[&str]) -> String {
    let mut v = GIT_ID.to_vec();
    v.extend_from_slice(args);
    run(dir, "git", &v)
}

#[test]
fn git_init_inside_the_mount_leaves_a_repository_git_reads_in_backing() {
    let m = Mount::new(&[], |_| {});
    let mnt = m.m("");
    git(&mnt, &["init", "-q", "-b", "main"]);
    fs::write(m.m("notes.txt"), "café\n").unwrap();
    git(&mnt, &["add", "notes.txt"]);
    git(&mnt, &["commit", "-q", "-m", "first"]);
    // git on BACKING: the metadata is raw, the worktree file corrected.
    let head = fs::read(m.b(".git/HEAD")).unwrap();
    assert_eq!(head, b"ref: refs/heads/main\n", "{}", m.log_text());
    assert!(!fs::read(m.b(".git/config")).unwrap().starts_with(&MAGIC));
    assert!(fs::read(m.b("notes.txt")).unwrap().starts_with(&MAGIC));
    let log = git(&m.backing, &["log", "--format=%s"]);
    assert_eq!(log, "first\n");
    // The blob git stored is the view, as committed through the mount.
    assert_eq!(git(&m.backing, &["show", "HEAD:notes.txt"]), "café\n");
    // And git through the mount still works after the fact.
    assert_eq!(git(&mnt, &["status", "--porcelain"]), "");
}

#[test]
fn rawdirs_changes_the_list() {
    let m = Mount::new(&["rawdirs=meta"], |b| {
        fs::create_dir(b.join("meta")).unwrap();
        fs::create_dir(b.join(".git")).unwrap();
    });
    fs::write(m.m("meta/a.txt"), "a\n").unwrap();
    fs::write(m.m(".git/b.txt"), "b\n").unwrap();
    assert_eq!(fs::read(m.b("meta/a.txt")).unwrap(), b"a\n");
    assert!(fs::read(m.b(".git/b.txt")).unwrap().starts_with(&MAGIC));
}

#[test]
fn a_script_written_through_the_mount_runs_from_backing() {
    let m = Mount::new(&[], |_| {});
    fs::write(m.m("hello.sh"), "#!/bin/sh\necho \"héllo from $0\"\n").unwrap();
    fs::set_permissions(m.m("hello.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.m("plain.txt"), "#not a script\n").unwrap();
    assert!(fs::read(m.b("hello.sh"))
        .unwrap()
        .starts_with(b"#!/bin/sh\n"));
    let out = run(&m.backing, "./hello.sh", &[]);
    assert_eq!(out, "héllo from ./hello.sh\n");
    // Other new text files are still stored corrected.
    assert!(fs::read(m.b("plain.txt")).unwrap().starts_with(&MAGIC));
}

#[test]
fn copying_a_corrected_file_into_the_mount_says_what_to_do() {
    let m = Mount::new(&[], |_| {});
    let src = m.dir().join("x.cu8");
    let mut disk = MAGIC.to_vec();
    disk.extend_from_slice(b"text\n");
    fs::write(&src, &disk).unwrap();
    let out = Command::new("cp").arg(&src).arg(m.m("")).output().unwrap();
    assert!(!out.status.success(), "cp must fail");
    let log = m.log_text();
    assert!(
        log.contains("x.cu8: refused a write (EILSEQ)")
            && log.contains("copy it into BACKING directly, or decode it first"),
        "the log names the file and the remedy:\n{log}"
    );
}
