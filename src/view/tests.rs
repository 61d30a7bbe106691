//! The planners against a model: a corrected file held in memory, changed
//! only through plans, must always be magic + W(model) with a fresh index,
//! and read back as the model (view = V(disk)).

use cutf8::{decode_lossless, encode_lossless};
use proptest::prelude::*;

use super::write::{
    plan_append, plan_resize, plan_write, plan_zero, span_for_resize, spans_for, Resize, Way,
};
use super::{Error, OffsetIndex, Rescan, Span, END_SPAN};

/// A read through [`super::Reading`] from disk bytes in memory (a slice
/// shorter than the index says ends the read, as a short read does).
pub(crate) fn read_mem(disk: &[u8], index: &OffsetIndex, off: u64, buf: &mut [u8]) -> usize {
    let mut r = index.reading(off, buf.len());
    while let Some((pos, len)) = r.need() {
        let s = (pos as usize).min(disk.len());
        let e = (s + len).min(disk.len());
        r.feed(&disk[s..e], buf);
    }
    r.got()
}

/// A corrected file in memory, changed only through the planners.
struct Mem {
    disk: Vec<u8>,
    index: OffsetIndex,
}

impl Mem {
    fn new(view: &[u8]) -> Mem {
        let disk = encode_lossless(view).unwrap();
        let index = OffsetIndex::from_bytes(&disk);
        Mem { disk, index }
    }

    fn span(&self, (lo, hi): (u64, u64)) -> Span {
        let plan = self.index.span_plan(lo, hi);
        let s = (plan.start as usize).min(self.disk.len());
        let e = (s + plan.len).min(self.disk.len());
        self.index.span(plan, self.disk[s..e].to_vec())
    }

    fn rescan(&mut self, from: u64, changed_to: u64) {
        let n = self.disk.len() as u64;
        match self.index.rescan_plan(from, changed_to, n) {
            Rescan::Tail { start } => {
                let tail = OffsetIndex::from_bytes(&self.disk[start as usize..]);
                self.index.apply_tail(from, n, tail);
            }
            Rescan::Blocks { start, len } => {
                let s = start as usize;
                let e = (s + len).min(self.disk.len());
                let bytes = self.disk[s..e].to_vec();
                self.index.apply_blocks(from, changed_to, n, &bytes);
            }
        }
    }

    fn splice(&mut self, at: u64, old_end: u64, new: &[u8], way: Way) {
        let old_len = self.disk.len() as u64;
        match way {
            Way::InPlace => assert_eq!(old_end - at, new.len() as u64),
            Way::Extend => assert_eq!(old_end, old_len),
            Way::Tail => {}
        }
        // The mount counts an append that starts a unit alone: it must
        // come to the index a rescan gives.
        let mut quick = self.index.clone();
        let appended = at == old_len && quick.append_units(new);
        self.disk
            .splice(at as usize..old_end as usize, new.iter().copied());
        let changed_to = if way == Way::InPlace {
            old_end
        } else {
            self.disk.len() as u64
        };
        self.rescan(at, changed_to);
        if appended {
            assert_eq!(quick, self.index, "append_units differs from a rescan");
        }
    }

    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        let [l, r] = spans_for(off, off + data.len() as u64);
        let p = plan_write(&self.index, &self.span(l), &self.span(r), off, data);
        if let Some(quick) = plan_append(&self.index, off, data) {
            assert_eq!(quick, p, "plan_append differs from plan_write");
        }
        if off == self.index.view_len() {
            // An append plans the same from the file's last bytes alone.
            let n = self.disk.len().min(END_SPAN);
            if let Some(left) = self.index.end_span(&self.disk[self.disk.len() - n..]) {
                let quick = plan_write(&self.index, &left, &Span::end(&self.index), off, data);
                assert_eq!(quick, p, "planned from end_span, not as from span_plan");
            }
        }
        let p = p?;
        self.splice(p.at, p.old_end, &p.new, p.way);
        Ok(())
    }

    fn zero(&mut self, off: u64, len: u64) -> Result<(), Error> {
        let [l, r] = spans_for(off, off + len);
        let z = plan_zero(&self.index, &self.span(l), &self.span(r), off, len)?;
        let mut new = z.left.clone();
        new.resize(new.len() + z.zeros as usize, 0);
        new.extend_from_slice(&z.right);
        self.splice(z.at, z.old_end, &new, z.way);
        Ok(())
    }

    fn resize(&mut self, len: u64) -> Result<(), Error> {
        let span = self.span(span_for_resize(len));
        match plan_resize(&self.index, &span, len)? {
            Resize::Empty => {
                self.disk.clear();
                self.index = OffsetIndex::default();
            }
            Resize::Extend { disk_len } => {
                let old = self.disk.len() as u64;
                self.disk.resize(disk_len as usize, 0);
                self.rescan(old, disk_len);
            }
            Resize::Cut { at, tail } => {
                self.disk.truncate(at as usize);
                self.disk.extend_from_slice(&tail);
                let n = self.disk.len() as u64;
                self.rescan(at, n);
            }
        }
        Ok(())
    }

    fn check(&self, model: &[u8]) {
        assert_eq!(
            self.disk,
            encode_lossless(model).unwrap(),
            "disk is not W(model)"
        );
        assert_eq!(decode_lossless(&self.disk), model);
        assert_eq!(
            self.index,
            OffsetIndex::from_bytes(&self.disk),
            "stale index"
        );
        let mut buf = vec![0u8; model.len() + 3];
        let n = read_mem(&self.disk, &self.index, 0, &mut buf);
        assert_eq!(&buf[..n], model, "read back");
    }
}

/// Pieces of text: characters that keep their length, grow by one, or
/// span the 2-, 3- and 4-byte forms (also for `crate::io::write`'s tests).
pub(crate) const PIECES: &[&str] = &[
    "a",
    "bc\n",
    "é",
    "ж",
    "中文",
    "😀",
    "\u{800}",
    "\u{89F}",
    "𐀀",
    "\u{1109F}",
    "x y z",
];

fn text() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0..PIECES.len(), 0..200)
        .prop_map(|v| v.into_iter().flat_map(|i| PIECES[i].bytes()).collect())
}

/// Bytes to write: text, or pieces that split characters or cannot be
/// stored.
fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(0..PIECES.len(), 1..20)
            .prop_map(|v| v.into_iter().flat_map(|i| PIECES[i].bytes()).collect()),
        1 => prop::sample::select(vec![
            "中".as_bytes().to_vec(),
            "😀".as_bytes()[1..3].to_vec(),
            vec![0xE4],
            vec![0x80, 0x80],
            vec![0xFF],
            vec![0xC2, 0x85],
        ]),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// Write at a fraction (per mille) of the view, or past its end.
    Write(u32, Vec<u8>),
    Zero(u32, u64),
    Resize(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..1100u32, data()).prop_map(|(f, d)| Op::Write(f, d)),
        1 => (0..1000u32, 0..40u64).prop_map(|(f, n)| Op::Zero(f, n)),
        1 => (0..1100u32).prop_map(Op::Resize),
    ]
}

fn at(frac: u32, len: usize) -> u64 {
    (len as u64 * frac as u64) / 1000
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every plan, carried out, gives W of the model's new content; content
    /// W cannot store is refused exactly when the model says so.
    #[test]
    fn plans_follow_the_model(start in text(), ops in prop::collection::vec(op(), 1..25)) {
        let mut model = start.clone();
        let mut mem = Mem::new(&start);
        mem.check(&model);
        for op in ops {
            match op {
                Op::Write(f, d) => {
                    let off = at(f, model.len()).min(model.len() as u64);
                    let mut next = model.clone();
                    let end = off as usize + d.len();
                    if next.len() < end {
                        next.resize(end, 0);
                    }
                    next[off as usize..end].copy_from_slice(&d);
                    let storable = encode_lossless(&next).is_ok();
                    let before = mem.disk.clone();
                    match mem.write(off, &d) {
                        Ok(()) => {
                            prop_assert!(storable, "wrote content W cannot store");
                            model = next;
                        }
                        Err(Error::Unstorable { .. }) => {
                            prop_assert!(!storable, "refused storable content");
                            prop_assert_eq!(&mem.disk, &before);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Zero(f, n) => {
                    let off = at(f, model.len());
                    let n = n.min(model.len() as u64 - off);
                    if n > 0 {
                        mem.zero(off, n).unwrap();
                        model[off as usize..(off + n) as usize].fill(0);
                    }
                }
                Op::Resize(f) => {
                    let len = at(f, model.len());
                    mem.resize(len).unwrap();
                    model.resize(len as usize, 0);
                }
            }
            mem.check(&model);
        }
    }

    /// A write at the view's end that continues the character the file
    /// ends in (a piece cut after `cut` bytes) plans the same from the
    /// file's last bytes (`end_span`, what the mount reads for appends) as
    /// from a block's start; text always has a unit start among them.
    #[test]
    fn appends_continuing_a_character_plan_the_same_from_the_end(
        start in text(),
        piece in 0..PIECES.len(),
        cut in 1usize..4,
        more in data(),
    ) {
        let piece = PIECES[piece].as_bytes();
        prop_assume!(cut < piece.len());
        let mut view = start;
        view.extend_from_slice(&piece[..cut]);
        prop_assume!(encode_lossless(&view).is_ok());
        let mem = Mem::new(&view);
        let mut data = piece[cut..].to_vec();
        data.extend_from_slice(&more);
        let off = mem.index.view_len();
        let [l, r] = spans_for(off, off + data.len() as u64);
        let full = plan_write(&mem.index, &mem.span(l), &mem.span(r), off, &data);
        let n = mem.disk.len().min(END_SPAN);
        let left = mem.index.end_span(&mem.disk[mem.disk.len() - n..]);
        prop_assert!(left.is_some(), "no end span for {:?}", &mem.disk[mem.disk.len() - n..]);
        let quick = plan_write(&mem.index, &left.unwrap(), &Span::end(&mem.index), off, &data);
        prop_assert_eq!(quick, full);
    }

    /// `end_span` starts where a unit starts, at that unit's view offset,
    /// and covers `REACH` view bytes, or gives up; for disk bytes of any
    /// kind (text, stray continuation bytes in runs, cut units), short
    /// files included.
    #[test]
    fn end_spans_start_at_a_unit_and_reach_back_far_enough(
        parts in prop::collection::vec(prop_oneof![
            3 => (0..PIECES.len()).prop_map(|i| encode_lossless(PIECES[i].as_bytes()).unwrap()),
            1 => prop::collection::vec(0x80u8..0xC0, 1..14),
            1 => prop::sample::select(vec![vec![0xDD], vec![0xEE, 0xBD], vec![0xF0, 0x80]]),
        ], 0..12),
    ) {
        let disk: Vec<u8> = parts.concat();
        let index = OffsetIndex::from_bytes(&disk);
        let n = disk.len().min(END_SPAN);
        let Some(span) = index.end_span(&disk[disk.len() - n..]) else {
            // Only a tail without a unit start that reaches back far enough.
            let ok = disk[disk.len() - n..]
                .iter()
                .enumerate()
                .filter(|(_, b)| !crate::view::is_cont(**b))
                .any(|(p, _)| cutf8::length::view_len(&disk[disk.len() - n + p..]) >= super::write::REACH);
            prop_assert!(!ok && n < disk.len(), "no end span for {:?}", disk);
            return Ok(());
        };
        let at = span.disk_offset_of(span.view_start());
        prop_assert!(at == 0 || !crate::view::is_cont(disk[at as usize]), "starts inside a unit");
        prop_assert_eq!(decode_lossless(&disk[..at as usize]).len() as u64, span.view_start());
        prop_assert!(at == 0 || span.view_start() + super::write::REACH <= index.view_len());
    }

    /// A read of any range gives the model's bytes there.
    #[test]
    fn reads_follow_the_model(start in text(), off in 0..1100u32, len in 0..600usize) {
        let mem = Mem::new(&start);
        let off = at(off, start.len());
        let mut buf = vec![0u8; len];
        let n = read_mem(&mem.disk, &mem.index, off, &mut buf);
        let o = (off as usize).min(start.len());
        prop_assert_eq!(&buf[..n], &start[o..(o + len).min(start.len())]);
    }
}

#[test]
fn unstorable_names_the_view_offset() {
    let mut mem = Mem::new("héllo wörld\n".as_bytes());
    let e = mem.write(3, &[0xC2, 0x85]).unwrap_err();
    assert_eq!(
        e,
        Error::Unstorable {
            problem: cutf8::Problem::C1Control(0x85),
            offset: 3
        }
    );
}

/// BACKING shrinks the file between the reads of the two spans: the plan
/// must see that its spans disagree with the index (never a panic, never a
/// patch computed from a short read).
#[test]
fn spans_cut_short_by_a_shrinking_file_plan_nothing() {
    let text = "中文 and 😀 ".repeat(50);
    let mem = Mem::new(text.as_bytes());
    for (off, shrink_to) in [(100u64, 0usize), (100, 90), (3, 0), (500, 200), (600, 1)] {
        let data = "x\u{800}".as_bytes();
        let [l, r] = spans_for(off, off + data.len() as u64);
        let left = mem.span(l);
        let cut = &mem.disk[..shrink_to];
        let plan = mem.index.span_plan(r.0, r.1);
        let s = (plan.start as usize).min(cut.len());
        let e = (s + plan.len).min(cut.len());
        let right = mem.index.span(plan, cut[s..e].to_vec());
        assert_eq!(
            plan_write(&mem.index, &left, &right, off, data),
            Err(Error::Changed),
            "off {off} shrunk to {shrink_to}"
        );
        assert_eq!(
            plan_zero(&mem.index, &left, &right, off, 4),
            Err(Error::Changed),
            "zero: off {off} shrunk to {shrink_to}"
        );
    }
}

/// [`read_mem`], with whether the reading found the bytes disagreeing with
/// the index.
fn read_mem_stale(disk: &[u8], index: &OffsetIndex, off: u64, buf: &mut [u8]) -> (usize, bool) {
    let mut r = index.reading(off, buf.len());
    while let Some((pos, len)) = r.need() {
        let s = (pos as usize).min(disk.len());
        let e = (s + len).min(disk.len());
        r.feed(&disk[s..e], buf);
    }
    (r.got(), r.stale())
}

/// A right index is never taken for a stale one, whatever the read; a stale
/// one (the bytes changed in place, same length, as a write through a
/// shared mapping does without moving the file's times) never makes a read
/// go beyond the bytes or the buffer, and is noticed where a read checks.
#[test]
fn a_stale_index_is_noticed_and_never_reads_beyond_the_bytes() {
    use crate::view::index::tests::corpus;
    let mut noticed = 0;
    let mut reads = 0;
    for seed in 0..12u64 {
        let disk = corpus(
            100 + seed,
            20_000 + seed as usize * 3_000,
            60,
            seed % 2 == 0,
        );
        let index = OffsetIndex::from_bytes(&disk);
        let view = decode_lossless(&disk);
        let vlen = index.view_len();
        assert_eq!(vlen, view.len() as u64);
        let offsets = [
            0,
            1,
            4095,
            4096,
            5000,
            vlen / 2,
            vlen.saturating_sub(4096),
            vlen - 1,
        ];
        for &off in &offsets {
            for len in [1usize, 100, 4096, 8192, 131_072] {
                let mut buf = vec![0u8; len];
                let (n, stale) = read_mem_stale(&disk, &index, off, &mut buf);
                let o = off as usize;
                assert_eq!(
                    &buf[..n],
                    &view[o..(o + len).min(view.len())],
                    "seed {seed} off {off}"
                );
                assert!(
                    !stale,
                    "seed {seed}: a right index taken for stale at {off}+{len}"
                );
            }
        }
        // Change bytes in place: replace a growing unit's bytes with ASCII
        // (or ASCII with a growing unit) near each offset the reads check.
        let mut changed = disk.clone();
        let mut rng_state = seed * 7 + 1;
        for i in (0..changed.len()).step_by(997) {
            rng_state = rng_state.wrapping_mul(6364136223846793005).wrapping_add(1);
            if rng_state >> 63 == 0 && i + 2 <= changed.len() {
                changed[i..i + 2].copy_from_slice(&[0xC0 | 0x1F, 0xBF]); // U+089F: grows
            } else {
                changed[i] = b'x';
            }
        }
        for &off in &offsets {
            for len in [4096usize, 131_072] {
                let mut buf = vec![0u8; len];
                let (n, stale) = read_mem_stale(&changed, &index, off, &mut buf);
                assert!(n <= len);
                reads += 1;
                noticed += usize::from(stale);
            }
        }
        // The end moved: the last block holds one more growing unit.
        let mut end = disk.clone();
        let at = end.len() - 3;
        end[at..at + 2].copy_from_slice(&[0xDF, 0xBF]);
        end[at + 2] = b'\n';
        let fresh = OffsetIndex::from_bytes(&end);
        if fresh.view_len() != vlen {
            let mut buf = vec![0u8; 64];
            let (_, stale) = read_mem_stale(&end, &index, vlen - 10, &mut buf);
            assert!(
                stale,
                "seed {seed}: a read to the view's end missed a moved end"
            );
        }
    }
    assert!(
        noticed * 2 > reads,
        "only {noticed} of {reads} reads over changed bytes noticed the stale index"
    );
}

/// Reads as large as the kernel's largest request (1 MiB) and larger,
/// decoded straight into the reader's buffer, give the view's bytes
/// exactly wherever they start and end: inside a unit, one byte short of
/// one, at the view's end; and a right index is never taken for stale.
#[test]
fn large_reads_cut_anywhere_give_the_view_exactly() {
    use crate::view::index::tests::corpus;
    for (seed, dense, junk) in [(1u64, 60, true), (2, 400, false), (3, 0, false)] {
        let disk = corpus(seed, 1_200_000, dense, junk);
        let index = OffsetIndex::from_bytes(&disk);
        let view = decode_lossless(&disk);
        let vlen = view.len();
        assert_eq!(index.view_len(), vlen as u64);
        let mut starts: Vec<usize> = (0..9).collect();
        starts.extend(4090..4100);
        starts.extend(vlen / 3..vlen / 3 + 9);
        for &off in &starts {
            for len in (0..9).flat_map(|k| [(1 << 20) + k, vlen / 2 + k, 40 + k]) {
                let mut buf = vec![0u8; len];
                let (n, stale) = read_mem_stale(&disk, &index, off as u64, &mut buf);
                let want = &view[off..(off + len).min(vlen)];
                assert_eq!(n, want.len(), "seed {seed}: {off}+{len}");
                assert!(buf[..n] == *want, "seed {seed}: {off}+{len} differs");
                assert!(!stale, "seed {seed}: {off}+{len} taken for stale");
            }
        }
        // Reads that end at the view's end, from every cut near it.
        for back in 1..40 {
            for extra in [0, 1, 7, 4096] {
                let off = vlen - back;
                let mut buf = vec![0u8; back + extra];
                let (n, stale) = read_mem_stale(&disk, &index, off as u64, &mut buf);
                assert!(
                    buf[..n] == view[off..],
                    "seed {seed}: end read {off}+{}",
                    back + extra
                );
                assert!(!stale, "seed {seed}: end read taken for stale");
            }
        }
    }
}

/// The preads a read plans, `(disk offset, length)`, fed from `disk`.
fn planned_reads(disk: &[u8], index: &OffsetIndex, off: u64, len: usize) -> Vec<(u64, usize)> {
    let mut buf = vec![0u8; len];
    let mut r = index.reading(off, len);
    let mut asked = Vec::new();
    while let Some((pos, n)) = r.need() {
        asked.push((pos, n));
        let s = (pos as usize).min(disk.len());
        let e = (s + n).min(disk.len());
        r.feed(&disk[s..e], &mut buf);
    }
    asked
}

#[test]
fn a_read_asks_no_disk_bytes_past_what_it_needs() {
    use crate::view::index::tests::corpus;
    const MIB: usize = 1 << 20;
    // Text whose view is its bytes: a 1 MiB read needs 1 MiB of disk
    // bytes, the few before its block and a unit's slack after it.
    let disk: Vec<u8> = b"plain text, one byte a character\n"
        .iter()
        .copied()
        .cycle()
        .take(3 * MIB)
        .collect();
    let index = OffsetIndex::from_bytes(&disk);
    assert_eq!(index.view_len(), disk.len() as u64);
    for off in [0u64, 1, 4095, 4096, MIB as u64 + 7] {
        let asked = planned_reads(&disk, &index, off, MIB);
        assert_eq!(asked.len(), 16, "{off}: {asked:?}");
        for w in asked.windows(2) {
            assert_eq!(w[0].0 + w[0].1 as u64, w[1].0, "{off}: contiguous");
        }
        let (last, n) = *asked.last().unwrap();
        let end = last + n as u64;
        assert!(end >= off + MIB as u64, "{off}: ends at {end}");
        assert!(end <= off + MIB as u64 + 16, "{off}: reads to {end}");
        let total: usize = asked.iter().map(|a| a.1).sum();
        assert!(total <= MIB + 4096 + 16, "{off}: {total} bytes");
    }
    // Small reads ask a few bytes, not a chunk.
    let asked = planned_reads(&disk, &index, 100, 10);
    assert_eq!(asked.len(), 1);
    assert!(asked[0].1 <= 10 + 100 + 16, "{asked:?}");
    // A multi-byte sequence cut by the read's end is still completed:
    // whatever the text, every read gives the view exactly.
    let dense = corpus(5, 3 * MIB, 400, true);
    let index = OffsetIndex::from_bytes(&dense);
    let view = decode_lossless(&dense);
    for off in [0usize, 3, MIB - 1, MIB + 2] {
        for len in [MIB, MIB - 1, MIB + 3, 65536 + 1] {
            let mut buf = vec![0u8; len];
            let n = read_mem(&dense, &index, off as u64, &mut buf);
            assert!(buf[..n] == view[off..off + len], "{off}+{len}");
            let asked = planned_reads(&dense, &index, off as u64, len);
            let (last, k) = *asked.last().unwrap();
            let disk_end = last + k as u64;
            // The view never has fewer bytes than its disk bytes.
            assert!(
                disk_end <= (off + len) as u64 + 4096 + 16,
                "{off}+{len}: {asked:?}"
            );
        }
    }
}
