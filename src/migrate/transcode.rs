//! Classify and convert one byte stream, in constant memory: the strict
//! codec (which writes, requires and drops the magic number) plus the few
//! rules that are migrate's own (NUL, binary, what to skip). Works on a region of an open file through positioned
//! reads, writes into any [`Sink`]; knows nothing of paths, temp files or
//! journals.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use cutf8::MAGIC;
use cutf8::{has_magic, DecodeMagic, EncodeMagic, Malformed, Problem, Status};

use crate::codec::Coder;

use super::report::{Position, Reason};

/// Which way a run converts: `Encode` is standard UTF-8 → Corrected UTF-8
/// with the magic number (W), `Decode` the other way, magic number dropped.
pub use crate::convert::Direction;

/// Bytes read (and converted) per step.
pub const CHUNK: usize = 256 * 1024;
/// A NUL byte in this many leading bytes makes a file binary (git's rule).
pub const BINARY_WINDOW: usize = 8000;

/// Per-worker buffers, reused across files.
pub struct Buffers {
    inp: Vec<u8>,
    out: Vec<u8>,
    cmp: Vec<u8>,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            inp: vec![0; CHUNK],
            out: vec![0; cutf8::max_view_len(CHUNK)],
            cmp: vec![0; cutf8::max_view_len(CHUNK)],
        }
    }
}

/// Why a conversion stopped early.
#[derive(Debug)]
pub enum Stop {
    /// The content is not for this direction; nothing was changed.
    Skip(Reason),
    Io(io::Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Where converted bytes go.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;
}

/// Counts bytes, keeps none (classification and `--dry-run`).
pub struct Count(pub u64);

impl Sink for Count {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0 += bytes.len() as u64;
        Ok(())
    }
}

/// Writes at increasing offsets of a file, from `pos`.
pub struct At<'a> {
    pub file: &'a File,
    pub pos: u64,
}

impl Sink for At<'_> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.pos)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// A region of a file: from `start` up to `end` (or its end of file).
#[derive(Clone, Copy)]
pub struct Region<'a> {
    pub file: &'a File,
    pub start: u64,
    pub end: Option<u64>,
}

impl<'a> Region<'a> {
    pub fn whole(file: &'a File) -> Self {
        Region {
            file,
            start: 0,
            end: None,
        }
    }

    /// The first `len` bytes of `file`: what a file held when `fstat` gave
    /// its size. A file someone keeps appending to is read no further, so
    /// its conversion ends (and fails the check for a change made meanwhile).
    pub fn upto(file: &'a File, len: u64) -> Self {
        Region {
            file,
            start: 0,
            end: Some(len),
        }
    }

    /// Fill `buf` from region offset `at` as far as it goes; fewer bytes
    /// only at the region's end.
    fn read(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
        let want = match self.end {
            Some(end) => buf.len().min(end.saturating_sub(self.start + at) as usize),
            None => buf.len(),
        };
        crate::io::read_full_at(self.file, &mut buf[..want], self.start + at)
    }
}

/// Line and column of region offset `offset`: re-reads the region up to
/// there (only on this rare path, so the main loop keeps no line state).
/// Lines count from `text_start` (after the magic number, for `--to
/// utf8`, since the magic number is not part of the text); the offset stays
/// the file's.
fn position(src: Region, text_start: u64, offset: u64) -> io::Result<Position> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = Position::default();
    let mut at = text_start;
    while at < offset {
        let want = buf.len().min((offset - at) as usize);
        let n = src.read(at, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        pos.advance(&buf[..n]);
        at += n as u64;
    }
    Ok(Position { offset, ..pos })
}

fn reason(dir: Direction, problem: Problem, pos: Position) -> Reason {
    match (dir, problem) {
        (Direction::Encode, Problem::C1Control(cp)) => Reason::C1Control(cp, pos),
        (Direction::Encode, p) => Reason::InvalidUtf8(p, pos, None),
        (Direction::Decode, p) => Reason::NotConvertible(p, pos),
    }
}

/// The checks that need only the first chunk: empty, magic number, binary,
/// and (unless `scripts` asks to convert them) scripts, which the kernel
/// must still run from the tree (`crate::view::sniff::is_script`, the rule
/// the mount keeps new files raw by). Cheap, so that files to skip never
/// get a temporary file. `Ok(true)`: a file to encode that begins with a
/// UTF-8 byte order mark, which converts but stays as U+FEFF
/// (`crate::diagnose::utf8_bom`), worth a note.
pub fn precheck(
    dir: Direction,
    scripts: bool,
    src: Region,
    bufs: &mut Buffers,
) -> Result<bool, Stop> {
    let n = src.read(0, &mut bufs.inp[..])?;
    let head = &bufs.inp[..n];
    if n == 0 {
        return Err(Stop::Skip(Reason::Empty));
    }
    match dir {
        Direction::Encode if has_magic(head) => Err(Stop::Skip(Reason::AlreadyCorrected)),
        Direction::Encode if memchr::memchr(0, &head[..n.min(BINARY_WINDOW)]).is_some() => {
            Err(Stop::Skip(Reason::Binary))
        }
        Direction::Encode if !scripts && crate::view::sniff::is_script(head) => {
            Err(Stop::Skip(Reason::Script))
        }
        // (`leaves_script_raw` below is this order of checks, for `cutf8
        // check`.)
        Direction::Decode if !has_magic(head) => Err(Stop::Skip(Reason::NotCorrected)),
        Direction::Encode => Ok(crate::diagnose::begins_with_bom(head)),
        Direction::Decode => Ok(false),
    }
}

/// What a file strict encoding refused at `offset` looks like
/// (`crate::diagnose`, the judgement `cutf8 encode` makes), from its first
/// [`DIAGNOSIS_SAMPLE`] bytes and as many from the error on.
fn diagnosis(src: Region, problem: Problem, offset: u64) -> Option<crate::diagnose::Guess> {
    let mut head = vec![0u8; DIAGNOSIS_SAMPLE];
    let n = src.read(0, &mut head).ok()?;
    head.truncate(n);
    let mut sample = vec![0u8; DIAGNOSIS_SAMPLE];
    let n = src.read(offset, &mut sample).ok()?;
    sample.truncate(n);
    Some(crate::diagnose::guess(&head, problem, &sample))
}

/// Bytes looked at for [`diagnosis`], at the start and at the error.
const DIAGNOSIS_SAMPLE: usize = 64 << 10;

/// Whether `cutf8 migrate` (without `--include-scripts`) leaves a file
/// that begins with `head` raw on purpose as a script: no magic number,
/// no NUL in the first `BINARY_WINDOW` bytes (binary is another
/// reason), and a `#!` line `precheck` takes for a script. `cutf8 check`
/// asks this, so that it says of such a file what migrate did.
pub fn leaves_script_raw(head: &[u8]) -> bool {
    !head.is_empty()
        && !has_magic(head)
        && memchr::memchr(0, &head[..head.len().min(BINARY_WINDOW)]).is_none()
        && crate::view::sniff::is_script(head)
}

/// The strict coder, to Corrected UTF-8 (`to_disk`) or back; `magic`: the
/// stream starts at the start of a file, and so does its magic number
/// (written, or required and dropped).
fn strict(to_disk: bool, magic: bool) -> Coder {
    if to_disk {
        let m = if magic {
            EncodeMagic::Write
        } else {
            EncodeMagic::Off
        };
        Coder::encoder(false, m)
    } else {
        let m = if magic {
            DecodeMagic::Expect
        } else {
            DecodeMagic::Off
        };
        Coder::decoder(false, m)
    }
}

/// Push `input` (which ends at region offset `end`) through `codec` into
/// `sink`. `Err(m)` when a unit is malformed: the bad unit ends at region
/// offset `end - input.len() + consumed`, which is returned alongside.
fn pump(
    codec: &mut Coder,
    input: &[u8],
    last: bool,
    out: &mut [u8],
    sink: &mut dyn Sink,
) -> io::Result<Result<(), (Malformed, usize)>> {
    let mut i = 0;
    loop {
        let (status, r, w) = codec.convert(&input[i..], out, last);
        sink.put(&out[..w])?;
        i += r;
        match status {
            Status::InputEmpty => return Ok(Ok(())),
            Status::OutputFull => {}
            Status::Malformed(m) => return Ok(Err((m, i))),
        }
    }
}

/// Convert the region into `sink` (magic number handled), failing on the
/// first unit with no faithful form in the target. Returns the number of
/// bytes written. Call [`precheck`] first.
pub fn convert(
    dir: Direction,
    src: Region,
    sink: &mut dyn Sink,
    bufs: &mut Buffers,
) -> Result<u64, Stop> {
    let Buffers { inp, out, .. } = bufs;
    let mut written = Count(0);
    let mut both = Tee(sink, &mut written);
    let mut codec = strict(dir == Direction::Encode, true);
    // Lines count in the text, after the magic number of a corrected file.
    let text_start = match dir {
        Direction::Encode => 0,
        Direction::Decode => MAGIC.len() as u64,
    };
    let mut at = 0u64;
    loop {
        let n = src.read(at, inp)?;
        let last = n < inp.len();
        let chunk = &inp[..n];
        // U+0000 is text to the codec but makes the file not a text file.
        let nul = match dir {
            Direction::Encode => memchr::memchr(0, chunk),
            Direction::Decode => None,
        };
        let feed = nul.map_or(chunk, |z| &chunk[..=z]);
        let last_feed = last && nul.is_none();
        if let Err((m, used)) = pump(&mut codec, feed, last_feed, out, &mut both)? {
            let end = at + used as u64;
            let pos = position(src, text_start, end - m.len as u64)?;
            let mut why = reason(dir, m.problem, pos);
            if let Reason::InvalidUtf8(problem, pos, guess) = &mut why {
                *guess = diagnosis(src, *problem, pos.offset);
            }
            return Err(Stop::Skip(why));
        }
        if let Some(z) = nul {
            let pos = position(src, text_start, at + z as u64)?;
            return Err(Stop::Skip(Reason::Nul(pos)));
        }
        at += n as u64;
        if last {
            return Ok(written.0);
        }
    }
}

struct Tee<'a>(&'a mut dyn Sink, &'a mut Count);

impl Sink for Tee<'_> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.put(bytes)?;
        self.1.put(bytes)
    }
}

/// Check that `converted` converts back, strictly, to exactly `original`:
/// the proof a file may be replaced. Errors say what differs.
pub fn verify(
    dir: Direction,
    original: Region,
    converted: Region,
    bufs: &mut Buffers,
) -> Result<(), String> {
    let io_err = |e: io::Error| format!("verification: cannot read back: {e}");
    let Buffers { inp, out, cmp } = bufs;
    // Going back: the inverse codec, from the converted side's text start,
    // compared with the original side's text.
    // The text of both: the converted file decoded from its magic number
    // on, or encoded without one and compared with the original's text
    // after its magic number (a corrected file of the magic number alone
    // holds the empty text).
    let (mut codec, mut conv_at, mut orig_at) = match dir {
        Direction::Encode => (strict(false, true), 0, 0u64),
        Direction::Decode => (strict(true, false), 0, MAGIC.len() as u64),
    };
    loop {
        let n = converted.read(conv_at, inp).map_err(io_err)?;
        let last = n < inp.len();
        let mut i = 0;
        loop {
            let (status, r, w) = codec.convert(&inp[i..n], out, last);
            i += r;
            let got = original.read(orig_at, &mut cmp[..w]).map_err(io_err)?;
            if got != w || out[..w] != cmp[..w] {
                return Err(format!(
                    "verification: converting back differs from the original near byte {orig_at}"
                ));
            }
            orig_at += w as u64;
            match status {
                Status::InputEmpty => break,
                Status::OutputFull => {}
                Status::Malformed(m) if m.problem == Problem::MissingMagic => {
                    return Err("verification: converted file lacks the magic number".into());
                }
                Status::Malformed(m) => {
                    return Err(format!(
                        "verification: converted file does not convert back: {}",
                        m.problem
                    ))
                }
            }
        }
        conv_at += n as u64;
        if last {
            break;
        }
    }
    let mut probe = [0u8; 1];
    if original.read(orig_at, &mut probe).map_err(io_err)? != 0 {
        return Err(format!(
            "verification: converting back gives only the first {orig_at} bytes of the original"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn to_cutf8(bytes: &[u8]) -> Result<Vec<u8>, Reason> {
        let f = file(bytes);
        let mut bufs = Buffers::default();
        let src = Region::whole(&f);
        let skip = |s: Stop| match s {
            Stop::Skip(r) => r,
            Stop::Io(e) => panic!("{e}"),
        };
        precheck(Direction::Encode, false, src, &mut bufs).map_err(skip)?;
        let out = tempfile::tempfile().unwrap();
        let n = convert(
            Direction::Encode,
            src,
            &mut At { file: &out, pos: 0 },
            &mut bufs,
        )
        .map_err(skip)?;
        let mut v = vec![0; n as usize];
        out.read_exact_at(&mut v, 0).unwrap();
        verify(Direction::Encode, src, Region::whole(&out), &mut bufs).unwrap();
        Ok(v)
    }

    #[test]
    fn converts_with_magic_and_reports_positions() {
        let v = to_cutf8("aÏ\n".as_bytes()).unwrap();
        assert_eq!(&v[..8], &MAGIC);
        assert_eq!(&v[8..], &[b'a', 0xC0, 0xAF, b'\n']);
        assert_eq!(to_cutf8(b""), Err(Reason::Empty));
        assert_eq!(to_cutf8(b"ab\0c"), Err(Reason::Binary));
        assert_eq!(to_cutf8(b"#!/bin/sh\necho \xC3\xA9\n"), Err(Reason::Script));
        assert!(to_cutf8(b"#![no_std]\n// \xC3\xA9\n").is_ok());
        let p = |line, column, offset| Position {
            line,
            column,
            offset,
        };
        match to_cutf8("x\nyé\u{85}".as_bytes()) {
            Err(Reason::C1Control(0x85, pos)) => assert_eq!(pos, p(2, 3, 5)),
            other => panic!("{other:?}"),
        }
        match to_cutf8(b"ab\ncd\xC0\xAF") {
            Err(Reason::InvalidUtf8(_, pos, _)) => assert_eq!(pos, p(2, 3, 5)),
            other => panic!("{other:?}"),
        }
        let mut late_nul = vec![b'a'; BINARY_WINDOW + 3];
        late_nul[BINARY_WINDOW + 1] = 0;
        match to_cutf8(&late_nul) {
            Err(Reason::Nul(pos)) => {
                assert_eq!(
                    pos,
                    p(1, BINARY_WINDOW as u64 + 2, BINARY_WINDOW as u64 + 1)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn units_cut_by_chunk_edges_convert() {
        // Three-byte characters straddle every chunk edge.
        let text: String = "€".repeat(CHUNK);
        let v = to_cutf8(text.as_bytes()).unwrap();
        assert_eq!(cutf8::decode_strict(&v[8..]).unwrap(), text.as_bytes());
        // A truncated sequence at the very end is found at its offset.
        let mut bad = text.into_bytes();
        bad.pop();
        let len = bad.len() as u64;
        match to_cutf8(&bad) {
            Err(Reason::InvalidUtf8(_, pos, _)) => assert_eq!(pos.offset, len - 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn verify_catches_a_difference() {
        let orig = file("héllo\n".as_bytes());
        let mut wrong = MAGIC.to_vec();
        wrong.extend_from_slice(&cutf8::encode_strict("hallo\n".as_bytes()).unwrap());
        let conv = file(&wrong);
        let mut bufs = Buffers::default();
        let r = verify(
            Direction::Encode,
            Region::whole(&orig),
            Region::whole(&conv),
            &mut bufs,
        );
        assert!(r.is_err());
        let short = file(&wrong[..10]);
        assert!(verify(
            Direction::Encode,
            Region::whole(&orig),
            Region::whole(&short),
            &mut bufs
        )
        .is_err());
    }
}
