//! One user never costs another (man cutf8fs, PERMISSIONS): a caller who
//! is not root writes through the mount under its own limits on space, as
//! natively. The daemon runs as root, whose CAP_SYS_RESOURCE (and fsuid 0,
//! which ext4 names as the reserve's owner) would let anyone into the
//! blocks ext4 keeps for root; quotas are bypassed by the same capability,
//! but this kernel may lack quota support, so the reserve stands for both.
//!
//! BACKING is an ext4 with 5 % reserved for root (`Ext4::with_reserve`),
//! filled by a real unprivileged user until ENOSPC, so that only root's
//! reserve is left. The caller's file size limit is the kernel's to apply,
//! and it does so through the mount as natively. The daemon's own files
//! (index database, journal, log) keep root's reserve on that full disk.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::disk::Ext4;
use crate::support::mount::Mount;
use crate::support::users::{sh_as, user};

/// Writes 1 MiB of zeros to `$1` in 4 KiB writes, flushed; prints the
/// bytes the file holds after (dd's own failure is expected).
const WRITE_MIB: &str =
    "dd if=/dev/zero of=\"$1\" bs=4096 count=256 conv=fsync 2>/dev/null; stat -c %s \"$1\"";

fn size_written(out: &std::process::Output, what: &str) -> u64 {
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what}: {out:?}"))
}

#[test]
fn root_s_reserve_is_not_open_to_users_through_the_mount() {
    let u = user("cutf8t-a");
    let disk = Ext4::with_reserve(64, 5);
    let backing = disk.path("b");
    fs::create_dir(&backing).unwrap();
    fs::set_permissions(&backing, fs::Permissions::from_mode(0o1777)).unwrap();
    // Natively, the user fills the disk: ENOSPC once only the reserve is
    // left, and at once when it tries again.
    let fill = backing.join("fill");
    let out = sh_as(
        u,
        "head -c 100M /dev/zero > \"$1\"; s=$?; sync; exit $s",
        &[fill.as_os_str()],
    );
    assert!(
        !out.status.success(),
        "the user filled 100 MiB of a 64 MiB disk? {out:?}"
    );
    let native = backing.join("native");
    let native_bytes = size_written(&sh_as(u, WRITE_MIB, &[native.as_os_str()]), "native");
    assert!(
        native_bytes < 64 << 10,
        "natively the user wrote {native_bytes} bytes into root's reserve"
    );
    fs::remove_file(&native).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let db = format!("index_db={}", tmp.path().join("index.sqlite").display());
    let m = Mount::with(&["allow_other", &db]).on(&backing, &mnt, &tmp.path().join("log"));

    // The same user through the mount: ENOSPC at once, as natively.
    let through = mnt.join("through");
    let out = sh_as(u, WRITE_MIB, &[through.as_os_str()]);
    let through_bytes = size_written(&out, "through the mount");
    eprintln!(
        "user's 1 MiB write: natively {native_bytes} bytes, through the mount {through_bytes}"
    );
    assert!(
        through_bytes <= native_bytes + (16 << 10),
        "through the mount the user wrote {through_bytes} bytes into root's reserve \
         (natively {native_bytes}); daemon log:\n{}",
        m.log_text()
    );
    // Root through the mount still writes into its reserve.
    let root_file = mnt.join("root");
    let out = std::process::Command::new("sh")
        .args(["-c", WRITE_MIB, "sh"])
        .arg(OsStr::new(&root_file))
        .output()
        .unwrap();
    assert_eq!(
        size_written(&out, "root through the mount"),
        1 << 20,
        "root's write into its reserve through the mount; daemon log:\n{}",
        m.log_text()
    );
}

/// A rewrite through the journal for a caller who is not root writes the
/// tail under the caller's limits, but the journal stays the daemon's:
/// its directory and files are root's, and the next mount trusts it.
#[test]
fn a_users_journaled_rewrite_leaves_the_journal_the_daemons() {
    use std::os::unix::fs::MetadataExt;
    let u = user("cutf8t-a");
    let text = "abcdefghij klmnopqrst uvwxyz\n".repeat(2000);
    let mut m = Mount::new(&["allow_other"], |b| {
        fs::write(
            b.join("t.txt"),
            crate::support::write::corrected_file(&text),
        )
        .unwrap();
        std::os::unix::fs::chown(b.join("t.txt"), Some(u.uid), Some(u.gid)).unwrap();
    });
    // U+0800 is 3 bytes in the view and 2 on disk: the text after it
    // shifts, which only a journaled rewrite does all or nothing.
    let data = "\u{800}".repeat(40);
    let src = tempfile::NamedTempFile::new().unwrap();
    fs::write(src.path(), &data).unwrap();
    fs::set_permissions(src.path(), fs::Permissions::from_mode(0o644)).unwrap();
    let out = sh_as(
        u,
        "dd if=\"$2\" of=\"$1\" bs=4096 seek=6 oflag=seek_bytes conv=notrunc 2>&1",
        &[m.m("t.txt").as_os_str(), src.path().as_os_str()],
    );
    assert!(out.status.success(), "the user's write: {out:?}");
    let mut want = text.clone().into_bytes();
    want.splice(6..6 + data.len(), data.bytes());
    assert!(
        fs::read(m.m("t.txt")).unwrap() == want,
        "the rewritten view"
    );
    let journal = m.b(".cutf8fs-journal");
    let meta = fs::metadata(&journal).expect("the rewrite used the journal");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "the journal directory's owner"
    );
    for e in fs::read_dir(&journal).unwrap() {
        let e = e.unwrap();
        let md = e.metadata().unwrap();
        assert_eq!(
            md.uid(),
            0,
            "{:?} in the journal is not root's",
            e.file_name()
        );
    }
    m.unmount();
    m.remount();
    assert!(fs::read(m.m("t.txt")).unwrap() == want, "after a remount");
}

/// The caller's file size limit (RLIMIT_FSIZE, `ulimit -f`) applies
/// through the mount exactly as natively: the kernel checks it against
/// the size it sees before the request reaches the daemon (a write is cut
/// at the limit and the writer gets SIGXFSZ; a truncate or fallocate
/// beyond it fails), though FUSE never sends the daemon the limit.
#[test]
fn the_callers_file_size_limit_applies_as_natively() {
    let u = user("cutf8t-a");
    let m = Mount::new(&["allow_other"], |b| {
        let top = b.parent().unwrap();
        fs::set_permissions(top, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o1777)).unwrap();
    });
    // 4 or 8 KiB (sh counts blocks of 512 or 1024 bytes); each step's
    // size, whatever the signal did to the command.
    let script = "ulimit -f 8; \
        dd if=/dev/zero of=\"$1/w\" bs=4096 count=100 2>/dev/null; stat -c %s \"$1/w\"; \
        truncate -s 1M \"$1/t\" 2>/dev/null; stat -c %s \"$1/t\" 2>/dev/null || echo none; \
        fallocate -l 1M \"$1/f\" 2>/dev/null; stat -c %s \"$1/f\" 2>/dev/null || echo none";
    let sizes = |dir: &std::path::Path| {
        let out = sh_as(u, script, &[dir.as_os_str()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let native = sizes(&m.b(""));
    let through = sizes(&m.m(""));
    eprintln!("under ulimit -f 8: natively {native:?}, through the mount {through:?}");
    let written: u64 = native.lines().next().unwrap_or("").parse().unwrap_or(0);
    assert!(
        (4096..=8192).contains(&written),
        "natively under the limit: {native:?}"
    );
    assert_eq!(through, native, "through the mount against natively");
}

/// The daemon's own files keep root's reserve while users' writes stop at
/// it (man cutf8fs, RESOURCES): with a user's writes through the mount
/// refused for want of space, the index database records a file read for
/// the first time, the log (`-o log=FILE`, on the same filesystem) keeps
/// every line, the ones written by a thread that serves the user's writes
/// under its limits too (each refused write that got some bytes in is a
/// debug line), and root's journaled rewrite completes.
#[test]
fn the_daemons_own_files_keep_root_s_reserve_when_users_filled_the_disk() {
    let u = user("cutf8t-a");
    let disk = Ext4::with_reserve(64, 5);
    let backing = disk.path("b");
    fs::create_dir(&backing).unwrap();
    fs::set_permissions(&backing, fs::Permissions::from_mode(0o1777)).unwrap();
    // Root's corrected file (about 290 KiB), never read before the disk is
    // full.
    let text = "abcdefghij klmnopqrst uvwxyz\n".repeat(10_000);
    fs::write(
        backing.join("t.txt"),
        crate::support::write::corrected_file(&text),
    )
    .unwrap();
    // Its index is stored only by a scan that starts later than the racy
    // margin (300 ms here) after the file's last change.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let log = disk.path("daemon.log");
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut m = Mount::with(&["allow_other", &format!("log={}", log.display())])
        .env("RUST_LOG", "info,cutf8fs::io::write=debug")
        .env("CUTF8FS_RACY_MARGIN_MS", "300")
        .on(&backing, &mnt, &tmp.path().join("out"));

    // The user's 64 KiB file, on disk; then the user fills the disk
    // through the mount until only root's reserve is left.
    let pad = mnt.join("pad");
    let out = sh_as(
        u,
        "dd if=/dev/zero of=\"$1\" bs=64k count=1 conv=fsync 2>&1",
        &[pad.as_os_str()],
    );
    assert!(out.status.success(), "the user's 64 KiB: {out:?}");
    let out = sh_as(
        u,
        "head -c 100M /dev/zero > \"$1\"; s=$?; sync; exit $s",
        &[mnt.join("fill").as_os_str()],
    );
    assert!(
        !out.status.success(),
        "the user filled 100 MiB of a 64 MiB disk through the mount? {out:?}"
    );
    let full_at = fs::metadata(&log).unwrap().len() as usize;

    // The user reads root's file for the first time: the daemon scans it
    // and stores its index in the database (in BACKING, on this disk).
    let out = sh_as(u, "cat \"$1\"", &[mnt.join("t.txt").as_os_str()]);
    assert!(
        out.status.success() && out.stdout == text.as_bytes(),
        "the user's read of t.txt: {:?}",
        out.status
    );
    // Each 1 MiB write over the user's 64 KiB file writes its blocks and
    // stops there: a short write, logged by the thread that holds the
    // user's limits. Enough lines to need new blocks for the log.
    const WRITES: usize = 60;
    let out = sh_as(
        u,
        "i=0; while [ $i -lt $2 ]; do \
           dd if=/dev/zero of=\"$1\" bs=1M count=1 conv=notrunc 2>/dev/null && exit 1; \
           i=$((i+1)); done; stat -c %s \"$1\"",
        &[pad.as_os_str(), OsStr::new(&WRITES.to_string())],
    );
    assert!(
        out.status.success(),
        "a 1 MiB write of the user's went in on a full disk: {out:?}"
    );
    assert_eq!(size_written(&out, "the user's file"), 64 << 10);
    m.unmount();

    let text_log = fs::read_to_string(&log).unwrap();
    let after = &text_log[full_at..];
    let short = after.matches("short write after 65536 bytes").count();
    assert_eq!(
        short, WRITES,
        "short-write lines logged after the disk was full; log since then:\n{after}"
    );
    assert!(
        after.contains("unmounted"),
        "no unmount line in the log since the disk was full:\n{after}"
    );

    // The next mount knows t.txt's index from the database.
    assert!(
        backing.join(".cutf8fs-index/index.sqlite").exists(),
        "no database in BACKING"
    );
    m.remount();
    assert_eq!(fs::metadata(m.m("t.txt")).unwrap().len(), text.len() as u64);
    let stats = m.stats_text();
    let from_db: u64 = stats
        .lines()
        .find_map(|l| l.split("database ").nth(1))
        .and_then(|l| l.split(')').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no index hits from the database in:\n{stats}"));
    assert!(
        from_db >= 1,
        "the index stored while the disk was full was not in the database:\n{stats}\nlog:\n{}",
        m.log_text()
    );

    // Root rewrites through the journal (3 view bytes become 2 on disk, so
    // the text after them shifts): the journal and the file take root's
    // reserve.
    let data = "\u{800}".repeat(40);
    let src = tmp.path().join("src");
    fs::write(&src, &data).unwrap();
    let out = crate::support::write::sh(
        "dd if=\"$2\" of=\"$1\" bs=4096 seek=6 oflag=seek_bytes conv=notrunc,fsync 2>&1",
        &[m.m("t.txt").as_os_str(), src.as_os_str()],
    );
    assert!(
        out.status.success(),
        "root's journaled rewrite on the full disk: {out:?}\nlog:\n{}",
        m.log_text()
    );
    let mut want = text.into_bytes();
    want.splice(6..6 + data.len(), data.bytes());
    assert!(
        fs::read(m.m("t.txt")).unwrap() == want,
        "the rewritten view"
    );
    assert!(
        backing.join(".cutf8fs-journal").is_dir(),
        "root's rewrite did not go through the journal"
    );
    m.unmount();
    m.remount();
    assert!(fs::read(m.m("t.txt")).unwrap() == want, "after a remount");
}
