//! Holding a daemon's reads of chosen backing files (fanotify permission
//! events, `FAN_ACCESS_PERM`): [`ReadGate`] leaves unanswered every read
//! of those files by the daemon's threads of one name, so a test makes
//! "a scan is under way" a condition it controls instead of a guess at how
//! long a scan takes; every other read of the files is allowed at once.
//! Dropping the gate allows the held reads and every later one.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyEvent, FanotifyResponse, InitFlags, MarkFlags, MaskFlags,
    Response,
};

/// A fanotify group holding some reads of the marked files until dropped.
pub struct ReadGate {
    /// Written to stop the answering thread.
    stop: OwnedFd,
    /// The id of each thread whose read is held, once per thread.
    held: mpsc::Receiver<i32>,
    seen: Vec<i32>,
    answerer: Option<std::thread::JoinHandle<()>>,
}

/// The name of thread `tid` of process `pid`, if it is one of its threads.
fn thread_name(pid: u32, tid: i32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

impl ReadGate {
    /// Marks `files`: their reads by threads of process `pid` whose name
    /// begins with `prefix` are held; all other reads of them go on.
    pub fn new(pid: u32, prefix: &str, files: &[PathBuf]) -> ReadGate {
        let group = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT
                | InitFlags::FAN_REPORT_TID
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_CLOEXEC,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
        )
        .expect("fanotify_init with permission events (root, CONFIG_FANOTIFY_ACCESS_PERMISSIONS)");
        for f in files {
            let file = std::fs::File::open(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            group
                .mark::<_, std::path::Path>(
                    MarkFlags::FAN_MARK_ADD,
                    MaskFlags::FAN_ACCESS_PERM,
                    file.as_fd(),
                    None,
                )
                .unwrap_or_else(|e| panic!("fanotify_mark {}: {e}", f.display()));
        }
        let (stop_rx, stop) = nix::unistd::pipe().unwrap();
        let (tx, held) = mpsc::channel();
        let prefix = prefix.to_owned();
        let answerer = std::thread::spawn(move || {
            let mut kept: Vec<FanotifyEvent> = Vec::new();
            let allow = |e: &FanotifyEvent| {
                if let Some(fd) = e.fd() {
                    let _ = group.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
                }
            };
            loop {
                let mut fds = [
                    libc::pollfd {
                        fd: group.as_fd().as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: stop_rx.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // SAFETY: poll on two descriptors this thread owns.
                if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                    continue;
                }
                if fds[1].revents != 0 {
                    break;
                }
                for e in group.read_events().unwrap_or_default() {
                    let tid = e.pid();
                    let hold = thread_name(pid, tid).is_some_and(|n| n.starts_with(&prefix));
                    if hold {
                        let _ = tx.send(tid);
                        kept.push(e);
                    } else {
                        allow(&e);
                    }
                }
            }
            for e in &kept {
                allow(e);
            }
            // Closing the group allows whatever is still queued.
        });
        ReadGate {
            stop,
            held,
            seen: Vec::new(),
            answerer: Some(answerer),
        }
    }

    /// Waits until reads by `n` different threads are held; panics after
    /// `secs` naming `what`.
    pub fn wait_held(&mut self, n: usize, secs: f64, what: &str) {
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while self.seen.len() < n {
            let left = end.saturating_duration_since(Instant::now());
            match self.held.recv_timeout(left) {
                Ok(tid) if !self.seen.contains(&tid) => self.seen.push(tid),
                Ok(_) => {}
                Err(_) => panic!(
                    "{what}: {} of {n} threads' reads held within {secs} s",
                    self.seen.len()
                ),
            }
        }
    }
}

impl Drop for ReadGate {
    fn drop(&mut self) {
        let _ = nix::unistd::write(&self.stop, b"x");
        if let Some(t) = self.answerer.take() {
            let _ = t.join();
        }
    }
}
