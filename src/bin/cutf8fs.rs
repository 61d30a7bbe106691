//! `cutf8fs BACKING MOUNTPOINT [-o OPTIONS] [-f] [-d]`: argument parsing
//! only; everything else is `cutf8fs::fs::run`. Also `cutf8fs --stats
//! MOUNTPOINT` (the running daemon's statistics, `cutf8fs::fs::stats`) and
//! `cutf8fs -V` (what this build and this machine offer).
//!
//! Also the mount helper: `mount -t fuse.cutf8fs BACKING MNT -o OPTS` and
//! the fstab line `BACKING MNT fuse.cutf8fs OPTS 0 0` reach this program
//! through mount.fuse3 (which runs `cutf8fs BACKING MNT -o OPTS`) or
//! through a `/sbin/mount.fuse.cutf8fs` symlink to it (mount(8) then adds
//! `-n`, `-s`, `-v` or `-t TYPE`, accepted and ignored here).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::TypedValueParser;
use clap::Parser;

/// `-V` and `--version`: the version, the codec's vector path on this CPU,
/// the FUSE library and what the kernel here offers it (as `cutf8
/// --version` names the codec path).
fn long_version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |r| r.trim().to_string());
        let (major, minor) = {
            let mut it = kernel
                .split(['.', '-'])
                .map(|p| p.parse::<u32>().unwrap_or(0));
            (it.next().unwrap_or(0), it.next().unwrap_or(0))
        };
        let fuse = if std::path::Path::new("/dev/fuse").exists() {
            "/dev/fuse present"
        } else {
            "no /dev/fuse (modprobe fuse)"
        };
        let passthrough = if (major, minor) >= (6, 9) {
            "passthrough available (read-only mounts, daemon as root)"
        } else {
            "no passthrough (needs Linux 6.9)"
        };
        format!(
            "{}\ncodec: {} (CUTF8FS_SIMD lowers it)\nfuser {FUSER} (FUSE protocol 7)\n\
             kernel: Linux {kernel}; {fuse}; {passthrough}",
            env!("CARGO_PKG_VERSION"),
            cutf8fs::codec::level().name(),
        )
    })
}

/// The fuser release linked in (Cargo.lock; a test keeps them in step).
const FUSER: &str = "0.18";

/// `-o`'s values: any text (checked by `cutf8fs::fs::options`), with the
/// option names offered as completions (`cutf8fs -o <TAB>`).
#[derive(Clone)]
struct MountOptions;

impl TypedValueParser for MountOptions {
    type Value = String;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        Ok(value.to_string_lossy().into_owned())
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(cutf8fs::fs::options::completion_names);
        Some(Box::new(
            names
                .iter()
                .map(|n| clap::builder::PossibleValue::new(n.as_str())),
        ))
    }
}

/// Mirror BACKING at MOUNTPOINT; corrected (Corrected UTF-8) files appear
/// as standard UTF-8. See cutf8fs(1).
#[derive(Parser, Debug)]
#[command(
    name = "cutf8fs",
    version = long_version(),
    about = "Mirror BACKING at MOUNTPOINT, showing Corrected UTF-8 files as standard UTF-8 and writing them back as Corrected UTF-8",
    long_about = None,
    after_help = cutf8fs::fs::options::help()
)]
struct Cli {
    /// The directory to mirror.
    #[arg(required_unless_present_any = ["generate_completions", "stats"])]
    backing: Option<PathBuf>,
    /// Where to show it.
    #[arg(required_unless_present_any = ["generate_completions", "stats"])]
    mountpoint: Option<PathBuf>,
    /// Print the statistics of the daemon serving MOUNTPOINT (requests,
    /// scans, index hits, bytes converted, descriptors, memory) and exit.
    #[arg(long, value_name = "MOUNTPOINT", exclusive = true)]
    stats: Option<PathBuf>,
    /// Print the completion script for SHELL (bash, zsh, fish, ...) and exit.
    #[arg(long, hide = true, value_name = "SHELL")]
    generate_completions: Option<clap_complete::Shell>,
    /// Comma-separated mount options (FUSE's, the kernel's and cutf8fs's;
    /// see cutf8fs(1)); may be repeated.
    #[arg(
        short = 'o',
        value_name = "OPTIONS",
        action = clap::ArgAction::Append,
        value_parser = MountOptions,
        hide_possible_values = true
    )]
    options: Vec<String>,
    /// Stay in the foreground; log to stderr.
    #[arg(short = 'f', long = "foreground")]
    foreground: bool,
    /// Debug logging (implies -f).
    #[arg(short = 'd')]
    debug: bool,
    /// mount(8) helper flags, ignored.
    #[arg(short = 'n', hide = true)]
    no_mtab: bool,
    #[arg(short = 's', hide = true)]
    sloppy: bool,
    #[arg(short = 'v', hide = true)]
    verbose: bool,
    #[arg(short = 't', hide = true, value_name = "TYPE")]
    fstype: Option<String>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(m) = &cli.stats {
        return match cutf8fs::fs::stats::query(m) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cutf8fs: {e}");
                ExitCode::from(1)
            }
        };
    }
    let (Some(backing), Some(mountpoint)) = (cli.backing, cli.mountpoint) else {
        let shell = cli
            .generate_completions
            .unwrap_or(clap_complete::Shell::Bash);
        let mut cmd = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut cmd, "cutf8fs", &mut std::io::stdout());
        return ExitCode::SUCCESS;
    };
    let cfg = cutf8fs::fs::Config {
        backing,
        mountpoint,
        options: cli.options,
        foreground: cli.foreground || cli.debug,
        debug: cli.debug,
    };
    match cutf8fs::fs::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("cutf8fs: {f}");
            ExitCode::from(u8::try_from(f.code).unwrap_or(1))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fuser_release_named_is_the_one_linked() {
        let lock = include_str!("../../Cargo.lock");
        let version = lock
            .split("name = \"fuser\"\nversion = \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("fuser in Cargo.lock");
        assert!(version.starts_with(super::FUSER), "{version}");
    }
}
