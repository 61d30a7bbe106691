//! Checking one file: reading it in chunks through the strict decoder and
//! reporting what the rules find, with line and column.

use std::io::Read;

use super::output::{note, Finding};
use super::rules::{CheckOptions, Level, Rule};
use crate::convert::{read_chunk, read_prefix, Direction, Position, Tracker};
use cutf8::{has_magic, DecodeMagic, Decoder, Problem, Status};

/// What [`FileCheck::scan`] did with one input.
pub(super) enum Scanned {
    Checked,
    /// Skipped as binary.
    Binary,
    /// Skipped as a script migrate leaves raw.
    Script,
}

/// What one file's check counted.
pub(super) struct Counted {
    pub(super) errors: u64,
    pub(super) warnings: u64,
    pub(super) per_rule: [u64; Rule::ALL.len()],
    pub(super) held_back: bool,
}

/// How much of a file the binary test looks at (git's number).
const BINARY_PROBE: usize = 8000;

/// The state of checking one file.
pub(super) struct FileCheck<'a> {
    opts: &'a CheckOptions,
    name: String,
    out: &'a mut dyn FnMut(&str),
    /// Byte offsets and the bytes of malformed units (input side).
    pos: Tracker,
    /// Line and column of the next character of the text, counted on the
    /// decoded side so a sequence cut by a chunk edge counts once (its
    /// offset counts decoded bytes and is not reported).
    text_at: Position,
    /// Findings per rule, reported or not.
    counts: [u64; Rule::ALL.len()],
    /// Whether any character (or malformed unit) was seen, and whether the
    /// last one was U+000A.
    any_text: bool,
    ends_with_newline: bool,
}

impl<'a> FileCheck<'a> {
    pub(super) fn new(opts: &'a CheckOptions, name: String, out: &'a mut dyn FnMut(&str)) -> Self {
        FileCheck {
            opts,
            name,
            out,
            pos: Tracker::default(),
            text_at: Position::default(),
            counts: [0; Rule::ALL.len()],
            any_text: false,
            ends_with_newline: false,
        }
    }

    fn report(&mut self, rule: Rule, line: u64, column: u64, message: impl FnOnce() -> String) {
        let level = self.opts.level(rule);
        if level == Level::Allow {
            return;
        }
        let k = rule.index();
        self.counts[k] += 1;
        if level == Level::Error
            || self.opts.max_per_rule == 0
            || self.counts[k] <= self.opts.max_per_rule
        {
            let f = Finding {
                file: self.name.clone(),
                line,
                column,
                level,
                rule,
                message: message(),
            };
            let line = if self.opts.json {
                f.json()
            } else {
                f.to_string()
            };
            (self.out)(&line);
        }
    }

    /// Check one input, unless it is binary (a NUL byte in the first
    /// [`BINARY_PROBE`] bytes and no magic number: git's and `cutf8
    /// migrate`'s rule) or a script `cutf8 migrate` leaves raw on purpose
    /// (`crate::migrate::leaves_script_raw`, migrate's own rule): then one
    /// note says so.
    pub(super) fn scan(
        &mut self,
        r: &mut dyn Read,
        input: &mut [u8],
        output: &mut [u8],
    ) -> std::io::Result<Scanned> {
        // The magic number is dropped if there; its absence is a finding,
        // and the text is checked from the first byte either way.
        let mut dec = Decoder::strict()
            .with_magic(DecodeMagic::Strip)
            .with_simd_level(crate::codec::level());
        let mut probe = vec![0u8; BINARY_PROBE];
        let n = read_prefix(r, &mut probe, input.len())?;
        if n == 0 {
            // Nothing to check: no magic number is missing from no text.
            return Ok(Scanned::Checked);
        }
        let magic = has_magic(&probe[..n]);
        if !magic && probe[..n].contains(&0) {
            (self.out)(&note(
                self.opts.json,
                &self.name,
                "binary (a NUL byte in the first 8000 bytes and no magic number): not checked",
            ));
            return Ok(Scanned::Binary);
        }
        if crate::migrate::leaves_script_raw(&probe[..n]) {
            (self.out)(&note(
                self.opts.json,
                &self.name,
                "a script (#! and an interpreter): cutf8 migrate leaves scripts raw on \
                 purpose, so that they still run outside the mount; not checked \
                 (cutf8 migrate --include-scripts converts it, for a script run only \
                 through the mount)",
            ));
            return Ok(Scanned::Script);
        }
        if !magic {
            self.report(Rule::MissingMagic, 1, 1, || {
                "no Corrected UTF-8 magic number at the start".to_string()
            });
            // Not UTF-8 either: what it looks like, and the fix
            // (`crate::diagnose`, the judgement encode and migrate make).
            let head = &probe[..n];
            if let Some(bom) = crate::diagnose::utf8_bom(head, Some(&self.name)) {
                (self.out)(&note(self.opts.json, &self.name, &bom));
            }
            if let Err(e) = std::str::from_utf8(head) {
                if e.error_len().is_some() {
                    let at = e.valid_up_to();
                    let guess = crate::diagnose::guess(
                        head,
                        Problem::StrayContinuation(head[at]),
                        &head[at..],
                    );
                    if guess != crate::diagnose::Guess::MostlyUtf8 {
                        let fix = crate::diagnose::suggestion_for(
                            crate::diagnose::Fix::Migrate,
                            guess,
                            Some(&self.name),
                        );
                        (self.out)(&note(self.opts.json, &self.name, &fix));
                    }
                }
            }
        }
        let mut eof = n < probe.len();
        self.feed(&mut dec, &probe[..n], eof, output);
        while !eof {
            let n = read_chunk(r, input)?;
            eof = n == 0;
            self.feed(&mut dec, &input[..n], eof, output);
        }
        if self.any_text && !self.ends_with_newline {
            let (line, col) = (self.text_at.line, self.text_at.column);
            self.report(Rule::NoFinalNewline, line, col, || {
                "no newline (U+000A) at the end of the file".to_string()
            });
        }
        Ok(Scanned::Checked)
    }

    fn feed(&mut self, dec: &mut Decoder, src: &[u8], last: bool, dst: &mut [u8]) {
        let mut i = 0;
        loop {
            let (status, read, written) = dec.convert(&src[i..], dst, last);
            self.text(&dst[..written]);
            let consumed = &src[i..i + read];
            i += read;
            match status {
                Status::InputEmpty => {
                    self.pos.advance(consumed);
                    return;
                }
                Status::OutputFull => self.pos.advance(consumed),
                Status::Malformed(m) => {
                    let at = self.pos.locate(consumed, m);
                    let rule = match m.problem {
                        Problem::StrayContinuation(_) => Rule::StrayByte,
                        Problem::Truncated { .. } => Rule::TruncatedSequence,
                        Problem::Reserved(_) => Rule::ReservedUnit,
                        // A second magic number holds U+0000.
                        Problem::MagicNumber => Rule::Nul,
                        _ => Rule::BeyondUnicode,
                    };
                    let (line, col) = (self.text_at.line, self.text_at.column);
                    self.report(rule, line, col, || {
                        format!(
                            "{} (byte offset {})",
                            at.describe(Direction::Decode),
                            at.pos.offset
                        )
                    });
                    // The unit itself: one character, never a newline.
                    self.text_at.column += 1;
                    self.any_text = true;
                    self.ends_with_newline = false;
                }
            }
        }
    }

    /// Look at decoded text for the characters the rules name, counting
    /// lines and columns. The decoder never splits a character between two
    /// outputs.
    fn text(&mut self, text: &[u8]) {
        if text.is_empty() {
            return;
        }
        self.any_text = true;
        self.ends_with_newline = text[text.len() - 1] == b'\n';
        let mut at = self.text_at;
        let mut k = 0;
        while k < text.len() {
            let Some(j) = text[k..].iter().position(|&b| b < 0x20 || b == 0xE2) else {
                break;
            };
            at.advance(&text[k..k + j]);
            k += j;
            let b = text[k];
            let found = match b {
                b'\n' => None,
                0x00 => Some((
                    Rule::Nul,
                    "U+0000 (NUL) outside the magic number".to_string(),
                )),
                b'\t' => Some((Rule::Tab, "tab (U+0009)".to_string())),
                b'\r' => Some((Rule::CarriageReturn, "carriage return (U+000D)".to_string())),
                0xE2 if text[k + 1..].starts_with(&[0x80, 0xA8]) => {
                    Some((Rule::LineSeparator, "line separator (U+2028)".to_string()))
                }
                0xE2 if text[k + 1..].starts_with(&[0x80, 0xA9]) => Some((
                    Rule::ParagraphSeparator,
                    "paragraph separator (U+2029)".to_string(),
                )),
                0xE2 => None,
                _ => Some((Rule::Control, format!("C0 control U+{b:04X}"))),
            };
            if let Some((rule, message)) = found {
                self.report(rule, at.line, at.column, || message);
            }
            at.advance(&text[k..=k]);
            k += 1;
        }
        at.advance(&text[k..]);
        self.text_at = at;
    }

    /// Print the notes for capped rules; what was counted.
    pub(super) fn finish(self) -> Counted {
        let (mut errors, mut warnings, mut held_back) = (0, 0, false);
        for rule in Rule::ALL {
            let n = self.counts[rule.index()];
            let level = self.opts.level(rule);
            match level {
                Level::Error => errors += n,
                Level::Warning => warnings += n,
                Level::Allow => {}
            }
            if level == Level::Warning && self.opts.max_per_rule > 0 && n > self.opts.max_per_rule {
                held_back = true;
                let message = format!(
                    "{} more [{}] findings not shown",
                    n - self.opts.max_per_rule,
                    rule.name()
                );
                (self.out)(&note(self.opts.json, &self.name, &message));
            }
        }
        Counted {
            errors,
            warnings,
            per_rule: self.counts,
            held_back,
        }
    }
}
