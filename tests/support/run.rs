//! Running a program from a test: [`run`] runs a command and
//! [`succeeded`] checks one that already ran; either way a failure panics
//! with what was run, its status, stdout and stderr — a bug report, not a
//! bare `assertion failed`.

use std::fmt::Display;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

/// A finished command's status, stdout and stderr, for a failure message.
pub fn shown(out: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Panics unless the finished command `out` succeeded, naming `what` (the
/// command, or what it was for) with its status, stdout and stderr.
#[track_caller]
pub fn succeeded(out: &Output, what: impl Display) {
    if !out.status.success() {
        panic!("{what}: {}", shown(out));
    }
}

/// Runs `cmd` (stdin empty) and returns its output; panics as
/// [`succeeded`] does, with the command line and its directory, when it
/// cannot be run or fails.
#[track_caller]
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    succeeded(
        &out,
        format_args!("command failed: {cmd:?} (in {:?})", cmd.get_current_dir()),
    );
    out
}

/// Gives the process `cmd` starts a descriptor limit of `n` (soft and hard),
/// leaving this process's own alone (the tests share it).
pub fn limit_nofile(cmd: &mut Command, n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: the closure runs in the forked child before exec and only
    // calls setrlimit(2), which is async-signal-safe, on a struct it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// A fresh temporary directory holding the empty directories `b` and `m`
/// (a BACKING and a mount point): the directory's guard and both paths.
pub fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let b = d.path().join("b");
    let m = d.path().join("m");
    std::fs::create_dir(&b).unwrap();
    std::fs::create_dir(&m).unwrap();
    (d, b, m)
}

/// A process holding up to `n` files open through the mount (each its own
/// open, so its own descriptor in the daemon) until killed. Returns it and
/// how many it opened, with its stderr so far.
pub fn holder(file: &std::path::Path, n: usize) -> (std::process::Child, usize, String) {
    let script = "n=0; while [ $n -lt $2 ]; do exec {fd}<\"$1\" || break; n=$((n+1)); done; \
                  echo $n; exec 2>&-; read x";
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(script)
        .arg("bash")
        .arg(file)
        .arg(n.to_string());
    spawn_holder(&mut c)
}

/// Starts `c`, a script that opens files, prints how many it opened, closes
/// its stderr and waits on its stdin: the process, that count and what it
/// said on stderr.
pub fn spawn_holder(c: &mut Command) -> (std::process::Child, usize, String) {
    use std::io::{BufRead, Read};
    let mut c = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let opened = line.trim().parse().unwrap_or(0);
    (c, opened, err)
}
