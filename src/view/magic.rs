//! The one guard against a raw file that would begin with the magic number
//! (docs/behaviour.md, "The mount": it would read back as something else, so such a change fails).

use cutf8::MAGIC;

use super::Error;

/// The first eight bytes a file would have after writing `data` at
/// `offset` over `head` (its current first bytes, fewer when it is
/// shorter); None if it would be shorter than eight bytes.
pub fn head_after(head: &[u8], offset: u64, data: &[u8]) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    let end = offset.saturating_add(data.len() as u64);
    for (i, b) in out.iter_mut().enumerate() {
        let i64 = i as u64;
        if i64 >= offset && i64 < end {
            *b = data[(i64 - offset) as usize];
        } else if i < head.len() {
            *b = head[i];
        } else if i64 < offset {
            *b = 0; // a hole before the write
        } else {
            return None;
        }
    }
    Some(out)
}

/// Fails with [`Error::MagicOnRaw`] when writing `data` at `offset` over a
/// file beginning with `head` would make it begin with the magic number
/// (also when `head` already does and the write leaves it: a corrected
/// file's view turned raw).
pub fn guard(head: &[u8], offset: u64, data: &[u8]) -> Result<(), Error> {
    match head_after(head, offset, data) {
        Some(h) if h == MAGIC => Err(Error::MagicOnRaw),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_after_writes() {
        let m = MAGIC;
        assert_eq!(head_after(&[], 0, &m), Some(m));
        assert_eq!(head_after(&m[..4], 4, &m[4..]), Some(m));
        // A hole before the write reads as zeros.
        let mut holed = m;
        holed[4] = 0;
        assert_eq!(head_after(&m[..4], 5, &m[5..]), Some(holed));
        assert_eq!(head_after(b"abc", 1, b"x"), None);
        assert_eq!(head_after(b"abcdefghij", 2, b"XY"), Some(*b"abXYefgh"));
    }

    #[test]
    fn guard_refuses_exactly_the_magic() {
        let raw = [0xEF, 0xB7, 0x9D, 0xED, b'x', b'y'];
        assert_eq!(
            guard(&raw, 4, &[0xB2, 0xAE, 0x00, 0x0A]),
            Err(Error::MagicOnRaw)
        );
        assert_eq!(guard(&raw, 4, &[0xB2, 0xAE, 0x00]), Ok(()));
        assert_eq!(guard(&raw, 8, &MAGIC), Ok(()));
        assert_eq!(guard(&raw, 0, &MAGIC), Err(Error::MagicOnRaw));
        assert_eq!(guard(&[], 0, &MAGIC[..7]), Ok(()));
        // A view that already begins with the magic number cannot go raw.
        assert_eq!(guard(&MAGIC, 9, b"x"), Err(Error::MagicOnRaw));
        assert_eq!(guard(&MAGIC, 7, b"x"), Ok(()));
    }
}
