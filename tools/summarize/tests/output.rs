//! summarize's output and input handling on recorded inputs (tests/fixtures): stable markdown and
//! csv, columns and groups by flag, plots, unknown and newer kinds, stdin and files, bad input
//! named by its place, the library and the binary agreeing.

#[path = "support/synth.rs"]
mod synth;

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use servbench::jsonl::Source;
use std::process::{Command, Stdio};
use summarize::input;
use summarize::input::points::{self};
use summarize::notes::note::Facts;
use summarize::{Config, notes};
use testkit::ok;

#[test]
fn markdown_and_csv_output_are_stable() {
    snapshot(
        "clean.md",
        &ok(&summarize(&["clean.jsonl", "--format", "md"])),
    );
    snapshot(
        "throughput_falls.txt",
        &ok(&summarize(&["throughput_falls.jsonl"])),
    );
    snapshot(
        "repeats.csv",
        &ok(&summarize(&["repeats.jsonl", "--format", "csv"])),
    );
    snapshot(
        "coll.tsv",
        &ok(&summarize(&["coll.jsonl", "--format", "tsv"])),
    );
    snapshot(
        "compare.md",
        &ok(&summarize(&[
            "--compare",
            "compare_base.jsonl",
            "compare_faster.jsonl",
            "--format",
            "md",
        ])),
    );
    snapshot(
        "pipeline.json",
        &ok(&summarize(&["pipeline.jsonl", "--format", "json"])),
    );
}

#[test]
fn columns_and_groups_are_chosen_by_flags() {
    let text = ok(&summarize(&[
        "shorter_output_slower.jsonl",
        "--cols",
        "out,conc,tok_s,ttft_p50,e2e_p99",
        "--format",
        "csv",
    ]));
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "engine,model,in,out,conc,tok_s,ttft_p50,e2e_p99"
    );
    assert_eq!(lines.count(), 2);
    // ("speed" became a column with trace replay: a name no column has.)
    let bad = summarize(&["clean.jsonl", "--cols", "warp_factor"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown column 'warp_factor'"));
}

#[test]
fn png_and_svg_plots_are_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("sweep.png");
    let svg = dir.path().join("sweep.svg");
    for path in [&png, &svg] {
        let out = summarize(&[
            "saturation_knee.jsonl",
            "coll.jsonl",
            "--plot",
            path.to_str().unwrap(),
        ]);
        ok(&out);
    }
    let png_bytes = std::fs::read(&png).unwrap();
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(png_bytes.len() > 20_000, "PNG of {} bytes", png_bytes.len());
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg"));
    for text in [
        "Output throughput against load",
        "TTFT against throughput",
        "Bus bandwidth against message size",
        "output tokens/s",
        "busbw (GB/s)",
    ] {
        assert!(svg_text.contains(text), "SVG lacks '{text}'");
    }
    assert!(svg_text.matches("<polyline").count() >= 6);
    // A terminal chart on stdout after the tables.
    let text = ok(&summarize(&["saturation_knee.jsonl", "--plot", "-"]));
    assert!(
        text.contains("# Output throughput against load") && text.contains('█'),
        "{text}"
    );
    let bad = summarize(&["clean.jsonl", "--plot", "out.gif"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn unknown_kinds_are_counted_and_other_kinds_tabulated() {
    let out = summarize(&["pipeline.jsonl"]);
    let text = ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ignored 1 record(s)") && err.contains("1 mystery"),
        "{err}"
    );
    assert!(
        text.contains("# servers") && text.contains("# kills") && text.contains("# load points")
    );
}

#[test]
fn a_newer_schema_it_cannot_read_is_counted_by_kind_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let newer = dir.path().join("newer.jsonl");
    // A v4 summary whose `point` changed shape: not readable as a v3 summary.
    std::fs::write(
        &newer,
        "{\"kind\":\"summary\",\"v\":4,\"ts\":\"t\",\"labels\":{},\"point\":\"renamed\"}\n",
    )
    .unwrap();
    let out = summarize(&["clean.jsonl", newer.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("v4 is newer"), "{err}");
    assert!(
        err.contains("ignored 1 record(s)") && err.contains("1 summary v4"),
        "{err}"
    );
    assert!(ok(&out).contains("# load points"));
}

#[test]
fn reads_stdin_and_files_together() {
    let mut child = testkit::cmd("summarize")
        .args([
            "-",
            "host_b.jsonl",
            "--merge-label",
            "none",
            "--format",
            "csv",
        ])
        .current_dir(fixture(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let data = read("host_a.jsonl");
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(data.as_bytes()).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    let text = ok(&out);
    // Each host's points apart: 8 rows plus the header.
    assert_eq!(text.lines().count(), 9, "{text}");
    assert!(text.contains("host-a") && text.contains("host-b"));
}

#[test]
fn bad_input_is_reported_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, read("clean.jsonl") + "{not json\n").unwrap();
    let p = path.to_str().unwrap();
    let lenient = summarize(&[p]);
    assert!(lenient.status.success());
    assert!(String::from_utf8_lossy(&lenient.stderr).contains("bad.jsonl:165"));
    let strict = summarize(&[p, "--strict"]);
    assert_eq!(strict.status.code(), Some(2));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(
        err.starts_with("summarize: error: ") && err.contains("bad.jsonl:165"),
        "{err}"
    );
    let missing = summarize(&["no-such-file.jsonl"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read no-such-file.jsonl"));
    let nothing = summarize(&[fixture("coll.jsonl").to_str().unwrap(), "--compare-by", "x"]);
    assert_eq!(nothing.status.code(), Some(2));
}

#[test]
fn library_run_writes_the_same_tables_as_the_binary() {
    let config = Config {
        sources: vec![Source::File(fixture("clean.jsonl"))],
        format: summarize::render::Format::Md,
        ..Config::default()
    };
    let mut out = Vec::new();
    summarize::run(&config, &mut out).unwrap();
    let bin = Command::new(testkit::bin("summarize"))
        .args([fixture("clean.jsonl").to_str().unwrap(), "--format", "md"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), ok(&bin));
}

#[test]
fn lookalike_points_from_different_inputs_are_merged_with_a_warning() {
    let out = summarize(&["throughput_falls.jsonl", "shorter_output_slower.jsonl"]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 point(s) appear with the same labels in several inputs"),
        "{err}"
    );
    // Host files differ by their host label: merged on purpose, no warning.
    let out = summarize(&["host_a.jsonl", "host_b.jsonl"]);
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("same labels"));
}

#[test]
fn open_loop_rate_sweeps_are_tabulated_by_rate() {
    let text = ok(&summarize(&["rate_sweep.jsonl", "--format", "csv"]));
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("engine,model,in,out,rate,req_s,tok_s"),
        "{header}"
    );
    assert!(!header.split(',').any(|c| c == "conc"), "{header}");
    assert_eq!(text.lines().count(), 5);
    let ps = points("rate_sweep.jsonl");
    assert_eq!(notes::all(&Facts::of_points(&ps)), Vec::<String>::new());
    assert_eq!(notes::words::series(&ps).len(), 1, "one rate series");
}

#[test]
fn by_groups_rows_into_blocks() {
    let text = ok(&summarize(&[
        "engines.jsonl",
        "--by",
        "engine",
        "--cols",
        "label:engine,conc,tok_s",
    ]));
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{text}");
    assert!(
        blocks[0].contains("sglang") && !blocks[0].contains("vllm"),
        "{text}"
    );
    assert!(blocks[1].contains("vllm"), "{text}");
}

#[test]
fn the_fast_path_and_the_shared_parser_agree() {
    // Re-serialized through a JSON value, keys come out sorted: `kind` is no longer first, so
    // every line takes the shared `Record::parse` path instead of the fast one.
    let reordered: String = read("lengths_missed.jsonl")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            format!("{v}\n")
        })
        .collect();
    assert!(!reordered.starts_with("{\"kind\""));
    let mut inputs = input::Inputs::default();
    input::load_one("reordered", reordered.as_bytes(), true, None, &mut inputs).unwrap();
    let slow = points::build(&inputs, &[], None);
    let fast = points("lengths_missed.jsonl");
    assert_eq!(slow.len(), fast.len());
    for (s, f) in slow.iter().zip(&fast) {
        let (mut a, mut b) = (s.repeats[0].clone(), f.repeats[0].clone());
        a.ts.clear();
        b.ts.clear();
        assert_eq!(a, b);
    }
}
