//! `cutf8 encode` and `decode` as a user of iconv expects them: decode
//! refuses plain UTF-8 instead of garbling it, a magic number inside the
//! text is an error in strict mode wherever the chunks cut it, exit status
//! 2 for an input that cannot be read, encode writes nothing for a missing
//! input, and diagnostics are coloured on a terminal only.

use crate::support::cli::{cutf8, with_magic, Dir};

use cutf8::MAGIC;

/// Chunk sizes: 1, 3 and 7 bytes put the magic number across every edge.
const CHUNKS: [&str; 4] = ["1", "3", "7", "65536"];

// ---- decode's defaults ----

#[test]
fn decode_refuses_plain_utf8_instead_of_garbling_it() {
    // What a git clean filter built on decode saw: "café" as plain UTF-8.
    for chunk in CHUNKS {
        let r = cutf8(&["decode", "--buffer-size", chunk], "café\n".as_bytes());
        r.exits(1)
            .stderr_has("<stdin>:1:1: input does not begin with the Corrected UTF-8 magic number")
            .stderr_has("--no-magic")
            .stdout_is(b"", "nothing decoded");
        // --lossless is no excuse either.
        cutf8(&["decode", "--lossless"], "café\n".as_bytes()).exits(1);
    }
    // Told that it is Corrected UTF-8 without the magic number, decode does.
    cutf8(&["decode", "--no-magic"], &[b'a', 0xC1, 0x89, b'\n'])
        .ok()
        .stdout_is("aé\n".as_bytes(), "decoded");
    // --no-magic still drops a magic number that is there.
    cutf8(&["decode", "--no-magic"], &with_magic(b"x\n"))
        .ok()
        .stdout_is(b"x\n", "magic dropped");
    // An empty input has nothing to garble.
    cutf8(&["decode"], b"").ok().stdout_is(b"", "empty");
    // One bad input among good ones: the good ones decode, exit 1.
    let d = Dir::new();
    d.write("good.cu8", &with_magic(b"good\n"));
    d.write("plain.txt", b"plain\n");
    d.run(&["decode", "plain.txt", "good.cu8"], b"")
        .exits(1)
        .stderr_has("plain.txt:1:1: input does not begin")
        .stdout_is(b"good\n", "the good one");
}

#[test]
fn a_second_magic_number_is_an_error_in_strict_mode() {
    // cat a.cu8 b.cu8 | cutf8 decode
    let a = with_magic("línea\nzwei ".as_bytes());
    let mut cat = a.clone();
    cat.extend_from_slice(&with_magic(b"b\n"));
    let want_prefix = cutf8(&["decode"], &a).ok().stdout;
    for chunk in CHUNKS {
        let r = cutf8(&["decode", "--buffer-size", chunk], &cat);
        // "línea\n" is line 1; "zwei " puts the magic at line 2, column 6.
        r.exits(1)
            .stderr_has(&format!(
                "<stdin>:2:6: a second Corrected UTF-8 magic number (byte offset {})",
                a.len()
            ))
            .stderr_has("decode each file on its own")
            .stdout_is(&want_prefix, "the first file's text, no NUL, nothing after");
        // --lossless reads it as text, as the mount does.
        let r = cutf8(&["decode", "--lossless", "--buffer-size", chunk], &cat).ok();
        assert!(
            r.stdout.contains(&0),
            "lossless carries the magic's NUL through"
        );
    }
}

#[test]
fn the_magic_number_is_found_at_every_position_and_chunk_edge() {
    for before in 0..12usize {
        let mut input = with_magic(&b"abcdefghijkl"[..before]);
        input.extend_from_slice(&MAGIC);
        input.extend_from_slice(b"tail\n");
        for chunk in ["1", "2", "3", "5", "7", "8", "9"] {
            cutf8(&["decode", "--buffer-size", chunk], &input)
                .exits(1)
                .stderr_has(&format!(
                    "<stdin>:1:{}: a second Corrected UTF-8 magic number (byte offset {})",
                    before + 1,
                    8 + before
                ))
                .stdout_is(&b"abcdefghijkl"[..before], "text before it");
        }
    }
}

#[test]
fn text_that_merely_begins_like_the_magic_number_decodes() {
    // The magic number's proper prefixes that end on a unit boundary are
    // text (EF B7 9D, ED B2 AE, 00); held back at a chunk edge, they must
    // still come out when what follows is not the rest of the magic.
    for k in [3, 6, 7] {
        for after in [
            &b""[..],
            b"x",
            b"\xEF\xB7\x9D",
            b"\xEF\xB7\x9D\xED\xB2\xAE\x00x",
        ] {
            let mut body = b"a".to_vec();
            body.extend_from_slice(&MAGIC[..k]);
            body.extend_from_slice(after);
            let want = cutf8(&["decode", "--lossless"], &with_magic(&body))
                .ok()
                .stdout;
            for chunk in ["1", "2", "3", "4", "7", "65536"] {
                cutf8(&["decode", "--buffer-size", chunk], &with_magic(&body))
                    .ok()
                    .stdout_is(&want, &format!("{body:02X?} chunk {chunk}"));
            }
        }
    }
}

#[test]
fn decode_exit_status_2_for_an_unreadable_input() {
    cutf8(&["decode", "nosuch.cu8"], b"")
        .exits(2)
        .stderr_is("cutf8: nosuch.cu8: No such file or directory\n");
}

// ---- encode of a missing input ----

#[test]
fn encode_of_a_missing_input_writes_nothing() {
    cutf8(&["encode", "nosuch.txt"], b"")
        .exits(2)
        .stderr_is("cutf8: nosuch.txt: No such file or directory\n")
        .stdout_is(b"", "no magic number alone");
    // The magic number comes with the first input that opens.
    let d = Dir::new();
    d.write("a.txt", b"a\n");
    d.run(&["encode", "nosuch.txt", "a.txt"], b"")
        .exits(2)
        .stdout_is(&with_magic(b"a\n"), "magic once, then a");
    d.run(&["encode", "nosuch.txt", "-o", "out.cu8"], b"")
        .exits(2);
    assert_eq!(d.names(), ["a.txt"], "no output file");
    // Empty stdin is an empty text: an empty output, no magic number (as
    // iconv writes for it; tests/cli.rs, an_empty_text_is_an_empty_file).
    cutf8(&["encode"], b"").ok().stdout_is(b"", "nothing");
}

// ---- colour only on a terminal ----

#[test]
fn diagnostics_are_coloured_on_a_terminal_only() {
    let d = Dir::new();
    d.write("t.cu8", &with_magic(b"a\tb\n"));
    d.write("bad.txt", b"\xC0\xAF\n");
    // Through a pipe: plain.
    let r = d.run(&["check", "t.cu8"], b"").exits(0);
    assert!(!r.stdout.contains(&0x1b) && !r.stderr.contains('\x1b'));
    let r = d.run(&["encode", "bad.txt"], b"").exits(1);
    assert!(!r.stderr.contains('\x1b'));
    // On a terminal (script(1) gives it one): coloured, unless NO_COLOR.
    let bin = crate::support::cli::BIN;
    for (no_color, want) in [("", true), ("1", false)] {
        let out = std::process::Command::new("script")
            .args([
                "-qec",
                &format!("{bin} check t.cu8; {bin} encode bad.txt"),
                "/dev/null",
            ])
            .current_dir(d.path())
            .env("NO_COLOR", no_color)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("tab (U+0009)"), "{text}");
        assert_eq!(
            text.contains("\x1b[1;33mwarning:\x1b[0m") && text.contains("\x1b[1;31mcutf8:"),
            want,
            "NO_COLOR={no_color:?}: {text:?}"
        );
    }
}
