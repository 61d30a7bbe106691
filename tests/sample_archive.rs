//! The sample archive shipped for the demo is what the README says it is:
//! its corrected files are magic + strictly valid Corrected UTF-8 whose view
//! is the text we meant, and its raw files have no magic.

use cutf8::{decode_strict, has_magic, MAGIC};
use std::path::Path;

fn read(p: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample/archive")
        .join(p);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn corrected_files_decode_strictly() {
    let cases = [
        ("notes/café-menu.txt", "Café crème — 3,50 €\n"),
        ("notes/samaritan.txt", "\u{800}\u{801}"),
        ("notes/linear-b.txt", "\u{10000}\u{10001}"),
        ("poems/basho.txt", "古池や\n"),
        ("poems/odyssey-greek.txt", "Μοῦσα"),
    ];
    for (file, needle) in cases {
        let disk = read(file);
        assert!(has_magic(&disk), "{file} lacks the magic number");
        let view = decode_strict(&disk[MAGIC.len()..]).unwrap_or_else(|e| panic!("{file}: {e}"));
        let text = String::from_utf8(view).expect("strict V gives UTF-8");
        assert!(text.contains(needle), "{file}: {text:?} lacks {needle:?}");
        assert!(text.ends_with('\n'), "{file} does not end with a newline");
    }
}

#[test]
fn raw_files_have_no_magic() {
    assert!(!has_magic(&read("README.txt")));
    assert_eq!(read("logo.bin"), (0..=255u8).collect::<Vec<_>>());
}
