//! Fair turns: one user's storm of requests slows another user's small
//! reads through the mount at most twice what the same storm does to them
//! natively (man cutf8fs, RESOURCES; issue 35).
//!
//! Real users: `cutf8t-a` runs two 8-process storms
//! (`scripts/fair-turns.py storm`: cat(1) of its files, checked, and
//! lookups of names that do not exist — every one a request for the
//! daemon), one through the mount and one in BACKING, each let run only
//! in its phase; `cutf8t-b` times open-read-close of small files
//! (`victim`) alone and during the storm, through the mount and natively,
//! interleaved in short phases so that the machine's other load falls on
//! both alike. The slowdowns are ratios of medians of hundreds; two runs of
//! three decide. That bound is a timing, ignored in the suite (run it
//! alone); what runs always is that nothing breaks under the storm.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::mount::Mount;
use crate::support::users::{run_as, user, User};

const SCRIPT: &str = include_str!("../scripts/fair-turns.py");
const PY: &str = "/usr/bin/python3";
/// Storm processes, and files each reads per round.
const PROCS: usize = 8;
const FILES: usize = 40;
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn medians(out: &str, label: &str) -> (f64, f64, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{label} ")))
        .unwrap_or_else(|| panic!("no {label} line in:\n{out}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    (
        w[2].parse().unwrap(),
        w[4].parse().unwrap(),
        w[6].parse().unwrap(),
    )
}

fn storm(a: User, ctl: &Path, dir: &Path, label: &str) -> std::process::Child {
    Command::new("setpriv")
        .arg(format!("--reuid={}", a.uid))
        .arg(format!("--regid={}", a.gid))
        .arg("--init-groups")
        .arg("--")
        .arg(PY)
        .arg(ctl.join("fair-turns.py"))
        .args(["storm".as_ref(), dir.as_os_str()])
        .arg(PROCS.to_string())
        .arg(ctl)
        .arg(label)
        .current_dir("/")
        .stdout(Stdio::piped())
        .spawn()
        .expect("setpriv")
}

/// "ops N bad B" of a storm that has ended.
fn storm_result(c: std::process::Child, label: &str) -> (u64, u64) {
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let w: Vec<&str> = text.split_whitespace().collect();
    assert!(
        out.status.success() && w.len() == 4,
        "{label} storm: {text}"
    );
    (w[1].parse().unwrap(), w[3].parse().unwrap())
}

/// What storms of `cutf8t-a` did to `cutf8t-b`'s reads: one line per
/// run of the victim, and whether it met the bound (mount slowdown at most
/// twice the native one), runs repeated while `more` says so. Asserts that
/// nothing broke: every read of both right, the storm through the mount
/// reached the daemon.
fn storm_against_reads(more: impl Fn(&[bool]) -> bool) -> (Vec<bool>, Vec<String>) {
    // One storm at a time: two would be each other's load.
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let (a, b) = (user("cutf8t-a"), user("cutf8t-b"));
    let m = Mount::new(&["allow_other", "turns"], |bk| {
        fs::set_permissions(bk.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(bk, fs::Permissions::from_mode(0o755)).unwrap();
        for (d, u) in [("a", a), ("b", b)] {
            fs::create_dir(bk.join(d)).unwrap();
            chown(bk.join(d), Some(u.uid), Some(u.gid)).unwrap();
        }
        for i in 0..20 {
            let p = bk.join(format!("b/v{i}"));
            fs::write(&p, format!("v{i}\n").repeat(8)).unwrap();
            chown(&p, Some(b.uid), Some(b.gid)).unwrap();
        }
        for k in 0..PROCS {
            for j in 0..FILES {
                let p = bk.join(format!("a/s{k}_{j}"));
                fs::write(&p, format!("s{k}_{j}\n").repeat(8)).unwrap();
                chown(&p, Some(a.uid), Some(a.gid)).unwrap();
            }
        }
    });
    // The control directory (go-LABEL, stop, the script, what the storm
    // expects to read), outside BACKING.
    let ctl = tempfile::tempdir().unwrap();
    fs::set_permissions(ctl.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(ctl.path().join("fair-turns.py"), SCRIPT).unwrap();
    fs::set_permissions(
        ctl.path().join("fair-turns.py"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    let (opens0, lookups0) = (m.requests("open"), m.requests("lookup"));
    let storms = [
        storm(a, ctl.path(), &m.m("a"), "mount"),
        storm(a, ctl.path(), &m.b("a"), "native"),
    ];
    let mut verdicts = Vec::new();
    let mut report = Vec::new();
    while more(&verdicts) {
        let out = run_as(
            b,
            Path::new("/"),
            PY,
            &[
                ctl.path().join("fair-turns.py").as_os_str(),
                "victim".as_ref(),
                ctl.path().as_os_str(),
                "50".as_ref(),
                "10".as_ref(),
                format!("mount={}", m.m("b").display()).as_ref(),
                format!("native={}", m.b("b").display()).as_ref(),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "victim: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (ma, ms, mbad) = medians(&text, "mount");
        let (na, ns, nbad) = medians(&text, "native");
        assert_eq!(
            (mbad, nbad),
            (0, 0),
            "the victim read wrong contents:\n{text}"
        );
        // A storm that does not slow the native reads at all (or seems to
        // speed them up: noise) counts as slowing them 1×.
        let (mount, native) = (ms / ma, (ns / na).max(1.0));
        report.push(format!(
            "mount {ma:.0} -> {ms:.0} us (x{mount:.2}), native {na:.1} -> {ns:.1} us \
             (x{native:.2}): {:.2}",
            mount / native
        ));
        verdicts.push(mount <= 2.0 * native);
    }
    fs::write(ctl.path().join("stop"), "").unwrap();
    let [mount_storm, native_storm] = storms;
    let (mops, mbad) = storm_result(mount_storm, "mount");
    let (nops, nbad) = storm_result(native_storm, "native");
    eprintln!(
        "fair turns: {}; storm rounds {mops} through the mount, {nops} natively",
        report.join("; ")
    );
    // The storm's own results stay right, and it reached the daemon: each
    // round opens its 40 files there and looks up a name never seen.
    assert_eq!((mbad, nbad), (0, 0), "the storm read wrong contents");
    assert!(mops > 0 && nops > 0, "a storm never ran");
    let opens = m.requests("open") - opens0;
    let lookups = m.requests("lookup") - lookups0;
    assert!(
        opens >= mops * FILES as u64 && lookups >= mops,
        "the storm's {mops} rounds reached the daemon with only {opens} opens and \
         {lookups} lookups"
    );
    (verdicts, report)
}

/// Nothing breaks while requests wait their turn: the storm's reads and
/// the other user's stay right, the storm's requests reach the daemon, the
/// mount unmounts cleanly after.
#[test]
fn one_users_storm_leaves_its_and_another_users_reads_right() {
    let (verdicts, _) = storm_against_reads(|v| v.is_empty());
    assert_eq!(verdicts.len(), 1);
}

/// The bound itself, two runs of three deciding. Ignored: a timing, which
/// other builds on the machine (or the rest of the suite, run at once)
/// move by more than the bound; run it alone on a quiet machine
/// (`cargo test --release --test tests -- fair_turns:: --ignored`), or
/// `scripts/bench-fair.sh` for the numbers.
#[test]
#[ignore = "timing: run alone on a quiet machine"]
fn one_users_storm_slows_another_users_reads_at_most_twice_what_it_does_natively() {
    let (verdicts, report) = storm_against_reads(|v| {
        v.iter().filter(|&&ok| ok).count() < 2 && v.iter().filter(|&&ok| !ok).count() < 2
    });
    assert!(
        verdicts.iter().filter(|&&ok| ok).count() >= 2,
        "one user's storm slowed another's reads through the mount more than twice what \
         it did natively (mount slowdown ÷ native slowdown, bound 2): {}",
        report.join("; ")
    );
}
