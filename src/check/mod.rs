//! `cutf8 check`: lint Corrected UTF-8 files against docs/format.md's document
//! rules, one finding per line in the form compilers use.
//!
//! A file is read in fixed-size chunks through the strict [`cutf8::Decoder`], which
//! reports every malformed unit and goes on after it; the decoded text is
//! scanned for the characters the rules name. Memory stays constant whatever
//! the file size. Positions are those of `cutf8 decode`: lines and columns
//! (in characters) from 1 in the text after the magic number, each malformed
//! unit counting as one character.
//!
//! The rules and their default levels ([`Rule::default_level`]):
//!
//! | rule | default | finding |
//! |---|---|---|
//! | `missing-magic` | warning | the file does not begin with the magic number |
//! | `nul` | error | U+0000 outside the magic number |
//! | `no-final-newline` | warning | the last character is not U+000A |
//! | `carriage-return` | warning | U+000D |
//! | `tab` | warning | U+0009 (a C0 control, but often wanted: its own rule) |
//! | `control` | warning | any other C0 control (U+0001–U+001F but TAB, LF, CR) |
//! | `line-separator` | warning | U+2028 |
//! | `paragraph-separator` | warning | U+2029 |
//! | `stray-byte` | error | a continuation byte where no sequence is open |
//! | `truncated-sequence` | error | a lead byte without all its continuation bytes |
//! | `reserved-unit` | warning | FE/FF and its continuation bytes: valid (reserved for future use), but without a standard UTF-8 form |
//! | `beyond-unicode` | warning | a code point above U+10FFFF: valid, but without a standard UTF-8 form |
//!
//! Built for whole archives: every error is printed, but a warning that
//! repeats in a file is printed for its first [`CheckOptions::max_per_rule`]
//! occurrences only (one by default); a note then says how many more there
//! were, and when any were held back the summary counts each rule's
//! findings over all files. An empty file has nothing to check and draws
//! no finding. A path on a cutf8fs mount is not checked: the mount shows
//! the view (UTF-8, no magic number), not what is stored; the message
//! names the file in BACKING instead (as `cutf8 migrate` does).
//!
//! The module knows nothing of argument parsing; the `cutf8` binary builds
//! [`CheckOptions`] and prints what [`run`] hands to its callbacks.

mod found;
mod output;
mod rules;
mod scan;

use crate::convert::{io_message, Input};
use crate::shown::display_path;
use cutf8::MIN_DST;

use found::expand;
pub use found::VCS_DIRS;
pub use output::{CheckSummary, Finding};
pub use rules::{CheckOptions, Level, Rule};
use scan::{FileCheck, Scanned};

/// Check `inputs` in order. Each printed line (finding or note) goes to
/// `out`; read errors go to `diag`.
pub fn run(
    opts: &CheckOptions,
    inputs: &[Input],
    out: &mut dyn FnMut(&str),
    diag: &mut dyn FnMut(&str),
) -> CheckSummary {
    let mut summary = CheckSummary::default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut named = Vec::new();
    for input in inputs {
        match on_mount(&mounts, input) {
            Some(why) => {
                diag(&why);
                summary.unreadable += 1;
            }
            None => named.push(input.clone()),
        }
    }
    let inputs = &expand(&named, diag, &mut summary.unreadable)[..];
    let mut input_buf = vec![0u8; opts.buffer_size.max(1)];
    let mut output_buf = vec![0u8; cutf8::max_view_len(input_buf.len()).max(MIN_DST)];
    for input in inputs {
        let name = input.name();
        let mut file = FileCheck::new(opts, name.clone(), out);
        let result = input
            .open()
            .and_then(|mut r| file.scan(&mut r, &mut input_buf, &mut output_buf));
        let counted = file.finish();
        summary.errors += counted.errors;
        summary.warnings += counted.warnings;
        summary.held_back |= counted.held_back;
        for (k, &n) in counted.per_rule.iter().enumerate() {
            if n > 0 {
                summary.per_rule[k].0 += n;
                summary.per_rule[k].1 += 1;
            }
        }
        match result {
            Ok(Scanned::Checked) => summary.files += 1,
            Ok(Scanned::Binary) => summary.binary += 1,
            Ok(Scanned::Script) => summary.scripts += 1,
            Err(e) => {
                diag(&format!("{name}: {}", io_message(&e)));
                summary.unreadable += 1;
            }
        }
    }
    summary
}

/// Why `input` is not checked when it is on a cutf8fs mount: the mount
/// shows the view, so every corrected file would lack its magic number.
fn on_mount(mounts: &str, input: &Input) -> Option<String> {
    let Input::Path(p) = input else {
        return None;
    };
    let real = std::fs::canonicalize(p).ok()?;
    let (mnt, source) = crate::mountinfo::cutf8fs_mount_of(mounts, &real)?;
    let shown = display_path(p);
    let stored = real
        .strip_prefix(&mnt)
        .ok()
        .filter(|_| source.starts_with('/'))
        .map(|rel| std::path::Path::new(&source).join(rel));
    let instead = match stored {
        Some(b) => format!("check {} instead", display_path(&b)),
        None => format!("check it in the mount's BACKING ({source}) instead"),
    };
    Some(format!(
        "{shown}: on a cutf8fs mount ({}), which shows files as UTF-8 without their \
         magic number, not as they are stored: not checked; {instead}",
        display_path(&mnt)
    ))
}
