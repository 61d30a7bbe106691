//! Scripts stay runnable, and `cutf8 migrate` and the mount agree on what
//! a script is: a first line of `#!` and an interpreter, as the kernel
//! reads it, but not `#![` (Rust's inner attributes, which open many
//! `lib.rs` and `main.rs` files). A converted script fails outside the
//! mount with "Exec format error"; a Rust source kept raw is not the
//! Corrected UTF-8 its neighbours are.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use cutf8::MAGIC;

use crate::support::cli::BIN;
use crate::support::mount::Mount;

fn migrate(args: &[&str], root: &Path) -> std::process::Output {
    let out = Command::new(BIN)
        .arg("migrate")
        .args(args)
        .arg(root)
        .output()
        .expect("run cutf8");
    crate::support::run::succeeded(&out, format_args!("cutf8 migrate {args:?}"));
    out
}

fn executable(p: &Path, text: &str) {
    fs::write(p, text).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
}

/// `#!/bin/sh` and `#! /usr/bin/env sh` scripts stay byte for byte as
/// they were and still run from the tree; `#![no_std]` Rust sources and
/// plain text are converted; the report and the summary name the skip
/// `script`; `--include-scripts` converts them (and then they no longer
/// run outside the mount, which is why it is not the default).
#[test]
fn migrate_leaves_scripts_raw_and_they_still_run() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("tree");
    fs::create_dir(&root).unwrap();
    let sh = "#!/bin/sh\necho \"grüße aus $0\"\n";
    let env = "#! /usr/bin/env sh\necho 'ünïcode'\n";
    executable(&root.join("run.sh"), sh);
    executable(&root.join("env.sh"), env);
    let rust = "#![no_std]\n//! Grüße\npub fn f() {}\n";
    fs::write(root.join("lib.rs"), rust).unwrap();
    let spaced = "#! [cfg_attr(test, allow(unused))]\nfn main() { let _ = \"é\"; }\n";
    fs::write(root.join("main.rs"), spaced).unwrap();
    fs::write(root.join("notes.txt"), "café\n").unwrap();
    let report = t.path().join("report.jsonl");
    let out = migrate(&["--report", report.to_str().unwrap()], &root);

    assert_eq!(fs::read(root.join("run.sh")).unwrap(), sh.as_bytes());
    assert_eq!(fs::read(root.join("env.sh")).unwrap(), env.as_bytes());
    for f in ["lib.rs", "main.rs", "notes.txt"] {
        assert!(
            fs::read(root.join(f)).unwrap().starts_with(&MAGIC),
            "{f} not converted"
        );
    }
    let run = Command::new(root.join("run.sh")).output().unwrap();
    crate::support::run::succeeded(&run, "command failed");
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("grüße aus"));
    let text = fs::read_to_string(&report).unwrap();
    let codes: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["path"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .into(),
                v["code"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    for s in ["run.sh", "env.sh"] {
        assert!(
            codes.contains(&(s.into(), "script".into())),
            "{s} not reported as a script: {codes:?}"
        );
    }
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("script: 2"), "{summary}");

    // --include-scripts converts them, as asked.
    migrate(&["--include-scripts"], &root);
    let converted = fs::read(root.join("run.sh")).unwrap();
    assert!(converted.starts_with(&MAGIC));
    let run = Command::new(root.join("run.sh")).output();
    assert!(
        run.as_ref().map_or(true, |o| !o.status.success()),
        "a converted script ran outside the mount: {run:?}"
    );
}

/// Written through the mount, a Rust file beginning `#![no_std]` is
/// corrected like any text; a `#!/bin/sh` script stays raw and runs from
/// BACKING, as migrate would leave it.
#[test]
fn the_mount_corrects_rust_inner_attributes_and_keeps_scripts_raw() {
    let m = Mount::new(&[], |_| {});
    let rust = "#![no_std]\n//! Grüße\npub fn f() {}\n";
    fs::write(m.m("lib.rs"), rust).unwrap();
    let disk = fs::read(m.b("lib.rs")).unwrap();
    assert!(
        disk.starts_with(&MAGIC),
        "lib.rs written through the mount stayed raw: {:?}",
        String::from_utf8_lossy(&disk)
    );
    assert_eq!(fs::read_to_string(m.m("lib.rs")).unwrap(), rust);

    let sh = "#!/bin/sh\necho \"grüße\"\n";
    executable(&m.m("run.sh"), sh);
    assert_eq!(fs::read(m.b("run.sh")).unwrap(), sh.as_bytes());
    let run = Command::new(m.b("run.sh")).output().unwrap();
    crate::support::run::succeeded(&run, "command failed");

    // The same rule as migrate: a tree written through the mount and then
    // migrated is left as it is.
    let out = migrate(&["--dry-run"], &m.backing);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("dry run: 0 files would be converted"),
        "{said}"
    );
    assert!(said.contains("script: 1"), "{said}");
}
