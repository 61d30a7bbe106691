//! The text exerciser: thousands of random
//! operations on one file through a real mount — writes of random text at
//! random character-aligned offsets (some cut in two mid-character), appends
//! (O_APPEND too), writes past the end, truncations, fsync, close and reopen
//! (O_TRUNC too), mmap reads, two handles at once — checked after every step
//! against an in-memory model of the view (read back with pread through the
//! mount), and after every close the backing file against the model's
//! encoding with the codec's strict converters.
//!
//! The model follows docs/behaviour.md, "The mount": an empty file takes the encoding of its first
//! write (text → corrected); a corrected file stays corrected unless W cannot
//! store its new content (the codec's lossless encoder refuses it), then it
//! is raw for good — until emptied.
//!
//! Replay: `CUTF8FS_SEED=<seed> cargo test --release --test tests -- write_exerciser::`
//! (the seed is printed on failure); `CUTF8FS_OPS=<n>` changes the number of
//! operations per run (default 15 000 for each of the two main tests, ~20 s in release).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::mount::Mount;
use crate::support::write::{assert_corrected_bytes, corrected_file, first_difference};
use cutf8::{self, MAGIC};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Stop early (after at least `MIN_OPS`) once a run takes this long, so the
/// default run stays within CI's budget on two slow cores.
const TIME_BUDGET: Duration = Duration::from_secs(45);
const MIN_OPS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enc {
    Empty,
    Corrected,
    Raw,
}

/// What the view must be, and how BACKING must hold it.
struct Model {
    view: Vec<u8>,
    enc: Enc,
    /// `-o newfiles=raw`: an empty file stays raw whatever is written.
    newfiles_raw: bool,
}

impl Model {
    /// The content after writing `data` at `off` (zeros fill a gap).
    fn write(&mut self, off: usize, data: &[u8]) {
        let was_empty = self.view.is_empty();
        let end = off + data.len();
        if self.view.len() < end {
            self.view.resize(end, 0);
        }
        self.view[off..end].copy_from_slice(data);
        self.enc = if was_empty {
            // The exerciser writes only whole text at 0 into an empty file.
            assert!(off == 0 && std::str::from_utf8(data).is_ok(), "test bug");
            if self.newfiles_raw {
                Enc::Raw
            } else {
                Enc::Corrected
            }
        } else {
            match self.enc {
                Enc::Corrected if cutf8::encode_lossless(&self.view).is_ok() => Enc::Corrected,
                // W cannot store the new content: the file turns raw.
                Enc::Corrected => Enc::Raw,
                e => e,
            }
        };
    }

    fn truncate(&mut self, len: usize) {
        self.view.resize(len, 0);
        if len == 0 {
            self.enc = Enc::Empty;
        }
    }

    /// Character boundaries of the view (for aligned offsets).
    fn boundary_at_or_after(&self, mut at: usize) -> usize {
        while at < self.view.len() && self.view[at] & 0xC0 == 0x80 {
            at += 1;
        }
        at
    }
}

/// Random text: ASCII, Latin, CJK, emoji, and both ranges whose length
/// differs between view and disk.
fn random_text(rng: &mut StdRng, chars: usize) -> String {
    let mut s = String::new();
    for _ in 0..chars {
        let c = match rng.gen_range(0..12) {
            0..=3 => rng.gen_range(b'a'..=b'z') as char,
            4 => [' ', '\n', '.', '\t'][rng.gen_range(0..4)],
            5 => char::from_u32(rng.gen_range(0xA0..0x250)).unwrap(),
            6 => char::from_u32(rng.gen_range(0x4E00..0x9FFF)).unwrap(),
            7 => char::from_u32(rng.gen_range(0x1F300..0x1F650)).unwrap(),
            8 | 9 => char::from_u32(rng.gen_range(0x800..0x8A0)).unwrap(),
            _ => char::from_u32(rng.gen_range(0x10000..0x110A0)).unwrap(),
        };
        s.push(c);
    }
    s
}

struct Handle {
    file: File,
    append: bool,
    name: &'static str,
}

/// Prints the seed and the last operations if the test fails.
struct Replay {
    seed: u64,
    step: usize,
    last: VecDeque<String>,
}

impl Replay {
    fn note(&mut self, s: String) {
        if self.last.len() == 30 {
            self.last.pop_front();
        }
        self.last.push_back(format!("step {}: {s}", self.step));
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "write_exerciser failed at step {}; replay with CUTF8FS_SEED={}\nlast operations:\n  {}",
                self.step,
                self.seed,
                self.last.iter().cloned().collect::<Vec<_>>().join("\n  ")
            );
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number"))
    })
}

struct Exerciser {
    rng: StdRng,
    model: Model,
    handles: Vec<Handle>,
    view_path: PathBuf,
    back_path: PathBuf,
    replay: Replay,
    opened: usize,
}

impl Exerciser {
    fn open(&mut self, append: bool, trunc: bool) {
        // std refuses append + truncate together; the kernel does not.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .append(append)
            .custom_flags(if trunc { libc::O_TRUNC } else { 0 })
            .open(&self.view_path)
            .unwrap_or_else(|e| panic!("open (append {append}, trunc {trunc}): {e}"));
        if trunc {
            self.model.truncate(0);
        }
        self.opened += 1;
        let name = ["h0", "h1", "h2", "h3"][self.opened % 4];
        self.replay
            .note(format!("open {name} append={append} trunc={trunc}"));
        self.handles.push(Handle { file, append, name });
    }

    fn close(&mut self, i: usize) {
        let h = self.handles.remove(i);
        self.replay.note(format!("close {}", h.name));
        drop(h);
        self.check_backing();
    }

    /// The backing file holds the model in its encoding.
    fn check_backing(&self) {
        let what = format!("seed {} step {}", self.replay.seed, self.replay.step);
        let backing = std::fs::read(&self.back_path).unwrap();
        match self.model.enc {
            Enc::Empty => assert!(
                backing.is_empty() || backing == MAGIC,
                "{what}: an emptied file holds {} bytes in BACKING",
                backing.len()
            ),
            Enc::Corrected => assert_corrected_bytes(&backing, &self.model.view, &what),
            Enc::Raw => {
                assert!(!cutf8::has_magic(&backing), "{what}: should be raw");
                assert!(
                    backing == self.model.view,
                    "{what}: raw backing differs: {}",
                    first_difference(&backing, &self.model.view)
                );
            }
        }
    }

    /// The view read through a random handle equals the model.
    fn check_view(&mut self) {
        let what = format!("seed {} step {}", self.replay.seed, self.replay.step);
        let h = &self.handles[self.rng.gen_range(0..self.handles.len())];
        let len = h.file.metadata().unwrap().len();
        assert_eq!(
            len,
            self.model.view.len() as u64,
            "{what}: st_size through {} is not the model's length",
            h.name
        );
        let mut buf = vec![0u8; self.model.view.len() + 64];
        let mut got = 0;
        loop {
            let n = h.file.read_at(&mut buf[got..], got as u64).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        assert!(
            buf == self.model.view,
            "{what}: pread through {} differs from the model: {}",
            h.name,
            first_difference(&buf, &self.model.view)
        );
        // A short read at a random offset, inside characters too.
        if !self.model.view.is_empty() {
            let off = self.rng.gen_range(0..self.model.view.len());
            let n = self.rng.gen_range(1..64).min(self.model.view.len() - off);
            let mut b = vec![0u8; n];
            h.file.read_exact_at(&mut b, off as u64).unwrap();
            assert!(
                b[..] == self.model.view[off..off + n],
                "{what}: pread({off}, {n}) differs"
            );
        }
    }

    fn writable(&mut self) -> usize {
        self.rng.gen_range(0..self.handles.len())
    }

    fn step(&mut self) {
        let len = self.model.view.len();
        // Keep the file small enough to read back whole at every step.
        let big = len > 96 * 1024;
        // A file turned raw stays raw until emptied: empty it soon, so
        // most steps run on a corrected file.
        let r = if self.model.enc == Enc::Raw && self.rng.gen_ratio(1, 10) {
            60
        } else {
            self.rng.gen_range(0..100)
        };
        let raw_reset = self.model.enc == Enc::Raw && r == 60;
        match r {
            // Write text at a character-aligned offset; the end is padded to
            // the next boundary so no character is left cut in two.
            0..=34 => {
                let i = self.writable();
                let (off, text) = self.aligned_text(if big { 40 } else { 300 });
                self.write(i, off, text.as_bytes(), None);
            }
            // The same, in two pwrites cut inside a character.
            35..=42 if len > 0 => {
                let i = self.writable();
                let (off, text) = self.aligned_text(40);
                let cuts: Vec<usize> = (1..text.len())
                    .filter(|&k| !text.is_char_boundary(k))
                    .collect();
                let cut = if cuts.is_empty() {
                    text.len() / 2
                } else {
                    cuts[self.rng.gen_range(0..cuts.len())]
                };
                self.write(i, off, text.as_bytes(), Some(cut));
            }
            // Append: write(2) on an O_APPEND handle, or pwrite at the end.
            43..=57 => {
                let n = if big { 5 } else { self.rng.gen_range(1..400) };
                let text = random_text(&mut self.rng, n);
                let i = self.writable();
                if self.handles[i].append {
                    self.replay.note(format!(
                        "append {} bytes via {}",
                        text.len(),
                        self.handles[i].name
                    ));
                    self.handles[i]
                        .file
                        .write_all(text.as_bytes())
                        .unwrap_or_else(|e| panic!("seed {}: append: {e}", self.replay.seed));
                    self.model.write(len, text.as_bytes());
                } else {
                    self.write(i, len, text.as_bytes(), None);
                }
            }
            // Write past the end: the gap reads as zeros (U+0000, which W
            // stores, so a corrected file stays corrected).
            58..=59 if len > 0 => {
                let i = self.writable();
                if !self.handles[i].append {
                    let gap = self.rng.gen_range(1..50);
                    let text = random_text(&mut self.rng, 5);
                    self.write(i, len + gap, text.as_bytes(), None);
                }
            }
            // Truncate: shorter at a boundary, to zero, or longer.
            60..=67 => {
                let i = self.writable();
                let new = match self.rng.gen_range(0..10) {
                    _ if raw_reset => 0,
                    0 => 0,
                    1 if len > 0 => len + self.rng.gen_range(1..100),
                    _ if big => self.model.boundary_at_or_after(len / 4),
                    _ => self.model.boundary_at_or_after(self.rng.gen_range(0..=len)),
                };
                self.replay
                    .note(format!("ftruncate {new} via {}", self.handles[i].name));
                self.handles[i]
                    .file
                    .set_len(new as u64)
                    .unwrap_or_else(|e| panic!("seed {}: ftruncate: {e}", self.replay.seed));
                self.model.truncate(new);
            }
            // Close one handle and reopen (sometimes with O_TRUNC).
            68..=75 => {
                let i = self.writable();
                self.close(i);
                let append = self.rng.gen_bool(0.3);
                let trunc = self.rng.gen_ratio(1, 8);
                self.open(append, trunc);
            }
            // A second handle at once, or back to one.
            76..=81 => {
                if self.handles.len() < 2 {
                    let append = self.rng.gen_bool(0.3);
                    self.open(append, false);
                } else {
                    let i = self.writable();
                    self.close(i);
                }
            }
            // mmap read through a handle.
            82..=89 if len > 0 => {
                let i = self.writable();
                self.replay
                    .note(format!("mmap read via {}", self.handles[i].name));
                // SAFETY: nothing writes the file while it is mapped.
                let map = unsafe { memmap2::Mmap::map(&self.handles[i].file) }.unwrap();
                assert!(
                    map[..] == self.model.view[..],
                    "seed {} step {}: mmap differs from the model: {}",
                    self.replay.seed,
                    self.replay.step,
                    first_difference(&map, &self.model.view)
                );
            }
            // fsync / fdatasync.
            90..=92 => {
                let i = self.writable();
                self.replay
                    .note(format!("fsync via {}", self.handles[i].name));
                if self.rng.gen_bool(0.5) {
                    self.handles[i].file.sync_all().unwrap();
                } else {
                    self.handles[i].file.sync_data().unwrap();
                }
            }
            _ => {
                // Overwrite with the same byte length (the common in-place
                // edit): ASCII over ASCII.
                if len > 0 {
                    let i = self.writable();
                    let off = self.rng.gen_range(0..len);
                    let run = self.model.view[off..]
                        .iter()
                        .take_while(|b| b.is_ascii_lowercase())
                        .count();
                    if run > 0 {
                        let text = &"qwertyuiop".repeat(run / 10 + 1)[..run];
                        self.write(i, off, text.as_bytes(), None);
                    }
                }
            }
        }
    }

    /// A character-aligned offset and random text ending on a boundary
    /// (padded with '.' over the rest of a character it would cut).
    fn aligned_text(&mut self, max_chars: usize) -> (usize, String) {
        let len = self.model.view.len();
        let off = if len == 0 {
            0
        } else {
            self.model.boundary_at_or_after(self.rng.gen_range(0..=len))
        };
        let n = self.rng.gen_range(1..=max_chars);
        let mut text = random_text(&mut self.rng, n);
        let end = off + text.len();
        let pad = self.model.boundary_at_or_after(end.min(len)).max(end) - end;
        text.push_str(&".".repeat(pad));
        (off, text)
    }

    /// pwrite (or, on an O_APPEND handle, an append) of `data`; with `cut`,
    /// in two pwrites split there, checking the view in between.
    fn write(&mut self, i: usize, off: usize, data: &[u8], cut: Option<usize>) {
        if self.handles[i].append {
            // pwrite on an O_APPEND descriptor appends on Linux: use another
            // handle, opening one if needed.
            match self.handles.iter().position(|h| !h.append) {
                Some(j) => return self.write(j, off, data, cut),
                None => {
                    self.open(false, false);
                    let j = self.handles.len() - 1;
                    return self.write(j, off, data, cut);
                }
            }
        }
        let seed = self.replay.seed;
        let pieces: Vec<(usize, &[u8])> = match cut {
            Some(k) if !self.model.view.is_empty() => {
                vec![(off, &data[..k]), (off + k, &data[k..])]
            }
            _ => vec![(off, data)],
        };
        let n = pieces.len();
        for (k, (o, d)) in pieces.into_iter().enumerate() {
            self.replay.note(format!(
                "pwrite at {o} of {} bytes via {} (piece {}/{n}): {:?}",
                d.len(),
                self.handles[i].name,
                k + 1,
                String::from_utf8_lossy(&d[..d.len().min(48)])
            ));
            self.handles[i]
                .file
                .write_all_at(d, o as u64)
                .unwrap_or_else(|e| panic!("seed {seed}: pwrite at {o}: {e}"));
            self.model.write(o, d);
            if k + 1 < n {
                self.check_view();
            }
        }
    }
}

fn exercise(start: Option<&str>, opts: &[&str], ops: usize, salt: u64) {
    let newfiles_raw = opts.contains(&"newfiles=raw");
    let seed = env_u64("CUTF8FS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }) ^ salt;
    let ops = env_u64("CUTF8FS_OPS").map_or(ops, |n| n as usize);
    let m = Mount::new(opts, |b| {
        if let Some(text) = start {
            std::fs::write(b.join("x.txt"), corrected_file(text)).unwrap();
        }
    });
    let view_path = m.m("x.txt");
    let back_path = m.b("x.txt");
    if start.is_none() {
        File::create(&view_path).unwrap();
    }
    let text = start.unwrap_or("");
    let mut ex = Exerciser {
        rng: StdRng::seed_from_u64(seed),
        model: Model {
            view: text.as_bytes().to_vec(),
            enc: if text.is_empty() {
                Enc::Empty
            } else {
                Enc::Corrected
            },
            newfiles_raw,
        },
        handles: Vec::new(),
        view_path,
        back_path,
        replay: Replay {
            seed: seed ^ salt,
            step: 0,
            last: VecDeque::new(),
        },
        opened: 0,
    };
    eprintln!(
        "write_exerciser: seed {} (CUTF8FS_SEED to replay)",
        seed ^ salt
    );
    ex.open(false, false);
    ex.check_view();
    let t0 = Instant::now();
    let mut corrected_steps = 0;
    let mut done = 0;
    for step in 1..=ops {
        ex.replay.step = step;
        ex.step();
        ex.check_view();
        if ex.model.enc == Enc::Corrected {
            corrected_steps += 1;
        }
        done = step;
        if step >= MIN_OPS && t0.elapsed() > TIME_BUDGET {
            eprintln!("write_exerciser: time budget reached after {step} of {ops} operations");
            break;
        }
    }
    while !ex.handles.is_empty() {
        ex.close(0);
    }
    assert!(
        crate::support::write::journal_entries(&m.backing).is_empty(),
        "journal left behind"
    );
    eprintln!(
        "write_exerciser: {done} operations in {:.1?}, {corrected_steps} with the file corrected",
        t0.elapsed()
    );
    // The run must have exercised corrected files, not only raw ones.
    assert!(
        newfiles_raw || corrected_steps * 2 > done,
        "only {corrected_steps} of {done} steps had a corrected file"
    );
}

#[test]
fn random_operations_on_a_file_that_starts_corrected() {
    let start = "Start: café 中文 😀 \u{800}\u{89F} 𐀀\u{1109F}\n".repeat(200);
    exercise(Some(&start), &[], 15_000, 0);
}

#[test]
fn random_operations_on_a_file_created_through_the_mount() {
    exercise(None, &[], 15_000, 0x5EED);
}

/// With `-o newfiles=raw` the file created through the mount stays raw
/// (shorter: the raw path is the plain mirror's).
#[test]
fn random_operations_with_newfiles_raw() {
    exercise(None, &["newfiles=raw"], 1000, 0xDA7A);
}
