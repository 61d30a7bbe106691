//! The codec benchmark as one table (run by `scripts/bench-codec.sh`):
//! decode, encode and the length passes on seven corpora of at least 64 MiB,
//! beside memcpy, `std::str::from_utf8`, simdutf8 and encoding_rs's
//! UTF-8 → UTF-16 on the same buffers in the same run, headed by V's and
//! W's speed against simdutf8's validation of the same text. Medians of
//! repeated runs, timed with `std::time::Instant`; it reports and never
//! asserts a speed.
//!
//! `cargo run -p cutf8 --release --example bench_table -- [MIB] [REPEATS]
//! [CORPUS…]` (defaults: 64 MiB, 9 repeats, all seven corpora: english latin
//! cjk emoji mixed random dense). `CUTF8_SIMD=avx2`, `=sse2` or `=portable` measures a
//! lower code path than the best (each converter is given that level).

#[path = "../benches/support/mod.rs"]
mod support;

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let repeats: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    let only: Vec<String> = args.collect();
    let cs: Vec<_> = support::corpora(mib << 20)
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.name))
        .collect();
    let mut buf = support::Buffers::for_corpora(&cs);
    print!("{}", support::describe(&cs));
    println!(
        "codec SIMD path: {}; median of {repeats} runs; GB/s = 1e9 input bytes/s\n",
        support::simd_path()
    );
    let medians = support::measure(&cs, &mut buf, repeats);
    println!("{}", support::headline(&cs, &medians));
    print!("{}", support::table(&cs, &medians));
}
