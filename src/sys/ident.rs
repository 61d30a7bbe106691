//! Identity: [`ActAs`] makes the calling thread act as a request's caller
//! (fsuid, fsgid, groups: per-thread, checked to have taken) and [`Umask`]
//! gives it the caller's umask (the thread unshares its fs attributes
//! once), so that BACKING creates files as natively. [`Limits`] makes
//! what the thread allocates count as the caller's (root's reserve and
//! quotas apply to a caller who is not root, as natively: `super::caps`)
//! while it keeps the daemon's rights; [`AsDaemon`] returns to the
//! daemon's own ids for a file the daemon keeps (its journal).

use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{umask, Mode};
use nix::unistd::{self, Gid, Uid};

use super::{caps, from_nix};

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    // The daemon never changes its euid (only fsuid, per thread).
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| unistd::geteuid().is_root())
}

/// The calling thread's filesystem identity, for creating files as the
/// caller (owner and group of new files, docs/behaviour.md, "The mount": a root daemon never lends
/// its rights). Linux keeps fsuid, fsgid and the group list per thread when
/// set by the raw system calls (glibc's wrappers would change every thread).
pub struct Identity {
    uid: u32,
    gid: u32,
    pub(super) groups: Vec<libc::gid_t>,
}

/// A field of `/proc/PID/status` (None if the process is gone). Read in
/// one call into a buffer of a page or two (the file is about 1.5 KiB;
/// `read_to_string` would take eight reads and a statx to find that out):
/// this runs for every request that creates something.
fn proc_status_field(pid: u32, field: &str) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(format!("/proc/{pid}/status")).ok()?;
    let mut buf = Vec::with_capacity(8192);
    f.by_ref().take(64 * 1024).read_to_end(&mut buf).ok()?;
    String::from_utf8_lossy(&buf)
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_owned()))
}

impl Identity {
    /// The identity of process `pid` (its supplementary groups from
    /// /proc/PID/status; none if the process is gone).
    pub fn of(uid: u32, gid: u32, pid: u32) -> Identity {
        let groups = proc_status_field(pid, "Groups:")
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        Identity { uid, gid, groups }
    }

    /// [`Identity::of`] for a caller's limits on space, where its groups
    /// matter only to a filesystem that gives its reserve to a group: the
    /// groups this thread read for the same pid, uid and gid within the
    /// last second are taken again rather than read from /proc for every
    /// write (a process's groups change only with privilege, and then its
    /// next write within the second still has the old ones).
    pub fn of_recent(uid: u32, gid: u32, pid: u32) -> Identity {
        let now = Instant::now();
        let known = RECENT.with_borrow(|r| match r {
            Some((p, u, g, at, groups))
                if (*p, *u, *g) == (pid, uid, gid)
                    && pid != 0
                    && now.duration_since(*at) < RECENT_GROUPS =>
            {
                Some(groups.clone())
            }
            _ => None,
        });
        if let Some(groups) = known {
            return Identity { uid, gid, groups };
        }
        let id = Identity::of(uid, gid, pid);
        RECENT.set(Some((pid, uid, gid, now, id.groups.clone())));
        id
    }

    pub fn has_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Whether process `pid` (with fsuid `uid`) has CAP_SYS_ADMIN in its
/// effective set in the daemon's user namespace, which is what lets a
/// process see `trusted.*` names natively.
pub fn has_sys_admin(pid: u32, uid: u32) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    has_cap(pid, uid, CAP_SYS_ADMIN)
}

/// Whether process `pid` (with fsuid `uid`) has CAP_FSETID in its
/// effective set in the daemon's user namespace: what keeps the set-id
/// bits of a file it truncates natively (`crate::fs` kills them itself
/// for callers without it).
pub fn has_fsetid(pid: u32, uid: u32) -> bool {
    const CAP_FSETID: u32 = 4;
    has_cap(pid, uid, CAP_FSETID)
}

/// Whether process `pid` has capability `cap` in its effective set in the
/// daemon's user namespace. A process in another user namespace is
/// capable only there: no. A process already gone (or a pid from another
/// pid namespace, sent as 0): uid 0 decides.
fn has_cap(pid: u32, uid: u32, cap: u32) -> bool {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/user")).ok();
    if pid == 0 {
        return uid == 0;
    }
    let Some(eff) = proc_status_field(pid, "CapEff:") else {
        return uid == 0;
    };
    match (ns(&pid.to_string()), ns("self")) {
        (Some(theirs), Some(ours)) if theirs == ours => {}
        (None, _) => return uid == 0, // gone meanwhile
        _ => return false,
    }
    u64::from_str_radix(&eff, 16).is_ok_and(|caps| caps & (1 << cap) != 0)
}

/// What a thread holds: its filesystem ids, supplementary groups (sorted,
/// no repeats) and capability sets.
#[derive(Clone, PartialEq, Eq)]
struct Creds {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    caps: caps::Sets,
}

/// A caller's groups as read for its limits: pid, uid, gid, when read.
type RecentGroups = (u32, u32, u32, Instant, Vec<libc::gid_t>);

thread_local! {
    /// What this thread holds as the last switch left it (None: not known
    /// yet, or a switch failed halfway; read again before the next one).
    /// Only this module changes a daemon thread's ids and capabilities, so
    /// a switch to what the thread holds already is no system call at all.
    static HELD: std::cell::RefCell<Option<Creds>> = const { std::cell::RefCell::new(None) };

    /// The groups of the last caller whose limits this thread took, by
    /// pid, uid and gid, and when they were read (`Identity::of_recent`).
    static RECENT: std::cell::RefCell<Option<RecentGroups>> = const { std::cell::RefCell::new(None) };
}

/// The daemon's own ids and capabilities, as the first switch found its
/// thread (every switch reads them before changing anything, so no thread
/// had switched yet).
static OWN: OnceLock<Creds> = OnceLock::new();

/// How long a caller's groups read for its limits are taken as still
/// its own (`Identity::of_recent`).
const RECENT_GROUPS: Duration = Duration::from_secs(1);

fn sorted(groups: &[libc::gid_t]) -> Vec<libc::gid_t> {
    let mut g = groups.to_vec();
    g.sort_unstable();
    g.dedup();
    g
}

/// This thread's supplementary groups, sorted, without repeats.
fn read_thread_groups() -> io::Result<Vec<libc::gid_t>> {
    let now: Vec<libc::gid_t> = unistd::getgroups()
        .map_err(from_nix)?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    Ok(sorted(&now))
}

/// What this thread holds, read from the kernel.
fn read_creds() -> io::Result<Creds> {
    // There is no getfsuid: setfs*(-1) changes nothing (an invalid id)
    // and returns the current value.
    Ok(Creds {
        uid: setfs(FsId::Uid, u32::MAX),
        gid: setfs(FsId::Gid, u32::MAX),
        groups: read_thread_groups()?,
        caps: caps::get()?,
    })
}

/// What this thread holds ([`HELD`], read if not known).
fn held() -> io::Result<Creds> {
    if let Some(c) = HELD.with_borrow(|h| h.clone()) {
        return Ok(c);
    }
    let c = read_creds()?;
    HELD.set(Some(c.clone()));
    Ok(c)
}

/// The daemon's own ids and capabilities ([`OWN`]).
fn own() -> io::Result<&'static Creds> {
    if let Some(c) = OWN.get() {
        return Ok(c);
    }
    let c = read_creds()?;
    Ok(OWN.get_or_init(|| c))
}

/// Sets this thread's supplementary groups (`groups` sorted). The glibc
/// wrapper changes every thread of the process; the raw system call
/// changes this one only. Read back: it must have taken.
fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is readable for its length for the duration of the
    // call; the kernel only reads it.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let now = read_thread_groups()?;
    if now != groups {
        return Err(io::Error::other(format!(
            "setgroups({groups:?}) did not take effect (now {now:?})"
        )));
    }
    Ok(())
}

/// Which of the two filesystem ids [`set_fs_id`] sets.
#[derive(Clone, Copy)]
enum FsId {
    Uid,
    Gid,
}

/// setfsuid/setfsgid: report no error, only the previous value.
fn setfs(which: FsId, id: u32) -> u32 {
    match which {
        FsId::Uid => unistd::setfsuid(Uid::from_raw(id)).as_raw(),
        FsId::Gid => unistd::setfsgid(Gid::from_raw(id)).as_raw(),
    }
}

/// Sets this thread's fsuid or fsgid and checks that it took: the second
/// call (same value) must report the value just set.
fn set_fs_id(which: FsId, id: u32) -> io::Result<()> {
    setfs(which, id);
    let now = setfs(which, id);
    if now != id {
        let what = match which {
            FsId::Uid => "setfsuid",
            FsId::Gid => "setfsgid",
        };
        return Err(io::Error::other(format!(
            "{what}({id}) did not take effect (still {now})"
        )));
    }
    Ok(())
}

/// Makes this thread hold `want` with the system calls the difference
/// needs, each checked to have taken; none when it holds `want` already.
/// Groups and fsgid go first (CAP_SETGID is not one of the capabilities a
/// switch of fsuid moves), then fsuid, then the capability sets as read
/// after it (the kernel takes the file capabilities out on a switch away
/// from fsuid 0 and puts them back on one to 0).
fn hold(want: &Creds) -> io::Result<()> {
    if HELD.with_borrow(|h| h.as_ref() == Some(want)) {
        return Ok(());
    }
    let now = held()?;
    // Unknown until every step took.
    HELD.set(None);
    if now.groups != want.groups {
        set_thread_groups(&want.groups)?;
    }
    if now.gid != want.gid {
        set_fs_id(FsId::Gid, want.gid)?;
    }
    let mut sets = now.caps;
    if now.uid != want.uid {
        set_fs_id(FsId::Uid, want.uid)?;
        sets = caps::get()?;
    }
    if sets != want.caps {
        caps::set(&want.caps)?;
    }
    HELD.set(Some(want.clone()));
    Ok(())
}

/// Returns this thread to the daemon's own ids, groups and capabilities
/// if a caller's limits ([`Limits::kept`]) or anything else left it
/// otherwise; nothing (no system call) when it holds them already, or
/// when no thread ever switched. Every request but a write starts with
/// it, and so does a thread the daemon starts while it may serve writes
/// (a new thread inherits what its parent holds).
pub fn own_rights() -> io::Result<()> {
    if !is_root() {
        return Ok(());
    }
    match OWN.get() {
        Some(own) => hold(own),
        None => Ok(()),
    }
}

/// While alive, this thread acts as an [`Identity`] (fsuid, fsgid and
/// supplementary groups, root callers included: a root caller with a
/// non-root gid creates with that gid), without the daemon's file
/// capabilities and, for a caller who is not root, without
/// CAP_SYS_RESOURCE (its limits on space, as [`Limits`]); dropping it
/// returns to what the thread held before. Does nothing unless the daemon
/// runs as root (it cannot switch otherwise, and then everything is its
/// own anyway).
pub struct ActAs {
    back: Option<Creds>,
}

impl ActAs {
    /// Switches this thread to `id`. An error (the switch did not take)
    /// is returned after returning the thread to what it was.
    pub fn new(id: &Identity) -> io::Result<ActAs> {
        if !is_root() {
            return Ok(ActAs { back: None });
        }
        let own = own()?;
        let caps = if id.uid == 0 {
            own.caps
        } else {
            own.caps.without_fs().without_resource()
        };
        let want = Creds {
            uid: id.uid,
            gid: id.gid,
            groups: sorted(&id.groups),
            caps,
        };
        let guard = ActAs {
            back: Some(held()?),
        };
        hold(&want)?;
        Ok(guard)
    }
}

impl Drop for ActAs {
    fn drop(&mut self) {
        if let Some(back) = self.back.take() {
            if let Err(e) = hold(&back) {
                log::error!("cannot return to the daemon's own identity: {e}");
            }
        }
    }
}

/// What a thread allocates in BACKING counts as a caller's, as natively,
/// while the thread keeps the daemon's rights for everything else
/// (reopening a file by handle, its journal): for a caller who is not
/// root, its fsuid, fsgid and groups (ext4 gives root's reserved blocks to
/// an fsuid or group it names, root by default) and every capability of
/// the daemon but CAP_SYS_RESOURCE (which would let it into root's reserve
/// and past disk quotas); for root, the daemon's own. Files the daemon
/// creates meanwhile for itself are made under [`AsDaemon`]. The caller's
/// RLIMIT_FSIZE is not known here (FUSE does not send it).
///
/// [`Limits::kept`] leaves the thread so (a stream of one user's writes
/// switches once); [`Limits::of`] returns it to the daemon's own when the
/// guard drops.
pub struct Limits {
    back: bool,
}

impl Limits {
    /// The caller's limits until the guard drops, the daemon's after.
    pub fn of(id: &Identity) -> io::Result<Limits> {
        Limits::kept(id)?;
        Ok(Limits { back: true })
    }

    /// The caller's limits from now on, until the next switch
    /// ([`own_rights`] at the start of the next request that is not a
    /// write).
    pub fn kept(id: &Identity) -> io::Result<()> {
        if !is_root() {
            return Ok(());
        }
        let own = own()?;
        if id.uid == 0 {
            return hold(own);
        }
        // Compared without building a Creds (no allocation) in the common
        // case: the thread holds this caller's limits already.
        let same = HELD.with_borrow(|h| {
            h.as_ref().is_some_and(|h| {
                h.uid == id.uid
                    && h.gid == id.gid
                    && h.caps == own.caps.without_resource()
                    && h.groups == id.groups
            })
        });
        if same {
            return Ok(());
        }
        hold(&Creds {
            uid: id.uid,
            gid: id.gid,
            groups: sorted(&id.groups),
            caps: own.caps.without_resource(),
        })
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        if self.back {
            if let Err(e) = own_rights() {
                log::error!("cannot return to the daemon's own identity: {e}");
            }
        }
    }
}

/// While alive, a thread acting as a caller ([`ActAs`], [`Limits`]) acts
/// as the daemon again, with its own ids, groups and capabilities: for
/// the files the daemon keeps for itself (its journal), which must be the
/// daemon's and may use root's reserve. Dropping it returns the thread to
/// the caller's. Nothing to do on a thread that holds the daemon's own.
pub struct AsDaemon {
    back: Option<Creds>,
    /// No log line if returning fails (for the log's own writes).
    quiet: bool,
}

impl AsDaemon {
    pub fn new() -> io::Result<AsDaemon> {
        AsDaemon::with(false)
    }

    /// [`AsDaemon::new`] for the log's writer, which must not log.
    pub fn quiet() -> io::Result<AsDaemon> {
        AsDaemon::with(true)
    }

    fn with(quiet: bool) -> io::Result<AsDaemon> {
        let none = AsDaemon { back: None, quiet };
        if !is_root() {
            return Ok(none);
        }
        let Some(own) = OWN.get() else {
            return Ok(none);
        };
        if HELD.with_borrow(|h| h.as_ref() == Some(own)) {
            return Ok(none);
        }
        let guard = AsDaemon {
            back: Some(held()?),
            quiet,
        };
        hold(own)?;
        Ok(guard)
    }
}

impl Drop for AsDaemon {
    fn drop(&mut self) {
        if let Some(back) = self.back.take() {
            if let Err(e) = hold(&back) {
                if !self.quiet {
                    log::error!("cannot return to the caller's identity: {e}");
                }
            }
        }
    }
}

thread_local! {
    /// Whether this thread has its own umask (and cwd/root): `Umask`
    /// unshares them from the other threads the first time.
    static OWN_FS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, this thread's umask is the caller's, so that BACKING's own
/// filesystem applies it exactly as natively: only when the new file's
/// directory has no default ACL (with one, the ACL decides and the umask is
/// ignored). The kernel leaves the umask to us because the daemon asks for
/// POSIX ACLs (and FUSE_DONT_MASK); virtiofsd does the same.
pub struct Umask {
    old: Mode,
    new: Mode,
}

thread_local! {
    /// This thread's umask once it has its own (`Umask` is the only code
    /// that changes it): setting the one it has is no system call.
    static THREAD_UMASK: std::cell::Cell<Option<Mode>> = const { std::cell::Cell::new(None) };
}

/// Sets this thread's umask (which it has of its own) and returns the one
/// before; no system call when it is that already.
fn set_thread_umask(mask: Mode) -> Mode {
    match THREAD_UMASK.get() {
        Some(now) if now == mask => now,
        _ => {
            let old = umask(mask);
            THREAD_UMASK.set(Some(mask));
            old
        }
    }
}

impl Umask {
    pub fn set(mask: u32) -> io::Result<Umask> {
        if !OWN_FS.with(|o| o.get()) {
            // This thread's own copy of umask, cwd and root.
            unshare(CloneFlags::CLONE_FS).map_err(from_nix)?;
            OWN_FS.with(|o| o.set(true));
        }
        let new = Mode::from_bits_truncate(mask & 0o777);
        Ok(Umask {
            old: set_thread_umask(new),
            new,
        })
    }
}

impl Drop for Umask {
    fn drop(&mut self) {
        if self.old != self.new {
            set_thread_umask(self.old);
        }
    }
}
