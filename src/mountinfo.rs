//! Reading /proc/self/mountinfo: which cutf8fs mount holds a path, and
//! which serve a BACKING. Used by `cutf8 migrate` (refuse to convert
//! through a mount; keep a mounted tree's index database), `cutf8 check`
//! (say a path is on a mount), `cutf8fs --stats` and the daemon (refuse to
//! stack a second mount). Knows nothing else.

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The cutf8fs mount (mount point, source) that holds `path` (absolute,
/// canonical), read from a /proc/self/mountinfo text: the longest mount
/// point that is a prefix of `path`, if its type is fuse.cutf8fs.
pub fn cutf8fs_mount_of(mountinfo: &str, path: &Path) -> Option<(PathBuf, String)> {
    let mut best: Option<(PathBuf, bool, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mnt), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let mnt = PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(mnt)));
        if !path.starts_with(&mnt) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(b, _, _)| mnt.as_os_str().len() >= b.as_os_str().len())
        {
            let source = fields.get(dash + 2).map_or(String::new(), |s| {
                String::from_utf8_lossy(&unescape_mountinfo(s)).into_owned()
            });
            best = Some((mnt, *fstype == "fuse.cutf8fs", source));
        }
    }
    best.and_then(|(mnt, ours, source)| ours.then_some((mnt, source)))
}

/// The mount points of the cutf8fs mounts whose source is `backing`
/// (absolute, canonical; the source is BACKING unless `-o fsname=` named
/// another).
pub fn cutf8fs_mounts_of_source(mountinfo: &str, backing: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(dash + 1) != Some(&"fuse.cutf8fs") {
            continue;
        }
        let (Some(mnt), Some(source)) = (fields.get(4), fields.get(dash + 2)) else {
            continue;
        };
        if unescape_mountinfo(source) == backing.as_os_str().as_encoded_bytes() {
            out.push(PathBuf::from(std::ffi::OsString::from_vec(
                unescape_mountinfo(mnt),
            )));
        }
    }
    out
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let (b'\\', Some(d)) = (b[i], octal) {
            let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:40 / /mnt/arch\\040ive rw,nosuid,nodev shared:2 - fuse.cutf8fs /srv/arch\\040ive rw
41 40 0:41 / /mnt/arch\\040ive/inner rw shared:3 - tmpfs tmpfs rw
";

    #[test]
    fn a_path_under_a_cutf8fs_mount_is_found_with_its_source() {
        let hit = cutf8fs_mount_of(INFO, Path::new("/mnt/arch ive/a/b.txt"));
        assert_eq!(
            hit,
            Some((PathBuf::from("/mnt/arch ive"), "/srv/arch ive".to_string()))
        );
        assert_eq!(
            cutf8fs_mount_of(INFO, Path::new("/mnt/arch ive")).map(|h| h.0),
            Some(PathBuf::from("/mnt/arch ive"))
        );
        // A mount stacked inside wins; a name that only starts alike is not under it.
        assert_eq!(
            cutf8fs_mount_of(INFO, Path::new("/mnt/arch ive/inner/x")),
            None
        );
        assert_eq!(cutf8fs_mount_of(INFO, Path::new("/mnt/arch ivex")), None);
        assert_eq!(cutf8fs_mount_of(INFO, Path::new("/srv/arch ive/x")), None);
        assert_eq!(
            cutf8fs_mount_of("garbage\n\n1 2 3\n", Path::new("/x")),
            None
        );
    }

    #[test]
    fn the_mounts_of_a_backing_are_found_by_their_source() {
        assert_eq!(
            cutf8fs_mounts_of_source(INFO, Path::new("/srv/arch ive")),
            vec![PathBuf::from("/mnt/arch ive")]
        );
        assert!(cutf8fs_mounts_of_source(INFO, Path::new("/dev/sda1")).is_empty());
        assert!(cutf8fs_mounts_of_source(INFO, Path::new("/srv/arch")).is_empty());
    }
}
