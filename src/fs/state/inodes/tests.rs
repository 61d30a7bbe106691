//! The inode table's unit tests.

use super::*;
use std::ffi::CString;

fn table(dir: &std::path::Path, cap: usize, by_handle: bool) -> InodeTable {
    let root = crate::fs::CutFs::open_backing(dir).unwrap();
    InodeTable::with(root, cap, by_handle).unwrap()
}

fn cname(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Descriptors of this process whose target lies under `dir`.
fn fds_under(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.starts_with(dir) && t != dir)
        .map(|t| t.display().to_string())
        .collect()
}

/// Many inodes in many directories: every one reopens; the table holds
/// no file's descriptor, directories' only (at most `cap`) and only
/// until they go unused.
fn many_inodes(by_handle: bool) {
    let d = tempfile::tempdir().unwrap();
    for s in 0..40 {
        std::fs::create_dir(d.path().join(format!("sub{s}"))).unwrap();
        for i in 0..5 {
            std::fs::write(d.path().join(format!("sub{s}/f{i}")), format!("{s}.{i}")).unwrap();
        }
    }
    let t = table(d.path(), 16, by_handle);
    if by_handle && !t.shared.by_handle {
        eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
        return;
    }
    let root = t.get(ROOT).unwrap();
    let mut all = Vec::new();
    for s in 0..40 {
        let (sub, _) = t.lookup(&root, &cname(&format!("sub{s}"))).unwrap();
        for i in 0..5 {
            let (inode, st) = t.lookup(&sub, &cname(&format!("f{i}"))).unwrap();
            assert_eq!(inode.ino, st.st_ino);
            all.push((format!("sub{s}/f{i}"), format!("{s}.{i}"), inode));
        }
        assert!(t.cached() <= 16, "{} cached", t.cached());
    }
    for (path, want, inode) in &all {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut inode.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(&s, want);
        assert_eq!(&inode.path(), path);
        assert!(!inode.has_cached_fd(), "a file's descriptor is kept");
    }
    let kept = fds_under(d.path());
    assert!(kept.len() <= 16, "{kept:?}");
    assert!(kept.iter().all(|p| !p.contains("/f")), "{kept:?}");
    t.shared.sweep();
    t.shared.sweep();
    let kept = fds_under(d.path());
    assert!(kept.is_empty(), "unused descriptors kept: {kept:?}");
    assert_eq!(t.len(), 1 + 40 * 6);
}

#[test]
fn many_inodes_by_handle() {
    many_inodes(true);
}

#[test]
fn many_inodes_by_name() {
    many_inodes(false);
}

/// Reopening by name: a rename through the mount is followed; a rename
/// in BACKING that puts another file (or a symlink) at the recorded
/// name is ESTALE, never the other file.
#[test]
fn by_name_is_rename_safe_and_symlink_safe() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("a"), b"a").unwrap();
    std::fs::write(p.join("b"), b"b").unwrap();
    std::fs::write(p.join("x"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", p.join("link")).unwrap();
    let t = table(p, 16, false);
    let root = t.get(ROOT).unwrap();
    let (a, _) = t.lookup(&root, &cname("a")).unwrap();
    let (x, _) = t.lookup(&root, &cname("x")).unwrap();
    // Through the mount: a → a2.
    std::fs::rename(p.join("a"), p.join("a2")).unwrap();
    t.renamed(&root, &cname("a2"));
    // Behind its back: b takes x's name; then the symlink takes it. (The
    // old x is kept alive: a deleted inode's number may be reused by a
    // new file, which reopening by name cannot tell from the old one —
    // nor can the kernel, which sees the same number.)
    let _alive = std::fs::File::open(p.join("x")).unwrap();
    std::fs::rename(p.join("b"), p.join("x")).unwrap();
    assert_eq!(std::fs::read(p.join("a2")).unwrap(), b"a");
    let mut s = Vec::new();
    std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
    assert_eq!(s, b"a");
    assert_eq!(x.fd().err(), Some(Errno::ESTALE));
    assert_eq!(x.open(libc::O_RDONLY).err(), Some(Errno::ESTALE));
    std::fs::rename(p.join("link"), p.join("x")).unwrap();
    assert_eq!(x.fd().err(), Some(Errno::ESTALE));
    assert_eq!(x.stat().err(), Some(Errno::ESTALE));
}

/// By handle: renames anywhere are followed; a deleted file is ESTALE;
/// a file deleted natively is not held open by the table.
#[test]
fn by_handle_follows_renames_and_lets_deleted_files_go() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::create_dir(p.join("d")).unwrap();
    std::fs::write(p.join("d/a"), b"a").unwrap();
    std::fs::write(p.join("gone"), b"g").unwrap();
    let t = table(p, 16, true);
    if !t.shared.by_handle {
        eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
        return;
    }
    let root = t.get(ROOT).unwrap();
    let (dd, _) = t.lookup(&root, &cname("d")).unwrap();
    let (a, _) = t.lookup(&dd, &cname("a")).unwrap();
    let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
    g.stat().unwrap();
    std::fs::rename(p.join("d/a"), p.join("moved")).unwrap();
    std::fs::remove_file(p.join("gone")).unwrap();
    let kept = fds_under(p);
    assert!(kept.iter().all(|f| !f.contains("gone")), "{kept:?}");
    let mut s = Vec::new();
    std::io::Read::read_to_end(&mut a.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
    assert_eq!(s, b"a");
    assert_eq!(a.path(), "moved");
    assert_eq!(g.fd().err(), Some(Errno::ESTALE));
    // A new file that got the deleted one's number is the entry's file
    // after the next lookup (its handle is taken then).
    std::fs::write(p.join("new"), b"n").unwrap();
    let (n, _) = t.lookup(&root, &cname("new")).unwrap();
    let mut s = Vec::new();
    std::io::Read::read_to_end(&mut n.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
    assert_eq!(s, b"n");
}

/// An open handle's descriptor serves as the inode's: a file unlinked
/// (by name, the hardest case) while open still answers, through the
/// handle's own descriptor, and no second one is opened; once the last
/// handle detaches the inode is gone.
#[test]
fn open_files_answer_after_unlink_through_their_own_descriptor() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("open"), b"o").unwrap();
    for by_handle in [false, true] {
        let t = table(p, 16, by_handle);
        let root = t.get(ROOT).unwrap();
        let (o, _) = t.lookup(&root, &cname("open")).unwrap();
        let fd = Arc::new(o.open(libc::O_RDONLY).unwrap());
        let first = o.attach(Some(&fd));
        let second_fd = Arc::new(o.open(libc::O_RDONLY).unwrap());
        let second = o.attach(Some(&second_fd));
        assert!(first.state().is_some() && o.open_state().is_some());
        let n = fds_under(p).len();
        assert_eq!(n, 2, "one descriptor per open handle");
        if by_handle {
            std::fs::rename(p.join("open"), p.join("moved")).unwrap();
        }
        std::fs::remove_file(p.join(if by_handle { "moved" } else { "open" })).unwrap();
        // The first handle closes; the second's descriptor takes over.
        drop(first);
        drop(fd);
        assert_eq!(o.stat().unwrap().st_nlink, 0);
        assert_eq!(fds_under(p).len(), 1);
        drop(second);
        drop(second_fd);
        assert!(o.open_state().is_none(), "the state outlived the handles");
        assert!(o.stat().is_err());
        assert!(fds_under(p).is_empty());
        std::fs::write(p.join("open"), b"o").unwrap();
    }
}

/// A directory removed in BACKING is let go within two sweeps (about a
/// second), though the kernel still remembers it and it was in use.
#[test]
fn removed_directories_are_let_go_within_a_second() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::create_dir_all(p.join("gone/sub")).unwrap();
    for by_handle in [true, false] {
        let t = table(p, 16, by_handle);
        let root = t.get(ROOT).unwrap();
        let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
        t.lookup(&g, &cname("sub")).unwrap();
        assert!(g.has_cached_fd());
        std::fs::remove_dir(p.join("gone/sub")).unwrap();
        std::fs::remove_dir(p.join("gone")).unwrap();
        t.shared.sweep();
        t.shared.sweep();
        let kept = fds_under(p);
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(g.fd().err(), Some(Errno::ESTALE));
        std::fs::create_dir_all(p.join("gone/sub")).unwrap();
    }
}

/// Forgotten entries leave the table, which shrinks once it emptied.
#[test]
fn forget_lets_go_and_the_table_shrinks() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..3000 {
        std::fs::write(d.path().join(format!("f{i}")), b"").unwrap();
    }
    let t = table(d.path(), 16, true);
    let root = t.get(ROOT).unwrap();
    let mut inos = Vec::new();
    for i in 0..3000 {
        let (inode, _) = t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
        t.lookup(&root, &cname(&format!("f{i}"))).unwrap();
        inos.push(inode.ino);
    }
    let full = t.tables.lock().by_ino.capacity();
    for &ino in &inos {
        t.forget(ino, 1);
    }
    assert_eq!(t.len(), 3001, "one lookup each is still held");
    for &ino in &inos {
        t.forget(ino, 1);
    }
    assert_eq!(t.len(), 1);
    assert!(t.get(ROOT).is_ok());
    assert!(t.get(inos[0]).is_err());
    let now = t.tables.lock().by_ino.capacity();
    assert!(now <= 1024 && now < full, "capacity {full} → {now}");
}

/// Nodes the kernel forgot are found again from their records
/// (`export`): the same file, generation and parent; a deleted one,
/// or a number never handed out, is ESTALE.
#[test]
fn forgotten_nodes_are_found_again_and_deleted_ones_are_stale() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::write(p.join("sub/f"), b"x").unwrap();
    for by_handle in [true, false] {
        std::fs::write(p.join("gone"), b"g").unwrap();
        let t = table(p, 16, by_handle);
        if by_handle && !t.shared.by_handle {
            eprintln!("no CAP_DAC_READ_SEARCH here: by-handle case not run");
            continue;
        }
        t.set_nodes(Arc::new(Nodes::new(None)));
        let root = t.get(ROOT).unwrap();
        let (sub, _) = t.lookup(&root, &cname("sub")).unwrap();
        let (f, _) = t.lookup(&sub, &cname("f")).unwrap();
        let (g, _) = t.lookup(&root, &cname("gone")).unwrap();
        let (sub_ino, f_ino, g_ino) = (sub.ino, f.ino, g.ino);
        let f_gen = f.generation();
        assert_eq!(f_gen == 0, !by_handle);
        drop((sub, f, g));
        for ino in [f_ino, sub_ino, g_ino] {
            t.forget(ino, 1);
            assert!(t.get(ino).is_err());
        }
        let (f, st) = t.revive(f_ino).unwrap();
        assert_eq!((f.ino, st.st_ino, f.generation()), (f_ino, f_ino, f_gen));
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut f.open(libc::O_RDONLY).unwrap(), &mut s).unwrap();
        assert_eq!(s, b"x");
        assert_eq!(t.parent_of(f_ino).err(), Some(Errno::ENOTDIR));
        let (sub, _) = t.revive(sub_ino).unwrap();
        assert!(sub.is_dir());
        let (up, _) = t.parent_of(sub_ino).unwrap();
        assert_eq!(up.ino, ROOT);
        assert_eq!(t.parent_of(ROOT).unwrap().0.ino, ROOT);
        std::fs::remove_file(p.join("gone")).unwrap();
        assert_eq!(t.revive(g_ino).err(), Some(Errno::ESTALE));
        assert_eq!(t.revive(g_ino + 1_000_000).err(), Some(Errno::ESTALE));
        assert_eq!(t.revive(FOREIGN_BASE + 5).err(), Some(Errno::ESTALE));
    }
}

/// The lookups, the file type and the CLOCK bit share one word: none
/// of them changes another, and lookups never wrap into the type.
#[test]
fn the_word_keeps_lookups_type_and_clock_apart() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("f"), b"").unwrap();
    let t = table(d.path(), 16, true);
    let root = t.get(ROOT).unwrap();
    let (sub, _) = t.lookup(&root, &cname("sub")).unwrap();
    let (f, _) = t.lookup(&root, &cname("f")).unwrap();
    assert!(sub.is_dir() && !sub.is_reg() && f.is_reg() && !f.is_dir());
    assert_eq!(root.fmt(), libc::S_IFDIR);
    f.add_lookups(u64::MAX);
    assert!(f.is_reg());
    assert!(f.take_used() && !f.take_used());
    assert_eq!(f.sub_lookups(LOOKUPS - 1), 1, "the count saturated");
    assert_eq!(f.sub_lookups(1), 0);
    assert!(f.is_reg() && !f.take_used());
    f.mark_used();
    f.set_lookups(2);
    assert_eq!(f.sub_lookups(1), 1);
    assert!(f.is_reg() && f.take_used());
    t.forget(f.ino, 1);
    assert!(t.get(f.ino).is_err());
    t.forget(sub.ino, 1);
    assert!(t.get(sub.ino).is_err());
}

/// What an entry costs (see the module doc; measured as a whole by
/// scripts/bench-inodes.sh).
#[test]
fn an_entry_stays_small() {
    let size = std::mem::size_of::<Inode>();
    println!(
        "Inode: {size} bytes (Anchor {}, KnownContent {}), in an Arc: {}",
        std::mem::size_of::<Anchor>(),
        std::mem::size_of::<KnownContent>(),
        size + 16
    );
    // 120 bytes, 136 in an Arc: glibc's 144-byte chunk (152 would
    // take the 160-byte one).
    assert!(size <= 120, "an inode entry takes {size} bytes");
    assert!(std::mem::size_of::<Anchor>() <= 24);
    assert!(std::mem::size_of::<Inner>() <= 32);
}
