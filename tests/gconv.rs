//! CORRECTED-UTF-8 as a system charset (docs/charset.md): the gconv module of
//! gconv/ installed by scripts/install-gconv.sh into a private directory and
//! used through GCONV_PATH by iconv(3) (in this process, through libc) and
//! iconv(1), compared with `cutf8 decode`/`encode` in strict mode: the same
//! output, and errors at the byte offset `cutf8` reports.
//!
//! The module is built by `cargo build -p cutf8-gconv` from here (a no-op
//! when fresh), in the profile this test runs in.

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use cutf8::unit::{encode_disk, encode_view};
use cutf8::MAGIC;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::cli::BIN as CUTF8;
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The installed module directory (GCONV_PATH), set for this process.
pub(crate) fn gconv_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let release = profile_dir.file_name().unwrap() == "release";
        let mut build = Command::new(env!("CARGO"));
        build.current_dir(ROOT).args(["build", "-p", "cutf8-gconv"]);
        if release {
            build.arg("--release");
        }
        let st = build.status().expect("run cargo build -p cutf8-gconv");
        assert!(st.success(), "cargo build -p cutf8-gconv failed");
        let so = profile_dir.join("libcutf8_gconv.so");
        assert!(so.is_file(), "{} missing after the build", so.display());
        let prefix = profile_dir.join("gconv-test-prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let out = Command::new(Path::new(ROOT).join("scripts/install-gconv.sh"))
            .arg(&prefix)
            .env("CUTF8_GCONV_SO", &so)
            .output()
            .expect("run scripts/install-gconv.sh");
        crate::support::run::succeeded(&out, "install-gconv.sh");
        let dir = prefix.join("lib/cutf8fs/gconv");
        assert!(dir.join("CORRECTED-UTF-8.so").is_file());
        assert!(dir.join("gconv-modules").is_file());
        // glibc reads GCONV_PATH once, at the first iconv_open: every test
        // comes through here first.
        std::env::set_var("GCONV_PATH", &dir);
        dir
    })
}

fn prefix() -> PathBuf {
    gconv_dir().ancestors().nth(3).unwrap().to_path_buf()
}

// ---------------------------------------------------------------- iconv(3)

#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    out: Vec<u8>,
    /// Input offset and errno of the failure, if any.
    err: Option<(usize, i32)>,
}

struct Cd(libc::iconv_t);

impl Cd {
    fn open(to: &str, from: &str) -> Cd {
        gconv_dir();
        let (t, f) = (CString::new(to).unwrap(), CString::new(from).unwrap());
        // SAFETY: valid C strings.
        let cd = unsafe { libc::iconv_open(t.as_ptr(), f.as_ptr()) };
        assert!(
            cd as isize != -1,
            "iconv_open({to}, {from}): {}",
            std::io::Error::last_os_error()
        );
        Cd(cd)
    }

    /// One iconv(3) call; returns (consumed, produced, errno or 0).
    fn call(&mut self, input: Option<&[u8]>, out: &mut [u8]) -> (usize, usize, i32) {
        let mut op = out.as_mut_ptr() as *mut libc::c_char;
        let mut ol = out.len();
        let r;
        let mut consumed = 0;
        match input {
            Some(inp) => {
                let mut ip = inp.as_ptr() as *mut libc::c_char;
                let mut il = inp.len();
                // SAFETY: pointers and lengths describe live buffers.
                r = unsafe { libc::iconv(self.0, &mut ip, &mut il, &mut op, &mut ol) };
                consumed = inp.len() - il;
            }
            None => {
                // SAFETY: flush form of iconv(3).
                r = unsafe {
                    libc::iconv(
                        self.0,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        &mut op,
                        &mut ol,
                    )
                };
            }
        }
        let errno = if r == usize::MAX {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        } else {
            0
        };
        (consumed, out.len() - ol, errno)
    }
}

impl Drop for Cd {
    fn drop(&mut self) {
        // SAFETY: opened by iconv_open.
        unsafe { libc::iconv_close(self.0) };
    }
}

/// Convert `input` fed in chunks cut at `cuts` (offsets, ascending), with an
/// output buffer of `cap` bytes, the way a careful iconv(3) caller does:
/// drain on E2BIG, keep the unconsumed tail on EINVAL and feed it again
/// with the next chunk, stop on EILSEQ.
fn stream(to: &str, from: &str, input: &[u8], cuts: &[usize], cap: usize) -> Outcome {
    let mut cd = Cd::open(to, from);
    let mut out = Vec::new();
    let mut buf = vec![0u8; cap];
    let mut pending: Vec<u8> = Vec::new();
    let mut done = 0; // input bytes consumed
    let mut bounds: Vec<usize> = cuts.to_vec();
    bounds.push(input.len());
    let mut prev = 0;
    for &b in &bounds {
        pending.extend_from_slice(&input[prev..b]);
        prev = b;
        loop {
            let (c, p, errno) = cd.call(Some(&pending), &mut buf);
            out.extend_from_slice(&buf[..p]);
            pending.drain(..c);
            done += c;
            match errno {
                0 => break,
                libc::E2BIG => {
                    assert!(c > 0 || p > 0, "{from}->{to}: no progress with {cap} bytes");
                }
                libc::EINVAL => break,
                e => {
                    return Outcome {
                        out,
                        err: Some((done, e)),
                    }
                }
            }
        }
    }
    if !pending.is_empty() {
        return Outcome {
            out,
            err: Some((done, libc::EINVAL)),
        };
    }
    // The final flush may have text to write (units of a magic number the
    // input ended with), piece by piece into a small buffer.
    loop {
        let (_, p, errno) = cd.call(None, &mut buf);
        out.extend_from_slice(&buf[..p]);
        match errno {
            0 => break,
            libc::E2BIG => assert!(p > 0, "{from}->{to}: flush makes no progress"),
            e => {
                return Outcome {
                    out,
                    err: Some((done, e)),
                }
            }
        }
    }
    Outcome { out, err: None }
}

fn whole(to: &str, from: &str, input: &[u8]) -> Outcome {
    stream(to, from, input, &[], input.len() * 4 + 64)
}

// ---------------------------------------------------------------- cutf8

/// `cutf8 decode|encode` (strict) on stdin: output and error byte offset.
/// `CORRECTED-UTF-8` decodes as `cutf8 decode` (the magic number is
/// required), `CORRECTED-UTF-8-NOMAGIC` as `cutf8 decode --no-magic`.
fn cutf8_decode(input: &[u8]) -> (Vec<u8>, Option<usize>, String) {
    cutf8(&["decode"], input)
}

fn cutf8_decode_nomagic(input: &[u8]) -> (Vec<u8>, Option<usize>, String) {
    cutf8(&["decode", "--no-magic"], input)
}

fn cutf8(args: &[&str], input: &[u8]) -> (Vec<u8>, Option<usize>, String) {
    let mut child = Command::new(CUTF8)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let offset = err.find("(byte offset ").map(|k| {
        let rest = &err[k + 13..];
        rest[..rest.find(')').unwrap()].parse().unwrap()
    });
    assert_eq!(
        out.status.success(),
        offset.is_none(),
        "cutf8 {args:?}: {err}"
    );
    (out.stdout, offset, err)
}

// ---------------------------------------------------------------- inputs

/// Code points around every boundary of the byte table, plus the ranges
/// whose length changes between Corrected UTF-8 and UTF-8.
fn random_cp(rng: &mut StdRng) -> u32 {
    const EDGES: [u32; 22] = [
        0x0A, 0x7F, 0xA0, 0xFF, 0x7FF, 0x800, 0x89F, 0x8A0, 0xCFFF, 0xD7FF, 0xE000, 0xFEFF, 0xFFFD,
        0xFFFF, 0x1_0000, 0x1_0E7D, 0x1_109F, 0x1_10A0, 0x1_F600, 0x10_FFFF, 0xED4E, 0x0,
    ];
    match rng.gen_range(0..10) {
        0..=2 => rng.gen_range(0x20..0x7F),
        3 => EDGES[rng.gen_range(0..EDGES.len())],
        4 => rng.gen_range(0xA0..0x800),
        5 => rng.gen_range(0x800..0x8A0),
        6 => loop {
            let c = rng.gen_range(0x8A0..0x1_0000);
            if !(0xD800..0xE000).contains(&c) {
                break c;
            }
        },
        7 => rng.gen_range(0x1_0000..0x1_10A0),
        8 => rng.gen_range(0x1_10A0..0x11_0000),
        _ => b'\n' as u32,
    }
}

fn view_of(cp: u32, v: &mut Vec<u8>) {
    let mut t = [0u8; 8];
    let n = encode_view(cp, &mut t);
    v.extend_from_slice(&t[..n]);
}

fn disk_of(cp: u32, v: &mut Vec<u8>) {
    let mut t = [0u8; 8];
    let n = encode_disk(cp, &mut t).expect("encodable");
    v.extend_from_slice(&t[..n]);
}

/// Corrected UTF-8 with, sometimes, one ill-formed unit in it.
fn random_disk(rng: &mut StdRng, bad: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let n = rng.gen_range(0..40);
    let at = if bad {
        rng.gen_range(0..=n)
    } else {
        usize::MAX
    };
    for k in 0..=n {
        if k == at {
            match rng.gen_range(0..6) {
                0 => v.push(rng.gen_range(0x80..0xC0)),
                1 => {
                    // truncated: a lead with too few continuation bytes
                    let mut t = Vec::new();
                    disk_of(rng.gen_range(0x800..0x1_0000).max(0xE000), &mut t);
                    let keep = rng.gen_range(1..t.len());
                    v.extend_from_slice(&t[..keep]);
                    if rng.gen_bool(0.5) {
                        v.push(b'x');
                    }
                }
                2 => {
                    v.push(if rng.gen_bool(0.5) { 0xFE } else { 0xFF });
                    for _ in 0..rng.gen_range(0..8) {
                        v.push(rng.gen_range(0x80..0xC0));
                    }
                }
                3 => disk_of(rng.gen_range(0x11_0000..=0x8421_109F), &mut v),
                4 => disk_of(0x11_0000, &mut v),
                _ => v.push(rng.gen()),
            }
        }
        if k < n {
            disk_of(random_cp(rng), &mut v);
        }
    }
    v
}

/// UTF-8 with, sometimes, one unit `cutf8 encode` rejects.
fn random_view(rng: &mut StdRng, bad: bool) -> Vec<u8> {
    let mut v = Vec::new();
    let n = rng.gen_range(0..40);
    let at = if bad {
        rng.gen_range(0..=n)
    } else {
        usize::MAX
    };
    for k in 0..=n {
        if k == at {
            match rng.gen_range(0..8) {
                0 => view_of(rng.gen_range(0x80..0xA0), &mut v), // C1
                1 => view_of(rng.gen_range(0xD800..0xE000), &mut v), // surrogate
                2 => v.extend_from_slice(&[0xC0, 0xAF]),         // overlong
                3 => v.extend_from_slice(&[0xE0, 0x80, 0xAF]),   // overlong
                4 => view_of(rng.gen_range(0x11_0000..0x8000_0000), &mut v), // > U+10FFFF
                5 => v.push(rng.gen_range(0x80..0xC0)),
                6 => v.extend_from_slice(&[0xE2, 0x82]), // truncated
                _ => v.push(if rng.gen_bool(0.5) { 0xFE } else { 0xFF }),
            }
        }
        if k < n {
            view_of(random_cp(rng), &mut v);
        }
    }
    v
}

fn utf16le(s: &[u8]) -> Vec<u8> {
    std::str::from_utf8(s)
        .unwrap()
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect()
}

/// The same outcome through both routes glibc takes: the direct
/// CORRECTED-UTF-8 ⇄ UTF-8 step, and CORRECTED-UTF-8 ⇄ INTERNAL followed or
/// preceded by glibc's UTF-16 module (a separate shared object: the next
/// step's mangled function pointer, and the re-run up to its stop).
fn check_decode(input: &[u8], case: &str) {
    type Decode = fn(&[u8]) -> (Vec<u8>, Option<usize>, String);
    let routes: [(&str, Decode); 2] = [
        ("CORRECTED-UTF-8", cutf8_decode),
        ("CORRECTED-UTF-8-NOMAGIC", cutf8_decode_nomagic),
    ];
    for (charset, decode) in routes {
        let case = format!("{case} from {charset}");
        let (want, off, msg) = decode(input);
        let got = whole("UTF-8", charset, input);
        assert_eq!(got.out, want, "{case}: output differs from cutf8 decode");
        match (got.err, off) {
            (None, None) => {}
            (Some((pos, e)), Some(o)) => {
                assert_eq!(pos, o, "{case}: iconv stopped at {pos}, cutf8 says {msg}");
                if e == libc::EINVAL {
                    // A cut unit, or the start of the magic number alone.
                    assert!(
                        msg.contains("truncated") || msg.contains("magic number (byte offset 0)"),
                        "{case}: EINVAL but cutf8 says {msg}"
                    );
                } else {
                    assert_eq!(e, libc::EILSEQ, "{case}");
                }
            }
            (g, o) => panic!("{case}: iconv {g:?} vs cutf8 offset {o:?} ({msg})"),
        }
        let via16 = whole("UTF-16LE", charset, input);
        assert_eq!(via16.out, utf16le(&want), "{case}: via UTF-8 → UTF-16LE");
        assert_eq!(via16.err, got.err, "{case}: via UTF-8 → UTF-16LE");
    }
}

fn check_encode(input: &[u8], case: &str) {
    let (want, off, msg) = cutf8(&["encode"], input);
    let got = whole("CORRECTED-UTF-8", "UTF-8", input);
    assert_eq!(got.out, want, "{case}: output differs from cutf8 encode");
    match (got.err, off) {
        (None, None) => {}
        (Some((pos, e)), Some(o)) => {
            assert_eq!(pos, o, "{case}: iconv stopped at {pos}, cutf8 says {msg}");
            assert!(
                e == libc::EILSEQ || msg.contains("truncated"),
                "{case}: {e} {msg}"
            );
        }
        (g, o) => panic!("{case}: iconv {g:?} vs cutf8 offset {o:?} ({msg})"),
    }
    if off.is_none() {
        let via16 = whole("CORRECTED-UTF-8", "UTF-16LE", &utf16le(input));
        assert_eq!(
            via16,
            Outcome {
                out: want,
                err: None
            },
            "{case}: from UTF-16LE"
        );
    }
}

#[test]
fn random_texts_decode_exactly_as_cutf8_decode() {
    let mut rng = StdRng::seed_from_u64(0x14_0001);
    for i in 0..1500 {
        let body = random_disk(&mut rng, i % 2 == 1);
        let mut input = Vec::new();
        if i % 5 != 0 {
            input.extend_from_slice(&MAGIC);
        }
        input.extend_from_slice(&body);
        check_decode(&input, &format!("decode case {i} {input:02X?}"));
    }
}

#[test]
fn random_texts_encode_exactly_as_cutf8_encode() {
    let mut rng = StdRng::seed_from_u64(0x14_0002);
    for i in 0..1500 {
        let input = random_view(&mut rng, i % 2 == 1);
        check_encode(&input, &format!("encode case {i} {input:02X?}"));
    }
}

#[test]
fn magic_is_handled_like_a_utf16_bom() {
    // Decoding drops it at the start; a later one is an error at its first
    // byte, where strict `cutf8 decode` reports "a second magic number"
    // (unlike a later byte order mark in UTF-16, which is text).
    let mut twice = MAGIC.to_vec();
    twice.extend_from_slice(b"a");
    twice.extend_from_slice(&MAGIC);
    let view_magic = cutf8::decode_strict_to_string(
        &[&MAGIC[..], &MAGIC[..7]].concat(),
        cutf8::DecodeMagic::Expect,
    )
    .unwrap();
    let got = whole("UTF-8", "CORRECTED-UTF-8", &twice);
    assert_eq!(got.err, Some((MAGIC.len() + 1, libc::EILSEQ)));
    assert_eq!(got.out, b"a");
    let (_, off, msg) = cutf8(&["decode"], &twice);
    assert_eq!(off, Some(MAGIC.len() + 1), "cutf8 decode's strict verdict");
    assert!(msg.contains("second Corrected UTF-8 magic number"), "{msg}");
    check_decode(&twice, "two magic numbers");
    // Encoding writes it once, whatever the buffer sizes.
    for cap in [4, 5, 7, 8, 9, 64] {
        let got = stream("CORRECTED-UTF-8", "UTF-8", b"abc\n", &[1, 2], cap);
        assert_eq!(got.out, [&MAGIC[..], b"abc\n"].concat(), "cap {cap}");
    }
    // Input that already is Corrected: an error at byte 0, as cutf8 says.
    check_encode(&[&MAGIC[..], b"x\n"].concat(), "already encoded");
    // The -NOMAGIC charset does not write it; it decodes as `cutf8 decode
    // --no-magic`, which drops a leading one too and refuses a later one.
    let got = whole("CORRECTED-UTF-8-NOMAGIC", "UTF-8", b"abc\n");
    assert_eq!(got.out, b"abc\n");
    let (want, off, _) = cutf8(&["decode", "--no-magic"], &twice);
    let got = whole("UTF-8", "CUTF8-NOMAGIC", &twice);
    assert_eq!(
        (got.out, got.err),
        (want, Some((off.unwrap(), libc::EILSEQ)))
    );
    // A text that is the magic number's first code points is text to
    // -NOMAGIC; to CORRECTED-UTF-8 it is the start of the magic number,
    // which does not come: incomplete input at 0.
    let got = whole("UTF-8", "CUTF8-NOMAGIC", &MAGIC[..7]);
    assert_eq!(got.out, view_magic.as_bytes());
    assert_eq!(got.err, None);
    assert_eq!(
        whole("UTF-8", "CUTF8", &MAGIC[..7]).err,
        Some((0, libc::EINVAL))
    );
    // Both refuse text that would encode to the magic number, anywhere.
    for (charset, args) in [
        ("CUTF8-NOMAGIC", &["encode", "--no-magic"][..]),
        ("CUTF8", &["encode"]),
    ] {
        let input = b"\xF0\x90\xB9\xBD\xEE\xB5\x8E\x00\x0Ax";
        let (_, off, _) = cutf8(args, input);
        assert_eq!(off, Some(0));
        let got = whole(charset, "UTF-8", input);
        assert_eq!(got.err, Some((0, libc::EILSEQ)), "{charset}");
    }
    // Aliases.
    for name in ["CUTF-8", "CUTF8", "cutf8", "corrected-utf-8"] {
        assert_eq!(whole(name, "UTF-8", b"x").out, [&MAGIC[..], b"x"].concat());
    }
}

/// Plain UTF-8 is not Corrected UTF-8: decoding it as CORRECTED-UTF-8
/// fails at byte 0 (EILSEQ), as `cutf8 decode` refuses it, instead of
/// printing mojibake; -NOMAGIC converts it as `cutf8 decode --no-magic`.
/// An empty input is an empty text both ways, with no magic number.
#[test]
fn decoding_requires_the_magic_number() {
    let plain = "Grüße, ࠀ\n".as_bytes();
    let got = whole("UTF-8", "CORRECTED-UTF-8", plain);
    assert_eq!(
        got,
        Outcome {
            out: vec![],
            err: Some((0, libc::EILSEQ))
        }
    );
    let (_, off, msg) = cutf8(&["decode"], plain);
    assert_eq!(off, Some(0), "{msg}");
    check_decode(plain, "plain UTF-8");
    let (want, _, _) = cutf8(&["decode", "--no-magic"], plain);
    assert_eq!(whole("UTF-8", "CORRECTED-UTF-8-NOMAGIC", plain).out, want);
    // However the input is split, whatever the output room.
    for cut in 0..=plain.len() {
        for cap in [4, 64] {
            let got = stream("UTF-8", "CORRECTED-UTF-8", plain, &[cut], cap);
            assert_eq!(got.err, Some((0, libc::EILSEQ)), "cut {cut} cap {cap}");
            assert_eq!(got.out, b"", "cut {cut} cap {cap}");
        }
    }
    // Empty input: nothing out, no error, no magic number written.
    for (to, from) in [
        ("UTF-8", "CORRECTED-UTF-8"),
        ("CORRECTED-UTF-8", "UTF-8"),
        ("UTF-8", "CORRECTED-UTF-8-NOMAGIC"),
        ("CORRECTED-UTF-8-NOMAGIC", "UTF-8"),
    ] {
        assert_eq!(
            whole(to, from, b""),
            Outcome {
                out: vec![],
                err: None
            },
            "{from}->{to}"
        );
    }
    assert_eq!(cutf8(&["encode"], b"").0, b"");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let out = iconv1(&["-f", "UTF-8", "-t", "CORRECTED-UTF-8"], &empty);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"", "iconv(1) agrees with cutf8 encode");
    // iconv(1) on a plain file: an error at position 0, exit 1.
    let f = dir.path().join("plain");
    std::fs::write(&f, plain).unwrap();
    let out = iconv1(&["-f", "CORRECTED-UTF-8", "-t", "UTF-8"], &f);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stdout, b"");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("illegal input sequence at position 0"),
        "{err}"
    );
    let out = iconv1(&["-f", "CORRECTED-UTF-8-NOMAGIC", "-t", "UTF-8"], &f);
    assert!(out.status.success());
}

/// Unit ends of the magic number as the module reads it: on disk, and as
/// UTF-8 (V(MAGIC), what a `-NOMAGIC` encoder refuses at the start).
const DISK_ENDS: [usize; 4] = [3, 6, 7, 8];
const VIEW_ENDS: [usize; 4] = [4, 7, 8, 9];

/// Where iconv(3) reports a magic number at `at` when the input is fed in
/// two calls cut at `cut`: a call whose input ends after whole units of it
/// (U+10E7D, U+ED4E, U+0000) takes them into the descriptor's state, and
/// the next call reports the error at the first byte of its own input, the
/// earliest byte it can name; everywhere else at the magic number's first
/// byte (as `cutf8 decode` does).
fn magic_error_at(ends: &[usize; 4], at: usize, cut: usize) -> usize {
    if cut > at && cut < at + ends[3] {
        at + ends.iter().copied().rfind(|&e| e <= cut - at).unwrap_or(0)
    } else {
        at
    }
}

/// `input` split at `cuts` around a magic number at `at` (the whole-buffer
/// conversion's first error, `whole_out` its output) fails exactly as
/// [`magic_error_at`] says, with the same output, whatever the output
/// buffer size.
fn check_magic_split(to: &str, from: &str, input: &[u8], at: usize, ends: &[usize; 4], case: &str) {
    let want = whole(to, from, input);
    assert_eq!(want.err, Some((at, libc::EILSEQ)), "{case}: whole buffer");
    for cut in at.saturating_sub(2)..=(at + ends[3] + 1).min(input.len()) {
        for cap in [4, 7, 64] {
            let got = stream(to, from, input, &[cut], cap);
            assert_eq!(
                got,
                Outcome {
                    out: want.out.clone(),
                    err: Some((magic_error_at(ends, at, cut), libc::EILSEQ)),
                },
                "{case}: {from}->{to} cut at {cut}, {cap}-byte output"
            );
        }
    }
    let every: Vec<usize> = (1..input.len()).collect();
    let got = stream(to, from, input, &every, 4);
    assert_eq!(got.out, want.out, "{case}: byte by byte");
    assert_eq!(
        got.err,
        Some((at + ends[2], libc::EILSEQ)),
        "{case}: byte by byte"
    );
}

/// A magic number anywhere after the start of the stream
/// is an error at its first byte, exactly where strict `cutf8 decode`
/// reports "a second Corrected UTF-8 magic number" — at every position of
/// random texts (inside a unit too, which makes that unit the first error),
/// with or without a leading magic number, through both routes, and split
/// across iconv(3) calls at every byte around it.
#[test]
fn a_magic_number_past_the_start_is_an_error_where_cutf8_says() {
    let mut rng = StdRng::seed_from_u64(0x14_0005);
    for i in 0..24 {
        let body = random_disk(&mut rng, i % 4 == 3);
        let lead: &[u8] = if i % 3 == 0 { &[] } else { &MAGIC };
        for at in 0..=body.len() {
            let input = [lead, &body[..at], &MAGIC, &body[at..]].concat();
            let case = format!("text {i}, magic at {at}: {input:02X?}");
            check_decode(&input, &case);
            let o = lead.len() + at;
            if lead.is_empty() && at == 0 {
                continue; // the leading one: dropped
            }
            if whole("UTF-8", "CORRECTED-UTF-8", &input).err == Some((o, libc::EILSEQ)) {
                check_magic_split("UTF-8", "CORRECTED-UTF-8", &input, o, &DISK_ENDS, &case);
                if at % 4 == 0 {
                    check_magic_split("UTF-16LE", "CORRECTED-UTF-8", &input, o, &DISK_ENDS, &case);
                }
            }
        }
    }
}

/// Whole units of a proper prefix of the magic number (U+10E7D, U+10E7D
/// U+ED4E, U+10E7D U+ED4E U+0000) are text when anything else follows, or
/// nothing: `cutf8 decode` converts them. The module holds them when a
/// call's input ends with them, so this is where that could go wrong: every
/// split, tiny output buffers, both routes, the final flush writing them.
#[test]
fn magic_prefixes_are_text_however_the_input_is_split() {
    let p = |k: usize| &MAGIC[..k];
    let texts: Vec<Vec<u8>> = vec![
        p(3).to_vec(),
        p(6).to_vec(),
        p(7).to_vec(),
        [p(7), b"\x0B"].concat(),
        [&MAGIC[..], p(3)].concat(),
        [&MAGIC[..], p(7)].concat(),
        [
            b"a",
            p(3),
            b"b",
            p(6),
            b"\n",
            p(7),
            p(3),
            p(6),
            b"\xC1\x89",
            p(7),
            p(7),
        ]
        .concat(),
        [p(6), &MAGIC[..], b"x"].concat(),
        [p(7), &MAGIC[..]].concat(),
    ];
    for (n, input) in texts.iter().enumerate() {
        let case = format!("text {n} {input:02X?}");
        check_decode(input, &case);
        let charset = if input.starts_with(&MAGIC) {
            "CORRECTED-UTF-8"
        } else {
            "CORRECTED-UTF-8-NOMAGIC"
        };
        for (to, from) in [("UTF-8", charset), ("UTF-16LE", charset)] {
            let want = whole(to, from, input);
            if let Some((at, _)) = want.err {
                // A magic number right after held units: they are not text.
                assert!(input[at..].starts_with(&MAGIC), "{case}");
                check_magic_split(to, from, input, at, &DISK_ENDS, &case);
                continue;
            }
            for cut in 0..=input.len() {
                for cap in [4, 5, 9, 64] {
                    let got = stream(to, from, input, &[cut], cap);
                    assert_eq!(
                        got, want,
                        "{case}: {from}->{to} cut at {cut}, {cap}-byte output"
                    );
                }
            }
            let every: Vec<usize> = (1..input.len()).collect();
            assert_eq!(
                stream(to, from, input, &every, 4),
                want,
                "{case}: byte by byte"
            );
        }
    }
}

/// The other direction: U+10E7D U+ED4E U+0000 U+000A in the text, which
/// would encode to a magic number inside the output. `cutf8 encode`
/// refuses them anywhere, with or without `--no-magic`; the module agrees,
/// at the same byte, however the input is split (a call whose input ends
/// after whole units of them holds those, and the next call reports the
/// error at its first byte) and through UTF-16 (glibc's own steps first:
/// the error at the UTF-16 offset of the same character).
#[test]
fn the_magic_numbers_characters_are_refused_as_cutf8_encode_refuses_them() {
    let v = &cutf8::MAGIC_TEXT[..];
    assert_eq!(cutf8::decode_lossless(&MAGIC), v);
    let texts: Vec<Vec<u8>> = vec![
        v.to_vec(),
        [v, b"x"].concat(),
        [b"a", v].concat(),
        [v, v].concat(),
        v[..8].to_vec(),
        [&v[..7], b"\n"].concat(),
        [&v[..4], v].concat(),
        ["é".as_bytes(), &v[..8], b"\n", v].concat(),
    ];
    for (n, input) in texts.iter().enumerate() {
        let case = format!("text {n} {input:02X?}");
        check_encode(input, &case);
        for (name, args) in [
            ("CORRECTED-UTF-8", &["encode"][..]),
            ("CORRECTED-UTF-8-NOMAGIC", &["encode", "--no-magic"][..]),
        ] {
            let (want, off, msg) = cutf8(args, input);
            let got = whole(name, "UTF-8", input);
            assert_eq!(got.out, want, "{case} to {name}: {msg}");
            assert_eq!(got.err.map(|e| e.0), off, "{case} to {name}: {msg}");
            if let Some(at) = off {
                assert!(input[at..].starts_with(v), "{case}: {msg}");
                check_magic_split(name, "UTF-8", input, at, &VIEW_ENDS, &case);
            } else {
                for cut in 0..=input.len() {
                    for cap in [4, 5, 64] {
                        let got = stream(name, "UTF-8", input, &[cut], cap);
                        assert_eq!(
                            got,
                            whole(name, "UTF-8", input),
                            "{case} to {name}, cut at {cut}, {cap}-byte output"
                        );
                    }
                }
            }
            // From UTF-16, whole buffers.
            let via16 = whole(name, "UTF-16LE", &utf16le(input));
            assert_eq!(via16.out, want, "{case} from UTF-16LE to {name}");
            assert_eq!(
                via16.err.map(|e| e.0),
                off.map(|o| utf16le(&input[..o]).len()),
                "{case} from UTF-16LE to {name}"
            );
        }
    }
}

/// `cutf8 encode` refuses input that begins with the magic number (it is
/// Corrected already): an error at byte 0, with nothing but the magic
/// number written, decided on its first six bytes (U+FDDD, then the
/// encoded surrogate U+DCAE). However the input is split: a call whose
/// input ends after U+FDDD holds it, and the next call reports the error
/// at its first byte (3), as for a magic number inside decoded text.
/// U+FDDD that is not followed by the rest is text.
#[test]
fn already_encoded_input_is_refused_however_it_is_split() {
    let input = [&MAGIC[..], b"x\n"].concat();
    check_encode(&input, "already encoded");
    let want = whole("CORRECTED-UTF-8", "UTF-8", &input);
    assert_eq!(
        want,
        Outcome {
            out: MAGIC.to_vec(),
            err: Some((0, libc::EILSEQ))
        }
    );
    for cut in 0..=input.len() {
        for cap in [4, 9, 64] {
            let at = if (3..6).contains(&cut) { 3 } else { 0 };
            assert_eq!(
                stream("CORRECTED-UTF-8", "UTF-8", &input, &[cut], cap),
                Outcome {
                    out: MAGIC.to_vec(),
                    err: Some((at, libc::EILSEQ))
                },
                "cut at {cut}, {cap}-byte output"
            );
        }
    }
    // An input that ends in the magic number's first four or five bytes
    // (U+FDDD, then the start of the encoded surrogate its first six bytes
    // would make) is an error at 3 both ways, truncated; `cutf8 encode`
    // writes U+FDDD before it, the module cannot: whether U+FDDD is text
    // depends on the byte after the input's end, and iconv(1) does not flush
    // after incomplete input (docs/charset.md).
    for cut_start in [&b"\xEF\xB7\x9D\xED"[..], b"\xEF\xB7\x9D\xED\xB2"] {
        let (want, off, msg) = cutf8(&["encode"], cut_start);
        assert_eq!((off, want.len()), (Some(3), MAGIC.len() + 3), "{msg}");
        let got = whole("CORRECTED-UTF-8", "UTF-8", cut_start);
        assert_eq!(
            got,
            Outcome {
                out: MAGIC.to_vec(),
                err: Some((3, libc::EINVAL))
            }
        );
    }
    for text in [
        &b"\xEF\xB7\x9D"[..],
        b"\xEF\xB7\x9Dx",
        b"\xEF\xB7\x9D\xED\x9F\xBF",
        b"\xEF\xB7\x9D\xED\x9F",
        b"\xEF\xB7\x9D\xED\xB2\xAE",
        b"\xEF\xB7\x9D\xED\xB2\xAE\x00",
        b"\xEF\xB7\x9D\xED\xB2\xAEz",
    ] {
        let case = format!("{text:02X?}");
        check_encode(text, &case);
        let want = whole("CORRECTED-UTF-8", "UTF-8", text);
        for cut in 0..=text.len() {
            for cap in [4, 64] {
                let got = stream("CORRECTED-UTF-8", "UTF-8", text, &[cut], cap);
                let want = match want.err {
                    // The error of the first six bytes, split after U+FDDD.
                    Some((0, e)) if (3..6).contains(&cut) => Outcome {
                        out: want.out.clone(),
                        err: Some((3, e)),
                    },
                    _ => want.clone(),
                };
                assert_eq!(got, want, "{case} cut at {cut}, {cap}-byte output");
            }
        }
    }
}

/// A text with every kind of unit, and the same with errors after it.
fn sample() -> Vec<u8> {
    let mut v = Vec::new();
    for cp in [
        0x41, 0xA0, 0xE9, 0x7FF, 0x800, 0x89F, 0x8A0, 0x3042, 0xD7FF, 0xE000, 0xFFFF, 0x1_0000,
        0x1_109F, 0x1_10A0, 0x1_F600, 0x10_FFFF, 0x0A,
    ] {
        view_of(cp, &mut v);
    }
    v
}

#[test]
fn input_split_at_every_position_and_tiny_output_buffers() {
    let text = sample();
    let (disk, _, _) = cutf8(&["encode"], &text);
    let mut bad_disk = disk.clone();
    bad_disk.extend_from_slice(&[0xE0, 0x80, b'x']); // truncated
    let mut bad_text = text.clone();
    bad_text.extend_from_slice(&[0xC2, 0x85]); // C1
    let cases: [(&str, &str, &[u8]); 6] = [
        ("UTF-8", "CORRECTED-UTF-8", &disk),
        ("UTF-16LE", "CORRECTED-UTF-8", &disk),
        ("UTF-8", "CORRECTED-UTF-8", &bad_disk),
        ("CORRECTED-UTF-8", "UTF-8", &text),
        ("CORRECTED-UTF-8", "UTF-16LE", &utf16le(&text)),
        ("CORRECTED-UTF-8", "UTF-8", &bad_text),
    ];
    for (to, from, input) in cases {
        let want = whole(to, from, input);
        for cut in 0..=input.len() {
            for cap in [4, 5, 6, 7, 9, 16] {
                let got = stream(to, from, input, &[cut], cap);
                assert_eq!(got, want, "{from}->{to} cut at {cut}, {cap}-byte output");
            }
        }
        let every: Vec<usize> = (1..input.len()).collect();
        assert_eq!(
            stream(to, from, input, &every, 4),
            want,
            "{from}->{to} byte by byte"
        );
    }
    // The cutf8 verdicts these must equal.
    assert_eq!(whole("UTF-8", "CORRECTED-UTF-8", &disk).out, text);
    let (_, off, _) = cutf8_decode(&bad_disk);
    assert_eq!(
        whole("UTF-8", "CORRECTED-UTF-8", &bad_disk).err.unwrap().0,
        off.unwrap()
    );
    let (_, off, _) = cutf8(&["encode"], &bad_text);
    assert_eq!(
        whole("CORRECTED-UTF-8", "UTF-8", &bad_text).err.unwrap().0,
        off.unwrap()
    );
}

// ---------------------------------------------------------------- iconv(1)

fn iconv1(args: &[&str], input: &Path) -> std::process::Output {
    Command::new("iconv")
        .args(args)
        .arg(input)
        .env("GCONV_PATH", gconv_dir())
        .output()
        .expect("run iconv(1)")
}

#[test]
fn iconv1_reports_errors_where_cutf8_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(0x14_0003);
    for i in 0..60 {
        let (args, input, cargs): (&[&str], Vec<u8>, &[&str]) = if i % 2 == 0 {
            let body = random_disk(&mut rng, true);
            (
                &["-f", "CORRECTED-UTF-8", "-t", "UTF-8"],
                [&MAGIC[..], &body].concat(),
                &["decode"],
            )
        } else {
            (
                &["-f", "UTF-8", "-t", "CUTF-8"],
                random_view(&mut rng, true),
                &["encode"],
            )
        };
        let f = dir.path().join(format!("in{i}"));
        std::fs::write(&f, &input).unwrap();
        let (want, off, msg) = cutf8(cargs, &input);
        let out = iconv1(args, &f);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.stdout, want, "case {i} {input:02X?}");
        match off {
            None => assert!(out.status.success(), "case {i}: {err}"),
            Some(o) => {
                assert!(!out.status.success());
                if err.contains("incomplete character") {
                    assert!(msg.contains("truncated"), "case {i}: {err} vs {msg}");
                    assert!(input[o..].iter().skip(1).all(|b| b & 0xC0 == 0x80));
                } else {
                    assert!(
                        err.contains(&format!("at position {o}")),
                        "case {i} {input:02X?}: iconv says {err}, cutf8 says {msg}"
                    );
                }
            }
        }
    }
}

/// iconv(1) says "illegal input sequence at position N" for a magic number
/// inside a file, N the byte offset `cutf8 decode` prints, and writes the
/// same text before it; a file that ends with part of one converts as
/// `cutf8 decode` converts it (iconv(1) flushes at the end of each file,
/// so each file's leading magic number is dropped, as by `cutf8 decode a b`).
#[test]
fn iconv1_reports_a_second_magic_number_where_cutf8_does() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| {
            let f = dir.path().join(n);
            std::fs::write(&f, cutf8(&["encode"], format!("{n}\n").as_bytes()).0).unwrap();
            f
        })
        .collect();
    let out = Command::new("iconv")
        .args(["-f", "CUTF8", "-t", "UTF-8"])
        .args(&files)
        .env("GCONV_PATH", gconv_dir())
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
    let want = Command::new(CUTF8)
        .arg("decode")
        .args(&files)
        .output()
        .unwrap();
    assert_eq!(
        (out.stdout, &want.stdout[..]),
        (b"a\nb\n".to_vec(), &b"a\nb\n"[..])
    );
    let mut rng = StdRng::seed_from_u64(0x14_0006);
    for i in 0..30 {
        let body = random_disk(&mut rng, false);
        let at = rng.gen_range(0..=body.len());
        let input = if i % 3 == 2 {
            [&MAGIC[..], &body, &MAGIC[..[3, 6, 7][(i / 3) % 3]]].concat()
        } else {
            [&MAGIC[..], &body[..at], &MAGIC, &body[at..]].concat()
        };
        let f = dir.path().join(format!("in{i}"));
        std::fs::write(&f, &input).unwrap();
        let (want, off, msg) = cutf8(&["decode"], &input);
        for to in ["UTF-8", "UTF-16LE"] {
            let out = iconv1(&["-f", "CORRECTED-UTF-8", "-t", to], &f);
            let err = String::from_utf8_lossy(&out.stderr);
            let want_out = if to == "UTF-8" {
                want.clone()
            } else {
                utf16le(&want)
            };
            assert_eq!(out.stdout, want_out, "case {i} to {to} {input:02X?}");
            match off {
                None => assert!(out.status.success(), "case {i}: {err}"),
                Some(o) => {
                    assert!(
                        err.contains(&format!("illegal input sequence at position {o}")),
                        "case {i} to {to}: iconv says {err}, cutf8 says {msg}"
                    );
                }
            }
        }
    }
}

#[test]
fn iconv1_converts_100_mib_like_cutf8() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(0x14_0004);
    let mut text = Vec::with_capacity(100 << 20);
    while text.len() < 100 << 20 {
        view_of(random_cp(&mut rng), &mut text);
    }
    // The magic number's code points in a row (U+10E7D U+ED4E U+0000
    // U+000A: random_cp favours each) encode to a magic number inside the
    // file, which strict decoding refuses, the module as `cutf8 decode`:
    // this seed has one. Make it U+10E7D U+ED4E U+0020 U+000A.
    let view_magic = cutf8::MAGIC_TEXT;
    let mut from = 0;
    while let Some(k) = memchr::memmem::find(&text[from..], &view_magic) {
        text[from + k + 7] = b' ';
        from += k + 1;
    }
    let (plain, coded) = (dir.path().join("plain"), dir.path().join("coded"));
    std::fs::write(&plain, &text).unwrap();
    let st = Command::new(CUTF8)
        .args(["encode", "-o"])
        .arg(&coded)
        .arg(&plain)
        .status()
        .unwrap();
    assert!(st.success());
    let t = std::time::Instant::now();
    let enc = iconv1(&["-f", "UTF-8", "-t", "CORRECTED-UTF-8"], &plain);
    println!("iconv(1) encode 100 MiB: {:?}", t.elapsed());
    crate::support::run::succeeded(&enc, "command failed");
    assert!(
        enc.stdout == std::fs::read(&coded).unwrap(),
        "encode differs from cutf8"
    );
    let t = std::time::Instant::now();
    let dec = iconv1(&["-f", "CORRECTED-UTF-8", "-t", "UTF-8"], &coded);
    println!("iconv(1) decode 100 MiB: {:?}", t.elapsed());
    crate::support::run::succeeded(&dec, "command failed");
    assert!(dec.stdout == text, "decode is not the original text");
    // Through INTERNAL and glibc's UTF-16 module and back.
    let u16 = iconv1(&["-f", "CORRECTED-UTF-8", "-t", "UTF-16"], &coded);
    assert!(u16.status.success());
    let p16 = dir.path().join("u16");
    std::fs::write(&p16, &u16.stdout).unwrap();
    let back = iconv1(&["-f", "UTF-16", "-t", "CORRECTED-UTF-8"], &p16);
    assert!(back.status.success());
    assert!(
        back.stdout == std::fs::read(&coded).unwrap(),
        "UTF-16 round trip"
    );
}

// ---------------------------------------------------------------- file(1)

#[test]
fn file_names_corrected_files() {
    let magic = prefix().join("share/cutf8fs/magic");
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    let (coded, _, _) = cutf8(&["encode"], "Grüße, ࠀ 𐀀\n".as_bytes());
    std::fs::write(&notes, &coded).unwrap();
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, "Grüße\n").unwrap();
    let file = |args: &[&str], f: &Path| {
        let out = Command::new("file")
            .arg("-m")
            .arg(&magic)
            .args(args)
            .arg(f)
            .output()
            .expect("file(1) (scripts/setup.sh installs it)");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(file(&["-b"], &notes).starts_with("Corrected UTF-8 text"));
    assert_eq!(file(&["-b", "--mime-type"], &notes).trim(), "text/plain");
    assert!(!file(&["-b"], &plain).contains("Corrected"));
}

// ---------------------------------------------------------------- recipes

fn run(cmd: &mut Command) -> Vec<u8> {
    crate::support::run::run(cmd).stdout
}

fn git(dir: &Path, module: bool) -> impl Fn(&[&str]) -> Vec<u8> + '_ {
    move |args: &[&str]| {
        let mut c = Command::new("git");
        c.current_dir(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.org")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.org")
            .env("PATH", path_with_cutf8());
        if module {
            c.env("GCONV_PATH", gconv_dir());
        } else {
            c.env_remove("GCONV_PATH");
        }
        run(&mut c)
    }
}

fn path_with_cutf8() -> String {
    let bin = Path::new(CUTF8).parent().unwrap().display().to_string();
    format!("{bin}:{}", std::env::var("PATH").unwrap_or_default())
}

const NOTES_V1: &str = "Grüße, ࠀ wide 𐀀\nline two\n";
const NOTES_V2: &str = "Grüße, ࠀ wide 𐀀\nline 2 ࠁ\n";

/// Both git recipes: the repository stores UTF-8, the working tree holds
/// Corrected files; diff and log -p are readable; checkout gives back the
/// exact bytes.
fn git_recipe(module: bool, attributes: &str, config: &[[&str; 2]]) {
    let dir = tempfile::tempdir().unwrap();
    let g = git(dir.path(), module);
    g(&["init", "-q", "."]);
    for [k, v] in config {
        g(&["config", k, v]);
    }
    std::fs::write(dir.path().join(".gitattributes"), attributes).unwrap();
    let notes = dir.path().join("notes.txt");
    let (v1, _, _) = cutf8(&["encode"], NOTES_V1.as_bytes());
    std::fs::write(&notes, &v1).unwrap();
    g(&["add", "."]);
    g(&["commit", "-qm", "one"]);
    assert_eq!(
        g(&["cat-file", "-p", "HEAD:notes.txt"]),
        NOTES_V1.as_bytes()
    );
    let (v2, _, _) = cutf8(&["encode"], NOTES_V2.as_bytes());
    std::fs::write(&notes, &v2).unwrap();
    let diff = String::from_utf8(g(&["diff"])).unwrap();
    assert!(diff.contains("-line two\n+line 2 ࠁ\n"), "{diff}");
    g(&["commit", "-qam", "two"]);
    let log = String::from_utf8(g(&["log", "-p", "-1"])).unwrap();
    assert!(log.contains("+line 2 ࠁ"), "{log}");
    assert_eq!(g(&["status", "--porcelain"]), b"");
    std::fs::remove_file(&notes).unwrap();
    g(&["checkout", "notes.txt"]);
    assert_eq!(
        std::fs::read(&notes).unwrap(),
        v2,
        "checkout is not byte-exact"
    );
    g(&["checkout", "-q", "HEAD~1"]);
    assert_eq!(std::fs::read(&notes).unwrap(), v1);
    assert_eq!(g(&["status", "--porcelain"]), b"");
}

#[test]
fn git_working_tree_encoding_corrected_utf8() {
    git_recipe(
        true,
        "*.txt text working-tree-encoding=CORRECTED-UTF-8\n",
        &[],
    );
}

#[test]
fn git_clean_smudge_filter_without_the_module() {
    git_recipe(
        false,
        "*.txt filter=cutf8\n",
        &[
            ["filter.cutf8.clean", "cutf8 decode"],
            ["filter.cutf8.smudge", "cutf8 encode"],
            ["filter.cutf8.required", "true"],
        ],
    );
}

#[test]
fn vim_reads_and_writes_corrected_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let vimfile = prefix().join("share/cutf8fs/corrected-utf-8.vim");
    let (v1, _, _) = cutf8(&["encode"], NOTES_V1.as_bytes());
    let (want, _, _) = cutf8(&["encode"], NOTES_V2.as_bytes());
    // Detected by the magic number, and forced with ++enc on a copy.
    for (name, open) in [
        ("a.txt", "e a.txt"),
        ("b.txt", "e ++enc=corrected-utf-8 b.txt"),
    ] {
        std::fs::write(dir.path().join(name), &v1).unwrap();
        let src = format!("source {}", vimfile.display());
        let out = Command::new("vim")
            .current_dir(dir.path())
            .env("GCONV_PATH", gconv_dir())
            .args(["-u", "NONE", "-i", "NONE", "-N", "-n", "-es"])
            .args(["-c", "set enc=utf-8", "-c", &src, "-c", open])
            .args(["-c", "if &fenc !=# 'corrected-utf-8' | cquit | endif"])
            .args(["-c", "%s/line two/line 2 ࠁ/", "-c", "w", "-c", "q"])
            .output()
            .expect("vim (scripts/setup.sh installs it)");
        crate::support::run::succeeded(&out, format_args!("vim on {name}"));
        assert_eq!(
            std::fs::read(dir.path().join(name)).unwrap(),
            want,
            "{name}"
        );
    }
    // A plain UTF-8 file stays plain.
    std::fs::write(dir.path().join("p.txt"), "plain ü\n").unwrap();
    run(Command::new("vim")
        .current_dir(dir.path())
        .env("GCONV_PATH", gconv_dir())
        .args(["-u", "NONE", "-i", "NONE", "-N", "-n", "-es"])
        .args(["-c", "set enc=utf-8"])
        .args(["-c", &format!("source {}", vimfile.display())])
        .args([
            "-c",
            "e p.txt",
            "-c",
            "s/plain/still/",
            "-c",
            "w",
            "-c",
            "q",
        ]));
    assert_eq!(
        std::fs::read(dir.path().join("p.txt")).unwrap(),
        "still ü\n".as_bytes()
    );
}

#[test]
fn less_shows_corrected_files_through_lessopen() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, _, _) = cutf8(&["encode"], NOTES_V1.as_bytes());
    std::fs::write(dir.path().join("notes.txt"), &v1).unwrap();
    std::fs::write(dir.path().join("plain.txt"), "Grüße\n").unwrap();
    let lessopen = format!("|{} %s", prefix().join("bin/cutf8-lessopen").display());
    let less = |f: &str| {
        run(Command::new("less")
            .current_dir(dir.path())
            .env("LESSOPEN", &lessopen)
            .env("PATH", path_with_cutf8())
            .arg(f))
    };
    assert_eq!(less("notes.txt"), NOTES_V1.as_bytes());
    assert_eq!(less("plain.txt"), "Grüße\n".as_bytes());
}

/// When the step after ours stops (a character the target charset lacks,
/// or a full output buffer), the input position must still name the right
/// Corrected UTF-8 byte: the shim converts again up to that point.
#[test]
fn next_step_errors_land_on_the_right_byte() {
    let (disk, _, _) = cutf8(&["encode"], "aé €x".as_bytes());
    let euro = disk.len() - 4; // € is 3 bytes on disk, then 'x'
    for to in ["ISO-8859-1", "ASCII"] {
        let want = if to == "ASCII" { MAGIC.len() + 1 } else { euro };
        let got = whole(to, "CORRECTED-UTF-8", &disk);
        assert_eq!(got.err, Some((want, libc::EILSEQ)), "to {to}");
        for cap in [1, 2, 3] {
            let got = stream(to, "CORRECTED-UTF-8", &disk, &[], cap);
            assert_eq!(
                got.err,
                Some((want, libc::EILSEQ)),
                "to {to}, {cap}-byte output"
            );
        }
    }
}

/// Held units of a magic number that the step after ours cannot take
/// (U+10E7D has no ASCII form): when the input goes on, the error is at the
/// first byte of the call that made them text; when it ended, the final
/// flush fails, at the end of the input (docs/charset.md). Nothing is
/// written for them and the conversion stops there.
#[test]
fn held_units_the_next_step_refuses_fail_at_the_flush() {
    let input = [&MAGIC[..], b"a", &MAGIC[..3]].concat();
    let got = whole("ASCII", "CORRECTED-UTF-8", &input);
    assert_eq!(got.out, b"a");
    assert_eq!(got.err, Some((input.len(), libc::EILSEQ)));
    let input = [&MAGIC[..], b"a", &MAGIC[..3], b"b"].concat();
    assert_eq!(
        whole("ASCII", "CORRECTED-UTF-8", &input).err,
        Some((9, libc::EILSEQ))
    );
    for cap in [1, 2, 64] {
        let got = stream("ASCII", "CORRECTED-UTF-8", &input, &[12], cap);
        assert_eq!(got.out, b"a", "{cap}-byte output");
        assert_eq!(got.err, Some((12, libc::EILSEQ)), "{cap}-byte output");
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), [&MAGIC[..], b"a", &MAGIC[..3]].concat()).unwrap();
    let out = iconv1(&["-f", "CUTF8", "-t", "ASCII"], f.path());
    assert!(!out.status.success());
    assert_eq!(out.stdout, b"a");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("illegal input sequence at position 12"),
        "{err}"
    );
}

/// Through glibc's own steps (UTF-16 or UCS-4 to UTF-8, then ours) the
/// rules are the same: C1 controls, code points above U+10FFFF and text
/// that would encode to the magic number are errors at the right unit.
#[test]
fn internal_route_rejects_what_cutf8_rejects() {
    let c1 = [b'a', 0, 0x85, 0, b'b', 0];
    let got = whole("CORRECTED-UTF-8", "UTF-16LE", &c1);
    assert_eq!(got.err, Some((2, libc::EILSEQ)));
    assert_eq!(got.out, [&MAGIC[..], b"a"].concat());
    let big: Vec<u8> = [0x41u32, 0x11_0000, 0x42]
        .iter()
        .flat_map(|c| c.to_le_bytes())
        .collect();
    let got = whole("CUTF8", "UCS-4LE", &big);
    assert_eq!(got.err, Some((4, libc::EILSEQ)));
    let magic_text: Vec<u8> = utf16le("ab\u{10E7D}\u{ED4E}\u{0}\nx".as_bytes());
    for charset in ["CUTF8-NOMAGIC", "CUTF8"] {
        let got = whole(charset, "UTF-16LE", &magic_text);
        assert_eq!(got.err, Some((4, libc::EILSEQ)), "{charset}");
    }
}

/// A reset (iconv(cd, NULL, NULL, NULL, NULL)) re-arms glibc's UTF-16 BOM
/// exactly as much as our magic number: compare the two on one pattern.
#[test]
fn reset_treats_magic_as_utf16_treats_its_bom() {
    let count = |to: &str, mark: &[u8]| {
        let mut cd = Cd::open(to, "UTF-8");
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        for part in [&b"ab"[..], b"cd"] {
            let (_, p, e) = cd.call(Some(part), &mut buf);
            assert_eq!(e, 0);
            out.extend_from_slice(&buf[..p]);
            // SAFETY: the reset form of iconv(3).
            unsafe {
                libc::iconv(
                    cd.0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
        }
        out.windows(mark.len()).filter(|w| *w == mark).count()
    };
    let bom = count("UTF-16", &[0xFF, 0xFE]) + count("UTF-16", &[0xFE, 0xFF]);
    assert_eq!(count("CORRECTED-UTF-8", &MAGIC), bom);
}

/// `install-gconv.sh --system`, run in a private mount namespace over copies
/// of glibc's gconv directory and /etc/magic (the machine is untouched):
/// afterwards iconv and file know Corrected UTF-8 without GCONV_PATH.
#[test]
fn system_install_works_without_gconv_path() {
    let tmp = tempfile::tempdir().unwrap();
    let so = gconv_dir().join("CORRECTED-UTF-8.so");
    let script = r#"
        set -eu
        mount --make-rprivate /
        d=$(dirname "$(find /usr/lib /usr/lib64 /lib -maxdepth 3 -name UTF-16.so -path '*gconv*' | head -1)")
        cp -a "$d" "$T/gconv"; mount --bind "$T/gconv" "$d"
        touch "$T/magic"; [ -f /etc/magic ] && cp /etc/magic "$T/magic"
        [ -f /etc/magic ] && mount --bind "$T/magic" /etc/magic
        "$ROOT/scripts/install-gconv.sh" "$T/prefix" --system >/dev/null
        printf 'h\303\251llo\n' >"$T/plain"
        env -u GCONV_PATH iconv -f UTF-8 -t CORRECTED-UTF-8 "$T/plain" >"$T/coded"
        env -u GCONV_PATH iconv -f CUTF8 -t UTF-8 "$T/coded" >"$T/back"
        [ -f /etc/magic ] && env -u GCONV_PATH file -b "$T/coded" >"$T/file"
        true
    "#;
    let out = Command::new("unshare")
        .args(["-m", "bash", "-c", script])
        .env("T", tmp.path())
        .env("ROOT", ROOT)
        .env("CUTF8_GCONV_SO", &so)
        .env_remove("GCONV_PATH")
        .output()
        .expect("unshare (util-linux; the tests run as root)");
    crate::support::run::succeeded(&out, "command failed");
    let (want, _, _) = cutf8(&["encode"], "héllo\n".as_bytes());
    assert_eq!(std::fs::read(tmp.path().join("coded")).unwrap(), want);
    assert_eq!(
        std::fs::read(tmp.path().join("back")).unwrap(),
        "héllo\n".as_bytes()
    );
    if let Ok(f) = std::fs::read_to_string(tmp.path().join("file")) {
        assert!(f.starts_with("Corrected UTF-8 text"), "{f}");
    }
}
