//! The `cutf8` binary as a user runs it: encode, decode and check on temp
//! files and stdin, their messages, exit statuses and outputs; plus the
//! check that man/cutf8.1 is what the binary generates.
//!
//! Expected positions are computed here from the test's own input (how many
//! characters precede the bad unit), never read back from the program.
//! Conversions run with the default buffer and with 1- and 7-byte chunks
//! (the hidden `--buffer-size`), so every unit also lands across a chunk
//! edge.

use crate::support::cli::{cutf8, with_magic, Dir};
use rand::{Rng, SeedableRng};

use cutf8::MAGIC;

/// Chunk sizes every conversion test runs with ("" = the default).
const CHUNKS: [&str; 3] = ["1", "7", ""];

/// `args` plus `--buffer-size N` unless `chunk` is empty.
fn args_with<'a>(args: &[&'a str], chunk: &'a str) -> Vec<&'a str> {
    let mut v = args.to_vec();
    if !chunk.is_empty() {
        v.push("--buffer-size");
        v.push(chunk);
    }
    v
}

/// docs/format.md's worked examples: (disk bytes, code point).
const EXAMPLES: &[(&[u8], u32)] = &[
    (&[0x2F], 0x2F),
    (&[0xC0, 0xAF], 0xCF),
    (&[0xC0, 0x80], 0xA0),
    (&[0xDF, 0xBF], 0x89F),
    (&[0xE0, 0x80, 0x80], 0x8A0),
    (&[0xEC, 0xBD, 0x9F], 0xD7FF),
    (&[0xEC, 0xBD, 0xA0], 0xE000),
    (&[0xEF, 0xBF, 0xBF], 0x1109F),
    (&[0xF0, 0x80, 0x80, 0x80], 0x110A0),
    (&[0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF], 0x8421109F),
];

/// View (UTF-8, or docs/format.md's extended form) of `cp`, written out by hand.
fn view(cp: u32) -> Vec<u8> {
    if let Some(c) = char::from_u32(cp) {
        return c.to_string().into_bytes();
    }
    // Shortest RFC 2279 form, or FE plus six continuation bytes.
    let len = match cp {
        0x11_0000..=0x1F_FFFF => 4,
        0x20_0000..=0x3FF_FFFF => 5,
        0x400_0000..=0x7FFF_FFFF => 6,
        _ => 7,
    };
    let mut v = vec![0u8; len];
    let mut p = cp as u64;
    for k in (1..len).rev() {
        v[k] = 0x80 | (p & 0x3F) as u8;
        p >>= 6;
    }
    v[0] = [0, 0, 0, 0, 0xF0, 0xF8, 0xFC, 0xFE][len] | p as u8;
    v
}

#[test]
fn spec_worked_examples_encode_and_decode() {
    for &(disk, cp) in EXAMPLES {
        let v = view(cp);
        for chunk in CHUNKS {
            let what = format!("U+{cp:04X}, chunk {chunk:?}");
            if cp <= 0x10_FFFF {
                cutf8(&args_with(&["encode"], chunk), &v)
                    .ok()
                    .stdout_is(&with_magic(disk), &what);
                cutf8(&args_with(&["decode"], chunk), &with_magic(disk))
                    .ok()
                    .stdout_is(&v, &what);
                // --no-magic: known to be Corrected without it.
                cutf8(&args_with(&["decode", "--no-magic"], chunk), disk)
                    .ok()
                    .stdout_is(&v, &what);
            } else {
                // No standard form: strict refuses, lossless converts.
                cutf8(&args_with(&["decode", "--no-magic"], chunk), disk).exits(1);
                cutf8(&args_with(&["encode"], chunk), &v).exits(1);
            }
            cutf8(
                &args_with(&["decode", "--lossless", "--no-magic"], chunk),
                disk,
            )
            .ok()
            .stdout_is(&v, &what);
            cutf8(
                &args_with(&["encode", "--lossless", "--no-magic"], chunk),
                &v,
            )
            .ok()
            .stdout_is(disk, &what);
        }
    }
}

#[test]
fn files_convert_in_order_into_one_output() {
    let d = Dir::new();
    d.write("a.txt", "Ïa\n".as_bytes());
    d.write("b.txt", "ࢠb\n".as_bytes());
    let r = d
        .run(&["encode", "a.txt", "-", "b.txt"], "/".as_bytes())
        .ok();
    let encoded = r.stdout.clone();
    let want = with_magic(&[0xC0, 0xAF, b'a', b'\n', 0x2F, 0xE0, 0x80, 0x80, b'b', b'\n']);
    r.stdout_is(&want, "one magic number, then each input in order");
    d.write("a.cu8", &encoded);
    d.write("b.cu8", &with_magic(b"tail\n"));
    let r = d.run(&["decode", "a.cu8", "b.cu8"], b"").ok();
    r.stdout_is(
        "Ïa\n/ࢠb\ntail\n".as_bytes(),
        "each input's magic number dropped",
    );
}

#[test]
fn output_file_and_no_magic() {
    let d = Dir::new();
    d.write("in.txt", "é\n".as_bytes());
    d.run(&["encode", "in.txt", "-o", "out.cu8"], b"")
        .ok()
        .stdout_is(b"", "nothing on stdout");
    assert_eq!(d.read("out.cu8"), with_magic(&[0xC1, 0x89, b'\n']));
    d.run(
        &["encode", "--no-magic", "in.txt", "--output", "raw.cu8"],
        b"",
    )
    .ok();
    assert_eq!(d.read("raw.cu8"), [0xC1, 0x89, b'\n']);
    d.run(&["decode", "out.cu8", "-o", "back.txt"], b"").ok();
    assert_eq!(d.read("back.txt"), "é\n".as_bytes());
    d.run(&["decode", "--no-magic", "raw.cu8", "-o", "back2.txt"], b"")
        .ok();
    assert_eq!(d.read("back2.txt"), "é\n".as_bytes());
    assert_eq!(
        d.names(),
        ["back.txt", "back2.txt", "in.txt", "out.cu8", "raw.cu8"]
    );
}

#[test]
fn output_may_name_the_input() {
    let d = Dir::new();
    let text = "line ".repeat(50_000) + "é\n";
    d.write("f", text.as_bytes());
    d.run(&["encode", "f", "-o", "f", "--buffer-size", "7"], b"")
        .ok();
    let disk = d.read("f");
    assert_eq!(&disk[..8], MAGIC);
    d.run(&["decode", "f", "-o", "f"], b"").ok();
    assert_eq!(d.read("f"), text.as_bytes());
    assert_eq!(d.names(), ["f"], "no temporary file left behind");
}

#[test]
fn failed_conversion_leaves_output_alone() {
    let d = Dir::new();
    d.write("good.txt", b"fine\n");
    d.write("bad.txt", b"ab\xC2\x85\n");
    // No output file is created...
    let r = d.run(&["encode", "good.txt", "bad.txt", "-o", "new.cu8"], b"");
    r.exits(1)
        .stderr_has(
            "cutf8: bad.txt:1:3: C1 control U+0085 (C2 85) cannot be encoded (byte offset 2)",
        )
        .stderr_has("new.cu8: not written");
    assert_eq!(d.names(), ["bad.txt", "good.txt"]);
    // ...and an existing one keeps its content, even when it is the input.
    d.write("old.cu8", b"old content");
    d.run(&["encode", "bad.txt", "-o", "old.cu8"], b"").exits(1);
    assert_eq!(d.read("old.cu8"), b"old content");
    d.run(&["encode", "bad.txt", "-o", "bad.txt"], b"").exits(1);
    assert_eq!(d.read("bad.txt"), b"ab\xC2\x85\n");
    assert_eq!(d.names(), ["bad.txt", "good.txt", "old.cu8"]);
}

#[test]
fn an_error_stops_that_input_and_the_next_one_converts() {
    let d = Dir::new();
    d.write("a", b"one\ntwo \xC0\xAF three\n");
    d.write("b", b"b\n");
    let r = d.run(&["encode", "--no-magic", "a", "b"], b"");
    // What precedes the bad unit is written, nothing after it.
    r.exits(1)
        .stderr_is(
            "cutf8: a:2:5: overlong form C0 AF of U+002F cannot be encoded (byte offset 8)\n",
        )
        .stdout_is(b"one\ntwo b\n", "prefix of a, then b");
}

#[test]
fn unreadable_input_is_named_and_exits_2() {
    let d = Dir::new();
    d.write("b", &with_magic(b"b\n"));
    let r = d.run(&["decode", "missing", "b"], b"");
    r.exits(2)
        .stderr_is("cutf8: missing: No such file or directory\n")
        .stdout_is(b"b\n", "the readable input still converts");
}

#[test]
fn encode_refuses_input_that_is_already_encoded() {
    let r = cutf8(&["encode"], &with_magic(b"x\n"));
    r.exits(1)
        .stderr_has("<stdin>:1:1: input begins with the Corrected UTF-8 magic number");
}

#[test]
fn usage_errors_exit_2() {
    cutf8(&[], b"").exits(2);
    cutf8(&["encode", "--bogus"], b"").exits(2);
    cutf8(&["frobnicate"], b"").exits(2);
    cutf8(&["check"], b"").exits(2).stderr_has("<PATH>");
    cutf8(&["check", "--allow", "no-such-rule", "x"], b"")
        .exits(2)
        .stderr_has("no-such-rule");
    cutf8(&["decode", "--buffer-size", "0"], b"").exits(2);
}

#[test]
fn help_and_version() {
    for sub in ["encode", "decode", "check"] {
        let r = cutf8(&[sub, "--help"], b"").ok();
        assert!(
            String::from_utf8_lossy(&r.stdout).contains("Usage: cutf8 "),
            "{sub}"
        );
    }
    let r = cutf8(&["-V"], b"").ok();
    let version = format!("cutf8 {}", env!("CARGO_PKG_VERSION"));
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), version);
    let r = cutf8(&["--version"], b"").ok();
    let long = String::from_utf8_lossy(&r.stdout).trim().to_string();
    assert!(
        ["avx512", "avx2", "sse2", "portable"]
            .iter()
            .any(|p| long == format!("{version} (codec: {p})")),
        "--version says {long:?}"
    );
}

#[test]
fn man_page_is_current() {
    let fresh = cutf8(&["--generate-man"], b"").ok().stdout;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/man/cutf8.1");
    let committed = std::fs::read(path).expect("man/cutf8.1 exists");
    assert!(
        fresh == committed,
        "man/cutf8.1 is out of date: run scripts/gen-man.sh and commit the result"
    );
    let page = String::from_utf8_lossy(&fresh);
    for section in [
        ".SH \"EXIT STATUS\"",
        ".SH EXAMPLES",
        ".SH \"SEE ALSO\"",
        "CUTF8 CHECK",
    ] {
        assert!(page.contains(section), "man page lacks {section}");
    }
}

#[test]
fn broken_pipe_is_quiet() {
    use std::process::{Command, Stdio};
    let d = Dir::new();
    d.write("big", "x\n".repeat(4 << 20).as_bytes());
    let mut child = Command::new(crate::support::cli::BIN)
        .args(["decode", "--no-magic", "big"])
        .current_dir(d.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cutf8");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
}

// ---- Errors: each kind at the start, middle and end, across chunk edges ----

/// One malformed unit and how it is reported.
struct Bad {
    bytes: &'static [u8],
    message: &'static str,
}

const ENCODE_ERRORS: &[Bad] = &[
    Bad {
        bytes: &[0xC2, 0x85],
        message: "C1 control U+0085 (C2 85) cannot be encoded",
    },
    Bad {
        bytes: &[0xC0, 0xAF],
        message: "overlong form C0 AF of U+002F cannot be encoded",
    },
    Bad {
        bytes: &[0xE0, 0x80, 0xAF],
        message: "overlong form E0 80 AF of U+002F cannot be encoded",
    },
    Bad {
        bytes: &[0xED, 0xA0, 0x80],
        message: "encoded surrogate U+D800 (ED A0 80) cannot be encoded",
    },
    Bad {
        bytes: &[0x80],
        message: "stray continuation byte 80",
    },
    Bad {
        bytes: &[0xE4, 0xB8],
        message: "truncated 3-byte sequence E4 B8",
    },
    Bad {
        bytes: &[0xFF],
        message: "byte FF, which never appears in UTF-8",
    },
    Bad {
        bytes: &[0xF4, 0x90, 0x80, 0x80],
        message: "extended form F4 90 80 80 of U+110000 is not UTF-8 (above U+10FFFF)",
    },
];

const DECODE_ERRORS: &[Bad] = &[
    Bad {
        bytes: &[0xBF],
        message: "stray continuation byte BF",
    },
    Bad {
        bytes: &[0xE4, 0xB8],
        message: "truncated 3-byte sequence E4 B8",
    },
    Bad {
        bytes: &[0xF0, 0x80, 0x80],
        message: "truncated 4-byte sequence F0 80 80",
    },
    Bad {
        bytes: &[0xFE, 0x80, 0x80],
        message: "reserved unit FE 80 80 has no UTF-8 form",
    },
    Bad {
        bytes: &[0xFF],
        message: "reserved unit FF has no UTF-8 form",
    },
    Bad {
        bytes: &[0xF3, 0xBE, 0xBD, 0xA0],
        message: "code point U+110000 (F3 BE BD A0) is above U+10FFFF, beyond UTF-8",
    },
    Bad {
        bytes: &[0xFD, 0xBF, 0xBF, 0xBF, 0xBF, 0xBF],
        message: "code point U+8421109F (FD BF BF BF BF BF) is above U+10FFFF, beyond UTF-8",
    },
];

/// A text before the bad unit: `pad` ASCII letters, a newline, then two
/// characters that are two bytes each on both sides (so the unit sits at
/// line 2, column 3), in the direction's input form.
fn prefix(pad: usize, encode: bool) -> (Vec<u8>, u64, u64) {
    let mut v = vec![b'a'; pad];
    v.push(b'\n');
    if encode {
        v.extend_from_slice("éü".as_bytes());
    } else {
        v.extend_from_slice(&[0xC1, 0x89, 0xC1, 0x9C]); // é ü on disk
    }
    (v, 2, 3)
}

fn check_error(encode: bool, bad: &Bad, input: &[u8], line: u64, col: u64, offset: usize) {
    let (cmd, hint) = if encode {
        ("encode", !bad.message.contains("cannot be encoded"))
    } else {
        ("decode --no-magic", true)
    };
    let hint = if hint {
        "; --lossless carries it through as the mount does"
    } else {
        ""
    };
    let want = format!(
        "cutf8: <stdin>:{line}:{col}: {} (byte offset {offset}){hint}\n",
        bad.message
    );
    for chunk in CHUNKS {
        let cmd: Vec<&str> = cmd.split(' ').collect();
        let run = cutf8(&args_with(&cmd, chunk), input).exits(1);
        if encode {
            // The position and the finding exactly; the remedy after them
            // depends on what the input looks like (tests/encode_remedies.rs).
            let (at, _) = want.split_once(" (byte offset").unwrap();
            let at = format!("{at} (byte offset {offset})");
            assert!(
                run.stderr.starts_with(&at) && run.stderr.lines().count() == 1,
                "chunk {chunk}: {:?} does not begin {at:?}",
                run.stderr
            );
        } else {
            run.stderr_is(&want);
        }
    }
}

#[test]
fn each_error_at_start_middle_and_end_at_every_cut() {
    for (encode, errors) in [(true, ENCODE_ERRORS), (false, DECODE_ERRORS)] {
        for bad in errors {
            // At the start, followed by text (or, for a truncated unit, by a
            // lead byte that cuts it).
            let mut input = bad.bytes.to_vec();
            input.extend_from_slice(b"z\n");
            check_error(encode, bad, &input, 1, 1, 0);
            // In the middle and at the very end, after 0..8 bytes of padding
            // so that the unit straddles 7-byte chunk edges at every cut.
            for pad in 0..8 {
                let (mut input, line, col) = prefix(pad, encode);
                let offset = input.len();
                input.extend_from_slice(bad.bytes);
                check_error(encode, bad, &input, line, col, offset);
                input.extend_from_slice("z\nmore\n".as_bytes());
                check_error(encode, bad, &input, line, col, offset);
            }
            // Decode counts the magic number in the byte offset, not in lines.
            if !encode {
                let (p, line, col) = prefix(3, false);
                let mut input = with_magic(&p);
                input.extend_from_slice(bad.bytes);
                check_error(false, bad, &input, line, col, p.len() + 8);
            }
        }
    }
}

#[test]
fn lossless_still_refuses_what_cannot_be_stored() {
    for bad in &ENCODE_ERRORS[..4] {
        let mut input = b"ok ".to_vec();
        input.extend_from_slice(bad.bytes);
        let want = format!("cutf8: <stdin>:1:4: {} (byte offset 3)\n", bad.message);
        for chunk in CHUNKS {
            cutf8(&args_with(&["encode", "--lossless"], chunk), &input)
                .exits(1)
                .stderr_is(&want);
        }
    }
}

// ---- --lossless: the mount's V and W ----

#[test]
fn lossless_round_trip_of_random_bytes() {
    let d = Dir::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED);
    for round in 0..6 {
        let len = rng.gen_range(0..5000);
        // Bytes weighted towards lead and continuation bytes; no FE, so no
        // reserved unit can be the one exempt from W(V(b)) = b.
        let b: Vec<u8> = (0..len)
            .map(|_| match rng.gen_range(0..4) {
                0 => rng.gen_range(0..0x80),
                1 => rng.gen_range(0x80..0xC0),
                _ => loop {
                    let x = rng.gen_range(0xC0..=0xFF);
                    if x != 0xFE {
                        break x;
                    }
                },
            })
            .collect();
        if b.starts_with(&MAGIC) {
            continue;
        }
        d.write("b", &b);
        for chunk in CHUNKS {
            let what = format!("round {round}, chunk {chunk:?}");
            let v = d.run(
                &args_with(
                    &["decode", "--lossless", "--no-magic", "b", "-o", "v"],
                    chunk,
                ),
                b"",
            );
            v.ok();
            let w = d.run(
                &args_with(&["encode", "--lossless", "--no-magic", "v"], chunk),
                b"",
            );
            w.ok().stdout_is(&b, &what);
        }
    }
}

#[test]
fn round_trip_of_random_text() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..4 {
        let text: String = (0..3000)
            .map(|_| loop {
                let cp = match rng.gen_range(0..4) {
                    0 => rng.gen_range(0..0x80),
                    1 => rng.gen_range(0x80..0x900),
                    2 => rng.gen_range(0x900..0x1_0000),
                    _ => rng.gen_range(0x1_0000..0x11_0000),
                };
                if let Some(c) = char::from_u32(cp).filter(|_| !(0x80..0xA0).contains(&cp)) {
                    break c;
                }
            })
            .collect();
        for chunk in CHUNKS {
            for mode in [&[][..], &["--lossless"][..]] {
                let mut enc = vec!["encode"];
                enc.extend_from_slice(mode);
                let disk = cutf8(&args_with(&enc, chunk), text.as_bytes()).ok().stdout;
                let mut dec = vec!["decode"];
                dec.extend_from_slice(mode);
                cutf8(&args_with(&dec, chunk), &disk)
                    .ok()
                    .stdout_is(text.as_bytes(), &format!("round {round} chunk {chunk:?}"));
            }
        }
    }
}

#[test]
fn lossless_decode_carries_reserved_and_ill_formed_bytes() {
    let disk = b"a\xFE\x80\x80b\x80c\xE4\xB8";
    let r = cutf8(&["decode", "--lossless", "--no-magic"], disk).ok();
    r.stdout_is(disk, "passed through unchanged");
}

// ---- check ----

#[test]
fn check_reports_each_rule_with_its_position() {
    let d = Dir::new();
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(b"ok\n\ta\x00b\r\n");
    // U+2028 and U+2029 on disk are E1 9E 88 and E1 9E 89.
    f.extend_from_slice(&[b'x', 0xE1, 0x9E, 0x88, 0xE1, 0x9E, 0x89, 0x07, b'\n']);
    // U+110000 on disk is F3 BE BD A0.
    f.extend_from_slice(&[
        0xC1, 0x89, 0x80, b'y', 0xFE, 0x80, 0xF3, 0xBE, 0xBD, 0xA0, b'\n',
    ]);
    f.extend_from_slice(&[0xE4, 0xB8, b'z']);
    d.write("f.cu8", &f);
    let want = "\
f.cu8:2:1: warning: tab (U+0009) [tab]
f.cu8:2:3: error: U+0000 (NUL) outside the magic number [nul]
f.cu8:2:5: warning: carriage return (U+000D) [carriage-return]
f.cu8:3:2: warning: line separator (U+2028) [line-separator]
f.cu8:3:3: warning: paragraph separator (U+2029) [paragraph-separator]
f.cu8:3:4: warning: C0 control U+0007 [control]
f.cu8:4:2: error: stray continuation byte 80 (byte offset 28) [stray-byte]
f.cu8:4:4: warning: reserved unit FE 80 has no UTF-8 form (byte offset 30) [reserved-unit]
f.cu8:4:5: warning: code point U+110000 (F3 BE BD A0) is above U+10FFFF, beyond UTF-8 (byte offset 32) [beyond-unicode]
f.cu8:5:1: error: truncated 3-byte sequence E4 B8 (byte offset 37) [truncated-sequence]
f.cu8:5:3: warning: no newline (U+000A) at the end of the file [no-final-newline]
";
    for chunk in CHUNKS {
        let r = d.run(&args_with(&["check", "f.cu8"], chunk), b"");
        r.exits(1)
            .stdout_is(want.as_bytes(), &format!("chunk {chunk:?}"))
            .stderr_is("cutf8: checked 1 file: 3 errors, 8 warnings\n");
    }
}

#[test]
fn check_clean_file_and_warnings_only() {
    let d = Dir::new();
    d.write("clean", &with_magic("Grüße\n".as_bytes()));
    d.run(&["check", "clean"], b"")
        .exits(0)
        .stdout_is(b"", "no findings")
        .stderr_is("cutf8: checked 1 file: 0 errors, 0 warnings\n");
    d.write("raw", b"no magic\n");
    d.run(&["check", "raw", "clean"], b"")
        .exits(0)
        .stdout_is(
            b"raw:1:1: warning: no Corrected UTF-8 magic number at the start [missing-magic]\n",
            "one warning",
        )
        .stderr_is("cutf8: checked 2 files: 0 errors, 1 warning\n");
    d.run(&["check", "--deny-warnings", "raw"], b"")
        .exits(1)
        .stdout_is(
            b"raw:1:1: error: no Corrected UTF-8 magic number at the start [missing-magic]\n",
            "denied",
        );
    // An empty text has no last character to miss a newline.
    d.write("empty", &MAGIC);
    d.run(&["check", "empty"], b"")
        .exits(0)
        .stdout_is(b"", "empty text");
}

/// A user's file name reaches root's terminal only escaped, as migrate
/// prints it: an escape sequence that clears the screen, a newline that
/// forges a line, a right-to-left override that reverses what follows.
#[test]
fn check_prints_hostile_names_escaped() {
    let d = Dir::new();
    std::fs::create_dir(d.path().join("tree")).unwrap();
    let name = "a\x1b[2J\nb\u{202e}txt.exe";
    std::fs::write(d.path().join("tree").join(name), b"no magic\n").unwrap();
    let r = d.run(&["check", "tree"], b"");
    let shown = "tree/a\\x1B[2J\\x0Ab\\xE2\\x80\\xAEtxt.exe";
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let err = r.stderr.clone();
    for (what, text) in [("stdout", &out), ("stderr", &err)] {
        assert!(
            !text.contains('\x1b') && !text.contains('\u{202e}'),
            "raw control or override on {what}: {text:?}"
        );
    }
    let r = r
        .exits(0)
        .stderr_is("cutf8: checked 1 file: 0 errors, 1 warning\n");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        format!(
            "{shown}:1:1: warning: no Corrected UTF-8 magic number at the start [missing-magic]\n"
        ),
        "one line, the name escaped"
    );
    // An unreadable directory is named the same way.
    let r = d.run(&["check", &format!("tree/{name}/x")], b"");
    assert!(
        !r.stderr.contains('\x1b') && !r.stderr.contains('\u{202e}'),
        "{:?}",
        r.stderr
    );
}

#[test]
fn check_levels_can_be_chosen() {
    let d = Dir::new();
    d.write("f", &with_magic(b"a\tb\x00\n"));
    d.run(&["check", "--allow", "nul,tab", "f"], b"")
        .exits(0)
        .stdout_is(b"", "both allowed");
    d.run(&["check", "--warn", "nul", "--error", "tab", "f"], b"")
        .exits(1)
        .stdout_is(
            b"f:1:2: error: tab (U+0009) [tab]\nf:1:4: warning: U+0000 (NUL) outside the magic number [nul]\n",
            "swapped levels",
        )
        .stderr_is("cutf8: checked 1 file: 1 error, 1 warning\n");
    // --error wins over --allow, whatever the order on the command line.
    d.run(&["check", "--error", "tab", "--allow", "tab,nul", "f"], b"")
        .exits(1);
}

#[test]
fn check_caps_findings_per_rule_and_counts_them_all() {
    let d = Dir::new();
    d.write("f", &with_magic("\r\n".repeat(30).as_bytes()));
    let r = d.run(&["check", "--max-per-rule", "3", "f"], b"").exits(0);
    r.stdout_is(
        b"f:1:1: warning: carriage return (U+000D) [carriage-return]
f:2:1: warning: carriage return (U+000D) [carriage-return]
f:3:1: warning: carriage return (U+000D) [carriage-return]
f: note: 27 more [carriage-return] findings not shown
",
        "capped",
    )
    .stderr_is(
        "cutf8: checked 1 file: 0 errors, 30 warnings\n\
         cutf8:   carriage-return: 30 warnings in 1 file\n",
    );
    let r = d.run(&["check", "--max-per-rule", "0", "f"], b"").exits(0);
    assert_eq!(r.stdout.iter().filter(|&&b| b == b'\n').count(), 30);
    r.stderr_is("cutf8: checked 1 file: 0 errors, 30 warnings\n");
}

#[test]
fn check_reads_stdin_and_reports_unreadable_files() {
    let d = Dir::new();
    d.run(&["check", "-"], &with_magic(b"x\0\n"))
        .exits(1)
        .stdout_is(
            b"<stdin>:1:2: error: U+0000 (NUL) outside the magic number [nul]\n",
            "stdin",
        );
    d.run(&["check", "nope"], b"")
        .exits(2)
        .stderr_is("cutf8: nope: No such file or directory\ncutf8: checked 0 files: 0 errors, 0 warnings, 1 unreadable\n");
}

#[test]
fn check_output_is_the_same_at_every_chunk_size() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let pool: &[&[u8]] = &[
        b"a",
        b"\n",
        b"\t",
        b"\r",
        b"\0",
        b"\x1b",
        &[0xC1, 0x89],
        &[0xE1, 0x9E, 0x88],
        &[0xE1, 0x9E, 0x89],
        &[0x80],
        &[0xE4, 0xB8],
        &[0xFE, 0x80, 0x80],
        &[0xF0, 0x80, 0x80, 0x80],
        &[0xEF, 0xBF, 0xBF],
    ];
    let d = Dir::new();
    let mut f = Vec::new();
    for _ in 0..400 {
        f.extend_from_slice(pool[rng.gen_range(0..pool.len())]);
    }
    d.write("f", &f);
    let base = d.run(&["check", "--max-per-rule", "0", "f"], b"");
    for chunk in ["1", "2", "3", "7"] {
        let r = d.run(
            &["check", "--max-per-rule", "0", "--buffer-size", chunk, "f"],
            b"",
        );
        assert_eq!(r.status, base.status);
        assert_eq!(r.stderr, base.stderr);
        r.stdout_is(&base.stdout, &format!("chunk {chunk}"));
    }
}

/// U+10E7D U+ED4E U+0000 U+000A in a row, the magic number's characters,
/// would encode to a magic number inside the output, which strict decoding
/// refuses: strict encode refuses them anywhere in the text, with or
/// without --no-magic, whatever the chunking, naming line, column and byte
/// offset of the first one. --lossless carries them through (decode
/// --lossless gives them back), except where they would begin an output
/// without a magic number.
#[test]
fn strict_encode_refuses_the_magic_numbers_characters_anywhere() {
    let chars = "\u{10E7D}\u{ED4E}\0\n";
    let long = "é".repeat(70);
    for (pre, line, col) in [("", 1, 1), ("ab\nçd", 2, 3), (&long[..], 1, 71)] {
        let text = format!("{pre}{chars}rest\n");
        for args in [&["encode"][..], &["encode", "--no-magic"]] {
            for chunk in CHUNKS {
                cutf8(&args_with(args, chunk), text.as_bytes())
                    .exits(1)
                    .stderr_has(&format!(
                        "<stdin>:{line}:{col}: the magic number's characters U+10E7D U+ED4E \
                         U+0000 U+000A, which would encode to a magic number inside the text \
                         (decoding refuses one) (byte offset {}); --lossless carries them \
                         through as the mount does\n",
                        pre.len()
                    ));
            }
        }
    }
    let text = format!("{chars}rest\n").into_bytes();
    let disk = cutf8(&["encode", "--lossless"], &text).ok().stdout;
    assert_eq!(&disk[..16], [MAGIC, MAGIC].concat());
    cutf8(&["decode", "--lossless"], &disk)
        .ok()
        .stdout_is(&text, "round trip");
    cutf8(&["decode"], &disk)
        .exits(1)
        .stderr_has("<stdin>:1:1: a second Corrected UTF-8 magic number (byte offset 8)");
    cutf8(&["encode", "--lossless", "--no-magic"], &text)
        .exits(1)
        .stderr_has("<stdin>:1:1: text begins with U+10E7D U+ED4E U+0000 U+000A (byte offset 0)");
    // Not at the start of the output, --lossless carries them through.
    let d = Dir::new();
    d.write("first", b"x");
    d.write("second", &text);
    d.run(
        &["encode", "--lossless", "--no-magic", "first", "second"],
        b"",
    )
    .ok();
}

/// An empty text is an empty file, with no magic number (as iconv writes
/// nothing for it, and as the mount empties a file it truncates): encode
/// writes the magic number before the first text only, and decode takes
/// an empty input for the empty text. An input that holds the magic
/// number alone is the empty text too.
#[test]
fn an_empty_text_is_an_empty_file() {
    for chunk in CHUNKS {
        cutf8(&args_with(&["encode"], chunk), b"")
            .ok()
            .stdout_is(b"", "empty text, no magic number");
        cutf8(&args_with(&["decode"], chunk), b"")
            .ok()
            .stdout_is(b"", "empty input");
        cutf8(&args_with(&["decode"], chunk), &MAGIC)
            .ok()
            .stdout_is(b"", "magic number alone");
    }
    let d = Dir::new();
    d.write("empty", b"");
    d.write("text", b"x\n");
    d.run(&["encode", "empty", "text", "empty"], b"")
        .ok()
        .stdout_is(
            &with_magic(b"x\n"),
            "the magic number once, before the text",
        );
    d.run(&["encode", "empty", "-o", "out.cu8"], b"").ok();
    assert_eq!(d.read("out.cu8"), b"");
}

/// Decode requires the magic number at the start of each input, whatever
/// the chunking: an input without it (plain UTF-8, most likely) is an error
/// at byte offset 0, as iconv -f CORRECTED-UTF-8 says; --no-magic decodes
/// it, and drops a magic number that is there.
#[test]
fn decode_requires_the_magic_number_at_every_chunking() {
    let partial: &[&[u8]] = &[
        b"plain\n",
        &MAGIC[..3],
        &MAGIC[..7],
        b"\xEF\xB7\x9D\xED\xB2\xAEx\n",
    ];
    for input in partial {
        for chunk in CHUNKS {
            cutf8(&args_with(&["decode"], chunk), input)
                .exits(1)
                .stderr_has("<stdin>:1:1: input does not begin with the Corrected UTF-8 magic number (byte offset 0)");
            cutf8(&args_with(&["decode", "--lossless"], chunk), input).exits(1);
            let want = cutf8::decode_lossless(input);
            cutf8(
                &args_with(&["decode", "--no-magic", "--lossless"], chunk),
                input,
            )
            .ok()
            .stdout_is(&want, "--no-magic");
        }
    }
    for chunk in CHUNKS {
        cutf8(
            &args_with(&["decode", "--no-magic"], chunk),
            &with_magic(b"a\n"),
        )
        .ok()
        .stdout_is(b"a\n", "--no-magic drops a magic number that is there");
    }
}

/// Peak resident memory of `cutf8 args` in KiB (from wait4's rusage).
// The child is reaped by wait4 below, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn peak_rss_kib(dir: &std::path::Path, args: &[&str]) -> i64 {
    use std::process::{Command, Stdio};
    let child = Command::new(crate::support::cli::BIN)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cutf8");
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in; the pid is our
    // child, not yet reaped (we never call Child::wait).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "cutf8 {args:?} failed"
    );
    usage.ru_maxrss
}

#[test]
fn large_input_converts_in_constant_memory() {
    let d = Dir::new();
    // 32 MiB, 500 times the buffer: a converter that held its input would
    // show it in its peak RSS.
    let line = "Grüße, 世界 \u{1F600} and a long line of plain text\n";
    let big = line.repeat((32 << 20) / line.len());
    d.write("big.txt", big.as_bytes());
    d.write("small.txt", line.as_bytes());
    d.run(&["encode", "big.txt", "-o", "big.cu8"], b"").ok();
    d.run(&["encode", "small.txt", "-o", "small.cu8"], b"").ok();
    for (cmd, ext) in [("encode", "txt"), ("decode", "cu8"), ("check", "cu8")] {
        let small = peak_rss_kib(d.path(), &[cmd, &format!("small.{ext}")]);
        let big = peak_rss_kib(d.path(), &[cmd, &format!("big.{ext}")]);
        assert!(
            big < small + 4 * 1024,
            "{cmd}: peak RSS {big} KiB on 32 MiB vs {small} KiB on one line"
        );
    }
}

#[test]
fn output_that_cannot_be_created_is_a_fatal_error() {
    let d = Dir::new();
    d.write("in", b"x\n");
    std::fs::create_dir(d.path().join("sub")).expect("mkdir");
    d.run(&["encode", "in", "-o", "sub"], b"")
        .exits(2)
        .stderr_is("cutf8: sub: is a directory\n");
    d.run(&["encode", "in", "-o", "nowhere/out"], b"")
        .exits(2)
        .stderr_is("cutf8: nowhere/out: No such file or directory\n");
    assert_eq!(d.names(), ["in", "sub"]);
}

#[test]
fn output_through_a_symlink_replaces_the_file_it_names() {
    let d = Dir::new();
    d.write("in", b"x\n");
    d.write("target", b"old");
    std::os::unix::fs::symlink("target", d.path().join("link")).expect("symlink");
    d.run(&["encode", "--no-magic", "in", "-o", "link"], b"")
        .ok();
    assert_eq!(d.read("target"), b"x\n");
    let link = std::fs::symlink_metadata(d.path().join("link")).expect("link");
    assert!(link.file_type().is_symlink(), "the link stays a link");
}

#[test]
fn lossless_decode_warns_about_the_one_unit_encode_would_change() {
    // FE plus six continuation bytes carrying U+80000000: V shows it as that
    // code point's extended form, which W stores as FC-led Corrected UTF-8.
    let disk = [b'a', 0xFE, 0x82, 0x80, 0x80, 0x80, 0x80, 0x80, b'\n'];
    for chunk in CHUNKS {
        cutf8(
            &args_with(&["decode", "--lossless", "--no-magic"], chunk),
            &disk,
        )
        .exits(0)
        .stdout_is(&disk, "carried through")
        .stderr_is(
            "cutf8: <stdin>: warning: 1 reserved unit(s) of FE plus six continuation bytes \
                 read as an extended form: encode --lossless would not give them back unchanged \
                 (the mount serves such a file read-only)\n",
        );
    }
    // Out of that range, it is an ordinary reserved unit.
    let disk = [0xFE, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80];
    cutf8(&["decode", "--lossless", "--no-magic"], &disk)
        .ok()
        .stdout_is(&disk, "no warning");
}

// ---- Random inputs against independent references ----

/// Where strict encode must stop: the first byte std's UTF-8 validator
/// rejects, or the first C1 control before it; with the valid text before.
fn encode_reference(data: &[u8]) -> (Option<usize>, String) {
    let (mut err, text) = match std::str::from_utf8(data) {
        Ok(t) => (None, t),
        Err(e) => (
            Some(e.valid_up_to()),
            std::str::from_utf8(&data[..e.valid_up_to()]).expect("valid prefix"),
        ),
    };
    let mut text = text.to_string();
    if let Some((at, _)) = text
        .char_indices()
        .find(|&(_, c)| ('\u{80}'..='\u{9F}').contains(&c))
    {
        err = Some(at);
        text.truncate(at);
    }
    (err, text)
}

/// Where strict decode must stop, straight from docs/format.md's table; with the
/// code points before.
fn decode_reference(d: &[u8]) -> (Option<usize>, Vec<u32>) {
    let mut chars = Vec::new();
    let mut i = 0;
    while i < d.len() {
        let b = d[i];
        if b < 0x80 {
            chars.push(b as u32);
            i += 1;
            continue;
        }
        if b <= 0xBF || b >= 0xFE {
            return (Some(i), chars);
        }
        let n = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0xF8..=0xFB => 5,
            _ => 6,
        };
        let seq = &d[i..(i + n).min(d.len())];
        if seq.len() < n || seq[1..].iter().any(|&c| c & 0xC0 != 0x80) {
            return (Some(i), chars);
        }
        let mut p = (b & ((1u8 << (7 - n)) - 1)) as u64;
        for &c in &seq[1..] {
            p = p << 6 | (c & 0x3F) as u64;
        }
        let offset = match n {
            2 => 160,
            3 if p <= 0xCF5F => 2_208,
            3 => 4_256,
            4 => 69_792,
            5 => 2_166_944,
            _ => 69_275_808,
        };
        if p + offset > 0x10_FFFF {
            return (Some(i), chars);
        }
        chars.push((p + offset) as u32);
        i += n;
    }
    (None, chars)
}

/// Line and column (from 1) after `chars`.
fn position_after(chars: &[u32]) -> (usize, usize) {
    let line = chars.iter().filter(|&&c| c == 10).count() + 1;
    let start = chars.iter().rposition(|&c| c == 10).map_or(0, |k| k + 1);
    (line, chars.len() - start + 1)
}

/// "LINE:COL ... (byte offset N)" from the first diagnostic.
fn reported(stderr: &str) -> Option<(usize, usize, usize)> {
    let rest = stderr.strip_prefix("cutf8: <stdin>:")?;
    let mut it = rest.splitn(3, ':');
    let line = it.next()?.parse().ok()?;
    let col = it.next()?.parse().ok()?;
    let tail = it.next()?;
    let k = tail.find("(byte offset ")? + "(byte offset ".len();
    let offset = tail[k..].split(')').next()?.parse().ok()?;
    Some((line, col, offset))
}

fn random_input(rng: &mut impl Rng, pool: &[&[u8]], common: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..rng.gen_range(0..40) {
        let piece = if rng.gen_bool(0.15) {
            pool[rng.gen_range(0..pool.len())]
        } else {
            pool[rng.gen_range(0..common)]
        };
        v.extend_from_slice(piece);
    }
    v
}

#[test]
fn strict_encode_stops_where_the_reference_does() {
    let pool: &[&[u8]] = &[
        b"a",
        b"\n",
        "é".as_bytes(),
        "中".as_bytes(),
        "😀".as_bytes(),
        b"\xC2\x85",
        b"\xC0\xAF",
        b"\xED\xA0\x80",
        b"\x80",
        b"\xE4\xB8",
        b"\xFF",
        b"\xFE",
        b"\xF4\x90\x80\x80",
        b"\xF5\x80\x80\x80\x80",
        b"\xE0\x80\xAF",
        b"\xC2",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    for _ in 0..150 {
        let data = random_input(&mut rng, pool, 5);
        let chunk = ["1", "2", "3", "7", "65536"][rng.gen_range(0..5)];
        let r = cutf8(&["encode", "--no-magic", "--buffer-size", chunk], &data);
        let (err, text) = encode_reference(&data);
        let what = format!("{data:02X?}, chunk {chunk}");
        match err {
            None => {
                r.ok();
            }
            Some(at) => {
                let chars: Vec<u32> = text.chars().map(|c| c as u32).collect();
                let (line, col) = position_after(&chars);
                assert_eq!(
                    reported(&r.stderr),
                    Some((line, col, at)),
                    "{what}: {}",
                    r.stderr
                );
                let r = r.exits(1);
                // What was written decodes to exactly the text before.
                cutf8(&["decode", "--no-magic"], &r.stdout)
                    .ok()
                    .stdout_is(text.as_bytes(), &what);
            }
        }
    }
}

#[test]
fn strict_decode_stops_where_the_reference_does() {
    let pool: &[&[u8]] = &[
        b"a",
        b"\n",
        b"\xC1\x89",
        b"\xE0\x80\x80",
        b"\xEF\xBF\xBF",
        b"\xF0\x80\x80\x80",
        b"\xF3\xBE\xBD\xA0",
        b"\x80",
        b"\xE4\xB8",
        b"\xFF",
        b"\xFE\x80",
        b"\xFD\xBF\xBF\xBF\xBF\xBF",
        b"\xC0",
        b"\xF8\x80\x80\x80\x80",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    for _ in 0..150 {
        let data = random_input(&mut rng, pool, 6);
        let magic = rng.gen_bool(0.3);
        let input = if magic {
            with_magic(&data)
        } else {
            data.clone()
        };
        let chunk = ["1", "2", "3", "7", "65536"][rng.gen_range(0..5)];
        let mut args = vec!["decode", "--buffer-size", chunk];
        if !magic {
            args.push("--no-magic");
        }
        let r = cutf8(&args, &input);
        let (err, chars) = decode_reference(&data);
        let text: String = chars
            .iter()
            .map(|&c| char::from_u32(c).expect("scalar"))
            .collect();
        let what = format!("{input:02X?}, chunk {chunk}");
        let r = match err {
            None => r.ok(),
            Some(at) => {
                let (line, col) = position_after(&chars);
                let want = Some((line, col, at + if magic { 8 } else { 0 }));
                assert_eq!(reported(&r.stderr), want, "{what}: {}", r.stderr);
                r.exits(1)
            }
        };
        r.stdout_is(text.as_bytes(), &what);
    }
}
