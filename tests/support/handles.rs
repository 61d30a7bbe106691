//! File handles as an NFS server uses them: `name_to_handle_at` of a path,
//! `open_by_handle_at` against a descriptor of the mount, and the kernel's
//! inode caches emptied (`echo 2 > /proc/sys/vm/drop_caches`), so that
//! a handle must be decoded from the daemon's answers alone.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A file handle: its type and bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    pub ty: i32,
    pub bytes: Vec<u8>,
}

#[repr(C)]
struct Buf {
    len: libc::c_uint,
    ty: libc::c_int,
    bytes: [u8; 128],
}

/// The handle of `path` (not following a final symlink).
pub fn handle_of(path: &Path) -> Handle {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut b = Buf {
        len: 128,
        ty: 0,
        bytes: [0; 128],
    };
    let mut mnt: libc::c_int = 0;
    // SAFETY: `b` is a file_handle with 128 bytes of room, as `len` says;
    // `c` is a C string and `mnt` writable for the call.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut b as *mut Buf).cast(),
            &mut mnt,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    Handle {
        ty: b.ty,
        bytes: b.bytes[..b.len as usize].to_vec(),
    }
}

/// Opens `h` on the filesystem mounted at `mnt` with `flags`; the errno
/// if that fails.
pub fn open_by_handle(mnt: &Path, h: &Handle, flags: i32) -> Result<File, i32> {
    let m = File::open(mnt).unwrap();
    let mut b = Buf {
        len: h.bytes.len() as libc::c_uint,
        ty: h.ty,
        bytes: [0; 128],
    };
    b.bytes[..h.bytes.len()].copy_from_slice(&h.bytes);
    // SAFETY: `b` is a file_handle whose length fits its array; a
    // descriptor returned is new and owned here alone.
    let fd = unsafe { libc::open_by_handle_at(m.as_raw_fd(), (&mut b as *mut Buf).cast(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// What `h` reads as, opened on `mnt` (panics naming `what` and the errno
/// if it does not open).
pub fn read_by_handle(mnt: &Path, h: &Handle, what: &str) -> Vec<u8> {
    let mut f = open_by_handle(mnt, h, libc::O_RDONLY).unwrap_or_else(|e| {
        panic!(
            "{what}: open_by_handle_at: {}",
            std::io::Error::from_raw_os_error(e)
        )
    });
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Empties the kernel's dentry and inode caches (every unused inode of
/// every FUSE mount is forgotten; needs root).
pub fn drop_caches() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "2")
        .expect("echo 2 > /proc/sys/vm/drop_caches (needs root)");
}
