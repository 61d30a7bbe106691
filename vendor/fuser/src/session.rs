//! Filesystem session
//!
//! A session runs a filesystem implementation while it is being mounted to a specific mount
//! point. A session begins by mounting the filesystem and ends by unmounting it. While the
//! filesystem is mounted, the session loop receives, dispatches and replies to kernel requests
//! for filesystem operations under its mount point.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::thread::{self};

use log::debug;
use log::error;
use log::info;
use log::warn;
use nix::unistd::Uid;
use nix::unistd::geteuid;
use parking_lot::Mutex;

use crate::Errno;
use crate::Filesystem;
use crate::KernelConfig;
use crate::MountOption;
use crate::ReplyEmpty;
use crate::Request;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::dev_fuse::DevFuse;
use crate::ll;
use crate::ll::Operation;
use crate::ll::ResponseErrno;
use crate::ll::Version;
use crate::ll::flags::init_flags::InitFlags;
use crate::ll::fuse_abi as abi;
use crate::mnt::Mount;
use crate::mnt::mount_options::Config;
use crate::mnt::mount_options::check_option_conflicts;
use crate::notify::Notifier;
use crate::read_buf::FuseReadBuf;
use crate::reply::Reply;
use crate::reply::ReplyRaw;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::turns::{Got, Next, Turns};

/// The max size of write requests from the kernel. The absolute minimum is 4k,
/// FUSE recommends at least 128k, max 16M. The FUSE default is 16M on macOS
/// and 128k on other systems.
pub(crate) const MAX_WRITE_SIZE: usize = 16 * 1024 * 1024;

#[derive(Default, Debug, Eq, PartialEq, Clone, Copy)]
/// How requests should be filtered based on the calling UID.
pub enum SessionACL {
    /// Allow requests from any user. Corresponds to the `allow_other` mount option.
    All,
    /// Allow requests from root. Corresponds to the `allow_root` mount option.
    RootAndOwner,
    /// Allow requests from the owning UID. This is FUSE's default mode of operation.
    #[default]
    Owner,
}

impl SessionACL {
    /// Returns the mount option string for kernel/fusermount/libfuse paths.
    /// Both `All` and `RootAndOwner` map to `allow_other` - the kernel only
    /// understands `allow_other`, and fuser enforces the root-only restriction internally.
    #[allow(dead_code)]
    pub(crate) fn to_mount_option(self) -> Option<&'static str> {
        match self {
            SessionACL::All | SessionACL::RootAndOwner => Some("allow_other"),
            SessionACL::Owner => None,
        }
    }
}

/// Calls `destroy` on drop.
#[derive(Debug)]
pub(crate) struct FilesystemHolder<FS: Filesystem> {
    pub(crate) fs: Option<FS>,
}

impl<FS: Filesystem> FilesystemHolder<FS> {
    fn destroy(&mut self) {
        if let Some(mut fs) = self.fs.take() {
            fs.destroy();
        }
    }
}

impl<FS: Filesystem> Drop for FilesystemHolder<FS> {
    fn drop(&mut self) {
        self.destroy();
    }
}

#[derive(Debug)]
struct UmountOnDrop {
    mount: Arc<Mutex<Option<Mount>>>,
}

impl UmountOnDrop {
    fn umount(&self) -> io::Result<()> {
        if let Some(mount) = self.mount.lock().take() {
            mount.umount()?;
        }
        Ok(())
    }
}

impl Drop for UmountOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.umount() {
            warn!("Failed to umount filesystem: {}", e);
        }
    }
}

/// The session data structure
#[derive(Debug)]
pub struct Session<FS: Filesystem> {
    /// Filesystem operation implementations. None after `destroy` called.
    pub(crate) filesystem: FilesystemHolder<FS>,
    /// Communication channel to the kernel driver
    pub(crate) ch: Channel,
    /// Handle to the mount.  Dropping this unmounts.
    mount: UmountOnDrop,
    /// Whether to restrict access to owner, root + owner, or unrestricted
    /// Used to implement `allow_root` and `auto_unmount`
    pub(crate) allowed: SessionACL,
    /// User that launched the fuser process
    pub(crate) session_owner: Uid,
    /// FUSE protocol version, as reported by the kernel.
    /// The field is set to `Some` when the init message is received.
    pub(crate) proto_version: Option<Version>,
    pub(crate) config: Config,
}

impl<FS: Filesystem> AsFd for Session<FS> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ch.as_fd()
    }
}

impl<FS: Filesystem> Session<FS> {
    /// Create a new session by mounting the given filesystem to the given mountpoint
    /// # Errors
    /// Returns an error if the options are incorrect, or if the fuse device can't be mounted.
    pub fn new<P: AsRef<Path>>(
        filesystem: FS,
        mountpoint: P,
        options: &Config,
    ) -> io::Result<Session<FS>> {
        check_option_conflicts(options)?;

        let mountpoint = mountpoint.as_ref();
        info!("Mounting {}", mountpoint.display());
        // If AutoUnmount is requested, but not AllowRoot or AllowOther, return an error
        // because fusermount needs allow_root or allow_other to handle the auto_unmount option
        if options.mount_options.contains(&MountOption::AutoUnmount)
            && options.acl == SessionACL::Owner
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("auto_unmount requires acl != Owner, got: {:?}", options.acl),
            ));
        }
        let (file, mount) = Mount::new(mountpoint, &options.mount_options, options.acl)?;

        let ch = Channel::new(file);

        let mut session = Session {
            filesystem: FilesystemHolder {
                fs: Some(filesystem),
            },
            ch,
            mount: UmountOnDrop {
                mount: Arc::new(Mutex::new(Some(mount))),
            },
            allowed: options.acl,
            session_owner: geteuid(),
            proto_version: None,
            config: options.clone(),
        };

        session.handshake()?;

        Ok(session)
    }

    /// Wrap an existing /dev/fuse file descriptor. This doesn't mount the
    /// filesystem anywhere; that must be done separately.
    pub fn from_fd(
        filesystem: FS,
        fd: OwnedFd,
        acl: SessionACL,
        config: Config,
    ) -> io::Result<Self> {
        let ch = Channel::new(Arc::new(DevFuse(File::from(fd))));
        let mut session = Session {
            filesystem: FilesystemHolder {
                fs: Some(filesystem),
            },
            ch,
            mount: UmountOnDrop {
                mount: Arc::new(Mutex::new(None)),
            },
            allowed: acl,
            session_owner: geteuid(),
            proto_version: None,
            config,
        };

        session.handshake()?;

        Ok(session)
    }

    /// Run the session loop in a background thread. If the returned handle is dropped,
    /// the filesystem is unmounted and the given session ends.
    pub fn spawn(self) -> io::Result<BackgroundSession> {
        let sender = self.ch.sender();
        // Take the fuse_session, so that we can unmount it
        let mount = std::mem::take(&mut *self.mount.mount.lock());
        let guard = thread::Builder::new()
            .name("fuser-bg".to_string())
            .spawn(move || self.run())?;
        Ok(BackgroundSession {
            guard,
            sender,
            mount,
        })
    }

    /// Run the session loop that receives kernel requests and dispatches them to method
    /// calls into the filesystem. This read-dispatch-loop is non-concurrent to prevent
    /// having multiple buffers (which take up much memory), but the filesystem methods
    /// may run concurrent by spawning threads.
    /// # Errors
    /// Returns any final error when the session comes to an end.
    pub fn run(self) -> io::Result<()> {
        let Session {
            filesystem,
            ch,
            mount: _do_not_umount_yet,
            allowed,
            session_owner,
            proto_version: _,
            config,
        } = self;

        let n_threads = config.n_threads.unwrap_or(1);

        if !cfg!(target_os = "linux") && n_threads != 1 {
            // TODO: check whether it works on macOS/FreeBSD and enable if it works.
            return Err(io::Error::other(
                "n_threads != 1 is only supported on Linux",
            ));
        }

        let Some(n_threads_minus_one) = n_threads.checked_sub(1) else {
            return Err(io::Error::other("n_threads"));
        };

        let mut filesystem = Arc::new(filesystem);

        let mut channels = Vec::with_capacity(n_threads);

        // (cutf8fs patch) With `turns`, the threads take turns between
        // users (src/turns.rs).
        let turns = config
            .turns
            .then(|| Arc::new(Turns::new(n_threads, TURNS_MAX_LEN, TURNS_MAX_BYTES)));
        for _ in 0..n_threads_minus_one {
            if config.clone_fd {
                #[cfg(target_os = "linux")]
                {
                    channels.push(ch.clone_fd()?);
                    continue;
                }
                #[cfg(not(target_os = "linux"))]
                {
                    return Err(io::Error::other("clone_fd is only supported on Linux"));
                }
            } else {
                channels.push(ch.clone());
            }
        }
        channels.push(ch);

        let mut threads = Vec::with_capacity(n_threads);
        // (cutf8fs patch) Each thread's stamp, for the grower, and the
        // session's own channel (the last) to clone more from.
        let pool = Arc::new(Pool {
            epoch: Instant::now(),
            stamps: Mutex::new(Vec::new()),
            ending: AtomicBool::new(false),
            extra: Mutex::new(Vec::new()),
            working: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            grower: OnceLock::new(),
        });
        let grow_from = channels
            .last()
            .cloned()
            .filter(|_| config.clone_fd && config.max_threads.is_some_and(|m| m > n_threads));

        for (i, ch) in channels.into_iter().enumerate() {
            threads.push(start_loop(
                &pool,
                i,
                ch,
                &filesystem,
                allowed,
                session_owner,
                turns.clone(),
            )?);
        }
        let grower = match grow_from {
            Some(ch) => {
                let (pool, fs) = (pool.clone(), filesystem.clone());
                let max = config.max_threads.unwrap_or(n_threads);
                Some(thread::Builder::new().name("fuser-grow".into()).spawn(
                    move || grow(&pool, &ch, &fs, allowed, session_owner, max, turns),
                )?)
            }
            None => None,
        };

        let mut reply: io::Result<()> = Ok(());
        // The first threads end with the session; then the grower, and
        // any thread it started (each ends at ENODEV like the first).
        let mut done = |thread: JoinHandle<io::Result<()>>| -> io::Result<()> {
            let res = match thread.join() {
                Ok(res) => res,
                Err(_) => {
                    return Err(io::Error::other("event loop thread panicked"));
                }
            };
            if let Err(e) = res {
                if reply.is_ok() {
                    reply = Err(e);
                }
            }
            Ok(())
        };
        for thread in threads {
            if let Err(e) = done(thread) {
                pool.end();
                return Err(e);
            }
        }
        pool.end();
        if let Some(g) = grower {
            let _ = g.join();
        }
        loop {
            let Some(thread) = pool.extra.lock().pop() else {
                break;
            };
            done(thread)?;
        }
        drop(done);

        let Some(filesystem) = Arc::get_mut(&mut filesystem) else {
            return Err(io::Error::other(
                "BUG: must have one refcount for filesystem",
            ));
        };

        filesystem.destroy();

        reply
    }

    fn handshake(&mut self) -> io::Result<()> {
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();

        loop {
            // Read the init request from the kernel
            let size = match self.ch.receive_retrying(buf) {
                Ok(size) => size,
                Err(nix::errno::Errno::ENODEV) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "FUSE device disconnected during handshake",
                    ));
                }
                Err(err) => return Err(err.into()),
            };

            // Parse the request
            let request = match ll::AnyRequest::try_from(&buf[..size]) {
                Ok(request) => request,
                Err(err) => {
                    error!("{err}");
                    return Err(io::Error::new(io::ErrorKind::InvalidData, err.to_string()));
                }
            };

            // Extract the init operation
            let op = match request.operation() {
                Ok(op) => op,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "Failed to parse FUSE operation",
                    ));
                }
            };

            let init = match op {
                ll::Operation::Init(init) => init,
                _ => {
                    error!("Received non-init FUSE operation before init: {}", request);
                    // Send error response and return error - non-init during handshake is invalid
                    <ReplyRaw as Reply>::new(
                        request.unique(),
                        ReplySender::Channel(self.ch.sender()),
                    )
                    .send_ll(&ResponseErrno(ll::Errno::EIO));
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "Received non-init FUSE operation during handshake",
                    ));
                }
            };

            let v = init.version();
            if v.0 > abi::FUSE_KERNEL_VERSION {
                // Kernel has a newer major version than we support.
                // Send our version and wait for a second INIT request with a compatible version.
                debug!(
                    "INIT: Kernel version {} > our version {}, sending our version and waiting for next init",
                    v.0,
                    abi::FUSE_KERNEL_VERSION
                );
                let response = init.reply_version_only();
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&response);
                continue;
            }

            // We don't support ABI versions before 7.6
            if v < Version(7, 6) {
                error!("Unsupported FUSE ABI version {v}");
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&ResponseErrno(ll::Errno::EPROTO));
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("Unsupported FUSE ABI version {v}"),
                ));
            }

            let mut config = KernelConfig::new(init.capabilities(), init.max_readahead(), v);

            // Call filesystem init method and give it a chance to return an error
            let Some(filesystem) = &mut self.filesystem.fs else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "Bug: filesystem must be initialized during handshake",
                ));
            };
            let res = filesystem.init(Request::ref_cast(request.header()), &mut config);
            if let Err(error) = res {
                let errno = Errno::from_i32(error.raw_os_error().unwrap_or(0));
                <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                    .send_ll(&ResponseErrno(errno));
                return Err(error);
            }

            // Remember the ABI version supported by kernel and mark the session initialized.
            self.proto_version = Some(v);

            // Log capability status for debugging
            for bit in 0..64 {
                let bitflags = InitFlags::from_bits_retain(1 << bit);
                if bitflags == InitFlags::FUSE_INIT_EXT {
                    continue;
                }
                let bitflag_is_known = InitFlags::all().contains(bitflags);
                let kernel_supports = init.capabilities().contains(bitflags);
                let we_requested = config.requested.contains(bitflags);
                // On macOS, there's a clash between linux and macOS constants,
                // so we pick macOS ones (last).
                let name = if let Some((name, _)) = bitflags.iter_names().last() {
                    Cow::Borrowed(name)
                } else {
                    Cow::Owned(format!("(1 << {bit})"))
                };
                if we_requested && kernel_supports {
                    debug!("capability {name} enabled")
                } else if we_requested {
                    debug!("capability {name} not supported by kernel")
                } else if kernel_supports {
                    debug!("capability {name} not requested by client")
                } else if bitflag_is_known {
                    debug!("capability {name} not supported nor requested")
                }
            }

            // Reply with our desired version and settings.
            debug!(
                "INIT response: ABI {}.{}, flags {:#x}, max readahead {}, max write {}",
                abi::FUSE_KERNEL_VERSION,
                abi::FUSE_KERNEL_MINOR_VERSION,
                init.capabilities() & config.requested,
                config.max_readahead,
                config.max_write
            );

            let response = init.reply(&config);
            <ReplyRaw as Reply>::new(request.unique(), ReplySender::Channel(self.ch.sender()))
                .send_ll(&response);

            return Ok(());
        }
    }

    /// Unmount the filesystem
    pub fn unmount(&mut self) -> io::Result<()> {
        self.mount.umount()
    }

    /// Returns a thread-safe object that can be used to unmount the Filesystem
    pub fn unmount_callable(&mut self) -> SessionUnmounter {
        SessionUnmounter {
            mount: self.mount.mount.clone(),
        }
    }

    /// Returns an object that can be used to send notifications to the kernel
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.ch.sender())
    }
}

#[derive(Debug)]
/// A thread-safe object that can be used to unmount a Filesystem
pub struct SessionUnmounter {
    mount: Arc<Mutex<Option<Mount>>>,
}

impl SessionUnmounter {
    /// Unmount the filesystem
    pub fn unmount(&mut self) -> io::Result<()> {
        if let Some(mount) = std::mem::take(&mut *self.mount.lock()) {
            mount.umount()?;
        }
        Ok(())
    }
}

pub(crate) struct SessionEventLoop<FS: Filesystem> {
    /// Cache thread name for faster `debug!`.
    pub(crate) thread_name: String,
    pub(crate) ch: Channel,
    pub(crate) filesystem: Arc<FilesystemHolder<FS>>,
    pub(crate) allowed: SessionACL,
    pub(crate) session_owner: Uid,
    /// (cutf8fs patch) Since when this thread is inside a request
    /// ([`Pool::stamp`]).
    pub(crate) busy: Arc<AtomicU64>,
    pub(crate) pool: Arc<Pool>,
    /// (cutf8fs patch) With `Config::turns`: the requests this thread
    /// serves, which it does not receive itself.
    pub(crate) turns: Option<Arc<Turns<Job>>>,
}

/// (cutf8fs patch) With `Config::turns`, at most this many requests (or
/// [`TURNS_MAX_BYTES`]) wait queued; beyond, the thread that read one
/// serves it.
const TURNS_MAX_LEN: usize = 1024;
const TURNS_MAX_BYTES: usize = 32 << 20;

/// (cutf8fs patch) A request queued for its turn: copied out of the receive
/// buffer (in words: parsing wants the header aligned), with the clone of
/// the device it came from (the kernel takes its reply only there).
pub(crate) struct Job {
    words: Vec<u64>,
    len: usize,
    sender: ChannelSender,
}

impl Job {
    /// (cutf8fs patch) The request as it was read.
    fn bytes(&self) -> &[u8] {
        &zerocopy::IntoBytes::as_bytes(&self.words[..])[..self.len]
    }

    /// (cutf8fs patch) Whether this is request `unique`, a wait for a lock
    /// (FUSE_SETLKW taking one, not letting go): the one request a
    /// filesystem ends early when interrupted.
    fn is_lock_wait(&self, unique: ll::RequestId) -> bool {
        ll::AnyRequest::try_from(self.bytes()).is_ok_and(|req| {
            req.unique() == unique
                && matches!(req.operation(),
                    Ok(ll::Operation::SetLk(x)) if x.sleep() && x.lock().typ != libc::F_UNLCK)
        })
    }

    fn new(data: &[u8], sender: ChannelSender) -> Job {
        let mut words = vec![0u64; data.len().div_ceil(8)];
        zerocopy::IntoBytes::as_mut_bytes(&mut words[..])[..data.len()].copy_from_slice(data);
        Job {
            words,
            len: data.len(),
            sender,
        }
    }
}

/// (cutf8fs patch) How long every event loop thread must have been inside
/// one request before another is started (`Config::max_threads`).
pub const STALL: Duration = Duration::from_secs(1);

/// (cutf8fs patch) The event loop threads' stamps: 0 while a thread waits
/// for a request, else 1 + the milliseconds since `epoch` at which it took
/// the one it is in.
pub(crate) struct Pool {
    epoch: Instant,
    stamps: Mutex<Vec<Arc<AtomicU64>>>,
    /// The session is ending: no thread is started any more.
    ending: AtomicBool,
    /// Threads the grower started, joined at the end.
    extra: Mutex<Vec<JoinHandle<io::Result<()>>>>,
    /// Threads inside a request now.
    working: AtomicUsize,
    /// The grower sleeps until a thread takes a request (an idle daemon
    /// is not woken ten times a second for months).
    parked: AtomicBool,
    grower: OnceLock<thread::Thread>,
}

impl Pool {
    /// A new thread's stamp (waiting).
    fn stamp(&self) -> Arc<AtomicU64> {
        let s = Arc::new(AtomicU64::new(0));
        self.stamps.lock().push(s.clone());
        s
    }

    fn now(&self) -> u64 {
        1 + self.epoch.elapsed().as_millis() as u64
    }

    /// A thread took a request (`stamp` its stamp).
    fn enter(&self, stamp: &AtomicU64) {
        stamp.store(self.now(), Ordering::Release);
        // SeqCst with the grower's `parked` then `working`: either it sees
        // this thread working or this sees it parked.
        if self.working.fetch_add(1, Ordering::SeqCst) == 0 && self.parked.load(Ordering::SeqCst)
        {
            if let Some(g) = self.grower.get() {
                g.unpark();
            }
        }
    }

    /// The thread answered its request.
    fn leave(&self, stamp: &AtomicU64) {
        stamp.store(0, Ordering::Release);
        self.working.fetch_sub(1, Ordering::SeqCst);
    }

    /// Parks the grower while no thread is inside a request.
    fn wait_for_work(&self) {
        self.parked.store(true, Ordering::SeqCst);
        if self.working.load(Ordering::SeqCst) == 0 && !self.ending.load(Ordering::Acquire) {
            thread::park();
        }
        self.parked.store(false, Ordering::SeqCst);
    }

    /// The session ends: no thread is started any more.
    fn end(&self) {
        self.ending.store(true, Ordering::Release);
        if let Some(g) = self.grower.get() {
            g.unpark();
        }
    }

    /// Every thread has been inside one request for `STALL`; (cutf8fs
    /// patch 0004) with requests `queued` for their turn, every thread
    /// but those reading, at least one.
    fn stalled(&self, queued: bool) -> bool {
        let now = self.now();
        let stall = STALL.as_millis() as u64;
        let stamps = self.stamps.lock();
        let mut inside = stamps
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&since| since != 0 || !queued)
            .peekable();
        inside.peek().is_some() && inside.all(|since| since != 0 && now.saturating_sub(since) >= stall)
    }
}

/// (cutf8fs patch) Starts another event loop thread (on a clone of `ch`)
/// whenever every thread has been inside one request for [`STALL`], up to
/// `max` threads; ends with the session.
fn grow<FS: Filesystem>(
    pool: &Arc<Pool>,
    ch: &Channel,
    fs: &Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: Uid,
    max: usize,
    turns: Option<Arc<Turns<Job>>>,
) {
    let _ = pool.grower.set(thread::current());
    loop {
        pool.wait_for_work();
        thread::sleep(STALL / 10);
        if pool.ending.load(Ordering::Acquire) {
            return;
        }
        let n = pool.stamps.lock().len();
        if n >= max || !pool.stalled(turns.as_ref().is_some_and(|t| t.queued())) {
            continue;
        }
        let ch = match ch.clone_fd() {
            Ok(ch) => ch,
            Err(e) => {
                warn!("cannot add a thread for requests: {e}");
                continue;
            }
        };
        match start_loop(pool, n, ch, fs, allowed, session_owner, turns.clone()) {
            Ok(t) => {
                if let Some(turns) = &turns {
                    turns.add_thread();
                }
                warn!(
                    "every thread for requests has been inside one for {} s: added one \
                     ({} now, at most {max})",
                    STALL.as_secs(),
                    n + 1
                );
                pool.extra.lock().push(t);
            }
            Err(e) => warn!("cannot add a thread for requests: {e}"),
        }
    }
}

/// Starts event loop thread number `i` on `ch`, its stamp in `pool` (taken
/// back if the thread cannot be started).
fn start_loop<FS: Filesystem>(
    pool: &Arc<Pool>,
    i: usize,
    ch: Channel,
    fs: &Arc<FilesystemHolder<FS>>,
    allowed: SessionACL,
    session_owner: Uid,
    turns: Option<Arc<Turns<Job>>>,
) -> io::Result<JoinHandle<io::Result<()>>> {
    let thread_name = format!("fuser-{i}");
    let event_loop = SessionEventLoop {
        thread_name: thread_name.clone(),
        filesystem: fs.clone(),
        ch,
        allowed,
        session_owner,
        busy: pool.stamp(),
        pool: pool.clone(),
        turns,
    };
    thread::Builder::new()
        .name(thread_name)
        .spawn(move || event_loop.event_loop())
        .inspect_err(|_| {
            pool.stamps.lock().pop();
        })
}

impl<FS: Filesystem> SessionEventLoop<FS> {
    fn event_loop(&self) -> io::Result<()> {
        if let Some(turns) = &self.turns {
            return self.serve_turns(turns);
        }
        // Buffer for receiving requests from the kernel. Only one is allocated and
        // it is reused immediately after dispatching to conserve memory and allocations.
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();
        loop {
            // Read the next request from the given channel to kernel driver
            // The kernel driver makes sure that we get exactly one request per read
            match self.ch.receive_retrying(buf) {
                Ok(size) => match RequestWithSender::new(self.ch.sender(), &buf[..size]) {
                    // Dispatch request
                    Some(req) => {
                        if let Ok(Operation::Destroy(_)) = req.request.operation() {
                            req.reply::<ReplyEmpty>().ok();
                            return Ok(());
                        } else {
                            self.dispatch_stamped(req);
                        }
                    }
                    // Quit loop on illegal request
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "Invalid request",
                        ));
                    }
                },
                Err(nix::errno::Errno::ENODEV) => {
                    self.pool.end();
                    return Ok(());
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
}

impl<FS: Filesystem> SessionEventLoop<FS> {
    /// (cutf8fs patch) The event loop with turns between users
    /// (src/turns.rs): this thread reads requests from its channel, and
    /// serves what the turns give it.
    fn serve_turns(&self, turns: &Turns<Job>) -> io::Result<()> {
        let mut buf = FuseReadBuf::new();
        let buf = buf.as_mut();
        loop {
            if let Next::Serve(uid, job) = turns.next() {
                self.serve_job(uid, &job, turns)?;
                continue;
            }
            // This thread is a reader until the turns say otherwise.
            let job = loop {
                let size = match self.ch.receive_retrying(buf) {
                    Ok(size) => size,
                    Err(nix::errno::Errno::ENODEV) => {
                        self.pool.end();
                        return Ok(());
                    }
                    Err(err) => return Err(err.into()),
                };
                let req = parsed(self.ch.sender(), &buf[..size])?;
                let (opcode, uid) = (req.request.header().opcode, req.request.header().uid);
                if opcode == abi::fuse_opcode::FUSE_DESTROY as u32 {
                    turns.unqueued();
                    req.reply::<ReplyEmpty>().ok();
                    return Ok(());
                }
                // An interrupt of a lock wait still queued for its turn ends
                // it here, EINTR, as the wait would have: left for later, it
                // could come after the filesystem stopped looking for it,
                // and the caller would then wait for the lock unkillably.
                // (One whose wait another thread has read but not queued
                // yet is remembered: that thread takes it out once queued.)
                let wait = |unique: ll::RequestId| move |job: &Job| job.is_lock_wait(unique);
                if let Ok(ll::Operation::Interrupt(x)) = req.request.operation() {
                    if let Some(job) = turns.cancel(x.unique().into(), wait(x.unique())) {
                        turns.unqueued();
                        interrupted(&job)?;
                        break None;
                    }
                }
                // The kernel's own: an interrupt goes ahead of everything,
                // a forget has no reply and no user to count.
                if opcode == abi::fuse_opcode::FUSE_INTERRUPT as u32
                    || opcode == abi::fuse_opcode::FUSE_FORGET as u32
                    || opcode == abi::fuse_opcode::FUSE_BATCH_FORGET as u32
                {
                    turns.unqueued();
                    self.dispatch_stamped(req);
                    break None;
                }
                let data = &buf[..size];
                let unique = req.request.unique();
                let got = turns.received(uid, size, Instant::now(), || {
                    Job::new(data, self.ch.sender())
                });
                if !matches!(got, Got::Now) {
                    // Queued: its interrupt may have been read meanwhile.
                    if let Some(job) = turns.cancel_missed(unique.into(), wait(unique)) {
                        interrupted(&job)?;
                    }
                }
                match got {
                    Got::Now => {
                        self.dispatch_stamped(req);
                        turns.done(uid);
                        break None;
                    }
                    Got::Instead(uid, job) => break Some((uid, job)),
                    Got::Deferred => {}
                }
            };
            if let Some((uid, job)) = job {
                self.serve_job(uid, &job, turns)?;
            }
        }
    }

    /// Serves a request taken in turns, answering on the channel it came
    /// from.
    fn serve_job(&self, uid: u32, job: &Job, turns: &Turns<Job>) -> io::Result<()> {
        self.dispatch_stamped(parsed(job.sender.clone(), job.bytes())?);
        turns.done(uid);
        Ok(())
    }

    /// Dispatches `req`, this thread stamped inside a request meanwhile
    /// (patch 0003's grower).
    fn dispatch_stamped(&self, req: RequestWithSender<'_>) {
        self.pool.enter(&self.busy);
        req.dispatch(self);
        self.pool.leave(&self.busy);
    }
}

/// (cutf8fs patch) Answers a queued lock wait taken out by its interrupt:
/// EINTR, as the wait itself would have.
fn interrupted(job: &Job) -> io::Result<()> {
    parsed(job.sender.clone(), job.bytes())?
        .reply::<ReplyEmpty>()
        .error(Errno::EINTR);
    Ok(())
}

/// (cutf8fs patch) A request parsed out of `data`, to be answered through
/// `sender`.
fn parsed(sender: ChannelSender, data: &[u8]) -> io::Result<RequestWithSender<'_>> {
    RequestWithSender::new(sender, data)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "Invalid request"))
}

/// The background session data structure
#[derive(Debug)]
pub struct BackgroundSession {
    /// Thread guard of the background session
    pub guard: JoinHandle<io::Result<()>>,
    /// Object for creating Notifiers for client use
    sender: ChannelSender,
    /// Ensures the filesystem is unmounted when the session ends
    mount: Option<Mount>,
}

impl BackgroundSession {
    /// Unmount the filesystem and join the background thread.
    pub fn umount_and_join(mut self) -> io::Result<()> {
        if let Some(mount) = self.mount.take() {
            mount.umount()?;
        }
        self.join()
    }

    /// Returns an object that can be used to send notifications to the kernel
    pub fn notifier(&self) -> Notifier {
        Notifier::new(self.sender.clone())
    }

    /// Join the filesystem thread.
    pub fn join(self) -> io::Result<()> {
        self.guard
            .join()
            .map_err(|_panic: Box<dyn std::any::Any + Send>| {
                io::Error::new(
                    io::ErrorKind::Other,
                    "filesystem background thread panicked",
                )
            })?
    }
}
