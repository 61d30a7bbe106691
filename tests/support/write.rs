//! Helpers for the write tests: checking a backing file against what a
//! tool wrote with the codec's *strict* converters (never by comparing the
//! mount with itself), and running tools with bug-report failures.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cutf8::{self, MAGIC};

/// Where a byte string first differs from another, for failure messages.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |v: &[u8]| {
        let s = at.saturating_sub(8);
        let e = (at + 16).min(v.len());
        format!("{:02X?}", &v[s.min(e)..e])
    };
    format!(
        "lengths {} vs {}, first difference at byte {at}: {} vs {}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    )
}

/// The backing bytes must be the magic number followed by the strict
/// Corrected UTF-8 of exactly `text`: decoding them strictly gives `text`,
/// and encoding `text` strictly gives them.
pub fn assert_corrected_bytes(backing: &[u8], text: &[u8], what: &str) {
    assert!(
        cutf8::has_magic(backing),
        "{what}: backing file is not corrected (no magic number); it begins {:02X?} ({} bytes)",
        &backing[..backing.len().min(16)],
        backing.len()
    );
    let body = &backing[MAGIC.len()..];
    let decoded = cutf8::decode_strict(body)
        .unwrap_or_else(|e| panic!("{what}: backing file is not strict Corrected UTF-8: {e}"));
    assert!(
        decoded == text,
        "{what}: strict V of the backing file is not what was written: {}",
        first_difference(&decoded, text)
    );
    let encoded = cutf8::encode_strict(text)
        .unwrap_or_else(|e| panic!("{what}: test bug, the text is not strictly encodable: {e}"));
    assert!(
        encoded == body,
        "{what}: backing bytes differ from strict W of what was written: {}",
        first_difference(body, &encoded)
    );
}

/// [`assert_corrected_bytes`] on the file at `path` in BACKING.
pub fn assert_corrected(path: &Path, text: &[u8], what: &str) {
    let backing = fs::read(path).unwrap_or_else(|e| panic!("{what}: read {}: {e}", path.display()));
    assert_corrected_bytes(&backing, text, what);
}

/// The backing file must be raw and hold exactly `bytes`.
pub fn assert_raw(path: &Path, bytes: &[u8], what: &str) {
    let backing = fs::read(path).unwrap_or_else(|e| panic!("{what}: read {}: {e}", path.display()));
    assert!(
        !cutf8::has_magic(&backing),
        "{what}: backing file is corrected, expected raw"
    );
    assert!(
        backing == bytes,
        "{what}: raw backing file is not what was written: {}",
        first_difference(&backing, bytes)
    );
}

/// The file seen through the mount must read back as `bytes`.
pub fn assert_view(path: &Path, bytes: &[u8], what: &str) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("{what}: read {}: {e}", path.display()));
    assert!(
        got == bytes,
        "{what}: the mount does not read back what was written: {}",
        first_difference(&got, bytes)
    );
    let len = fs::metadata(path).unwrap().len();
    assert_eq!(
        len,
        bytes.len() as u64,
        "{what}: st_size is not the written length"
    );
}

/// Bytes of a corrected backing file holding `text`.
pub fn corrected_file(text: &str) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend(cutf8::encode_strict(text.as_bytes()).expect("encodable test text"));
    v
}

pub use super::run::run;

/// `sh -c script` with `$1`… set to `args`.
pub fn sh(script: &str, args: &[&OsStr]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg("sh").args(args);
    run(&mut c)
}

/// `python3 -c script` with `sys.argv[1:]` = `args`; returns its stdout.
pub fn python(script: &str, args: &[&OsStr]) -> Vec<u8> {
    let mut c = Command::new("python3");
    c.arg("-c").arg(script).args(args);
    run(&mut c).stdout
}

/// (device, inode) of a path, not following symlinks.
pub fn ino(path: &Path) -> (u64, u64) {
    let m = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// Every regular file under `dir` (relative paths), skipping `skip` names.
/// The entries in BACKING's journal (`backing/.cutf8fs-journal`), not the
/// daemons' own files there (`recover.lock`, a live daemon's `ID.owner`):
/// empty when nothing is left half done.
pub fn journal_entries(backing: &Path) -> Vec<PathBuf> {
    let Ok(dir) = fs::read_dir(backing.join(".cutf8fs-journal")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = dir
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n != "recover.lock" && !n.ends_with(".owner")
        })
        .collect();
    out.sort();
    out
}

pub fn files_under(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            if skip.iter().any(|s| name == OsStr::new(s)) {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path().strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// `sh -c script` with `$1`… = `args` and `input` on its stdin.
pub fn sh_in(script: &str, args: &[&OsStr], input: &[u8]) -> Output {
    use std::io::Write;
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg("sh").args(args);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    if !out.status.success() {
        panic!(
            "command failed: {c:?}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// What docs/behaviour.md, "The mount" says an empty file becomes when `bytes` are written into
/// it in one go: corrected for UTF-8 text without U+0000 that W can store
/// (no C1 controls), raw otherwise.
pub fn becomes_corrected(bytes: &[u8]) -> bool {
    // A `#!` script stays raw: it must run from BACKING too (cutf8fs(1)).
    if bytes.starts_with(b"#!") {
        return false;
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => !s
            .chars()
            .any(|c| c == '\0' || ('\u{80}'..='\u{9F}').contains(&c)),
        Err(_) => false,
    }
}

/// The backing file at `path` holds `bytes`, written by a tool into an
/// empty file: corrected or raw as [`becomes_corrected`] says.
pub fn assert_written(path: &Path, bytes: &[u8], what: &str) {
    if becomes_corrected(bytes) && !bytes.is_empty() {
        assert_corrected(path, bytes, what);
    } else {
        assert_raw(path, bytes, what);
    }
}

/// A file emptied through the mount (O_TRUNC, truncation to 0) holds no
/// content. docs/behaviour.md, "The mount" does not say how BACKING stores "no content"; we accept
/// an empty file or a lone magic number (both read back as nothing), since
/// the next write decides the encoding either way.
pub fn assert_empty(path: &Path, what: &str) {
    let backing = fs::read(path).unwrap_or_else(|e| panic!("{what}: read {}: {e}", path.display()));
    assert!(
        backing.is_empty() || backing == MAGIC,
        "{what}: an emptied file must hold nothing (or only the magic number), holds {} bytes beginning {:02X?}",
        backing.len(),
        &backing[..backing.len().min(16)]
    );
}
