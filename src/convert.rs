//! `cutf8 encode` and `cutf8 decode`: stream files (or stdin) through the
//! codec into one output (stdout, or a file replaced atomically).
//!
//! This module owns everything between a path and the codec: reading in
//! fixed-size chunks (constant memory, whatever the input size), the magic
//! number (encode writes it once at the start of the output unless told not
//! to; decode drops it from each input that begins with it), and locating a
//! malformed unit as `file:line:column` plus its byte offset and bytes.
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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cutf8::{max_disk_len, max_view_len, Decoder, Encoder, Malformed, Problem, Status};
use cutf8::{MAGIC, MIN_DST};

/// Default size of the input buffer (the output buffer is sized from it).
pub const DEFAULT_BUFFER_SIZE: usize = 64 * 1024;

/// Which way to convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// UTF-8 → Corrected UTF-8 (W).
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
    /// Encode: begin the output with [`MAGIC`]. Decode: require each input
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
            Input::Path(p) => p.display().to_string(),
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
            let mut out = AtomicFile::create(path)
                .map_err(|e| Fatal::Output(format!("{}: {}", path.display(), io_message(&e))))?;
            let summary = convert_all(opts, inputs, &mut out.file, diag)
                .map_err(|e| write_fatal(e, Some(path)))?;
            if summary == Summary::default() {
                out.commit().map_err(|e| {
                    Fatal::Output(format!("{}: {}", path.display(), io_message(&e)))
                })?;
            } else {
                diag(&format!(
                    "{}: not written, because not every input converted",
                    path.display()
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
    let name = path.map_or("<stdout>".to_string(), |p| p.display().to_string());
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
    let mut out = Counting { inner: out, n: 0 };
    // The magic number goes out once an input has opened, so that
    // `encode nosuch > out` leaves `out` empty, as iconv does.
    let mut magic_due = opts.direction == Direction::Encode && opts.magic;
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
        if std::mem::take(&mut magic_due) {
            out.write_all(&MAGIC)?;
        }
        let at_start = out.n == 0;
        match convert_one(opts, &mut *reader, &mut out, at_start, &mut buffers) {
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
                diag(&format!("{name}:{}", at.message(opts)));
                summary.malformed += 1;
            }
            Err(FileError::NoMagic) => {
                diag(&format!(
                    "{name}:1:1: input does not begin with the Corrected UTF-8 magic number \
                     (byte offset 0), so it is most likely plain UTF-8 already; if it is \
                     Corrected UTF-8 without the magic number, give --no-magic"
                ));
                summary.malformed += 1;
            }
            Err(FileError::MagicInside(at)) => {
                diag(&format!(
                    "{name}:{}:{}: a second Corrected UTF-8 magic number (byte offset {}): \
                     files were concatenated; decode each file on its own \
                     (--lossless reads it as text, as the mount does)",
                    at.line, at.column, at.offset
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
    MagicInside(Position),
    /// Encode with `--no-magic`, at the start of the output: the text
    /// begins with V(MAGIC), so the output would begin with the magic number
    /// and decode would drop it.
    EncodesToMagic,
}

/// Either codec direction behind one `convert`.
pub(crate) enum Converter {
    Decode(Decoder),
    Encode(Encoder),
}

impl Converter {
    fn new(opts: &Options) -> Self {
        match (opts.direction, opts.lossless) {
            (Direction::Decode, false) => Converter::Decode(Decoder::strict()),
            (Direction::Decode, true) => Converter::Decode(Decoder::lossless()),
            (Direction::Encode, false) => Converter::Encode(Encoder::strict()),
            (Direction::Encode, true) => Converter::Encode(Encoder::lossless()),
        }
    }

    fn exempt_units(&self) -> u64 {
        match self {
            Converter::Decode(d) => d.exempt_units(),
            Converter::Encode(_) => 0,
        }
    }

    pub(crate) fn convert(
        &mut self,
        src: &[u8],
        dst: &mut [u8],
        last: bool,
    ) -> (Status, usize, usize) {
        match self {
            Converter::Decode(d) => d.convert(src, dst, last),
            Converter::Encode(e) => e.convert(src, dst, last),
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

/// The view of [`MAGIC`]: the text whose encoding is the magic number.
const VIEW_MAGIC: [u8; 9] = [0xF0, 0x90, 0xB9, 0xBD, 0xEE, 0xB5, 0x8E, 0x00, 0x0A];

/// Convert one input into `out`; `at_start` says nothing has been written
/// to `out` yet. Returns how many reserved units W would not give back
/// unchanged (lossless decode only; SPEC §2, invariant 1).
fn convert_one(
    opts: &Options,
    reader: &mut dyn Read,
    out: &mut dyn Write,
    at_start: bool,
    bufs: &mut Buffers,
) -> Result<u64, FileError> {
    let mut conv = Converter::new(opts);
    let mut pos = Tracker::default();
    let mut prefix = [0u8; VIEW_MAGIC.len()];
    let n = read_prefix(reader, &mut prefix, bufs.input.len()).map_err(FileError::Read)?;
    let mut eof = n < prefix.len();
    let mut first = &prefix[..n];
    if first.starts_with(&MAGIC) {
        match opts.direction {
            Direction::Decode => {
                pos.skip_magic();
                first = &first[MAGIC.len()..];
            }
            Direction::Encode => return Err(FileError::AlreadyEncoded),
        }
    } else if opts.direction == Direction::Decode && opts.magic && n > 0 {
        return Err(FileError::NoMagic);
    } else if opts.direction == Direction::Encode && !opts.magic && at_start && first == VIEW_MAGIC
    {
        return Err(FileError::EncodesToMagic);
    }
    // Strict decode looks for a second magic number; elsewhere the scan
    // is skipped (lossless carries it through as text, as the mount does).
    let mut scan = (opts.direction == Direction::Decode && !opts.lossless).then(MagicScan::default);
    let mut step = |chunk: &[u8], eof: bool, pos: &mut Tracker, out: &mut dyn Write| match &mut scan
    {
        Some(s) => s.feed(&mut conv, chunk, eof, out, &mut bufs.output, pos),
        None => feed(&mut conv, chunk, eof, out, &mut bufs.output, pos),
    };
    step(first, eof, &mut pos, out)?;
    while !eof {
        let n = read_chunk(reader, &mut bufs.input).map_err(FileError::Read)?;
        eof = n == 0;
        step(&bufs.input[..n], eof, &mut pos, out)?;
    }
    Ok(conv.exempt_units())
}

/// Where a second magic number starts.
#[derive(Debug, Clone, Copy)]
struct Position {
    line: u64,
    column: u64,
    offset: u64,
}

/// Finds [`MAGIC`] inside a stream fed in chunks: the bytes of a chunk's
/// end that could begin it are held back (`carry`) until the next chunk
/// says. [`MAGIC`] holds its first byte once, so a match cannot start
/// inside a partial match.
#[derive(Default)]
struct MagicScan {
    carry: Vec<u8>,
}

impl MagicScan {
    fn feed(
        &mut self,
        conv: &mut Converter,
        src: &[u8],
        last: bool,
        out: &mut dyn Write,
        dst: &mut [u8],
        pos: &mut Tracker,
    ) -> Result<(), FileError> {
        let mut src = src;
        if !self.carry.is_empty() {
            let need = MAGIC.len() - self.carry.len();
            let k = need.min(src.len());
            let rest = &MAGIC[self.carry.len()..self.carry.len() + k];
            if src[..k] == *rest {
                if k == need {
                    // Everything before the carry went through `feed`.
                    feed(conv, &[], true, out, dst, pos)?;
                    return Err(FileError::MagicInside(pos.position()));
                }
                if !last {
                    self.carry.extend_from_slice(src);
                    return Ok(());
                }
            }
            let carry = std::mem::take(&mut self.carry);
            feed(conv, &carry, false, out, dst, pos)?;
        }
        if let Some(k) = memchr::memmem::find(src, &MAGIC) {
            feed(conv, &src[..k], true, out, dst, pos)?;
            return Err(FileError::MagicInside(pos.position()));
        }
        if !last {
            let tail = src.len().saturating_sub(MAGIC.len() - 1);
            if let Some(k) = memchr::memrchr(MAGIC[0], &src[tail..]).map(|k| tail + k) {
                if MAGIC.starts_with(&src[k..]) {
                    self.carry.extend_from_slice(&src[k..]);
                    src = &src[..k];
                }
            }
        }
        feed(conv, src, last, out, dst, pos)
    }
}

/// Push one chunk through the converter, writing everything it produces.
fn feed(
    conv: &mut Converter,
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
        match status {
            Status::InputEmpty => {
                pos.advance(consumed);
                return Ok(());
            }
            Status::OutputFull => pos.advance(consumed),
            Status::Malformed(m) => return Err(FileError::Malformed(pos.locate(consumed, m))),
        }
    }
}

/// Where the converter is in its input: byte offset, line, characters since
/// the last U+000A, and the last few bytes (a bad unit may have begun in an
/// earlier chunk).
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    offset: u64,
    line: u64,
    chars: u64,
    tail: [u8; TAIL],
    tail_len: usize,
}

/// Bytes of history kept: longer than any unit but a reserved one.
const TAIL: usize = 8;

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            offset: 0,
            line: 1,
            chars: 0,
            tail: [0; TAIL],
            tail_len: 0,
        }
    }
}

impl Tracker {
    fn position(&self) -> Position {
        Position {
            line: self.line,
            column: self.chars + 1,
            offset: self.offset,
        }
    }

    pub(crate) fn skip_magic(&mut self) {
        self.offset += MAGIC.len() as u64;
    }

    /// Count `bytes` (consumed input) into the position.
    pub(crate) fn advance(&mut self, bytes: &[u8]) {
        self.offset += bytes.len() as u64;
        match bytes.iter().rposition(|&b| b == b'\n') {
            Some(k) => {
                self.line += count_newlines(&bytes[..=k]);
                self.chars = count_chars(&bytes[k + 1..]);
            }
            None => self.chars += count_chars(bytes),
        }
        self.remember(bytes);
    }

    #[cfg(test)]
    fn line(&self) -> u64 {
        self.line
    }

    #[cfg(test)]
    fn column(&self) -> u64 {
        self.chars + 1
    }

    fn remember(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL {
            self.tail.copy_from_slice(&bytes[bytes.len() - TAIL..]);
            self.tail_len = TAIL;
        } else {
            let keep = (TAIL - bytes.len()).min(self.tail_len);
            let mut t = [0u8; TAIL];
            t[..keep].copy_from_slice(&self.tail[self.tail_len - keep..self.tail_len]);
            t[keep..keep + bytes.len()].copy_from_slice(bytes);
            self.tail = t;
            self.tail_len = keep + bytes.len();
        }
    }

    /// The position of a malformed unit that ends at the end of `consumed`
    /// (input consumed by the call that reported it); advances over the
    /// input before the unit, not over the unit.
    pub(crate) fn locate(&mut self, consumed: &[u8], m: Malformed) -> Located {
        let before = consumed.len().saturating_sub(m.len);
        self.advance(&consumed[..before]);
        let here = &consumed[before..];
        let (offset, chars, bytes) = if m.len <= consumed.len() {
            (self.offset, self.chars, Some(here.to_vec()))
        } else {
            // The unit began in an earlier chunk: its lead byte (the only
            // non-continuation byte in it) is already counted.
            let earlier = m.len - consumed.len();
            let bytes = (earlier <= self.tail_len).then(|| {
                let mut v = self.tail[self.tail_len - earlier..self.tail_len].to_vec();
                v.extend_from_slice(here);
                v
            });
            (
                self.offset - earlier as u64,
                self.chars.saturating_sub(1),
                bytes,
            )
        };
        self.offset += here.len() as u64;
        self.remember(here);
        Located {
            line: self.line,
            column: chars + 1,
            offset,
            malformed: m,
            bytes,
        }
    }
}

fn count_newlines(b: &[u8]) -> u64 {
    const NL: u64 = 0x0A0A_0A0A_0A0A_0A0A;
    count_bytes(
        b,
        |w| {
            // High bit of each byte set iff the byte of `w ^ NL` is zero.
            let x = w ^ NL;
            let nonzero = ((x & !HIGH) + !HIGH) | x;
            (!nonzero & HIGH) >> 7
        },
        |c| c == b'\n',
    )
}

/// Characters in well-formed UTF-8 or Corrected UTF-8: the bytes that are
/// not continuation bytes (10xxxxxx).
pub(crate) fn count_chars(b: &[u8]) -> u64 {
    count_bytes(
        b,
        // Bit 7 set and bit 6 (moved up by the shift) clear: continuation.
        |w| (!(w & !(w << 1)) & HIGH) >> 7,
        |c| c & 0xC0 != 0x80,
    )
}

const HIGH: u64 = 0x8080_8080_8080_8080;

/// How many bytes of `b` satisfy `pred`, eight at a time: `lanes(w)` gives
/// 1 in each byte of the word `w` that does, and up to 255 such words are
/// summed per byte before a horizontal add. About 6 GB/s here, where
/// `filter().count()` was 2 and took a third of `cutf8 decode`'s time.
#[inline(always)]
fn count_bytes(b: &[u8], lanes: impl Fn(u64) -> u64, pred: impl Fn(u8) -> bool) -> u64 {
    const L16: u64 = 0x00FF_00FF_00FF_00FF;
    let fold = |acc: u64| {
        let pairs = (acc & L16) + ((acc >> 8) & L16);
        pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48
    };
    let mut words = b.chunks_exact(8);
    let (mut total, mut acc, mut n) = (0u64, 0u64, 0u32);
    for w in &mut words {
        acc += lanes(u64::from_le_bytes(w.try_into().expect("chunks_exact(8)")));
        n += 1;
        if n == 255 {
            total += fold(acc);
            acc = 0;
            n = 0;
        }
    }
    total += fold(acc);
    total + words.remainder().iter().filter(|&&c| pred(c)).count() as u64
}

/// A malformed unit and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub line: u64,
    pub column: u64,
    /// Byte offset of its first byte in the input (magic included).
    pub offset: u64,
    pub malformed: Malformed,
    /// Its bytes, when known (always, except for reserved units longer
    /// than [`TAIL`] that began in an earlier chunk).
    pub bytes: Option<Vec<u8>>,
}

impl Located {
    /// `line:col: what (byte offset N)[; hint]`, to follow the file name.
    fn message(&self, opts: &Options) -> String {
        let mut s = format!(
            "{}:{}: {} (byte offset {})",
            self.line,
            self.column,
            self.describe(opts.direction),
            self.offset
        );
        if !opts.lossless && !self.malformed.problem.is_unstorable() {
            s.push_str("; --lossless carries it through as the mount does");
        }
        s
    }

    /// What was found, with its bytes in hex.
    pub(crate) fn describe(&self, direction: Direction) -> String {
        let len = self.malformed.len;
        let hex = match &self.bytes {
            Some(b) if b.len() <= TAIL => hex(b),
            _ => String::new(),
        };
        match self.malformed.problem {
            Problem::StrayContinuation(b) => format!("stray continuation byte {b:02X}"),
            Problem::Truncated { expected } => format!("truncated {expected}-byte sequence {hex}"),
            Problem::Reserved(lead) if direction == Direction::Encode => {
                format!("byte {lead:02X}, which never appears in UTF-8")
            }
            Problem::Reserved(lead) => {
                if hex.is_empty() {
                    format!(
                        "reserved unit {lead:02X} plus {} continuation bytes has no UTF-8 form",
                        len - 1
                    )
                } else {
                    format!("reserved unit {hex} has no UTF-8 form")
                }
            }
            Problem::BeyondUnicode(cp) if direction == Direction::Encode => {
                format!("extended form {hex} of U+{cp:04X} is not UTF-8 (above U+10FFFF)")
            }
            Problem::BeyondUnicode(cp) => {
                format!("code point U+{cp:04X} ({hex}) is above U+10FFFF, beyond UTF-8")
            }
            Problem::Overlong(cp) => {
                format!("overlong form {hex} of U+{cp:04X} cannot be encoded")
            }
            Problem::Surrogate(cp) => {
                format!("encoded surrogate U+{cp:04X} ({hex}) cannot be encoded")
            }
            Problem::C1Control(cp) => format!("C1 control U+{cp:04X} ({hex}) cannot be encoded"),
        }
    }
}

/// `C0 AF`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (k, b) in bytes.iter().enumerate() {
        if k > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{b:02X}"));
    }
    s
}

/// A file written under a temporary name in the target's directory and
/// renamed over the target only by [`AtomicFile::commit`]; dropped
/// uncommitted, the temporary file is removed and the target is untouched.
struct AtomicFile {
    file: File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl AtomicFile {
    fn create(target: &Path) -> io::Result<Self> {
        // Write through a symlink to the file it names, as `>` would.
        let target = fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
        let old = fs::metadata(&target).ok();
        if old.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(io::Error::other("is a directory"));
        }
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = target
            .file_name()
            .ok_or_else(|| io::Error::other("not a file name"))?
            .to_string_lossy()
            .into_owned();
        let mut attempt = 0u32;
        loop {
            let tmp = dir.join(format!(
                ".{base}.cutf8-{}-{attempt}.tmp",
                std::process::id()
            ));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => {
                    let f = AtomicFile {
                        file,
                        tmp,
                        target,
                        committed: false,
                    };
                    if let Some(m) = old {
                        f.file.set_permissions(m.permissions())?;
                    }
                    return Ok(f);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn commit(mut self) -> io::Result<()> {
        self.file.sync_all()?;
        fs::rename(&self.tmp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
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
            assert_eq!((at.line, at.column, at.offset), (2, 3, 4), "chunk {chunk}");
            assert_eq!(at.bytes.as_deref(), Some(&input[4..]), "chunk {chunk}");
        }
    }

    #[test]
    fn long_reserved_unit_is_described_without_its_bytes() {
        let mut input = vec![b'a', 0xFE];
        input.extend(std::iter::repeat_n(0x80, 20));
        let at = located(&input, 3, Direction::Decode);
        assert_eq!((at.column, at.offset, at.malformed.len), (2, 1, 21));
        assert_eq!(
            at.describe(Direction::Decode),
            "reserved unit FE plus 20 continuation bytes has no UTF-8 form"
        );
    }

    #[test]
    fn view_magic_is_the_view_of_magic() {
        let v = cutf8::decode_to_vec(&MAGIC, true).expect("MAGIC decodes");
        assert_eq!(v, VIEW_MAGIC);
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
