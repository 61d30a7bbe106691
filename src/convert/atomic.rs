//! The `-o` output: written under a temporary name beside the target and
//! renamed over it only when every input converted.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// A file written under a temporary name in the target's directory and
/// renamed over the target only by [`AtomicFile::commit`]; dropped
/// uncommitted, the temporary file is removed and the target is untouched.
pub(super) struct AtomicFile {
    pub(super) file: File,
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl AtomicFile {
    pub(super) fn create(target: &Path) -> io::Result<Self> {
        // Write through a symlink to the file it names, as `>` would.
        let target = fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
        let old = fs::metadata(&target).ok();
        if old.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(io::Error::other("is a directory"));
        }
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = target
            .file_name()
            .ok_or_else(|| io::Error::other("not a file name"))?
            .to_string_lossy()
            .into_owned();
        let mut attempt = 0u32;
        loop {
            let tmp = dir.join(format!(
                ".{base}.cutf8-{}-{attempt}.tmp",
                std::process::id()
            ));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => {
                    let f = AtomicFile {
                        file,
                        tmp,
                        target,
                        committed: false,
                    };
                    if let Some(m) = old {
                        f.file.set_permissions(m.permissions())?;
                    }
                    return Ok(f);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn commit(mut self) -> io::Result<()> {
        self.file.sync_all()?;
        fs::rename(&self.tmp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}
