//! Content sniffing: whether the first write to an empty file makes it a
//! corrected file.

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
}
