//! man/cutf8fs.1 documents every `-o` option the daemon accepts. The
//! candidates are every option-shaped string literal in `src/` (an option
//! the parser matches is spelled there), each asked of the daemon's own
//! parser, bare and with a value; each one it does not call unknown must
//! be named in the page's MOUNT OPTIONS section (in a `.B`/`.BR`/`.BI`
//! line or a `.TP` tag), including those accepted and ignored.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// String literals in `text` that look like option names (`kernel_cache`,
/// `x-`).
fn option_like_literals(text: &str, out: &mut BTreeSet<String>) {
    for (i, lit) in text.split('"').enumerate() {
        let shaped = i % 2 == 1
            && (1..=24).contains(&lit.len())
            && lit.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && lit
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if shaped {
            out.insert(lit.to_string());
        }
    }
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether the daemon's option parser knows `name` (bare or `name=1`).
fn accepted(name: &str) -> bool {
    [name.to_string(), format!("{name}=1")].iter().any(|o| {
        match cutf8fs::fs::options::parse(&[o]) {
            Ok(_) => true,
            Err(e) => !e.contains("unknown option"),
        }
    })
}

/// The words the MOUNT OPTIONS section names in bold or as a tag.
fn documented_words() -> BTreeSet<String> {
    let man = fs::read_to_string(Path::new(ROOT).join("man/cutf8fs.1"))
        .unwrap()
        .replace("\\-", "-");
    let start = man
        .find("\n.SH MOUNT OPTIONS")
        .expect("man/cutf8fs.1 has a MOUNT OPTIONS section");
    let section = &man[start + 1..];
    let section = &section[..section[1..].find("\n.SH ").map_or(section.len(), |e| e + 1)];
    let mut words = BTreeSet::new();
    let mut tag_next = false;
    for l in section.lines() {
        if tag_next || l.starts_with(".B") {
            for w in l.split([' ', '=', '"', ',', '(', ')']) {
                words.insert(w.to_string());
            }
        }
        tag_next = l.starts_with(".TP");
    }
    words
}

#[test]
fn every_accepted_mount_option_is_in_the_man_page() {
    let mut files = Vec::new();
    rs_files(&Path::new(ROOT).join("src"), &mut files);
    let mut candidates = BTreeSet::new();
    for f in &files {
        option_like_literals(&fs::read_to_string(f).unwrap(), &mut candidates);
    }
    for (form, ..) in cutf8fs::fs::options::OPTIONS {
        candidates.insert(form.split('=').next().unwrap().to_string());
    }
    let found: Vec<&String> = candidates.iter().filter(|c| accepted(c)).collect();
    // The scan found the parser's names (a test that cannot fail otherwise).
    for known in [
        "allow_other",
        "ro",
        "index_cache",
        "x-",
        "nofail",
        "relatime",
    ] {
        assert!(
            found.iter().any(|a| *a == known),
            "the option scan missed {known}: found {found:?}"
        );
    }
    assert!(!accepted("no_such_option_anywhere"));
    let words = documented_words();
    let missing: Vec<&&String> = found
        .iter()
        .filter(|a| !words.contains(a.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "man/cutf8fs.1 (MOUNT OPTIONS) does not name these options the daemon accepts: \
         {missing:?}; document them (or stop accepting them)"
    );
}

// ---- every option in --help and in the man page ----

#[test]
fn every_mount_option_is_in_help_and_in_the_man_page() {
    let out = std::process::Command::new(crate::support::mount::BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/cutf8fs.1"))
        .unwrap()
        .replace("\\-", "-");
    for (form, default, ..) in cutf8fs::fs::options::OPTIONS {
        let key = form.split('=').next().unwrap();
        assert!(help.contains(form), "--help lists {form}:\n{help}");
        if !default.is_empty() {
            assert!(
                help.contains(&format!("[{default}]")),
                "--help gives {form}'s default"
            );
        }
        let documented = man.lines().any(|l| {
            (l.starts_with(".B") || l.starts_with(".TP"))
                && l.split([' ', '=', '"']).any(|w| w == key)
        });
        assert!(documented, "man/cutf8fs.1 documents {key}");
    }
    for (opt, want) in [
        ("newfiles=utf8", "allowed: auto, raw"),
        ("threads=0", "from 1 to 256"),
        ("nwefiles=raw", "did you mean 'newfiles'"),
    ] {
        let out = std::process::Command::new(crate::support::mount::BIN)
            .args(["-o", opt, "/nonexistent-b", "/nonexistent-m"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt}: {err}");
        assert!(err.contains(want), "{opt}: {err}");
    }
}
