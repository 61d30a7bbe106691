//! Shared by `benches/codec.rs` (criterion), `examples/bench_table.rs` (the
//! table `scripts/bench-codec.sh` prints) and the workspace's
//! `examples/bench_gconv.rs`: the corpora, generated in-process from a fixed
//! seed, and the operations measured on them.
//!
//! Every corpus exists in view form (standard UTF-8) and in disk form
//! (Corrected UTF-8, made by the codec's own strict encoder). Throughput is
//! always input bytes per second, 1 GB = 10⁹ bytes: decode and the view-length
//! pass read the disk form, everything else reads the view form (both have
//! the same length but for `random` and `dense`, whose disk forms are
//! shorter). The per-block counts (`scan_disk per 4K block`, what the offset
//! index was built with, a closure call per growing unit, and
//! `count_disk_blocks 4K`) read the disk form too.
#![allow(dead_code)] // each includer uses a different part

use cutf8::index::{self, DiskEvent};
use cutf8::simd::Level;
use cutf8::{length, Decoder, Encoder, Status};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// A small deterministic generator (splitmix64): corpora must not change
/// when a dependency does.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
    }
    /// Skewed towards 0 (roughly Zipf-like word frequencies).
    fn skewed(&mut self, n: usize) -> usize {
        let a = self.below(n);
        let b = self.below(n);
        a * b / n
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "that",
    "is",
    "was",
    "he",
    "for",
    "it",
    "with",
    "as",
    "his",
    "on",
    "be",
    "at",
    "by",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "there",
    "would",
    "their",
    "we",
    "him",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "my",
    "now",
    "such",
    "like",
    "our",
    "over",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "house",
    "morning",
    "letter",
    "window",
    "garden",
    "silence",
    "remembered",
    "afternoon",
    "carriage",
    "whispered",
    "understand",
    "question",
    "question",
    "beautiful",
    "evening",
    "together",
    "towards",
    "nothing",
    "something",
    "everything",
    "children",
    "country",
    "perhaps",
    "himself",
    "herself",
    "believe",
    "although",
    "certainly",
    "distance",
    "government",
    "experience",
    "moment",
];

/// Accented letters of European Latin orthographies (all two bytes in UTF-8
/// and on disk).
const ACCENTED: &[char] = &[
    'é', 'è', 'ê', 'à', 'â', 'ç', 'ô', 'û', 'ü', 'ö', 'ä', 'ß', 'ñ', 'ł', 'ś', 'ż', 'ą', 'ę', 'ő',
    'ű', 'č', 'ř', 'š', 'ž', 'å', 'ø', 'æ', 'í', 'ó', 'ú', 'á', 'ğ', 'ı', 'ş', 'ý', 'ě', 'ů',
];

const EMOJI: &[u32] = &[
    0x1F600, 0x1F602, 0x1F603, 0x1F604, 0x1F60D, 0x1F618, 0x1F62D, 0x1F621, 0x1F44D, 0x1F44F,
    0x1F64F, 0x1F525, 0x1F389, 0x1F382, 0x1F4AF, 0x1F680, 0x1F308, 0x1F431, 0x1F436, 0x1F355,
    0x1F914, 0x1F923, 0x1F970, 0x1F973, 0x1F97A, 0x1F929, 0x1F60A, 0x1F60E, 0x1F622, 0x1F631,
];

/// English prose: ASCII only, words with Zipf-like frequencies, sentences
/// and paragraphs.
fn english(rng: &mut Rng, out: &mut String) {
    let sentences = 3 + rng.below(6);
    for s in 0..sentences {
        let words = 6 + rng.below(20);
        for w in 0..words {
            let word = WORDS[rng.skewed(WORDS.len())];
            if w == 0 {
                let mut cs = word.chars();
                out.extend(cs.next().map(|c| c.to_ascii_uppercase()));
                out.push_str(cs.as_str());
            } else {
                out.push_str(word);
            }
            if w + 1 < words {
                out.push_str(if rng.chance(8) { ", " } else { " " });
            }
        }
        out.push_str(if rng.chance(10) { "?" } else { "." });
        if s + 1 < sentences {
            out.push(' ');
        }
    }
    out.push_str("\n\n");
}

/// Latin-script text in which about 15% of the characters take two bytes.
fn latin(rng: &mut Rng, out: &mut String) {
    const ASCII_LETTERS: &[u8] = b"eeeaaaiiiooonnnrrrssstttlllcuudmpgvbfhzjkwy";
    let words = 20 + rng.below(60);
    for w in 0..words {
        let len = 2 + rng.skewed(10);
        for k in 0..len {
            if rng.chance(18) {
                out.push(ACCENTED[rng.skewed(ACCENTED.len())]);
            } else {
                let c = ASCII_LETTERS[rng.below(ASCII_LETTERS.len())] as char;
                out.push(if k == 0 && w == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                });
            }
        }
        if w + 1 < words {
            out.push_str(if rng.chance(7) { ", " } else { " " });
        }
    }
    out.push_str(".\n");
}

/// Chinese text: characters from the CJK Unified Ideographs block with
/// skewed frequencies, full-width punctuation, a little ASCII.
fn cjk(rng: &mut Rng, out: &mut String) {
    let sentences = 2 + rng.below(6);
    for _ in 0..sentences {
        let chars = 8 + rng.below(30);
        for _ in 0..chars {
            if rng.chance(2) {
                out.push_str(&format!("{}", rng.below(2030)));
            } else {
                let cp = 0x4E00 + rng.skewed(0x9FA5 - 0x4E00) as u32;
                out.push(char::from_u32(cp).unwrap());
            }
            if rng.chance(6) {
                out.push('，');
            }
        }
        out.push(if rng.chance(15) { '？' } else { '。' });
    }
    out.push('\n');
}

/// Chat-like messages: short English fragments, many emoji, skin tones,
/// ZWJ families and U+2764 U+FE0F hearts.
fn emoji(rng: &mut Rng, out: &mut String) {
    let items = 3 + rng.below(12);
    for _ in 0..items {
        match rng.below(10) {
            0..=3 => {
                let words = 1 + rng.below(4);
                for _ in 0..words {
                    out.push_str(WORDS[rng.skewed(WORDS.len())]);
                    out.push(' ');
                }
            }
            4..=7 => {
                for _ in 0..1 + rng.below(3) {
                    out.push(char::from_u32(EMOJI[rng.skewed(EMOJI.len())]).unwrap());
                }
                if rng.chance(20) {
                    out.push(char::from_u32(0x1F3FB + rng.below(5) as u32).unwrap());
                }
            }
            8 => out.push_str("\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}"),
            _ => out.push_str("\u{2764}\u{FE0F}"),
        }
    }
    out.push('\n');
}

/// Greek and Cyrillic lower-case letters, arrows, mathematical operators,
/// box drawing and miscellaneous symbols: (first code point, count).
const MIXED_BLOCKS: &[(u32, u32)] = &[
    (0x03B1, 25),  // Greek
    (0x0430, 32),  // Cyrillic
    (0x2190, 112), // arrows
    (0x2200, 256), // mathematical operators
    (0x2500, 128), // box drawing
    (0x2600, 256), // miscellaneous symbols
];

/// Text whose script changes every few characters, as in multilingual
/// documents, code with non-ASCII identifiers and random test text: runs of
/// one to three characters, each from ASCII letters, accented Latin, Greek,
/// Cyrillic, CJK, symbols or emoji, now and then a space.
fn mixed(rng: &mut Rng, out: &mut String) {
    for _ in 0..40 {
        let run = 1 + rng.below(3);
        let script = rng.below(7);
        for _ in 0..run {
            let c = match script {
                0 => (b'a' + rng.below(26) as u8) as char,
                1 => ACCENTED[rng.below(ACCENTED.len())],
                2 | 3 => {
                    let (first, n) = MIXED_BLOCKS[rng.below(MIXED_BLOCKS.len())];
                    char::from_u32(first + rng.below(n as usize) as u32).unwrap()
                }
                4 => char::from_u32(0x4E00 + rng.below(0x9FA5 - 0x4E00) as u32).unwrap(),
                5 => char::from_u32(EMOJI[rng.below(EMOJI.len())]).unwrap(),
                _ => char::from_u32(0x0400 + rng.below(0x50) as u32).unwrap(),
            };
            out.push(c);
        }
        if rng.chance(30) {
            out.push(' ');
        }
    }
    out.push('\n');
}

/// Random characters as the property tests and the write exerciser draw
/// them: ASCII, Latin-1 to Latin Extended-B, CJK, emoji, and a quarter from
/// the two blocks whose length differs on disk (U+0800–U+089F, two bytes
/// there; U+10000–U+1109F, three).
fn random(rng: &mut Rng, out: &mut String) {
    for _ in 0..80 {
        let cp = match rng.below(12) {
            0..=3 => b'a' as u32 + rng.below(26) as u32,
            4 => [b' ', b'\n', b'.', b'\t'][rng.below(4)] as u32,
            5 => 0xA0 + rng.below(0x250 - 0xA0) as u32,
            6 => 0x4E00 + rng.below(0x9FFF - 0x4E00) as u32,
            7 => 0x1F300 + rng.below(0x1F650 - 0x1F300) as u32,
            8 | 9 => 0x800 + rng.below(0xA0) as u32,
            _ => 0x1_0000 + rng.below(0x10A0) as u32,
        };
        out.push(char::from_u32(cp).unwrap());
    }
}

/// Text dense in growing units, as `scripts/bench-write.sh`'s cp-dense
/// writes it: a fifth of the characters from U+0800–U+089F and
/// U+10000–U+1109F (a disk unit that grows every 11 bytes or so), the rest
/// ASCII, é, ж, λ, 中, 字, 😀 and → mixed at character level.
fn dense(rng: &mut Rng, out: &mut String) {
    const OTHER: &[char] = &[
        'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', ' ', '\n', 'é', 'ж', 'λ', '中', '字',
        '😀', '→',
    ];
    for _ in 0..80 {
        let c = match rng.below(10) {
            0 => char::from_u32(0x800 + rng.below(0xA0) as u32).unwrap(),
            1 => char::from_u32(0x1_0000 + rng.below(0x10A0) as u32).unwrap(),
            _ => OTHER[rng.below(OTHER.len())],
        };
        out.push(c);
    }
}

/// One corpus in both forms.
pub struct Corpus {
    pub name: &'static str,
    pub view: Vec<u8>,
    pub disk: Vec<u8>,
}

impl Corpus {
    /// Share of characters (not bytes) that are not ASCII, in percent.
    pub fn non_ascii_percent(&self) -> f64 {
        let s = std::str::from_utf8(&self.view).unwrap();
        let (mut all, mut wide) = (0usize, 0usize);
        for c in s.chars() {
            all += 1;
            wide += (c as u32 >= 0x80) as usize;
        }
        100.0 * wide as f64 / all.max(1) as f64
    }
}

/// The corpora, each at least `min_bytes` long in view form.
pub fn corpora(min_bytes: usize) -> Vec<Corpus> {
    type Gen = fn(&mut Rng, &mut String);
    let gens: [(&str, Gen); 7] = [
        ("english", english),
        ("latin", latin),
        ("cjk", cjk),
        ("emoji", emoji),
        ("mixed", mixed),
        ("random", random),
        ("dense", dense),
    ];
    gens.iter()
        .enumerate()
        .map(|(k, &(name, gen))| {
            let mut rng = Rng(0x00C0_FFEE + k as u64);
            let mut text = String::with_capacity(min_bytes + 4096);
            while text.len() < min_bytes {
                gen(&mut rng, &mut text);
            }
            let view = text.into_bytes();
            let disk = cutf8::encode_strict(&view).expect("corpus is storable");
            Corpus { name, view, disk }
        })
        .collect()
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Memcpy,
    StdFromUtf8,
    Simdutf8,
    EncodingRsUtf16,
    DecodeLossless,
    DecodeStrict,
    EncodeLossless,
    EncodeStrict,
    ViewLen,
    DiskLen,
    ScanBlocks,
    CountBlocks,
}

impl Op {
    pub const PEERS: [Op; 4] = [
        Op::Memcpy,
        Op::StdFromUtf8,
        Op::Simdutf8,
        Op::EncodingRsUtf16,
    ];
    pub const CODEC: [Op; 8] = [
        Op::DecodeLossless,
        Op::DecodeStrict,
        Op::EncodeLossless,
        Op::EncodeStrict,
        Op::ViewLen,
        Op::DiskLen,
        Op::ScanBlocks,
        Op::CountBlocks,
    ];
    pub const ALL: [Op; 12] = [
        Op::Memcpy,
        Op::StdFromUtf8,
        Op::Simdutf8,
        Op::EncodingRsUtf16,
        Op::DecodeLossless,
        Op::DecodeStrict,
        Op::EncodeLossless,
        Op::EncodeStrict,
        Op::ViewLen,
        Op::DiskLen,
        Op::ScanBlocks,
        Op::CountBlocks,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Memcpy => "memcpy",
            Op::StdFromUtf8 => "std::str::from_utf8",
            Op::Simdutf8 => "simdutf8 basic",
            Op::EncodingRsUtf16 => "encoding_rs utf8->utf16",
            Op::DecodeLossless => "decode V lossless",
            Op::DecodeStrict => "decode strict",
            Op::EncodeLossless => "encode W lossless",
            Op::EncodeStrict => "encode strict",
            Op::ViewLen => "view_len (disk)",
            Op::DiskLen => "disk_len (view)",
            Op::ScanBlocks => "scan_disk per 4K block",
            Op::CountBlocks => "count_disk_blocks 4K",
        }
    }

    /// The input this operation reads.
    pub fn input(self, c: &Corpus) -> &[u8] {
        match self {
            Op::DecodeLossless
            | Op::DecodeStrict
            | Op::ViewLen
            | Op::ScanBlocks
            | Op::CountBlocks => &c.disk,
            _ => &c.view,
        }
    }
}

/// The offset index's block size (`src/view/index.rs`).
const BLOCK: u64 = 4096;

/// Preallocated output buffers, reused by every run (as memcpy's is), and
/// the vector level the codec runs at.
pub struct Buffers {
    bytes: Vec<u8>,
    utf16: Vec<u16>,
    level: Level,
}

impl Buffers {
    pub fn for_corpora(cs: &[Corpus]) -> Self {
        let n = cs
            .iter()
            .map(|c| c.view.len().max(c.disk.len()))
            .max()
            .unwrap_or(0);
        let mut b = Buffers {
            bytes: vec![0; cutf8::max_view_len(n)],
            utf16: vec![0; n + 1],
            level: level(),
        };
        // Touch every page once so that no run pays for first faults.
        b.bytes.fill(1);
        b.utf16.fill(1);
        b
    }

    /// Run `op` once on `c`; returns a value derived from the result so that
    /// nothing is optimised away. Panics when the codec is wrong.
    pub fn run(&mut self, op: Op, c: &Corpus) -> u64 {
        let src = black_box(op.input(c));
        let r = match op {
            Op::Memcpy => {
                self.bytes[..src.len()].copy_from_slice(src);
                self.bytes[src.len() / 2] as u64
            }
            Op::StdFromUtf8 => std::str::from_utf8(src).is_ok() as u64,
            Op::Simdutf8 => simdutf8::basic::from_utf8(src).is_ok() as u64,
            Op::EncodingRsUtf16 => {
                encoding_rs::mem::convert_utf8_to_utf16(src, &mut self.utf16) as u64
            }
            Op::DecodeLossless | Op::DecodeStrict => {
                let d = if op == Op::DecodeLossless {
                    Decoder::lossless()
                } else {
                    Decoder::strict()
                };
                let mut d = d.with_simd_level(self.level);
                let (s, r, w) = d.convert(src, &mut self.bytes, true);
                assert_eq!((s, r, w), (Status::InputEmpty, src.len(), c.view.len()));
                w as u64
            }
            Op::EncodeLossless | Op::EncodeStrict => {
                let e = if op == Op::EncodeLossless {
                    Encoder::lossless()
                } else {
                    Encoder::strict()
                };
                let mut e = e.with_simd_level(self.level);
                let (s, r, w) = e.convert(src, &mut self.bytes, true);
                assert_eq!((s, r, w), (Status::InputEmpty, src.len(), c.disk.len()));
                w as u64
            }
            Op::ViewLen => {
                let mut c = length::LengthCounter::disk_to_view().with_simd_level(self.level);
                c.push(src);
                c.finish()
            }
            Op::DiskLen => {
                let mut c = length::LengthCounter::view_to_disk().with_simd_level(self.level);
                c.push(src);
                c.finish()
            }
            // What the offset index needs: growing units per 4 KiB block
            // (a checksum of them), by a closure call per unit ...
            Op::ScanBlocks => {
                let (mut sum, mut grow) = (0u64, 0u64);
                index::scan_disk(self.level, src, true, |e| {
                    if let DiskEvent::Grow(p) = e {
                        grow += 1;
                        sum = sum.wrapping_add((p as u64 / BLOCK + 1) * grow);
                    }
                });
                sum.wrapping_add(grow)
            }
            // ... and by the per-block count.
            Op::CountBlocks => {
                let (mut sum, mut grow) = (0u64, 0u64);
                index::count_disk_blocks(self.level, src, true, 0, BLOCK, |c| {
                    grow += c.grow;
                    sum = sum.wrapping_add((c.block + 1) * grow);
                });
                sum.wrapping_add(grow)
            }
        };
        black_box(r)
    }

    /// Check once, outside any timing, that the codec's output is right.
    pub fn verify(&mut self, c: &Corpus) {
        for op in [Op::DecodeLossless, Op::DecodeStrict] {
            self.run(op, c);
            assert!(
                self.bytes[..c.view.len()] == c.view[..],
                "{} {}",
                c.name,
                op.name()
            );
        }
        for op in [Op::EncodeLossless, Op::EncodeStrict] {
            self.run(op, c);
            assert!(
                self.bytes[..c.disk.len()] == c.disk[..],
                "{} {}",
                c.name,
                op.name()
            );
        }
        assert_eq!(self.run(Op::ViewLen, c), c.view.len() as u64);
        assert_eq!(self.run(Op::DiskLen, c), c.disk.len() as u64);
        {
            // The two per-block passes' checksums differ (a term per unit,
            // a term per block): compare the counts per block instead.
            let mut a = Vec::new();
            index::scan_disk(self.level, &c.disk, true, |e| {
                if let DiskEvent::Grow(p) = e {
                    match a.last_mut() {
                        Some((k, g)) if *k == p as u64 / BLOCK => *g += 1,
                        _ => a.push((p as u64 / BLOCK, 1u64)),
                    }
                }
            });
            let mut b = Vec::new();
            index::count_disk_blocks(self.level, &c.disk, true, 0, BLOCK, |x| {
                b.push((x.block, x.grow))
            });
            assert!(a == b, "{}: count_disk_blocks", c.name);
            let grown: u64 = b.iter().map(|x| x.1).sum();
            assert_eq!(grown, (c.view.len() - c.disk.len()) as u64);
        }
    }
}

/// Median of `repeats` timings of each operation on each corpus, taken
/// round-robin so that a noisy moment hurts every operation alike.
pub fn measure(cs: &[Corpus], buf: &mut Buffers, repeats: usize) -> Vec<Vec<Duration>> {
    let mut times = vec![vec![Vec::with_capacity(repeats); Op::ALL.len()]; cs.len()];
    for c in cs {
        buf.verify(c);
    }
    for _ in 0..repeats {
        for (ci, c) in cs.iter().enumerate() {
            for (oi, &op) in Op::ALL.iter().enumerate() {
                let t = Instant::now();
                buf.run(op, c);
                times[ci][oi].push(t.elapsed());
            }
        }
    }
    times
        .into_iter()
        .map(|per_op| {
            per_op
                .into_iter()
                .map(|mut ts| {
                    ts.sort();
                    ts[ts.len() / 2]
                })
                .collect()
        })
        .collect()
}

/// The headline: how fast V and W convert a text against simdutf8's
/// validation of the same text (the floor of any pass that reads UTF-8 and
/// writes it): validation time ÷ conversion time, so 1.0 is as fast as
/// reading the text once.
pub fn headline(cs: &[Corpus], medians: &[Vec<Duration>]) -> String {
    use std::fmt::Write;
    let time = |ci: usize, op: Op| {
        let oi = Op::ALL.iter().position(|&o| o == op).unwrap();
        medians[ci][oi].as_secs_f64()
    };
    let mut s = String::new();
    writeln!(
        s,
        "speed ÷ simdutf8's validation of the same text (validation time ÷ conversion time)\n{:<8} {:>12} {:>12} {:>12} {:>12}",
        "corpus", "V lossless", "V strict", "W lossless", "W strict"
    )
    .unwrap();
    for (ci, c) in cs.iter().enumerate() {
        let v = time(ci, Op::Simdutf8);
        write!(s, "{:<8}", c.name).unwrap();
        for op in [
            Op::DecodeLossless,
            Op::DecodeStrict,
            Op::EncodeLossless,
            Op::EncodeStrict,
        ] {
            write!(s, " {:>11.2}×", v / time(ci, op)).unwrap();
        }
        s.push('\n');
    }
    s
}

/// The table: corpus × operation, GB/s, and the ratio to each peer.
pub fn table(cs: &[Corpus], medians: &[Vec<Duration>]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let gbps = |ci: usize, op: Op| {
        let oi = Op::ALL.iter().position(|&o| o == op).unwrap();
        op.input(&cs[ci]).len() as f64 / medians[ci][oi].as_secs_f64() / 1e9
    };
    writeln!(
        s,
        "{:<8} {:<24} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "corpus", "operation", "GB/s", "/memcpy", "/std", "/simd8", "/enc_rs"
    )
    .unwrap();
    for (ci, c) in cs.iter().enumerate() {
        let peers: Vec<f64> = Op::PEERS.iter().map(|&p| gbps(ci, p)).collect();
        for op in Op::ALL {
            let g = gbps(ci, op);
            write!(s, "{:<8} {:<24} {:>7.2}", c.name, op.name(), g).unwrap();
            for p in &peers {
                write!(s, " {:>7.2}×", g / p).unwrap();
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// One line per corpus: sizes and the share of non-ASCII characters.
pub fn describe(cs: &[Corpus]) -> String {
    cs.iter()
        .map(|c| {
            format!(
                "{:<8} view {:>6.1} MiB, disk {:>6.1} MiB, {:>4.1}% non-ASCII characters\n",
                c.name,
                c.view.len() as f64 / (1 << 20) as f64,
                c.disk.len() as f64 / (1 << 20) as f64,
                c.non_ascii_percent()
            )
        })
        .collect()
}

/// The vector level to measure: the best this CPU has, or a lower one
/// that `CUTF8_SIMD=avx512|avx2|sse2|portable` names (the codec itself
/// reads no environment; each converter here is given the level).
pub fn level() -> Level {
    match std::env::var("CUTF8_SIMD") {
        Ok(v) => v.parse().unwrap_or_else(|e| panic!("CUTF8_SIMD: {e}")),
        Err(_) => Level::best(),
    }
}

/// The name of the vector level the codec runs here.
pub fn simd_path() -> &'static str {
    Decoder::strict()
        .with_simd_level(level())
        .simd_level()
        .name()
}
