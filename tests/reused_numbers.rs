//! Inode numbers BACKING gives again at once (ext4 hands a freed number to
//! the next new inode of its group): a directory or file made through the
//! mount on the number of one deleted while the kernel still held it must
//! be served as itself, never through what the daemon kept of the deleted
//! one (a cached directory descriptor, an open file's). And the real
//! workload that found it: overlayfs with its upper and work directories
//! on the mount, several of them made, used and deleted at once (xfstests
//! generic/631's shape), which renamed in deleted directories before.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::disk::Ext4;
use crate::support::mount::Mount;

/// A directory deleted while the kernel still holds its inode (a
/// process's current directory), a file made on its number once the
/// daemon let go of the directory: the file is served as a regular file,
/// with its own bytes, not with the deleted directory's type (the kernel
/// took it for a directory, and `mv` onto it failed with EISDIR).
#[test]
fn a_file_on_a_deleted_directorys_number_is_a_file() {
    let disk = Ext4::new(64);
    let b = disk.path("backing");
    fs::create_dir_all(&b).unwrap();
    fs::create_dir_all(disk.path("mnt")).unwrap();
    let m = Mount::with(&[]).on(&b, &disk.path("mnt"), &disk.path("log"));
    let dirs: Vec<_> = (0..8)
        .map(|i| {
            let d = m.m(&format!("d{i}"));
            fs::create_dir(&d).unwrap();
            let ino = fs::metadata(&d).unwrap().ino();
            let inside = Command::new("sleep")
                .arg("60")
                .current_dir(&d)
                .spawn()
                .unwrap();
            fs::remove_dir(&d).unwrap();
            (ino, inside)
        })
        .collect();
    // The daemon lets go of a removed directory within about a second
    // (man cutf8fs): then BACKING frees its number.
    std::thread::sleep(Duration::from_millis(2500));
    let mut reused = 0;
    for i in 0..8 {
        let f = m.m(&format!("f{i}"));
        fs::write(&f, format!("file {i}")).unwrap();
        let st = fs::metadata(&f).unwrap();
        if dirs.iter().any(|(ino, _)| *ino == st.ino()) {
            reused += 1;
        }
        assert!(st.is_file(), "f{i}: {:?}", st.file_type());
        assert_eq!(fs::read_to_string(&f).unwrap(), format!("file {i}"));
        fs::rename(&f, m.m(&format!("g{i}"))).unwrap();
        assert!(fs::metadata(m.m(&format!("g{i}"))).unwrap().is_file());
    }
    for (_, mut inside) in dirs {
        let _ = inside.kill();
        let _ = inside.wait();
    }
    assert!(
        reused >= 1,
        "ext4 reused no number: the test proves nothing"
    );
}

/// overlayfs over the mount: six workers each make an upper and a work
/// directory, mount an overlay, rename a lower file twice and unmount, in
/// a loop for five seconds (xfstests generic/631, shortened). Every mv
/// succeeds.
#[test]
fn overlayfs_upper_directories_made_and_deleted_at_once_all_work() {
    let disk = Ext4::new(256);
    let b = disk.path("backing");
    fs::create_dir_all(&b).unwrap();
    fs::create_dir_all(disk.path("mnt")).unwrap();
    let m = Mount::with(&[]).on(&b, &disk.path("mnt"), &disk.path("log"));
    let s = m.m("");
    fs::create_dir_all(s.join("lowerdir/etc")).unwrap();
    fs::create_dir_all(s.join("lowerdir1")).unwrap();
    fs::write(s.join("lowerdir/etc/access.conf"), b"salts\n").unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let workers: Vec<_> = (0..6)
        .map(|tag| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut errors = Vec::new();
                let mut rounds = 0;
                while Instant::now() < until {
                    let [merged, upper, work] =
                        ["merged", "upperdir", "workdir"].map(|d| s.join(format!("{d}{tag}")));
                    for d in [&merged, &upper, &work] {
                        let _ = fs::remove_dir_all(d);
                        fs::create_dir(d).unwrap();
                    }
                    let opts = format!(
                        "lowerdir={}:{},upperdir={},workdir={},index=off",
                        s.join("lowerdir").display(),
                        s.join("lowerdir1").display(),
                        upper.display(),
                        work.display()
                    );
                    let out = Command::new("mount")
                        .args(["-t", "overlay", "overlay", "-o", &opts])
                        .arg(&merged)
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "mount -t overlay: {out:?}");
                    let etc = merged.join("etc");
                    for _ in 0..2 {
                        if let Err(e) =
                            fs::rename(etc.join("access.conf"), etc.join("access.conf.bak"))
                        {
                            errors.push(format!("worker {tag} round {rounds}: mv: {e}"));
                        }
                        if let Err(e) = fs::write(etc.join("access.conf"), b"") {
                            errors.push(format!("worker {tag} round {rounds}: touch: {e}"));
                        }
                    }
                    let st = Command::new("umount").arg(&merged).status().unwrap();
                    assert!(st.success(), "umount overlay");
                    rounds += 1;
                }
                (rounds, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut rounds = 0;
    for w in workers {
        let (r, e) = w.join().unwrap();
        rounds += r;
        all.extend(e);
    }
    assert!(rounds >= 6, "only {rounds} rounds ran");
    assert!(
        all.is_empty(),
        "{} of {rounds} rounds failed:\n{}",
        all.len(),
        all.join("\n")
    );
}
