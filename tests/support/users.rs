//! Real unprivileged users for the permission tests.
//!
//! The tests run as root (CI does); they create a few system users and
//! groups once (idempotently, with `useradd`/`groupadd`) and run commands as
//! them through `setpriv`, with exactly the uid, gid and supplementary
//! groups given, as a login would. Nothing here skips: without root or
//! without the tools the tests fail.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;

/// A real user on this machine.
#[derive(Clone, Copy, Debug)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// The test users: `cutf8t-a`, `cutf8t-b`, `cutf8t-c`, each with a primary
/// group of its own name; `a` and `b` are also members of `cutf8t-shared`.
pub const NAMES: [&str; 3] = ["cutf8t-a", "cutf8t-b", "cutf8t-c"];
pub const SHARED_GROUP: &str = "cutf8t-shared";

static CREATE: Mutex<()> = Mutex::new(());

fn id_of(flag: &str, name: &str) -> Option<u32> {
    let out = Command::new("id").arg(flag).arg(name).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn group_id(name: &str) -> Option<u32> {
    let out = Command::new("getent")
        .arg("group")
        .arg(name)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)?
        .trim()
        .parse()
        .ok()
}

fn must(cmd: &mut Command) {
    super::run::run(cmd);
}

/// Creates (once) and returns the test user `name` (one of [`NAMES`]).
pub fn user(name: &str) -> User {
    assert!(NAMES.contains(&name), "unknown test user {name}");
    let _g = CREATE.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(
        euid(),
        0,
        "the permission tests create real users and must run as root"
    );
    if group_id(SHARED_GROUP).is_none() {
        must(Command::new("groupadd").arg("-f").arg(SHARED_GROUP));
    }
    if id_of("-u", name).is_none() {
        let mut cmd = Command::new("useradd");
        cmd.args(["-M", "-U", "-s", "/usr/sbin/nologin", "-d", "/nonexistent"]);
        if name != "cutf8t-c" {
            cmd.arg("-G").arg(SHARED_GROUP);
        }
        // Two test binaries may race to create the same user.
        let out = cmd.arg(name).output().expect("useradd");
        assert!(
            out.status.success() || id_of("-u", name).is_some(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    User {
        uid: id_of("-u", name).expect("uid"),
        gid: id_of("-g", name).expect("gid"),
    }
}

/// The gid of [`SHARED_GROUP`] (after [`user`] created it).
pub fn shared_gid() -> u32 {
    user(NAMES[0]);
    group_id(SHARED_GROUP).expect("shared group")
}

fn euid() -> u32 {
    let out = Command::new("id").arg("-u").output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `cmd args…` run as `u` with its login groups (`--init-groups`), in `cwd`.
pub fn run_as(u: User, cwd: &Path, cmd: &str, args: &[&OsStr]) -> Output {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={}", u.uid))
        .arg(format!("--regid={}", u.gid))
        .arg("--init-groups")
        .arg("--")
        .arg(cmd)
        .args(args)
        .current_dir(cwd);
    c.output().unwrap_or_else(|e| panic!("setpriv {cmd}: {e}"))
}

/// `sh -c script` as `u` (positional arguments `$1…` from `args`).
pub fn sh_as(u: User, script: &str, args: &[&OsStr]) -> Output {
    let mut all: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new(script), OsStr::new("sh")];
    all.extend_from_slice(args);
    run_as(u, Path::new("/"), "sh", &all)
}

/// `sh -c script` with an explicit identity: `uid`, `gid` and exactly
/// `groups` as supplementary groups (`--clear-groups` when empty), for
/// cases a login cannot make (root with a non-root gid, say).
pub fn sh_with(uid: u32, gid: u32, groups: &[u32], script: &str, args: &[&OsStr]) -> Output {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        c.arg(format!("--groups={}", g.join(",")));
    }
    c.args(["--", "sh", "-c", script, "sh"]).args(args);
    c.output().unwrap_or_else(|e| panic!("setpriv sh: {e}"))
}
