//! Fewer round trips per file, same behaviour. The daemon
//! answers FLUSH with ENOSYS (it buffers nothing), so the kernel stops
//! sending it; close(2) must still write a shared mapping's dirty pages
//! back before it returns, as it did when FLUSH was answered.

use std::fs::{self, OpenOptions};
use std::io::Write;

use crate::support::mount::Mount;

/// Writes `new` at offset 1 of `rel` through a shared mapping, closes the
/// descriptor with the mapping still alive, and returns what the mount
/// and BACKING hold right after the close.
fn map_write_close(m: &Mount, rel: &str, new: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m(rel))
        .unwrap();
    // SAFETY: the file is not changed by anything else during the test.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&f) }.unwrap();
    map[1..1 + new.len()].copy_from_slice(new);
    drop(f); // close(2): the mapping stays
    let after = (fs::read(m.m(rel)).unwrap(), fs::read(m.b(rel)).unwrap());
    drop(map);
    after
}

#[test]
fn close_writes_back_a_shared_mapping_without_flush() {
    let m = Mount::new(&[], |b| {
        fs::write(b.join("raw.bin"), b"\x00\x01binary\xff\xfe data").unwrap();
    });
    // A first open and close: the kernel asks FLUSH once and, told ENOSYS,
    // never again for this mount.
    fs::OpenOptions::new()
        .append(true)
        .open(m.m("raw.bin"))
        .unwrap()
        .write_all(b"!")
        .unwrap();
    for round in 0..3u8 {
        let new = [b'A' + round; 4];
        let (view, disk) = map_write_close(&m, "raw.bin", &new);
        assert_eq!(
            &view[1..5],
            &new,
            "round {round}: the mount lost the mapped write"
        );
        assert_eq!(
            &disk[1..5],
            &new,
            "round {round}: BACKING lacks the mapped write after close(2)"
        );
    }
    // A text file written through the mount is stored corrected; its
    // mapped writes reach BACKING as Corrected UTF-8 by close(2) too.
    fs::write(m.m("t.txt"), "héllo wörld, plain text\n").unwrap();
    let mut want = "héllo wörld, plain text\n".as_bytes().to_vec();
    want[1..4].copy_from_slice(b"ELL");
    let (view, disk) = map_write_close(&m, "t.txt", b"ELL");
    assert_eq!(view, want);
    assert!(
        cutf8::has_magic(&disk),
        "the text file should be stored corrected"
    );
    assert_eq!(
        crate::support::mount::expected_view(&disk),
        want,
        "BACKING lacks the mapped write to a corrected file after close(2)"
    );
}
