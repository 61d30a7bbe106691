//! The mount exported by real file servers, end to end: Samba's smbd with
//! smbclient, and NFS-Ganesha (NFSv4, FSAL VFS) with libnfs as the client
//! (`support::servers`). Through each: the listing shows every name with
//! the view's size, reads return the view, what is written arrives in
//! BACKING as Corrected UTF-8 (text) or as it is (binary), and rename,
//! delete, mkdir and rmdir reach BACKING. The server configurations are
//! those man cutf8fs documents (EXPORTING).

use std::fs;
use std::path::Path;
use std::process::Output;

use crate::support::mount::Mount;
use crate::support::servers::Server;
use crate::support::write::{assert_corrected, assert_raw, corrected_file};

/// Text whose view is longer than its bytes in BACKING (U+0800 and
/// U+10000 take one byte more in UTF-8), and some that is not.
const NOTES: &str = "Caf\u{e9} \u{2014} \u{800}\u{10000} \u{39c}\u{3bf}\u{1fe6}\u{3c3}\u{3b1}\n";
const INNER: &str = "\u{3f4} inner \u{801}\n";
const RAW: &[u8] = b"\x00\x01binary\xff\xfe\n";
const NEW_TEXT: &str = "written \u{2192} \u{800} through the server\n";
const NEW_RAW: &[u8] = b"\xc0\x80 not text \x00\n";

fn archive(b: &Path) {
    fs::write(b.join("notes.txt"), corrected_file(NOTES)).unwrap();
    fs::write(b.join("raw.bin"), RAW).unwrap();
    fs::create_dir(b.join("d")).unwrap();
    fs::write(b.join("d/inner.txt"), corrected_file(INNER)).unwrap();
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The size a listing line gives `name` (smbclient: `NAME ATTRS SIZE DATE`;
/// nfs-ls: `MODE LINKS UID GID SIZE NAME`).
fn listed_size(listing: &str, name: &str) -> u64 {
    for l in listing.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.first() == Some(&name) && w.len() > 2 {
            return w[2].parse().unwrap();
        }
        if w.len() == 6 && w[5] == name {
            return w[4].parse().unwrap();
        }
    }
    panic!("{name} not listed:\n{listing}");
}

fn assert_gone(p: &Path, what: &str) {
    assert!(!p.exists(), "{what}: {} still exists", p.display());
}

#[test]
fn samba_serves_the_view_and_writes_corrected_utf8() {
    let m = Mount::new(&[], archive);
    let smb = Server::samba(&m.mnt);
    let local = tempfile::tempdir().unwrap();
    let l = local.path();

    // Listing: every name, the view's sizes.
    let ls = ok(smb.smb("ls", l), "ls");
    assert_eq!(listed_size(&ls, "notes.txt"), NOTES.len() as u64, "{ls}");
    assert_eq!(listed_size(&ls, "raw.bin"), RAW.len() as u64, "{ls}");
    assert!(ls.lines().any(|x| x.trim_start().starts_with("d ")), "{ls}");
    let inner = ok(smb.smb("cd d; ls", l), "ls d");
    assert_eq!(listed_size(&inner, "inner.txt"), INNER.len() as u64);

    // Reading: the view.
    ok(
        smb.smb(
            "get notes.txt notes; get raw.bin raw; cd d; get inner.txt inner",
            l,
        ),
        "get",
    );
    assert_eq!(fs::read(l.join("notes")).unwrap(), NOTES.as_bytes());
    assert_eq!(fs::read(l.join("raw")).unwrap(), RAW);
    assert_eq!(fs::read(l.join("inner")).unwrap(), INNER.as_bytes());

    // Writing: text arrives corrected, binary as it is.
    fs::write(l.join("new-text"), NEW_TEXT).unwrap();
    fs::write(l.join("new-raw"), NEW_RAW).unwrap();
    ok(
        smb.smb("put new-text new.txt; put new-raw new.bin", l),
        "put",
    );
    assert_corrected(&m.b("new.txt"), NEW_TEXT.as_bytes(), "put through smbd");
    assert_raw(&m.b("new.bin"), NEW_RAW, "put through smbd");
    let ls = ok(smb.smb("ls", l), "ls");
    assert_eq!(listed_size(&ls, "new.txt"), NEW_TEXT.len() as u64, "{ls}");

    // Rename, delete, mkdir, rmdir reach BACKING.
    ok(smb.smb("rename new.txt moved.txt", l), "rename");
    assert_gone(&m.b("new.txt"), "rename");
    assert_corrected(
        &m.b("moved.txt"),
        NEW_TEXT.as_bytes(),
        "renamed through smbd",
    );
    ok(smb.smb("del moved.txt; del new.bin", l), "del");
    assert_gone(&m.b("moved.txt"), "del");
    assert_gone(&m.b("new.bin"), "del");
    ok(smb.smb("mkdir e", l), "mkdir");
    assert!(m.b("e").is_dir());
    ok(smb.smb("rmdir e", l), "rmdir");
    assert_gone(&m.b("e"), "rmdir");
    // The mount still serves what the server left.
    assert_eq!(fs::read(m.m("notes.txt")).unwrap(), NOTES.as_bytes());
}

#[test]
fn nfs_ganesha_serves_the_view_and_writes_corrected_utf8() {
    let m = Mount::new(&[], archive);
    let nfs = Server::ganesha(&m.mnt, "4242.1");
    let local = tempfile::tempdir().unwrap();
    let l = local.path();

    // Listing: every name, the view's sizes.
    let ls = ok(nfs.nfs_tool("nfs-ls", &[&nfs.nfs_url("")]), "nfs-ls");
    assert_eq!(listed_size(&ls, "notes.txt"), NOTES.len() as u64, "{ls}");
    assert_eq!(listed_size(&ls, "raw.bin"), RAW.len() as u64, "{ls}");
    assert!(
        ls.lines().any(|x| x.starts_with('d') && x.ends_with(" d")),
        "{ls}"
    );
    let inner = ok(nfs.nfs_tool("nfs-ls", &[&nfs.nfs_url("d")]), "nfs-ls d");
    assert_eq!(listed_size(&inner, "inner.txt"), INNER.len() as u64);

    // Reading: the view.
    for (rel, want) in [
        ("notes.txt", NOTES.as_bytes()),
        ("raw.bin", RAW),
        ("d/inner.txt", INNER.as_bytes()),
    ] {
        let out = nfs.nfs_tool("nfs-cat", &[&nfs.nfs_url(rel)]);
        assert!(out.status.success(), "nfs-cat {rel}: {out:?}");
        assert_eq!(out.stdout, want, "nfs-cat {rel}");
    }

    // Writing: text arrives corrected, binary as it is.
    fs::write(l.join("new-text"), NEW_TEXT).unwrap();
    fs::write(l.join("new-raw"), NEW_RAW).unwrap();
    let src = l.join("new-text").display().to_string();
    ok(
        nfs.nfs_tool("nfs-cp", &[&src, &nfs.nfs_url("new.txt")]),
        "nfs-cp text",
    );
    let src = l.join("new-raw").display().to_string();
    ok(
        nfs.nfs_tool("nfs-cp", &[&src, &nfs.nfs_url("new.bin")]),
        "nfs-cp raw",
    );
    assert_corrected(
        &m.b("new.txt"),
        NEW_TEXT.as_bytes(),
        "written through Ganesha",
    );
    assert_raw(&m.b("new.bin"), NEW_RAW, "written through Ganesha");
    let size = ok(nfs.nfs_op("size", &["/new.txt"]), "size");
    assert_eq!(size.trim(), NEW_TEXT.len().to_string());

    // Rename, delete, mkdir, rmdir reach BACKING.
    ok(nfs.nfs_op("mv", &["/new.txt", "/moved.txt"]), "mv");
    assert_gone(&m.b("new.txt"), "mv");
    assert_corrected(
        &m.b("moved.txt"),
        NEW_TEXT.as_bytes(),
        "renamed through Ganesha",
    );
    ok(nfs.nfs_op("rm", &["/moved.txt"]), "rm");
    ok(nfs.nfs_op("rm", &["/new.bin"]), "rm");
    assert_gone(&m.b("moved.txt"), "rm");
    assert_gone(&m.b("new.bin"), "rm");
    ok(nfs.nfs_op("mkdir", &["/e"]), "mkdir");
    assert!(m.b("e").is_dir());
    ok(nfs.nfs_op("rmdir", &["/e"]), "rmdir");
    assert_gone(&m.b("e"), "rmdir");
    assert_eq!(fs::read(m.m("notes.txt")).unwrap(), NOTES.as_bytes());

    // A restarted server (same configuration and state) serves it again.
    let mut nfs = nfs;
    nfs.restart();
    let out = nfs.nfs_tool("nfs-cat", &[&nfs.nfs_url("notes.txt")]);
    assert_eq!(out.stdout, NOTES.as_bytes(), "after a restart: {out:?}");
}

/// NFS-Ganesha keeps the file handles of what its clients looked up and
/// opens files by them (`open_by_handle_at`): after the kernel forgot the
/// mount's inodes (`drop_caches`), its clients read the same view; after
/// the daemon and the server restart (a fixed `Filesystem_Id`), they read
/// it again; a file deleted in BACKING is gone for them.
#[test]
fn nfs_ganesha_reads_through_its_handles_after_eviction_and_restarts() {
    let mut m = Mount::new(&[], archive);
    let mut nfs = Server::ganesha(&m.mnt, "4243.1");
    let cat = |nfs: &Server, rel: &str| nfs.nfs_tool("nfs-cat", &[&nfs.nfs_url(rel)]);
    for (rel, want) in [
        ("notes.txt", NOTES.as_bytes()),
        ("d/inner.txt", INNER.as_bytes()),
    ] {
        let out = cat(&nfs, rel);
        assert_eq!(out.stdout, want, "nfs-cat {rel}: {out:?}");
    }
    crate::support::handles::drop_caches();
    for (rel, want) in [
        ("notes.txt", NOTES.as_bytes()),
        ("d/inner.txt", INNER.as_bytes()),
    ] {
        let out = cat(&nfs, rel);
        assert!(
            out.status.success(),
            "nfs-cat {rel} after an eviction: {out:?}"
        );
        assert_eq!(out.stdout, want, "nfs-cat {rel} after an eviction");
    }
    // The daemon and the server restart.
    nfs.stop();
    m.unmount();
    m.remount();
    crate::support::handles::drop_caches();
    nfs.restart();
    let out = cat(&nfs, "d/inner.txt");
    assert_eq!(out.stdout, INNER.as_bytes(), "after restarts: {out:?}");
    // Deleted in BACKING: gone through the server too.
    fs::remove_file(m.b("d/inner.txt")).unwrap();
    crate::support::handles::drop_caches();
    let out = cat(&nfs, "d/inner.txt");
    assert!(!out.status.success(), "a deleted file still reads: {out:?}");
}
