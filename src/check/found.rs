//! Which files `cutf8 check` reads: the named inputs, each named directory
//! replaced by the regular files found under it.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::convert::{io_message, Input};
use crate::shown::display_path;

/// Directory names `check` does not descend into (as `cutf8 migrate`):
/// version-control metadata, which is not text for people.
pub const VCS_DIRS: [&str; 3] = [".git", ".hg", ".svn"];

/// One file to check: named on the command line (opened as given, as
/// `cat` would), or found under a named directory.
pub(super) enum Item {
    Named(Input),
    /// Found under a named directory: the directory's descriptor (opened
    /// once, as named), the file's path below it, and its full path for
    /// messages.
    Found(std::rc::Rc<OwnedFd>, PathBuf, PathBuf),
}

impl Item {
    pub(super) fn name(&self) -> String {
        match self {
            Item::Named(i) => i.name(),
            Item::Found(_, _, full) => display_path(full),
        }
    }

    pub(super) fn open(&self) -> std::io::Result<Box<dyn Read>> {
        match self {
            Item::Named(i) => i.open(),
            Item::Found(root, rel, _) => Ok(Box::new(open_found(root, rel)?)),
        }
    }
}

/// Opens `rel` below `root` the way the walk found it: no symbolic link
/// followed in any component, nothing outside `root`, and only a regular
/// file (reached as `O_PATH` and checked with `fstat` first, so a FIFO or
/// device put in a file's place is never opened: `trust::reach` and
/// `trust::open_reached`, as migrate opens files). What the walk listed
/// may have been replaced since by whoever writes the tree.
fn open_found(root: &OwnedFd, rel: &Path) -> std::io::Result<std::fs::File> {
    let (Some(dir), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let dir = beneath(root, dir, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
    let reached = crate::trust::reach(dir.as_fd(), name)?;
    if reached.1.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(std::io::Error::other(
            "not a regular file any more (replaced during the run): not opened",
        ));
    }
    crate::trust::open_reached(
        dir.as_fd(),
        name,
        &reached,
        libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
        false,
    )
}

/// `openat2` of `rel` below `root` (`RESOLVE_BENEATH`,
/// `RESOLVE_NO_SYMLINKS`); an empty `rel` is `root` itself.
fn beneath(root: &OwnedFd, rel: &Path, flags: OFlag) -> std::io::Result<OwnedFd> {
    use nix::fcntl::{openat2, OpenHow, ResolveFlag};
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    // openat2 refuses flags that O_PATH ignores (O_NOCTTY among them).
    let how = OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    );
    Ok(openat2(root, rel, how)?)
}

/// The named inputs with each directory replaced by the regular files
/// under it (recursively, sorted by name, symlinks and special files left
/// out, [`VCS_DIRS`] and the mount's own files not entered). A named
/// directory is opened once, as named; below it every directory is listed
/// and every file opened by its path from that descriptor with no symbolic
/// link followed ([`open_found`]), so a tree its owner changes during the
/// run cannot lead the check outside it or onto a FIFO. A directory that
/// cannot be listed is reported to `diag` and counted in `unreadable`.
pub(super) fn expand(
    inputs: &[Input],
    diag: &mut dyn FnMut(&str),
    unreadable: &mut usize,
) -> Vec<Item> {
    let mut files = Vec::new();
    for input in inputs {
        match input {
            Input::Path(p) if p.is_dir() => {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                match nix::fcntl::open(p.as_path(), flags, nix::sys::stat::Mode::empty()) {
                    Ok(fd) => {
                        let root = std::rc::Rc::new(fd);
                        walk_dir(&root, p, Path::new(""), &mut files, diag, unreadable);
                    }
                    Err(e) => {
                        diag(&format!("{}: {}", display_path(p), io_message(&e.into())));
                        *unreadable += 1;
                    }
                }
            }
            other => files.push(Item::Named(other.clone())),
        }
    }
    files
}

fn walk_dir(
    root: &std::rc::Rc<OwnedFd>,
    top: &Path,
    rel: &Path,
    files: &mut Vec<Item>,
    diag: &mut dyn FnMut(&str),
    unreadable: &mut usize,
) {
    // Listed in full and closed before descending: one descriptor at a
    // time however deep the tree.
    let listed = beneath(root, rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY)
        .and_then(|fd| Ok(nix::dir::Dir::from_fd(fd)?))
        .and_then(|mut dir| {
            let mut v = Vec::new();
            for e in dir.iter() {
                let e = e?;
                let name = std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
                if name != "." && name != ".." {
                    v.push((name, e.file_type()));
                }
            }
            // A filesystem that gives no type in its listing: asked by
            // name, without following a symbolic link.
            for (name, kind) in v.iter_mut().filter(|(_, k)| k.is_none()) {
                let st = nix::sys::stat::fstatat(
                    &dir,
                    name.as_os_str(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                );
                *kind = st.ok().map(|st| match st.st_mode & libc::S_IFMT {
                    libc::S_IFDIR => nix::dir::Type::Directory,
                    libc::S_IFREG => nix::dir::Type::File,
                    _ => nix::dir::Type::Symlink,
                });
            }
            Ok(v)
        });
    let mut entries = match listed {
        Ok(v) => v,
        Err(e) => {
            let shown = if rel.as_os_str().is_empty() {
                top.to_path_buf()
            } else {
                top.join(rel)
            };
            diag(&format!("{}: {}", display_path(&shown), io_message(&e)));
            *unreadable += 1;
            return;
        }
    };
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in entries {
        // The mount's own files (its journal) are not the user's text.
        if crate::trust::is_internal(&name) {
            continue;
        }
        let path = rel.join(&name);
        match kind {
            Some(nix::dir::Type::Directory) if !VCS_DIRS.iter().any(|v| name == *v) => {
                walk_dir(root, top, &path, files, diag, unreadable);
            }
            Some(nix::dir::Type::File) => {
                let full = top.join(&path);
                files.push(Item::Found(root.clone(), path, full));
            }
            _ => {}
        }
    }
}
