//! A daemon only ever unmounts its own mount: with the old daemon lazily
//! detached (`fusermount3 -uz`, a file still open through it) and a new one
//! mounted on the same path, SIGTERM to the old daemon leaves the new mount
//! alone and ends the old daemon; SIGTERM to the new one unmounts it.

use std::fs;

use crate::support::mount::{is_mounted, lazy_unmount, wait_for, Mount};

fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a daemon this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

#[test]
fn sigterm_to_a_detached_daemon_leaves_the_new_mount_on_its_path_alone() {
    let mut old = Mount::new(&[], |b| fs::write(b.join("f"), "text\n").unwrap());
    // Keeps the old daemon serving once detached.
    let held = fs::File::open(old.m("f")).unwrap();
    lazy_unmount(&old.mnt);
    assert!(wait_for(5.0, || !is_mounted(&old.mnt)));
    let mut old_daemon = old.take_child().expect("the old daemon runs");
    let mut new = Mount::with(&[]).on(&old.backing, &old.mnt, &old.dir().join("new.log"));

    kill(old_daemon.id(), libc::SIGTERM);
    let ended = wait_for(10.0, || old_daemon.try_wait().ok().flatten().is_some());
    assert!(
        is_mounted(&new.mnt),
        "SIGTERM to the old daemon unmounted the new mount; old daemon's log:\n{}",
        old.log_text()
    );
    assert!(ended, "the old daemon still runs 10 s after SIGTERM");
    assert_eq!(fs::read_to_string(new.m("f")).unwrap(), "text\n");
    drop(held);

    // SIGTERM to the new daemon unmounts its own mount.
    let mut new_daemon = new.take_child().expect("the new daemon runs");
    kill(new_daemon.id(), libc::SIGTERM);
    assert!(wait_for(10.0, || !is_mounted(&new.mnt)));
    let status = wait_for(10.0, || new_daemon.try_wait().ok().flatten().is_some());
    assert!(status, "the new daemon did not exit after its unmount");
    assert!(new_daemon.wait().unwrap().success());
}
