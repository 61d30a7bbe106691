//! What a random-access index of a file's view is built from: the units of
//! Corrected UTF-8 bytes whose view length differs, reported one by one
//! ([`scan_disk`]) or counted per block ([`count_disk_blocks`]).
//!
//! Hidden from the documentation and outside the crate's semver promise:
//! these follow what the one index that uses them (the `cutf8fs` mount's)
//! needs, and may change in any release. A program that wants lengths uses
//! [`crate::length`].

use crate::length;
use crate::simd::{Level, Path};

/// What a disk scan reports, with the offset of the unit's first byte.
/// A closed set (the only units whose length differs between disk and
/// view): callers match it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskEvent {
    /// A complete sequence whose view is one byte longer.
    Grow(usize),
    /// FE plus six continuation bytes carrying U+80000000–U+8421109F.
    Exempt(usize),
}

/// The units of one block that [`count_disk_blocks`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCount {
    /// The block: `(start + p) / block` for a unit at `buf[p]`.
    pub block: u64,
    /// Units whose view is one byte longer ([`DiskEvent::Grow`]).
    pub grow: u64,
    /// Exempt units ([`DiskEvent::Exempt`]).
    pub exempt: u64,
}

/// Scan Corrected UTF-8 bytes for units whose view length differs, on
/// vector code up to `level`.
///
/// Returns how many bytes were decided: all of `buf` when `at_end`,
/// otherwise possibly all but a last unit (at most six bytes) that the next
/// chunk decides — hand those bytes in again at the front of it. `buf` may
/// start anywhere except inside a complete sequence whose lead it lacks.
pub fn scan_disk(level: Level, buf: &[u8], at_end: bool, event: impl FnMut(DiskEvent)) -> usize {
    length::scan_disk(Path::at_most(level), buf, at_end, event)
}

/// Count, per block of `block` bytes, the units of Corrected UTF-8 bytes
/// whose view length differs: what [`scan_disk`] reports one by one,
/// without a call per unit, for an index that only needs the counts.
///
/// `start` is the offset of `buf[0]` in the data the blocks divide (it
/// need not be a block's start); a unit at `buf[p]` belongs to block
/// `(start + p) / block`. `tally` gets the blocks holding any such unit,
/// in increasing order, each once per call (a block cut by the end of one
/// chunk is tallied again by the call for the next). Same chunking
/// contract as [`scan_disk`]: returns how many bytes were decided; hand
/// the rest in again at the front of the next chunk (`start` moved on by
/// the return value).
///
/// Where the vector code runs, whole vectors whose candidates all
/// certainly grow are counted with a popcount each; the other candidates
/// (cut or ill-formed sequences, F7 FB FD FE leads) are decided one by one.
///
/// ```
/// use cutf8::index::{count_disk_blocks, BlockCount};
/// use cutf8::simd::Level;
/// // U+089F (DF BF) grows; block 2 of 4-byte blocks starts at offset 8.
/// let disk = b"abcdefg\xDF\xBFz\n";
/// let mut got = Vec::new();
/// assert_eq!(count_disk_blocks(Level::best(), disk, true, 1, 4, |c| got.push(c)), disk.len());
/// assert_eq!(got, [BlockCount { block: 2, grow: 1, exempt: 0 }]);
/// ```
///
/// # Panics
///
/// When `block` is 0.
pub fn count_disk_blocks(
    level: Level,
    buf: &[u8],
    at_end: bool,
    start: u64,
    block: u64,
    tally: impl FnMut(BlockCount),
) -> usize {
    length::count_disk_blocks(Path::at_most(level), buf, at_end, start, block, tally)
}
