//! The one mount guard: [`Mount`] starts the built `cutf8fs` in the
//! foreground, waits until the kernel lists the mount, unmounts on drop, and
//! prints the daemon's log (its stderr and any `-o log=FILE`) when the test
//! panicked; a daemon that panicked fails a test that did not. It mounts a
//! fresh temporary BACKING ([`Mount::new`]) or one the test chose
//! ([`Start::on`]: a tmpfs, a read-only bind), and can `kill -9` the daemon
//! and mount the same BACKING again ([`Mount::kill9`], [`Mount::remount`]).
//! [`Mount::with`] sets the daemon's environment and descriptor limit for
//! that daemon alone (the tests share one process). FUSE missing is a
//! failure, never a skip.
//!
//! Also: writing corrected files and computing their expected view with the
//! codec's one-shot functions (never through the mount), and finding the
//! peer suites' tools.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Held by a test while it installs /sbin/mount.fuse.cutf8fs for mount(8)
/// (`mount::`), or needs the host's /sbin not to change under it (the
/// package test lists the files of an overlay on the host's root).
pub static SBIN_HELPER: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub const BIN: &str = env!("CARGO_BIN_EXE_cutf8fs");

/// Whether `mnt` is listed as a cutf8fs mount in /proc/self/mountinfo.
pub fn is_mounted(mnt: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4 && f[4] == want && l.contains(" - fuse.cutf8fs ")
    })
}

/// Waits up to `secs` for `cond`.
pub fn wait_for(secs: f64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `secs` for `cond`, the observable sign of an event;
/// panics naming `what` if it never came.
pub fn wait_until(what: &str, secs: f64, cond: impl FnMut() -> bool) {
    assert!(wait_for(secs, cond), "no {what} within {secs} s");
}

/// How many threads of process `pid` sleep in the kernel waiting for a
/// FUSE server's answer (their `wchan`), whichever mount it is.
pub fn threads_in_fuse_requests(pid: u32) -> usize {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| {
                w == "request_wait_answer" || w.starts_with("fuse_") || w.contains("fuse_simple")
            })
        })
        .count()
}

/// Whether process `pid` has ended (a zombie, or reaped).
pub fn ended(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
    })
}

/// Lazily detaches whatever is mounted at `mnt` (a killed daemon's mount).
pub fn lazy_unmount(mnt: &Path) {
    let ok = Command::new("fusermount3")
        .arg("-uz")
        .arg(mnt)
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(mnt)
            .stderr(Stdio::null())
            .status();
    }
}

/// How to start a daemon: `-o` options, extra environment, descriptor
/// limit. Made by [`Mount::with`]; kept by the [`Mount`] for
/// [`Mount::remount`].
#[derive(Clone, Debug, Default)]
pub struct Start {
    opts: Vec<String>,
    env: Vec<(String, String)>,
    nofile: Option<u64>,
}

impl Start {
    /// Sets `key=value` in this daemon's environment only.
    pub fn env(mut self, key: &str, value: &str) -> Start {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts this daemon with RLIMIT_NOFILE `n` (soft and hard).
    pub fn nofile(mut self, n: u64) -> Start {
        self.nofile = Some(n);
        self
    }

    /// Fresh BACKING in a temporary directory, filled by `setup`.
    pub fn fresh(self, setup: impl FnOnce(&Path)) -> Mount {
        self.fresh_in(&std::env::temp_dir(), setup)
    }

    /// [`Start::fresh`] with the temporary directory made in `parent`.
    pub fn fresh_in(self, parent: &Path, setup: impl FnOnce(&Path)) -> Mount {
        let dir = tempfile::Builder::new()
            .prefix("cutf8fs-test-")
            .tempdir_in(parent)
            .expect("temp dir");
        let backing = dir.path().join("backing");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&backing).unwrap();
        fs::create_dir(&mnt).unwrap();
        setup(&backing);
        let log = dir.path().join("daemon.log");
        let mut m = self.on(&backing, &mnt, &log);
        m.tmp = Some(dir);
        m
    }

    /// Mounts `backing` at `mnt` (both exist), appending the daemon's
    /// output to `log` (keep it outside BACKING: a full BACKING must not
    /// lose it).
    pub fn on(self, backing: &Path, mnt: &Path, log: &Path) -> Mount {
        self.try_on(backing, mnt, log)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Start::on`], or what the daemon said when it exited instead of
    /// mounting (its output since this start).
    pub fn try_on(self, backing: &Path, mnt: &Path, log: &Path) -> Result<Mount, String> {
        let mut m = Mount {
            backing: backing.to_path_buf(),
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
            start: self,
            child: None,
            tmp: None,
        };
        m.spawn().map(|()| m)
    }
}

/// A running cutf8fs.
pub struct Mount {
    pub backing: PathBuf,
    pub mnt: PathBuf,
    /// The daemon's stdout and stderr, appended.
    pub log: PathBuf,
    start: Start,
    child: Option<Child>,
    /// Last field: removed after [`Drop::drop`] unmounted.
    tmp: Option<tempfile::TempDir>,
}

impl Mount {
    /// Fresh BACKING, filled by `setup` before mounting with `opts`.
    pub fn new(opts: &[&str], setup: impl FnOnce(&Path)) -> Mount {
        Mount::with(opts).fresh(setup)
    }

    /// [`Mount::new`] with the temporary directory made in `parent`.
    pub fn new_in(parent: &Path, opts: &[&str], setup: impl FnOnce(&Path)) -> Mount {
        Mount::with(opts).fresh_in(parent, setup)
    }

    /// A daemon with `opts`, to be started by [`Start`]'s methods.
    pub fn with(opts: &[&str]) -> Start {
        Start {
            opts: opts.iter().map(|o| o.to_string()).collect(),
            ..Start::default()
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let logf = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("daemon log {}: {e}", self.log.display()));
        let since = logf.metadata().map_or(0, |m| m.len()) as usize;
        let mut cmd = Command::new(BIN);
        cmd.arg("-f").arg(&self.backing).arg(&self.mnt);
        for o in &self.start.opts {
            cmd.arg("-o").arg(o);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        for (k, v) in &self.start.env {
            cmd.env(k, v);
        }
        if let Some(n) = self.start.nofile {
            super::run::limit_nofile(&mut cmd, n);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("cannot start cutf8fs");
        self.child = Some(child);
        let mnt = self.mnt.clone();
        let mut exited = None;
        let up = wait_for(20.0, || {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                exited = Some(st);
                return true;
            }
            is_mounted(&mnt)
        });
        if let Some(st) = exited {
            self.child = None;
            let log = self.log_text();
            return Err(format!(
                "cutf8fs exited before mounting ({st}); is FUSE available? log:\n{}",
                log.get(since..).unwrap_or(&log)
            ));
        }
        assert!(
            up,
            "cutf8fs did not mount within 20 s; log:\n{}",
            self.log_text()
        );
        Ok(())
    }

    /// The daemon's output (and its `-o log=FILE`, if given).
    pub fn log_text(&self) -> String {
        let mut s = fs::read_to_string(&self.log).unwrap_or_default();
        for o in &self.start.opts {
            for f in o.split(',').filter_map(|o| o.strip_prefix("log=")) {
                s += &format!("--- log={f} ---\n");
                s += &fs::read_to_string(f).unwrap_or_default();
            }
        }
        s
    }

    /// Path inside the mount.
    pub fn m(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Path inside BACKING.
    pub fn b(&self, rel: &str) -> PathBuf {
        self.backing.join(rel)
    }

    /// The directory holding BACKING (a temporary one for [`Mount::new`]).
    pub fn dir(&self) -> &Path {
        self.backing.parent().expect("BACKING has a parent")
    }

    /// Unmounts and waits for the daemon; returns its exit status.
    pub fn unmount(&mut self) -> Option<ExitStatus> {
        if is_mounted(&self.mnt) {
            let ok = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                lazy_unmount(&self.mnt);
            }
        }
        let mut child = self.child.take()?;
        let mut status = None;
        wait_for(10.0, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_none() {
            let _ = child.kill();
            status = child.wait().ok();
            eprintln!("cutf8fs did not exit after unmount; killed");
        }
        status
    }

    /// SIGKILL to the daemon, reaped; then the dead mount is detached.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        lazy_unmount(&self.mnt);
        wait_for(10.0, || !is_mounted(&self.mnt));
    }

    /// Mounts the same BACKING again, as it was started (after
    /// [`Mount::kill9`] or [`Mount::unmount`]).
    pub fn remount(&mut self) {
        assert!(self.child.is_none(), "remount: the daemon still runs");
        self.spawn().unwrap_or_else(|e| panic!("remount: {e}"));
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Bytes the daemon's read calls have returned so far (`rchar` of
    /// /proc/PID/io): what it read of BACKING, its database included.
    pub fn rchar(&self) -> u64 {
        let io = fs::read_to_string(format!("/proc/{}/io", self.pid())).expect("/proc/PID/io");
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("rchar")
    }

    /// The daemon's statistics report (`cutf8fs --stats`).
    pub fn stats_text(&self) -> String {
        let out = Command::new(BIN)
            .arg("--stats")
            .arg(&self.mnt)
            .output()
            .unwrap();
        crate::support::run::succeeded(&out, "cutf8fs --stats");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One count of the daemon's statistics (`cutf8fs --stats`): the
    /// number on its line named `what` ("scans", "read", "flush", …).
    pub fn stats_count(&self, what: &str) -> u64 {
        let text = self.stats_text();
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(what)?.strip_prefix(' '))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {what} count in:\n{text}"))
    }

    /// How many requests of kind `op` ("open", "release", …: the names in
    /// `cutf8fs --stats`, which lists only kinds asked at least once) the
    /// daemon has answered.
    pub fn requests(&self, op: &str) -> u64 {
        const KINDS: &[&str] = &[
            "lookup",
            "getattr",
            "open",
            "read",
            "write",
            "flush",
            "release",
            "opendir",
            "readdir",
            "readdirplus",
            "releasedir",
            "getxattr",
        ];
        assert!(KINDS.contains(&op), "not a request kind counted: {op}");
        let text = self.stats_text();
        assert!(
            text.contains("\nrequests "),
            "no request counts in:\n{text}"
        );
        text.lines()
            .find_map(|l| l.strip_prefix("  ")?.strip_prefix(op)?.strip_prefix(' '))
            .map_or(0, |l| l.trim().parse().expect("a count"))
    }

    /// Lets the test drive the daemon's end itself.
    pub fn take_child(&mut self) -> Option<Child> {
        self.child.take()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let status = self.unmount();
        let log = self.log_text();
        if std::thread::panicking() {
            eprintln!(
                "--- cutf8fs log ({}; exit {status:?}) ---\n{log}--- end of log ---",
                self.mnt.display(),
            );
        } else if log.contains("panicked") {
            // A panic in a worker thread may leave the mount half alive.
            panic!("the cutf8fs daemon panicked:\n{log}");
        }
    }
}

/// `MAGIC` followed by `disk`.
pub fn corrected(disk: &[u8]) -> Vec<u8> {
    let mut v = cutf8::MAGIC.to_vec();
    v.extend_from_slice(disk);
    v
}

/// The view the mount must show for a backing file's bytes.
pub fn expected_view(file: &[u8]) -> Vec<u8> {
    if cutf8::has_magic(file) {
        cutf8::decode_lossless(&file[cutf8::MAGIC.len()..])
    } else {
        file.to_vec()
    }
}

/// Corrected UTF-8 for a code point (panics on the unencodable).
pub fn enc(cp: u32) -> Vec<u8> {
    let mut buf = [0u8; 8];
    let n = cutf8::unit::encode_disk(cp, &mut buf).expect("encodable code point");
    buf[..n].to_vec()
}

/// Disk bytes holding every kind of unit: ASCII, each length-changing
/// range, code points above U+10FFFF, and ill-formed bytes.
pub fn every_kind() -> Vec<u8> {
    let mut d = b"ASCII line\n".to_vec();
    for cp in (0xA0..0x0900).step_by(7).chain([0x0800, 0x089F]) {
        d.extend(enc(cp)); // two bytes on disk; three in the view from U+0800
    }
    d.push(b'\n');
    for cp in [0x08A0, 0x3042, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF] {
        d.extend(enc(cp));
    }
    for cp in (0x10000..0x110A0).step_by(97).chain([0x10000, 0x1109F]) {
        d.extend(enc(cp)); // three bytes on disk, four in the view
    }
    d.push(b'\n');
    for cp in [
        0x110A0,
        0x10FFFF,
        0x110000,
        0x1F600,
        0x21109F,
        0x2110A0,
        0x421109F,
        0x42110A0,
        0x7FFF_FFFF,
        0x8000_0000,
        0x8421_109F,
    ] {
        d.extend(enc(cp));
    }
    d.push(b'\n');
    // Ill-formed: stray continuation, truncated sequences, reserved units.
    d.extend_from_slice(&[
        0x80, b'a', 0xC0, b'b', 0xE0, 0x80, b'c', 0xFE, 0x80, 0x81, b'd', 0xFF,
    ]);
    d.extend_from_slice(&[0xF0, 0x80, 0x80]);
    d
}

/// Pseudo-random bytes (xorshift), biased towards multi-byte structure.
pub fn random_disk(len: usize, mut seed: u64) -> Vec<u8> {
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut d = Vec::with_capacity(len + 8);
    while d.len() < len {
        let r = next();
        match r % 10 {
            0..=3 => d.push(b'a' + (r >> 8) as u8 % 26),
            4 => d.push(b'\n'),
            5 => d.extend(enc(0x0800 + ((r >> 8) as u32 % 0xA0))),
            6 => d.extend(enc(0x10000 + ((r >> 8) as u32 % 0x10A0))),
            7 => d.extend(enc(0x00A0 + ((r >> 8) as u32 % 0x700))),
            8 => d.extend(enc(0x110A0 + ((r >> 8) as u32 % 0x200000))),
            _ => d.push((r >> 16) as u8),
        }
    }
    d
}

/// A peer suite's binary (`cargo install`ed): on PATH, in `$CARGO_HOME/bin`
/// or in `~/.cargo/bin`. Missing is a failure, not a skip.
pub fn find_tool(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(c) = std::env::var_os("CARGO_HOME") {
        dirs.push(Path::new(&c).join("bin"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(Path::new(&h).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: run scripts/setup.sh"))
}

/// A peer suite's config from `shared/peer-suites/`: `$ENV_VAR` if set,
/// else beside the repository (CI's layout), else this workplace's copy.
pub fn peer_config(env_var: &str, file: &str) -> PathBuf {
    if let Some(c) = std::env::var_os(env_var) {
        return c.into();
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/peer-suites")
        .join(file);
    if beside.is_file() {
        return beside;
    }
    let shared = Path::new("/work/shared/peer-suites").join(file);
    assert!(shared.is_file(), "{file} not found at {}", beside.display());
    shared
}
