//! Content sniffing, pure (bytes in, a verdict out): whether the first
//! write to an empty file makes it a corrected file ([`is_text`]), and
//! whether a file is a script that must stay raw ([`is_script`]) — the one
//! rule both the mount's new files (`fs::rawnew`) and `cutf8 migrate`
//! (`migrate::transcode`) follow.

/// Whether `data` is text a new file is corrected for: UTF-8 (a sequence
/// cut at the very end may be finished by the next write) without U+0000
/// and without C1 controls. One validation pass; the C1 controls (C2 80 …
/// C2 9F) are then found by their lead byte.
pub fn is_text(data: &[u8]) -> bool {
    if memchr::memchr(0, data).is_some() {
        return false;
    }
    let valid = match simdutf8::compat::from_utf8(data) {
        Ok(_) => data.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return false,
    };
    // In valid UTF-8, C2 is always a lead byte: U+0080..U+00BF.
    !memchr::memchr_iter(0xC2, &data[..valid])
        .any(|i| data.get(i + 1).is_some_and(|&b| (0x80..=0x9F).contains(&b)))
}

/// Whether a file beginning with `head` is a script the kernel runs
/// through an interpreter, so that its bytes in BACKING must stay exactly
/// as written: a magic number in front of `#!` would make it fail with
/// "Exec format error" when run from BACKING.
///
/// The kernel's rule (fs/binfmt_script.c): the file begins with `#!`;
/// spaces and tabs may follow; then the interpreter's name runs up to the
/// next space, tab or newline. A first line of `#!` and blanks only names
/// no interpreter: the kernel refuses it (ENOEXEC), so it is not a script.
/// The kernel takes any name, so one more rule keeps Rust sources text:
/// Rust's lexer (`rustc_lexer::strip_shebang`) does not take `#!` for a
/// shebang when the next token after it is `[`, because `#![no_std]`,
/// `#![cfg_attr(...)]` and the like are inner attributes, which open many
/// `lib.rs` and `main.rs` files. So `#![` — blanks allowed between, as the
/// lexer skips whitespace — is not a script.
///
/// `head` may be cut short (the first write into a new file): when it
/// ends before the interpreter's first character, the file is taken for
/// a script, so that it stays raw whatever the next write brings.
pub fn is_script(head: &[u8]) -> bool {
    let Some(rest) = head.strip_prefix(b"#!") else {
        return false;
    };
    match rest.iter().find(|&&b| b != b' ' && b != b'\t') {
        None => true,
        Some(b'\n' | b'[') => false,
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_detection() {
        assert!(is_text(b"plain\n"));
        assert!(is_text("中文".as_bytes()));
        assert!(
            is_text(&"中文".as_bytes()[..4]),
            "a character cut at the end is still text"
        );
        assert!(!is_text(b"nul\0"));
        assert!(!is_text(&[0xC2, 0x85]));
        assert!(!is_text("a\u{9F}b".as_bytes()));
        assert!(is_text("a\u{A0}b\u{BF}".as_bytes()));
        assert!(!is_text(&[0xFF, b'a']));
        assert!(!is_text(&[0xC0, 0xAF]));
        // A C2 cut at the end: its continuation is not known yet.
        assert!(is_text(&[b'a', 0xC2]));
    }

    #[test]
    fn scripts_by_the_kernels_rule_less_rusts_inner_attributes() {
        for script in [
            &b"#!/bin/sh\necho hi\n"[..],
            b"#! /usr/bin/env python3\n",
            b"#!\t/bin/bash -e\n",
            b"#!perl\n",
            // Cut before the interpreter: may still become one.
            b"#!",
            b"#!  ",
        ] {
            assert!(is_script(script), "{:?}", String::from_utf8_lossy(script));
        }
        for not in [
            &b"#![no_std]\n"[..],
            b"#![cfg_attr(not(test), no_main)]\n",
            b"#! [allow(dead_code)]\n",
            b"#!\n",
            b"#! \t\nnext line\n",
            b" #!/bin/sh\n",
            b"#/bin/sh\n",
            b"",
            b"#",
            "\u{FEFF}#!/bin/sh\n".as_bytes(),
        ] {
            assert!(!is_script(not), "{:?}", String::from_utf8_lossy(not));
        }
    }
}
