//! iconv(1) with the CORRECTED-UTF-8 module against iconv(1) on UTF-16 and
//! against `cutf8`, on the codec benchmark's corpora (crates/cutf8/benches/support):
//! wall time of whole processes (start-up included) writing to /dev/null,
//! median of repeated runs. Reports, never asserts.
//!
//! Run through scripts/bench-gconv.sh, which builds and installs the module
//! and sets GCONV_PATH and CUTF8.

#[path = "../crates/cutf8/benches/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(64);
    let repeats: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let cutf8 = std::env::var("CUTF8").expect("CUTF8: path of the cutf8 binary");
    std::env::var("GCONV_PATH").expect("GCONV_PATH: the installed module directory");
    let dir = tempfile::tempdir().expect("temp dir");
    let corpora = support::corpora(mib << 20);
    let ops: [(&str, &str); 5] = [
        ("iconv CUTF8→UTF-8", "disk"),
        ("iconv UTF-16→UTF-8", "u16"),
        ("cutf8 decode", "disk"),
        ("iconv UTF-8→CUTF8", "view"),
        ("cutf8 encode", "view"),
    ];
    println!(
        "{mib} MiB of view text per corpus; wall time of the whole process, median of {repeats}; \
         MB/s = 1e6 input bytes/s\n"
    );
    print!("| corpus |");
    for (name, _) in &ops {
        print!(" {name} |");
    }
    println!();
    print!("|---|");
    for _ in &ops {
        print!("---:|");
    }
    println!();
    for c in &corpora {
        let mut disk = cutf8::MAGIC.to_vec();
        disk.extend_from_slice(&c.disk);
        let mut u16 = vec![0xFF, 0xFE];
        for u in std::str::from_utf8(&c.view).unwrap().encode_utf16() {
            u16.extend_from_slice(&u.to_le_bytes());
        }
        let files = [("disk", disk), ("u16", u16), ("view", c.view.clone())];
        for (n, bytes) in &files {
            std::fs::write(dir.path().join(n), bytes).unwrap();
        }
        print!("| {} |", c.name);
        for (name, input) in &ops {
            let f = dir.path().join(input);
            let size = std::fs::metadata(&f).unwrap().len();
            let mut times: Vec<Duration> = (0..repeats).map(|_| time(name, &cutf8, &f)).collect();
            times.sort();
            let med = times[times.len() / 2];
            print!(
                " {:.0} MB/s ({:.2} s) |",
                size as f64 / med.as_secs_f64() / 1e6,
                med.as_secs_f64()
            );
        }
        println!();
    }
}

fn time(op: &str, cutf8: &str, input: &Path) -> Duration {
    let mut cmd = match op {
        "iconv CUTF8→UTF-8" => iconv("CORRECTED-UTF-8", "UTF-8"),
        "iconv UTF-16→UTF-8" => iconv("UTF-16", "UTF-8"),
        "iconv UTF-8→CUTF8" => iconv("UTF-8", "CORRECTED-UTF-8"),
        "cutf8 decode" => cutf8_cmd(cutf8, "decode"),
        _ => cutf8_cmd(cutf8, "encode"),
    };
    cmd.arg(input).stdout(Stdio::null());
    let t = Instant::now();
    let st = cmd.status().expect("run the converter");
    let d = t.elapsed();
    assert!(st.success(), "{op} failed on {}", input.display());
    d
}

fn iconv(from: &str, to: &str) -> Command {
    let mut c = Command::new("iconv");
    c.args(["-f", from, "-t", to]);
    c
}

fn cutf8_cmd(cutf8: &str, sub: &str) -> Command {
    let mut c = Command::new(cutf8);
    c.arg(sub);
    c
}
