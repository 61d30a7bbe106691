//! One record of the index database, as bytes: the exact state of the file
//! it was learned from, the day it was last used, and the offset index.
//!
//! Pure: no I/O. [`decode`] accepts only what [`encode`] writes and an
//! index whose invariants hold ([`OffsetIndex::from_parts`]), so a damaged
//! record is "no record", never a panic or a wrong size.

use crate::io::Stamp;
use crate::view::OffsetIndex;

/// First byte of every record; bump when the layout changes.
const VERSION: u8 = 1;

/// What one record holds besides its key `(dev, ino)`.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub state: Stamp,
    /// Days since the epoch when the record was stored or last used.
    pub seen_day: u32,
    pub index: OffsetIndex,
}

/// Header: version, size, mtime (s, ns), ctime (s, ns), seen_day,
/// disk_len, growth, exempt, step count.
const HEAD: usize = 1 + 8 + 8 + 4 + 8 + 4 + 4 + 8 + 8 + 8 + 8;

pub fn encode(state: &Stamp, seen_day: u32, index: &OffsetIndex) -> Vec<u8> {
    let (disk_len, growth, exempt, steps) = index.parts();
    let mut v = Vec::with_capacity(HEAD + steps.len() * 16);
    v.push(VERSION);
    v.extend_from_slice(&state.size.to_le_bytes());
    v.extend_from_slice(&state.mtime.0.to_le_bytes());
    v.extend_from_slice(&(state.mtime.1 as u32).to_le_bytes());
    v.extend_from_slice(&state.ctime.0.to_le_bytes());
    v.extend_from_slice(&(state.ctime.1 as u32).to_le_bytes());
    v.extend_from_slice(&seen_day.to_le_bytes());
    v.extend_from_slice(&disk_len.to_le_bytes());
    v.extend_from_slice(&growth.to_le_bytes());
    v.extend_from_slice(&exempt.to_le_bytes());
    v.extend_from_slice(&(steps.len() as u64).to_le_bytes());
    for &(k, g) in steps {
        v.extend_from_slice(&k.to_le_bytes());
        v.extend_from_slice(&g.to_le_bytes());
    }
    v
}

/// Reads fixed-size little-endian fields off the front of a slice.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
}

/// The day a stored record was last used, read without decoding it all.
pub fn seen_day(bytes: &[u8]) -> Option<u32> {
    let b = bytes.get(33..37)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// The record of `(dev, ino)` stored as `bytes`; None when damaged.
pub fn decode(dev: u64, ino: u64, bytes: &[u8]) -> Option<Record> {
    let mut c = Cursor(bytes);
    if c.take::<1>()? != [VERSION] {
        return None;
    }
    let size = c.u64()?;
    let mtime = (c.i64()?, i64::from(c.u32()?));
    let ctime = (c.i64()?, i64::from(c.u32()?));
    let seen_day = c.u32()?;
    let disk_len = c.u64()?;
    let growth = c.u64()?;
    let exempt = c.u64()?;
    let n = usize::try_from(c.u64()?).ok()?;
    if c.0.len() != n.checked_mul(16)? {
        return None;
    }
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        steps.push((c.u64()?, c.u64()?));
    }
    let index = OffsetIndex::from_parts(disk_len, growth, exempt, steps)?;
    Some(Record {
        state: Stamp {
            dev,
            ino,
            size,
            mtime,
            ctime,
        },
        seen_day,
        index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Stamp {
        Stamp {
            dev: 3,
            ino: 77,
            size: 8 + 9000,
            mtime: (1_700_000_000, 123_456_789),
            ctime: (-5, 999_999_999),
        }
    }

    fn dense() -> OffsetIndex {
        let mut disk = Vec::new();
        for _ in 0..3 {
            let mut unit = [0u8; 8];
            let n = cutf8::unit::encode_disk(0x800, &mut unit).unwrap(); // grows by one
            disk.extend_from_slice(&unit[..n]);
            disk.resize(disk.len() + 3000, b'a');
        }
        OffsetIndex::from_bytes(&disk)
    }

    #[test]
    fn round_trip() {
        for index in [OffsetIndex::from_bytes(b"plain text"), dense()] {
            let bytes = encode(&state(), 20_000, &index);
            let r = decode(3, 77, &bytes).expect("decodes");
            assert_eq!(r.state, state());
            assert_eq!(r.seen_day, 20_000);
            assert_eq!(seen_day(&bytes), Some(20_000));
            assert_eq!(r.index, index);
        }
    }

    #[test]
    fn every_cut_and_every_flipped_version_is_refused_not_a_panic() {
        let index = dense();
        assert!(!index.is_identity());
        let bytes = encode(&state(), 1, &index);
        for cut in 0..bytes.len() {
            assert!(decode(3, 77, &bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(3, 77, &longer).is_none());
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert!(decode(3, 77, &v2).is_none());
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let index = dense();
        let good = encode(&state(), 1, &index);
        for i in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut b = good.clone();
            let at = (seed as usize) % b.len();
            b[at] ^= (seed >> 32) as u8 | 1;
            if i % 2 == 0 {
                let at2 = ((seed >> 20) as usize) % b.len();
                b[at2] = (seed >> 40) as u8;
            }
            if let Some(r) = decode(3, 77, &b) {
                // Whatever survives must be a usable index.
                let _ = r.index.view_len();
            }
        }
    }
}
