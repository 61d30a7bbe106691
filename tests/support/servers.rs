//! Real file servers exporting a directory (a cutf8fs mount), for the
//! export tests, and their clients. [`Server::samba`] starts Debian's
//! `smbd`, [`Server::ganesha`] NFS-Ganesha (FSAL VFS, NFSv4 only, no
//! rpcbind, dbus or grace period), each in the foreground on 127.0.0.1 at
//! a free port with a private configuration and state directory; the
//! guard waits until the server listens, stops it on drop, and prints its
//! configuration and log when the test panicked. [`Server::restart`] stops
//! and starts the same server on the same port and state (what a test of
//! handles that outlive a restart needs). The clients are `smbclient`
//! ([`Server::smb`]) and libnfs: its `nfs-ls`, `nfs-cat` and `nfs-cp`, and
//! `nfsop`, a small C program built here with gcc against `libnfs-dev` for
//! what those lack (rename, unlink, mkdir, rmdir, stat).
//!
//! `scripts/setup.sh` installs all of them; a missing one is a failure,
//! never a skip.

use std::fs;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use super::mount::wait_for;

/// Which server a [`Server`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Samba,
    Ganesha,
}

/// A running file server; stopped on drop.
pub struct Server {
    pub kind: Kind,
    pub port: u16,
    /// Configuration, state and log live here.
    pub dir: tempfile::TempDir,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A port on 127.0.0.1 no one listens on now.
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// The share name both servers export the directory as.
pub const SHARE: &str = "share";

impl Server {
    /// smbd exporting `path` as [`SHARE`] to guests, who act as root (the
    /// settings a FUSE share needs are those of man cutf8fs, EXPORTING).
    pub fn samba(path: &Path) -> Server {
        let dir = tempfile::Builder::new().prefix("smbd-").tempdir().unwrap();
        let d = dir.path();
        for sub in ["private", "lock", "state", "cache", "pid", "ncalrpc"] {
            fs::create_dir(d.join(sub)).unwrap();
        }
        let port = free_port();
        let log = d.join("log.smbd");
        let conf = d.join("smb.conf");
        let at = |s: &str| d.join(s).display().to_string();
        fs::write(
            &conf,
            format!(
                "[global]\n\
                 workgroup = TEST\n\
                 server role = standalone server\n\
                 map to guest = Bad User\n\
                 guest account = root\n\
                 smb ports = {port}\n\
                 interfaces = 127.0.0.1\n\
                 bind interfaces only = yes\n\
                 disable netbios = yes\n\
                 server min protocol = SMB2\n\
                 private dir = {}\nlock directory = {}\nstate directory = {}\n\
                 cache directory = {}\npid directory = {}\nncalrpc dir = {}\n\
                 log file = {}\nlog level = 1\n\
                 load printers = no\nprinting = bsd\nprintcap name = /dev/null\n\
                 disable spoolss = yes\n\
                 kernel oplocks = no\n\
                 kernel share modes = no\n\
                 posix locking = yes\n\
                 ea support = yes\n\
                 [{SHARE}]\n\
                 path = {}\n\
                 read only = no\n\
                 guest ok = yes\n\
                 force user = root\n",
                at("private"),
                at("lock"),
                at("state"),
                at("cache"),
                at("pid"),
                at("ncalrpc"),
                log.display(),
                path.display()
            ),
        )
        .unwrap();
        let mut s = Server {
            kind: Kind::Samba,
            port,
            dir,
            conf,
            log,
            child: None,
        };
        s.start();
        s
    }

    /// NFS-Ganesha exporting `path` over NFSv4 as `/`[`SHARE`], root not
    /// squashed, with the fixed filesystem id `fsid` ("major.minor").
    pub fn ganesha(path: &Path, fsid: &str) -> Server {
        Server::ganesha_fsal(path, fsid, "")
    }

    /// [`Server::ganesha`] with `fsal` added to the export's `FSAL { Name =
    /// VFS; … }` block (such as `fsid_type = Major64;`).
    pub fn ganesha_fsal(path: &Path, fsid: &str, fsal: &str) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("ganesha-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        fs::create_dir(d.join("recovery")).unwrap();
        let port = free_port();
        let log = d.join("ganesha.log");
        let conf = d.join("ganesha.conf");
        fs::write(
            &conf,
            format!(
                "NFS_CORE_PARAM {{\n\
                 \x20   NFS_Port = {port};\n\
                 \x20   Bind_addr = 127.0.0.1;\n\
                 \x20   Protocols = 4;\n\
                 \x20   Enable_NLM = false;\n\
                 \x20   Enable_RQUOTA = false;\n\
                 \x20   Enable_UDP = false;\n\
                 \x20   Plugins_Dir = \"{plugins}\";\n\
                 }}\n\
                 NFSV4 {{\n\
                 \x20   Graceless = true;\n\
                 \x20   RecoveryRoot = \"{recovery}\";\n\
                 \x20   Only_Numeric_Owners = true;\n\
                 }}\n\
                 NFS_KRB5 {{ Active_krb5 = false; }}\n\
                 EXPORT {{\n\
                 \x20   Export_Id = 1;\n\
                 \x20   Path = \"{path}\";\n\
                 \x20   Pseudo = \"/{SHARE}\";\n\
                 \x20   Access_Type = RW;\n\
                 \x20   Squash = No_Root_Squash;\n\
                 \x20   Protocols = 4;\n\
                 \x20   Transports = TCP;\n\
                 \x20   SecType = sys;\n\
                 \x20   Filesystem_Id = {fsid};\n\
                 \x20   FSAL {{ Name = VFS; {fsal} }}\n\
                 }}\n\
                 LOG {{ Default_Log_Level = EVENT; }}\n",
                plugins = ganesha_plugins().display(),
                recovery = d.join("recovery").display(),
                path = path.display(),
            ),
        )
        .unwrap();
        let mut s = Server {
            kind: Kind::Ganesha,
            port,
            dir,
            conf,
            log,
            child: None,
        };
        s.start();
        s
    }

    fn start(&mut self) {
        assert!(self.child.is_none());
        let d = self.dir.path();
        let out = fs::File::create(d.join("stdout")).unwrap();
        let mut cmd = match self.kind {
            Kind::Samba => {
                let mut c = Command::new("smbd");
                c.arg("--foreground")
                    .arg("--no-process-group")
                    .arg(format!("--configfile={}", self.conf.display()));
                c
            }
            Kind::Ganesha => {
                let mut c = Command::new("ganesha.nfsd");
                c.arg("-F")
                    .arg("-L")
                    .arg(&self.log)
                    .arg("-f")
                    .arg(&self.conf)
                    .arg("-p")
                    .arg(d.join("ganesha.pid"));
                c
            }
        };
        // A group of its own: smbd ends by signalling its whole process
        // group, which must not be this test's.
        let child = cmd
            .process_group(0)
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?} (scripts/setup.sh): {e}", self.kind));
        self.child = Some(child);
        let port = self.port;
        let mut exited = None;
        let up = wait_for(30.0, || {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                exited = Some(st);
                return true;
            }
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
        });
        assert!(
            up && exited.is_none(),
            "{:?} did not listen on 127.0.0.1:{port} ({exited:?}):\n{}",
            self.kind,
            self.report()
        );
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on the process group of our own child (its id),
        // which is not reaped yet: the server and the processes it forked.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGTERM) };
        if !wait_for(10.0, || c.try_wait().ok().flatten().is_some()) {
            let _ = c.kill();
        }
        let _ = c.wait();
        // Wait until nothing listens on the port any more.
        let port = self.port;
        wait_for(10.0, || {
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
        });
    }

    /// Stops and starts the same server, on the same port and state.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    /// The configuration and everything the server wrote, for a failure.
    pub fn report(&self) -> String {
        let d = self.dir.path();
        let mut s = format!(
            "--- {} ---\n{}",
            self.conf.display(),
            fs::read_to_string(&self.conf).unwrap_or_default()
        );
        for f in [d.join("stdout"), self.log.clone()] {
            let text = fs::read_to_string(&f).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            s += &format!("--- {} (last lines) ---\n", f.display());
            for l in tail.into_iter().rev() {
                s += l;
                s += "\n";
            }
        }
        s
    }

    /// Runs smbclient's commands `cmds` (`;`-separated) on the share, as a
    /// guest, with `dir` as the local directory.
    pub fn smb(&self, cmds: &str, dir: &Path) -> Output {
        assert_eq!(self.kind, Kind::Samba);
        Command::new("smbclient")
            .arg(format!("//127.0.0.1/{SHARE}"))
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-N")
            .arg("-m")
            .arg("SMB3")
            .arg("-c")
            .arg(cmds)
            .current_dir(dir)
            .output()
            .expect("smbclient (scripts/setup.sh)")
    }

    /// An `nfs://` URL of `rel` in the export, for libnfs's tools.
    pub fn nfs_url(&self, rel: &str) -> String {
        assert_eq!(self.kind, Kind::Ganesha);
        let rel = rel.trim_start_matches('/');
        format!(
            "nfs://127.0.0.1/{SHARE}/{rel}?version=4&nfsport={}",
            self.port
        )
    }

    /// Runs a libnfs tool (`nfs-ls`, `nfs-cat`, `nfs-cp`) with `args`.
    pub fn nfs_tool(&self, tool: &str, args: &[&str]) -> Output {
        Command::new(tool)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool} (libnfs-utils, scripts/setup.sh): {e}"))
    }

    /// Runs `nfsop OP ARGS…` against the export (see [`nfsop`]).
    pub fn nfs_op(&self, op: &str, args: &[&str]) -> Output {
        let url = format!("nfs://127.0.0.1/{SHARE}?version=4&nfsport={}", self.port);
        Command::new(nfsop())
            .arg(url)
            .arg(op)
            .args(args)
            .output()
            .unwrap()
    }

    /// The NFS file handle (hex) the server gives for `rel` in the export.
    pub fn nfs_handle(&self, rel: &str) -> String {
        let path = format!("/{}", rel.trim_start_matches('/'));
        let out = self.nfs_op("fh", &[&path]);
        assert!(
            out.status.success(),
            "nfsop fh {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Reads the file with the NFS handle `hex` ([`Server::nfs_handle`]),
    /// no name looked up: `nfsop readfh` (exit 3 for NFS4ERR_STALE).
    pub fn nfs_read_handle(&self, hex: &str) -> Output {
        self.nfs_op("readfh", &[hex])
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("{}", self.report());
        }
    }
}

/// Where Ganesha's FSAL plugins are (Debian puts them under the
/// multiarch library directory).
fn ganesha_plugins() -> PathBuf {
    let found = glob_one("/usr/lib", "ganesha").or_else(|| glob_one("/usr/lib64", "ganesha"));
    found.expect("NFS-Ganesha's plugin directory (nfs-ganesha-vfs, scripts/setup.sh)")
}

/// `root/*/name` or `root/name` holding libfsalvfs.so.
fn glob_one(root: &str, name: &str) -> Option<PathBuf> {
    let has_vfs = |p: &Path| p.join("libfsalvfs.so").exists();
    let direct = Path::new(root).join(name);
    if has_vfs(&direct) {
        return Some(direct);
    }
    fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(name))
        .find(|p| has_vfs(p))
}

/// The libnfs helper for what libnfs-utils' tools do not do: `nfsop URL
/// OP ARGS…` with OP one of `mv FROM TO`, `rm PATH`, `mkdir PATH`, `rmdir
/// PATH`, `size PATH` (prints the size), `fh PATH` (prints the file's
/// NFS handle in hex, as the server gave it) and `readfh HEX` (prints the
/// first 64 KiB of the file with that handle: PUTFH and READ with the
/// anonymous stateid, nothing looked up by name); paths inside the export.
/// Exit 0, or 1 with libnfs's error on stderr (3 for NFS4ERR_STALE). Built
/// once per test run.
pub fn nfsop() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cutf8fs-nfsop-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let src = dir.join("nfsop.c");
        fs::write(&src, NFSOP_C).unwrap();
        let bin = dir.join("nfsop");
        let out = Command::new("gcc")
            .arg("-O1")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .arg("-lnfs")
            .output()
            .expect("gcc");
        assert!(
            out.status.success(),
            "cannot build nfsop (libnfs-dev, scripts/setup.sh): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        bin
    })
    .clone()
}

const NFSOP_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/time.h>
#include <poll.h>
#include <stdlib.h>
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs4.h>

/* What nfs_get_fh returns: libnfs 4.0's own struct nfs_fh (private). */
struct raw_fh { int len; char *val; };

struct reply { int done; int status; char err[256]; char *data; unsigned len; };

static void read_cb(struct rpc_context *rpc, int status, void *data, void *priv) {
    struct reply *r = priv;
    COMPOUND4res *res = data;
    r->done = 1;
    if (status != RPC_STATUS_SUCCESS) {
        r->status = -1;
        snprintf(r->err, sizeof r->err, "rpc: %s", rpc_get_error(rpc));
        return;
    }
    r->status = res->status;
    if (res->status != NFS4_OK) {
        snprintf(r->err, sizeof r->err, "nfsstat4 %d (op %u of PUTFH, READ)",
                 res->status, res->resarray.resarray_len);
        return;
    }
    READ4resok *ok = &res->resarray.resarray_val[1].nfs_resop4_u.opread.READ4res_u.resok4;
    r->len = ok->data.data_len;
    r->data = malloc(r->len + 1);
    memcpy(r->data, ok->data.data_val, r->len);
}

/* PUTFH HEX; READ 64 KiB at 0 with the anonymous stateid. */
static int read_by_handle(struct nfs_context *nfs, const char *hex) {
    size_t n = strlen(hex) / 2;
    char *fh = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        if (sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&fh[i]) != 1) {
            fprintf(stderr, "readfh: not hex: %s\n", hex); return 2;
        }
    nfs_argop4 ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].argop = OP_PUTFH;
    ops[0].nfs_argop4_u.opputfh.object.nfs_fh4_len = n;
    ops[0].nfs_argop4_u.opputfh.object.nfs_fh4_val = fh;
    ops[1].argop = OP_READ;
    ops[1].nfs_argop4_u.opread.count = 65536;
    COMPOUND4args args;
    memset(&args, 0, sizeof args);
    args.argarray.argarray_len = 2;
    args.argarray.argarray_val = ops;
    struct rpc_context *rpc = nfs_get_rpc_context(nfs);
    struct reply r;
    memset(&r, 0, sizeof r);
    if (rpc_nfs4_compound_async(rpc, read_cb, &args, &r) != 0) {
        fprintf(stderr, "readfh: %s\n", rpc_get_error(rpc)); return 1;
    }
    while (!r.done) {
        struct pollfd p = { .fd = rpc_get_fd(rpc), .events = rpc_which_events(rpc) };
        if (poll(&p, 1, 100) < 0) { perror("poll"); return 1; }
        if (rpc_service(rpc, p.revents) < 0) {
            fprintf(stderr, "readfh: %s\n", rpc_get_error(rpc)); return 1;
        }
    }
    if (r.status != 0) {
        fprintf(stderr, "readfh: %s\n", r.err);
        return r.status == NFS4ERR_STALE ? 3 : 1;
    }
    fwrite(r.data, 1, r.len, stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: nfsop URL OP ARGS...\n"); return 2; }
    struct nfs_context *nfs = nfs_init_context();
    if (!nfs) { fprintf(stderr, "nfs_init_context failed\n"); return 1; }
    struct nfs_url *url = nfs_parse_url_dir(nfs, argv[1]);
    if (!url) { fprintf(stderr, "%s\n", nfs_get_error(nfs)); return 1; }
    if (nfs_mount(nfs, url->server, url->path) != 0) {
        fprintf(stderr, "mount: %s\n", nfs_get_error(nfs)); return 1;
    }
    const char *op = argv[2];
    int r;
    if (!strcmp(op, "mv") && argc == 5) r = nfs_rename(nfs, argv[3], argv[4]);
    else if (!strcmp(op, "rm") && argc == 4) r = nfs_unlink(nfs, argv[3]);
    else if (!strcmp(op, "mkdir") && argc == 4) r = nfs_mkdir(nfs, argv[3]);
    else if (!strcmp(op, "rmdir") && argc == 4) r = nfs_rmdir(nfs, argv[3]);
    else if (!strcmp(op, "size") && argc == 4) {
        struct nfs_stat_64 st;
        r = nfs_stat64(nfs, argv[3], &st);
        if (r == 0) printf("%llu\n", (unsigned long long)st.nfs_size);
    } else if (!strcmp(op, "fh") && argc == 4) {
        struct nfsfh *fh;
        r = nfs_open(nfs, argv[3], O_RDONLY, &fh);
        if (r == 0) {
            struct raw_fh *raw = (struct raw_fh *)nfs_get_fh(fh);
            for (int i = 0; i < raw->len; i++) printf("%02x", (unsigned char)raw->val[i]);
            printf("\n");
            r = nfs_close(nfs, fh);
        }
    } else if (!strcmp(op, "readfh") && argc == 4) {
        return read_by_handle(nfs, argv[3]);
    } else { fprintf(stderr, "unknown op %s\n", op); return 2; }
    if (r != 0) { fprintf(stderr, "%s: %s\n", op, nfs_get_error(nfs)); return 1; }
    nfs_destroy_url(url);
    nfs_destroy_context(nfs);
    return 0;
}
"#;
