//! The syscall layer against the real kernel (run as root, as the suite
//! is: `ActAs` switches identities only then).

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{IoSlice, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use super::*;

fn dir() -> (tempfile::TempDir, File) {
    let d = tempfile::tempdir().unwrap();
    let f = open_dir(d.path()).unwrap();
    (d, f)
}

#[test]
fn a_component_is_one_name_and_nothing_else() {
    for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b"] {
        assert!(component(OsStr::from_bytes(bad)).is_err(), "{bad:?}");
    }
    assert_eq!(component(OsStr::new("...")).unwrap().as_bytes(), b"...");
    assert_eq!(
        component(OsStr::from_bytes(b"\xff\\")).unwrap().as_bytes(),
        b"\xff\\"
    );
}

#[test]
fn open_at_never_follows_a_symlink() {
    let (d, dirf) = dir();
    std::fs::write(d.path().join("target"), b"x").unwrap();
    std::os::unix::fs::symlink("target", d.path().join("link")).unwrap();
    let e = open_at(&dirf, OsStr::new("link"), libc::O_RDONLY, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    assert!(open_quiet_at(&dirf, OsStr::new("target"), false).is_ok());
    let e = open_dir(&d.path().join("link")).unwrap_err();
    assert!(matches!(
        e.raw_os_error(),
        Some(libc::ELOOP | libc::ENOTDIR)
    ));
}

#[test]
fn read_dir_lists_every_name_with_its_type_and_no_dots() {
    let (d, dirf) = dir();
    std::fs::write(d.path().join(OsStr::from_bytes(b"f\xff")), b"").unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("nowhere", d.path().join("l")).unwrap();
    for i in 0..3000 {
        std::fs::write(d.path().join(format!("n{i:04}")), b"").unwrap();
    }
    let mut got: Vec<(Vec<u8>, u8)> = Vec::new();
    read_dir(dirf.as_fd(), |_, d_type, name| {
        got.push((name.as_bytes().to_vec(), d_type));
        Ok(())
    })
    .unwrap();
    got.sort();
    assert_eq!(got.len(), 3003);
    assert!(got.contains(&(b"f\xff".to_vec(), libc::DT_REG)));
    assert!(got.contains(&(b"sub".to_vec(), libc::DT_DIR)));
    assert!(got.contains(&(b"l".to_vec(), libc::DT_LNK)));
    assert!(!got.iter().any(|(n, _)| n == b"." || n == b".."));
    // An error from the callback ends the listing with that error.
    let mut seen = 0;
    let e = read_dir(dirf.as_fd(), |_, _, _| {
        seen += 1;
        Err(std::io::Error::from_raw_os_error(libc::ENOMEM))
    })
    .unwrap_err();
    assert_eq!((e.raw_os_error(), seen), (Some(libc::ENOMEM), 1));
}

#[test]
fn xattrs_of_any_size_are_copied_whole() {
    let (d, dirf) = dir();
    let a = open_at(&dirf, OsStr::new("a"), libc::O_RDWR | libc::O_CREAT, 0o600).unwrap();
    let b = open_at(&dirf, OsStr::new("b"), libc::O_RDWR | libc::O_CREAT, 0o600).unwrap();
    let big: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let name = CString::new("user.big").unwrap();
    setxattr(a.as_fd(), &name, &big, 0).unwrap();
    setxattr(a.as_fd(), c"user.empty", b"", 0).unwrap();
    let all = xattr::all(a.as_fd()).unwrap();
    assert!(
        all.contains(&(name.clone(), big.clone())),
        "{:?}",
        all.len()
    );
    xattr::set_all(b.as_fd(), &all).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = getxattr(b.as_fd(), &name, &mut buf).unwrap();
    assert_eq!(&buf[..n], &big[..]);
    assert_eq!(getxattr(b.as_fd(), c"user.empty", &mut []).unwrap(), 0);
    removexattr(b.as_fd(), &name).unwrap();
    let e = getxattr(b.as_fd(), &name, &mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA));
    drop(d);
}

#[test]
fn utimens_sets_a_symlinks_own_times_not_its_targets() {
    let (d, dirf) = dir();
    std::fs::write(d.path().join("t"), b"").unwrap();
    std::os::unix::fs::symlink("t", d.path().join("l")).unwrap();
    let l = open_path(dirf.as_fd(), c"l").unwrap();
    let when = libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 5,
    };
    utimens(l.as_fd(), &[when, when]).unwrap();
    let link = std::fs::symlink_metadata(d.path().join("l")).unwrap();
    assert_eq!((link.mtime(), link.mtime_nsec()), (1_000_000_000, 5));
    let target = std::fs::metadata(d.path().join("t")).unwrap();
    assert_ne!(target.mtime(), 1_000_000_000);
}

#[test]
fn an_o_path_descriptor_can_be_linked_reopened_and_chowned() {
    let (d, dirf) = dir();
    std::fs::write(d.path().join("f"), b"hello").unwrap();
    let p = open_path(dirf.as_fd(), c"f").unwrap();
    linkat(p.as_fd(), dirf.as_fd(), c"g").unwrap();
    assert_eq!(std::fs::read(d.path().join("g")).unwrap(), b"hello");
    let st = fstat(p.as_fd()).unwrap();
    assert_eq!(st.st_nlink, 2);
    chown(p.as_fd(), 4321, u32::MAX).unwrap();
    let md = std::fs::metadata(d.path().join("f")).unwrap();
    assert_eq!((md.uid(), md.gid()), (4321, st.st_gid));
    chmod(p.as_fd(), 0o4640).unwrap();
    assert_eq!(fstat(p.as_fd()).unwrap().st_mode & 0o7777, 0o4640);
    let mut f = reopen(p.as_fd(), libc::O_WRONLY | libc::O_APPEND).unwrap();
    f.write_all(b"!").unwrap();
    assert_eq!(std::fs::read(d.path().join("g")).unwrap(), b"hello!");
}

#[test]
fn act_as_creates_as_the_caller_and_returns_to_the_daemon() {
    assert!(is_root(), "the suite runs as root");
    let (d, dirf) = dir();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    // Another thread: the switch is per thread.
    std::thread::scope(|s| {
        s.spawn(|| {
            let who = Identity::of(12345, 23456, 0);
            let guard = ActAs::new(&who).unwrap();
            open_at(
                &dirf,
                OsStr::new("theirs"),
                libc::O_CREAT | libc::O_WRONLY,
                0o600,
            )
            .unwrap();
            // Root's rights are not lent: a root-only file stays closed.
            drop(guard);
            open_at(
                &dirf,
                OsStr::new("ours"),
                libc::O_CREAT | libc::O_WRONLY,
                0o600,
            )
            .unwrap();
        });
    });
    let theirs = std::fs::metadata(d.path().join("theirs")).unwrap();
    assert_eq!((theirs.uid(), theirs.gid()), (12345, 23456));
    let ours = std::fs::metadata(d.path().join("ours")).unwrap();
    assert_eq!((ours.uid(), ours.gid()), (0, 0));
}

#[test]
fn act_as_gives_the_callers_groups_to_this_thread_only() {
    let (d, _dirf) = dir();
    let shared = d.path().join("shared");
    std::fs::write(&shared, b"g").unwrap();
    std::os::unix::fs::chown(&shared, Some(0), Some(34567)).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o040)).unwrap();
    let dir = open_dir(d.path()).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // /proc/0/status does not exist: no supplementary groups.
            let _as = ActAs::new(&Identity::of(12345, 12345, 0)).unwrap();
            let e = open_at(&dir, OsStr::new("shared"), libc::O_RDONLY, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        });
        s.spawn(|| {
            let mut who = Identity::of(12345, 12345, 0);
            who.groups = vec![34567];
            let _as = ActAs::new(&who).unwrap();
            assert!(open_at(&dir, OsStr::new("shared"), libc::O_RDONLY, 0).is_ok());
            assert_eq!(
                nix::unistd::getgroups().unwrap(),
                vec![nix::unistd::Gid::from_raw(34567)]
            );
        });
    });
    assert!(!nix::unistd::getgroups()
        .unwrap()
        .contains(&nix::unistd::Gid::from_raw(34567)));
}

/// [`dir`] holding `secret`, a file only its owner (root) may read.
fn dir_with_secret() -> (tempfile::TempDir, File) {
    let (d, dirf) = dir();
    std::fs::write(d.path().join("secret"), b"s").unwrap();
    std::fs::set_permissions(
        d.path().join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    (d, dirf)
}

#[test]
fn act_as_does_not_lend_root_rights() {
    let (_d, dirf) = dir_with_secret();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _as = ActAs::new(&Identity::of(12345, 12345, 0)).unwrap();
            let e = open_at(&dirf, OsStr::new("secret"), libc::O_RDONLY, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EACCES));
        });
    });
    // And this thread never was anyone else.
    assert!(open_at(&dirf, OsStr::new("secret"), libc::O_RDONLY, 0).is_ok());
}

#[test]
fn limits_take_only_the_reserve_from_a_caller_who_is_not_root() {
    let (d, dirf) = dir_with_secret();
    let create = |name: &str| {
        open_at(
            &dirf,
            OsStr::new(name),
            libc::O_CREAT | libc::O_WRONLY,
            0o600,
        )
        .unwrap();
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            // Root in a container may lack it: then there is none to lose.
            let had = caps::has_resource().unwrap();
            let user = Identity::of(12345, 23456, 0);
            {
                let _l = Limits::of(&user).unwrap();
                assert!(!caps::has_resource().unwrap());
                // The daemon's rights stay: a root-only file opens.
                assert!(open_at(&dirf, OsStr::new("secret"), libc::O_RDONLY, 0).is_ok());
                // What it creates is the caller's, unless the daemon's own.
                create("theirs");
                {
                    let _own = AsDaemon::new().unwrap();
                    assert_eq!(caps::has_resource().unwrap(), had);
                    create("ours");
                }
                assert!(!caps::has_resource().unwrap());
                create("theirs2");
            }
            // The guard returned the thread to the daemon's own.
            assert_eq!(caps::has_resource().unwrap(), had);
            create("ours2");
            // Kept: the thread stays so after the call...
            Limits::kept(&user).unwrap();
            assert!(!caps::has_resource().unwrap());
            // ...through a caller's create, which returns to it...
            drop(ActAs::new(&user).unwrap());
            assert!(!caps::has_resource().unwrap());
            create("theirs3");
            // ...until the next request that is not a write.
            own_rights().unwrap();
            assert_eq!(caps::has_resource().unwrap(), had);
            create("ours3");
            // A thread started meanwhile inherits the caller's; its first
            // `own_rights` (unknown to it: read, then switched) ends that.
            Limits::kept(&user).unwrap();
            std::thread::scope(|s2| {
                s2.spawn(|| {
                    assert!(!caps::has_resource().unwrap());
                    own_rights().unwrap();
                    assert_eq!(caps::has_resource().unwrap(), had);
                    create("ours4");
                });
            });
            // A root caller has root's.
            Limits::kept(&Identity::of(0, 0, 0)).unwrap();
            assert_eq!(caps::has_resource().unwrap(), had);
            // A caller who is not root creating: none of root's rights.
            {
                let _as = ActAs::new(&user).unwrap();
                assert!(!caps::has_resource().unwrap());
                assert!(open_at(&dirf, OsStr::new("secret"), libc::O_RDONLY, 0).is_err());
            }
            assert_eq!(caps::has_resource().unwrap(), had);
            // The cost per write (printed, not asserted): the same user's
            // again and again, and a user's then root's (each a switch).
            let n = 20_000;
            let t = std::time::Instant::now();
            for _ in 0..n {
                Limits::kept(&user).unwrap();
            }
            let same = t.elapsed() / n;
            let root = Identity::of(0, 0, 0);
            let t = std::time::Instant::now();
            for _ in 0..n {
                Limits::kept(&user).unwrap();
                Limits::kept(&root).unwrap();
            }
            let alternating = t.elapsed() / n;
            let t = std::time::Instant::now();
            for _ in 0..n {
                own_rights().unwrap();
            }
            let own = t.elapsed() / n;
            eprintln!(
                "Limits::kept per write: the same user {same:?}, user then root \
                 {alternating:?}; own_rights on the daemon's own {own:?}"
            );
        });
    });
    let owner = |n: &str| std::fs::metadata(d.path().join(n)).unwrap();
    for theirs in ["theirs", "theirs2", "theirs3"] {
        assert_eq!((owner(theirs).uid(), owner(theirs).gid()), (12345, 23456));
    }
    for ours in ["ours", "ours2", "ours3", "ours4"] {
        assert_eq!((owner(ours).uid(), owner(ours).gid()), (0, 0), "{ours}");
    }
    // Other threads never lost it.
    let permitted = caps::get().unwrap();
    assert_eq!(
        caps::has_resource().unwrap(),
        permitted.has_permitted_resource()
    );
}

#[test]
fn umask_is_the_callers_for_this_thread_only() {
    let (d, dirf) = dir();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _m = Umask::set(0o077).unwrap();
            mkdirat(dirf.as_fd(), c"private", 0o777).unwrap();
        });
    });
    let md = std::fs::metadata(d.path().join("private")).unwrap();
    assert_eq!(md.mode() & 0o777, 0o700);
}

#[test]
fn a_descriptor_sent_over_a_socket_is_received_as_the_same_file() {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let (d, _dirf) = dir();
    std::fs::write(d.path().join("f"), b"x").unwrap();
    let f = File::open(d.path().join("f")).unwrap();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let fds = [f.as_raw_fd(), f.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        a.as_raw_fd(),
        &[IoSlice::new(b"!")],
        &cmsg,
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    let got = process::receive_fd(&b).unwrap();
    let (x, y) = (fstat(got.as_fd()).unwrap(), fstat(f.as_fd()).unwrap());
    assert_eq!((x.st_dev, x.st_ino), (y.st_dev, y.st_ino));
    drop(a);
    let e = process::receive_fd(&b).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[test]
fn the_fd_limit_is_raised_to_at_most_the_cap() {
    let before = fd_limit();
    let now = process::raise_fd_limit(before.max(64));
    assert!(now >= before);
    assert_eq!(fd_limit(), now);
}

#[test]
fn handles_name_inodes_across_renames() {
    let (d, dirf) = dir();
    std::fs::write(d.path().join("a"), b"x").unwrap();
    let Ok((h, _mnt)) = name_to_handle(dirf.as_fd(), c"a") else {
        return; // a filesystem without handles: nothing to check
    };
    std::fs::rename(d.path().join("a"), d.path().join("b")).unwrap();
    let fd = open_by_handle(dirf.as_fd(), &h, libc::O_PATH).unwrap();
    let st = fstat(fd.as_fd()).unwrap();
    let md = std::fs::metadata(d.path().join("b")).unwrap();
    assert_eq!(st.st_ino, md.ino());
}
