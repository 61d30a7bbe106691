//! The daemon's log is never lost, and it explains what an errno cannot.
//! Without syslog (no /dev/log: containers, minimal systems) a daemon in
//! the background logs to a file and says which when it mounts; a refusal
//! such as `cp notes.cu8 view/` (EILSEQ: a raw file may not begin with the
//! magic number) is explained there with the path and the remedy.
//!
//! Each scenario runs in a private mount namespace where /dev/log, if the
//! machine has one, is covered, so the test does not depend on whether a
//! syslog daemon runs here.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::mount::BIN;

/// Runs `script` in a private mount namespace with no working /dev/log;
/// `$BIN` is cutf8fs, `$T` the test's directory.
fn without_syslog(t: &Path, script: &str) -> Output {
    let full = format!(
        "set -u\n\
         mount --make-rprivate /\n\
         if [ -e /dev/log ]; then mount --bind /dev/null /dev/log; fi\n\
         {script}"
    );
    Command::new("unshare")
        .args(["-m", "bash", "-c", &full])
        .env("BIN", BIN)
        .env("T", t)
        .env_remove("RUST_LOG")
        .output()
        .expect("unshare (util-linux; the tests run as root)")
}

/// The log file the daemon said it logs to, from its words on stderr.
fn announced_log(stderr: &str) -> Option<String> {
    let rest = stderr.split("logging to ").nth(1)?;
    let end = rest.find([' ', '\n', ';', ')']).unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches(['.', ',', ':']).to_string())
}

#[test]
fn without_syslog_the_daemon_logs_to_a_file_and_explains_eilseq_there() {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir(t.path().join("backing")).unwrap();
    fs::create_dir(t.path().join("view")).unwrap();
    let mut notes = cutf8::MAGIC.to_vec();
    notes.extend_from_slice(&cutf8::encode_strict("Grüße\n".as_bytes()).unwrap());
    fs::write(t.path().join("notes.cu8"), &notes).unwrap();
    let out = without_syslog(
        t.path(),
        r#"
        "$BIN" "$T/backing" "$T/view" 2>"$T/mount.err" || { echo "mount failed"; exit 1; }
        cp "$T/notes.cu8" "$T/view/" 2>"$T/cp.err"; echo "cp exit $?" >"$T/cp.status"
        fusermount3 -u "$T/view"
        for i in $(seq 50); do pgrep -f "$T/backing" >/dev/null || break; sleep 0.1; done
        true
        "#,
    );
    let read = |n: &str| fs::read_to_string(t.path().join(n)).unwrap_or_default();
    assert!(out.status.success(), "{out:?}\n{}", read("mount.err"));
    let said = read("mount.err");
    assert!(
        !said.contains("will be lost"),
        "the daemon says its log is lost:\n{said}"
    );
    let log = announced_log(&said)
        .unwrap_or_else(|| panic!("the daemon does not say where it logs:\n{said}"));
    let cp = read("cp.err");
    assert!(read("cp.status").contains("cp exit 1"), "cp did not fail");
    assert!(
        cp.contains("Invalid or incomplete multibyte or wide character"),
        "{cp}"
    );
    let text = fs::read_to_string(&log).unwrap_or_else(|e| panic!("{log}: {e}"));
    let _ = fs::remove_file(&log);
    assert!(
        text.contains("serving ") && text.contains("backing"),
        "the log lacks the daemon's start:\n{text}"
    );
    assert!(
        text.contains("notes.cu8") && text.contains("EILSEQ"),
        "the refusal is not explained with its path:\n{text}"
    );
    assert!(
        text.contains("BACKING directly") || text.contains("cutf8 decode"),
        "the explanation has no remedy:\n{text}"
    );
}

/// `-o log=FILE` still wins over the default file, and the daemon does not
/// announce another place.
#[test]
fn log_option_wins_over_the_default_file() {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir(t.path().join("backing")).unwrap();
    fs::create_dir(t.path().join("view")).unwrap();
    let out = without_syslog(
        t.path(),
        r#"
        "$BIN" "$T/backing" "$T/view" -o "log=$T/mine.log" 2>"$T/mount.err" || exit 1
        fusermount3 -u "$T/view"
        for i in $(seq 50); do pgrep -f "$T/backing" >/dev/null || break; sleep 0.1; done
        true
        "#,
    );
    let said = fs::read_to_string(t.path().join("mount.err")).unwrap_or_default();
    assert!(out.status.success(), "{out:?}\n{said}");
    let mine = fs::read_to_string(t.path().join("mine.log")).unwrap();
    assert!(mine.contains("serving "), "{mine}");
    if let Some(other) = announced_log(&said) {
        assert!(
            other.ends_with("mine.log"),
            "the daemon announced another log than -o log=: {said}"
        );
    }
}
