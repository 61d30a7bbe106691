//! Where one BACKING's index database is: the default place in BACKING,
//! the file `-o index_db=` names, or the cache directory, each judged by
//! `place`'s checks before it is used; one log line says why a place was
//! passed over. Called by `IndexDb::open` and, for a database created with
//! its first record, by the writer thread.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{place, Location, DIR};
use crate::trust::Unusable;

/// Where the database of one BACKING is to be found.
pub(super) struct Finder {
    pub(super) root: OwnedFd,
    pub(super) root_dev: u64,
    pub(super) root_id: (u64, u64),
    /// BACKING's path when the mount started (messages, cache file name).
    pub(super) backing: PathBuf,
    pub(super) loc: Location,
    /// `-o ro`: the mount writes nothing to BACKING.
    pub(super) ro_mount: bool,
    /// BACKING's filesystem is read-only.
    pub(super) ro_fs: bool,
}

/// A database file judged usable, with the directory it was opened in
/// (SQLite reaches the file and its companions through that directory's
/// descriptor: `store`).
pub(super) struct Place {
    pub(super) dir: OwnedFd,
    /// The file's name in `dir`.
    pub(super) name: PathBuf,
    /// The file, opened and checked (kept open while SQLite uses it).
    pub(super) file: File,
    /// Its path, for messages.
    pub(super) path: PathBuf,
}

pub(super) enum Found {
    Here(Place),
    /// BACKING has no database yet: created with the first record.
    Later,
    Nothing,
}

impl Finder {
    pub(super) fn find(&self, create: bool) -> Found {
        let here = self.backing.join(DIR);
        let why = match &self.loc {
            Location::None => return Found::Nothing,
            Location::File(p) => {
                let dir = p.parent().unwrap_or(Path::new(""));
                let name = p.file_name().map(Path::new).unwrap_or(Path::new(""));
                let r = match place::open_given_dir(dir) {
                    Ok(d) => place::open_file(d.as_fd(), name).map(|f| (d, f)),
                    Err(e) => Err(format!("its directory cannot be opened ({e})")),
                };
                return match r {
                    Ok((d, file)) => Found::Here(Place {
                        dir: d,
                        name: name.to_path_buf(),
                        file,
                        path: p.clone(),
                    }),
                    Err(why) => {
                        log::warn!(
                            "index database {}: {why}; indexes kept in memory only. Give \
                             -o index_db= a file of the daemon's user in a directory only \
                             it can write",
                            p.display()
                        );
                        Found::Nothing
                    }
                };
            }
            Location::Default if self.ro_mount || self.ro_fs => None,
            Location::Default => {
                let dir = place::open_dir(
                    self.root.as_fd(),
                    Path::new(DIR),
                    create,
                    Some(self.root_dev),
                );
                match dir {
                    Ok(d) => match place::open_file(d.as_fd(), Path::new(place::FILE)) {
                        Ok(file) => {
                            return Found::Here(Place {
                                dir: d,
                                name: PathBuf::from(place::FILE),
                                file,
                                path: here.join(place::FILE),
                            })
                        }
                        Err(why) => Some(format!("{}: {why}", place::FILE)),
                    },
                    Err(Unusable::Missing) if place::writable(self.root.as_fd()) => {
                        return Found::Later
                    }
                    Err(Unusable::Missing) => None,
                    Err(Unusable::Bad(why)) => Some(why),
                }
            }
        };
        if nix::sys::stat::fstat(&self.root).is_ok_and(|st| st.st_nlink == 0) {
            // BACKING's root was deleted (unmounted and removed at once):
            // nothing learned of it can serve again.
            log::info!(
                "index database: BACKING {} is deleted; nothing more is kept for it",
                self.backing.display()
            );
            return Found::Nothing;
        }
        match place::cache_dir() {
            // Created with the first record, like the default place: a
            // mount that stores nothing leaves no file behind.
            Some(dir)
                if !create
                    && std::fs::symlink_metadata(
                        dir.join(place::cache_file_name(&self.backing)),
                    )
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
            {
                Found::Later
            }
            Some(dir) => {
                let r = place::open_cache_dir(&dir).and_then(|fd| {
                    let name = place::cache_file_name(&self.backing);
                    let file = place::open_file(fd.as_fd(), &name)?;
                    super::cache::note_use(fd.as_fd(), &name, &self.backing);
                    Ok(Place {
                        path: dir.join(&name),
                        dir: fd,
                        name,
                        file,
                    })
                });
                match (r, why) {
                    (Ok(pl), None) => {
                        let why = if self.ro_mount {
                            "a read-only mount (-o ro) writes nothing to BACKING"
                        } else if self.ro_fs {
                            "BACKING is on a read-only filesystem"
                        } else {
                            "BACKING's root directory is not writable by the daemon's user"
                        };
                        log::info!("{why}: index database kept in {}", pl.path.display());
                        Found::Here(pl)
                    }
                    (Ok(pl), Some(why)) => {
                        log::warn!(
                            "index database {}: {why}; not used, kept in {} instead. To let \
                             the mount keep it in BACKING again, stop the mount, remove {} \
                             (rm -r) and mount again; the copy in the cache directory goes \
                             once unused for its expiry, or once BACKING is gone \
                             (cutf8fs(1), FILES)",
                            here.display(),
                            pl.path.display(),
                            here.display()
                        );
                        Found::Here(pl)
                    }
                    (Err(e), _) => {
                        log::warn!(
                            "index database: cache directory {}: {e}; indexes kept in memory \
                             only",
                            dir.display()
                        );
                        Found::Nothing
                    }
                }
            }
            None => {
                log::warn!("index database: no cache directory (HOME is not set); memory only");
                Found::Nothing
            }
        }
    }
}
