//! One write(2) of whole text reaches the mount as two requests when it
//! crosses a page boundary and the page it starts in is not cached: the
//! kernel cuts it at the boundary, maybe inside a character. Found by the
//! text exerciser (seed 1795449549791258319): the first piece's incomplete
//! last character, followed by the continuation bytes of the character it
//! overwrites, is something Corrected UTF-8 cannot store, and the file
//! turned raw for good though the writer wrote only text.
//!
//! The mount holds such a lead back and joins it with the next request
//! (`HeldBytes` in src/fs/state/content/mod.rs); what is not continued is written as it is
//! before anything else reads or changes the file, with the effect docs/behaviour.md ("The mount") gives it.
//! An append cut the same way is held too (found by the crash test, seed
//! 1795727095209325659: a daemon killed between the two pieces left a
//! corrected file ending in half a character), and so is any other write
//! cut inside a character (seed 1795949087798346993: half a character in
//! the middle of a corrected file).

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;

use crate::support::mount::{corrected, expected_view, wait_for, Mount};

/// A view whose character at 4095..4099 is U+10400 (F0 90 90 80): a new
/// three-byte character written at 4095 leaves its lead E0 before the
/// old continuation bytes 90 90 80 when the kernel cuts at 4096 — an
/// overlong form W cannot store.
fn straddling_view() -> Vec<u8> {
    let mut v = "aé中\n".repeat(4095 / 7).into_bytes();
    v.resize(4095, b'x');
    v.extend_from_slice("𐐀 and more text after the page boundary\n".as_bytes());
    v.extend_from_slice(&"ࠀ line two 中文 😀\n".repeat(300).into_bytes());
    v
}

fn mount_with(view: &[u8]) -> Mount {
    let disk = corrected(&cutf8::encode_strict(view).unwrap());
    Mount::new(&[], |b| fs::write(b.join("t.txt"), &disk).unwrap())
}

fn backing_view(m: &Mount) -> Option<Vec<u8>> {
    let b = fs::read(m.b("t.txt")).unwrap();
    cutf8::has_magic(&b).then(|| cutf8::decode_strict(&b[cutf8::MAGIC.len()..]).unwrap())
}

#[test]
fn a_write_cut_by_the_kernel_inside_a_character_keeps_the_file_corrected() {
    let mut view = straddling_view();
    let m = mount_with(&view);
    // Not read through the mount first: the page is not cached, so the
    // kernel cuts the write at 4096, between E0 and A2 9A of U+089A.
    let new = "𐅨𐕓\u{89a}oi, a write across the page boundary".as_bytes();
    assert_eq!(&new[8..11], &[0xE0, 0xA2, 0x9A]);
    let f = OpenOptions::new().write(true).open(m.m("t.txt")).unwrap();
    f.write_all_at(new, 4087).unwrap();
    view[4087..4087 + new.len()].copy_from_slice(new);
    drop(f);
    assert_eq!(
        backing_view(&m).as_deref(),
        Some(&view[..]),
        "the file must stay corrected and hold the text; log:\n{}",
        m.log_text()
    );
    assert!(fs::read(m.m("t.txt")).unwrap() == view);
    assert!(!m.log_text().contains("now raw"), "{}", m.log_text());
}

#[test]
fn a_lead_nothing_continues_is_written_as_it_is_before_a_read() {
    let mut view = straddling_view();
    let m = mount_with(&view);
    // The writer's own write ends at 4096 inside a character: what it
    // leaves (E0 then the old 90 90 80) is what the file holds, and W
    // cannot store it, so the file turns raw (docs/behaviour.md, "The mount") — but only once
    // something looks, and with every byte as written.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.m("t.txt"))
        .unwrap();
    f.write_all_at(&[b'y', 0xE0], 4094).unwrap();
    view[4094] = b'y';
    view[4095] = 0xE0;
    let mut got = vec![0u8; 16];
    f.read_exact_at(&mut got, 4088).unwrap();
    assert_eq!(got, view[4088..4104]);
    drop(f);
    let mut all = Vec::new();
    fs::File::open(m.m("t.txt"))
        .unwrap()
        .read_to_end(&mut all)
        .unwrap();
    assert!(all == view, "the mount must read back what was written");
    assert_eq!(backing_view(&m), None, "W cannot store it: raw");
    assert!(fs::read(m.b("t.txt")).unwrap() == view);
}

#[test]
fn a_held_lead_is_written_at_close_and_at_fsync() {
    for sync in [false, true] {
        let mut view = straddling_view();
        let m = mount_with(&view);
        let f = OpenOptions::new().write(true).open(m.m("t.txt")).unwrap();
        f.write_all_at(&[0xE0], 4095).unwrap();
        view[4095] = 0xE0;
        if sync {
            f.sync_all().unwrap();
            assert!(fs::read(m.b("t.txt")).unwrap() == view, "fsync");
        }
        drop(f);
        // The release that writes it follows close(2) (FLUSH is not
        // answered: the mount buffers nothing else).
        assert!(
            wait_for(5.0, || fs::read(m.b("t.txt")).unwrap() == view),
            "close"
        );
        assert!(fs::read(m.m("t.txt")).unwrap() == view);
    }
}

/// A corrected file of `n` view bytes of text, every character complete.
fn text_of(n: usize) -> Vec<u8> {
    let mut v = "aé中\n".repeat(n / 7 + 1).into_bytes();
    v.truncate(n - n % 7);
    v.resize(n, b'x');
    v
}

fn strict_view(m: &Mount) -> Result<Vec<u8>, cutf8::ConvertError> {
    let b = fs::read(m.b("t.txt")).unwrap();
    assert!(
        cutf8::has_magic(&b),
        "the file turned raw:\n{}",
        m.log_text()
    );
    cutf8::decode_strict(&b[cutf8::MAGIC.len()..])
}

#[test]
fn an_append_cut_inside_a_character_leaves_no_half_character_in_backing() {
    // An append the kernel cuts at a page boundary inside a character
    // (here the writer's own write ends there; the kernel's cut of a longer
    // write looks the same to the mount): the lead waits for the rest, so
    // BACKING never holds half a character, and a daemon killed before the
    // rest came leaves a strict Corrected UTF-8 file. attr_timeout=0: every
    // stat asks the daemon.
    for continued in [true, false] {
        let mut view = text_of(4000);
        let disk = corrected(&cutf8::encode_strict(&view).unwrap());
        let m = Mount::new(&["attr_timeout=0"], |b| {
            fs::write(b.join("t.txt"), &disk).unwrap()
        });
        let f = OpenOptions::new().append(true).open(m.m("t.txt")).unwrap();
        let mut piece = text_of(95);
        piece.push(0xE0); // U+0800's lead, at 4095
        std::io::Write::write_all(&mut &f, &piece).unwrap();
        view.extend_from_slice(&piece);
        assert_eq!(view.len(), 4096);
        assert_eq!(
            strict_view(&m).expect("half a character in BACKING"),
            view[..4095],
            "the lead is held, the rest written"
        );
        assert_eq!(
            fs::metadata(m.m("t.txt")).unwrap().len(),
            4096,
            "stat counts it"
        );
        if continued {
            let rest = "\u{800}".as_bytes()[1..].to_vec();
            std::io::Write::write_all(&mut &f, &[&rest[..], "ok\n".as_bytes()].concat()).unwrap();
            view.extend_from_slice(&rest);
            view.extend_from_slice(b"ok\n");
            assert_eq!(strict_view(&m).unwrap(), view, "joined with the rest");
        }
        drop(f);
        // Not continued: the writer left half a character, and at close the
        // file holds what it wrote, as a native file would.
        assert!(
            wait_for(5.0, || expected_view(&fs::read(m.b("t.txt")).unwrap())
                == view),
            "close"
        );
        assert_eq!(strict_view(&m).is_ok(), continued);
        assert!(fs::read(m.m("t.txt")).unwrap() == view);
    }
}

/// An overwrite the kernel cut at a page boundary: `old` follows 4095
/// bytes of text, the writer's own write `first` at `at` ends at 4096 (the
/// kernel's cut of a longer write looks the same to the mount), `held` of
/// its bytes wait, and `rest` at 4096 continues it.
struct Cut {
    what: &'static str,
    old: &'static str,
    at: usize,
    first: &'static [u8],
    held: usize,
    rest: &'static [u8],
}

#[test]
fn an_overwrite_cut_inside_a_character_leaves_no_half_character_in_backing() {
    let cuts = [
        // Found by the crash test (seed 1795949087798346993): a new lead
        // over ASCII is storable (a truncated sequence, passed through),
        // and a daemon killed between the two pieces left a lone E0 in a
        // corrected file.
        Cut {
            what: "U+0800's lead over the 'x' at 4095",
            old: "xyz ascii after the page boundary\n",
            at: 4095,
            first: &[0xE0],
            held: 1,
            rest: &[0xA0, 0x80],
        },
        // Seed 1795950046801466606: whole text over the lead of an old
        // character whose continuation bytes are past the boundary, which
        // would be stray bytes in BACKING. (4094 is the '\n' of the text
        // before: a character's start.)
        Cut {
            what: "'e' over U+0800's lead at 4095",
            old: "\u{800}yz then ascii\n",
            at: 4094,
            first: b"Ze",
            held: 1,
            rest: b"fg",
        },
    ];
    for (cut, continued) in cuts.iter().flat_map(|c| [(c, true), (c, false)]) {
        let what = format!("{} (continued: {continued})", cut.what);
        let mut view = text_of(4095);
        view.extend_from_slice(cut.old.as_bytes());
        view.extend_from_slice(&text_of(2000));
        let disk = corrected(&cutf8::encode_strict(&view).unwrap());
        let m = Mount::new(&[], |b| fs::write(b.join("t.txt"), &disk).unwrap());
        let f = OpenOptions::new().write(true).open(m.m("t.txt")).unwrap();
        f.write_all_at(cut.first, cut.at as u64).unwrap();
        let written = cut.first.len() - cut.held;
        view[cut.at..cut.at + written].copy_from_slice(&cut.first[..written]);
        assert_eq!(
            strict_view(&m).expect("half a character in BACKING"),
            view,
            "{what}: the cut character waits, the rest is written"
        );
        view[cut.at..4096].copy_from_slice(cut.first);
        if continued {
            f.write_all_at(cut.rest, 4096).unwrap();
            view[4096..4096 + cut.rest.len()].copy_from_slice(cut.rest);
            assert_eq!(strict_view(&m).unwrap(), view, "{what}: joined");
        }
        drop(f);
        // Not continued: at close the file holds what the writer left, as
        // a native file would (passed through as it is).
        assert!(
            wait_for(5.0, || expected_view(&fs::read(m.b("t.txt")).unwrap())
                == view),
            "{what}: close"
        );
        assert_eq!(strict_view(&m).is_ok(), continued, "{what}");
        assert!(fs::read(m.m("t.txt")).unwrap() == view, "{what}");
    }
}
