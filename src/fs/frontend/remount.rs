//! `mount -o remount,...` of a running cutf8fs mount (mount(8) runs the
//! helper with `remount` among the options): the kernel's flags of that
//! mount changed in place, by one mount(2) with MS_REMOUNT; the daemon is
//! neither started nor told. Called by `daemon::run`.
//!
//! What a remount can change is what the kernel keeps: read-only or
//! read-write (for FUSE the kernel takes this flag, and refuses every
//! change through the mount once it is set, `EROFS`, so the daemon needs
//! no word of it) and `nosuid`, `nodev`, `noexec`. mount(8) hands its
//! helper the whole new set, computed from the mount's flags and the
//! change asked for, and passes only the flags that are set (for
//! `remount,suid` it leaves `nosuid` out; `suid` itself never arrives): so
//! when mount(8) runs the helper ([`Given::Whole`]), a flag not named is
//! off, as mount(2) takes it. Run directly (`cutf8fs BACKING MNT -o
//! remount,ro`), a flag not named keeps its value ([`Given::Changes`]):
//! the mount's nosuid and nodev are not lost to a shorter line.
//!
//! The daemon's own options (`index_db=`, `blksize=`, ...) cannot change
//! without a new daemon: mount(8) passes those of the fstab line again,
//! so they are accepted and left as they are. The access-time flags and `sync` also
//! steer the daemon, so a remount that would change them is refused.
//! A daemon started with `-o ro` or `-o archive` stays read-only whatever
//! the kernel's flag says: it refuses every change itself ([`changes`],
//! [`opens_for_change`]), EROFS as the kernel would.

use std::path::Path;

use nix::mount::MsFlags;

use super::failure::Failure;

/// Whether request `op` (as `CutFs::guard` names it) changes BACKING: a
/// read-only daemon refuses it.
pub fn changes(op: &str) -> bool {
    [
        "setattr",
        "mknod",
        "mkdir",
        "unlink",
        "rmdir",
        "symlink",
        "rename",
        "link",
        "create",
        "write",
        "fallocate",
        "setxattr",
        "removexattr",
    ]
    .contains(&op)
}

/// Whether an open with `flags` could change the file: a read-only daemon
/// refuses it.
pub fn opens_for_change(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

/// Whether `options` (the `-o` arguments) ask for a remount.
pub fn asked<S: AsRef<str>>(options: &[S]) -> bool {
    words(options).any(|w| w == "remount")
}

fn words<S: AsRef<str>>(options: &[S]) -> impl Iterator<Item = &str> {
    options
        .iter()
        .flat_map(|o| o.as_ref().split(','))
        .filter(|w| !w.is_empty())
}

/// The flags a remount may change, each with its word to set it and the
/// word to clear it.
const CHANGEABLE: [(MsFlags, &str, &str); 4] = [
    (MsFlags::MS_RDONLY, "ro", "rw"),
    (MsFlags::MS_NOSUID, "nosuid", "suid"),
    (MsFlags::MS_NODEV, "nodev", "dev"),
    (MsFlags::MS_NOEXEC, "noexec", "exec"),
];

/// The flags a remount keeps: each word that sets or clears one, and
/// whether it sets it.
const KEPT: [(MsFlags, &str, bool); 11] = [
    (MsFlags::MS_NOATIME, "noatime", true),
    (MsFlags::MS_NOATIME, "atime", false),
    (MsFlags::MS_NOATIME, "relatime", false),
    (MsFlags::MS_NOATIME, "strictatime", false),
    (MsFlags::MS_NODIRATIME, "nodiratime", true),
    (MsFlags::MS_NODIRATIME, "diratime", false),
    (MsFlags::MS_RELATIME, "relatime", true),
    (MsFlags::MS_RELATIME, "norelatime", false),
    (MsFlags::MS_RELATIME, "strictatime", false),
    (MsFlags::MS_SYNCHRONOUS, "sync", true),
    (MsFlags::MS_SYNCHRONOUS, "async", false),
];

/// How the options of a remount are meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Given {
    /// mount(8)'s: every flag that stays set is named.
    Whole,
    /// A person's: only what changes is named.
    Changes,
}

impl Given {
    /// [`Given::Whole`] when this process was started by mount(8) (its
    /// parent's program is `mount`), else [`Given::Changes`].
    fn here() -> Given {
        let parent = std::os::unix::process::parent_id();
        let exe = std::fs::read_link(format!("/proc/{parent}/exe")).ok();
        match exe.as_deref().and_then(Path::file_name) {
            Some(n) if n == "mount" => Given::Whole,
            _ => Given::Changes,
        }
    }
}

/// The flags a remount with `options` gives a mount whose flags are `now`:
/// the words of [`CHANGEABLE`] applied in order, to `now` or (`Whole`) to
/// nothing; Err names a word that would change a flag the daemon steers by.
pub fn flags<S: AsRef<str>>(now: MsFlags, options: &[S], given: Given) -> Result<MsFlags, String> {
    let mut f = match given {
        Given::Changes => now,
        Given::Whole => CHANGEABLE
            .iter()
            .fold(now, |f, &(flag, ..)| f.difference(flag)),
    };
    for w in words(options) {
        if let Some(&(flag, on, _)) = CHANGEABLE.iter().find(|c| c.1 == w || c.2 == w) {
            f.set(flag, w == on);
            continue;
        }
        for (flag, _, set) in KEPT.iter().filter(|k| k.1 == w) {
            if now.contains(*flag) != *set {
                return Err(format!(
                    "option '{w}' cannot change on a remount: access times and sync are the \
                     daemon's to keep; unmount and mount again with it"
                ));
            }
        }
    }
    Ok(f)
}

/// The kernel's flags of the mount at `mnt` (statvfs).
fn current(mnt: &Path) -> Result<MsFlags, Failure> {
    use nix::sys::statvfs::FsFlags;
    let v = nix::sys::statvfs::statvfs(mnt)
        .map_err(|e| Failure::mount(format!("{}: statvfs: {e}", mnt.display())))?;
    let s = v.flags();
    let mut f = MsFlags::empty();
    for (st, ms) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_SYNCHRONOUS, MsFlags::MS_SYNCHRONOUS),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        f.set(ms, s.contains(st));
    }
    Ok(f)
}

/// Remounts the cutf8fs mount at `mountpoint` with `options`.
pub fn run<S: AsRef<str>>(mountpoint: &Path, options: &[S]) -> Result<(), Failure> {
    let mnt = std::fs::canonicalize(mountpoint)
        .map_err(|e| Failure::mount(format!("{}: {e}", mountpoint.display())))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Failure::mount(format!("/proc/self/mountinfo: {e}")))?;
    match crate::mountinfo::cutf8fs_mount_of(&info, &mnt) {
        Some((m, _)) if m == mnt => {}
        _ => {
            return Err(Failure::mount(format!(
                "remount: {} is not a cutf8fs mount point",
                mnt.display()
            )))
        }
    }
    let want = flags(current(&mnt)?, options, Given::here()).map_err(Failure::usage)?;
    nix::mount::mount(
        None::<&str>,
        &mnt,
        None::<&str>,
        MsFlags::MS_REMOUNT | want,
        None::<&str>,
    )
    .map_err(|e| {
        let why = match e {
            nix::errno::Errno::EPERM => " (a remount needs root: CAP_SYS_ADMIN)",
            nix::errno::Errno::EBUSY => " (a file is open for writing through it)",
            _ => "",
        };
        Failure::mount(format!("remount {}: {e}{why}", mnt.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: MsFlags = MsFlags::MS_NOSUID
        .union(MsFlags::MS_NODEV)
        .union(MsFlags::MS_RELATIME);

    #[test]
    fn a_remount_changes_what_it_names_and_keeps_the_rest() {
        for (opts, want) in [
            ("remount,ro", NOW.union(MsFlags::MS_RDONLY)),
            ("remount,rw", NOW),
            ("remount,ro,rw", NOW),
            ("remount,suid,dev", MsFlags::MS_RELATIME),
            ("remount,noexec", NOW.union(MsFlags::MS_NOEXEC)),
            // The fstab line's daemon options and the same atime mode.
            (
                "rw,nosuid,nodev,index_db=none,relatime,remount,ro",
                NOW.union(MsFlags::MS_RDONLY),
            ),
        ] {
            assert_eq!(flags(NOW, &[opts], Given::Changes), Ok(want), "{opts}");
        }
    }

    /// What mount(8) passed its helper here (util-linux 2.38), for each
    /// change asked of a mount that was rw,nosuid,nodev,relatime.
    #[test]
    fn mount8s_whole_set_is_taken_as_it_is() {
        let uid = ",user_id=0,group_id=0,default_permissions,allow_other";
        for (asked, passed, want) in [
            (
                "remount,suid,dev",
                "rw,relatime,remount",
                MsFlags::MS_RELATIME,
            ),
            (
                "remount,noexec",
                "rw,nosuid,nodev,relatime,remount,noexec",
                NOW.union(MsFlags::MS_NOEXEC),
            ),
            (
                "remount,ro",
                "ro,nosuid,nodev,relatime,remount",
                NOW.union(MsFlags::MS_RDONLY),
            ),
        ] {
            let opts = format!("{passed}{uid}");
            let now = NOW.union(MsFlags::MS_NOEXEC);
            assert_eq!(flags(now, &[&opts], Given::Whole), Ok(want), "{asked}");
        }
    }

    #[test]
    fn a_remount_refuses_to_change_what_the_daemon_steers_by() {
        for opts in ["remount,noatime", "remount,strictatime", "remount,sync"] {
            let e = flags(NOW, &[opts], Given::Changes).unwrap_err();
            assert!(e.contains("cannot change on a remount"), "{opts}: {e}");
        }
        assert!(asked(&["rw", "remount,ro"]));
        assert!(!asked(&["ro,noremount"]));
    }
}
