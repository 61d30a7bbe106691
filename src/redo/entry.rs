//! One entry of the mount's redo journal, on disk: the `meta` file's text
//! ([`Meta`]), what an entry's name says of its state ([`state_of`]), and
//! the file operations an entry is made, applied and removed with. Used by
//! the journal itself (`super`), nothing else.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, Mode};
use nix::unistd::{linkat, unlinkat, UnlinkatFlags};

use crate::trust::Checksum;

/// Bytes copied per step.
pub(super) const CHUNK: usize = 1 << 20;

/// First line of every `meta` file.
const META_VERSION: &str = "cutf8fs-journal-entry 1";

/// The only names an entry holds.
pub(super) const FILES: [&str; 3] = ["target", "tail", "meta"];

/// A writer that sums and counts what passes through.
pub(super) struct Summing<W> {
    pub(super) inner: W,
    pub(super) sum: Checksum,
}

impl<W: Write> Write for Summing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sum.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What `meta` records.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub(super) offset: u64,
    pub(super) tail_len: u64,
    pub(super) tail_sum: u64,
    pub(super) target: (u64, u64),
    pub(super) root: (u64, u64),
    /// The file's path below BACKING when the entry was written (messages).
    pub(super) name: Vec<u8>,
}

impl Meta {
    pub(super) fn render(&self) -> String {
        let hex: String = self.name.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{META_VERSION}\noffset {}\ntail-len {}\ntail-sum {:016x}\ntarget {} {}\nroot {} {}\nname {hex}\n",
            self.offset,
            self.tail_len,
            self.tail_sum,
            self.target.0,
            self.target.1,
            self.root.0,
            self.root.1,
        )
    }

    /// Parses exactly what `render` writes; anything else is `None`.
    pub(super) fn parse(text: &str) -> Option<Meta> {
        let mut lines = text.strip_suffix('\n')?.split('\n');
        if lines.next()? != META_VERSION {
            return None;
        }
        let mut field = |key: &str| -> Option<Vec<&str>> {
            let line = lines.next()?;
            let mut words = line.split(' ');
            if words.next()? != key {
                return None;
            }
            Some(words.collect())
        };
        let one = |v: Vec<&str>| -> Option<u64> {
            match v[..] {
                [x] => x.parse().ok(),
                _ => None,
            }
        };
        let two = |v: Vec<&str>| -> Option<(u64, u64)> {
            match v[..] {
                [a, b] => Some((a.parse().ok()?, b.parse().ok()?)),
                _ => None,
            }
        };
        let offset = one(field("offset")?)?;
        let tail_len = one(field("tail-len")?)?;
        let tail_sum = match field("tail-sum")?[..] {
            [x] => u64::from_str_radix(x, 16).ok()?,
            _ => return None,
        };
        let target = two(field("target")?)?;
        let root = two(field("root")?)?;
        let hex = match field("name")?[..] {
            [x] => x.to_owned(),
            [] => String::new(),
            _ => return None,
        };
        if lines.next().is_some() || hex.len() % 2 != 0 {
            return None;
        }
        let name = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Some(Meta {
            offset,
            tail_len,
            tail_sum,
            target,
            root,
            name,
        })
    }
}

/// What an entry's name says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Being written: the file was not touched.
    Open,
    /// Committed: the copy may have started.
    Commit,
    /// Applied, being removed.
    Done,
}

/// `<pid>-<seq>` with an optional `.commit` or `.done`.
pub(super) fn state_of(name: &[u8]) -> Option<State> {
    let s = std::str::from_utf8(name).ok()?;
    let (stem, state) = match s.split_once('.') {
        None => (s, State::Open),
        Some((stem, "commit")) => (stem, State::Commit),
        Some((stem, "done")) => (stem, State::Done),
        Some(_) => return None,
    };
    let (a, b) = stem.split_once('-')?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit());
    (digits(a) && digits(b)).then_some(state)
}

/// An entry found at start, checked.
pub(super) struct Found {
    pub(super) name: OsString,
    pub(super) state: State,
    pub(super) fd: OwnedFd,
    /// Which of [`FILES`] it holds.
    pub(super) files: Vec<&'static str>,
}

/// `name` in `dir`, created exclusively with mode 0600 whatever the umask.
/// Made by the daemon even while its thread acts as a caller
/// (`sys::AsDaemon`): the journal's files are the daemon's.
pub(super) fn create_private(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let _own = crate::sys::AsDaemon::new()?;
    let flags =
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(0o600)).map_err(io::Error::from)?;
    fchmod(&fd, Mode::from_bits_truncate(0o600)).map_err(io::Error::from)?;
    Ok(File::from(fd))
}

/// Removes a checked entry: its (regular) files, then the directory.
pub(super) fn remove_entry(dir: &impl AsFd, f: &Found) -> io::Result<()> {
    for name in FILES {
        match unlinkat(&f.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    unlinkat(dir, f.name.as_os_str(), UnlinkatFlags::RemoveDir).map_err(io::Error::from)
}

/// Takes an applied entry out of the journal: first, atomically, out of
/// the `*.commit` names (a kill during the removal that follows must not
/// leave a committed entry with half its files), then off the disk.
pub(super) fn retire(dir: &impl AsFd, f: &Found) -> io::Result<()> {
    let stem = f.name.as_bytes();
    let stem = stem.strip_suffix(b".commit").unwrap_or(stem);
    let mut done = stem.to_vec();
    done.extend_from_slice(b".done");
    let done = OsString::from(OsStr::from_bytes(&done));
    renameat(dir, f.name.as_os_str(), dir, done.as_os_str()).map_err(io::Error::from)?;
    let f = Found {
        name: done,
        state: State::Done,
        fd: f.fd.try_clone()?,
        files: f.files.clone(),
    };
    remove_entry(dir, &f)
}

/// Allocates `file[offset..offset + len)` without changing its size; a
/// filesystem without fallocate is left to allocate as it writes.
pub(super) fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    match nix::fcntl::fallocate(
        file,
        nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        off,
        len,
    ) {
        Ok(()) | Err(Errno::EOPNOTSUPP) | Err(Errno::ENOSYS) => Ok(()),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Copies `tail` over `file` from `offset`, cuts the file there, syncs.
pub(super) fn apply(file: &File, offset: u64, tail: &File) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut pos = offset;
    let mut src = 0u64;
    loop {
        let n = tail.read_at(&mut buf, src)?;
        if n == 0 {
            break;
        }
        file.write_all_at(&buf[..n], pos)?;
        pos += n as u64;
        src += n as u64;
    }
    file.set_len(pos)?;
    file.sync_all()
}

/// Gives the inode open as `file` the name `name` in `dir`: linkat of the
/// /proc/self/fd magic link with AT_SYMLINK_FOLLOW (works without
/// CAP_DAC_READ_SEARCH, unlike AT_EMPTY_PATH).
pub(super) fn link_fd(file: &File, dir: &OwnedFd, name: &str) -> io::Result<()> {
    let from = format!("/proc/self/fd/{}", file.as_raw_fd());
    linkat(
        nix::fcntl::AT_FDCWD,
        from.as_str(),
        dir,
        name,
        AtFlags::AT_SYMLINK_FOLLOW,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_anything_else() {
        let m = Meta {
            offset: 12,
            tail_len: 3,
            tail_sum: 0xdead_beef,
            target: (5, 6),
            root: (5, 2),
            name: b"dir/f \n.txt".to_vec(),
        };
        let text = m.render();
        assert_eq!(Meta::parse(&text), Some(m));
        assert_eq!(Meta::parse("4\n"), None);
        assert_eq!(Meta::parse(&text.replace("offset", "offsets")), None);
        assert_eq!(Meta::parse(&format!("{text}extra\n")), None);
    }

    #[test]
    fn entry_names() {
        assert_eq!(state_of(b"12-3"), Some(State::Open));
        assert_eq!(state_of(b"12-3.commit"), Some(State::Commit));
        assert_eq!(state_of(b"12-3.done"), Some(State::Done));
        for bad in [
            &b"x"[..],
            b"12-",
            b"-3",
            b"1-2.commit.x",
            b"1-2.tmp",
            b"../1-2",
        ] {
            assert_eq!(state_of(bad), None, "{bad:?}");
        }
    }
}
