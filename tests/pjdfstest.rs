//! pjdfstest (the POSIX filesystem suite, `cargo install pjdfstest`) against
//! a cutf8fs mount with default options, as root. Fails on any failure
//! that is not in the allowlist below (empty) and that fails again on
//! either of two immediate reruns (measured: 384 passed, 0 failed; the 14
//! skipped need a remount to read-only or LINK_MAX, which FUSE cannot give).
//!
//! `PJDFSTEST_ONLY=chmod` runs a subset (a quick check of the set-up).
//!
//! Config: `../shared/peer-suites/pjdfstest.toml` beside the repository
//! (CI's layout), or `$PJDFSTEST_CONFIG`.

use std::path::Path;
use std::process::Command;

use crate::support::mount::Mount;

/// Tests allowed to fail, each with the reason. Empty: every test that can
/// run on FUSE passes.
const ALLOWED_FAILURES: &[(&str, &str)] = &[];

/// A parent directory whose path length avoids a pjdfstest bug:
/// `create_path_max` underflows (and panics) when the length of its base
/// path (mount point + 22) is 31 mod 127.
fn parent_dir() -> tempfile::TempDir {
    loop {
        let d = tempfile::Builder::new()
            .prefix("pjd")
            .tempdir()
            .expect("temp dir");
        // The mount point is <dir>/<prefix>XXXXXX/mnt (see Mount::new_in).
        let mnt_len = d.path().as_os_str().len() + "/cutf8fs-test-XXXXXX/mnt".len();
        if (mnt_len + 22) % 127 != 31 {
            return d;
        }
    }
}

#[test]
fn pjdfstest_passes_on_the_mount() {
    let pjd = crate::support::mount::find_tool("pjdfstest");
    let cfg = crate::support::mount::peer_config("PJDFSTEST_CONFIG", "pjdfstest.toml");
    let parent = parent_dir();
    let m = Mount::new_in(parent.path(), &[], |_| {});
    // A second filesystem for the EXDEV tests (tmpfs at /dev/shm).
    let mut cmd = Command::new(&pjd);
    cmd.arg("-c").arg(&cfg).arg("-p").arg(&m.mnt);
    if Path::new("/dev/shm").is_dir() {
        cmd.arg("-s").arg("/dev/shm");
    }
    // PJDFSTEST_ONLY=PATTERN runs a subset (pjdfstest's substring match),
    // for a quick check; the full run insists on at least 300 tests.
    let only = std::env::var("PJDFSTEST_ONLY").ok();
    if let Some(p) = &only {
        cmd.arg(p);
    }
    // pjdfstest 0.2.2 replaces the panic hook with one that prints nothing,
    // so a panic in its own harness between test cases (an `unwrap` of the
    // per-case temporary directory or its chmod) ends it with status 101
    // and no message and no summary. Under a loaded CI run that happened
    // about once in four full runs, never in 16 runs by hand (with
    // `drop_caches` in a loop, and under strace). Such a run is shown and
    // run once more on the same mount, which must still answer; a second
    // run without a summary fails the test.
    let run = |cmd: &mut Command| {
        let out = cmd.current_dir(&m.mnt).output().expect("run pjdfstest");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status, text)
    };
    let (mut status, mut text) = run(&mut cmd);
    if !text.lines().any(|l| l.starts_with("Summary:")) {
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        eprintln!(
            "pjdfstest ended ({status}) without a summary; its last lines, newest first: \
             {tail:?}; daemon log:\n{}",
            m.log_text()
        );
        std::fs::metadata(&m.mnt).expect("the mount must still answer");
        (status, text) = run(&mut cmd);
    }
    let summary = text
        .lines()
        .rev()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("pjdfstest printed no summary ({status}):\n{text}"))
        .to_owned();
    eprintln!("pjdfstest: {summary}");
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // A failure that passes on both of two immediate reruns is reported as
    // flaky, not failed: under heavy load (load average 6-8 on 2 CPUs) we saw
    // open::etxtbsy fail once in 40 runs (its exec-then-open race), never on
    // a rerun.
    let unexpected: Vec<&&str> = failed
        .iter()
        .filter(|f| !ALLOWED_FAILURES.iter().any(|(a, _)| a == *f))
        .filter(|f| {
            let reruns_pass = (0..2).all(|_| {
                let mut c = Command::new(&pjd);
                // A name is a substring pattern (pjdfstest's -e wants the
                // full internal name).
                c.arg("-c").arg(&cfg).arg("-p").arg(&m.mnt).arg(f);
                c.current_dir(&m.mnt)
                    .output()
                    .map(|o| {
                        let out = String::from_utf8_lossy(&o.stdout);
                        o.status.success()
                            && out.contains("Summary: 0 failed")
                            && !out.contains(" 0 passed")
                    })
                    .unwrap_or(false)
            });
            if reruns_pass {
                eprintln!("pjdfstest: {f} failed once and passed twice on rerun: flaky");
            }
            !reruns_pass
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "pjdfstest failures not in the allowlist: {unexpected:?}\n{summary}\n{text}"
    );
    assert!(summary.contains(" passed"), "{summary}");
    let passed: u32 = summary
        .split(", ")
        .find_map(|p| {
            p.strip_suffix(" passed")
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0);
    let least = if only.is_some() { 1 } else { 300 };
    assert!(passed >= least, "suspiciously few tests ran: {summary}");
}
