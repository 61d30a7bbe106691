//! A path as it may be shown to a person: the one function every command
//! uses before it prints a file name (`check`, `convert`, `migrate` and
//! the `cutf8` binary). A name in a tree someone else writes can hold
//! anything; printed raw, it could drive the terminal of whoever runs the
//! command (root, often), or forge lines of its output. Knows nothing of
//! what the path is for.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `path` as a human reads it, safe to print on a terminal: UTF-8 as is;
/// any byte that is not part of valid UTF-8, and every byte of a control
/// character (C0, DEL, C1: escape sequences, newlines, carriage returns)
/// or of a bidirectional override, as `\xNN` (and then a literal
/// backslash as `\\`, so the escaping can be undone).
pub fn display_path(path: &Path) -> String {
    let bytes = path.as_os_str().as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(unsafe_to_show) => s.to_owned(),
        _ => {
            let mut out = String::new();
            for chunk in bytes.utf8_chunks() {
                for c in chunk.valid().chars() {
                    if c == '\\' {
                        out.push_str("\\\\");
                    } else if unsafe_to_show(c) {
                        for b in c.encode_utf8(&mut [0; 4]).bytes() {
                            out.push_str(&format!("\\x{b:02X}"));
                        }
                    } else {
                        out.push(c);
                    }
                }
                for b in chunk.invalid() {
                    out.push_str(&format!("\\x{b:02X}"));
                }
            }
            out
        }
    }
}

/// Control characters and the bidirectional embeddings, overrides and
/// isolates, which change how the rest of a line reads.
fn unsafe_to_show(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn non_utf8_paths_are_escaped_reversibly() {
        let p = Path::new(OsStr::from_bytes(b"a\\b\xFFc"));
        assert_eq!(display_path(p), "a\\\\b\\xFFc");
        assert_eq!(display_path(Path::new("a\\b")), "a\\b");
    }

    #[test]
    fn control_characters_and_bidi_overrides_are_escaped() {
        let p = Path::new("a\\\x1b[2J\nb");
        assert_eq!(display_path(p), "a\\\\\\x1B[2J\\x0Ab");
        assert_eq!(display_path(Path::new("\u{202e}x")), "\\xE2\\x80\\xAEx");
        assert_eq!(display_path(Path::new("caf\u{e9}")), "caf\u{e9}");
    }
}
