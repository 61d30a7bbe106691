//! Large files of text dense in the units whose length differs
//! between disk and view (U+0800–U+089F, U+10000–U+1109F), written through
//! the mount as `cp` writes them, in 128 KiB pieces that cut characters.
//!
//! Such a file's offset index holds a step per 4 KiB block. The daemon used
//! to copy the whole index before every write, which made `cp` quadratic in
//! the file's size (512 MiB took 3.5 s where 256 MiB took 1.0 s). Timings
//! are `scripts/bench-write.sh`'s (`cp-dense`); here the bytes must be
//! exact, and the daemon's log must show the index changed in place: it
//! logs (at debug level) every copy of an index it has to make for a write.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;

use crate::support::mount::{corrected, Mount};

const COPIED: &str = "is shared; copied";

/// `len` bytes (about) of UTF-8 text, a fifth of whose characters grow on
/// the way to the view, the rest ASCII, Latin, Cyrillic, CJK and emoji.
fn dense_text(len: usize, mut seed: u64) -> String {
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut s = String::with_capacity(len + 8);
    while s.len() < len {
        let r = next();
        let c = match r % 10 {
            0 => char::from_u32(0x0800 + (r >> 8) as u32 % 0xA0),
            1 => char::from_u32(0x1_0000 + (r >> 8) as u32 % 0x10A0),
            2 => Some('\n'),
            3 => Some(['é', 'ж', '中', '😀'][(r >> 8) as usize % 4]),
            _ => Some((b'a' + (r >> 8) as u8 % 26) as char),
        };
        s.push(c.unwrap());
    }
    s
}

fn encode(view: &[u8]) -> Vec<u8> {
    corrected(&cutf8::encode_strict(view).unwrap())
}

fn copies(m: &Mount) -> usize {
    m.log_text().matches(COPIED).count()
}

#[test]
fn a_dense_file_written_in_pieces_is_exact_and_its_index_is_not_copied() {
    let m = Mount::with(&[])
        .env("RUST_LOG", "info,cutf8fs::fs::state::content=debug")
        .fresh(|_| {});
    let mut view = dense_text(96 << 20, 0x5eed).into_bytes();
    let pieces = view.len().div_ceil(128 << 10);
    {
        let mut f = fs::File::create(m.m("dense.txt")).unwrap();
        for piece in view.chunks(128 << 10) {
            f.write_all(piece).unwrap();
        }
    }
    assert_eq!(
        fs::metadata(m.m("dense.txt")).unwrap().len(),
        view.len() as u64
    );
    assert!(
        fs::read(m.b("dense.txt")).unwrap() == encode(&view),
        "BACKING is not magic + W(text) after the pieces"
    );
    assert!(
        fs::read(m.m("dense.txt")).unwrap() == view,
        "reads back wrong"
    );
    let after_cp = copies(&m);
    assert!(
        after_cp <= pieces / 20,
        "{after_cp} of {pieces} writes copied the file's index"
    );

    // In-place changes that keep the view's length: characters swapped for
    // others of the same UTF-8 length whose disk length differs (the text
    // after them shifts under the journal) or not (a patch in place), in
    // the middle of one open, then an append and a cut.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m("dense.txt"))
        .unwrap();
    let mut at = 1 << 20;
    for (i, (old, new)) in [("a", "b"), ("ࠀ", "中"), ("中", "ࠀ"), ("𐀀", "😀")]
        .iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        // The next occurrence of `old`, well apart from the last change.
        let found = view[at..]
            .windows(old.len())
            .position(|w| w == old.as_bytes())
            .unwrap();
        let pos = at + found;
        view[pos..pos + new.len()].copy_from_slice(new.as_bytes());
        f.write_all_at(new.as_bytes(), pos as u64).unwrap();
        at = (pos + 1 + (i % 7) * (13 << 20)) % (view.len() - (2 << 20));
    }
    let tail = dense_text(3 << 20, 7);
    f.write_all_at(tail.as_bytes(), view.len() as u64).unwrap();
    view.extend_from_slice(tail.as_bytes());
    let cut = view.len() - (5 << 20);
    let cut = (cut..).find(|&i| (view[i] as i8) >= -0x40).unwrap();
    f.set_len(cut as u64).unwrap();
    view.truncate(cut);
    drop(f);
    assert_eq!(
        fs::metadata(m.m("dense.txt")).unwrap().len(),
        view.len() as u64
    );
    assert!(
        fs::read(m.b("dense.txt")).unwrap() == encode(&view),
        "BACKING is not magic + W(text) after the changes"
    );
    assert!(
        fs::read(m.m("dense.txt")).unwrap() == view,
        "reads back wrong"
    );
    let all = copies(&m);
    assert!(
        all <= after_cp + 3,
        "{} of 15 changes copied the file's index",
        all - after_cp
    );
}
