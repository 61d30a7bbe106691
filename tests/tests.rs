//! The integration tests: one test binary, as ripgrep has, with one module
//! per area, named for what it tests: the converter (`cli`,
//! `cli_conventions`, `encode_remedies`, `check_archive`),
//! migrate (`migrate*`, `scripts`), the mount's reads and metadata (`mount`,
//! `mount_scans`, `first_read`, `mount_backing_changes`, `atime`, `passthrough*`,
//! the read-only `archive` mode,
//! and over another FUSE filesystem `backing_fuse`), its
//! writes (`mount_write`, `write_*`, `appends`, `round_trips`, `close`, `fallocate`, `fsx`), permissions and
//! trust (`security_*`, `killpriv`, `pjdfstest`), crash safety and the
//! disk (`crash`, `full_disk`), resources (`resources`, `descriptors`, `log_flood`, `memory`, `fair_turns`), locks and
//! export (`locks`, `export`, `export_restart`, `file_handles`, `reused_numbers`, `several_daemons`, `shared_state`), the daemon's life and words (`daemon_cli`,
//! `mount_lifecycle`, `unmount`,
//! `mount_status`, `logging`, `mount_outside_tools`), root's programs against a
//! tree's owner beyond migrate (`redteam_daemon`), the index database
//! (`index_db`) and its cache directory (`index_cache`), the charset (`gconv`), docs and packaging (`docs`,
//! `man_page`, `package`, `sample_archive`) and the system-call
//! layer (`sys`). One binary links the support code once and runs
//! everything in one process.
//!
//! * [`support`]: the one mount guard (`support::mount::Mount`: fresh or
//!   given BACKING, kill -9 and remount, the daemon's log on failure), the
//!   write checks, the test users and the `cutf8` runner.
//! * Select by module: `cargo test --test tests -- mount_write::` runs one
//!   area; the slow peer suites are `fsx::`, `pjdfstest::` and
//!   `descriptors::` (`--skip fsx:: --skip pjdfstest::` leaves them out).
//!
//! The tests run on the default test threads in this one process, so
//! nothing process-wide may change under a test: a daemon's environment or
//! descriptor limit is set for that daemon (`Mount::with(..).env(..)`,
//! `.nofile(..)`), never with `std::env::set_var` or `setrlimit` here.
//! Tests that need a resource alone take a lock in their module.
//!
//! Cargo.toml sets `autotests = false`: a new `tests/NAME.rs` is compiled
//! only once it is listed below (`harness_lists_every_test_file` fails
//! until it is).

mod support;

mod appends;
mod archive;
mod atime;
mod backing_fuse;
mod check_archive;
mod cli;
mod cli_conventions;
mod close;
mod crash;
mod daemon_cli;
mod descriptors;
mod docs;
mod encode_remedies;
mod export;
mod export_restart;
mod fair_turns;
mod fallocate;
mod file_handles;
mod first_read;
mod freshness;
mod freshness_hostile;
mod fsx;
mod full_disk;
mod gconv;
mod index_cache;
mod index_db;
mod killpriv;
mod locks;
mod log_flood;
mod logging;
mod man_page;
mod memory;
mod migrate;
mod migrate_feedback;
mod migrate_races;
mod migrate_redteam;
mod migrate_security;
mod mount;
mod mount_backing_changes;
mod mount_lifecycle;
mod mount_outside_tools;
mod mount_scans;
mod mount_status;
mod mount_write;
mod package;
mod passthrough;
mod passthrough_writers;
mod pjdfstest;
mod redteam_daemon;
mod resources;
mod reused_numbers;
mod round_trips;
mod sample_archive;
mod scripts;
mod security_acl;
mod security_journal;
mod several_daemons;
mod shared_state;
mod space_limits;
mod sys;
mod unmount;
mod write_dense;
mod write_exerciser;
mod write_split;

/// Every `tests/*.rs` is a module of this binary (with `autotests = false`
/// cargo would silently not build one left out), and no `tests/*/main.rs`
/// waits to be a binary of its own.
#[test]
fn harness_lists_every_test_file() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(dir.join("tests.rs")).unwrap();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let module = if p.is_dir() {
            if p.join("main.rs").exists() {
                missing.push(format!("{} (a binary's main.rs)", p.display()));
                continue;
            }
            p.join("mod.rs").exists()
        } else {
            p.extension().is_some_and(|x| x == "rs") && name != "tests"
        };
        if module && !root.lines().any(|l| l == format!("mod {name};")) {
            missing.push(p.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "not in the test harness: {missing:?}: add `mod NAME;` to tests/tests.rs \
         (and use `crate::support::...` instead of `mod support_mount;`)"
    );
}

/// The mount guard cleans up and prints the daemon's log, its stderr and
/// its `-o log=FILE`, when a test panics: this binary runs
/// [`guard_child_panics_inside_a_mount`] again and reads what it printed.
#[test]
fn mount_guard_prints_the_daemon_log_when_a_test_panics() {
    let dir = tempfile::tempdir().unwrap();
    let opt_log = dir.path().join("opt.log");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "guard_child_panics_inside_a_mount",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUTF8FS_GUARD_CHILD", &opt_log)
        .output()
        .unwrap();
    let err =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the child test did not fail:\n{err}");
    let backing = err
        .split("deliberate panic; BACKING ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("the child did not panic as planned:\n{err}"))
        .to_owned();
    let dump = err
        .split("--- cutf8fs log (")
        .nth(1)
        .unwrap_or_else(|| panic!("no daemon log printed:\n{err}"));
    let opt_part = dump
        .split(&format!("--- log={} ---", opt_log.display()))
        .nth(1)
        .unwrap_or_else(|| panic!("the -o log=FILE part is missing:\n{err}"));
    assert!(
        opt_part.contains(&format!("serving {backing} on ")),
        "the printed log lacks the daemon's own lines:\n{err}"
    );
    let mnt = std::path::Path::new(&backing).with_file_name("mnt");
    assert!(!support::mount::is_mounted(&mnt), "still mounted: {mnt:?}");
    assert!(
        !std::path::Path::new(&backing).exists(),
        "BACKING left behind"
    );
}

/// Panics inside a mount whose daemon logs to `$CUTF8FS_GUARD_CHILD` (does
/// nothing unless that is set).
#[test]
fn guard_child_panics_inside_a_mount() {
    let Some(log) = std::env::var_os("CUTF8FS_GUARD_CHILD") else {
        return;
    };
    let opt = format!("log={}", log.to_string_lossy());
    let m = support::mount::Mount::new(&[&opt], |_| {});
    panic!("deliberate panic; BACKING {}", m.backing.display());
}

/// The guard kills the daemon (-9), detaches the dead mount and mounts the
/// same BACKING again; a crash test's remount sees what was written.
#[test]
fn mount_guard_kills_and_remounts_the_same_backing() {
    let mut m = support::mount::Mount::new(&[], |b| {
        std::fs::write(b.join("before"), "written before\n").unwrap();
    });
    let first = m.pid();
    std::fs::write(m.m("through"), "written through the mount\n").unwrap();
    m.kill9();
    assert!(!support::mount::is_mounted(&m.mnt));
    assert!(
        std::fs::read_dir(format!("/proc/{first}")).is_err(),
        "the killed daemon {first} still runs"
    );
    m.remount();
    assert_ne!(m.pid(), first);
    assert!(support::mount::is_mounted(&m.mnt));
    assert_eq!(
        std::fs::read(m.m("through")).unwrap(),
        b"written through the mount\n"
    );
    assert_eq!(std::fs::read(m.m("before")).unwrap(), b"written before\n");
    assert!(
        m.log_text().matches("serving ").count() >= 2,
        "{}",
        m.log_text()
    );
}
