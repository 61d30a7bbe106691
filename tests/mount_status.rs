//! Seeing into the mount: through it, any user who may read a file can ask
//! whether it is stored as Corrected UTF-8 or raw (the virtual extended
//! attribute `cutf8fs.encoding`: answered, never listed, read-only, so
//! cp, tar and rsync never carry it along), and anyone can ask the running
//! daemon for its statistics (`cutf8fs --stats MOUNTPOINT`, read from
//! `cutf8fs.stats` on the mount's root). Long first scans show progress
//! in the log.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::mount::{corrected, Mount, BIN};
use crate::support::users::{sh_as, user};

/// `t` as a corrected file.
fn text(t: &str) -> Vec<u8> {
    corrected(&cutf8::encode_strict(t.as_bytes()).unwrap())
}

fn getfattr(path: &std::path::Path, name: &str) -> Result<String, String> {
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(path)
        .output()
        .expect("getfattr (attr, scripts/setup.sh)");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn any_reader_can_ask_how_a_file_is_stored_and_copies_do_not_carry_it() {
    let m = Mount::new(&["allow_other"], |b| {
        fs::write(b.join("c.txt"), text("Grüße\n")).unwrap();
        fs::write(b.join("r.txt"), "plain UTF-8 stored raw\n").unwrap();
        fs::write(b.join("empty"), b"").unwrap();
        fs::create_dir(b.join("dir")).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    });
    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    let name = "cutf8fs.encoding";
    assert_eq!(getfattr(&m.m("c.txt"), name).as_deref(), Ok("corrected"));
    assert_eq!(getfattr(&m.m("r.txt"), name).as_deref(), Ok("raw"));
    assert_eq!(getfattr(&m.m("empty"), name).as_deref(), Ok("empty"));
    assert!(getfattr(&m.m("dir"), name).is_err(), "a directory has none");
    // A file written through the mount: as the mount stored it.
    fs::write(m.m("new.txt"), "neu: ä\n").unwrap();
    assert_eq!(getfattr(&m.m("new.txt"), name).as_deref(), Ok("corrected"));

    // Any user who may read the file may ask.
    let a = user("cutf8t-a");
    let out = sh_as(
        a,
        "getfattr --only-values -n cutf8fs.encoding \"$1\"",
        &[m.m("c.txt").as_os_str()],
    );
    crate::support::run::succeeded(&out, "command failed");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "corrected");

    // Never listed, never set, never removed.
    let listed = Command::new("getfattr")
        .args(["-d", "-m", "-"])
        .arg(m.m("c.txt"))
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains("cutf8fs"),
        "{listed:?}"
    );
    for cmd in [
        vec!["setfattr", "-n", name, "-v", "raw"],
        vec!["setfattr", "-x", name],
    ] {
        let out = Command::new(cmd[0])
            .args(&cmd[1..])
            .arg(m.m("c.txt"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "{cmd:?} succeeded");
    }
    assert_eq!(getfattr(&m.m("c.txt"), name).as_deref(), Ok("corrected"));

    // cp -a, tar --xattrs and rsync -aX through the mount copy the file,
    // not the attribute: the copy is stored as the mount decides.
    let out = Command::new("sh")
        .arg("-c")
        .arg(
            "set -e; cd \"$1\"; cp -a c.txt cp.txt; \
             tar --xattrs -cf \"$2/t.tar\" c.txt; mkdir t; tar --xattrs -xf \"$2/t.tar\" -C t; \
             rsync -aX c.txt rs.txt",
        )
        .args(["sh", m.mnt.to_str().unwrap(), m.dir().to_str().unwrap()])
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
    for copy in ["cp.txt", "t/c.txt", "rs.txt"] {
        let names = Command::new("getfattr")
            .args(["-d", "-m", "-"])
            .arg(m.b(copy))
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&names.stdout).contains("cutf8fs"),
            "{copy} carries it in BACKING: {names:?}"
        );
        assert_eq!(fs::read(m.m(copy)).unwrap(), "Grüße\n".as_bytes());
    }
}

#[test]
fn cutf8fs_stats_reports_what_the_daemon_does() {
    let m = Mount::new(&["allow_other"], |b| {
        fs::write(b.join("c.txt"), text(&"Grüße\n".repeat(1000))).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
    });
    fs::set_permissions(m.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    for _ in 0..3 {
        assert_eq!(fs::read(m.m("c.txt")).unwrap().len(), 8000);
    }
    fs::write(m.m("w.txt"), "written through: é\n").unwrap();
    let out = Command::new(BIN)
        .arg("--stats")
        .arg(&m.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    crate::support::run::succeeded(&out, "command failed");
    for part in [
        "lookup",
        "read",
        "write",
        "scans",
        "index",
        "hits",
        "misses",
        "converted",
        "descriptors",
        "memory",
        "held back",
    ] {
        assert!(text.contains(part), "no {part:?} in:\n{text}");
    }
    let read_line = text
        .lines()
        .find(|l| l.trim_start().starts_with("read "))
        .unwrap_or_else(|| panic!("no read count:\n{text}"));
    let n: u64 = read_line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{read_line}"));
    assert!(n >= 1, "{read_line}");
    // Any user may ask.
    let a = user("cutf8t-a");
    let out = sh_as(
        a,
        "\"$1\" --stats \"$2\"",
        &[OsStr::new(BIN), m.mnt.as_os_str()],
    );
    crate::support::run::succeeded(&out, "command failed");
    // Not a cutf8fs mount: a clear error.
    let out = Command::new(BIN)
        .arg("--stats")
        .arg(m.dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a cutf8fs mount"),
        "{out:?}"
    );
}

/// Each request is counted once: ten open(2)–read–close(2) of one file
/// are ten OPENs, ten FLUSHes (one per close) and ten RELEASEs.
#[test]
fn cutf8fs_stats_counts_each_request_once() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("c.txt"), text("Grüße\n")).unwrap();
    });
    assert_eq!(fs::read(m.m("c.txt")).unwrap(), "Grüße\n".as_bytes());
    let kinds = ["open", "flush", "release"];
    let before = kinds.map(|k| m.stats_count(k));
    for _ in 0..10 {
        assert_eq!(fs::read(m.m("c.txt")).unwrap(), "Grüße\n".as_bytes());
    }
    // RELEASE is sent after close(2) returns: wait for the last one.
    let counted = || kinds.map(|k| m.stats_count(k));
    let mut after = counted();
    for _ in 0..100 {
        if after[2] - before[2] >= 10 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        after = counted();
    }
    for (i, k) in kinds.iter().enumerate() {
        assert_eq!(
            after[i] - before[i],
            10,
            "{k}: {} then {}",
            before[i],
            after[i]
        );
    }
}

/// The first scan of a large corrected file says how far it is, in the log
/// (every `CUTF8FS_SCAN_PROGRESS_MS`, 2 s by default; 1 ms here, as the
/// scan of a file in the page cache is fast), so a stalled-looking `ls -l`
/// has an explanation.
#[test]
fn a_long_first_scan_shows_progress_in_the_log() {
    let m = Mount::with(&[])
        .env("CUTF8FS_SCAN_PROGRESS_MS", "1")
        .fresh(|b| {
            // 256 MiB of text, written in 1 MiB pieces of whole characters:
            // large enough to be watched, and its scan (a GB/s or more from
            // the page cache) takes many of the 1 ms reporting intervals.
            let unit = "Grüße ࠀ 𐀀 ";
            let piece =
                cutf8::encode_strict(unit.repeat((1 << 20) / unit.len()).as_bytes()).unwrap();
            let mut f = std::io::BufWriter::new(fs::File::create(b.join("big.txt")).unwrap());
            std::io::Write::write_all(&mut f, &cutf8::MAGIC).unwrap();
            for _ in 0..256 {
                std::io::Write::write_all(&mut f, &piece).unwrap();
            }
        });
    let _ = fs::metadata(m.m("big.txt")).unwrap().len();
    let log = m.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("big.txt") && l.contains("scan") && l.contains('%')),
        "no progress of the first scan in the log:\n{log}"
    );
}
