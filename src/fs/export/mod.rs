//! Export support: what keeps a file handle made through the mount (by
//! `name_to_handle_at`, which is what an NFS server hands its clients)
//! valid for the life of the file in BACKING — after the kernel forgot the
//! inode, and after the daemon restarted. Used by the inode table
//! (`inodes`), which records and finds nodes here, and by the replies
//! that hand the kernel an entry (its generation).
//!
//! A handle the kernel makes for a FUSE inode holds its node id and its
//! generation, nothing else. When the kernel no longer has the inode, it
//! asks the daemon to look up "." in that node id (and ".." in a directory
//! to reconnect it); it then refuses the handle (ESTALE) unless the
//! generation of the entry it gets equals the handle's. So:
//!
//! * **Node ids** are the backing inode numbers (`inodes`): unique among
//!   the live files of BACKING's filesystem and stable across mounts, so
//!   `ls -i` shows the same numbers after a remount and nothing needs
//!   allocating. A number is reused by the filesystem once its file is
//!   deleted; the generation tells the two files apart.
//! * **Generations** are derived from the backing file handle
//!   ([`generation`]): ext4, xfs, tmpfs and btrfs put the inode's own
//!   generation (chosen afresh when the inode is reused) in its handle, so
//!   the same file gives the same generation in every mount and a new file
//!   with the old number a different one (but for one chance in 2³²). A
//!   handle of a deleted file is thus stale even when its number lives on.
//!   Inodes reopened by name (no handles: another FUSE filesystem under
//!   BACKING, a daemon without CAP_DAC_READ_SEARCH) have generation 0:
//!   there a new file with a deleted file's number is taken for it, as the
//!   inode table itself does (`inodes`, "Reopening by name").
//! * **Node records** say how to find a number's file again: its backing
//!   file handle, or, without handles, its parent's number and its name.
//!   They cannot be derived from the number alone: a file handle holds
//!   more than the 64 bits of a node id (the generation, on btrfs a
//!   subvolume), and only ext4 opens a handle whose generation is left
//!   out — so each is recorded when the kernel is first handed the inode,
//!   in the index database's table of nodes (`crate::indexdb`, written in
//!   batches by its writer thread; a warm mount writes nothing), and kept
//!   in memory for the inodes the kernel forgot during this mount
//!   ([`Nodes::forgotten`], bounded), which covers the moments before the
//!   writer commits and a mount without a database (`-o index_db=none`,
//!   a read-only BACKING with no cache directory). A record is trusted as
//!   the database is (`crate::trust`), and what it names is checked: the
//!   file found must have the number asked for, a directory must lie
//!   under BACKING's root.
//!
//! Files on filesystems mounted inside BACKING get numbers of a private
//! range (`inodes`), valid only while the kernel remembers them: their
//! handles go stale after an eviction or a restart.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::state::content::IndexCache;

mod reconnect;
mod stored;

/// How a node's backing file is found again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Its file handle on BACKING's filesystem.
    Handle { ty: i32, bytes: Vec<u8> },
    /// Its name in the directory with node id `parent`.
    Name { parent: u64, name: CString },
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        match self {
            Record::Handle { ty, bytes } => {
                let mut v = Vec::with_capacity(5 + bytes.len());
                v.push(1);
                v.extend_from_slice(&ty.to_le_bytes());
                v.extend_from_slice(bytes);
                v
            }
            Record::Name { parent, name } => {
                let name = name.as_bytes();
                let mut v = Vec::with_capacity(9 + name.len());
                v.push(2);
                v.extend_from_slice(&parent.to_le_bytes());
                v.extend_from_slice(name);
                v
            }
        }
    }

    /// The record `v` encodes, if it is one (a handle no larger than the
    /// kernel's, a name that is one path component).
    fn decode(v: &[u8]) -> Option<Record> {
        match v.split_first()? {
            (1, rest) => {
                let ty = i32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
                let bytes = rest.get(4..)?;
                (!bytes.is_empty() && bytes.len() <= libc::MAX_HANDLE_SZ as usize).then(|| {
                    Record::Handle {
                        ty,
                        bytes: bytes.to_vec(),
                    }
                })
            }
            (2, rest) => {
                let parent = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
                let name = rest.get(8..)?;
                let name = crate::sys::component(std::ffi::OsStr::from_bytes(name)).ok()?;
                Some(Record::Name { parent, name })
            }
            _ => None,
        }
    }
}

/// The generation the kernel is given for a file whose backing handle is
/// (`ty`, `bytes`): 32 bits (what the kernel keeps and puts in its
/// handles) of FNV-1a over both, the same in every mount.
pub fn generation(ty: i32, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in ty.to_le_bytes().iter().chain(bytes) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 32)) & 0xffff_ffff
}

/// How many records of forgotten nodes are kept in memory.
const RECENT: usize = 1 << 12;

/// Node records: the index database's table, and those of the nodes the
/// kernel forgot during this mount.
pub struct Nodes {
    cache: Option<Arc<IndexCache>>,
    recent: Mutex<NodeSlots>,
    /// Rows of the database read ahead, so unchanged records are not sent.
    stored: stored::Stored,
}

/// The longest encoded record: a name record of a name of 255 bytes (a
/// handle record is at most 5 + `MAX_HANDLE_SZ` = 133 bytes).
const SLOT: usize = 9 + 255;

/// A forgotten node's record, encoded, in place.
struct Slot {
    ino: u64,
    len: u16,
    bytes: [u8; SLOT],
}

/// The records of the last [`RECENT`] forgotten nodes, in slots allocated
/// once, not one small allocation per record: records made while the
/// kernel forgets thousands of entries would otherwise lie scattered
/// among the freed entries, one on every page, and keep those pages from
/// being given back (measured with `-o index_db=none`: 13.7 MB above the
/// idle size kept after the kernel forgot 200 000 inodes, 2.0 MB with the
/// slots).
#[derive(Default)]
struct NodeSlots {
    /// Node id → slot.
    map: HashMap<u64, usize>,
    slots: Vec<Slot>,
    /// The slot the next new record takes once all are used (oldest first).
    next: usize,
}

impl NodeSlots {
    fn put(&mut self, ino: u64, record: &Record) {
        let v = record.encode();
        if v.len() > SLOT {
            return;
        }
        if self.slots.is_empty() {
            self.slots.reserve_exact(RECENT);
            self.map.reserve(RECENT);
        }
        let k = match self.map.get(&ino) {
            Some(&k) => k,
            None if self.slots.len() < RECENT => {
                self.slots.push(Slot {
                    ino,
                    len: 0,
                    bytes: [0; SLOT],
                });
                self.slots.len() - 1
            }
            None => {
                let k = self.next;
                self.next = (k + 1) % RECENT;
                self.map.remove(&self.slots[k].ino);
                k
            }
        };
        let slot = &mut self.slots[k];
        slot.ino = ino;
        slot.len = v.len() as u16;
        slot.bytes[..v.len()].copy_from_slice(&v);
        self.map.insert(ino, k);
    }

    fn get(&self, ino: u64) -> Option<Record> {
        let s = &self.slots[*self.map.get(&ino)?];
        Record::decode(&s.bytes[..usize::from(s.len)])
    }
}

impl Nodes {
    /// Records kept in `cache`'s index database (None: in memory only).
    pub fn new(cache: Option<Arc<IndexCache>>) -> Nodes {
        Nodes {
            cache,
            recent: Mutex::new(NodeSlots::default()),
            stored: stored::Stored::default(),
        }
    }

    /// The kernel was handed node `ino`, found as `record`: stored, unless
    /// the database holds it already (as read ahead by [`Nodes::prefetch`]).
    pub fn record(&self, ino: u64, record: &Record) {
        if let Some(c) = &self.cache {
            let rec = record.encode();
            let send = self
                .stored
                .to_send(ino, &rec, crate::indexdb::node_current, || {
                    c.db.mark_node(ino)
                });
            if send {
                c.db.put_node_marked(ino, rec);
            }
        }
    }

    /// Reads ahead, in one transaction, the index records of the regular
    /// files numbered `files` on device `dev` (kept in the index cache:
    /// `IndexCache::prefetch`) and the node records of `nodes`, which
    /// lookups about to hand them to the kernel then need not store again.
    pub fn prefetch(&self, dev: u64, files: &[u64], nodes: &[u64]) {
        let Some(c) = &self.cache else {
            return;
        };
        let reading = self.stored.begin();
        let nodes = c.db.not_pending(nodes);
        let rows = c.prefetch(dev, files, &nodes);
        self.stored.found(reading, rows);
    }

    /// The kernel forgot node `ino`, found as `record`: kept in memory
    /// until [`RECENT`] later ones push it out.
    pub fn forgotten(&self, ino: u64, record: Record) {
        self.recent.lock().put(ino, &record);
    }

    /// How node `ino` was last found, if known.
    pub fn find(&self, ino: u64) -> Option<Record> {
        if let Some(r) = self.recent.lock().get(ino) {
            return Some(r);
        }
        Record::decode(&self.cache.as_ref()?.db.node(ino)?)
    }

    /// The stored record of node `ino` once every daemon of this BACKING
    /// that is closing has committed its last ones; None if none was
    /// closing. Asked when the record [`Nodes::find`] gave is stale: the
    /// file was deleted, and a new one that took its number was made
    /// through a daemon that ended a moment ago (`rm -rf d; mkdir d; ...;
    /// umount && mount`: xfstests generic/477).
    pub fn find_after_closing(&self, ino: u64) -> Option<Record> {
        Record::decode(&self.cache.as_ref()?.db.node_after_closing(ino)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        for r in [
            Record::Handle {
                ty: 1,
                bytes: vec![1, 2, 3, 4, 5, 6, 7, 8],
            },
            Record::Name {
                parent: 1 << 40,
                name: CString::new("ä b").unwrap(),
            },
        ] {
            assert_eq!(Record::decode(&r.encode()), Some(r));
        }
        for bad in [
            &b""[..],
            &[3, 0, 0],
            &[1, 0, 0, 0, 0],
            &[2, 0, 0, 0, 0, 0, 0, 0, 0, b'.', b'.'],
            &[2, 0, 0, 0, 0, 0, 0, 0, 0, b'a', b'/', b'b'],
            &[2, 0, 0, 0],
        ] {
            assert_eq!(Record::decode(bad), None, "{bad:?}");
        }
        let mut big = vec![1, 1, 0, 0, 0];
        big.extend(std::iter::repeat_n(7, libc::MAX_HANDLE_SZ as usize + 1));
        assert_eq!(Record::decode(&big), None);
    }

    #[test]
    fn generations_are_stable_and_tell_handles_apart() {
        let a = generation(1, &[10, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(a, generation(1, &[10, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]));
        assert_ne!(a, generation(1, &[10, 0, 0, 0, 0x11, 0x22, 0x33, 0x45]));
        assert_ne!(a, generation(2, &[10, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]));
        assert!(a <= u64::from(u32::MAX));
    }

    /// A record read ahead and unchanged is not sent again; a changed one
    /// reaches the database, and so does one whose older record of ours
    /// was still on its way when the read ahead ran.
    #[test]
    fn only_unchanged_records_read_ahead_are_not_stored_again() {
        use crate::indexdb::{IndexDb, Location};
        use std::os::fd::AsFd;
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::File::open(d.path()).unwrap();
        let open = || {
            let db = IndexDb::open(root.as_fd(), &Location::Default, false);
            let cache = Arc::new(IndexCache::with_db(1 << 20, db, Arc::default()));
            (Nodes::new(Some(cache.clone())), cache)
        };
        let name = |n: &str| Record::Name {
            parent: 1,
            name: CString::new(n).unwrap(),
        };
        // Sent records wait for the writer's batch (`BATCH_WAIT`): a
        // record just sent is still on its way.
        let sent = |c: &IndexCache, ino: u64| c.db.not_pending(&[ino]).is_empty();
        // What the database holds once every record sent is committed.
        let stored_as = |c: &IndexCache, ino: u64, r: &Record| {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while sent(c, ino) {
                assert!(std::time::Instant::now() < until, "never committed");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(c.db.node(ino), Some(r.encode()));
        };
        let (nodes, c) = open();
        nodes.record(5, &name("a"));
        nodes.record(6, &name("b"));
        stored_as(&c, 5, &name("a"));
        stored_as(&c, 6, &name("b"));
        drop((nodes, c));

        let (nodes, c) = open();
        nodes.prefetch(1, &[], &[5, 6]);
        nodes.record(5, &name("a"));
        assert!(!sent(&c, 5), "an unchanged record was sent again");
        nodes.record(6, &name("b2"));
        assert!(sent(&c, 6), "a changed record was not sent");
        stored_as(&c, 6, &name("b2"));
        // A record of ours on its way as the read ahead runs: the read
        // does not show it, so the row read is not believed.
        nodes.record(5, &name("a2"));
        nodes.prefetch(1, &[], &[5]);
        nodes.record(5, &name("a"));
        assert!(sent(&c, 5));
        stored_as(&c, 5, &name("a"));
    }

    #[test]
    fn forgotten_records_are_bounded() {
        let n = Nodes::new(None);
        for i in 0..(RECENT as u64 + 10) {
            n.forgotten(
                i + 2,
                Record::Name {
                    parent: 1,
                    name: CString::new(format!("f{i}")).unwrap(),
                },
            );
        }
        assert!(n.find(2).is_none());
        assert!(n.find(RECENT as u64 + 11).is_some());
        assert_eq!(n.recent.lock().map.len(), RECENT);
    }
}
