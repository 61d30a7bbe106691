//! A reader that decodes and a writer that encodes, over
//! [`std::io::Read`] and [`std::io::Write`] (the `std` feature).
//!
//! A malformed unit is an [`io::Error`] of kind
//! [`InvalidData`](io::ErrorKind::InvalidData) whose inner error is the
//! [`ConvertError`], with the offset counted from the start of the input;
//! everything before it has been delivered first.
//!
//! ```
//! use std::io::{Read, Write};
//! use cutf8::io::{DecodeReader, EncodeWriter};
//! use cutf8::{DecodeMagic, Decoder, EncodeMagic, Encoder};
//!
//! let mut w = EncodeWriter::new(Vec::new(), Encoder::strict().with_magic(EncodeMagic::Write));
//! w.write_all("ελληνικά\n".as_bytes())?;
//! let file = w.finish()?;
//!
//! let mut r = DecodeReader::new(&file[..], Decoder::strict().with_magic(DecodeMagic::Expect));
//! let mut text = String::new();
//! r.read_to_string(&mut text)?;
//! assert_eq!(text, "ελληνικά\n");
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{self, Read, Write};

use crate::{max_disk_len, max_view_len, ConvertError, Decoder, Encoder, Malformed, Status};

/// Bytes read from the inner reader, or taken from the caller, per step.
const CHUNK: usize = 8 * 1024;

fn invalid(malformed: Malformed, consumed: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        ConvertError {
            malformed,
            offset: consumed.saturating_sub(malformed.len as u64),
        },
    )
}

/// Reads Corrected UTF-8 from an inner reader and yields what a
/// [`Decoder`] makes of it.
#[derive(Debug)]
pub struct DecodeReader<R> {
    inner: R,
    decoder: Decoder,
    input: Box<[u8]>,
    /// `input[start..end]` is read and not yet converted.
    start: usize,
    end: usize,
    eof: bool,
    output: Box<[u8]>,
    /// `output[out_start..out_end]` is converted and not yet delivered.
    out_start: usize,
    out_end: usize,
    /// Input bytes the decoder consumed.
    consumed: u64,
    /// The error to report once the output before it is delivered.
    failed: Option<(Malformed, u64)>,
    done: bool,
}

impl<R: Read> DecodeReader<R> {
    /// Decode what `inner` yields with `decoder` (its mode and magic
    /// number handling).
    pub fn new(inner: R, decoder: Decoder) -> Self {
        DecodeReader {
            inner,
            decoder,
            input: vec![0; CHUNK].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            output: vec![0; max_view_len(CHUNK)].into_boxed_slice(),
            out_start: 0,
            out_end: 0,
            consumed: 0,
            failed: None,
            done: false,
        }
    }

    /// The decoder, e.g. for [`Decoder::exempt_units`] or
    /// [`Decoder::found_magic`].
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// The inner reader.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Convert until there is output, the input ends or an error is due.
    fn fill(&mut self) -> io::Result<()> {
        while self.out_start == self.out_end && !self.done && self.failed.is_none() {
            if self.start == self.end && !self.eof {
                let n = loop {
                    match self.inner.read(&mut self.input) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        other => break other?,
                    }
                };
                self.start = 0;
                self.end = n;
                self.eof = n == 0;
            }
            let src = &self.input[self.start..self.end];
            let (status, read, written) = self.decoder.convert(src, &mut self.output, self.eof);
            self.start += read;
            self.consumed += read as u64;
            self.out_start = 0;
            self.out_end = written;
            match status {
                Status::InputEmpty => self.done = self.eof,
                Status::OutputFull => {}
                Status::Malformed(m) => self.failed = Some((m, self.consumed)),
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for DecodeReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.fill()?;
        if self.out_start == self.out_end {
            return match self.failed.take() {
                // The next call converts what follows the bad unit.
                Some((m, at)) => Err(invalid(m, at)),
                None => Ok(0),
            };
        }
        let n = buf.len().min(self.out_end - self.out_start);
        buf[..n].copy_from_slice(&self.output[self.out_start..self.out_start + n]);
        self.out_start += n;
        Ok(n)
    }
}

/// Takes UTF-8 writes and writes what an [`Encoder`] makes of them to an
/// inner writer.
///
/// Call [`finish`](Self::finish) at the end: it converts the last bytes
/// (a unit cut at the end is an error only then) and reports any error;
/// dropping the writer instead finishes it and ignores errors.
#[derive(Debug)]
pub struct EncodeWriter<W: Write> {
    inner: Option<W>,
    encoder: Encoder,
    output: Box<[u8]>,
    /// Input bytes the encoder consumed.
    consumed: u64,
    /// A malformed unit was found: every later write fails.
    failed: Option<(Malformed, u64)>,
}

impl<W: Write> EncodeWriter<W> {
    /// Encode what is written with `encoder` (its mode and magic number
    /// handling) into `inner`.
    pub fn new(inner: W, encoder: Encoder) -> Self {
        EncodeWriter {
            inner: Some(inner),
            encoder,
            output: vec![0; max_disk_len(CHUNK)].into_boxed_slice(),
            consumed: 0,
            failed: None,
        }
    }

    /// The inner writer.
    pub fn get_ref(&self) -> &W {
        self.inner.as_ref().expect("present until finish")
    }

    /// Convert all of `src` (`last`: and end the input) into the inner
    /// writer.
    fn push(&mut self, mut src: &[u8], last: bool) -> io::Result<()> {
        if let Some((m, at)) = self.failed {
            return Err(invalid(m, at));
        }
        let inner = self.inner.as_mut().expect("present until finish");
        loop {
            let (status, read, written) = self.encoder.convert(src, &mut self.output, last);
            inner.write_all(&self.output[..written])?;
            self.consumed += read as u64;
            src = &src[read..];
            match status {
                Status::InputEmpty => return Ok(()),
                Status::OutputFull => {}
                Status::Malformed(m) => {
                    self.failed = Some((m, self.consumed));
                    return Err(invalid(m, self.consumed));
                }
            }
        }
    }

    /// End the input: convert what is held, flush, and give back the inner
    /// writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.push(&[], true)?;
        let mut inner = self.inner.take().expect("present until finish");
        inner.flush()?;
        Ok(inner)
    }
}

impl<W: Write> Write for EncodeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CHUNK);
        self.push(&buf[..n], false)?;
        Ok(n)
    }

    /// Flushes the inner writer; a unit cut at the end of what was written
    /// so far stays held until more comes or [`finish`](Self::finish).
    fn flush(&mut self) -> io::Result<()> {
        match self.inner.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl<W: Write> Drop for EncodeWriter<W> {
    fn drop(&mut self) {
        if self.inner.is_some() && self.failed.is_none() {
            let _ = self.push(&[], true);
            if let Some(w) = self.inner.as_mut() {
                let _ = w.flush();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DecodeMagic, EncodeMagic, Problem, MAGIC};

    /// A reader that hands out at most `step` bytes per call.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn decode_all(data: &[u8], step: usize, read: usize) -> (Vec<u8>, Option<io::Error>) {
        let dec = Decoder::strict().with_magic(DecodeMagic::Expect);
        let mut r = DecodeReader::new(Trickle { data, step }, dec);
        let mut out = Vec::new();
        let mut buf = vec![0u8; read];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    fn convert_error(e: &io::Error) -> ConvertError {
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        *e.get_ref()
            .and_then(|e| e.downcast_ref::<ConvertError>())
            .expect("a ConvertError inside")
    }

    #[test]
    fn reader_decodes_whatever_the_chunks_and_reads() {
        let text = "Grüße ࠀ 𐀀 ok\n".repeat(2000);
        let file = [&MAGIC[..], &crate::encode_strict(text.as_bytes()).unwrap()].concat();
        for step in [1, 7, 4096, 100_000] {
            for read in [1, 3, 8192] {
                let (out, err) = decode_all(&file, step, read);
                assert!(err.is_none(), "step {step} read {read}");
                assert!(out == text.as_bytes(), "step {step} read {read}");
            }
        }
    }

    #[test]
    fn reader_reports_the_offset_from_the_start_after_the_text_before() {
        let mut file = [&MAGIC[..], &b"abc"[..]].concat();
        file.extend(std::iter::repeat_n(b'x', 20_000));
        let bad = file.len();
        file.extend_from_slice(&[0x80, b'y']);
        for step in [1, 5, 100_000] {
            let (out, err) = decode_all(&file, step, 64);
            let e = convert_error(&err.expect("an error"));
            assert_eq!(
                (e.problem(), e.offset()),
                (Problem::StrayContinuation(0x80), bad as u64)
            );
            assert_eq!(
                out.len(),
                bad - MAGIC.len(),
                "everything before it, step {step}"
            );
        }
        let (out, err) = decode_all(b"plain", 2, 64);
        assert_eq!(
            convert_error(&err.unwrap()).problem(),
            Problem::MissingMagic
        );
        assert!(out.is_empty());
    }

    #[test]
    fn writer_encodes_whatever_the_writes_and_finish_reports_a_cut_unit() {
        let text = "κόσμε, 世界 ࢠ\n".repeat(1000);
        let enc = || Encoder::strict().with_magic(EncodeMagic::Write);
        for piece in [1, 2, 7, 10_000, 100_000] {
            let mut w = EncodeWriter::new(Vec::new(), enc());
            for chunk in text.as_bytes().chunks(piece) {
                w.write_all(chunk).unwrap();
            }
            let file = w.finish().unwrap();
            assert_eq!(
                crate::decode_strict_to_string(&file, DecodeMagic::Expect).unwrap(),
                text,
                "pieces of {piece}"
            );
        }
        // A sequence cut at the end is an error at finish, at its offset.
        let mut w = EncodeWriter::new(Vec::new(), enc());
        w.write_all(b"ab\xE4\xB8").unwrap();
        let e = convert_error(&w.finish().unwrap_err());
        assert_eq!((e.offset(), e.malformed.len), (2, 2));
        // An error fails that write and every later one.
        let mut w = EncodeWriter::new(Vec::new(), enc());
        let e = w.write_all("a\u{85}".as_bytes()).unwrap_err();
        assert_eq!(convert_error(&e).problem(), Problem::C1Control(0x85));
        assert!(w.write_all(b"more").is_err());
        assert!(w.finish().is_err());
        // Dropped unfinished: what it holds is written, errors ignored.
        let mut out = Vec::new();
        {
            let mut w = EncodeWriter::new(&mut out, enc());
            w.write_all(b"tail").unwrap();
        }
        assert_eq!(out, [&MAGIC[..], b"tail"].concat());
    }
}
