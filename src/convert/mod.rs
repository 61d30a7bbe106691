//! `cutf8 encode` and `cutf8 decode`: stream files (or stdin) through the
//! codec into one output (stdout, or a file replaced atomically).
//!
//! This module owns everything between a path and the codec: reading in
//! fixed-size chunks (constant memory, whatever the input size), which
//! magic number handling the codec applies (encode writes the magic number
//! once at the start of the output unless told not to, and nothing for an
//! empty text; decode requires it at the start of each input, or with
//! `--no-magic` drops it if there, and strict conversion refuses one
//! inside the text), and locating a malformed unit as `file:line:column`
//! plus its byte offset and bytes.
//!
//! Positions: lines and columns count from 1 in the *text* (the magic number
//! is not part of the text, so the line after it is line 1); a column counts
//! characters, i.e. lead bytes since the last U+000A (exact for the
//! well-formed prefix that precedes the first error in strict mode; in
//! `--lossless` mode a unit passed through unchanged counts by its lead
//! byte). Byte offsets count from 0 in the input as it is, magic included.
//!
//! Each input stops at its first malformed unit (nothing is dropped or
//! replaced): what came before it has been written, the rest of that input is
//! not, and conversion goes on with the next input. With `-o`, the output is
//! only put in place when every input converted; otherwise an existing file
//! of that name is left as it was.
//!
//! It knows nothing of argument parsing (the `cutf8` binary builds
//! [`Options`]) and prints nothing itself: diagnostics go to a callback.
//! `check` reuses `Located`'s machinery to describe malformed units.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cutf8::{has_magic, max_disk_len, max_view_len, Problem, Status};
use cutf8::{DecodeMagic, EncodeMagic, MAGIC_TEXT, MIN_DST};

use crate::codec::Coder;
use crate::shown::display_path;

mod atomic;
mod position;

use atomic::AtomicFile;
#[cfg(test)]
use position::count_chars;
pub use position::Position;
#[cfg(test)]
use position::{count_newlines, hex};
pub(crate) use position::{Located, Tracker};

/// Default size of the input buffer (the output buffer is sized from it).
pub const DEFAULT_BUFFER_SIZE: usize = 64 * 1024;

/// Which way to convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// UTF-8 → Corrected UTF-8 (W).
    #[default]
    Encode,
    /// Corrected UTF-8 → UTF-8 (V).
    Decode,
}

/// What `cutf8 encode|decode` was asked to do, already validated.
#[derive(Debug, Clone)]
pub struct Options {
    pub direction: Direction,
    /// Apply V/W exactly as the mount does (default: false, strict).
    pub lossless: bool,
    /// Encode: begin the output with [`cutf8::MAGIC`]. Decode: require each input
    /// to begin with it (an input without it is refused: it is most likely
    /// plain UTF-8 already), and, in strict mode, refuse a magic number
    /// anywhere after the start (two files concatenated). Default: true;
    /// `--no-magic` clears it.
    pub magic: bool,
    /// Input chunk size in bytes (default [`DEFAULT_BUFFER_SIZE`]; tests use
    /// 1 and 7 to put units across chunk edges). Values below 1 act as 1.
    pub buffer_size: usize,
}

impl Options {
    /// Strict conversion with magic handling and the default buffer.
    pub fn new(direction: Direction) -> Self {
        Options {
            direction,
            lossless: false,
            magic: true,
            buffer_size: DEFAULT_BUFFER_SIZE,
        }
    }
}

/// One input: a path, or stdin (named `-` on the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    Path(PathBuf),
}

impl Input {
    /// `-` is stdin, anything else a path.
    pub fn from_arg(arg: &Path) -> Self {
        if arg == Path::new("-") {
            Input::Stdin
        } else {
            Input::Path(arg.to_path_buf())
        }
    }

    /// The name used in diagnostics.
    pub fn name(&self) -> String {
        match self {
            Input::Stdin => "<stdin>".to_string(),
            Input::Path(p) => display_path(p),
        }
    }

    pub(crate) fn open(&self) -> io::Result<Box<dyn Read>> {
        match self {
            Input::Stdin => Ok(Box::new(io::stdin().lock())),
            Input::Path(p) => Ok(Box::new(File::open(p)?)),
        }
    }
}

/// How many inputs failed, and why. The binary turns this into an exit
/// status: conversion errors → 1, unreadable inputs → 2.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Inputs that stopped at a malformed unit.
    pub malformed: usize,
    /// Inputs that could not be read.
    pub unreadable: usize,
}

/// Why a whole run stopped early.
#[derive(Debug)]
pub enum Fatal {
    /// stdout was closed by its reader: stop quietly.
    BrokenPipe,
    /// The output could not be created or written.
    Output(String),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::BrokenPipe => f.write_str("broken pipe"),
            Fatal::Output(s) => f.write_str(s),
        }
    }
}

/// `io::Error` as a user reads it: without Rust's "(os error N)" suffix.
pub(crate) fn io_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(k) => s[..k].to_string(),
        None => s,
    }
}

/// Convert `inputs` (stdin when empty) in order into `output` (stdout when
/// `None`). Each diagnostic line goes to `diag`, without the program-name
/// prefix. Per-input problems are counted in the [`Summary`] and the run
/// goes on; an output that cannot be written ends it with [`Fatal`].
pub fn run(
    opts: &Options,
    inputs: &[Input],
    output: Option<&Path>,
    diag: &mut dyn FnMut(&str),
) -> Result<Summary, Fatal> {
    let stdin_only = [Input::Stdin];
    let inputs = if inputs.is_empty() {
        &stdin_only[..]
    } else {
        inputs
    };
    match output {
        None => {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            let summary =
                convert_all(opts, inputs, &mut out, diag).map_err(|e| write_fatal(e, None))?;
            out.flush().map_err(|e| write_fatal(e, None))?;
            Ok(summary)
        }
        Some(path) => {
            let mut out = AtomicFile::create(path).map_err(|e| {
                Fatal::Output(format!("{}: {}", display_path(path), io_message(&e)))
            })?;
            let summary = convert_all(opts, inputs, &mut out.file, diag)
                .map_err(|e| write_fatal(e, Some(path)))?;
            if summary == Summary::default() {
                out.commit().map_err(|e| {
                    Fatal::Output(format!("{}: {}", display_path(path), io_message(&e)))
                })?;
            } else {
                diag(&format!(
                    "{}: not written, because not every input converted",
                    display_path(path)
                ));
            }
            Ok(summary)
        }
    }
}

fn write_fatal(e: io::Error, path: Option<&Path>) -> Fatal {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return Fatal::BrokenPipe;
    }
    let name = path.map_or("<stdout>".to_string(), display_path);
    Fatal::Output(format!("{name}: {}", io_message(&e)))
}

/// The shared loop: magic, then each input in turn. Only write errors
/// escape as `Err`.
fn convert_all(
    opts: &Options,
    inputs: &[Input],
    out: &mut dyn Write,
    diag: &mut dyn FnMut(&str),
) -> io::Result<Summary> {
    // The encoder writes the magic number before the first text, so that
    // `encode nosuch > out` leaves `out` empty, as iconv does, and so does
    // an empty text.
    let mut out = Counting { inner: out, n: 0 };
    let mut buffers = Buffers::new(opts);
    let mut summary = Summary::default();
    for input in inputs {
        let name = input.name();
        let mut reader = match input.open() {
            Ok(r) => r,
            Err(e) => {
                diag(&format!("{name}: {}", io_message(&e)));
                summary.unreadable += 1;
                continue;
            }
        };
        let at_start = out.n == 0;
        let mut reader = Recorder::new(&mut *reader);
        let result = convert_one(opts, &mut reader, &mut out, at_start, &mut buffers);
        if result.is_ok() && opts.direction == Direction::Encode {
            let file = match input {
                Input::Path(p) => Some(p.to_string_lossy()),
                Input::Stdin => None,
            };
            if let Some(bom) = crate::diagnose::utf8_bom(&reader.head, file.as_deref()) {
                diag(&format!("{name}: note: {bom}"));
            }
        }
        match result {
            Ok(0) => {}
            Ok(exempt) => diag(&format!(
                "{name}: warning: {exempt} reserved unit(s) of FE plus six continuation \
                 bytes read as an extended form: encode --lossless would not give them back \
                 unchanged (the mount serves such a file read-only)"
            )),
            Err(FileError::Write(e)) => return Err(e),
            Err(FileError::Read(e)) => {
                diag(&format!("{name}: {}", io_message(&e)));
                summary.unreadable += 1;
            }
            Err(FileError::Malformed(at)) => {
                let hint = hint(opts, input, &at, &mut reader);
                diag(&format!("{name}:{}{hint}", at.message(opts)));
                summary.malformed += 1;
            }
            Err(FileError::NoMagic) => {
                let file = match input {
                    Input::Path(p) => Some(p.to_string_lossy()),
                    Input::Stdin => None,
                };
                let why = match not_utf8(&mut reader, file.as_deref()) {
                    Some(what) => format!("; it is not UTF-8 either: {what}"),
                    None => ", so it is most likely plain UTF-8 already; if it is Corrected \
                             UTF-8 without the magic number, give --no-magic"
                        .to_string(),
                };
                diag(&format!(
                    "{name}:1:1: input does not begin with the Corrected UTF-8 magic number \
                     (byte offset 0){why}"
                ));
                summary.malformed += 1;
            }
            Err(FileError::MagicInside(at)) => {
                diag(&format!(
                    "{name}:{}:{}: a second Corrected UTF-8 magic number (byte offset {}): \
                     files were concatenated; decode each file on its own \
                     (--lossless reads it as text, as the mount does)",
                    at.pos.line, at.pos.column, at.pos.offset
                ));
                summary.malformed += 1;
            }
            Err(FileError::AlreadyEncoded) => {
                diag(&format!(
                    "{name}:1:1: input begins with the Corrected UTF-8 magic number \
                     (byte offset 0); it is already encoded (decode it first)"
                ));
                summary.malformed += 1;
            }
            Err(FileError::EncodesToMagic) => {
                diag(&format!(
                    "{name}:1:1: text begins with U+10E7D U+ED4E U+0000 U+000A (byte offset 0), \
                     which encodes to the magic number: without it the output would be read \
                     back without them (drop --no-magic)"
                ));
                summary.malformed += 1;
            }
        }
    }
    Ok(summary)
}

/// What to add to a strict conversion error. Encoding: a remedy that fits
/// what the input looks like (`crate::diagnose`), judged from its first bytes and
/// those after the error (read on from `reader`, at most [`SAMPLE`]
/// more). Decoding: `--lossless`, for what it can carry. Nothing when
/// `--lossless` was given or cannot help.
fn hint(opts: &Options, input: &Input, at: &Located, reader: &mut Recorder) -> String {
    let unstorable = at.malformed.problem.is_unstorable();
    if opts.lossless {
        return String::new();
    }
    if opts.direction == Direction::Decode {
        return if unstorable {
            String::new()
        } else {
            "; --lossless carries it through as the mount does".to_string()
        };
    }
    if at.malformed.problem == Problem::MagicText {
        // Text, not a sign of another charset (its U+0000 is no binary).
        return "; --lossless carries them through as the mount does".to_string();
    }
    let mut more = vec![0u8; SAMPLE];
    let n = read_prefix(reader.inner, &mut more, SAMPLE).unwrap_or(0);
    let mut sample = reader.head.clone();
    sample.extend_from_slice(at.bytes.as_deref().unwrap_or_default());
    sample.extend_from_slice(&more[..n]);
    let guess = crate::diagnose::guess(&reader.head, at.malformed.problem, &sample);
    if guess == crate::diagnose::Guess::MostlyUtf8 && unstorable {
        // Overlong forms and surrogates: --lossless cannot store them either.
        return String::new();
    }
    let name = match input {
        Input::Path(p) => Some(p.to_string_lossy()),
        Input::Stdin => None,
    };
    format!("; {}", crate::diagnose::suggestion(guess, name.as_deref()))
}

/// For `cutf8 decode` of an input without the magic number: what it
/// looks like when it is not UTF-8 either (`crate::diagnose`), with the
/// command that makes UTF-8 of it; None when it may be UTF-8.
fn not_utf8(reader: &mut Recorder, name: Option<&str>) -> Option<String> {
    let mut more = vec![0u8; SAMPLE];
    let n = read_prefix(reader.inner, &mut more, SAMPLE).unwrap_or(0);
    let mut head = reader.head.clone();
    head.extend_from_slice(&more[..n]);
    let at = match std::str::from_utf8(&head) {
        Err(e) if e.error_len().is_some() => e.valid_up_to(),
        _ if head.starts_with(&[0xFF, 0xFE]) || head.starts_with(&[0xFE, 0xFF]) => 0,
        _ => return None,
    };
    let problem = Problem::StrayContinuation(head[at]);
    let guess = crate::diagnose::guess(&head, problem, &head[at..]);
    (guess != crate::diagnose::Guess::MostlyUtf8)
        .then(|| crate::diagnose::suggestion_for(crate::diagnose::Fix::Decode, guess, name))
}

/// Bytes of an input looked at to suggest a remedy: its first ones (kept
/// as they are read) and as many after an error.
const SAMPLE: usize = 64 << 10;

/// A reader that keeps the first [`SAMPLE`] bytes read through it.
struct Recorder<'a> {
    inner: &'a mut dyn Read,
    head: Vec<u8>,
}

impl<'a> Recorder<'a> {
    fn new(inner: &'a mut dyn Read) -> Self {
        Recorder {
            inner,
            head: Vec::new(),
        }
    }
}

impl Read for Recorder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let keep = n.min(SAMPLE.saturating_sub(self.head.len()));
        self.head.extend_from_slice(&buf[..keep]);
        Ok(n)
    }
}

/// A writer that counts what went through it.
struct Counting<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The two fixed buffers every input reuses.
struct Buffers {
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Buffers {
    fn new(opts: &Options) -> Self {
        let n = opts.buffer_size.max(1);
        let out = match opts.direction {
            Direction::Decode => max_view_len(n),
            Direction::Encode => max_disk_len(n),
        };
        Buffers {
            input: vec![0; n],
            output: vec![0; out.max(MIN_DST)],
        }
    }
}

enum FileError {
    Read(io::Error),
    Write(io::Error),
    Malformed(Located),
    /// Encode: the input begins with the magic number.
    AlreadyEncoded,
    /// Decode without `--no-magic`: the input does not begin with it.
    NoMagic,
    /// Strict decode: the magic number again after the start.
    MagicInside(Located),
    /// Lossless encode with `--no-magic`, at the start of the output: the
    /// text begins with the magic number's characters, so the output would
    /// begin with the magic number and decode would drop it.
    EncodesToMagic,
}

/// The coder for one input; `write_magic`: this input's output begins the
/// output (encode writes the magic number if it holds text).
fn coder(opts: &Options, write_magic: bool) -> Coder {
    match opts.direction {
        Direction::Decode => {
            let magic = if opts.magic {
                DecodeMagic::Expect
            } else {
                DecodeMagic::Strip
            };
            Coder::decoder(opts.lossless, magic)
        }
        Direction::Encode => {
            let magic = if opts.magic && write_magic {
                EncodeMagic::Write
            } else {
                EncodeMagic::Off
            };
            Coder::encoder(opts.lossless, magic)
        }
    }
}

/// Read until `buf` is full or the input ends, at most `chunk` bytes per
/// read; returns how many bytes were read.
pub(crate) fn read_prefix(r: &mut dyn Read, buf: &mut [u8], chunk: usize) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let end = (n + chunk.max(1)).min(buf.len());
        match r.read(&mut buf[n..end]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One read, retried on EINTR.
pub(crate) fn read_chunk(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Convert one input into `out`; `at_start` says nothing has been written
/// to `out` yet. Returns how many reserved units W would not give back
/// unchanged (lossless decode only).
fn convert_one(
    opts: &Options,
    reader: &mut dyn Read,
    out: &mut dyn Write,
    at_start: bool,
    bufs: &mut Buffers,
) -> Result<u64, FileError> {
    let mut conv = coder(opts, at_start);
    let mut pos = Tracker::default();
    let mut prefix = [0u8; MAGIC_TEXT.len()];
    let n = read_prefix(reader, &mut prefix, bufs.input.len()).map_err(FileError::Read)?;
    let mut eof = n < prefix.len();
    let first = &prefix[..n];
    if opts.direction == Direction::Encode && opts.lossless {
        // Strict W refuses these (the codec); lossless W would carry them
        // through as text, into an output that reads back otherwise.
        if has_magic(first) {
            return Err(FileError::AlreadyEncoded);
        }
        if !opts.magic && at_start && first == MAGIC_TEXT {
            return Err(FileError::EncodesToMagic);
        }
    }
    feed(&mut conv, first, eof, out, &mut bufs.output, &mut pos)?;
    while !eof {
        let n = read_chunk(reader, &mut bufs.input).map_err(FileError::Read)?;
        eof = n == 0;
        feed(
            &mut conv,
            &bufs.input[..n],
            eof,
            out,
            &mut bufs.output,
            &mut pos,
        )?;
    }
    Ok(conv.exempt_units())
}

/// Push one chunk through the converter, writing everything it produces.
fn feed(
    conv: &mut Coder,
    src: &[u8],
    last: bool,
    out: &mut dyn Write,
    dst: &mut [u8],
    pos: &mut Tracker,
) -> Result<(), FileError> {
    let mut i = 0;
    loop {
        let (status, read, written) = conv.convert(&src[i..], dst, last);
        out.write_all(&dst[..written]).map_err(FileError::Write)?;
        let consumed = &src[i..i + read];
        i += read;
        if conv.found_magic() {
            // The magic number is not text: its line does not count.
            pos.magic_dropped();
        }
        match status {
            Status::InputEmpty => {
                pos.advance(consumed);
                return Ok(());
            }
            Status::OutputFull => pos.advance(consumed),
            Status::Malformed(m) => {
                let at = pos.locate(consumed, m);
                return Err(match m.problem {
                    Problem::MissingMagic => FileError::NoMagic,
                    Problem::MagicNumber if at.pos.offset == 0 && conv.encodes() => {
                        FileError::AlreadyEncoded
                    }
                    Problem::MagicNumber => FileError::MagicInside(at),
                    _ => FileError::Malformed(at),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn located(input: &[u8], chunk: usize, direction: Direction) -> Located {
        let mut opts = Options::new(direction);
        opts.buffer_size = chunk;
        // Inputs here are bare units: decode them as --no-magic does.
        opts.magic = direction == Direction::Encode;
        let mut bufs = Buffers::new(&opts);
        let mut out = Vec::new();
        match convert_one(&opts, &mut &input[..], &mut out, true, &mut bufs) {
            Err(FileError::Malformed(at)) => at,
            _ => panic!("no error in {input:02X?}"),
        }
    }

    #[test]
    fn tracker_counts_lines_and_characters() {
        let mut t = Tracker::default();
        t.advance("ab\nçd".as_bytes());
        assert_eq!((t.line(), t.column()), (2, 3));
        t.advance("é".as_bytes());
        assert_eq!((t.line(), t.column()), (2, 4));
    }

    #[test]
    fn unit_split_over_chunks_is_located_at_its_lead() {
        // "x\nab" then a truncated 3-byte disk sequence E4 B8 at the end.
        let input = b"x\nab\xE4\xB8";
        for chunk in 1..=input.len() + 1 {
            let at = located(input, chunk, Direction::Decode);
            assert_eq!(
                (at.pos.line, at.pos.column, at.pos.offset),
                (2, 3, 4),
                "chunk {chunk}"
            );
            assert_eq!(at.bytes.as_deref(), Some(&input[4..]), "chunk {chunk}");
        }
    }

    #[test]
    fn long_reserved_unit_is_described_without_its_bytes() {
        let mut input = vec![b'a', 0xFE];
        input.extend(std::iter::repeat_n(0x80, 20));
        let at = located(&input, 3, Direction::Decode);
        assert_eq!((at.pos.column, at.pos.offset, at.malformed.len), (2, 1, 21));
        assert_eq!(
            at.describe(Direction::Decode),
            "reserved unit FE plus 20 continuation bytes has no UTF-8 form"
        );
    }

    /// Decode `input` (the magic number required) in chunks of `chunk`
    /// bytes; the error.
    fn decode_error(input: &[u8], chunk: usize) -> FileError {
        let mut opts = Options::new(Direction::Decode);
        opts.buffer_size = chunk;
        let mut bufs = Buffers::new(&opts);
        match convert_one(&opts, &mut &input[..], &mut Vec::new(), true, &mut bufs) {
            Err(e) => e,
            Ok(_) => panic!("no error in {input:02X?}"),
        }
    }

    #[test]
    fn positions_count_from_the_text_after_a_dropped_magic_number() {
        let m = &cutf8::MAGIC[..];
        let stray = [m, b"x\n\x80"].concat();
        let inside = [m, "ab\nçd".as_bytes(), m, b"z"].concat();
        for chunk in 1..=inside.len() + 1 {
            match decode_error(&stray, chunk) {
                FileError::Malformed(at) => {
                    assert_eq!(
                        (at.pos.line, at.pos.column, at.pos.offset),
                        (2, 1, 10),
                        "chunk {chunk}"
                    )
                }
                _ => panic!("chunk {chunk}: not the stray byte"),
            }
            // The second magic number, however it is cut: its first byte.
            match decode_error(&inside, chunk) {
                FileError::MagicInside(at) => {
                    assert_eq!(
                        (at.pos.line, at.pos.column, at.pos.offset),
                        (2, 3, 14),
                        "chunk {chunk}"
                    )
                }
                _ => panic!("chunk {chunk}: not the second magic number"),
            }
            assert!(matches!(decode_error(b"plain", chunk), FileError::NoMagic));
        }
    }

    #[test]
    fn counting_matches_the_obvious_count() {
        let mut b: Vec<u8> = (0..20_000u32).map(|i| (i * 7919 % 256) as u8).collect();
        b.extend_from_slice(&[b'\n'; 3000]);
        b.extend_from_slice(&[0x80; 3000]);
        b.extend_from_slice(&[0x0A, 0x8A, 0x0B, 0x09, 0xC0, 0xBF, 0x40, 0x7F].repeat(99));
        for start in [0, 1, 7, 31, 33] {
            for end in [start, start + 40, 2047, 2048, 2049, 8160, b.len()] {
                let s = &b[start..end];
                let nl = s.iter().filter(|&&c| c == b'\n').count() as u64;
                let ch = s.iter().filter(|&&c| c & 0xC0 != 0x80).count() as u64;
                assert_eq!((count_newlines(s), count_chars(s)), (nl, ch));
            }
        }
    }

    #[test]
    fn hex_is_spaced_upper_case() {
        assert_eq!(hex(&[0xC0, 0xAF, 0x05]), "C0 AF 05");
        assert_eq!(hex(&[]), "");
    }
}
