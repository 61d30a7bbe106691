//! Appends through descriptors opened with O_APPEND land whole at the
//! file's end as it is when each write arrives, as on one filesystem,
//! whoever else appends: another mount of the same BACKING, or a program
//! in BACKING itself. The kernel sends an append at the size it cached,
//! and nothing refreshes that size before a write, so a daemon that wrote
//! where the kernel said overwrote what others had appended since; and the
//! kernel splits a write(2) at the first page it has not cached, so two
//! appenders' lines could interleave.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::support::mount::{expected_view, wait_until, Mount};
use crate::support::write::corrected_file;

/// The magic number's length: what a corrected file's bytes in BACKING
/// start with, and appended bytes do not.
const MAGIC_LEN: usize = cutf8::MAGIC.len();

/// A second mount of `a`'s BACKING.
fn second(a: &Mount) -> Mount {
    let mnt = a.dir().join("mnt-b");
    fs::create_dir(&mnt).unwrap();
    Mount::with(&[]).on(&a.backing, &mnt, &a.dir().join("daemon-b.log"))
}

/// One open, O_APPEND write and close of `line` at `path`.
fn append_once(path: &Path, line: &str) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(line.as_bytes()).unwrap();
}

/// What BACKING holds for a file whose text is `text`.
fn on_disk(raw: bool, text: &str) -> Vec<u8> {
    if raw {
        text.as_bytes().to_vec()
    } else {
        corrected_file(text)
    }
}

/// `expected` in BACKING, and through both mounts (a mount's kernel may
/// drop what it cached of the file just after the write returned: waited
/// for, a few seconds at most).
fn all_hold(a: &Mount, b: &Mount, raw: bool, expected: &str) {
    assert_eq!(
        fs::read(a.b("f")).unwrap(),
        on_disk(raw, expected),
        "BACKING does not hold every append, in order"
    );
    for m in [a, b] {
        wait_until("the view to show every append", 5.0, || {
            fs::read(m.m("f")).unwrap() == expected.as_bytes()
        });
    }
}

fn held_descriptor_keeps_what_others_appended(raw: bool) {
    // A raw file stays raw whatever text is appended: its NUL says so.
    let first = if raw {
        "raw\0 first\n"
    } else {
        "first \u{e9}\n"
    };
    let a = Mount::new(&[], |b| {
        fs::write(b.join("f"), on_disk(raw, first)).unwrap()
    });
    let b = second(&a);
    // A service's log descriptor, kept open through mount A.
    let mut held = OpenOptions::new().append(true).open(a.m("f")).unwrap();
    let mut expected = first.to_string();
    for i in 0..3 {
        let other = format!("other mount \u{3b1} {i}\n");
        append_once(&b.m("f"), &other);
        let native = format!("in BACKING \u{4e2d} {i}\n");
        let bytes = on_disk(raw, &native);
        let bytes = if raw { &bytes[..] } else { &bytes[MAGIC_LEN..] };
        OpenOptions::new()
            .append(true)
            .open(a.b("f"))
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let mine = format!("held \u{1f600} {i}\n");
        held.write_all(mine.as_bytes()).unwrap();
        expected += &(other + &native + &mine);
    }
    drop(held);
    all_hold(&a, &b, raw, &expected);
}

#[test]
fn a_held_append_descriptor_keeps_what_another_mount_and_backing_appended_corrected() {
    held_descriptor_keeps_what_others_appended(false);
}

#[test]
fn a_held_append_descriptor_keeps_what_another_mount_and_backing_appended_raw() {
    held_descriptor_keeps_what_others_appended(true);
}

/// Lines long enough that many writes cross a page boundary.
fn line(who: &str, i: usize) -> String {
    format!(
        "{who} {i:05} {}\n",
        "\u{e9}t\u{e9} \u{3b1}\u{3b2} ".repeat(9)
    )
}

fn two_mounts_append_at_once(raw: bool) {
    const N: usize = 1000;
    let first = if raw { "raw\0\n" } else { "start\n" };
    let a = Mount::new(&[], |b| {
        fs::write(b.join("f"), on_disk(raw, first)).unwrap()
    });
    let b = second(&a);
    let (pa, pb) = (a.m("f"), b.m("f"));
    let held = std::thread::spawn(move || {
        let mut f = OpenOptions::new().append(true).open(pa).unwrap();
        for i in 0..N {
            f.write_all(line("held", i).as_bytes()).unwrap();
        }
    });
    for i in 0..N {
        append_once(&pb, &line("other", i));
    }
    held.join().unwrap();
    let disk = fs::read(a.b("f")).unwrap();
    assert_eq!(
        cutf8::has_magic(&disk),
        !raw,
        "the file changed its encoding"
    );
    // Every line is whole and in order for its writer; the two writers'
    // lines alternate as they came.
    let text = String::from_utf8(expected_view(&disk)).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    for who in ["held", "other"] {
        let mine: Vec<String> = lines
            .iter()
            .filter(|l| l.starts_with(who))
            .map(|l| format!("{l}\n"))
            .collect();
        let want: Vec<String> = (0..N).map(|i| line(who, i)).collect();
        assert_eq!(
            mine.len(),
            N,
            "{who}: {} of {N} lines whole ({} lines in all)",
            mine.len(),
            lines.len()
        );
        assert!(mine == want, "{who}: lines out of order or damaged");
    }
    assert_eq!(lines.len(), 2 * N, "lines damaged: {}", lines.len());
    let expected = format!("{first}{}", lines.join("\n") + "\n");
    all_hold(&a, &b, raw, &expected);
}

#[test]
fn two_mounts_appending_at_once_lose_and_split_no_line_corrected() {
    two_mounts_append_at_once(false);
}

#[test]
fn two_mounts_appending_at_once_lose_and_split_no_line_raw() {
    two_mounts_append_at_once(true);
}

/// Bytes a write held back because it ended inside a character at a page
/// boundary (see `write_split`) go where that write put them, not to the
/// end with the next append through another descriptor.
#[test]
fn an_append_leaves_a_character_another_write_cut_where_it_was() {
    use std::os::unix::fs::FileExt;
    let text = "0123456789abcdef".repeat(512);
    let a = Mount::new(&[], |b| {
        fs::write(b.join("f"), corrected_file(&text)).unwrap()
    });
    let w = OpenOptions::new().write(true).open(a.m("f")).unwrap();
    // "é" is C3 A9: this write ends after the C3, at the page boundary.
    w.write_all_at(&[b'x', 0xC3], 4094).unwrap();
    append_once(&a.m("f"), "end\n");
    w.write_all_at(&[0xA9], 4096).unwrap();
    drop(w);
    let expected = format!("{}x\u{e9}{}end\n", &text[..4094], &text[4097..]);
    assert!(
        fs::read(a.m("f")).unwrap() == expected.as_bytes(),
        "the view is not the writes in order"
    );
    assert!(
        fs::read(a.b("f")).unwrap() == corrected_file(&expected),
        "BACKING"
    );
}
