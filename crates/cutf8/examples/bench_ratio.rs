//! The codec benchmark's headline alone, in thread CPU time: V's and W's
//! speed against simdutf8's validation of the same text (and memcpy's,
//! the floor of any pass that writes what it reads), each ratio taken
//! within one round, the operations alternating, medians over the rounds.
//! CPU time is what this thread ran, stalls on memory included and time
//! spent waiting for a CPU left out: steadier than wall-clock time on a
//! shared, loaded machine. Reports, never asserts.
//!
//! `cargo run -p cutf8 --release --example bench_ratio -- [MIB] [ROUNDS]
//! [CORPUS…]` (defaults: 64 MiB, 7 rounds, every corpus). Each timing
//! converts at least 64 MiB (a 1 MiB corpus 64 times over, in the cache),
//! so that reading the clock costs nothing that shows. `CUTF8_SIMD=avx2`,
//! `=sse2` or `=portable` measures a lower level than the best.

#[path = "../benches/support/mod.rs"]
mod support;

use support::Op;

const OPS: [Op; 9] = [
    Op::Simdutf8,
    Op::Memcpy,
    Op::DecodeLossless,
    Op::EncodeLossless,
    Op::DecodeStrict,
    Op::EncodeStrict,
    Op::ViewLen,
    Op::DiskLen,
    Op::CountBlocks,
];

/// Where the length passes (which only read) begin in `OPS`.
const LEN: usize = 6;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let only: Vec<String> = args.collect();
    let cs: Vec<_> = support::corpora(mib << 20)
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.name))
        .collect();
    let mut buf = support::Buffers::for_corpora(&cs);
    let times = (64 / mib.max(1)).max(1);
    println!(
        "codec SIMD path: {}; {mib} MiB corpora, each timing {times}× over; \
         thread CPU time, median of {rounds} rounds",
        support::simd_path()
    );
    println!(
        "{:<8} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | ÷ validation: {:>6} {:>6} {:>6} {:>6} | memcpy \
         || {:>7} {:>7} {:>7} | ÷ validation: {:>6} {:>6} {:>6}",
        "corpus", "valid", "memcpy", "V l", "W l", "V s", "W s", "V l", "W l", "V s", "W s",
        "vlen", "dlen", "blocks", "vlen", "dlen", "blocks"
    );
    for c in &cs {
        buf.verify(c);
        // rounds × ops: CPU ns per timing
        let mut ns = vec![Vec::with_capacity(rounds); OPS.len()];
        for _ in 0..rounds {
            for (k, &op) in OPS.iter().enumerate() {
                let t = cpu_ns();
                for _ in 0..times {
                    buf.run(op, c);
                }
                ns[k].push((cpu_ns() - t) as f64);
            }
        }
        let gbps = |k: usize, r: usize| (OPS[k].input(c).len() * times) as f64 / ns[k][r];
        let median = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let speed: Vec<f64> = (0..OPS.len())
            .map(|k| median((0..rounds).map(|r| gbps(k, r)).collect()))
            .collect();
        // Ratios within each round, then their median.
        let ratio = |k: usize, base: usize| {
            median((0..rounds).map(|r| gbps(k, r) / gbps(base, r)).collect())
        };
        print!("{:<8} {:>7.2} {:>7.2} |", c.name, speed[0], speed[1]);
        for s in &speed[2..LEN] {
            print!(" {s:>7.2}");
        }
        print!(" |              ");
        for k in 2..LEN {
            print!(" {:>5.2}×", ratio(k, 0));
        }
        print!(" | {:>5.2}× ||", ratio(1, 0));
        for s in &speed[LEN..] {
            print!(" {s:>7.2}");
        }
        print!(" |              ");
        for k in LEN..OPS.len() {
            print!(" {:>5.2}×", ratio(k, 0));
        }
        println!();
    }
    println!(
        "(GB/s of CPU time; the ÷ columns are medians of per-round ratios; memcpy ÷ validation; \
         then the length passes, which only read: view_len of the disk bytes, disk_len of the \
         view bytes, count_disk_blocks per 4 KiB block as the mount's offset index)"
    );
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`:
/// exact to the nanosecond, where `/proc/thread-self/schedstat` moves
/// only at the scheduler's ticks on some kernels).
fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` to the pointer, which
    // points to a live one.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
