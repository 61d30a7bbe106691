//! The table's slots: entries found by their FUSE number, hashed by a fast
//! mix of its bits.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use super::Inode;

/// A table entry, found by its FUSE number.
pub(super) struct Entry(pub(super) Arc<Inode>);

impl Borrow<u64> for Entry {
    fn borrow(&self) -> &u64 {
        &self.0.ino
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.0.ino == other.0.ino
    }
}

impl Eq for Entry {}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.ino.hash(h)
    }
}

/// Hashes inode numbers: they are the backing filesystem's (a user cannot
/// choose them), so a fast mix of the bits serves, where SipHash would
/// cost more than the rest of a lookup in the table.
#[derive(Clone, Copy, Default)]
pub(super) struct InoHash;

pub(super) struct InoHasher(u64);

impl Hasher for InoHasher {
    fn finish(&self) -> u64 {
        // splitmix64's finaliser.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

impl BuildHasher for InoHash {
    type Hasher = InoHasher;
    fn build_hasher(&self) -> InoHasher {
        InoHasher(0)
    }
}
