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

use crate::support::gate::ReadGate;
use crate::support::mount::Mount;
use crate::support::users::{run_as, user, User};
use crate::support::write::corrected_file;

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
    let m = Mount::new(&["allow_other"], |bk| {
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

/// Storm processes whose reads are held: more than the daemon will ever
/// have threads.
const STUCK: usize = 40;

/// A `threads=2` mount whose BACKING holds `cutf8t-a`'s directory `a`
/// with its [`STUCK`] files `s0`.. and root's `r` with ten files `v0`..;
/// `more` adds to BACKING.
fn held_mount(a: User, more: impl FnOnce(&Path)) -> Mount {
    assert!(
        STUCK > cutf8fs::fs::most_threads(2),
        "the storm must outnumber every thread"
    );
    Mount::new(&["allow_other", "threads=2"], |bk| {
        fs::set_permissions(bk.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(bk, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(bk.join("a")).unwrap();
        chown(bk.join("a"), Some(a.uid), Some(a.gid)).unwrap();
        for i in 0..STUCK {
            let p = bk.join(format!("a/s{i}"));
            fs::write(&p, corrected_file(&format!("s{i} é\n"))).unwrap();
            chown(&p, Some(a.uid), Some(a.gid)).unwrap();
        }
        fs::create_dir(bk.join("r")).unwrap();
        for i in 0..10 {
            fs::write(
                bk.join(format!("r/v{i}")),
                corrected_file(&format!("v{i} ü\n")),
            )
            .unwrap();
        }
        more(bk);
    })
}

/// `cutf8t-a`'s storm on a [`held_mount`]: a `cat` of each of its files,
/// every read of them by the daemon held by a fanotify gate, while root
/// (this process: another uid) stays at work reading its own.
struct HeldStorm {
    gate: Option<ReadGate>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    keep: Option<std::thread::JoinHandle<()>>,
    storm: Vec<std::process::Child>,
}

impl HeldStorm {
    /// Starts it, and returns once the first read is held.
    fn start(m: &Mount, a: User) -> HeldStorm {
        let files: Vec<_> = (0..STUCK).map(|i| m.b(&format!("a/s{i}"))).collect();
        let mut gate = ReadGate::new(m.pid(), "fuser-", &files);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let keep = {
            let (stop, dir) = (stop.clone(), m.m("r"));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    fs::read(dir.join("v9")).unwrap();
                    // Time itself: root comes back every few milliseconds.
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        let storm = (0..STUCK)
            .map(|i| {
                Command::new("setpriv")
                    .arg(format!("--reuid={}", a.uid))
                    .arg(format!("--regid={}", a.gid))
                    .args(["--init-groups", "--", "cat"])
                    .arg(m.m(&format!("a/s{i}")))
                    .current_dir("/")
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("setpriv cat")
            })
            .collect();
        gate.wait_held(1, 60.0, "the storm's first read");
        HeldStorm {
            gate: Some(gate),
            stop,
            keep: Some(keep),
            storm,
        }
    }

    /// Storm processes still running (held).
    fn running(&mut self) -> usize {
        self.storm
            .iter_mut()
            .filter_map(|c| c.try_wait().unwrap().is_none().then_some(()))
            .count()
    }

    /// Lets the storm go; every one of its reads is then served, and
    /// right.
    fn release(mut self) {
        drop(self.gate.take());
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.keep.take().unwrap().join().unwrap();
        for (i, c) in std::mem::take(&mut self.storm).into_iter().enumerate() {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "cat s{i}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("s{i} é\n"));
        }
    }
}

impl Drop for HeldStorm {
    /// A failed test still lets its storm and root's reader end.
    fn drop(&mut self) {
        drop(self.gate.take());
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for c in &mut self.storm {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One user's requests stuck in the daemon (its reads of BACKING held by
/// a fanotify gate, for more files than the daemon will ever have threads)
/// do not stop another user's: with turns (the default) the stuck user
/// has its share of the threads, the next of its requests wait their turn,
/// and a thread stays free to read and serve the other user's at once.
/// First come (`-o noturns`), every thread the daemon has or adds takes one
/// of the storm's requests first and the other user's wait until the storm
/// is let go: this test fails there.
#[test]
fn one_users_stuck_requests_leave_another_users_served() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let a = user("cutf8t-a");
    let m = held_mount(a, |_| {});
    let mut held = HeldStorm::start(&m, a);

    // Root's reads of its own files are answered while the storm is held.
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = m.m("r");
    std::thread::spawn(move || {
        for round in 0..5 {
            for i in 0..9 {
                let got = fs::read_to_string(dir.join(format!("v{i}"))).unwrap();
                assert_eq!(got, format!("v{i} ü\n"), "round {round}");
            }
        }
        tx.send(()).unwrap();
    });
    let answered = rx.recv_timeout(std::time::Duration::from_secs(60));
    let running = held.running();
    assert!(
        answered.is_ok(),
        "another user's reads waited behind one user's stuck requests (60 s)"
    );
    assert_eq!(running, STUCK, "the storm got through its held reads");
    assert!(
        m.stats_count("turns waited") > 0,
        "the storm's requests were never queued for their turn"
    );
    held.release();
}

/// A lock wait queued for its user's turn behind that user's stuck
/// requests still ends when its caller gets a signal (EINTR, as a wait
/// the daemon had started would), at once, not when the storm is let go:
/// the daemon keeps an interrupt for a request it has not seen for 10 s
/// only, so a wait queued longer would otherwise start after its
/// interrupt was forgotten and its caller wait for the lock unkillably
/// (fuser patch 0005). Root holds the lock meanwhile.
#[test]
fn a_signal_ends_a_lock_wait_queued_for_its_turn() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    let a = user("cutf8t-a");
    let m = held_mount(a, |bk| {
        fs::write(bk.join("a/lock"), "locked\n").unwrap();
        chown(bk.join("a/lock"), Some(a.uid), Some(a.gid)).unwrap();
    });
    let mine = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m("a/lock"))
        .unwrap();
    nix::fcntl::fcntl(
        &mine,
        nix::fcntl::FcntlArg::F_SETLK(&libc::flock {
            l_type: libc::F_WRLCK as i16,
            l_whence: libc::SEEK_SET as i16,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        }),
    )
    .expect("root takes the lock");
    // The locker opens the file before the storm (its open would wait its
    // turn too), then asks for the lock on a line from us, with an alarm.
    const LOCKER: &str = r#"
import fcntl, signal, sys, time
f = open(sys.argv[1], "r+")
print("open", flush=True)
sys.stdin.readline()
class Alarm(Exception):
    pass
def ring(*_):
    raise Alarm()
signal.signal(signal.SIGALRM, ring)
signal.alarm(2)
t = time.monotonic()
try:
    fcntl.lockf(f, fcntl.LOCK_EX)
    print("locked", flush=True)
except Alarm:
    print("interrupted %.1f" % (time.monotonic() - t), flush=True)
"#;
    let mut locker = Command::new("setpriv")
        .arg(format!("--reuid={}", a.uid))
        .arg(format!("--regid={}", a.gid))
        .args(["--init-groups", "--", PY, "-c", LOCKER])
        .arg(m.m("a/lock"))
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("setpriv python3");
    let mut out = std::io::BufReader::new(locker.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "open\n", "the locker did not open its file");

    // Once a thread the daemon added is stuck too, the storm's first
    // requests (lookups and opens, answered at once) are behind it, and
    // what its user has queued are reads that will be held: the lock wait
    // queues behind them and stays there.
    let mut held = HeldStorm::start(&m, a);
    held.gate
        .as_mut()
        .unwrap()
        .wait_held(2, 60.0, "a second thread's read");
    std::io::Write::write_all(locker.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut out, &mut line);
        let _ = tx.send(line);
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(30));
    let running = held.running();
    assert_eq!(running, STUCK, "the storm got through its held reads");
    let got = got.unwrap_or_else(|_| {
        panic!("a lock wait queued behind the held storm was not ended by its signal (30 s)")
    });
    assert!(
        got.starts_with("interrupted "),
        "the locker: {got:?} (root holds the lock)"
    );
    let waited: f64 = got.trim()["interrupted ".len()..].parse().unwrap();
    assert!(
        waited < 10.0,
        "the signal ended the wait only after {waited} s"
    );
    assert!(
        m.stats_count("turns waited") > 0,
        "the storm's requests were never queued for their turn"
    );
    // The locker's close waits its turn behind the storm.
    held.release();
    assert!(locker.wait().unwrap().success());
    drop(mine);
}

/// A user alone pays nothing for turns: eight processes of one user
/// reading at once through a default mount (two threads) have none of
/// their requests queued for a turn, and every read is right.
#[test]
fn a_user_alone_never_waits_for_a_turn() {
    let m = Mount::new(&["threads=2"], |bk| {
        for i in 0..200 {
            fs::write(
                bk.join(format!("f{i}")),
                corrected_file(&format!("f{i} ö\n")),
            )
            .unwrap();
        }
    });
    let before = m.stats_count("turns waited");
    let readers: Vec<_> = (0..8)
        .map(|k| {
            let dir = m.m("");
            std::thread::spawn(move || {
                for round in 0..5 {
                    for i in (k..200).step_by(8) {
                        let got = fs::read_to_string(dir.join(format!("f{i}"))).unwrap();
                        assert_eq!(got, format!("f{i} ö\n"), "round {round}");
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        m.requests("open") >= 200,
        "the reads did not reach the daemon"
    );
    assert_eq!(
        m.stats_count("turns waited") - before,
        0,
        "a user alone had requests queued for a turn"
    );
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
