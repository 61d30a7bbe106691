//! When `cutf8 encode` refuses its input, the remedy fits the input: text
//! in another charset (Latin-1, Windows-1252, UTF-16 or UTF-32 with its
//! byte order mark) is to be converted to UTF-8 first, with the iconv
//! command that does it; binary data is not text at all; only a file that
//! is UTF-8 but for a stray byte gets `--lossless`, with what that costs.
//! The error keeps its position (file:line:col and byte offset). `cutf8
//! decode` and `cutf8 check` make the same diagnosis (`cutf8fs::diagnose`).

use crate::support::cli::Dir;

/// `cutf8 encode FILE` on `bytes`: (exit status, stderr).
fn encode(bytes: &[u8]) -> (Option<i32>, String) {
    let d = Dir::new();
    d.write("in.txt", bytes);
    let r = d.run(&["encode", "in.txt", "-o", "out.cu8"], b"");
    (r.status, r.stderr)
}

#[track_caller]
fn says(bytes: &[u8], position: &str, want: &[&str], not: &[&str]) {
    let (status, err) = encode(bytes);
    assert_eq!(status, Some(1), "{err}");
    assert!(err.contains(position), "position {position} lost:\n{err}");
    for w in want {
        assert!(err.contains(w), "no {w:?} in:\n{err}");
    }
    for n in not {
        assert!(!err.contains(n), "{n:?} suggested for this input:\n{err}");
    }
}

#[test]
fn latin1_text_is_to_be_converted_from_latin1() {
    says(
        b"caf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve\n",
        "in.txt:1:4: ",
        &["(byte offset 3)", "Latin-1", "iconv -f LATIN1 -t UTF-8"],
        &["--lossless"],
    );
}

#[test]
fn windows_1252_text_is_to_be_converted_from_cp1252() {
    // Curly quotes and a euro sign: bytes 0x80-0x9F that only cp1252 prints.
    says(
        b"He said \x93caf\xe9 for 5 \x80\x94cheap\x94.\n",
        "in.txt:1:9: ",
        &[
            "(byte offset 8)",
            "Windows-1252",
            "iconv -f CP1252 -t UTF-8",
        ],
        &["--lossless"],
    );
}

#[test]
fn utf16_and_utf32_are_known_by_their_byte_order_marks() {
    let utf16le: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain("héllo\n".encode_utf16().flat_map(|u| u.to_le_bytes()))
        .collect();
    says(
        &utf16le,
        "(byte offset 0)",
        &["UTF-16", "iconv -f UTF-16 -t UTF-8"],
        &["--lossless"],
    );
    let utf16be: Vec<u8> = [0xFE, 0xFF]
        .into_iter()
        .chain("héllo\n".encode_utf16().flat_map(|u| u.to_be_bytes()))
        .collect();
    says(
        &utf16be,
        "(byte offset 0)",
        &["UTF-16", "iconv -f UTF-16 -t UTF-8"],
        &["--lossless"],
    );
    let utf32le: Vec<u8> = [0xFF, 0xFE, 0, 0]
        .into_iter()
        .chain("héllo\n".chars().flat_map(|c| (c as u32).to_le_bytes()))
        .collect();
    says(
        &utf32le,
        "(byte offset 0)",
        &["UTF-32", "iconv -f UTF-32 -t UTF-8"],
        &["--lossless"],
    );
    let utf32be: Vec<u8> = [0, 0, 0xFE, 0xFF]
        .into_iter()
        .chain("héllo\n".chars().flat_map(|c| (c as u32).to_be_bytes()))
        .collect();
    says(
        &utf32be,
        "(byte offset 2)",
        &["UTF-32", "iconv -f UTF-32 -t UTF-8"],
        &["--lossless"],
    );
}

#[test]
fn binary_input_is_called_binary() {
    let elf = std::fs::read("/bin/true").unwrap();
    says(
        &elf,
        "(byte offset ",
        &["binary"],
        &["--lossless", "iconv -f"],
    );
    // Controls everywhere, no NUL.
    let mut blob: Vec<u8> = (0..4000u32).map(|i| (i * 37 % 32) as u8 | 1).collect();
    blob.extend_from_slice(&[0xFF, 0xFE, 0x81, 0x07]);
    says(&blob, "(byte offset 4000)", &["binary"], &["--lossless"]);
}

#[test]
fn utf8_with_one_stray_byte_gets_lossless_and_what_it_costs() {
    let mut t = "Grüße aus Köln, ça va très bien, 中文 😀\n"
        .repeat(50)
        .into_bytes();
    t.insert(200, 0xFF);
    let (status, err) = encode(&t);
    assert_eq!(status, Some(1), "{err}");
    assert!(err.contains("(byte offset 200)"), "{err}");
    assert!(err.contains("--lossless"), "{err}");
    assert!(
        err.contains("decode --lossless"),
        "--lossless suggested without saying strict decode then refuses it:\n{err}"
    );
    assert!(!err.contains("LATIN1") && !err.contains("binary"), "{err}");
}

#[test]
fn c1_controls_from_a_windows_1252_mixup_are_named_so() {
    // cp1252 curly quotes taken for Latin-1: U+0093 and U+0094 in UTF-8.
    says(
        "He said \u{93}hello\u{94}.\n".as_bytes(),
        "in.txt:1:9: ",
        &["C1 control", "Windows-1252", "iconv -f UTF-8 -t LATIN1"],
        &["--lossless"],
    );
}

/// `cutf8 decode` of a file that is no Corrected UTF-8 and not UTF-8
/// either says what it looks like, with the iconv command that makes
/// UTF-8 of it (the diagnosis encode makes), instead of calling it plain
/// UTF-8 already.
#[test]
fn decode_diagnoses_latin1_and_utf16_input() {
    let d = Dir::new();
    d.write("latin.txt", b"caf\xe9 cr\xe8me\n");
    d.write("u16.txt", b"\xff\xfeh\0i\0\n\0");
    let r = d.run(&["decode", "latin.txt"], b"");
    assert_eq!(r.status, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("looks like Latin-1"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("iconv -f LATIN1 -t UTF-8 latin.txt > OUT"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("plain UTF-8 already"), "{}", r.stderr);
    let r = d.run(&["decode", "u16.txt"], b"");
    assert!(
        r.stderr.contains("iconv -f UTF-16 -t UTF-8 u16.txt"),
        "{}",
        r.stderr
    );
    // Plain UTF-8 is still called that.
    let r = d.run(&["decode"], "déjà\n".as_bytes());
    assert!(r.stderr.contains("plain UTF-8 already"), "{}", r.stderr);
}

/// `cutf8 check` notes UTF-8 with a byte order mark, with the command
/// that drops the mark, and says what a Latin-1 file is.
#[test]
fn check_diagnoses_a_bom_and_latin1() {
    let d = Dir::new();
    d.write("bom.txt", b"\xef\xbb\xbfhi\n");
    d.write("latin.txt", b"caf\xe9\n");
    let r = d.run(&["check", "bom.txt", "latin.txt"], b"");
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("bom.txt: note: UTF-8 with a byte order mark"),
        "{out}"
    );
    assert!(out.contains("sed -i"), "{out}");
    assert!(
        out.contains("latin.txt: note: this looks like Latin-1"),
        "{out}"
    );
}

/// UTF-8 with a byte order mark converts, and `cutf8 encode` says once,
/// as a note naming the input, that the mark stays as U+FEFF, with the
/// command that drops it (a pipe for standard input).
#[test]
fn encode_notes_a_byte_order_mark_and_converts_it() {
    let d = Dir::new();
    d.write("bom.txt", b"\xef\xbb\xbfhi\n");
    d.write("plain.txt", b"hi\n");
    let r = d.run(&["encode", "bom.txt", "-o", "out.cu8"], b"");
    assert_eq!(r.status, Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("bom.txt: note: UTF-8 with a byte order mark"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("sed -i '1s/^\\xEF\\xBB\\xBF//' bom.txt"),
        "{}",
        r.stderr
    );
    let back = d.run(&["decode", "out.cu8"], b"");
    assert_eq!(back.stdout, b"\xef\xbb\xbfhi\n", "the mark is kept");
    let r = d.run(&["encode"], b"\xef\xbb\xbfhi\n");
    assert_eq!(r.status, Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("<stdin>: note: UTF-8 with a byte order mark"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("| cutf8 encode"), "{}", r.stderr);
    let r = d.run(&["encode", "plain.txt", "-o", "plain.cu8"], b"");
    assert_eq!(r.status, Some(0), "{}", r.stderr);
    assert!(r.stderr.is_empty(), "no note for plain UTF-8: {}", r.stderr);
}

/// `cutf8 migrate` converts UTF-8 with a byte order mark and notes it
/// after the summary, in a dry run and a real one, and in the report.
#[test]
fn migrate_notes_a_byte_order_mark_and_converts_it() {
    let d = Dir::new();
    std::fs::create_dir(d.path().join("tree")).unwrap();
    d.write("tree/bom.txt", b"\xef\xbb\xbfhi\n");
    d.write("tree/plain.txt", b"hi\n");
    let r = d.run(&["migrate", "--dry-run", "tree"], b"");
    assert_eq!(r.status, Some(0), "{}", r.stderr);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("note: 1 file begins with a UTF-8 byte order mark"),
        "{out}"
    );
    assert!(out.contains("would stay as U+FEFF"), "{out}");
    let r = d.run(&["migrate", "--report", "r.json", "tree"], b"");
    assert_eq!(r.status, Some(0), "{}", r.stderr);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("the mark stays as U+FEFF"), "{out}");
    let named: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(
        named.len(),
        1,
        "only the file with the mark is named: {out}"
    );
    assert!(named[0].ends_with("bom.txt"), "{out}");
    let report = std::fs::read_to_string(d.path().join("r.json")).unwrap();
    let noted: Vec<&str> = report.lines().filter(|l| l.contains("utf8-bom")).collect();
    assert_eq!(noted.len(), 1, "{report}");
    assert!(noted[0].contains("bom.txt"), "{report}");
    let back = d.run(&["decode", "tree/bom.txt"], b"");
    assert_eq!(back.stdout, b"\xef\xbb\xbfhi\n", "the mark is kept");
}
