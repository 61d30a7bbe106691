//! The syscall layer's contract with the rest of the code: `unsafe` lives
//! in `src/sys/` only (the codec's SIMD is another crate), and there it
//! stays a handful of blocks, each with its reason (clippy's
//! `undocumented_unsafe_blocks` is denied crate-wide). Everything else
//! calls safe functions.

use std::path::{Path, PathBuf};

/// Every `unsafe` token outside comments in the `.rs` files under `dir`,
/// as `path:line`.
fn unsafe_sites(dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            unsafe_sites(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let hit = code
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == "unsafe");
                // `#![deny(unsafe_code)]`-style attributes name no block.
                if hit && !code.trim_start().starts_with("#") {
                    out.push(format!("{}:{}", p.display(), n + 1));
                }
            }
        }
    }
}

fn src() -> PathBuf {
    // At run time, so that the check can be pointed at another tree.
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")).join("src")
}

#[test]
fn unsafe_code_lives_only_in_the_syscall_layer() {
    let src = src();
    let mut found = Vec::new();
    unsafe_sites(&src, &mut found);
    let sys = src.join("sys");
    let outside: Vec<_> = found
        .iter()
        .filter(|s| !Path::new(s).starts_with(&sys))
        .collect();
    assert!(
        outside.is_empty(),
        "unsafe outside src/sys/: {outside:#?}\nput the call in src/sys (on nix where it \
         can be) and call the safe function from there"
    );
}

#[test]
fn the_syscall_layer_has_a_handful_of_unsafe_blocks() {
    let mut found = Vec::new();
    unsafe_sites(&src().join("sys"), &mut found);
    found.retain(|s| !s.contains("/tests.rs:"));
    assert!(!found.is_empty(), "no src/sys at all?");
    assert!(
        // 22: nix wraps nearly everything; what it does not (file handles,
        // xattrs on a path, fork, two signal handlers — the stop signals'
        // and the one that wakes a lock wait —, descriptors received over
        // a socket, glibc's malloc_trim and mallopt, capget and capset for
        // the caller's limits on a thread) is counted here, and the SQLite VFS
        // that opens the index database's files by the names it is given
        // (src/sys/sqlite.rs: its registration, its one function and the
        // copy in it), the fcntl of file leases (src/sys/lease.rs) and the
        // pwritev2 of appends (`sys::append`).
        found.len() <= 22,
        "{} unsafe sites in src/sys (at most 22: nix wraps nearly everything; \
         use it): {found:#?}",
        found.len()
    );
}
