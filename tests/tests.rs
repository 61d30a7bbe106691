//! The integration tests: one test binary, as ripgrep has, with one module
//! per area. Each module was once a binary of its own; one binary links the
//! support code once and runs everything in one process.
//!
//! * [`support`]: the one mount guard (`support::mount::Mount`: fresh or
//!   given BACKING, kill -9 and remount, the daemon's log on failure), the
//!   write checks, the test users and the `cutf8` runner.
//! * Select by module: `cargo test --test tests -- mount_write::` runs one
//!   area; the slow peer suites are `fsx::`, `pjdfstest::` and
//!   `robust_fds::` (`--skip fsx:: --skip pjdfstest::` leaves them out).
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

mod atime;
mod cli;
mod crash;
mod fallocate;
mod first_hour;
mod first_hour_mount;
mod fsx;
mod full_disk;
mod gconv;
mod man_page;
mod migrate;
mod mount;
mod mount_write;
mod pjdfstest;
mod robust_fds;
mod robust_scan;
mod robust_underneath;
mod sample_archive;
mod security_acl;
mod security_journal;
mod write_exerciser;

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
