//! `cargo bench`: criterion throughput of the codec beside memcpy,
//! `std::str::from_utf8`, simdutf8 and encoding_rs's UTF-8 → UTF-16 on seven
//! corpora of at least 64 MiB, then the ratio table of
//! `scripts/bench-codec.sh` (fewer repeats). Reports, never asserts.

mod support;

use criterion::{criterion_group, Criterion, Throughput};
use std::time::Duration;
use support::{Buffers, Op};

const MIB: usize = 64;

fn codec(c: &mut Criterion) {
    let cs = support::corpora(MIB << 20);
    let mut buf = Buffers::for_corpora(&cs);
    for corpus in &cs {
        buf.verify(corpus);
        let mut g = c.benchmark_group(corpus.name);
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for op in Op::PEERS.iter().chain(Op::CODEC.iter()) {
            g.throughput(Throughput::BytesDecimal(op.input(corpus).len() as u64));
            g.bench_function(op.name(), |b| b.iter(|| buf.run(*op, corpus)));
        }
        g.finish();
    }
    print!("\n{}", support::describe(&cs));
    println!("codec SIMD path: {}\n", support::simd_path());
    let medians = support::measure(&cs, &mut buf, 5);
    println!("{}", support::headline(&cs, &medians));
    print!("{}", support::table(&cs, &medians));
}

criterion_group!(benches, codec);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
