//! One operation of the codec benchmark on one corpus, timed in thread CPU
//! time rather than wall-clock time: steadier on a shared, loaded machine
//! (Linux only: reads `/proc/thread-self/schedstat`). Reports, never asserts.
//!
//! `cargo run -p cutf8 --release --example bench_cpu -- CORPUS OPERATION
//! [REPEATS] [MIB]`, e.g. `random decode` or `mixed encode` (an operation
//! is named by the start of its name in `scripts/bench-codec.sh`'s table).
//! Prints CPU nanoseconds per input byte and the GB/s they mean.

#[path = "../benches/support/mod.rs"]
mod support;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(corpus), Some(op)) = (args.first(), args.get(1)) else {
        eprintln!("usage: bench_cpu CORPUS OPERATION [REPEATS] [MIB]");
        std::process::exit(2);
    };
    let repeats: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(6);
    let mib: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(32);
    let cs: Vec<_> = support::corpora(mib << 20)
        .into_iter()
        .filter(|c| c.name == corpus)
        .collect();
    let Some(c) = cs.first() else {
        eprintln!("bench_cpu: no corpus {corpus}");
        std::process::exit(2);
    };
    let Some(&op) = support::Op::ALL
        .iter()
        .find(|o| o.name().starts_with(op.as_str()))
    else {
        eprintln!("bench_cpu: no operation {op}");
        std::process::exit(2);
    };
    let path = support::simd_path();
    let mut buf = support::Buffers::for_corpora(&cs);
    buf.verify(c);
    let start = cpu_ns();
    for _ in 0..repeats {
        buf.run(op, c);
    }
    let ns = (cpu_ns() - start) as f64 / (op.input(c).len() * repeats) as f64;
    println!(
        "{} {} ({path}): {ns:.3} CPU ns/byte = {:.2} GB/s",
        c.name,
        op.name(),
        1.0 / ns
    );
}

/// This thread's CPU time in nanoseconds.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux)")
}
