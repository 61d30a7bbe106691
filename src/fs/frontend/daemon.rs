//! The daemon's life: check the arguments, daemonize, mount, serve, and
//! stop cleanly on SIGINT/SIGTERM or when unmounted from outside.
//!
//! Without `-f` the process forks before anything else (no threads exist
//! yet); the parent waits on a pipe and exits 0 only once the child has
//! mounted and completed the FUSE handshake, or prints the child's error
//! and exits with its code. Logs go to syslog in the background and to
//! stderr with `-f` (level info; debug with `-d`; `RUST_LOG` overrides);
//! `-o log=FILE` sends them to FILE. A daemon in the background with no
//! syslog to reach (no /dev/log: containers, minimal systems) logs to a
//! file of its own ([`default_log`]) and says which on the terminal before
//! it detaches, so that nothing it logs is lost. So do options it ignores:
//! they are read before any log exists.
//!
//! Exit codes (documented in man/cutf8fs.1): 0 mounted and later unmounted
//! cleanly; 1 the mount could not be made or served (missing or non-empty
//! directory, no /dev/fuse, no permission, …); 2 bad arguments or options.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use crate::fs::frontend::failure::Failure;
use crate::fs::frontend::mount;
use crate::fs::frontend::options::{self, Options};
use crate::fs::CutFs;
use crate::sys::{self, process::Forked, process::StopSignals};

/// What the command line asked for (parsed by `src/bin/cutf8fs.rs`).
#[derive(Clone, Debug)]
pub struct Config {
    pub backing: PathBuf,
    pub mountpoint: PathBuf,
    /// `-o` arguments, each a comma-separated list.
    pub options: Vec<String>,
    pub foreground: bool,
    pub debug: bool,
}

struct Checked {
    backing: PathBuf,
    mountpoint: PathBuf,
    opts: Options,
}

fn dir_of(p: &Path, what: &str) -> Result<PathBuf, Failure> {
    let fail = |e: std::io::Error| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            // A FUSE mount whose daemon is gone (kill -9): bindfs says
            // "Transport endpoint is not connected"; say what to run.
            return Failure::mount(format!(
                "{what} {}: a stale FUSE mount whose daemon is gone (transport endpoint \
                 is not connected); run `fusermount3 -u {}` (or umount) and mount again",
                p.display(),
                p.display()
            ));
        }
        Failure::mount(format!("{what} {}: {e}", p.display()))
    };
    let abs = std::fs::canonicalize(p).map_err(fail)?;
    if !std::fs::metadata(&abs).map_err(fail)?.is_dir() {
        return Err(Failure::mount(format!(
            "{what} {}: not a directory",
            p.display()
        )));
    }
    Ok(abs)
}

/// Validates without touching anything (but for saying, on stderr, which
/// options are ignored: the log does not exist yet).
fn check(cfg: &Config) -> Result<Checked, Failure> {
    let opts = options::parse(&cfg.options).map_err(Failure::usage)?;
    for why in &opts.ignored {
        eprintln!("cutf8fs: warning: {why}");
    }
    let backing = dir_of(&cfg.backing, "BACKING")?;
    let mountpoint = dir_of(&cfg.mountpoint, "MOUNTPOINT")?;
    if mountpoint.starts_with(&backing) && mountpoint != backing {
        return Err(Failure::mount(format!(
            "MOUNTPOINT {} is inside BACKING {}: the mount would contain itself",
            mountpoint.display(),
            backing.display()
        )));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some((at, source)) =
        crate::mountinfo::cutf8fs_mount_of(&mounts, &mountpoint).filter(|(at, _)| *at == mountpoint)
    {
        // Never stack a second mount, not even with -o nonempty.
        return Err(Failure::mount(format!(
            "MOUNTPOINT {} is already mounted (cutf8fs of {source}); to remount, run \
             `fusermount3 -u {}` first",
            at.display(),
            at.display()
        )));
    }
    if !opts.nonempty && mountpoint != backing {
        let mut entries = std::fs::read_dir(&mountpoint)
            .map_err(|e| Failure::mount(format!("MOUNTPOINT {}: {e}", mountpoint.display())))?;
        if entries.next().is_some() {
            return Err(Failure::mount(format!(
                "MOUNTPOINT {} is not empty (use -o nonempty to mount over it)",
                mountpoint.display()
            )));
        }
    }
    if !Path::new("/proc/self/fd").is_dir() {
        return Err(Failure::mount(
            "/proc is not mounted; cutf8fs needs /proc/self/fd",
        ));
    }
    Ok(Checked {
        backing,
        mountpoint,
        opts,
    })
}

/// Where log lines go when not to syslog: `-o log=FILE`, or without
/// syslog in the background the default file ([`default_log`]); opened
/// before the daemon detaches so that a bad path is reported to the user.
fn open_log(c: &Checked, background: bool) -> Result<Option<File>, Failure> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(p)
    };
    if let Some(p) = &c.opts.log {
        return open(p)
            .map(Some)
            .map_err(|e| Failure::usage(format!("option log={}: {e}", p.display())));
    }
    if !background
        || std::os::unix::net::UnixDatagram::unbound()
            .and_then(|s| s.connect("/dev/log"))
            .is_ok()
    {
        return Ok(None);
    }
    let file = default_log(&c.mountpoint, sys::is_root()).and_then(|p| {
        let dir = p.parent().unwrap_or(Path::new("/"));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| open(&p))
            .map(|f| (f, p))
            .ok()
    });
    match file {
        Some((f, p)) => {
            eprintln!(
                "cutf8fs: no syslog (/dev/log): logging to {} (-o log=FILE chooses another file)",
                p.display()
            );
            Ok(Some(f))
        }
        None => {
            eprintln!(
                "cutf8fs: warning: no syslog (/dev/log) and no log file could be made: the \
                 daemon's log messages will be lost; use -o log=FILE, or -f to stay in the \
                 foreground"
            );
            Ok(None)
        }
    }
}

/// The log file of a daemon in the background without syslog:
/// `/var/log/cutf8fs/NAME.log` for root, `$XDG_STATE_HOME/cutf8fs/NAME.log`
/// (by default `~/.local/state/cutf8fs/NAME.log`) for anyone else, where
/// NAME is the mount point escaped as `systemd-escape --path` does
/// (`/mnt/my archive` gives `mnt-my\x20archive`). None without a home.
fn default_log(mountpoint: &Path, root: bool) -> Option<PathBuf> {
    let dir = if root {
        PathBuf::from("/var/log/cutf8fs")
    } else {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|h| h.join(".local/state"))
            })?;
        state.join("cutf8fs")
    };
    Some(dir.join(format!("{}.log", escape_path(mountpoint))))
}

/// A path as one file name, as `systemd-escape --path` writes it: the
/// slashes around it dropped, the others `-`, every byte but ASCII
/// letters, digits, `_` and a `.` that does not begin the name as `\xNN`;
/// `/` itself is `-`.
fn escape_path(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let parts: Vec<&[u8]> = p
        .as_os_str()
        .as_bytes()
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    if parts.is_empty() {
        return "-".into();
    }
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push('-');
        }
        for (k, &b) in part.iter().enumerate() {
            if b.is_ascii_alphanumeric() || b == b'_' || (b == b'.' && (i, k) != (0, 0)) {
                out.push(b as char);
            } else {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    out
}

fn init_logging(cfg: &Config, background: bool, file: Option<File>) {
    if let Some(f) = file {
        let mut b = env_logger::Builder::new();
        b.filter_level(if cfg.debug {
            log::LevelFilter::Debug
        } else {
            log::LevelFilter::Info
        })
        .parse_default_env()
        .target(env_logger::Target::Pipe(Box::new(OwnLog(f))));
        let _ = b.try_init();
        return;
    }
    let level = if cfg.debug {
        log::LevelFilter::Debug
    } else {
        log::LevelFilter::Info
    };
    if background {
        // syslog takes one level: RUST_LOG asking for debug or trace
        // anywhere counts as -d.
        let env = std::env::var("RUST_LOG").unwrap_or_default();
        let level = if env.contains("debug") || env.contains("trace") {
            log::LevelFilter::Debug
        } else {
            level
        };
        if syslog::init_unix(syslog::Facility::LOG_DAEMON, level).is_ok() {
            return;
        }
    }
    let mut b = env_logger::Builder::new();
    b.filter_level(level).parse_default_env();
    let _ = b.try_init();
}

/// The log file, appended to with the daemon's own rights and limits
/// whichever thread logs (one may hold a writer's: `sys::Limits::kept`),
/// so root's reserve stays open to it.
struct OwnLog(File);

impl Write for OwnLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _own = crate::sys::AsDaemon::quiet()?;
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The child's report to the waiting parent: code byte, then the message.
struct Notify(Option<File>);

impl Notify {
    fn send(&mut self, code: u8, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(&[code]);
            let _ = f.write_all(msg.as_bytes());
        }
    }
}

/// Forks; returns in the child (with the pipe to report readiness on). The
/// parent never returns: it exits with the child's verdict.
fn daemonize() -> Result<Notify, Failure> {
    let (mut r, w) = sys::process::pipe().map_err(|e| Failure::mount(format!("pipe: {e}")))?;
    match sys::process::fork_detached() {
        Err(e) => Err(Failure::mount(format!("fork: {e}"))),
        Ok(Forked::Child) => {
            drop(r);
            Ok(Notify(Some(w)))
        }
        Ok(Forked::Parent) => {
            drop(w);
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            match buf.split_first() {
                Some((0, _)) => std::process::exit(0),
                Some((&code, msg)) => {
                    eprintln!("cutf8fs: {}", String::from_utf8_lossy(msg));
                    std::process::exit(i32::from(code));
                }
                None => {
                    eprintln!("cutf8fs: the daemon exited before the mount was ready");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// On SIGINT or SIGTERM, unmounts the daemon's own mount (`mount::unmount`:
/// never another one made on the same path since); if the mountpoint no
/// longer shows it (detached already, or mounted over), ends the daemon's
/// own connection instead, or, where the kernel's fusectl is not mounted,
/// the daemon itself.
fn spawn_signal_thread(signals: StopSignals, own: mount::Own) {
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let Ok(sig) = signals.wait() else {
                continue;
            };
            if sig == Signal::SIGHUP {
                log::info!("SIGHUP ignored");
                continue;
            }
            let mnt = own.mountpoint.display();
            // Said first: once unmounted, the daemon may end at once.
            log::info!("{sig}: unmounting {mnt}");
            match mount::unmount(&own) {
                Ok(mount::Unmounted::Detached) => {}
                Ok(mount::Unmounted::NotOurs) => {
                    log::info!(
                        "{mnt} no longer shows this daemon's mount (it was unmounted, or \
                         something is mounted over it): left alone; ending this daemon's \
                         own connection"
                    );
                    let aborted = own.device.map(mount::abort);
                    if let Some(Err(e)) = aborted {
                        log::info!("cannot end the connection through fusectl ({e}): exiting");
                        std::process::exit(0);
                    }
                }
                Err(e) => log::error!("unmount {mnt} failed: {e}"),
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the signal thread: {e}");
    }
}

/// Runs the daemon to the end. Returns once the filesystem is unmounted.
pub fn run(cfg: Config) -> Result<(), Failure> {
    if super::remount::asked(&cfg.options) {
        return super::remount::run(&cfg.mountpoint, &cfg.options);
    }
    let checked = check(&cfg)?;
    let log_file = open_log(&checked, !cfg.foreground)?;
    let mut notify = if cfg.foreground {
        Notify(None)
    } else {
        daemonize()?
    };
    init_logging(&cfg, !cfg.foreground, log_file);
    for why in &checked.opts.ignored {
        log::warn!("{why}");
    }
    // A panic is a bug: make sure it reaches the log (syslog in the
    // background, where stderr is /dev/null).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // A panic inside a request is logged once, with the request's
        // operation and path, by `error::guard`, which answers it EIO.
        if crate::fs::frontend::error::stash_panic(info) {
            return;
        }
        log::error!("BUG: {info}");
        default_hook(info);
    }));
    let r = serve(&cfg, checked, &mut notify);
    if let Err(f) = &r {
        if !cfg.foreground {
            log::error!("{f}");
        }
        notify.send(u8::try_from(f.code).unwrap_or(1).max(1), &f.message);
    }
    r
}

fn serve(cfg: &Config, c: Checked, notify: &mut Notify) -> Result<(), Failure> {
    // Lift the soft descriptor limit to the hard one: the inode cache
    // takes a quarter of it (`inodes`), files open through the mount the
    // rest.
    let limit = sys::process::raise_fd_limit(u64::MAX);
    log::debug!("open-file limit: {limit}");
    // New files get exactly the mode the kernel asks for (it applied the
    // caller's umask already).
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    let signals = StopSignals::block();
    // Before the filesystem's threads start; freed memory goes back after
    // each burst of requests (`memory`).
    crate::fs::frontend::memory::limit_arenas();
    let root: OwnedFd = CutFs::open_backing(&c.backing)
        .map_err(|e| Failure::mount(format!("BACKING {}: {e}", c.backing.display())))?;
    let fs = CutFs::new(root, &c.opts)
        .map_err(|e| Failure::mount(format!("BACKING {}: {e}", c.backing.display())))?;
    let stats = fs.stats();
    crate::fs::frontend::memory::spawn_trimmer(move || stats.requests_served())
        .map_err(|e| Failure::mount(format!("cannot start a thread: {e}")))?;
    let root_user = sys::is_root();
    let allow_other = c.opts.allow_other.unwrap_or(root_user);
    let source = c
        .opts
        .fsname
        .clone()
        .unwrap_or_else(|| c.backing.to_string_lossy().into_owned());
    let m = mount::mount(&source, &c.mountpoint, &c.opts, allow_other)?;
    let acl = if allow_other {
        fuser::SessionACL::All
    } else if c.opts.allow_root {
        fuser::SessionACL::RootAndOwner
    } else {
        fuser::SessionACL::Owner
    };
    // Connected once the handshake is done: the daemon then tells the
    // kernel what it changes behind its caches (`invalidate`).
    let kernel = fs.invalidator();
    let mut fc = fuser::Config::default();
    fc.n_threads = Some(c.opts.threads);
    fc.clone_fd = true;
    fc.max_threads = Some(crate::fs::most_threads(c.opts.threads));
    // Turns between users (the default; `-o noturns` for first come): one
    // user's storm does not queue another's reads behind it (man
    // cutf8fs(1), RESOURCES). A user alone pays nothing for them.
    fc.turns = c.opts.turns;
    let session = match fuser::Session::from_fd(fs, m.dev, acl, fc) {
        Ok(s) => s,
        Err(e) => {
            let _ = mount::unmount(&m.own);
            return Err(Failure::mount(format!("FUSE handshake failed: {e}")));
        }
    };
    mount::set_read_ahead(&m.own);
    // The device's duplicate carries the notifications fuser has no
    // sender for (`invalidate`).
    let dev = std::os::fd::AsFd::as_fd(&session).try_clone_to_owned().ok();
    kernel.connect(session.notifier(), dev);
    let own = m.own.clone();
    spawn_signal_thread(signals, m.own.clone());
    log::info!(
        "serving {} on {} (cutf8fs {}, {} threads{})",
        c.backing.display(),
        own.mountpoint.display(),
        env!("CARGO_PKG_VERSION"),
        c.opts.threads,
        if cfg.debug { ", debug" } else { "" }
    );
    notify.send(0, "");
    let r = session.run();
    log::info!("unmounted {}", own.mountpoint.display());
    r.map_err(|e| Failure::mount(format!("FUSE session ended with an error: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_escape_as_systemd_escapes_paths() {
        assert_eq!(escape_path(Path::new("/mnt/archive")), "mnt-archive");
        assert_eq!(
            escape_path(Path::new("/mnt/my archive/")),
            "mnt-my\\x20archive"
        );
        assert_eq!(escape_path(Path::new("/srv/a-b/.x")), "srv-a\\x2db-.x");
        assert_eq!(escape_path(Path::new("/.hidden")), "\\x2ehidden");
        assert_eq!(escape_path(Path::new("/")), "-");
        assert_eq!(
            default_log(Path::new("/mnt/archive"), true),
            Some(PathBuf::from("/var/log/cutf8fs/mnt-archive.log"))
        );
    }
}
