//! Root's programs over a tree a user owns, attacked by that user where
//! `migrate_redteam` does not look: `cutf8 check` walking the tree while
//! its owner changes it, the index database (`.cutf8fs-index`) planted,
//! swapped or forged by the owner of BACKING against the root daemon and
//! root's migrate, a FUSE filesystem the user mounts inside the tree, and
//! trees deeper and names longer than the kernel's path limit (man/cutf8.1
//! and man/cutf8fs.1 SECURITY; `crate::trust` in the library holds the
//! argument).
//!
//! The attacker is the real unprivileged `cutf8t-a`, who owns the tree;
//! root keeps files beside it (`outside/`, 0711) that must stay unread and
//! unchanged.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::migrate_security::{chmod, Fixture};
use crate::support::cli::BIN;
use crate::support::users::{sh_as, user};

/// What this file adds to `migrate_security`'s fixture.
impl Fixture {
    /// Starts `script` as the user in the background (`$1` the tree, `$2`
    /// the outside directory); stopped when the guard drops.
    fn as_a_meanwhile(&self, script: &str) -> Background {
        let child = Command::new("setpriv")
            .arg(format!("--reuid={}", self.a.uid))
            .arg(format!("--regid={}", self.a.gid))
            .arg("--init-groups")
            .args(["--", "sh", "-c", script, "sh"])
            .arg(&self.tree)
            .arg(&self.outside)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("setpriv sh");
        Background(child)
    }
}

/// A process of the user's, killed (its own pid) when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `cmd` as root with at most `limit` to finish: its output, or None
/// when it did not finish (it is killed).
fn run_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

use crate::support::run::shown;

// ------------------------------------------------------------ cutf8 check

/// Root runs `cutf8 check` over the user's tree while the user keeps
/// turning its files into FIFOs and symbolic links to root's file, and a
/// directory into a symbolic link to root's directory. The check lists the
/// tree first and reads the files after; it must never block on a FIFO
/// (before: it opened each file by path, and a FIFO put there after the
/// listing hung root's check forever), never read root's file (a tab and
/// a carriage return in it would show as findings) and never list root's
/// directory (its file `inner` would be named).
#[test]
fn check_over_a_changing_tree_neither_hangs_nor_leaves_it() {
    let fx = Fixture::new();
    fs::write(fx.outside.join("secret"), "root\tsecret\r\n").unwrap();
    chmod(&fx.outside.join("secret"), 0o600);
    fs::create_dir(fx.outside.join("dir")).unwrap();
    chmod(&fx.outside.join("dir"), 0o755);
    fs::write(fx.outside.join("dir/inner"), "inner\tfile\r\n").unwrap();
    chmod(&fx.outside.join("dir/inner"), 0o644);
    // A large first file: what the check lists is opened a while later.
    fx.as_a_checked(
        "head -c 48000000 /dev/zero | tr '\\0' x > a; mkdir sub; printf 'real\\n' > sub/real",
        &[],
    );
    let _swap = fx.as_a_meanwhile(
        r#"cd "$1" || exit 1
        n=$(seq 0 39)
        for i in $n; do printf 'text\n' > z$i; done
        # The sleeps pace the swaps (each state held a while), no event.
        while :; do
          for i in $n; do mkfifo f$i 2>/dev/null; mv -T f$i z$i; done
          mv sub held; ln -s "$2/dir" sub
          sleep 0.15
          for i in $n; do printf 'text\n' > r$i; mv -T r$i z$i; done
          rm sub; mv held sub
          sleep 0.15
          for i in $n; do ln -sf "$2/secret" l$i; mv -T l$i z$i; done
          sleep 0.15
          for i in $n; do printf 'text\n' > r$i; mv -T r$i z$i; done
          sleep 0.15
        done"#,
    );
    // The swapping under way: `sub` a link to root's directory.
    crate::support::mount::wait_until("swap by the user's script", 30.0, || {
        fs::symlink_metadata(fx.tree.join("sub")).is_ok_and(|m| m.file_type().is_symlink())
    });
    let mut refused = 0;
    for run in 0..5 {
        let out = run_within(
            Command::new(BIN).arg("check").arg(&fx.tree),
            Duration::from_secs(8),
        )
        .unwrap_or_else(|| panic!("run {run}: root's cutf8 check hung on the user's tree"));
        let text = shown(&out);
        for leak in ["[tab]", "[carriage-return]", "inner"] {
            assert!(
                !text.contains(leak),
                "run {run}: root's check read outside the tree ({leak}):\n{text}"
            );
        }
        refused +=
            text.matches("replaced during the run").count() + text.matches("symbolic link").count();
    }
    // The attack landed: some file was something else when it was opened.
    assert!(
        refused > 0,
        "no file was ever replaced between list and read"
    );
}

// ------------------------------------------------------------ index database

const ROOTS_DATA: &[u8] = b"root's own file, named index.sqlite; not a database\n";

/// Makes `dir/keep` (root's, 0755) holding `index.sqlite` (root's, of
/// `mode`, [`ROOTS_DATA`]): a directory of root's in a directory the user
/// writes.
fn roots_keep(dir: &Path, mode: u32) -> PathBuf {
    let keep = dir.join("keep");
    fs::create_dir(&keep).unwrap();
    chmod(&keep, 0o755);
    fs::write(keep.join("index.sqlite"), ROOTS_DATA).unwrap();
    chmod(&keep.join("index.sqlite"), mode);
    keep
}

/// The modes of root's file: 0600 is the one the database is created
/// with (such a file was once taken for a database with a damaged header).
const ROOTS_MODES: [u32; 2] = [0o644, 0o600];

/// The owner of BACKING's root renames a directory of root's there (one
/// holding a file of root's named `index.sqlite`) to `.cutf8fs-index`: owner,
/// mode, link count and device are what the database's place asks for.
/// The root daemon must leave root's file as it is (before: it took the
/// file for a damaged database and emptied it, rebuilding it as one) and
/// still serve the tree.
#[test]
fn the_daemon_leaves_roots_file_in_a_directory_renamed_to_the_index_place() {
    let a = user("cutf8t-a");
    for mode in ROOTS_MODES {
        let m = crate::support::mount::Mount::new(&[], |b| {
            chmod(b.parent().unwrap(), 0o755);
            std::os::unix::fs::chown(b, Some(a.uid), Some(a.gid)).unwrap();
            fs::write(b.join("text"), crate::support::mount::corrected(b"hello\n")).unwrap();
            roots_keep(b, mode);
            let out = sh_as(a, "cd \"$1\" && mv keep .cutf8fs-index", &[b.as_os_str()]);
            crate::support::run::succeeded(&out, format_args!("as the user: mv"));
        });
        assert_eq!(fs::read(m.m("text")).unwrap(), b"hello\n");
        let held = m.b(".cutf8fs-index/index.sqlite");
        assert_eq!(
            fs::read(&held).unwrap(),
            ROOTS_DATA,
            "the daemon rewrote root's file of mode {mode:o}:\n{}",
            m.log_text()
        );
        assert!(
            m.log_text().contains("not a database"),
            "no line says why the database is not used (mode {mode:o}):\n{}",
            m.log_text()
        );
    }
}

/// The same against root's `cutf8 migrate`: the user renames root's
/// directory in their tree to `.cutf8fs-index`, where migrate records the
/// files it converted. Root's file must stay as it is (before: emptied and
/// made a database).
#[test]
fn migrate_leaves_roots_file_in_a_directory_renamed_to_the_index_place() {
    for mode in ROOTS_MODES {
        let fx = Fixture::new();
        roots_keep(&fx.tree, mode);
        // Large enough for migrate to record it.
        fx.as_a_checked(
            "i=0; while [ $i -lt 9000 ]; do echo 'Grüße, eine Zeile'; i=$((i+1)); done > big.txt; \
             mv keep .cutf8fs-index",
            &[],
        );
        let out = Command::new(BIN)
            .arg("migrate")
            .arg(&fx.tree)
            .env("CUTF8FS_RACY_MARGIN_MS", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", shown(&out));
        assert!(fs::read(fx.tree.join("big.txt"))
            .unwrap()
            .starts_with(&cutf8::MAGIC));
        assert_eq!(
            fs::read(fx.tree.join(".cutf8fs-index/index.sqlite")).unwrap(),
            ROOTS_DATA,
            "root's migrate rewrote root's file of mode {mode:o}:\n{}",
            shown(&out)
        );
    }
}

// ------------------------------------------------------------ a FUSE mount inside

/// A FUSE filesystem mounted inside BACKING whose server stops answering
/// (here bindfs, `-o allow_other`, stopped with SIGSTOP; a user's own FUSE
/// mount needs `user_allow_other` in /etc/fuse.conf for root to reach it
/// at all, else the kernel answers root EACCES without asking its server,
/// and a hard NFS or sshfs mount whose server is gone does the same). Only
/// requests that touch it may wait, as they would natively; another
/// user's read of another file must still be answered.
///
/// Each lookup or stat of the stopped mount's root holds a thread of the
/// daemon's in the kernel; once every thread has been inside one request
/// for a second, the request loop adds one (`fuser::STALL`, at most
/// `STALLED_THREADS` more). Before, the fixed pool of two threads was
/// taken by two such requests and nobody's request was answered.
#[test]
fn a_hung_fuse_mount_inside_backing_stops_only_its_own_requests() {
    let b = user("cutf8t-b");
    let m = crate::support::mount::Mount::new(&["allow_other"], |bk| {
        chmod(bk.parent().unwrap(), 0o755);
        fs::create_dir(bk.join("inner")).unwrap();
        fs::create_dir(bk.join("src")).unwrap();
        fs::write(bk.join("g.txt"), "hello\n").unwrap();
        chmod(&bk.join("g.txt"), 0o644);
    });
    let mut server = Command::new("bindfs")
        .args(["-f", "-o", "allow_other"])
        .arg(m.b("src"))
        .arg(m.b("inner"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("bindfs (scripts/setup.sh)");
    // Any type (`is_mounted` knows only cutf8fs's).
    let inner = m.b("inner").to_string_lossy().replace(' ', "\\040");
    assert!(
        crate::support::mount::wait_for(5.0, || {
            fs::read_to_string("/proc/self/mountinfo")
                .unwrap_or_default()
                .lines()
                .any(|l| l.split(' ').nth(4) == Some(inner.as_str()))
        }),
        "bindfs did not mount"
    );
    let pid = server.id().to_string();
    let signal = |sig: &str| {
        let out = Command::new("kill").arg(sig).arg(&pid).output().unwrap();
        assert!(out.status.success(), "kill {sig} {pid}: {out:?}");
    };
    // The mount point looked up first: then lookups of different names
    // in it reach the daemon side by side (the kernel sends one lookup of
    // a name at a time, and caches what it was told for minutes while
    // BACKING is watched), each holding a thread there.
    assert!(fs::read_dir(m.m("inner")).unwrap().count() == 0);
    signal("-STOP");
    let mut stuck: Vec<Child> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            Command::new("stat")
                .arg(m.m("inner").join(name))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // The stuck lookups hold the daemon's two threads in the stopped
    // server's requests.
    let daemon = m.pid();
    crate::support::mount::wait_until("two daemon threads stuck in the inner mount", 30.0, || {
        crate::support::mount::threads_in_fuse_requests(daemon) >= 2
    });
    let other = run_within(
        Command::new("setpriv")
            .arg(format!("--reuid={}", b.uid))
            .arg(format!("--regid={}", b.gid))
            .args(["--clear-groups", "--", "cat"])
            .arg(m.m("g.txt")),
        Duration::from_secs(5),
    );
    // Let everything go before asserting: the server answers again, the
    // stuck requests end, the inner mount goes.
    signal("-CONT");
    for c in &mut stuck {
        let _ = c.wait();
    }
    let _ = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(m.b("inner"))
        .status();
    let _ = server.kill();
    let _ = server.wait();
    let other = other.expect("another user's read of another file hung behind the stopped mount");
    assert_eq!(other.stdout, b"hello\n", "{}", shown(&other));
    assert!(
        m.log_text().contains("added one"),
        "no line says a thread was added:\n{}",
        m.log_text()
    );
}
