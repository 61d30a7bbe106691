//! The process as a whole: the open-file limit, daemonizing, stop
//! signals, and the `/dev/fuse` descriptor fusermount3 sends back.

use std::fs::File;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::fcntl::OFlag;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use nix::unistd::{self, ForkResult};

use super::from_nix;

/// The soft limit on open descriptors (1024 if it cannot be read).
pub fn fd_limit() -> u64 {
    getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// The descriptors the process holds now (0 if /proc cannot tell).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Lifts the soft limit on open descriptors to the hard one (at most
/// `cap`) and returns the soft limit now in force.
pub fn raise_fd_limit(cap: u64) -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    let want = hard.min(cap);
    if soft >= want {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
        Ok(()) => want,
        Err(e) => {
            log::warn!("cannot raise the open-file limit: {e}");
            soft
        }
    }
}

/// Gives the memory the allocator holds free back to the system
/// (glibc's `malloc_trim(0)`: the top of every arena and the free pages
/// inside them), after a large part of what the process held was freed.
/// Takes about a millisecond per hundred megabytes of heap.
#[cfg(target_env = "gnu")]
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks and trims the allocator's own free
    // lists under its own locks; it takes no pointer and invalidates no
    // allocation in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Nothing to do where the allocator is not glibc's.
#[cfg(not(target_env = "gnu"))]
pub fn release_free_memory() {}

/// Lets the allocator make at most `n` arenas (glibc's
/// `mallopt(M_ARENA_MAX)`; its default is eight per CPU); call it before
/// the threads start.
#[cfg(target_env = "gnu")]
pub fn limit_arenas(n: i32) {
    // SAFETY: mallopt only sets one of the allocator's parameters (refusing
    // a value it does not take); it takes no pointer.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n);
    }
}

/// Nothing to do where the allocator is not glibc's.
#[cfg(not(target_env = "gnu"))]
pub fn limit_arenas(_n: i32) {}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(File, File)> {
    let (r, w) = unistd::pipe2(OFlag::O_CLOEXEC).map_err(from_nix)?;
    Ok((r.into(), w.into()))
}

/// Which side of [`fork_detached`] returned.
pub enum Forked {
    Parent,
    /// The child: in a new session, stdin/stdout/stderr on /dev/null.
    Child,
}

/// Forks. The child starts a new session and points its standard
/// descriptors at /dev/null. Call it only while the process has a single
/// thread.
pub fn fork_detached() -> io::Result<Forked> {
    // SAFETY: the callers (the daemon, before anything else) fork while
    // the process has a single thread, so the child inherits no lock held
    // by another thread; it goes on running ordinary Rust code.
    match unsafe { unistd::fork() }.map_err(from_nix)? {
        ForkResult::Parent { .. } => Ok(Forked::Parent),
        ForkResult::Child => {
            let _ = unistd::setsid();
            if let Ok(null) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
            {
                let _ = unistd::dup2_stdin(&null);
                let _ = unistd::dup2_stdout(&null);
                let _ = unistd::dup2_stderr(&null);
            }
            Ok(Forked::Child)
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, blocked in the calling thread (and every
/// thread it starts later) so that one thread can wait for them.
pub struct StopSignals(SigSet);

impl StopSignals {
    pub fn block() -> StopSignals {
        let mut set = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(s);
        }
        if let Err(e) = set.thread_block() {
            log::warn!("cannot block the stop signals: {e}");
        }
        StopSignals(set)
    }

    /// Waits for the next one; true for SIGHUP.
    pub fn wait(&self) -> io::Result<Signal> {
        self.0.wait().map_err(from_nix)
    }
}

/// On SIGINT, writes `msg` to stderr and exits with `code` at once (the
/// handler makes only async-signal-safe calls).
pub fn exit_on_sigint(msg: &'static [u8], code: i32) {
    static MSG: std::sync::OnceLock<(&'static [u8], i32)> = std::sync::OnceLock::new();
    let _ = MSG.set((msg, code));
    extern "C" fn on_sigint(_: libc::c_int) {
        let (msg, code) = MSG.get().copied().unwrap_or((b"", 130));
        let _ = unistd::write(std::io::stderr(), msg);
        // SAFETY: _exit is async-signal-safe and ends the process without
        // running anything else.
        unsafe { libc::_exit(code) }
    }
    let sa = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_sigint),
        nix::sys::signal::SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only reads a value set before it was installed
    // and makes async-signal-safe calls (write, _exit).
    if let Err(e) = unsafe { nix::sys::signal::sigaction(Signal::SIGINT, &sa) } {
        log::warn!("cannot catch Ctrl-C: {e}");
    }
}

/// Receives one descriptor sent as SCM_RIGHTS over `sock` (the libfuse
/// protocol of fusermount3).
pub fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(from_nix)?;
    if msg.bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no descriptor received",
        ));
    }
    for c in msg.cmsgs().map_err(from_nix)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            let mut owned: Vec<OwnedFd> = fds
                .into_iter()
                // SAFETY: the kernel installed each of these descriptors in
                // this process for this message; no one else owns them.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .collect();
            if !owned.is_empty() {
                return Ok(owned.swap_remove(0));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "no descriptor in message",
    ))
}
