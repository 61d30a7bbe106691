//! The one `cutf8` runner: a fresh temp dir per test and a wrapper that
//! runs the built `cutf8` and, when an expectation fails, prints the
//! command, its status, stdout and stderr (and the dir's listing). [`BIN`]
//! for the tests that drive `cutf8` their own way (signals, terminals).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The built `cutf8`.
pub const BIN: &str = env!("CARGO_BIN_EXE_cutf8");

/// `b` after the magic number: a corrected file's bytes.
pub fn with_magic(b: &[u8]) -> Vec<u8> {
    let mut v = cutf8::MAGIC.to_vec();
    v.extend_from_slice(b);
    v
}

/// What one run of `cutf8` did.
pub struct Run {
    pub cmd: String,
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub listing: Vec<String>,
}

impl Run {
    fn report(&self) -> String {
        format!(
            "\ncommand: {}\nstatus: {:?}\nstdout: {:?}\nstderr: {}\ndir: {:?}\n",
            self.cmd,
            self.status,
            String::from_utf8_lossy(&self.stdout),
            self.stderr,
            self.listing
        )
    }

    /// Exit status 0 and nothing on stderr.
    #[track_caller]
    pub fn ok(self) -> Self {
        assert!(
            self.status == Some(0) && self.stderr.is_empty(),
            "expected success{}",
            self.report()
        );
        self
    }

    /// Exit status `code` (check prints a summary on stderr even at 0).
    #[track_caller]
    pub fn exits(self, code: i32) -> Self {
        assert_eq!(
            self.status,
            Some(code),
            "wrong exit status{}",
            self.report()
        );
        self
    }

    #[track_caller]
    pub fn stdout_is(self, want: &[u8], what: &str) -> Self {
        if self.stdout != want {
            let show = |b: &[u8]| match std::str::from_utf8(b) {
                Ok(s) => format!("{s:?}"),
                Err(_) => format!("{b:02X?}"),
            };
            panic!(
                "{what}: stdout differs\nwant: {}\ngot:  {}{}",
                show(want),
                show(&self.stdout),
                self.report()
            );
        }
        self
    }

    #[track_caller]
    pub fn stderr_is(self, want: &str) -> Self {
        assert!(
            self.stderr == want,
            "stderr differs\nwant: {want}{}",
            self.report()
        );
        self
    }

    #[track_caller]
    pub fn stderr_has(self, part: &str) -> Self {
        assert!(
            self.stderr.contains(part),
            "stderr lacks {part:?}{}",
            self.report()
        );
        self
    }
}

/// Run `cutf8 args` in `dir` with `stdin`.
pub fn run_in(dir: &Path, args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cutf8");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    // Write from a thread: the child may fill stdout before reading it all,
    // or exit without reading it (a failed write is then expected).
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait for cutf8");
    writer.join().expect("stdin writer");
    Run {
        cmd: format!("cutf8 {}", args.join(" ")),
        status: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        listing: listing(dir),
    }
}

/// Run `cutf8 args` with `stdin` in a scratch dir.
pub fn cutf8(args: &[&str], stdin: &[u8]) -> Run {
    let d = Dir::new();
    d.run(args, stdin)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A fresh temp dir, removed on drop.
pub struct Dir(tempfile::TempDir);

impl Dir {
    pub fn new() -> Self {
        Dir(tempfile::tempdir().expect("temp dir"))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path().join(name), bytes).expect("write test file");
    }

    #[track_caller]
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path().join(name)).expect("read test file")
    }

    /// File names in the dir, sorted.
    pub fn names(&self) -> Vec<String> {
        listing(self.path())
    }

    pub fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_in(self.path(), args, stdin)
    }
}
