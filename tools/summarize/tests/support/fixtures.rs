//! The fixtures of summarize's tests (tests/fixtures) and the reading of them that several
//! test files share.

// Each includer uses a part of it.
#![allow(dead_code)]

use servbench::record::{Record, SummaryRecord};
use std::path::PathBuf;
use summarize::input;
use summarize::input::points::{self, Point};

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// Compares output with an expected file; `SUMMARIZE_UPDATE_EXPECTED=1` rewrites it.
pub fn snapshot(name: &str, actual: &str) {
    let path = fixture("expected").join(name);
    if std::env::var_os("SUMMARIZE_UPDATE_EXPECTED").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (SUMMARIZE_UPDATE_EXPECTED=1 writes it)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "{name} changed");
}

pub fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Points from the fixture's lines that pass `keep` (e.g. only `request` lines).
pub fn points_of(name: &str, keep: impl Fn(&str) -> bool) -> Vec<Point> {
    let text: String = read(name)
        .lines()
        .filter(|l| keep(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut inputs = input::Inputs::default();
    input::load_one(name, text.as_bytes(), true, None, &mut inputs).unwrap();
    points::build(&inputs, &["host".to_string()], None)
}

pub fn points(name: &str) -> Vec<Point> {
    points_of(name, |_| true)
}

pub fn is_kind(line: &str, kind: &str) -> bool {
    line.starts_with(&format!("{{\"kind\":\"{kind}\""))
}

pub fn summaries_in(name: &str) -> Vec<SummaryRecord> {
    read(name)
        .lines()
        .filter_map(|l| match Record::parse(l) {
            Ok(Record::Summary(s)) => Some(*s),
            _ => None,
        })
        .collect()
}

/// summarize in the fixtures directory (fixture names are relative paths), no stdin.
pub fn summarize(args: &[&str]) -> testkit::Run {
    testkit::run_in(&fixtures(), "summarize", args)
}
