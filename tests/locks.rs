//! Locks through the mount reach BACKING: `flock`, POSIX record locks
//! (`fcntl` F_SETLK/F_SETLKW) and OFD locks (F_OFD_SETLK/F_OFD_SETLKW),
//! each held through mount A, through mount B (a second cutf8fs over the
//! same BACKING) or natively in BACKING, exclude a contender through each
//! of those — at once (EAGAIN) and while it waits (it gets the lock once
//! the holder lets go). A wait is interrupted by a signal as natively
//! (EINTR, the daemon's waiting thread gone), and a waiter killed with -9
//! dies at once. Locks go at close and at exit exactly as natively (POSIX:
//! any close by the owner; OFD and flock: the open file's last close), and
//! SQLite in rollback-journal mode keeps a database whole with writers on
//! two mounts. Four users waiting for all the locks one user may leave
//! room for a fifth user's wait.
//!
//! Each lock is taken by a real process: a small python3 program
//! (`Locker`) that holds descriptors and takes locks on command.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::mount::{wait_for, Mount};

/// The lock-taking process: one command a line on stdin, one answer a line
/// on stdout ("ok ...", or "err ERRNO-NAME").
const LOCKER: &str = r#"
import errno, fcntl, os, signal, struct, sys
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
class Interrupted(Exception):
    pass
def on_usr1(sig, frame):
    raise Interrupted()
signal.signal(signal.SIGUSR1, on_usr1)
T = {'rd': fcntl.F_RDLCK, 'wr': fcntl.F_WRLCK, 'un': fcntl.F_UNLCK}
N = {v: k for k, v in T.items()}
def flk(t, start, n):
    return struct.pack('hhqqi4x', t, 0, start, n, 0)
fds = {}
print('ok', os.getpid(), flush=True)
for line in sys.stdin:
    w = line.split()
    if not w:
        continue
    try:
        c = w[0]
        out = 'ok'
        if c == 'open':
            fds[w[1]] = os.open(w[2], os.O_RDWR if w[3] == 'rw' else os.O_RDONLY)
        elif c == 'dup':
            fds[w[1]] = os.dup(fds[w[2]])
        elif c == 'close':
            os.close(fds.pop(w[1]))
        elif c == 'flock':
            op = {'rd': fcntl.LOCK_SH, 'wr': fcntl.LOCK_EX, 'un': fcntl.LOCK_UN}[w[2]]
            if w[3] == 'nb':
                op |= fcntl.LOCK_NB
            fcntl.flock(fds[w[1]], op)
        elif c in ('posix', 'ofd'):
            wait = w[5] == 'wait'
            if c == 'posix':
                cmd = fcntl.F_SETLKW if wait else fcntl.F_SETLK
            else:
                cmd = F_OFD_SETLKW if wait else F_OFD_SETLK
            fcntl.fcntl(fds[w[1]], cmd, flk(T[w[2]], int(w[3]), int(w[4])))
        elif c == 'getlk':
            cmd = fcntl.F_GETLK if w[1] == 'posix' else F_OFD_GETLK
            r = struct.unpack('hhqqi4x', fcntl.fcntl(fds[w[2]], cmd, flk(T[w[3]], int(w[4]), int(w[5]))))
            out = 'ok %s %d %d %d' % (N[r[0]], r[2], r[3], r[4])
        elif c == 'fork':
            # A child that closes its copy of a descriptor (`close`) or
            # tries a lock through it (`posix` TYPE), then exits; answers
            # what the child saw.
            r, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                said = b'ok'
                try:
                    if w[1] == 'close':
                        os.close(fds[w[2]])
                    else:
                        fcntl.fcntl(fds[w[2]], fcntl.F_SETLK, flk(T[w[3]], 0, 0))
                except OSError as e:
                    said = ('err ' + errno.errorcode.get(e.errno, str(e.errno))).encode()
                os.write(wfd, said)
                os._exit(0)
            os.close(wfd)
            out = os.read(r, 100).decode()
            os.close(r)
            os.waitpid(pid, 0)
        elif c == 'read':
            out = 'ok ' + os.pread(fds[w[1]], 4096, 0).decode().strip().replace(' ', '_')
        else:
            out = 'err unknown'
        print(out, flush=True)
    except Interrupted:
        print('err EINTR', flush=True)
    except OSError as e:
        print('err', errno.errorcode.get(e.errno, str(e.errno)), flush=True)
"#;

/// The lines a child writes to `out`, as they come.
fn lines_of(out: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let out = BufReader::new(out);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    lines
}

/// A process that takes locks on command.
pub(crate) struct Locker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    pid: u32,
}

impl Locker {
    pub(crate) fn new() -> Locker {
        let mut child = Command::new("python3")
            .arg("-u")
            .arg("-c")
            .arg(LOCKER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        let hello = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the locker did not start");
        let pid = hello.split_whitespace().nth(1).unwrap().parse().unwrap();
        Locker {
            child,
            stdin,
            lines,
            pid,
        }
    }

    /// Sends a command without waiting for its answer.
    pub(crate) fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next answer, if one comes within `secs`.
    pub(crate) fn answer_within(&mut self, secs: f64) -> Option<String> {
        self.lines.recv_timeout(Duration::from_secs_f64(secs)).ok()
    }

    /// Runs a command that must answer within 10 s.
    pub(crate) fn run(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer_within(10.0)
            .unwrap_or_else(|| panic!("no answer to {cmd:?} within 10 s"))
    }

    pub(crate) fn ok(&mut self, cmd: &str) {
        let a = self.run(cmd);
        assert!(a.starts_with("ok"), "{cmd:?}: {a}");
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        assert_eq!(unsafe { libc::kill(self.pid as i32, sig) }, 0);
    }

    /// SIGKILL, then whether the process is gone within `secs`.
    fn kill9_gone_within(&mut self, secs: f64) -> bool {
        self.signal(libc::SIGKILL);
        wait_for(secs, || self.child.try_wait().ok().flatten().is_some())
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Flock,
    Posix,
    Ofd,
}

const KINDS: [Kind; 3] = [Kind::Flock, Kind::Posix, Kind::Ofd];

/// The command that takes (`typ` rd/wr/un) a whole-file lock of `kind`.
fn lock_cmd(kind: Kind, fd: &str, typ: &str, wait: bool) -> String {
    let w = if wait { "wait" } else { "nb" };
    match kind {
        Kind::Flock => format!("flock {fd} {typ} {w}"),
        Kind::Posix => format!("posix {fd} {typ} 0 0 {w}"),
        Kind::Ofd => format!("ofd {fd} {typ} 0 0 {w}"),
    }
}

/// Mount A and mount B over one BACKING holding `f`.
struct Two {
    a: Mount,
    b: Mount,
}

impl Two {
    fn new() -> Two {
        let a = Mount::new(&[], |b| fs::write(b.join("f"), "0123456789\n").unwrap());
        let mnt_b = a.dir().join("mnt-b");
        fs::create_dir(&mnt_b).unwrap();
        let b = Mount::with(&[]).on(&a.backing, &mnt_b, &a.dir().join("b.log"));
        Two { a, b }
    }

    /// `rel` through mount A, mount B, and natively in BACKING.
    fn sites(&self, rel: &str) -> [(&'static str, PathBuf); 3] {
        [
            ("mount A", self.a.m(rel)),
            ("mount B", self.b.m(rel)),
            ("BACKING", self.a.b(rel)),
        ]
    }
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// Threads of process `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

/// A lock held through any of the three sites refuses a contender through
/// any of them at once (EAGAIN), shared or exclusive, and lets it have the
/// lock once unlocked.
#[test]
fn a_lock_held_anywhere_refuses_a_contender_anywhere_at_once() {
    let two = Two::new();
    for kind in KINDS {
        for (hs, hp) in two.sites("f") {
            for (cs, cp) in two.sites("f") {
                let what = format!("{kind:?} held through {hs}, contender through {cs}");
                let mut h = Locker::new();
                h.ok(&format!("open x {} rw", s(&hp)));
                h.ok(&lock_cmd(kind, "x", "wr", false));
                let mut c = Locker::new();
                c.ok(&format!("open y {} rw", s(&cp)));
                for typ in ["wr", "rd"] {
                    let a = c.run(&lock_cmd(kind, "y", typ, false));
                    assert_eq!(a, "err EAGAIN", "{what}: a {typ} lock");
                }
                h.ok(&lock_cmd(kind, "x", "un", false));
                let a = c.run(&lock_cmd(kind, "y", "wr", false));
                assert_eq!(a, "ok", "{what}: after the holder unlocked");
            }
        }
    }
}

/// Shared locks stay shared across the sites; flock and POSIX locks stay
/// independent of each other, as on a local filesystem.
#[test]
fn shared_locks_are_shared_and_flock_and_posix_locks_independent() {
    let two = Two::new();
    let [(_, a), (_, b), (_, native)] = two.sites("f");
    let mut h = Locker::new();
    h.ok(&format!("open x {} rw", s(&a)));
    h.ok("flock x rd nb");
    h.ok("posix x rd 0 0 nb");
    let mut c = Locker::new();
    for (i, p) in [&b, &native].into_iter().enumerate() {
        c.ok(&format!("open y{i} {} rw", s(p)));
        c.ok(&format!("flock y{i} rd nb"));
        c.ok(&format!("posix y{i} rd 0 0 nb"));
    }
    c.ok("flock y0 un nb");
    c.ok("flock y1 un nb");
    // A's exclusive flock does not stand in the way of POSIX locks.
    h.ok("posix x un 0 0 nb");
    c.ok("posix y1 un 0 0 nb");
    h.ok("flock x wr nb");
    c.ok("posix y0 wr 20 5 nb");
    assert_eq!(c.run("flock y1 rd nb"), "err EAGAIN");
}

/// A contender that waits (F_SETLKW, F_OFD_SETLKW, flock without
/// LOCK_NB) is not granted while the lock is held, and is granted once the
/// holder unlocks — whichever sites they use.
#[test]
fn a_waiting_contender_gets_the_lock_when_the_holder_lets_go() {
    let two = Two::new();
    for kind in KINDS {
        for (hs, hp) in two.sites("f") {
            for (cs, cp) in two.sites("f") {
                let what = format!("{kind:?} held through {hs}, waiter through {cs}");
                let mut h = Locker::new();
                h.ok(&format!("open x {} rw", s(&hp)));
                h.ok(&lock_cmd(kind, "x", "wr", false));
                let mut c = Locker::new();
                c.ok(&format!("open y {} rw", s(&cp)));
                c.send(&lock_cmd(kind, "y", "wr", true));
                assert_eq!(c.answer_within(0.3), None, "{what}: granted while held");
                h.ok(&lock_cmd(kind, "x", "un", false));
                assert_eq!(
                    c.answer_within(10.0).as_deref(),
                    Some("ok"),
                    "{what}: not granted after the holder unlocked"
                );
                // And now the first one is refused.
                assert_eq!(
                    h.run(&lock_cmd(kind, "x", "rd", false)),
                    "err EAGAIN",
                    "{what}"
                );
            }
        }
    }
}

/// A signal to a process waiting for a lock through the mount interrupts
/// the wait as natively (EINTR; the process goes on), and the daemon's
/// waiting thread is gone; a waiter killed with -9 dies at once.
#[test]
fn a_signal_interrupts_a_wait_and_frees_the_daemons_thread() {
    let two = Two::new();
    let [(_, a), (_, b), (_, native)] = two.sites("f");
    let daemon = two.a.pid();
    for kind in KINDS {
        for holder in [&native, &b] {
            let mut h = Locker::new();
            h.ok(&format!("open x {} rw", s(holder)));
            h.ok(&lock_cmd(kind, "x", "wr", false));
            let mut c = Locker::new();
            c.ok(&format!("open y {} rw", s(&a)));
            c.send(&lock_cmd(kind, "y", "wr", true));
            assert_eq!(c.answer_within(0.3), None, "{kind:?}: granted while held");
            assert!(
                wait_for(5.0, || threads_named(daemon, "lock-wait") == 1),
                "{kind:?}: the daemon has {} waiting threads, not 1",
                threads_named(daemon, "lock-wait")
            );
            c.signal(libc::SIGUSR1);
            assert_eq!(
                c.answer_within(5.0).as_deref(),
                Some("err EINTR"),
                "{kind:?}: the wait did not end with EINTR"
            );
            assert!(
                wait_for(5.0, || threads_named(daemon, "lock-wait") == 0),
                "{kind:?}: the daemon's waiting thread stays after the interrupt"
            );
            // The process goes on, and the lock is still the holder's.
            assert_eq!(c.run(&lock_cmd(kind, "y", "wr", false)), "err EAGAIN");
            // kill -9 while waiting: the process dies at once.
            c.send(&lock_cmd(kind, "y", "wr", true));
            assert_eq!(c.answer_within(0.3), None);
            assert!(
                c.kill9_gone_within(5.0),
                "{kind:?}: a waiter killed with -9 still lives after 5 s"
            );
            assert!(
                wait_for(5.0, || threads_named(daemon, "lock-wait") == 0),
                "{kind:?}: the daemon's waiting thread stays after the waiter died"
            );
            // And its holder lets go: the lock is free for all.
            h.ok(&lock_cmd(kind, "x", "un", false));
            let mut n = Locker::new();
            n.ok(&format!("open z {} rw", s(&native)));
            n.ok(&lock_cmd(kind, "z", "wr", false));
        }
    }
}

/// Through the mount, locks go when natively they would: a POSIX lock at
/// the owner's close of any descriptor of the file; an OFD lock and a
/// flock at the last close of their open file (not before).
#[test]
fn locks_go_at_close_as_natively() {
    let two = Two::new();
    let [(_, a), (_, b), (_, native)] = two.sites("f");
    let mut c = Locker::new();
    c.ok(&format!("open n {} rw", s(&native)));
    c.ok(&format!("open m {} rw", s(&b)));
    for kind in KINDS {
        let mut h = Locker::new();
        h.ok(&format!("open x {} rw", s(&a)));
        h.ok(&lock_cmd(kind, "x", "wr", false));
        // A second descriptor of the same file, read-only, opened and
        // closed; then a copy of the first, closed.
        for (open, close) in [
            (format!("open other {} ro", s(&a)), "close other"),
            ("dup copy x".to_owned(), "close copy"),
        ] {
            h.ok(&open);
            h.ok(close);
            let after = c.run(&lock_cmd(kind, "n", "wr", false));
            match kind {
                // Natively too, closing any descriptor drops the owner's locks.
                Kind::Posix => {
                    assert_eq!(after, "ok", "POSIX lock kept after {close:?}");
                    c.ok(&lock_cmd(kind, "n", "un", false));
                    h.ok(&lock_cmd(kind, "x", "wr", false));
                }
                _ => assert_eq!(after, "err EAGAIN", "{kind:?} lost at {close:?}"),
            }
        }
        h.ok("close x");
        // The open file's last close: RELEASE comes soon after close(2).
        let free = wait_for(5.0, || c.run(&lock_cmd(kind, "m", "wr", false)) == "ok");
        assert!(free, "{kind:?}: still held after the last close");
        c.ok(&lock_cmd(kind, "m", "un", false));
    }
}

/// fork(2): a child neither inherits its parent's POSIX locks (its own
/// lock through the inherited descriptor conflicts with them) nor drops
/// them by closing its copy of the descriptor or by exiting; OFD locks and
/// flocks belong to the open file, which the parent still holds.
#[test]
fn a_forked_child_neither_inherits_nor_drops_its_parents_locks() {
    let two = Two::new();
    let [(_, a), _, (_, native)] = two.sites("f");
    let mut c = Locker::new();
    c.ok(&format!("open n {} rw", s(&native)));
    for kind in KINDS {
        let mut h = Locker::new();
        h.ok(&format!("open x {} rw", s(&a)));
        h.ok(&lock_cmd(kind, "x", "wr", false));
        if kind == Kind::Posix {
            assert_eq!(
                h.run("fork posix x wr"),
                "err EAGAIN",
                "a child got its parent's POSIX lock"
            );
        }
        assert_eq!(h.run("fork close x"), "ok");
        assert_eq!(
            c.run(&lock_cmd(kind, "n", "wr", false)),
            "err EAGAIN",
            "{kind:?}: the parent's lock went with a child's close and exit"
        );
        h.ok("close x");
        let free = wait_for(5.0, || c.run(&lock_cmd(kind, "n", "wr", false)) == "ok");
        assert!(free, "{kind:?}: still held after the parent's close");
        c.ok(&lock_cmd(kind, "n", "un", false));
    }
}

/// xfstests generic/478's case: descriptors of a raw file the kernel reads
/// by passthrough (read-only, 128 KiB or more) close through the daemon
/// too, so a POSIX lock goes at its owner's close of any descriptor of the
/// file, another one or a copy, as natively.
#[test]
fn a_passthrough_readers_close_releases_its_owners_posix_locks() {
    let m = Mount::new(&[], |b| {
        fs::write(
            b.join("big.bin"),
            crate::support::mount::random_disk(512 << 10, 3),
        )
        .unwrap()
    });
    let (via, native) = (s(&m.m("big.bin")), s(&m.b("big.bin")));
    let mut c = Locker::new();
    c.ok(&format!("open n {native} rw"));
    let mut h = Locker::new();
    h.ok(&format!("open x {via} ro"));
    let mut head = [0u8; 4096];
    std::io::Read::read_exact(&mut fs::File::open(m.m("big.bin")).unwrap(), &mut head).unwrap();
    assert_eq!(m.requests("read"), 0, "not read by passthrough");
    for (open, close) in [
        (format!("open other {via} ro"), "close other"),
        ("dup copy x".to_owned(), "close copy"),
    ] {
        h.ok("posix x rd 0 0 nowait");
        assert_eq!(
            c.run("posix n wr 0 0 nowait"),
            "err EAGAIN",
            "no lock in BACKING"
        );
        h.ok(&open);
        h.ok(close);
        assert_eq!(
            c.run("posix n wr 0 0 nowait"),
            "ok",
            "the POSIX lock was kept after {close:?}"
        );
        c.ok("posix n un 0 0 nowait");
    }
}

/// A holder killed with -9 loses every lock, as at a native exit.
#[test]
fn locks_go_when_the_holder_is_killed() {
    let two = Two::new();
    for k in ["p", "o", "l"] {
        fs::write(two.a.b(k), "x\n").unwrap();
    }
    let mut h = Locker::new();
    let cmds = [(Kind::Posix, "p"), (Kind::Ofd, "o"), (Kind::Flock, "l")];
    for (kind, f) in cmds {
        h.ok(&format!("open {f} {} rw", s(&two.a.m(f))));
        h.ok(&lock_cmd(kind, f, "wr", false));
    }
    let mut c = Locker::new();
    for (kind, f) in cmds {
        c.ok(&format!("open n{f} {} rw", s(&two.a.b(f))));
        c.ok(&format!("open b{f} {} rw", s(&two.b.m(f))));
        assert_eq!(
            c.run(&lock_cmd(kind, &format!("n{f}"), "wr", false)),
            "err EAGAIN"
        );
    }
    assert!(h.kill9_gone_within(5.0));
    for (kind, f) in cmds {
        let free = wait_for(5.0, || {
            c.run(&lock_cmd(kind, &format!("n{f}"), "wr", false)) == "ok"
        });
        assert!(
            free,
            "{kind:?} still held natively after the holder was killed"
        );
        c.ok(&lock_cmd(kind, &format!("n{f}"), "un", false));
        assert_eq!(c.run(&lock_cmd(kind, &format!("b{f}"), "wr", false)), "ok");
    }
}

/// One owner's POSIX locks merge, split and convert by range through the
/// mount as natively, and F_GETLK names the holder: its pid through the
/// same mount, a native POSIX holder's pid, 0 for a lock held through
/// another mount (`man cutf8fs`, LOCKS).
#[test]
fn record_locks_split_by_range_and_getlk_names_the_holder() {
    let two = Two::new();
    let [(_, a), (_, b), (_, native)] = two.sites("f");
    let mut h = Locker::new();
    h.ok(&format!("open x {} rw", s(&a)));
    h.ok("posix x wr 0 100 nb");
    h.ok("posix x un 40 20 nb");
    let mut c = Locker::new();
    c.ok(&format!("open n {} rw", s(&native)));
    c.ok(&format!("open a {} rw", s(&a)));
    c.ok(&format!("open b {} rw", s(&b)));
    for fd in ["n", "a", "b"] {
        assert_eq!(
            c.run(&format!("posix {fd} wr 45 5 nb")),
            "ok",
            "{fd}: the hole"
        );
        c.ok(&format!("posix {fd} un 45 5 nb"));
        for at in [10, 70] {
            assert_eq!(
                c.run(&format!("posix {fd} wr {at} 5 nb")),
                "err EAGAIN",
                "{fd} at {at}"
            );
        }
    }
    // Downgraded in place: shared now.
    h.ok("posix x rd 0 100 nb");
    c.ok("posix a rd 10 5 nb");
    assert_eq!(c.run("posix b wr 70 5 nb"), "err EAGAIN");
    c.ok("posix a un 0 0 nb");
    // F_GETLK through the same mount names the holder's pid.
    let want = format!("ok rd 0 100 {}", h.pid);
    assert_eq!(c.run("getlk posix a wr 0 0"), want);
    // Through another mount: held elsewhere, pid 0.
    assert_eq!(c.run("getlk posix b wr 0 0"), "ok rd 0 100 0");
    h.ok("posix x un 0 0 nb");
    // A native POSIX holder's pid shows through the mount.
    let mut n = Locker::new();
    n.ok(&format!("open x {} rw", s(&native)));
    n.ok("posix x wr 5 1 nb");
    assert_eq!(
        c.run("getlk posix a rd 0 0"),
        format!("ok wr 5 1 {}", n.pid)
    );
    assert_eq!(c.run("getlk posix a rd 6 0"), "ok un 6 0 0");
}

/// SQLite in rollback-journal mode with a writer on each of two mounts of
/// one BACKING: every transaction lands and the database stays whole.
#[test]
fn sqlite_with_writers_on_two_mounts_stays_whole() {
    let two = Two::new();
    let init = Command::new("sqlite3")
        .arg(two.a.b("db"))
        .arg("PRAGMA journal_mode=DELETE; CREATE TABLE t(k TEXT PRIMARY KEY, v BLOB);")
        .output()
        .expect("sqlite3 (scripts/setup.sh installs it)");
    assert!(init.status.success(), "{init:?}");
    const N: usize = 150;
    let writer = |db: PathBuf, tag: &'static str| {
        std::thread::spawn(move || {
            let mut script = String::from(".timeout 60000\nPRAGMA journal_mode=DELETE;\n");
            for i in 0..N {
                script += &format!(
                    "BEGIN IMMEDIATE; INSERT INTO t VALUES('{tag}{i}', randomblob(3000)); \
                     UPDATE t SET v = randomblob(500) WHERE k = '{tag}{}'; COMMIT;\n",
                    i / 2
                );
            }
            let mut child = Command::new("sqlite3")
                .arg("-bail")
                .arg(&db)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
    };
    let wa = writer(two.a.m("db"), "a");
    let wb = writer(two.b.m("db"), "b");
    for (w, name) in [(wa, "A"), (wb, "B")] {
        let out = w.join().unwrap();
        assert!(
            out.status.success(),
            "writer through mount {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let check = Command::new("sqlite3")
        .arg(two.a.b("db"))
        .arg("PRAGMA integrity_check; SELECT count(*) FROM t; SELECT count(*) FROM t WHERE k LIKE 'a%';")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout);
    assert_eq!(out, format!("ok\n{}\n{N}\n", 2 * N), "{check:?}");
}

/// Waits for `n` flocks at once on one file, as one uid: one open file
/// and one thread each; "started" once all are open, then "granted" or
/// "err ERRNO-NAME" a line as each wait ends.
const WAITERS: &str = r#"
import errno, fcntl, os, sys, threading
path, n = sys.argv[1], int(sys.argv[2])
def wait(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        out = 'granted'
    except OSError as e:
        out = 'err ' + errno.errorcode.get(e.errno, str(e.errno))
    # One write(2) a line: lines of two threads never mix.
    os.write(1, (out + '\n').encode())
fds = [os.open(path, os.O_RDWR) for _ in range(n)]
print('started', flush=True)
for fd in fds:
    threading.Thread(target=wait, args=(fd,), daemon=True).start()
sys.stdin.read()
"#;

/// A process of uid `uid` (no user entry needed) with `n` flocks waiting.
struct Waiters {
    child: Child,
    lines: mpsc::Receiver<String>,
    refused: usize,
}

impl Waiters {
    fn new(uid: u32, path: &Path, n: usize) -> Waiters {
        let mut child = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            // The system python3: a user may not reach root's own.
            .args(["--", "/usr/bin/python3", "-u", "-c", WAITERS])
            .arg(path)
            .arg(n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv /usr/bin/python3");
        let lines = lines_of(child.stdout.take().unwrap());
        let hello = lines.recv_timeout(Duration::from_secs(20));
        assert_eq!(
            hello.as_deref(),
            Ok("started"),
            "uid {uid}: {n} waiters did not start"
        );
        Waiters {
            child,
            lines,
            refused: 0,
        }
    }

    /// Waits refused (ENOLCK) so far; any other end is a failure.
    fn refused(&mut self) -> usize {
        while let Ok(l) = self.lines.try_recv() {
            assert_eq!(l, "err ENOLCK", "a wait ended otherwise");
            self.refused += 1;
        }
        self.refused
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Four users each waiting for as many locks as one user may (man
/// cutf8fs, LOCKS) leave room for a fifth user's wait: it waits, as it
/// would natively, rather than failing with ENOLCK.
#[test]
fn four_users_waiting_leave_room_for_a_fifth() {
    use std::os::unix::fs::PermissionsExt;
    const PER_USER: usize = 128;
    let m = Mount::new(&["allow_other"], |b| {
        fs::write(b.join("f"), "x\n").unwrap();
        fs::set_permissions(b.join("f"), fs::Permissions::from_mode(0o666)).unwrap();
    });
    let daemon = m.pid();
    let mut holder = Locker::new();
    holder.ok(&format!("open x {} rw", s(&m.b("f"))));
    holder.ok(&lock_cmd(Kind::Flock, "x", "wr", false));
    let mut heavy: Vec<Waiters> = (0..4)
        .map(|i| Waiters::new(61_001 + i, &m.m("f"), PER_USER))
        .collect();
    // Every one of their waits is on a thread of the daemon's or refused.
    let settled = wait_for(60.0, || {
        let refused: usize = heavy.iter_mut().map(Waiters::refused).sum();
        threads_named(daemon, "lock-wait") + refused == 4 * PER_USER
    });
    let waiting = threads_named(daemon, "lock-wait");
    assert!(
        settled,
        "the four users' waits did not settle: {waiting} waiting, {} refused",
        heavy.iter_mut().map(Waiters::refused).sum::<usize>()
    );
    let mut fifth = Waiters::new(61_005, &m.m("f"), 1);
    // Its answer, either way: refused, or waiting on a thread of the daemon's.
    wait_for(30.0, || {
        fifth.refused() > 0 || threads_named(daemon, "lock-wait") == waiting + 1
    });
    assert_eq!(
        fifth.refused(),
        0,
        "a fifth user's wait failed with ENOLCK ({waiting} waiting for four users)"
    );
    assert!(
        threads_named(daemon, "lock-wait") == waiting + 1,
        "the fifth user's wait is not on a thread of the daemon's"
    );
    eprintln!("four users: {waiting} of their waits at once; a fifth user's waits too");
}
