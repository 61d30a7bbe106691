//! The document rules `cutf8 check` knows, their levels, and what a run
//! was asked to do with them.

use crate::convert::DEFAULT_BUFFER_SIZE;

/// One document rule of docs/format.md (or a malformation of its format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// The file does not begin with the magic number (default: warning).
    MissingMagic,
    /// U+0000 outside the magic number (default: error).
    Nul,
    /// The last character is not U+000A (default: warning).
    NoFinalNewline,
    /// U+000D, CARRIAGE RETURN (default: warning).
    CarriageReturn,
    /// U+0009, TAB (default: warning).
    Tab,
    /// A C0 control other than TAB, LF and CR (default: warning).
    Control,
    /// U+2028, LINE SEPARATOR (default: warning).
    LineSeparator,
    /// U+2029, PARAGRAPH SEPARATOR (default: warning).
    ParagraphSeparator,
    /// A continuation byte where no sequence is open (default: error).
    StrayByte,
    /// A lead byte without all its continuation bytes (default: error).
    TruncatedSequence,
    /// A reserved FE/FF unit: valid, but no UTF-8 form (default: warning).
    ReservedUnit,
    /// A code point above U+10FFFF: valid, but no UTF-8 form (default: warning).
    BeyondUnicode,
}

impl Rule {
    /// Every rule, in the order of the table in the module doc.
    pub const ALL: [Rule; 12] = [
        Rule::MissingMagic,
        Rule::Nul,
        Rule::NoFinalNewline,
        Rule::CarriageReturn,
        Rule::Tab,
        Rule::Control,
        Rule::LineSeparator,
        Rule::ParagraphSeparator,
        Rule::StrayByte,
        Rule::TruncatedSequence,
        Rule::ReservedUnit,
        Rule::BeyondUnicode,
    ];

    /// The name used in output and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Rule::MissingMagic => "missing-magic",
            Rule::Nul => "nul",
            Rule::NoFinalNewline => "no-final-newline",
            Rule::CarriageReturn => "carriage-return",
            Rule::Tab => "tab",
            Rule::Control => "control",
            Rule::LineSeparator => "line-separator",
            Rule::ParagraphSeparator => "paragraph-separator",
            Rule::StrayByte => "stray-byte",
            Rule::TruncatedSequence => "truncated-sequence",
            Rule::ReservedUnit => "reserved-unit",
            Rule::BeyondUnicode => "beyond-unicode",
        }
    }

    /// What the rule finds, in a line (the command line's help for it).
    pub fn description(self) -> &'static str {
        match self {
            Rule::MissingMagic => {
                "The file does not begin with the magic number (default: warning)"
            }
            Rule::Nul => "U+0000 outside the magic number (default: error)",
            Rule::NoFinalNewline => "The last character is not U+000A (default: warning)",
            Rule::CarriageReturn => "U+000D, CARRIAGE RETURN (default: warning)",
            Rule::Tab => "U+0009, TAB (default: warning)",
            Rule::Control => "A C0 control other than TAB, LF and CR (default: warning)",
            Rule::LineSeparator => "U+2028, LINE SEPARATOR (default: warning)",
            Rule::ParagraphSeparator => "U+2029, PARAGRAPH SEPARATOR (default: warning)",
            Rule::StrayByte => "A continuation byte where no sequence is open (default: error)",
            Rule::TruncatedSequence => {
                "A lead byte without all its continuation bytes (default: error)"
            }
            Rule::ReservedUnit => {
                "A reserved FE/FF unit: valid, but no UTF-8 form (default: warning)"
            }
            Rule::BeyondUnicode => {
                "A code point above U+10FFFF: valid, but no UTF-8 form (default: warning)"
            }
        }
    }

    /// MUST rules and malformed bytes are errors, SHOULD rules warnings.
    pub fn default_level(self) -> Level {
        match self {
            Rule::Nul | Rule::StrayByte | Rule::TruncatedSequence => Level::Error,
            _ => Level::Warning,
        }
    }

    /// Position in [`Rule::ALL`] (the declaration order, as tested).
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// How a rule's findings count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Not reported.
    Allow,
    /// Reported; does not change the exit status.
    Warning,
    /// Reported; exit status 1.
    Error,
}

/// What `cutf8 check` was asked to do.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    levels: [Level; Rule::ALL.len()],
    /// Warnings printed per rule per file (default 1; 0 = no limit).
    /// Errors are always printed, every one.
    pub max_per_rule: u64,
    /// Input chunk size (default [`DEFAULT_BUFFER_SIZE`]).
    pub buffer_size: usize,
    /// Print findings and notes as JSON lines (`--format json`).
    pub json: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            levels: Rule::ALL.map(Rule::default_level),
            max_per_rule: 1,
            buffer_size: DEFAULT_BUFFER_SIZE,
            json: false,
        }
    }
}

impl CheckOptions {
    /// Set one rule's level.
    pub fn set(&mut self, rule: Rule, level: Level) {
        self.levels[rule.index()] = level;
    }

    /// Turn every warning into an error (`--deny-warnings`).
    pub fn deny_warnings(&mut self) {
        for l in &mut self.levels {
            if *l == Level::Warning {
                *l = Level::Error;
            }
        }
    }

    pub fn level(&self, rule: Rule) -> Level {
        self.levels[rule.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_the_position_in_all() {
        for (k, rule) in Rule::ALL.iter().enumerate() {
            assert_eq!(rule.index(), k);
        }
    }

    #[test]
    fn deny_warnings_leaves_allowed_rules_alone() {
        let mut o = CheckOptions::default();
        o.set(Rule::Tab, Level::Allow);
        o.deny_warnings();
        assert_eq!(o.level(Rule::Tab), Level::Allow);
        assert_eq!(o.level(Rule::CarriageReturn), Level::Error);
    }
}
