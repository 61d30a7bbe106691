//! fsx (the file system exerciser, `cargo install fsx`) on a raw file
//! through a cutf8fs mount: reads, writes, mmap reads and writes, truncate,
//! fallocate, hole punching, sendfile, copy_file_range, each checked against
//! fsx's own model of the file. Config: `../shared/peer-suites/fsx-full.toml`
//! (or `$FSX_CONFIG`). Corrected files are issue 4's (writes to them fail
//! with EROFS until then).

mod support_mount;

use std::path::{Path, PathBuf};
use std::process::Command;

use support_mount::Mount;

fn find_tool(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(Path::new(&h).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: run scripts/ci-fuse-setup.sh"))
}

fn config() -> PathBuf {
    if let Some(c) = std::env::var_os("FSX_CONFIG") {
        return c.into();
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/peer-suites/fsx-full.toml");
    if beside.is_file() {
        return beside;
    }
    let shared = Path::new("/work/shared/peer-suites/fsx-full.toml");
    assert!(
        shared.is_file(),
        "fsx config not found at {}",
        beside.display()
    );
    shared.to_owned()
}

#[test]
fn fsx_on_a_raw_file() {
    let fsx = find_tool("fsx");
    let m = Mount::new(&[], |_| {});
    let artifacts = m.dir.path().join("fsx-artifacts");
    std::fs::create_dir(&artifacts).unwrap();
    let out = Command::new(fsx)
        .arg("-f")
        .arg(config())
        .args(["-N", "20000", "-S", "11"])
        .arg("-P")
        .arg(&artifacts)
        .arg(m.m("raw.bin"))
        .output()
        .expect("run fsx");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("All operations completed A-OK"),
        "fsx failed ({}):\n{text}",
        out.status
    );
}
