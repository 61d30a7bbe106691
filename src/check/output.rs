//! How `cutf8 check` prints: findings, notes and the summary of a run.

use super::rules::{CheckOptions, Level, Rule};

/// One finding, printed as `file:line:col: level: message [rule]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    pub line: u64,
    pub column: u64,
    pub level: Level,
    pub rule: Rule,
    pub message: String,
}

impl Finding {
    /// The finding as one JSON object (`--format json`).
    pub fn json(&self) -> String {
        serde_json::json!({
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "level": if self.level == Level::Error { "error" } else { "warning" },
            "rule": self.rule.name(),
            "message": self.message,
        })
        .to_string()
    }
}

/// A note (not a finding) in the chosen output format.
pub(super) fn note(json: bool, file: &str, message: &str) -> String {
    if json {
        serde_json::json!({"file": file, "level": "note", "message": message}).to_string()
    } else {
        format!("{file}: note: {message}")
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let level = if self.level == Level::Error {
            "error"
        } else {
            "warning"
        };
        write!(
            f,
            "{}:{}:{}: {level}: {} [{}]",
            self.file,
            self.line,
            self.column,
            self.message,
            self.rule.name()
        )
    }
}

/// Totals over all files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckSummary {
    pub files: usize,
    pub errors: u64,
    pub warnings: u64,
    /// Files that could not be read (or were not checked: on a mount).
    pub unreadable: usize,
    /// Files skipped as binary (one note each).
    pub binary: usize,
    /// Scripts `cutf8 migrate` leaves raw on purpose, not checked (one
    /// note each; neither a warning nor an error).
    pub scripts: usize,
    /// Per rule (in [`Rule::ALL`] order): findings, and files with any.
    pub per_rule: [(u64, usize); Rule::ALL.len()],
    /// Whether any finding was held back (not printed).
    pub held_back: bool,
}

impl CheckSummary {
    /// One line per rule with findings (`tab: 1000 warnings in 3 files`),
    /// for the end of a run where findings were held back; none otherwise
    /// (every finding is on the screen then).
    pub fn rule_lines(&self, opts: &CheckOptions) -> Vec<String> {
        if !self.held_back {
            return Vec::new();
        }
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        Rule::ALL
            .iter()
            .filter(|r| self.per_rule[r.index()].0 > 0)
            .map(|&r| {
                let (n, files) = self.per_rule[r.index()];
                let what = if opts.level(r) == Level::Error {
                    "error"
                } else {
                    "warning"
                };
                format!(
                    "  {}: {} in {}",
                    r.name(),
                    plural(n, what),
                    plural(files as u64, "file")
                )
            })
            .collect()
    }
}

impl std::fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        write!(
            f,
            "checked {}: {}, {}",
            plural(self.files as u64, "file"),
            plural(self.errors, "error"),
            plural(self.warnings, "warning")
        )?;
        if self.binary > 0 {
            write!(
                f,
                ", {} skipped as binary",
                plural(self.binary as u64, "file")
            )?;
        }
        if self.scripts > 0 {
            write!(
                f,
                ", {} left raw as {} by cutf8 migrate",
                plural(self.scripts as u64, "file"),
                if self.scripts == 1 {
                    "a script"
                } else {
                    "scripts"
                }
            )?;
        }
        if self.unreadable > 0 {
            write!(f, ", {} unreadable", self.unreadable)?;
        }
        Ok(())
    }
}
