//! `cutf8fs BACKING MOUNTPOINT [-o OPTIONS] [-f] [-d]`: argument parsing
//! only; everything else is `cutf8fs::fs::run`.
//!
//! Also the mount helper: `mount -t fuse.cutf8fs BACKING MNT -o OPTS` and
//! the fstab line `BACKING MNT fuse.cutf8fs OPTS 0 0` reach this program
//! through mount.fuse3 (which runs `cutf8fs BACKING MNT -o OPTS`) or
//! through a `/sbin/mount.fuse.cutf8fs` symlink to it (mount(8) then adds
//! `-n`, `-s`, `-v` or `-t TYPE`, accepted and ignored here).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Mirror BACKING at MOUNTPOINT; corrected (Corrected UTF-8) files appear
/// as standard UTF-8. See cutf8fs(1).
#[derive(Parser, Debug)]
#[command(
    name = "cutf8fs",
    version,
    about = "Mirror BACKING at MOUNTPOINT, showing Corrected UTF-8 files as standard UTF-8 and writing them back as Corrected UTF-8",
    long_about = None,
    after_help = cutf8fs::fs::options::help()
)]
struct Cli {
    /// The directory to mirror.
    #[arg(required_unless_present = "generate_completions")]
    backing: Option<PathBuf>,
    /// Where to show it.
    #[arg(required_unless_present = "generate_completions")]
    mountpoint: Option<PathBuf>,
    /// Print the completion script for SHELL (bash, zsh, fish, ...) and exit.
    #[arg(long, hide = true, value_name = "SHELL")]
    generate_completions: Option<clap_complete::Shell>,
    /// Comma-separated mount options (FUSE's, the kernel's and cutf8fs's;
    /// see cutf8fs(1)); may be repeated.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
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
    // The codec reads no environment: lower its SIMD level here (measurements).
    if let Some(level) = std::env::var("CUTF8FS_SIMD")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cutf8::simd::set_max_level(level);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
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
