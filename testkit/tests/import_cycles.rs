//! scripts/import-cycles.py, the layering gate `.ci/run` runs over every crate: run on small
//! source trees written here, it names the circles a reader would see (through a `use`, a doc
//! link, `super::` paths, whole top-level modules) and stays quiet where there are none.

use std::path::{Path, PathBuf};
use std::process::Command;

fn checker() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/import-cycles.py")
}

/// A crate's `src` with these files (path, text) in a fresh folder.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let p = dir.path().join("src").join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    dir
}

/// The checker's stdout lines (the `src` prefix cut) and its exit code.
fn check(dir: &Path, modules: bool) -> (Vec<String>, i32) {
    let src = dir.join("src");
    let mut cmd = Command::new("python3");
    cmd.arg(checker());
    if modules {
        cmd.arg("--modules");
    }
    let out = cmd.arg(&src).output().expect("run python3");
    let prefix = format!("{}: ", src.display());
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string())
        .collect();
    (lines, out.status.code().unwrap_or(-1))
}

#[test]
fn a_use_one_way_and_a_doc_link_back_is_a_circle() {
    let dir = tree(&[
        ("lib.rs", "pub mod high;\npub mod low;\n"),
        (
            "high.rs",
            "use crate::low::Part;\npub struct Whole(Part);\n",
        ),
        (
            "low.rs",
            "//! Used by [`crate::high::Whole`].\npub struct Part;\n",
        ),
    ]);
    assert_eq!(check(dir.path(), false), (vec!["high, low".to_string()], 1));
}

#[test]
fn super_paths_between_sibling_files_count() {
    let dir = tree(&[
        ("lib.rs", "pub mod ssh;\n"),
        ("ssh/mod.rs", "pub mod cert;\npub mod hosts;\n"),
        (
            "ssh/cert.rs",
            "fn f() { super::hosts::glob(); }\npub fn parse() {}\n",
        ),
        (
            "ssh/hosts.rs",
            "use super::cert::parse;\npub fn glob() {}\n",
        ),
    ]);
    assert_eq!(
        check(dir.path(), false),
        (vec!["ssh/cert, ssh/hosts".to_string()], 1)
    );
}

#[test]
fn two_folders_using_each_other_are_a_module_circle_even_when_no_two_files_are() {
    let dir = tree(&[
        ("lib.rs", "pub mod plan;\npub mod run;\n"),
        ("plan/mod.rs", "pub mod rules;\npub struct Plan;\n"),
        ("plan/rules.rs", "use crate::run::point::Point;\n"),
        ("run/mod.rs", "pub mod point;\n"),
        (
            "run/point.rs",
            "use crate::plan::Plan;\npub struct Point;\n",
        ),
    ]);
    assert_eq!(check(dir.path(), false), (vec![], 0), "files: none");
    assert_eq!(
        check(dir.path(), true),
        (vec!["modules plan, run".to_string()], 1)
    );
}

#[test]
fn test_code_is_left_out() {
    let dir = tree(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "pub struct A;\n#[cfg(test)]\nmod tests;\n"),
        // A test file of `a` using `b`, and code after `#[cfg(test)]` in `b` using `a`.
        ("a/tests.rs", "use crate::b::B;\n"),
        (
            "b.rs",
            "pub struct B;\n#[cfg(test)]\nmod t {\n    use crate::a::A;\n}\n",
        ),
    ]);
    assert_eq!(check(dir.path(), true), (vec![], 0));
}

#[test]
fn a_layered_crate_passes_both_checks() {
    let dir = tree(&[
        ("main.rs", "mod high;\nmod low;\nfn main() { high::go() }\n"),
        ("high.rs", "use crate::low;\npub fn go() { low::step() }\n"),
        (
            "low.rs",
            "//! Below `high` (named in plain words).\npub fn step() {}\n",
        ),
    ]);
    assert_eq!(check(dir.path(), true), (vec![], 0));
}
