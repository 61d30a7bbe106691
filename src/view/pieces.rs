//! Where to end what a write of text puts in BACKING now, when the kernel
//! may have cut it in two: a write(2) that crosses a page boundary of a
//! page not in the kernel's cache arrives as two WRITE requests, cut at the
//! boundary, and a daemon killed between them must leave no half
//! character. Pure: the old view bytes it needs are read by the caller
//! (`fs::state::write`, which holds the rest back, `HeldBytes`).

/// Where the kernel cuts a write that crosses one when the page it
/// starts in is not cached.
pub const PAGE: u64 = 4096;

/// How far before a write's end [`piece_end`] looks for a place where the
/// old text begins a character.
pub const LOOK_BACK: usize = 64;

/// Where to end what is written now of `data`, a write at view offset
/// `offset`, when it ends on a page boundary (where the kernel cuts a
/// longer write in two) inside a character: its own last one, incomplete,
/// or an old one whose first bytes it overwrites and whose last bytes
/// follow its end. The bytes from there wait for the next piece
/// (`HeldBytes`), so a daemon killed between the pieces leaves no half
/// character in BACKING. The place is the last one at most `LOOK_BACK`
/// bytes back where both the new and the old text begin a character (or
/// the write's start); failing that, where the new text's last character
/// begins. `old`: the old view bytes from `offset + from` to one past the
/// write's end (fewer, or none, past the file's end). `None`: nothing to
/// hold.
pub fn piece_end(offset: u64, data: &[u8], from: usize, old: &[u8]) -> Option<usize> {
    let end = offset.checked_add(data.len() as u64)?;
    if !end.is_multiple_of(PAGE) || data.is_empty() {
        return None;
    }
    let incomplete = incomplete_last(data);
    let new_starts = |k: usize| {
        if k == data.len() {
            incomplete.is_none()
        } else {
            !cutf8::unit::is_cont(data[k])
        }
    };
    let old_starts = |k: usize| old.get(k - from).is_none_or(|&b| !cutf8::unit::is_cont(b));
    (from..=data.len())
        .rev()
        .find(|&k| k == 0 || (new_starts(k) && old_starts(k)))
        .map_or(incomplete, |k| (k < data.len()).then_some(k))
}

/// Where the last character of `data` begins, when it is incomplete.
fn incomplete_last(data: &[u8]) -> Option<usize> {
    let k = data.iter().rposition(|&b| !cutf8::unit::is_cont(b))?;
    matches!(
        cutf8::unit::decode_view_unit(&data[k..], false),
        cutf8::unit::ViewUnit::Incomplete
    )
    .then_some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever text a write of text puts over whatever text, ending
        /// at a page boundary: what is written now ends at the last place
        /// (at most `LOOK_BACK` back) where the result is whole text.
        #[test]
        fn the_first_piece_ends_where_the_text_is_whole(
            new in "\\PC{1,40}",
            old in "\\PC{1,60}",
        ) {
            let data = new.as_bytes();
            let o = PAGE as usize - data.len();
            let view = ["a".repeat(o).as_bytes(), old.as_bytes()].concat();
            let from = data.len().saturating_sub(LOOK_BACK);
            let hi = (PAGE as usize + 1).min(view.len());
            let slice = view.get(o + from..hi).unwrap_or(&[]);
            let k = piece_end(o as u64, data, from, slice).unwrap_or(data.len());
            let with = |k: usize| {
                let mut v = view.clone();
                if v.len() < o + k {
                    v.resize(o + k, 0);
                }
                v[o..o + k].copy_from_slice(&data[..k]);
                v
            };
            let whole = |k: usize| std::str::from_utf8(&with(k)).is_ok();
            let best = (from..=data.len()).rev().find(|&k| whole(k));
            // (None: no whole place within reach; the new text's rule then.)
            prop_assume!(best.is_some());
            prop_assert_eq!(Some(k), best, "cut at {} of {:?} over {:?}", k, new, old);
        }
    }

    #[test]
    fn a_write_ending_inside_a_character_at_a_page_boundary_is_cut_before_it() {
        let at = |end: u64, n: usize| end - n as u64;
        // Not on a page boundary: nothing held.
        assert_eq!(piece_end(10, "abc\u{800}".as_bytes(), 0, &[]), None);
        // Its own last character cut (an append: no old bytes).
        let d = [b'a', b'b', 0xE0];
        assert_eq!(piece_end(at(4096, 3), &d, 0, &[]), Some(2));
        // Whole and nothing old cut: nothing held.
        assert_eq!(piece_end(at(8192, 3), b"abc", 0, &[]), None);
        // Old text E0 A0 81 at 4095..4098, its lead overwritten by 'e':
        // the 'e' waits, so A0 81 are never stray.
        // (`old` from 4094, as `from` 1 says, to 4096.)
        let old = [b'y', 0xE0, 0xA0];
        assert_eq!(piece_end(at(4096, 3), b"tze", 1, &old), Some(2));
        // Both cut at the same place: cut once.
        let d = [b'q', b'r', 0xE0, 0xA0];
        let old = [b'u', b'v', 0xE0, 0xA1, 0x81];
        assert_eq!(piece_end(at(4097, 4) - 1, &d, 0, &old), Some(2));
        // Old characters of two bytes under new ones of three: back to
        // where both begin one.
        let d = "\u{800}\u{801}".as_bytes(); // E0 A0 80 E0 A0 81
        let old = [0xC3, 0xA9, b'a', 0xC3, 0xA9, 0xC3];
        assert_eq!(piece_end(at(4096, 5), &d[..5], 0, &old), Some(3));
        let old = "ééé".as_bytes(); // C3 A9 ×3: no common place but the start
        assert_eq!(piece_end(at(4096, 5), &d[..5], 0, old), Some(0));
        // The whole write inside one old character: all of it waits.
        let old = [0xE0, 0xA0, 0x80];
        assert_eq!(piece_end(at(4096, 1), b"z", 0, &old[1..]), Some(0));
        // No common place within reach: only the new text's rule.
        let d = vec![b'a'; 100];
        let old = vec![0x80; 37];
        assert_eq!(piece_end(at(4096, 100), &d, 64, &old), None);
    }
}
