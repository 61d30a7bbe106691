//! Fewer round trips per file, same behaviour: close(2) writes a shared
//! mapping's dirty pages back before it returns; `ls -l` asks the daemon
//! for a file's SELinux label once per listing, not once per file, and
//! labels that exist still show.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::process::Command;

use crate::support::mount::Mount;

/// Writes `new` at offset 1 of `rel` through a shared mapping, closes the
/// descriptor with the mapping still alive, and returns what the mount
/// and BACKING hold right after the close.
fn map_write_close(m: &Mount, rel: &str, new: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m(rel))
        .unwrap();
    // SAFETY: the file is not changed by anything else during the test.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.unwrap();
    map[1..1 + new.len()].copy_from_slice(new);
    drop(f); // close(2): the mapping stays
    let after = (fs::read(m.m(rel)).unwrap(), fs::read(m.b(rel)).unwrap());
    drop(map);
    after
}

#[test]
fn close_writes_back_a_shared_mapping_without_flush() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("raw.bin"), b"\x00\x01binary\xff\xfe data").unwrap();
    });
    // A first open and close: the kernel asks FLUSH once and, told ENOSYS,
    // never again for this mount.
    fs::OpenOptions::new()
        .append(true)
        .open(m.m("raw.bin"))
        .unwrap()
        .write_all(b"!")
        .unwrap();
    for round in 0..3u8 {
        let new = [b'A' + round; 4];
        let (view, disk) = map_write_close(&m, "raw.bin", &new);
        assert_eq!(
            &view[1..5],
            &new,
            "round {round}: the mount lost the mapped write"
        );
        assert_eq!(
            &disk[1..5],
            &new,
            "round {round}: BACKING lacks the mapped write after close(2)"
        );
    }
    // A text file written through the mount is stored corrected; its
    // mapped writes reach BACKING as Corrected UTF-8 by close(2) too.
    fs::write(m.m("t.txt"), "héllo wörld, plain text\n").unwrap();
    let mut want = "héllo wörld, plain text\n".as_bytes().to_vec();
    want[1..4].copy_from_slice(b"ELL");
    let (view, disk) = map_write_close(&m, "t.txt", b"ELL");
    assert_eq!(view, want);
    assert!(
        cutf8::has_magic(&disk),
        "the text file should be stored corrected"
    );
    assert_eq!(
        crate::support::mount::expected_view(&disk),
        want,
        "BACKING lacks the mapped write to a corrected file after close(2)"
    );
}

/// `ls -l` asks every file for `security.selinux`, which the kernel never
/// caches. Where the daemon is asked (no security module answers), an
/// absent label is "not supported", which `ls` remembers for the whole
/// mount: a listing of 300 files costs a handful of getxattr requests,
/// not 300. A label BACKING has still reads, lists and sets as before.
#[test]
fn ls_l_asks_for_labels_once_per_listing_and_labels_that_exist_show() {
    let m = Mount::new(&[], |b| {
        for d in 0..3 {
            fs::create_dir(b.join(format!("d{d}"))).unwrap();
            for f in 0..100 {
                fs::write(b.join(format!("d{d}/f{f}")), "raw\n").unwrap();
            }
        }
    });
    let labelled = m.b("d1/f7");
    let set = Command::new("setfattr")
        .args(["-n", "security.selinux", "-v", "label_t"])
        .arg(&labelled)
        .output()
        .unwrap();
    crate::support::run::succeeded(&set, "setfattr in BACKING");
    let ls = || {
        let out = Command::new("ls").arg("-lR").arg(&m.mnt).output().unwrap();
        crate::support::run::succeeded(&out, "ls -lR");
    };
    ls();
    let before = m.stats_count("getxattr");
    ls();
    let asked = m.stats_count("getxattr") - before;
    assert!(
        asked < 30,
        "{asked} getxattr requests for a listing of 300 files"
    );

    let get = |rel: &str| {
        Command::new("getfattr")
            .args(["--only-values", "-n", "security.selinux"])
            .arg(m.m(rel))
            .output()
            .unwrap()
    };
    let out = get("d1/f7");
    crate::support::run::succeeded(&out, "getfattr of the labelled file");
    assert_eq!(out.stdout, b"label_t");
    let out = get("d1/f8");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Operation not supported"), "{err}");
    let list = |rel: &str| {
        let out = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(m.m(rel))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(list("d1/f7").contains("security.selinux=\"label_t\""));
    assert!(!list("d1/f8").contains("security.selinux"));
    let set = Command::new("setfattr")
        .args(["-n", "security.selinux", "-v", "other_t"])
        .arg(m.m("d1/f8"))
        .output()
        .unwrap();
    crate::support::run::succeeded(&set, "setfattr through the mount");
    let out = get("d1/f8");
    crate::support::run::succeeded(&out, "getfattr of the newly labelled file");
    assert_eq!(out.stdout, b"other_t");
}
