//! Memory that comes back: a churn of three real users through the mount
//! (each creating, writing, reading, renaming and deleting 5 000 files)
//! leaves the daemon within 12 MiB of where it started once the kernel has
//! forgotten the inodes (man cutf8fs, RESOURCES).

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};

use crate::support::mount::Mount;
use crate::support::users::{sh_as, user, NAMES};

/// One user's churn, in one process (a process per file would measure
/// fork, not the daemon).
const CHURN: &str = r#"
import os, sys
d = sys.argv[1]
n = int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, "f%d.txt" % i), "w") as f:
        f.write("héllo wörld %d, a line of text ✓\n" % i * (1 + i % 5))
for i in range(n):
    with open(os.path.join(d, "f%d.txt" % i)) as f:
        f.read()
for i in range(n):
    os.rename(os.path.join(d, "f%d.txt" % i), os.path.join(d, "g%d.txt" % i))
for i in range(n):
    os.unlink(os.path.join(d, "g%d.txt" % i))
print("done", n)
"#;

fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_churn_of_three_users_gives_its_memory_back() {
    let users: Vec<_> = NAMES.iter().map(|n| user(n)).collect();
    let m = Mount::new(&["allow_other"], |b| {
        fs::set_permissions(b.parent().unwrap(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(b, fs::Permissions::from_mode(0o755)).unwrap();
        for (n, u) in NAMES.iter().zip(&users) {
            fs::create_dir(b.join(n)).unwrap();
            chown(b.join(n), Some(u.uid), Some(u.gid)).unwrap();
        }
    });
    // A first small round: what every mount allocates once (threads'
    // buffers, the database's first pages) is not growth.
    let round = |n: usize| {
        std::thread::scope(|s| {
            for (name, u) in NAMES.iter().zip(&users) {
                let dir = m.m(name);
                s.spawn(move || {
                    let out = sh_as(
                        *u,
                        "/usr/bin/python3 -c \"$1\" \"$2\" \"$3\"",
                        &[CHURN.as_ref(), dir.as_os_str(), n.to_string().as_ref()],
                    );
                    assert!(
                        String::from_utf8_lossy(&out.stdout).contains("done"),
                        "{name}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                });
            }
        })
    };
    round(50);
    let start = rss_kib(m.pid());
    round(5000);
    let peak = rss_kib(m.pid());
    // The kernel forgets everything; the daemon, quiet, gives back what it
    // freed: waited for until RSS stops falling.
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let mut after = rss_kib(m.pid());
    let mut steady = 0;
    for _ in 0..30 {
        // The trim has no sign but RSS (asking --stats is a request, which
        // puts it off): sampled until RSS stops falling.
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = rss_kib(m.pid());
        steady = if now >= after { steady + 1 } else { 0 };
        after = after.min(now);
        if steady >= 8 {
            break;
        }
    }
    eprintln!("memory: {start} KiB before, {peak} KiB after the churn, {after} KiB at rest");
    let bound = start + 12 * 1024;
    assert!(
        after <= bound,
        "RSS {start} KiB before the churn, {peak} KiB after it, {after} KiB at rest (bound \
         {bound} KiB)"
    );
}
