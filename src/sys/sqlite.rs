//! SQLite opening its files by exactly the names it is given: a VFS that is
//! SQLite's own unix VFS in everything but `xFullPathname`, which returns
//! an absolute name as it is instead of resolving every symbolic link in
//! it. The index database (`crate::indexdb`) names its files as
//! `/proc/self/fd/N/NAME`, N a descriptor of a directory it checked once:
//! the kernel resolves that magic link to the directory itself however it
//! was renamed since, while SQLite's own resolution would turn it into the
//! directory's path *now* — a path the owner of BACKING's root can point
//! at a directory of theirs between two of SQLite's opens (the database,
//! then its `-wal`, `-shm` and `-journal` beside it). SQLite opens every
//! one of those with `O_NOFOLLOW`, so a name in the checked directory is
//! never followed either.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's name, for `Connection::open_with_flags_and_vfs`.
pub const VFS: &CStr = c"cutf8fs-pinned";

/// Registers the VFS (once per process); false if SQLite has no default
/// VFS to build it on (then the caller does without a database).
pub fn register() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find initialises SQLite if needed and returns
        // the default VFS, a static SQLite never frees, or null (checked).
        // The copy is plain data: pointers to SQLite's static methods and
        // app data, which the unix VFS's methods read from the VFS they are
        // called with, so they work on the copy as on the original. The
        // copy is leaked (SQLite keeps the pointer for the life of the
        // process), its name a static C string; registering is thread-safe
        // in SQLite's default threading mode.
        unsafe {
            let base = ffi::sqlite3_vfs_find(std::ptr::null());
            if base.is_null() {
                return false;
            }
            let mut vfs: ffi::sqlite3_vfs = std::ptr::read(base);
            vfs.zName = VFS.as_ptr();
            vfs.pNext = std::ptr::null_mut();
            vfs.xFullPathname = Some(full_pathname);
            let vfs: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(vfs));
            ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK
        }
    })
}

/// `xFullPathname`: an absolute name, copied unchanged; anything else
/// cannot be opened (the index database only ever gives absolute names).
unsafe extern "C" fn full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n_out: c_int,
    out: *mut c_char,
) -> c_int {
    if name.is_null() || out.is_null() {
        return ffi::SQLITE_CANTOPEN;
    }
    // SAFETY: SQLite passes a NUL-terminated name, and `out` has room for
    // `n_out` bytes (its contract); `bytes.len() <= n_out` is checked
    // before the copy, and the two never overlap.
    unsafe {
        let bytes = CStr::from_ptr(name).to_bytes_with_nul();
        if bytes.first() != Some(&b'/') || bytes.len() > usize::try_from(n_out).unwrap_or(0) {
            return ffi::SQLITE_CANTOPEN;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
    }
    ffi::SQLITE_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database opened through a directory descriptor stays in that
    /// directory, with its `-wal`, after the directory is renamed and a
    /// symlink to another directory takes its name.
    #[test]
    fn files_are_made_in_the_pinned_directory_after_a_rename() {
        use std::os::fd::AsRawFd;
        assert!(register());
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let fd = std::fs::File::open(&dir).unwrap();
        let path = format!("/proc/self/fd/{}/db", fd.as_raw_fd());
        let elsewhere = tempfile::tempdir().unwrap();
        let conn = rusqlite::Connection::open_with_flags_and_vfs(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_CREATE,
            VFS,
        )
        .unwrap();
        std::fs::rename(&dir, top.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &dir).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
        assert!(top.path().join("moved/db-wal").exists());
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }
}
