//! The calling thread's capability sets, for [`super::ident`]: read and
//! set per thread (`capget(2)`/`capset(2)` on thread 0 change this thread
//! only), and the sets a thread serving a caller wants: CAP_SYS_RESOURCE
//! out for a caller who is not root, so that BACKING's filesystem applies
//! that caller's limits (ext4's blocks reserved for root, disk quotas) as
//! it would natively; without the file capabilities a switch of fsuid
//! away from 0 takes out (`FS_MASK`).

use std::io;

/// `CAP_SYS_RESOURCE` (linux/capability.h).
const CAP_SYS_RESOURCE: u32 = 24;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// This thread's three capability sets (two words each).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Sets([Data; 2]);

impl Sets {
    fn has(&self, cap: u32, set: impl Fn(&Data) -> u32) -> bool {
        set(&self.0[(cap / 32) as usize]) & (1 << (cap % 32)) != 0
    }

    fn with_effective(mut self, cap: u32, on: bool) -> Sets {
        let d = &mut self.0[(cap / 32) as usize];
        if on {
            d.effective |= 1 << (cap % 32);
        } else {
            d.effective &= !(1 << (cap % 32));
        }
        self
    }
}

/// This thread's capability sets.
pub fn get() -> io::Result<Sets> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: `h` and `d` are valid, writable, and laid out as the kernel's
    // version-3 header and its two data words; the kernel writes only them.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Sets(d))
}

/// Sets this thread's capability sets to `s` (the permitted and
/// inheritable sets unchanged: only the effective set is ever changed).
pub fn set(s: &Sets) -> io::Result<()> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    // SAFETY: `h` and `s.0` are valid and laid out as the kernel's
    // version-3 header and data; the kernel reads the data and may write
    // the header's version.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, s.0.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The capabilities a switch of fsuid from 0 to another id takes out of
/// the effective set, and one back to 0 puts back from the permitted set
/// (`CAP_FS_MASK`, linux/capability.h: chown, dac_override,
/// dac_read_search, fowner, fsetid, linux_immutable, mac_override, mknod).
const FS_MASK: [u32; 2] = [0x1f | 1 << 9 | 1 << 27, 1];

impl Sets {
    /// These sets with CAP_SYS_RESOURCE out of the effective set.
    pub fn without_resource(self) -> Sets {
        self.with_effective(CAP_SYS_RESOURCE, false)
    }

    /// These sets with the file capabilities out of the effective set, as
    /// a switch of fsuid away from 0 leaves them.
    pub fn without_fs(mut self) -> Sets {
        for (d, m) in self.0.iter_mut().zip(FS_MASK) {
            d.effective &= !m;
        }
        self
    }

    /// Whether CAP_SYS_RESOURCE is in the permitted set.
    pub fn has_permitted_resource(&self) -> bool {
        self.has(CAP_SYS_RESOURCE, |d| d.permitted)
    }
}

/// Whether CAP_SYS_RESOURCE is in this thread's effective set now.
pub fn has_resource() -> io::Result<bool> {
    Ok(get()?.has(CAP_SYS_RESOURCE, |d| d.effective))
}
