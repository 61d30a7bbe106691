//! `-o` options: FUSE's and the kernel's, mount(8)'s and ours.
//!
//! Parsing only validates; nothing here touches the system. The result says
//! what to pass to the kernel (mount flags, `allow_other`, `max_read`), how
//! the mount shows in the mount table (`fsname`), and how the daemon serves
//! (`index_cache=`, `index_db=`, `attr_timeout=`, `entry_timeout=`, `watch=`,
//! `newfiles=`, `threads=`). Options that only mean something to mount(8), fstab or
//! libfuse-based programs (`defaults`, `nofail`, `_netdev`, `auto`,
//! `user`, `x-*`, `kernel_cache`, …) are accepted and ignored, so an fstab
//! line written for bindfs or sshfs works. Anything else is an error, named.

use std::time::Duration;

/// What content a file that holds none (new, or emptied) takes on its first
/// write (docs/behaviour.md, "The mount"; used by the write path, `write`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewFiles {
    /// Corrected when what is written is UTF-8 text W can store.
    Auto,
    /// Always raw.
    Raw,
}

/// The kernel's caches of names and attributes while the watch of
/// BACKING runs (`fs::watch` tells it of every change at once).
pub const LONG_TIMEOUT: Duration = Duration::from_secs(300);
/// ... and where no watch runs: a change made beside the mount shows
/// within this.
pub const SHORT_TIMEOUT: Duration = Duration::from_secs(1);

/// Parsed options, with their defaults.
#[derive(Clone, Debug)]
pub struct Options {
    /// `allow_other`: other users may use the mount (as root this is the
    /// default, as for bindfs; `noallow_other` turns it off). Permission
    /// checks are always on (`default_permissions`).
    pub allow_other: Option<bool>,
    /// `allow_root`: only the mounting user and root.
    pub allow_root: bool,
    /// Kernel mount flags (MS_*). Default: nosuid, nodev.
    pub flags: libc::c_ulong,
    /// Source shown by `mount` and `df`; default: BACKING's absolute path.
    pub fsname: Option<String>,
    /// `max_read=N`, passed to the kernel.
    pub max_read: Option<u32>,
    /// Memory bound of the index cache in bytes (default 64 MiB).
    pub index_cache: usize,
    /// Where the persistent index database is (`index_db=PATH|none`).
    pub index_db: crate::indexdb::Location,
    /// Bound and expiry of the cache directory of index databases
    /// (`index_db_cache_max=SIZE`, `index_db_cache_days=N`).
    pub index_db_cache: crate::indexdb::CacheLimits,
    /// How long the kernel may cache attributes; None (the default):
    /// [`LONG_TIMEOUT`] while the watch of BACKING runs, else
    /// [`SHORT_TIMEOUT`] (`CutFs::ttl`).
    pub attr_timeout: Option<Duration>,
    /// How long the kernel may cache names; None as for `attr_timeout`.
    pub entry_timeout: Option<Duration>,
    /// `watch=auto|off`: watch BACKING for changes made beside the mount
    /// (`fs::watch`); off keeps the short timeouts.
    pub watch: bool,
    pub newfiles: NewFiles,
    /// Directory names under which new files stay raw (`rawdirs=`,
    /// default `.git:.hg:.svn`).
    pub rawdirs: Vec<std::ffi::OsString>,
    /// Worker threads (default: one per CPU, 2 to 16; more threads only
    /// add hand-offs for small requests, measured on 2 cores).
    pub threads: usize,
    /// Mount over a non-empty directory.
    pub nonempty: bool,
    /// `-o auto_unmount`: fusermount3 stays as a watchdog that unmounts
    /// when the daemon dies, however it dies.
    pub auto_unmount: bool,
    /// `log=FILE`: log there (appended) instead of syslog or stderr.
    pub log: Option<std::path::PathBuf>,
    /// `passthrough=on|off|auto`: the kernel reads large raw files
    /// straight from BACKING, while their writers' writes still reach the
    /// daemon (`fs::passthrough`). None (`auto`, the default) is on.
    pub passthrough: Option<bool>,
    /// `blksize=SIZE|backing`: the preferred I/O size (`st_blksize`) shown
    /// for regular files, 1 MiB by default: cp, cat and other tools size
    /// their buffers by it, and with BACKING's 4096 would write in 128 KiB
    /// calls, each a request to the daemon, where the kernel takes up to
    /// 1 MiB in one (`max_pages` 256). It is this filesystem's own hint, as
    /// `st_dev` and `st_ino` are. None (`backing`): BACKING's.
    pub blksize: Option<u32>,
    /// `archive`: a read-only mount whose regular files are served by
    /// inode, without OPEN, FLUSH or RELEASE requests (`fs::archive`).
    pub archive: bool,
    /// `turns` (the default): while several users are at work, one at its
    /// share of the threads has its next requests queued and another's are
    /// served at once (fuser's `Config::turns`, patch 0004); a user alone
    /// is served first come (man page, RESOURCES).
    pub turns: bool,
    /// Options accepted but ignored, each with why: said on the terminal
    /// before the daemon detaches (its log does not exist yet when options
    /// are read), and logged once it does.
    pub ignored: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Options {
            allow_other: None,
            allow_root: false,
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            fsname: None,
            max_read: None,
            index_cache: 64 << 20,
            index_db: crate::indexdb::Location::Default,
            index_db_cache: crate::indexdb::CacheLimits::default(),
            attr_timeout: None,
            entry_timeout: None,
            watch: true,
            newfiles: NewFiles::Auto,
            rawdirs: crate::fs::state::rawnew::parse_rawdirs(
                crate::fs::state::rawnew::DEFAULT_RAWDIRS,
            )
            .unwrap_or_default(),
            threads: cpus.clamp(2, 16),
            nonempty: false,
            auto_unmount: false,
            log: None,
            passthrough: None,
            blksize: Some(DEFAULT_BLKSIZE),
            archive: false,
            turns: true,
            ignored: Vec::new(),
        }
    }
}

/// How reads through the mount update access times, from `noatime`,
/// `relatime`, `strictatime` (the kernel's precedence: strictatime wins,
/// then noatime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atime {
    /// No option: as BACKING's own mount does.
    Backing,
    /// `noatime`: never (the daemon reads with O_NOATIME).
    No,
    /// `relatime`: BACKING's mount must be relatime.
    Relative,
    /// `strictatime`: BACKING's mount must be strictatime.
    Strict,
}

impl Options {
    pub fn read_only(&self) -> bool {
        self.flags & libc::MS_RDONLY != 0
    }

    pub fn atime(&self) -> Atime {
        if self.flags & libc::MS_STRICTATIME != 0 {
            Atime::Strict
        } else if self.flags & libc::MS_NOATIME != 0 {
            Atime::No
        } else if self.flags & libc::MS_RELATIME != 0 {
            Atime::Relative
        } else {
            Atime::Backing
        }
    }

    /// Directories keep their access times (`noatime` or `nodiratime`).
    pub fn nodiratime(&self) -> bool {
        self.atime() == Atime::No || self.flags & libc::MS_NODIRATIME != 0
    }
}

/// Every option `cutf8fs` acts on: (form, default, what it does, allowed
/// values for errors). The one definition behind `cutf8fs --help`, the
/// messages for bad values and the suggestions for unknown options;
/// tests/first_hour.rs checks that man/cutf8fs.1 documents each.
pub const OPTIONS: &[(&str, &str, &str, &str)] = &[
    (
        "allow_other",
        "on as root",
        "other users may use the mount",
        "",
    ),
    ("noallow_other", "", "only the mounting user", ""),
    ("allow_root", "off", "only the mounting user and root", ""),
    (
        "ro",
        "off (rw)",
        "read-only mount; nothing is written to BACKING",
        "",
    ),
    ("rw", "on", "read-write mount", ""),
    (
        "remount",
        "",
        "change a running mount's ro/rw, nosuid, nodev, noexec (mount -o remount,ro MNT); \
         the daemon's other options stay",
        "",
    ),
    (
        "archive",
        "off",
        "read-only mount for browsing and searching: files served by inode, no open or close \
         requests (locks stay in the mount)",
        "",
    ),
    (
        "turns",
        "on",
        "serve users in turns, so one user's storm does not queue another's requests behind it \
         (noturns: first come)",
        "",
    ),
    (
        "nosuid",
        "on",
        "ignore set-user-ID bits (suid turns this off)",
        "",
    ),
    ("nodev", "on", "no device files (dev turns this off)", ""),
    ("noexec", "off", "no execution (exec turns this off)", ""),
    (
        "noatime",
        "off",
        "kernel atime flags: noatime, nodiratime, relatime, strictatime",
        "",
    ),
    ("sync", "off", "synchronous writes (async, dirsync)", ""),
    (
        "nonempty",
        "off",
        "mount over a non-empty directory (never over a mount)",
        "",
    ),
    (
        "auto_unmount",
        "off",
        "unmount when the daemon dies, even by kill -9 (a fusermount3 watchdog)",
        "",
    ),
    (
        "fsname=NAME",
        "BACKING",
        "source shown by mount and df",
        "a non-empty name",
    ),
    (
        "max_read=N",
        "kernel's",
        "largest read request, in bytes",
        "a number of bytes",
    ),
    (
        "index_cache=SIZE",
        "64M",
        "memory for offset indexes",
        "a size such as 64M (units k, M, G, T)",
    ),
    (
        "index_db=PATH|none",
        "BACKING/.cutf8fs-index",
        "file of the persistent index database; none: memory only",
        "an absolute file name, or none",
    ),
    (
        "index_db_cache_max=SIZE",
        "1G",
        "bound of the cache directory of index databases (least recently used go first)",
        "a size such as 1G (units k, M, G, T)",
    ),
    (
        "index_db_cache_days=N",
        "90",
        "an index database in the cache directory unused this many days goes",
        "a whole number of days",
    ),
    (
        "attr_timeout=SECS",
        "300 watched, else 1",
        "how long the kernel caches attributes",
        "seconds, such as 0.5",
    ),
    (
        "entry_timeout=SECS",
        "300 watched, else 1",
        "how long the kernel caches names",
        "seconds, such as 0.5",
    ),
    (
        "watch=auto|off",
        "auto",
        "watch BACKING for changes made beside the mount, so the kernel may cache for minutes (auto: where the daemon can; off: 1 s caches)",
        "auto, off",
    ),
    (
        "newfiles=auto|raw",
        "auto",
        "what an empty file becomes on its first write",
        "auto, raw",
    ),
    (
        "passthrough=on|off|auto",
        "auto",
        "the kernel reads raw files of 128 KiB or more directly from BACKING, writes still go through the daemon (auto, the default, is on; yes and no mean on and off)",
        "on, off, auto (yes, no)",
    ),
    (
        "blksize=SIZE|backing",
        "1M",
        "preferred I/O size stat shows for regular files (cp and cat size their calls by it); backing: BACKING's",
        "a power of two from 512 to 16M, or backing",
    ),
    (
        "rawdirs=NAME:...",
        ".git:.hg:.svn",
        "new files under these directories stay raw",
        "directory names separated by ':'",
    ),
    (
        "threads=N",
        "CPUs, 2 to 16",
        "worker threads",
        "a number from 1 to 256",
    ),
    (
        "log=FILE",
        "syslog, else a file",
        "append the daemon's log to FILE (without syslog: /var/log/cutf8fs/MOUNTPOINT.log as root, ~/.local/state/cutf8fs/ otherwise)",
        "a file name",
    ),
];

/// The `--help` text listing [`OPTIONS`].
pub fn help() -> String {
    let mut s = String::from("Mount options (-o, comma-separated; default in brackets):\n");
    for (form, default, what, _) in OPTIONS {
        let default = if default.is_empty() {
            String::new()
        } else {
            format!(" [{default}]")
        };
        s.push_str(&format!("  {form:<20} {what}{default}\n"));
    }
    s.push_str(
        "Options of mount(8), fstab and libfuse (defaults, nofail, _netdev, x-*, ...) are \
         accepted and ignored. See cutf8fs(1).",
    );
    s
}

/// The error for a bad value of `key`: what is allowed (or that the
/// option takes none).
fn bad_value(opt: &str, key: &str) -> String {
    let allowed = OPTIONS
        .iter()
        .find(|(form, ..)| form.split('=').next() == Some(key))
        .map_or("", |o| o.3);
    if allowed.is_empty() {
        return format!("option '{opt}': '{key}' takes no value; allowed: {key}");
    }
    format!("option '{opt}': bad value; allowed: {allowed}")
}

/// Whether `key` is the name of an option in [`OPTIONS`].
fn known(key: &str) -> bool {
    OPTIONS
        .iter()
        .any(|(form, ..)| form.split('=').next() == Some(key))
}

/// What `cutf8fs -o <TAB>` offers: every option's name, with `=` for
/// those that take a value.
pub fn completion_names() -> Vec<String> {
    let mut names: Vec<String> = OPTIONS
        .iter()
        .map(|(form, ..)| match form.split_once('=') {
            Some((k, _)) => format!("{k}="),
            None => form.to_string(),
        })
        .chain(
            SYNONYMS
                .iter()
                .chain(&["strictatime", "defaults", "nofail", "_netdev"])
                .map(|s| s.to_string()),
        )
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Names the kernel's flags also go by, beside [`OPTIONS`]'s forms.
const SYNONYMS: [&str; 7] = [
    "suid",
    "dev",
    "exec",
    "async",
    "dirsync",
    "nodiratime",
    "relatime",
];

/// The known option name nearest to `key`, if near (edit distance ≤ 2).
fn nearest(key: &str) -> Option<&'static str> {
    let names = OPTIONS
        .iter()
        .map(|o| o.0.split('=').next().unwrap_or(o.0))
        .chain(SYNONYMS);
    names
        .map(|n| (distance(key, n), n))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Accepted and ignored: meaningful only to mount(8), fstab or libfuse.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "nofail",
    "_netdev",
    "default_permissions",
    "kernel_cache",
    "auto_cache",
    "noauto_cache",
    "big_writes",
    "use_ino",
    "readdir_ino",
    "hard_remove",
    "atomic_o_trunc",
    "splice_read",
    "splice_write",
    "splice_move",
    "lazytime",
    "nolazytime",
    "loud",
    "silent",
];

/// A size such as `64M`, `1G`, `512k`, `4096` (binary units).
/// `st_blksize` of regular files unless `-o blksize` says otherwise: the
/// largest write the kernel sends in one request by default.
pub const DEFAULT_BLKSIZE: u32 = 1 << 20;

pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1usize << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

fn parse_secs(s: &str) -> Option<Duration> {
    let v: f64 = s.parse().ok()?;
    (v.is_finite() && (0.0..1e9).contains(&v)).then(|| Duration::from_secs_f64(v))
}

/// Parses every `-o` argument (each a comma-separated list) in order; later
/// options win. The error names the offending option.
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Options, String> {
    let mut o = Options::default();
    for arg in args {
        for opt in arg.as_ref().split(',').filter(|s| !s.is_empty()) {
            apply(&mut o, opt)?;
        }
    }
    if o.archive && !o.read_only() {
        return Err("option 'archive' is a read-only mount: leave out 'rw'".into());
    }
    Ok(o)
}

fn set(o: &mut Options, flag: libc::c_ulong, on: bool) {
    if on {
        o.flags |= flag;
    } else {
        o.flags &= !flag;
    }
}

fn apply(o: &mut Options, opt: &str) -> Result<(), String> {
    let (key, value) = match opt.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (opt, None),
    };
    let bad = || bad_value(opt, key);
    match (key, value) {
        ("allow_other", None) => o.allow_other = Some(true),
        ("noallow_other", None) => o.allow_other = Some(false),
        ("allow_root", None) => o.allow_root = true,
        ("ro", None) => set(o, libc::MS_RDONLY, true),
        // `daemon::run` hands a remount to `remount` before parsing.
        ("remount", None) => {
            return Err("option 'remount' changes a running mount: name its mount point".into())
        }
        ("rw", None) => set(o, libc::MS_RDONLY, false),
        ("archive", None) => {
            o.archive = true;
            set(o, libc::MS_RDONLY, true)
        }
        ("turns", None) => o.turns = true,
        ("noturns", None) => o.turns = false,
        ("nosuid", None) => set(o, libc::MS_NOSUID, true),
        ("suid", None) => set(o, libc::MS_NOSUID, false),
        ("nodev", None) => set(o, libc::MS_NODEV, true),
        ("dev", None) => set(o, libc::MS_NODEV, false),
        ("noexec", None) => set(o, libc::MS_NOEXEC, true),
        ("exec", None) => set(o, libc::MS_NOEXEC, false),
        ("noatime", None) => set(o, libc::MS_NOATIME, true),
        ("atime", None) => set(o, libc::MS_NOATIME, false),
        ("nodiratime", None) => set(o, libc::MS_NODIRATIME, true),
        ("diratime", None) => set(o, libc::MS_NODIRATIME, false),
        ("relatime", None) => set(o, libc::MS_RELATIME, true),
        ("norelatime", None) => set(o, libc::MS_RELATIME, false),
        ("strictatime", None) => set(o, libc::MS_STRICTATIME, true),
        ("sync", None) => set(o, libc::MS_SYNCHRONOUS, true),
        ("async", None) => set(o, libc::MS_SYNCHRONOUS, false),
        ("dirsync", None) => set(o, libc::MS_DIRSYNC, true),
        ("nonempty", None) => o.nonempty = true,
        ("log", Some(v)) if !v.is_empty() => o.log = Some(v.into()),
        ("fsname", Some(v)) if !v.is_empty() && !v.contains(['\n', '\0']) => {
            o.fsname = Some(v.to_owned())
        }
        ("subtype", Some("cutf8fs")) => {}
        ("subtype", Some(_)) => {
            return Err(format!("option '{opt}': the subtype is always cutf8fs"))
        }
        ("max_read", Some(v)) => o.max_read = Some(v.parse().map_err(|_| bad())?),
        ("index_cache", Some(v)) => o.index_cache = parse_size(v).ok_or_else(bad)?,
        ("index_db", Some(v)) => o.index_db = crate::indexdb::Location::parse(v).ok_or_else(bad)?,
        ("index_db_cache_max", Some(v)) => {
            o.index_db_cache.max = parse_size(v).ok_or_else(bad)? as u64
        }
        ("index_db_cache_days", Some(v)) => o.index_db_cache.days = v.parse().map_err(|_| bad())?,
        ("attr_timeout", Some(v)) => o.attr_timeout = Some(parse_secs(v).ok_or_else(bad)?),
        ("entry_timeout", Some(v)) => o.entry_timeout = Some(parse_secs(v).ok_or_else(bad)?),
        ("watch", Some("auto")) => o.watch = true,
        ("watch", Some("off")) => o.watch = false,
        ("newfiles", Some("raw")) => o.newfiles = NewFiles::Raw,
        ("newfiles", Some("auto")) => o.newfiles = NewFiles::Auto,
        ("passthrough", Some("on" | "yes")) => o.passthrough = Some(true),
        ("passthrough", Some("off" | "no")) => o.passthrough = Some(false),
        ("passthrough", Some("auto")) => o.passthrough = None,
        ("blksize", Some("backing")) => o.blksize = None,
        ("blksize", Some(v)) => {
            o.blksize = Some(
                parse_size(v)
                    .filter(|n| n.is_power_of_two() && (512..=16 << 20).contains(n))
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(bad)?,
            )
        }
        ("rawdirs", Some(v)) => o.rawdirs = crate::fs::state::rawnew::parse_rawdirs(v)?,
        ("threads", Some(v)) => {
            o.threads = v
                .parse()
                .ok()
                .filter(|n| (1..=256).contains(n))
                .ok_or_else(bad)?
        }
        ("auto_unmount", None) => o.auto_unmount = true,
        (k, _) if IGNORED.contains(&k) => {}
        (k, _) if k.starts_with("x-") || k == "comment" => {}
        // mount(8)'s helper convention passes these through; harmless.
        ("uid" | "gid", Some(_)) => o.ignored.push(format!(
            "option '{opt}' is ignored: cutf8fs shows BACKING's owners as they are (files \
             made through the mount get their creator's); to change who owns what, chown \
             in BACKING"
        )),
        ("setuid" | "context" | "fscontext" | "defcontext" | "rootcontext", Some(_)) => {
            o.ignored.push(format!("option '{opt}' is ignored"))
        }
        // A known option with a value it does not take.
        (k, _) if known(k) => return Err(bad_value(opt, key)),
        _ => {
            return Err(match nearest(key) {
                Some(n) => format!("unknown option '{opt}' (did you mean '{n}'?)"),
                None => format!("unknown option '{opt}' (cutf8fs --help lists them)"),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let o = parse::<&str>(&[]).unwrap();
        assert_eq!(o.index_cache, 64 << 20);
        assert_eq!(o.index_db_cache.max, 1 << 30);
        assert_eq!(o.index_db_cache.days, 90);
        assert_eq!(o.attr_timeout, None);
        assert!(o.watch);
        assert_eq!(o.flags, libc::MS_NOSUID | libc::MS_NODEV);
        assert_eq!(o.allow_other, None);
        assert!(!o.read_only());
    }

    #[test]
    fn archive_is_read_only() {
        let o = parse(&["archive"]).unwrap();
        assert!(o.archive && o.read_only());
        assert!(parse(&["ro,archive"]).unwrap().archive);
        let e = parse(&["archive,rw"]).unwrap_err();
        assert!(e.contains("'archive'") && e.contains("'rw'"), "{e}");
        assert!(parse(&["archive=1"]).is_err());
    }

    #[test]
    fn fuse_fstab_and_ours() {
        let o = parse(&[
            "defaults,nofail,_netdev,ro,allow_other",
            "index_cache=16M,attr_timeout=0.5,newfiles=raw,fsname=/srv/a,x-systemd.automount",
        ])
        .unwrap();
        assert!(o.read_only());
        assert_eq!(o.allow_other, Some(true));
        assert_eq!(o.index_cache, 16 << 20);
        let db = parse(&["index_db=/var/lib/a.sqlite"]).unwrap();
        assert_eq!(
            db.index_db,
            crate::indexdb::Location::File("/var/lib/a.sqlite".into())
        );
        assert_eq!(
            parse(&["index_db=none"]).unwrap().index_db,
            crate::indexdb::Location::None
        );
        assert!(parse(&["index_db=rel.sqlite"])
            .unwrap_err()
            .contains("index_db=rel.sqlite"));
        assert_eq!(o.attr_timeout, Some(Duration::from_millis(500)));
        assert!(!parse(&["watch=off"]).unwrap().watch);
        assert!(parse(&["watch=maybe"]).unwrap_err().contains("auto, off"));
        assert_eq!(o.newfiles, NewFiles::Raw);
        assert_eq!(o.fsname.as_deref(), Some("/srv/a"));
        let o = parse(&["ro,rw,dev,suid"]).unwrap();
        assert_eq!(o.flags, 0);
    }

    #[test]
    fn errors_name_the_option() {
        assert!(parse(&["bogus"]).unwrap_err().contains("'bogus'"));
        assert!(parse(&["index_cache=lots"])
            .unwrap_err()
            .contains("index_cache=lots"));
        assert!(parse(&["attr_timeout=-1"]).is_err());
        assert!(parse(&["newfiles=maybe"]).is_err());
        assert_eq!(parse(&["noatime"]).unwrap().atime(), Atime::No);
        assert_eq!(
            parse(&["noatime,strictatime"]).unwrap().atime(),
            Atime::Strict
        );
        assert_eq!(parse(&["relatime"]).unwrap().atime(), Atime::Relative);
        assert_eq!(
            parse(&["relatime,norelatime"]).unwrap().atime(),
            Atime::Backing
        );
        assert!(parse(&["nodiratime"]).unwrap().nodiratime());
        assert!(!parse(&["strictatime"]).unwrap().nodiratime());
    }

    #[test]
    fn bad_values_name_the_allowed_ones_and_typos_get_a_suggestion() {
        let e = parse(&["newfiles=utf8"]).unwrap_err();
        assert!(
            e.contains("newfiles=utf8") && e.contains("auto, raw"),
            "{e}"
        );
        let e = parse(&["threads=0"]).unwrap_err();
        assert!(e.contains("from 1 to 256"), "{e}");
        let e = parse(&["nwefiles=raw"]).unwrap_err();
        assert!(e.contains("did you mean 'newfiles'"), "{e}");
        let e = parse(&["alow_other"]).unwrap_err();
        assert!(e.contains("did you mean 'allow_other'"), "{e}");
        let e = parse(&["zzzzzzzz"]).unwrap_err();
        assert!(e.contains("unknown option 'zzzzzzzz'"), "{e}");
        // A known name with a wrong value: its values, not a suggestion.
        let e = parse(&["passthrough=maybe"]).unwrap_err();
        assert!(
            e.contains("allowed: on, off, auto") && !e.contains("did you mean"),
            "{e}"
        );
        let e = parse(&["ro=1"]).unwrap_err();
        assert!(e.contains("takes no value"), "{e}");
        assert_eq!(parse(&["passthrough=yes"]).unwrap().passthrough, Some(true));
        assert_eq!(parse(&["passthrough=no"]).unwrap().passthrough, Some(false));
        let o = parse(&["uid=1000,gid=1000"]).unwrap();
        assert_eq!(o.ignored.len(), 2);
        assert!(o.ignored[0].contains("uid=1000"), "{:?}", o.ignored);
        for n in completion_names() {
            let probe = if n.ends_with('=') {
                format!("{n}x")
            } else {
                n.clone()
            };
            let e = parse(&[probe.as_str()]).err().unwrap_or_default();
            assert!(!e.contains("unknown option"), "{n}: {e}");
        }
        for (form, ..) in OPTIONS {
            assert!(help().contains(form), "{form}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn blksize_is_a_power_of_two_or_backing() {
        assert_eq!(parse::<&str>(&[]).unwrap().blksize, Some(1 << 20));
        assert_eq!(parse(&["blksize=backing"]).unwrap().blksize, None);
        assert_eq!(parse(&["blksize=1M"]).unwrap().blksize, Some(1 << 20));
        assert_eq!(parse(&["blksize=512"]).unwrap().blksize, Some(512));
        assert_eq!(parse(&["blksize=16M"]).unwrap().blksize, Some(16 << 20));
        assert_eq!(
            parse(&["blksize=1M,blksize=backing"]).unwrap().blksize,
            None
        );
        for bad in [
            "blksize=1000",
            "blksize=256",
            "blksize=32M",
            "blksize=0",
            "blksize=x",
        ] {
            let e = parse(&[bad]).unwrap_err();
            assert!(e.contains(bad) && e.contains("power of two"), "{bad}: {e}");
        }
    }
}
