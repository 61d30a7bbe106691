//! Running a program from a test: [`run`] runs a command and
//! [`succeeded`] checks one that already ran; either way a failure panics
//! with what was run, its status, stdout and stderr — a bug report, not a
//! bare `assertion failed`.

use std::fmt::Display;
use std::process::{Command, Output, Stdio};

/// Panics unless the finished command `out` succeeded, naming `what` (the
/// command, or what it was for) with its status, stdout and stderr.
#[track_caller]
pub fn succeeded(out: &Output, what: impl Display) {
    if !out.status.success() {
        panic!(
            "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
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
