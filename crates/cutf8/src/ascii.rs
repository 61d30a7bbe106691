//! Finding the end of an ASCII run (the fast path both converters take
//! first) and a zero byte, without vector instructions.
//!
//! Portable word-at-a-time code: four `usize` words (32 bytes on 64-bit
//! targets) are OR-ed and tested against the high bits at once, which LLVM
//! turns into vector loads on x86_64 and aarch64; a byte loop finishes. Both
//! sides of ASCII are identical in Corrected UTF-8 and UTF-8, so a run is a
//! plain copy.

const WORD: usize = core::mem::size_of::<usize>();
const HIGH: usize = usize::from_ne_bytes([0x80; WORD]);
const STRIDE: usize = 4 * WORD;

/// Number of leading ASCII bytes in `s` (the index of the first byte ≥ 0x80,
/// or `s.len()`).
#[inline]
pub fn ascii_prefix_len(s: &[u8]) -> usize {
    let mut i = 0;
    while i + STRIDE <= s.len() {
        let w = |k: usize| {
            let mut b = [0u8; WORD];
            b.copy_from_slice(&s[i + k * WORD..i + (k + 1) * WORD]);
            usize::from_ne_bytes(b)
        };
        if (w(0) | w(1) | w(2) | w(3)) & HIGH != 0 {
            break;
        }
        i += STRIDE;
    }
    while i < s.len() && s[i] < 0x80 {
        i += 1;
    }
    i
}

const ONES: usize = usize::from_ne_bytes([0x01; WORD]);

/// Index of the first zero byte of `s`, a word at a time.
pub fn find_zero(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + WORD <= s.len() {
        let mut b = [0u8; WORD];
        b.copy_from_slice(&s[i..i + WORD]);
        let w = usize::from_ne_bytes(b);
        // A byte of `w` is zero where borrowing into it sets its high bit
        // that `w` has clear (exact for the first zero byte).
        if w.wrapping_sub(ONES) & !w & HIGH != 0 {
            break;
        }
        i += WORD;
    }
    s[i..].iter().position(|&b| b == 0).map(|k| i + k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(s: &[u8]) -> usize {
        s.iter().position(|&b| b >= 0x80).unwrap_or(s.len())
    }

    #[test]
    fn first_zero_byte_at_every_position() {
        for len in 0..80 {
            let mut s = vec![0x80u8; len];
            assert_eq!(find_zero(&s), None);
            for pos in 0..len {
                s[pos] = 0;
                for start in 0..=pos.min(9) {
                    assert_eq!(
                        find_zero(&s[start..]),
                        Some(pos - start),
                        "len {len} pos {pos}"
                    );
                }
                s[len - 1] = 0;
                assert_eq!(find_zero(&s), Some(pos));
                s[len - 1] = 0x80;
                s[pos] = 0x01;
            }
        }
    }

    #[test]
    fn one_high_byte_at_every_position() {
        for len in 0..100 {
            let mut s = vec![b'a'; len];
            assert_eq!(ascii_prefix_len(&s), len);
            for pos in 0..len {
                s[pos] = 0x80 | (pos as u8);
                assert_eq!(ascii_prefix_len(&s), naive(&s), "len {len} pos {pos}");
                // and at every alignment of the slice start
                for start in 0..pos.min(9) {
                    assert_eq!(ascii_prefix_len(&s[start..]), naive(&s[start..]));
                }
                s[pos] = b'a';
            }
        }
    }
}
