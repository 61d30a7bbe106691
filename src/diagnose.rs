//! The one diagnosis of input that is not UTF-8: a guess at what it
//! really is (Latin-1, Windows-1252, UTF-16, UTF-32, binary, UTF-8 with a
//! few stray bytes), from its first bytes and the bytes at and after the
//! error, and the command that fixes it. Text in another charset is to
//! be converted to UTF-8 first (iconv's names, as an iconv user expects);
//! binary data is not text; only UTF-8 with a few stray bytes gets
//! `--lossless`, with what it costs. Pure: bytes in, a sentence out.
//! Called by `cutf8 encode` (`convert`, with the error's position kept in
//! its message), `cutf8 decode`, `cutf8 check` and `cutf8 migrate`
//! (`migrate::transcode`, for a file it leaves unconverted), each with the
//! fix in its own terms ([`Fix`]). UTF-8 that begins with a byte order
//! mark converts; encode, migrate and check add the same note on it
//! ([`utf8_bom`]).

use cutf8::Problem;

/// What an input that strict encoding refused looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guess {
    /// UTF-16 (its byte order mark first).
    Utf16,
    /// UTF-32 (its byte order mark first).
    Utf32,
    /// Not text: NUL bytes or many control characters.
    Binary,
    /// An 8-bit charset with the bytes 0x80-0x9F printable (curly quotes,
    /// the euro sign): Windows-1252.
    Cp1252,
    /// An 8-bit charset without them: Latin-1 (ISO-8859-1).
    Latin1,
    /// UTF-8 holding C1 controls that are Windows-1252's printable bytes:
    /// Windows-1252 text once converted as if it were Latin-1.
    Cp1252AsLatin1,
    /// UTF-8, but for a few bytes.
    MostlyUtf8,
}

/// The byte order marks of UTF-32 and UTF-16, longest first.
fn bom(head: &[u8]) -> Option<Guess> {
    if head.starts_with(&[0xFF, 0xFE, 0, 0]) || head.starts_with(&[0, 0, 0xFE, 0xFF]) {
        Some(Guess::Utf32)
    } else if head.starts_with(&[0xFF, 0xFE]) || head.starts_with(&[0xFE, 0xFF]) {
        Some(Guess::Utf16)
    } else {
        None
    }
}

/// Windows-1252's bytes 0x80-0x9F that it prints (the rest are unused).
fn cp1252_prints(b: u8) -> bool {
    (0x80..=0x9F).contains(&b) && !matches!(b, 0x81 | 0x8D | 0x8F | 0x90 | 0x9D)
}

/// Whether `sample` looks like binary data: a NUL byte, or more than one
/// in ten bytes a C0 control other than TAB, LF, FF and CR.
fn binary(sample: &[u8]) -> bool {
    if memchr::memchr(0, sample).is_some() {
        return true;
    }
    let controls = sample
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | 0x0C | b'\r'))
        .count();
    controls * 10 > sample.len()
}

/// The high bytes (0x80-0xFF) of `sample` that are not part of well-formed
/// UTF-8, and how many well-formed non-ASCII characters it holds.
fn stray_high_bytes(sample: &[u8]) -> (Vec<u8>, usize) {
    let mut stray = Vec::new();
    let mut utf8 = 0;
    for chunk in sample.utf8_chunks() {
        utf8 += chunk.valid().chars().filter(|c| !c.is_ascii()).count();
        stray.extend(chunk.invalid().iter().filter(|&&b| b >= 0x80));
    }
    (stray, utf8)
}

/// What the input is, judged from `head` (its first bytes), `problem`
/// (what strict encoding refused) and `sample` (bytes from the error on).
pub fn guess(head: &[u8], problem: Problem, sample: &[u8]) -> Guess {
    if let Some(g) = bom(head) {
        return g;
    }
    if binary(head) || binary(sample) {
        return Guess::Binary;
    }
    if let Problem::Overlong(_) | Problem::Surrogate(_) = problem {
        // Well-formed UTF-8 structure with values it forbids: not a legacy
        // charset (whose bytes rarely make such sequences).
        return Guess::MostlyUtf8;
    }
    if let Problem::C1Control(cp) = problem {
        return if u8::try_from(cp).is_ok_and(cp1252_prints) {
            Guess::Cp1252AsLatin1
        } else {
            Guess::MostlyUtf8
        };
    }
    let (stray, utf8) = stray_high_bytes(sample);
    // Legacy 8-bit text: its high bytes stand alone, and well-formed UTF-8
    // characters are rare beside them (a few can happen by chance, such as
    // "Ã©" in Latin-1).
    if stray.len() >= 2 && utf8 * 4 <= stray.len() || stray.len() == 1 && utf8 == 0 {
        if stray.iter().any(|&b| cp1252_prints(b)) {
            return Guess::Cp1252;
        }
        return Guess::Latin1;
    }
    Guess::MostlyUtf8
}

/// Which program the fix is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// `cutf8 encode`: convert, then pipe into it.
    Encode,
    /// `cutf8 migrate`: convert the file in place, then run migrate again.
    Migrate,
    /// `cutf8 decode`: the input is no Corrected UTF-8; iconv alone makes
    /// UTF-8 of it.
    Decode,
}

/// The sentence to add to the error for `guess` of input `name` (a file
/// name, or None for standard input), with the fix for `cutf8 encode`.
pub fn suggestion(guess: Guess, name: Option<&str>) -> String {
    suggestion_for(Fix::Encode, guess, name)
}

/// [`suggestion`], with the fix for `fix`'s program.
pub fn suggestion_for(fix: Fix, guess: Guess, name: Option<&str>) -> String {
    let word = name.map(shell_word);
    let file = word.as_ref().map_or(String::new(), |n| format!(" {n}"));
    let via = |charset: &str| match fix {
        Fix::Encode => format!("iconv -f {charset} -t UTF-8{file} | cutf8 encode -o OUT"),
        Fix::Decode => format!(
            "iconv -f {charset} -t UTF-8{file} > OUT (it is no Corrected UTF-8: nothing to \
             decode)"
        ),
        Fix::Migrate => {
            let f = word.clone().unwrap_or_else(|| "FILE".into());
            format!(
                "iconv -f {charset} -t UTF-8 {f} > {f}.utf8 && mv {f}.utf8 {f}, then run \
                 cutf8 migrate again"
            )
        }
    };
    match guess {
        Guess::Utf16 => format!(
            "this is UTF-16 (it begins with a UTF-16 byte order mark); convert it to \
             UTF-8 first: {}",
            via("UTF-16")
        ),
        Guess::Utf32 => format!(
            "this is UTF-32 (it begins with a UTF-32 byte order mark); convert it to \
             UTF-8 first: {}",
            via("UTF-32")
        ),
        Guess::Binary => "this looks like binary data (NUL bytes or many control \
             characters), not text: Corrected UTF-8 is for text; leave the file as it is \
             (cutf8 migrate skips such files, and the mount stores them raw)"
            .to_string(),
        Guess::Cp1252 => format!(
            "this looks like Windows-1252 (cp1252) text, not UTF-8: convert it to UTF-8 \
             first: {}",
            via("CP1252")
        ),
        Guess::Latin1 => format!(
            "this looks like Latin-1 (ISO-8859-1) text, not UTF-8: convert it to UTF-8 \
             first: {} (CP1252 for Windows text, ISO-8859-15 for text with the euro sign)",
            via("LATIN1")
        ),
        Guess::Cp1252AsLatin1 => format!(
            "C1 controls like this one usually come from Windows-1252 text converted to \
             UTF-8 as if it were Latin-1 (its curly quotes, dashes and euro sign become \
             U+0080-U+009F); if so, undo that and convert again: iconv -f UTF-8 -t \
             LATIN1{file} | iconv -f CP1252 -t UTF-8 | cutf8 encode -o OUT"
        ),
        Guess::MostlyUtf8 if fix == Fix::Migrate => "UTF-8 but for a few bytes: fix \
             them, or leave the file as it is (the mount shows it raw)"
            .to_string(),
        Guess::MostlyUtf8 => "--lossless carries it through as the mount does; the output \
             is then read back with cutf8 decode --lossless or through the mount \
             (strict cutf8 decode refuses it)"
            .to_string(),
    }
}

/// Whether `head` (a file's first bytes) begins with UTF-8's byte order
/// mark (EF BB BF).
pub fn begins_with_bom(head: &[u8]) -> bool {
    head.starts_with(&[0xEF, 0xBB, 0xBF])
}

/// The `sed` expression that drops a leading UTF-8 byte order mark.
pub const DROP_BOM: &str = "'1s/^\\xEF\\xBB\\xBF//'";

/// The note for UTF-8 text that begins with a byte order mark (EF BB
/// BF), when `head` (its first bytes) does: valid UTF-8, so it converts,
/// but the mark stays as U+FEFF at the start of the text. None otherwise.
pub fn utf8_bom(head: &[u8], name: Option<&str>) -> Option<String> {
    if !begins_with_bom(head) {
        return None;
    }
    let drop = match name {
        Some(n) => format!("sed -i {DROP_BOM} {}", shell_word(n)),
        None => format!("sed {DROP_BOM} | cutf8 encode"),
    };
    Some(format!(
        "UTF-8 with a byte order mark (EF BB BF): it converts, but the mark stays as \
         U+FEFF at the start of the text; drop it first if it is not wanted: {drop}"
    ))
}

/// `name` as one shell word: as it is when it needs no quoting.
fn shell_word(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b))
    {
        name.to_string()
    } else {
        format!("'{}'", name.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRAY: Problem = Problem::StrayContinuation(0xE9);

    #[test]
    fn boms_first() {
        assert_eq!(guess(&[0xFF, 0xFE, b'h', 0], STRAY, &[]), Guess::Utf16);
        assert_eq!(guess(&[0xFE, 0xFF, 0, b'h'], STRAY, &[]), Guess::Utf16);
        assert_eq!(guess(&[0xFF, 0xFE, 0, 0], STRAY, &[]), Guess::Utf32);
        assert_eq!(guess(&[0, 0, 0xFE, 0xFF], STRAY, &[]), Guess::Utf32);
    }

    #[test]
    fn legacy_charsets_by_their_high_bytes() {
        let latin1 = b"caf\xe9 cr\xe8me\n";
        assert_eq!(guess(latin1, STRAY, &latin1[3..]), Guess::Latin1);
        let cp = b"\x93quoted\x94 \x80 5\n";
        assert_eq!(guess(cp, STRAY, cp), Guess::Cp1252);
        // One accented letter alone in ASCII text.
        assert_eq!(guess(b"caf", STRAY, b"\xe9\n"), Guess::Latin1);
    }

    #[test]
    fn utf8_with_a_stray_byte_is_mostly_utf8() {
        let mut t = "Grüße, ça va, 中文\n".repeat(20).into_bytes();
        t.insert(30, 0xFF);
        assert_eq!(guess(&t[..16], STRAY, &t[30..]), Guess::MostlyUtf8);
    }

    #[test]
    fn binary_by_nul_or_controls() {
        assert_eq!(guess(b"\x7fELF\x02\x01\x01\0", STRAY, b""), Guess::Binary);
        let controls: Vec<u8> = (1..200u8).map(|b| b % 31 + 1).collect();
        assert_eq!(guess(b"ok", STRAY, &controls), Guess::Binary);
        assert_eq!(guess(b"a\tb\r\n\x0c", STRAY, b"\xe9\n"), Guess::Latin1);
    }

    #[test]
    fn overlong_forms_and_surrogates_are_utf8_gone_wrong() {
        let p = Problem::Overlong(0x2F);
        assert_eq!(guess(b"one\ntwo", p, b"\xC0\xAF"), Guess::MostlyUtf8);
    }

    #[test]
    fn c1_controls() {
        assert_eq!(
            guess(b"x", Problem::C1Control(0x93), b""),
            Guess::Cp1252AsLatin1
        );
        assert_eq!(
            guess(b"x", Problem::C1Control(0x81), b""),
            Guess::MostlyUtf8
        );
    }

    #[test]
    fn suggestions_name_the_file_as_a_shell_word() {
        let s = suggestion(Guess::Latin1, Some("my notes.txt"));
        assert!(
            s.contains("iconv -f LATIN1 -t UTF-8 'my notes.txt' | cutf8 encode"),
            "{s}"
        );
        let s = suggestion(Guess::Utf16, None);
        assert!(s.contains("iconv -f UTF-16 -t UTF-8 | cutf8 encode"), "{s}");
        let s = suggestion_for(Fix::Migrate, Guess::Latin1, Some("a b"));
        assert!(
            s.contains("iconv -f LATIN1 -t UTF-8 'a b' > 'a b'.utf8 && mv 'a b'.utf8 'a b'"),
            "{s}"
        );
    }
}
