//! `cutf8`, the converter: argument parsing and exit status, nothing else.
//!
//! clap's definitions below are the single source for `--help` and for the
//! man page (`cutf8 --generate-man`, hidden; `scripts/gen-man.sh` writes it
//! to man/cutf8.1). The work is done by `cutf8fs::convert` (encode, decode),
//! `cutf8fs::check` and `cutf8fs::migrate` (whose arguments and terminal
//! display are in `migrate.rs`); `main` runs one fallible function and turns its
//! result into the exit status: 0 success, 1 the input had problems
//! (conversion errors, check errors), 2 usage errors and I/O trouble.

#![deny(clippy::undocumented_unsafe_blocks)]

mod migrate;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::TypedValueParser;
use clap::{Args, CommandFactory, Parser, Subcommand};
use cutf8fs::check::{self, CheckOptions, Level, Rule};
use cutf8fs::convert::{self, Direction, Fatal, Input, Options, DEFAULT_BUFFER_SIZE};

/// Exit statuses, for --help and the man page.
const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "0",
        "Everything converted; check found no errors; migrate converted or skipped every file.",
    ),
    (
        "1",
        "Some input could not be converted (each such input is named with line, \
         column and byte offset), check found errors, or migrate failed on some file.",
    ),
    (
        "2",
        "Usage error, an input could not be read, or the output could not be written. \
         migrate: a named PATH does not exist or is on a cutf8fs mount (nothing is \
         converted then).",
    ),
];

/// Examples, for --help and the man page: (command, what it does).
const EXAMPLES: &[(&str, &str)] = &[
    (
        "cutf8 encode notes.txt -o notes.cu8",
        "Convert UTF-8 to Corrected UTF-8, magic number first.",
    ),
    (
        "cutf8 decode notes.cu8 | less",
        "Read a Corrected UTF-8 file as UTF-8.",
    ),
    (
        "cutf8 encode --lossless < blob > blob.cu8",
        "Convert as the mount does: ill-formed bytes pass through unchanged.",
    ),
    (
        "cutf8 check --allow tab --deny-warnings *.cu8",
        "Lint files, allowing TAB and failing on any other warning.",
    ),
    (
        "cutf8 check -A tab -A carriage-return /srv/archive",
        "Lint a whole archive, TAB and CR allowed; each repeated warning is shown once per file.",
    ),
    (
        "cutf8 migrate --dry-run --report plan.jsonl /srv/archive",
        "See what converting an archive would do, one JSON line per file.",
    ),
    (
        "cutf8 migrate /srv/archive && cutf8fs /srv/archive /mnt/archive",
        "Convert an archive in place, then read and write it as UTF-8 through the mount.",
    ),
    (
        "iconv -f LATIN1 -t UTF-8 old.txt | cutf8 encode -o old.cu8",
        "Encode Latin-1 text: convert it to UTF-8 first (cutf8 encode suggests this when it sees Latin-1).",
    ),
];

/// The environment, for --help and the man page: (variable, meaning).
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "CUTF8FS_RACY_MARGIN_MS=MS",
        "How long after a file's last change migrate waits before it records the file \
         in the index database, in milliseconds; 2100 by default (for tests).",
    ),
    (
        "CUTF8FS_SIMD=avx512|avx2|sse2|portable",
        "Run the codec's vector code at most at this level (for measurements; the best \
         the CPU has is chosen by default, and cutf8 --version names it).",
    ),
];

const SEE_ALSO: &str = "cutf8fs(1), cutf8-gconv(7), iconv(1), utf-8(7). The format: \
     docs/format.md; what the programs promise: docs/behaviour.md (installed in \
     /usr/share/doc/cutf8fs by the package, \
     PREFIX/share/doc/cutf8fs from source); converting trees: docs/migrate.md.";

const ABOUT: &str = "Convert between UTF-8 and Corrected UTF-8, and check Corrected UTF-8 files";

const LONG_ABOUT: &str = "\
Convert between standard UTF-8 and Corrected UTF-8, and check Corrected UTF-8 files.

Corrected UTF-8 keeps UTF-8's byte structure but adds an offset to every \
multi-byte sequence, so that each code point has exactly one encoding: no \
overlong forms, no C1 controls, no surrogates. A Corrected UTF-8 file begins \
with the magic number EF B7 9D ED B2 AE 00 0A, which is not part of the text.

Positions in messages: lines and columns count from 1 in the text (after the \
magic number), columns in characters; byte offsets count from 0 in the input \
as it is, magic number included. Each input stops at its first error: nothing \
is dropped or replaced. A closed pipe on standard output ends cutf8 quietly.";

fn after_long_help() -> String {
    let mut s = String::from("Exit status:\n");
    for (code, what) in EXIT_STATUS {
        s.push_str(&format!("  {code}  {what}\n"));
    }
    s.push_str("\nExamples:\n");
    for (cmd, what) in EXAMPLES {
        s.push_str(&format!("  {cmd}\n      {what}\n"));
    }
    s.push_str("\nEnvironment:\n");
    for (var, what) in ENVIRONMENT {
        s.push_str(&format!("  {var}\n      {what}\n"));
    }
    s.push_str(&format!("\nSee also: {SEE_ALSO}"));
    s
}

/// `cutf8 --version`: the version and the codec path live on this machine
/// (`-V` gives the version alone, and so does the man page).
fn long_version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        format!(
            "{} (codec: {})",
            env!("CARGO_PKG_VERSION"),
            cutf8fs::codec::level().name()
        )
    })
}

#[derive(Parser, Debug)]
#[command(
    name = "cutf8",
    version,
    long_version = long_version(),
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = after_long_help(),
    arg_required_else_help = true,
    propagate_version = true
)]
struct Cli {
    /// Print the man page (roff) made from these definitions and exit.
    #[arg(long, hide = true, exclusive = true)]
    generate_man: bool,

    /// Print the completion script for SHELL (bash, zsh, fish, ...) and exit.
    #[arg(long, hide = true, exclusive = true, value_name = "SHELL")]
    generate_completions: Option<clap_complete::Shell>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert UTF-8 to Corrected UTF-8 (stdin to stdout without FILE).
    #[command(long_about = "\
Convert UTF-8 to Corrected UTF-8, standard input to standard output when no \
FILE is named (\"-\" is standard input). The output begins with the magic number \
(once, however many inputs, before the first text) unless --no-magic is given; \
an empty text gives an empty output, with no magic number, as iconv does.

By default an input that has no faithful Corrected UTF-8 form is an error: \
ill-formed UTF-8 (stray continuation bytes, truncated sequences, FE/FF bytes), \
overlong forms, encoded surrogates, C1 controls (U+0080-U+009F), extended \
forms above U+10FFFF, and the magic number's own characters U+10E7D U+ED4E \
U+0000 U+000A in a row anywhere in the text (they would encode to a magic \
number, which decode refuses inside a text). NUL, CR and TAB convert (judging \
them is check's job). An input that already begins with the magic number is \
refused. An input that is not UTF-8 gets an error saying what it looks like \
(Latin-1, Windows-1252, UTF-16, UTF-32, binary) and the command that fixes it; \
UTF-8 that begins with a byte order mark converts, with a note that the mark \
stays as U+FEFF and the command that drops it.")]
    Encode(EncodeArgs),

    /// Convert Corrected UTF-8 to UTF-8 (stdin to stdout without FILE).
    #[command(long_about = "\
Convert Corrected UTF-8 to UTF-8, standard input to standard output when no \
FILE is named (\"-\" is standard input). Each input must begin with the \
magic number, which is dropped; an input without it is refused (it is most \
likely plain UTF-8 already) unless --no-magic is given, and an empty input is \
the empty text. A magic number after \
the start of an input is an error (files were concatenated; decode each on \
its own), except with --lossless, which reads it as text as the mount does.

By default an input that has no faithful UTF-8 form is an error: stray \
continuation bytes, truncated sequences, reserved units (FE or FF and the \
continuation bytes after it) and code points above U+10FFFF. With --lossless \
they pass through (code points above U+10FFFF in their extended form); a \
reserved unit of FE plus six continuation bytes that encode --lossless would \
read as an extended form gets a warning, as it would not come back unchanged.")]
    Decode(DecodeArgs),

    /// Lint Corrected UTF-8 files against the document rules.
    #[command(long_about = "\
Lint Corrected UTF-8 files against the document rules, one finding per line \
on standard output as FILE:LINE:COL: error|warning: MESSAGE [RULE] (or JSON \
lines with --format json), and a summary line on standard error. Exit status \
1 when any finding is an error. Directories are checked recursively; a file \
without the magic number that has a NUL byte in its first 8000 bytes is \
binary: one note says so and it is not checked. A script that cutf8 migrate \
leaves raw on purpose (#! and an interpreter, no magic number: migrate's own \
rule) draws one note, not a warning, and is not checked. A file without the \
magic number that is not UTF-8 either draws a note saying what it looks like \
(Latin-1, Windows-1252, UTF-16, binary) and the command that fixes it, as \
encode and migrate say; so does UTF-8 that begins with a byte order mark. An empty file draws no \
finding. A path on a cutf8fs mount is not checked (the mount shows the \
view, without the magic number): the message names the file in BACKING to \
check instead, and the exit status is 2.

Made for whole archives: every error is printed, but a warning that repeats \
in a file is printed once (--max-per-rule), followed by a note counting the \
rest; when any were held back, the summary also counts each rule over all \
files.

Malformed bytes are reported where they are and checking goes on. Reserved \
units and code points above U+10FFFF are valid Corrected UTF-8, so they are \
only warnings by default; they have no standard UTF-8 form, which is why \
decode refuses them without --lossless. The rules and their default levels \
are listed under --error.

Rules are turned off and on as compilers' warnings are: -A RULE (--allow), \
-W RULE (--warn), -D RULE (--deny, --error). When a rule is named by several \
of them, --error wins over --warn, which wins over --allow, whatever their \
order; --deny-warnings applies last.")]
    Check(CheckArgs),
    /// Convert text files in place to Corrected UTF-8, or back with --to utf8.
    Migrate(migrate::MigrateArgs),
}

/// Options shared by encode and decode.
#[derive(Args, Debug)]
struct ConvertArgs {
    /// Input files, converted in order into one output ("-" is stdin).
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,

    /// Write to OUT instead of stdout.
    ///
    /// The output is written to a temporary file beside OUT (.OUT.cutf8-*.tmp)
    /// and renamed over OUT only when every input converted, so OUT may name
    /// an input and a failed run leaves OUT as it was. Like sed -i, this gives
    /// OUT a new inode (hard links to the old one keep the old content); an
    /// existing OUT's permissions are kept, and a symlink is followed.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,

    /// Convert exactly as the cutf8fs mount does (docs/format.md, the view).
    ///
    /// Ill-formed bytes and reserved units pass through unchanged, and code
    /// points above U+10FFFF convert to and from their extended forms. C1
    /// controls, overlong forms and encoded surrogates are still errors when
    /// encoding: Corrected UTF-8 cannot store them.
    #[arg(long)]
    lossless: bool,

    /// Input buffer size in bytes (for tests).
    #[arg(long, hide = true, default_value_t = DEFAULT_BUFFER_SIZE,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    buffer_size: usize,
}

#[derive(Args, Debug)]
struct EncodeArgs {
    #[command(flatten)]
    common: ConvertArgs,

    /// Do not write the magic number at the start of the output.
    #[arg(long)]
    no_magic: bool,
}

#[derive(Args, Debug)]
struct DecodeArgs {
    #[command(flatten)]
    common: ConvertArgs,

    /// Decode input that does not begin with the magic number.
    ///
    /// Without it, such an input is refused: it is most likely plain UTF-8
    /// already, and decoding it would garble every non-ASCII character.
    #[arg(long)]
    no_magic: bool,
}

/// `check --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// Files or directories to check ("-" is stdin).
    ///
    /// A directory is checked recursively, in name order, without following
    /// symlinks and without entering .git, .hg or .svn (as migrate).
    #[arg(value_name = "PATH", required = true)]
    files: Vec<PathBuf>,

    /// Output format: text (FILE:LINE:COL: level: message [rule]) or json
    /// (one object per line: file, line, column, level, rule, message; notes
    /// have level "note" and no position).
    #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
    format: Format,

    /// Report RULE as an error (repeatable, or comma-separated; -D and
    /// --deny as in compilers).
    #[arg(
        short = 'D',
        long,
        visible_alias = "deny",
        value_name = "RULE",
        value_delimiter = ','
    )]
    error: Vec<RuleArg>,

    /// Report RULE as a warning (RULE as for --error).
    #[arg(
        short = 'W',
        long,
        value_name = "RULE",
        value_delimiter = ',',
        hide_possible_values = true
    )]
    warn: Vec<RuleArg>,

    /// Do not report RULE (RULE as for --error).
    #[arg(
        short = 'A',
        long,
        value_name = "RULE",
        value_delimiter = ',',
        hide_possible_values = true
    )]
    allow: Vec<RuleArg>,

    /// Treat every warning as an error.
    #[arg(long)]
    deny_warnings: bool,

    /// Print at most N warnings per rule per file (0: no limit); a note
    /// counts the rest, and the summary counts each rule over all files.
    /// Errors are always printed, every one.
    #[arg(long, value_name = "N", default_value_t = 1)]
    max_per_rule: u64,

    /// Input buffer size in bytes (for tests).
    #[arg(long, hide = true, default_value_t = DEFAULT_BUFFER_SIZE,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    buffer_size: usize,
}

/// A check rule on the command line: its name, with its description as
/// the help (the library's `Rule` knows nothing of clap).
#[derive(Clone, Copy, Debug)]
struct RuleArg(Rule);

impl clap::ValueEnum for RuleArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [RuleArg; Rule::ALL.len()] = {
            let mut all = [RuleArg(Rule::MissingMagic); Rule::ALL.len()];
            let mut i = 0;
            while i < all.len() {
                all[i] = RuleArg(Rule::ALL[i]);
                i += 1;
            }
            all
        };
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.description()))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Fatal::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cutf8: {e}");
            ExitCode::from(2)
        }
    }
}

/// Do what `cli` asks; the exit status, or what stopped everything.
fn run(cli: Cli) -> Result<u8, Fatal> {
    if let Some(shell) = cli.generate_completions {
        clap_complete::generate(shell, &mut Cli::command(), "cutf8", &mut std::io::stdout());
        return Ok(0);
    }
    if cli.generate_man {
        let mut out = std::io::stdout().lock();
        return match man_page().and_then(|page| out.write_all(&page)) {
            Ok(()) => Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Fatal::BrokenPipe),
            Err(e) => Err(Fatal::Output(e.to_string())),
        };
    }
    match cli.command {
        Some(Command::Encode(a)) => {
            let mut opts = convert_options(Direction::Encode, &a.common);
            opts.magic = !a.no_magic;
            run_convert(&opts, &a.common)
        }
        Some(Command::Decode(a)) => {
            let mut opts = convert_options(Direction::Decode, &a.common);
            opts.magic = !a.no_magic;
            run_convert(&opts, &a.common)
        }
        Some(Command::Check(a)) => Ok(run_check(&a)),
        Some(Command::Migrate(a)) => Ok(migrate::run(&a) as u8),
        None => {
            // arg_required_else_help makes this unreachable from the shell.
            let _ = Cli::command().print_help();
            Ok(2)
        }
    }
}

fn convert_options(direction: Direction, a: &ConvertArgs) -> Options {
    let mut opts = Options::new(direction);
    opts.lossless = a.lossless;
    opts.buffer_size = a.buffer_size;
    opts
}

/// Whether to colour what goes to stdout (`out`) or stderr: only on a
/// terminal, and never with NO_COLOR set (as clap does).
fn colour(out: bool) -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && if out {
            std::io::stdout().is_terminal()
        } else {
            std::io::stderr().is_terminal()
        }
}

/// A diagnostic line for stderr: `cutf8:` in bold red on a terminal.
fn diag_line(m: &str, colour: bool) -> String {
    if colour && !m.contains(": warning:") {
        format!("\x1b[1;31mcutf8:\x1b[0m {m}")
    } else if colour {
        format!("\x1b[1;33mcutf8:\x1b[0m {m}")
    } else {
        format!("cutf8: {m}")
    }
}

/// A check finding for stdout, its level coloured on a terminal.
fn finding_line(line: &str, colour: bool) -> String {
    if !colour {
        return line.to_string();
    }
    for (level, code) in [
        (": error: ", "1;31"),
        (": warning: ", "1;33"),
        (": note: ", "1;36"),
    ] {
        if let Some(k) = line.find(level) {
            let word = &level[2..level.len() - 2];
            return format!(
                "{}: \x1b[{code}m{word}:\x1b[0m {}",
                &line[..k],
                &line[k + level.len()..]
            );
        }
    }
    line.to_string()
}

fn run_convert(opts: &Options, a: &ConvertArgs) -> Result<u8, Fatal> {
    let inputs: Vec<Input> = a.files.iter().map(|f| Input::from_arg(f)).collect();
    let paint = colour(false);
    let summary = convert::run(opts, &inputs, a.output.as_deref(), &mut |m| {
        eprintln!("{}", diag_line(m, paint))
    })?;
    Ok(if summary.unreadable > 0 {
        2
    } else if summary.malformed > 0 {
        1
    } else {
        0
    })
}

fn run_check(a: &CheckArgs) -> u8 {
    let mut opts = CheckOptions::default();
    for (rules, level) in [
        (&a.allow, Level::Allow),
        (&a.warn, Level::Warning),
        (&a.error, Level::Error),
    ] {
        for &RuleArg(rule) in rules {
            opts.set(rule, level);
        }
    }
    if a.deny_warnings {
        opts.deny_warnings();
    }
    opts.max_per_rule = a.max_per_rule;
    opts.buffer_size = a.buffer_size;
    opts.json = a.format == Format::Json;
    let inputs: Vec<Input> = a.files.iter().map(|f| Input::from_arg(f)).collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut broken = false;
    let (paint_out, paint_err) = (colour(true) && !opts.json, colour(false));
    let summary = check::run(
        &opts,
        &inputs,
        &mut |line| {
            if !broken && writeln!(out, "{}", finding_line(line, paint_out)).is_err() {
                broken = true;
            }
        },
        &mut |m| eprintln!("{}", diag_line(m, paint_err)),
    );
    let _ = out.flush();
    eprintln!("cutf8: {summary}");
    for line in summary.rule_lines(&opts) {
        eprintln!("cutf8: {line}");
    }
    if summary.unreadable > 0 {
        2
    } else if summary.errors > 0 {
        1
    } else {
        0
    }
}

/// The man page: clap_mangen's sections for the top command, one section
/// per subcommand (synopsis, description, options), then EXIT STATUS,
/// EXAMPLES, ENVIRONMENT and SEE ALSO from the same constants as --help.
fn man_page() -> std::io::Result<Vec<u8>> {
    // Without the machine-dependent codec path: the page is committed.
    let mut cmd = Cli::command().long_version(None);
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut w = Vec::new();
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    man.render_description_section(&mut w)?;
    man.render_options_section(&mut w)?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = sub.get_name().to_uppercase();
        // "-h, --help" once, in the top OPTIONS, not again per subcommand.
        let sub_man = clap_mangen::Man::new(sub.clone().mut_arg("help", |a| a.hide(true)));
        for (section, render) in [
            (
                "SYNOPSIS",
                clap_mangen::Man::render_synopsis_section as Render,
            ),
            ("DESCRIPTION", clap_mangen::Man::render_description_section),
            ("OPTIONS", clap_mangen::Man::render_options_section),
        ] {
            let mut part = Vec::new();
            render(&sub_man, &mut part)?;
            // Each of the subcommand's sections becomes a subsection of one
            // section named after it; clap_mangen's per-call preamble (the
            // Aq string) is already in the page.
            if section == "SYNOPSIS" {
                // clap's usage line: value names (<OUT>) and repeats (...)
                // as --help shows them.
                writeln!(w, ".SH \"CUTF8 {name}\"")?;
                let usage = sub
                    .clone()
                    .bin_name(format!("cutf8 {}", sub.get_name()))
                    .render_usage();
                let usage = usage.to_string();
                let usage = usage.trim_start_matches("Usage: ");
                writeln!(w, "\\fB{}\\fR", roff_text(usage))?;
                continue;
            } else {
                writeln!(
                    w,
                    ".SS {}",
                    section[..1].to_string() + &section[1..].to_lowercase()
                )?;
            }
            for line in String::from_utf8_lossy(&part).lines() {
                if !(line.starts_with(".SH ") || line.contains(".ds Aq ")) {
                    writeln!(w, "{line}")?;
                }
            }
        }
        if sub.get_name() == "migrate" {
            // The longer story, from docs/migrate.man.txt (its title line
            // and synopsis block left out: the usage line above says it).
            writeln!(w, ".SS \"How migrate works\"")?;
            let text = include_str!("../../../docs/migrate.man.txt");
            for para in text.split("\n\n").skip(2) {
                if para.trim().is_empty() {
                    continue;
                }
                if para.starts_with('-') {
                    writeln!(w, ".PP\n.nf\n{}\n.fi", roff_text_lines(para))?;
                } else {
                    writeln!(w, ".PP\n{}", roff_text_lines(para))?;
                }
            }
        }
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, what) in EXIT_STATUS {
        writeln!(w, ".TP\n{code}\n{}", roff_text(what))?;
    }
    writeln!(w, ".SH EXAMPLES")?;
    for (example, what) in EXAMPLES {
        writeln!(
            w,
            ".TP\n\\fB{}\\fR\n{}",
            roff_text(example),
            roff_text(what)
        )?;
    }
    // What migrate trusts, from docs/security.man.txt (its title line left
    // out).
    writeln!(w, ".SH SECURITY")?;
    for para in include_str!("../../../docs/security.man.txt")
        .split("\n\n")
        .skip(1)
        .filter(|p| !p.trim().is_empty())
    {
        writeln!(w, ".PP\n{}", roff_text_lines(para))?;
    }
    writeln!(w, ".SH ENVIRONMENT")?;
    for (var, what) in ENVIRONMENT {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", roff_text(var), roff_text(what))?;
    }
    writeln!(w, ".SH \"SEE ALSO\"\n{}", roff_text(SEE_ALSO))?;
    man.render_version_section(&mut w)?;
    Ok(w)
}

/// [`roff_text`] for each line of `s`.
fn roff_text_lines(s: &str) -> String {
    s.lines().map(roff_text).collect::<Vec<_>>().join("\n")
}

type Render = fn(&clap_mangen::Man, &mut dyn Write) -> std::io::Result<()>;

/// Escape text for roff: backslashes and hyphens, and a leading dot or
/// quote that would start a request.
fn roff_text(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_rule_is_named_on_the_command_line_as_in_the_output() {
        assert_eq!(RuleArg::value_variants().len(), Rule::ALL.len());
        for rule in Rule::ALL {
            let parsed = RuleArg::from_str(rule.name(), false).expect("a rule's name parses");
            assert_eq!(parsed.0, rule);
        }
    }
}
