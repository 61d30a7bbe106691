//! Identity: [`ActAs`] makes the calling thread act as a request's caller
//! (fsuid, fsgid, groups: per-thread, checked to have taken) and [`Umask`]
//! gives it the caller's umask (the thread unshares its fs attributes
//! once), so that BACKING creates files as natively. [`Limits`] makes
//! what the thread allocates count as the caller's (root's reserve and
//! quotas apply to a caller who is not root, as natively: `super::caps`)
//! while it keeps the daemon's rights; [`AsDaemon`] returns to the
//! daemon's own ids for a file the daemon keeps (its journal).

use std::io;

use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{umask, Mode};
use nix::unistd::{self, Gid, Uid};

use super::{caps, from_nix};

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    unistd::geteuid().is_root()
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

/// While alive, this thread acts as an [`Identity`] (fsuid, fsgid and
/// supplementary groups, root callers included: a root caller with a
/// non-root gid creates with that gid); dropping it returns to the
/// daemon's own. Does nothing unless the daemon runs as root (it cannot
/// switch otherwise, and then everything is its own anyway).
pub struct ActAs {
    saved: Option<Saved>,
    /// This guard set [`OWN`] (the outermost on the thread).
    outer: bool,
}

#[derive(Clone)]
struct Saved {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
}

thread_local! {
    /// This thread's supplementary groups (sorted, no repeats) as last
    /// read or set by [`set_thread_groups`]: only it changes them on the
    /// daemon's threads, so a switch to the list the thread already has is
    /// no system call at all (most callers and the daemon have the same
    /// list, often none).
    static THREAD_GROUPS: std::cell::RefCell<Option<Vec<libc::gid_t>>> =
        const { std::cell::RefCell::new(None) };

    /// The daemon's own ids while an [`ActAs`] is alive on this thread
    /// (for [`AsDaemon`]).
    static OWN: std::cell::RefCell<Option<Saved>> = const { std::cell::RefCell::new(None) };
}

/// This thread's supplementary groups, sorted, without repeats.
fn read_thread_groups() -> io::Result<Vec<libc::gid_t>> {
    let mut now: Vec<libc::gid_t> = unistd::getgroups()
        .map_err(from_nix)?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    now.sort_unstable();
    now.dedup();
    Ok(now)
}

/// This thread's supplementary groups (as [`THREAD_GROUPS`] knows them).
fn thread_groups() -> io::Result<Vec<libc::gid_t>> {
    if let Some(g) = THREAD_GROUPS.with_borrow(|g| g.clone()) {
        return Ok(g);
    }
    let now = read_thread_groups()?;
    THREAD_GROUPS.set(Some(now.clone()));
    Ok(now)
}

/// Sets this thread's supplementary groups. `nix::unistd::setgroups` goes
/// through glibc, which changes every thread of the process; the raw
/// system call changes this one only. A change is read back and must have
/// taken; a list the thread has already is left as it is.
fn set_thread_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    let mut want = groups.to_vec();
    want.sort_unstable();
    want.dedup();
    if thread_groups()? == want {
        return Ok(());
    }
    // Unknown until read back: a failure below leaves it unknown.
    THREAD_GROUPS.set(None);
    // SAFETY: `groups` is readable for its length for the duration of the
    // call; the kernel only reads it.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // getgroups reads this thread's list: it must be the one just set.
    let now = read_thread_groups()?;
    if now != want {
        return Err(io::Error::other(format!(
            "setgroups({want:?}) did not take effect (now {now:?})"
        )));
    }
    THREAD_GROUPS.set(Some(now));
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
/// call (same value) must report the value just set. Returns the value
/// before.
fn set_fs_id(which: FsId, id: u32) -> io::Result<u32> {
    set_fs_id_from(which, setfs(which, id), id)
}

/// [`set_fs_id`] for a thread whose id is `before` now (read with
/// `setfs(which, u32::MAX)`, which changes nothing): nothing to do when it
/// is `id` already.
fn set_fs_id_from(which: FsId, before: u32, id: u32) -> io::Result<u32> {
    if before == id {
        return Ok(before);
    }
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
    Ok(before)
}

impl ActAs {
    /// Switches this thread to `id`. An error (the switch did not take)
    /// is returned after returning the thread to what it was.
    /// A caller who is not root also has its limits on space (no
    /// CAP_SYS_RESOURCE: `caps::set_resource`); a root caller has root's.
    pub fn new(id: &Identity) -> io::Result<ActAs> {
        if !is_root() {
            return Ok(ActAs {
                saved: None,
                outer: false,
            });
        }
        let groups = thread_groups()?;
        // There is no getfsuid: setfs*(-1) changes nothing (an invalid id)
        // and returns the current value.
        let (uid, gid) = (setfs(FsId::Uid, u32::MAX), setfs(FsId::Gid, u32::MAX));
        let saved = Saved { uid, gid, groups };
        let outer = OWN.with_borrow(|o| o.is_none());
        if outer {
            OWN.set(Some(saved.clone()));
        }
        let guard = ActAs {
            saved: Some(saved),
            outer,
        };
        caps::set_resource(id.uid == 0)?;
        // Groups and gid first: once fsuid is not 0 the thread has lost
        // the capabilities it needs to change them.
        set_thread_groups(&id.groups)?;
        set_fs_id_from(FsId::Gid, gid, id.gid)?;
        set_fs_id_from(FsId::Uid, uid, id.uid)?;
        Ok(guard)
    }
}

impl Drop for ActAs {
    fn drop(&mut self) {
        if let Some(s) = self.saved.take() {
            let back = set_fs_id(FsId::Uid, s.uid)
                .and_then(|_| set_fs_id(FsId::Gid, s.gid))
                .and_then(|_| set_thread_groups(&s.groups));
            if let Err(e) = back {
                log::error!("cannot return to the daemon's own identity: {e}");
            }
        }
        if self.outer {
            OWN.set(None);
        }
    }
}

/// While alive, what this thread allocates in BACKING counts as the
/// caller's, as natively, and the thread keeps the daemon's rights for
/// everything else (reopening a file by handle, its journal): for a
/// caller who is not root, its fsuid, fsgid and groups (ext4 gives root's
/// reserved blocks to an fsuid or group it names, root by default) and
/// every capability of the daemon but CAP_SYS_RESOURCE (which would let
/// it into root's reserve and past disk quotas); for root, root's. Files
/// the daemon creates meanwhile for itself are made under [`AsDaemon`].
/// The caller's RLIMIT_FSIZE is not known here (FUSE does not send it).
pub struct Limits {
    _as: Option<ActAs>,
}

impl Limits {
    pub fn of(id: &Identity) -> io::Result<Limits> {
        if !is_root() {
            return Ok(Limits { _as: None });
        }
        if id.uid == 0 {
            caps::set_resource(true)?;
            return Ok(Limits { _as: None });
        }
        let guard = ActAs::new(id)?;
        // The switch of fsuid took the file capabilities out.
        caps::all_but_resource()?;
        Ok(Limits { _as: Some(guard) })
    }
}

/// While alive, a thread acting as a caller ([`ActAs`], [`Limits`]) acts
/// as the daemon again, with the effective capabilities it had: for the
/// files the daemon keeps for itself (its journal), which must be the
/// daemon's. Nothing to do on a thread acting as no one.
pub struct AsDaemon {
    back: Option<(Saved, caps::Sets)>,
}

impl AsDaemon {
    pub fn new() -> io::Result<AsDaemon> {
        let Some(own) = OWN.with_borrow(|o| o.clone()) else {
            return Ok(AsDaemon { back: None });
        };
        let sets = caps::get()?;
        let groups = thread_groups()?;
        let (uid, gid) = (setfs(FsId::Uid, u32::MAX), setfs(FsId::Gid, u32::MAX));
        let guard = AsDaemon {
            back: Some((Saved { uid, gid, groups }, sets)),
        };
        // fsuid first: back to 0 gives the thread the file capabilities
        // it needs to change the others.
        set_fs_id_from(FsId::Uid, uid, own.uid)?;
        set_fs_id_from(FsId::Gid, gid, own.gid)?;
        set_thread_groups(&own.groups)?;
        Ok(guard)
    }
}

impl Drop for AsDaemon {
    fn drop(&mut self) {
        if let Some((s, sets)) = self.back.take() {
            let back = set_thread_groups(&s.groups)
                .and_then(|_| set_fs_id(FsId::Gid, s.gid))
                .and_then(|_| set_fs_id(FsId::Uid, s.uid))
                .and_then(|_| caps::set(&sets));
            if let Err(e) = back {
                log::error!("cannot return to the caller's identity: {e}");
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
