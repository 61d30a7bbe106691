//! The documentation that ships: every relative link in the README and
//! docs/ resolves inside the repository, the man pages render without
//! warnings and cite nothing outside it, `scripts/install.sh` puts them
//! where man(1) finds them, and cutf8(1) is a real page.

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn every_relative_link_in_readme_and_docs_resolves_inside_the_repository() {
    let mut pages = vec![std::path::PathBuf::from(ROOT).join("README.md")];
    for e in std::fs::read_dir(format!("{ROOT}/docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let root = std::fs::canonicalize(ROOT).unwrap();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap().split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let resolved = page.parent().unwrap().join(target);
            let real = std::fs::canonicalize(&resolved)
                .unwrap_or_else(|_| panic!("{}: link {target} does not resolve", page.display()));
            assert!(
                real.starts_with(&root),
                "{}: {target} leaves the repository",
                page.display()
            );
        }
        assert!(
            !text.contains("SPEC.md"),
            "{} cites SPEC.md, which does not ship",
            page.display()
        );
    }
    for man in ["man/cutf8.1", "man/cutf8fs.1"] {
        let text = std::fs::read_to_string(format!("{ROOT}/{man}")).unwrap();
        assert!(
            !text.contains("SPEC"),
            "{man} cites SPEC, which does not ship"
        );
    }
}

#[test]
fn man_pages_render_without_warnings() {
    // The program pages, and the two short ones the package ships for its
    // helpers (cutf8-lessopen, mount.fuse.cutf8fs).
    for (page, least) in [
        ("man/cutf8.1", 2000),
        ("man/cutf8fs.1", 2000),
        ("man/cutf8-lessopen.1", 500),
        ("man/mount.fuse.cutf8fs.8", 500),
    ] {
        let out = std::process::Command::new("man")
            .args(["-l", "--warnings"])
            .arg(format!("{ROOT}/{page}"))
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "")
            .output()
            .expect("man(1) is installed");
        assert!(out.status.success(), "{page}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.is_empty(), "{page} renders with warnings:\n{err}");
        assert!(out.stdout.len() > least, "{page} renders to text");
    }
}

#[test]
fn the_install_command_puts_man_pages_where_man_finds_them() {
    let prefix = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(crate::support::cli::BIN)
        .parent()
        .unwrap();
    let out = std::process::Command::new(format!("{ROOT}/scripts/install.sh"))
        .arg(prefix.path())
        .env("CUTF8_BIN_DIR", bin)
        .output()
        .unwrap();
    crate::support::run::succeeded(&out, "command failed");
    for page in ["cutf8fs", "cutf8"] {
        let out = std::process::Command::new("man")
            .arg("-M")
            .arg(prefix.path().join("share/man"))
            .arg(page)
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap();
        assert!(out.status.success(), "man {page}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("SYNOPSIS"),
            "man {page}"
        );
    }
    let installed = prefix.path().join("bin/cutf8");
    let out = std::process::Command::new(installed)
        .arg("-V")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(prefix.path().join("share/doc/cutf8fs/format.md").is_file());
    // The bash completions load and complete.
    for b in ["cutf8", "cutf8fs"] {
        let script = prefix
            .path()
            .join("share/bash-completion/completions")
            .join(b);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("source '{}' && complete -p {b}", script.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{b}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(b), "{out:?}");
    }
}

#[test]
fn cutf8_man_page_is_a_real_page() {
    let page = std::fs::read_to_string(format!("{ROOT}/man/cutf8.1")).unwrap();
    assert!(!page.contains("CUTF8 HELP"), "no empty help section");
    assert!(
        page.contains("\\fBcutf8 decode [OPTIONS] [FILE]...\\fR"),
        "synopsis with ..."
    );
    assert!(page.contains("OUT"), "-o names its value");
    assert!(
        page.contains("How migrate works"),
        "migrate section from docs/migrate.man.txt"
    );
    assert!(
        page.contains("include\\-vcs"),
        "migrate documents --include-vcs"
    );
}
