//! Sharding a walk: every path has a key, a hash of its path relative to
//! the named root (or, for a multiply linked file, of its inode number, so
//! that all its names land in one shard); shard K of N takes the keys with
//! `key % N == K - 1`. The key depends on nothing but the tree, so it is
//! the same on every machine.

/// `--shard K/N`, 1 ≤ K ≤ N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub k: u64,
    pub n: u64,
}

impl Shard {
    pub const ALL: Shard = Shard { k: 1, n: 1 };

    pub fn owns(&self, key: u64) -> bool {
        key % self.n == self.k - 1
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| format!("expected K/N, e.g. 3/8, got {s:?}"))?;
        let k: u64 = k.trim().parse().map_err(|_| format!("bad K in {s:?}"))?;
        let n: u64 = n.trim().parse().map_err(|_| format!("bad N in {s:?}"))?;
        if n == 0 || k == 0 || k > n {
            return Err(format!("need 1 <= K <= N, got {k}/{n}"));
        }
        Ok(Shard { k, n })
    }
}

/// 64-bit finalizer (splitmix64): spreads FNV's output over all bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The shard key of a path relative to its named root.
pub fn path_key(rel: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in rel {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The shard key of a multiply linked file.
pub fn inode_key(ino: u64) -> u64 {
    mix(ino ^ 0x6c69_6e6b_6564_2121)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_keys() {
        let keys: Vec<u64> = (0..1000)
            .map(|i| path_key(format!("d/{i}").as_bytes()))
            .collect();
        for n in 1..6 {
            let mut total = 0;
            for k in 1..=n {
                let s = Shard { k, n };
                total += keys.iter().filter(|&&key| s.owns(key)).count();
            }
            assert_eq!(total, keys.len());
        }
        // Stable across machines and versions: the hash is part of the
        // interface (shards of one archive may run different builds).
        assert_eq!(path_key(b""), mix(0xcbf2_9ce4_8422_2325));
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { k: 2, n: 3 }));
        assert!("0/3".parse::<Shard>().is_err());
        assert!("4/3".parse::<Shard>().is_err());
        assert!("3".parse::<Shard>().is_err());
    }
}
