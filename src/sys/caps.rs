//! The calling thread's effective capabilities, for [`super::ident`]:
//! CAP_SYS_RESOURCE taken out while the thread works for a caller who is
//! not root, so that BACKING's filesystem applies that caller's limits
//! (ext4's blocks reserved for root, disk quotas) as it would natively,
//! and the file capabilities put back after a switch of fsuid took them
//! out, when the daemon must keep its own rights.
//!
//! Capabilities are per thread on Linux: `capset(2)` on thread 0 (the
//! caller) changes this thread only. The state of CAP_SYS_RESOURCE is
//! remembered per thread, so a thread serving callers of one kind (root,
//! or not) makes no system call at all for it; a switch of fsuid never
//! touches it (the kernel's fixup moves only the file capabilities).

use std::cell::Cell;
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

thread_local! {
    /// Whether CAP_SYS_RESOURCE is in this thread's effective set, as
    /// [`set_resource`] last left it (None: not known yet).
    static RESOURCE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Puts CAP_SYS_RESOURCE into this thread's effective set (`on`) or takes
/// it out. No system call when it is so already; putting it in is done
/// only if the permitted set holds it (a daemon not run as root has
/// nothing to put back).
pub fn set_resource(on: bool) -> io::Result<()> {
    if RESOURCE.get() == Some(on) {
        return Ok(());
    }
    // Unknown until it took.
    RESOURCE.set(None);
    let now = get()?;
    let permitted = now.has(CAP_SYS_RESOURCE, |d| d.permitted);
    let want = now.with_effective(CAP_SYS_RESOURCE, on && permitted);
    if want != now {
        set(&want)?;
    }
    RESOURCE.set(Some(on));
    Ok(())
}

/// Puts every permitted capability but CAP_SYS_RESOURCE into this
/// thread's effective set: the daemon's own rights, after a switch of
/// fsuid took the file capabilities out, with the caller's limits on
/// space.
pub fn all_but_resource() -> io::Result<()> {
    let now = get()?;
    let mut want = now;
    for d in &mut want.0 {
        d.effective = d.permitted;
    }
    let want = want.with_effective(CAP_SYS_RESOURCE, false);
    if want != now {
        set(&want)?;
    }
    RESOURCE.set(Some(false));
    Ok(())
}

/// Whether CAP_SYS_RESOURCE is in this thread's permitted set.
impl Sets {
    pub fn has_permitted_resource(&self) -> bool {
        self.has(CAP_SYS_RESOURCE, |d| d.permitted)
    }
}

/// Whether CAP_SYS_RESOURCE is in this thread's effective set now.
pub fn has_resource() -> io::Result<bool> {
    Ok(get()?.has(CAP_SYS_RESOURCE, |d| d.effective))
}
