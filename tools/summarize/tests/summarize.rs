//! summarize on recorded inputs (tests/fixtures, written by `examples/gen_fixtures.rs` through
//! the shared record types and statistics): statistics agree with the shared implementation,
//! merges are exact, every note fires on its fixture and stays silent on a clean one, compare
//! tells a real change from noise, output formats are stable, plots are drawn.

#[path = "support/synth.rs"]
mod synth;

use servbench::jsonl::Source;
use servbench::presets::MeasuredCurve;
use servbench::record::{CollRecord, Labels, Record, SummaryRecord};
use servbench::stats::Hist;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use summarize::efficiency::{self, Roofline};
use summarize::input;
use summarize::points::{self, Point};
use summarize::{Config, compare, notes, server_notes};
use synth::{TS, coll_lines};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Points from the fixture's lines that pass `keep` (e.g. only `request` lines).
fn points_of(name: &str, keep: impl Fn(&str) -> bool) -> Vec<Point> {
    let text: String = read(name)
        .lines()
        .filter(|l| keep(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut inputs = input::Inputs::default();
    input::load_one(name, text.as_bytes(), true, None, &mut inputs).unwrap();
    points::build(&inputs, &["host".to_string()], None)
}

fn points(name: &str) -> Vec<Point> {
    points_of(name, |_| true)
}

fn is_kind(line: &str, kind: &str) -> bool {
    line.starts_with(&format!("{{\"kind\":\"{kind}\""))
}

fn summaries_in(name: &str) -> Vec<SummaryRecord> {
    read(name)
        .lines()
        .filter_map(|l| match Record::parse(l) {
            Ok(Record::Summary(s)) => Some(*s),
            _ => None,
        })
        .collect()
}

fn summarize(args: &[&str]) -> std::process::Output {
    testkit::cmd("summarize")
        .args(args)
        .current_dir(fixture(""))
        .stdin(Stdio::null())
        .output()
        .expect("run summarize")
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "summarize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn statistics_from_requests_equal_the_summaries_the_shared_code_wrote() {
    statistics_from_requests_equal_the_summaries_in("clean.jsonl");
}

/// `loadgen_sim.jsonl` is real loadgen output (`loadgen --url SIM -c 1,4,16 -n 32
/// --max-tokens 32 --input-len 128 --label engine=srv-sim` against `srv-sim --model
/// llama-3.1-8b --hardware h100`, tests/fixtures/record-real.sh): summarize must recompute
/// exactly what loadgen summarized.
#[test]
fn statistics_from_loadgen_requests_equal_loadgens_summaries() {
    statistics_from_requests_equal_the_summaries_in("loadgen_sim.jsonl");
    let text = stdout(&summarize(&[
        "loadgen_sim.jsonl",
        "--roofline",
        "llama-3.1-8b@h100",
    ]));
    assert!(text.contains("engine=srv-sim"), "{text}");
    assert!(
        !text.contains("note:"),
        "a healthy simulated sweep gets no notes: {text}"
    );
}

fn statistics_from_requests_equal_the_summaries_in(name: &str) {
    let from_requests = points_of(name, |l| is_kind(l, "request"));
    let written = summaries_in(name);
    assert_eq!(from_requests.len(), written.len());
    assert!(from_requests.iter().all(|p| p.from_requests));
    for (p, s) in from_requests.iter().zip(&written) {
        let ours = &p.repeats[0];
        assert_eq!(ours.point.concurrency, s.point.concurrency);
        assert_eq!(ours.ttft_ms, s.ttft_ms);
        assert_eq!(ours.itl_ms, s.itl_ms);
        assert_eq!(ours.tpot_ms, s.tpot_ms);
        assert_eq!(ours.e2e_ms, s.e2e_ms);
        assert_eq!(ours.send_lag_ms, s.send_lag_ms);
        assert_eq!(
            (ours.requests, ours.ok, ours.output_tokens),
            (s.requests, s.ok, s.output_tokens)
        );
        assert_eq!(ours.output_tok_s, s.output_tok_s);
        assert_eq!(ours.steady_output_tok_s, s.steady_output_tok_s);
        assert_eq!(ours.tokens_per_chunk, s.tokens_per_chunk);
    }
}

#[test]
fn requests_and_their_summary_in_one_stream_are_not_counted_twice() {
    let both = points("clean.jsonl");
    let only_requests = points_of("clean.jsonl", |l| is_kind(l, "request"));
    assert_eq!(both.len(), only_requests.len());
    for (a, b) in both.iter().zip(&only_requests) {
        assert_eq!(a.repeats[0].requests, b.repeats[0].requests);
        assert_eq!(a.repeats[0].ttft_ms, b.repeats[0].ttft_ms);
    }
}

#[test]
fn merged_host_summaries_equal_the_histograms_of_the_union_of_requests() {
    let two_hosts = |keep: &dyn Fn(&str) -> bool| -> Vec<Point> {
        let text: String = ["host_a.jsonl", "host_b.jsonl"]
            .iter()
            .flat_map(|f| read(f).lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|l| keep(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let mut inputs = input::Inputs::default();
        input::load_one("hosts", text.as_bytes(), true, None, &mut inputs).unwrap();
        points::build(&inputs, &["host".to_string()], None)
    };
    let merged = two_hosts(&|l| is_kind(l, "summary"));
    let union = two_hosts(&|l| is_kind(l, "request"));
    assert_eq!(merged.len(), 4);
    assert_eq!(merged.len(), union.len());
    for (m, u) in merged.iter().zip(&union) {
        assert_eq!(m.merged_sources, 2, "two hosts merged into one point");
        assert!(!m.labels.contains_key("host"));
        let (ms, us) = (&m.repeats[0], &u.repeats[0]);
        assert_eq!(ms.requests, 80);
        assert_eq!(
            (ms.requests, ms.ok, ms.output_tokens),
            (us.requests, us.ok, us.output_tokens)
        );
        for name in ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "send_lag_ms"] {
            assert_eq!(
                Hist::decode(&ms.hist[name]).unwrap(),
                Hist::decode(&us.hist[name]).unwrap(),
                "{name}"
            );
        }
        assert_eq!(ms.ttft_ms, us.ttft_ms);
        assert_eq!(ms.itl_ms, us.itl_ms);
    }
    // Keeping the host label apart gives one point per host instead.
    let text = read("host_a.jsonl") + &read("host_b.jsonl");
    let mut inputs = input::Inputs::default();
    input::load_one("hosts", text.as_bytes(), true, None, &mut inputs).unwrap();
    assert_eq!(points::build(&inputs, &[], None).len(), 8);
}

#[test]
fn repeats_give_a_mean_and_a_confidence_interval() {
    let ps = points("repeats.jsonl");
    assert_eq!(ps.len(), 4);
    for p in &ps {
        assert_eq!(p.repeats.len(), 3);
        let f = p.figure(summarize::metrics::Metric::TOK_S).unwrap();
        let values: Vec<f64> = p.repeats.iter().map(|s| s.output_tok_s).collect();
        assert!((f.mean - values.iter().sum::<f64>() / 3.0).abs() < 1e-9);
        let hw = f.half_width.expect("three repeats have an interval");
        assert!(hw > 0.0 && hw < f.mean * 0.1, "{hw} of {}", f.mean);
    }
    let text = stdout(&summarize(&["repeats.jsonl"]));
    assert!(text.contains("(mean ± 95% CI over repeats)"), "{text}");
    assert!(text.contains("repeats=3"), "{text}");
    assert!(text.contains(" ± "), "{text}");
}

#[test]
fn each_note_fires_on_its_fixture_and_stays_silent_on_a_clean_run() {
    let clean = points("clean.jsonl");
    assert_eq!(
        notes::all(&clean),
        Vec::<String>::new(),
        "a clean sweep gets no notes"
    );
    let keys = points::Keys::of(&clean);
    for (name, note) in notes::by_name() {
        assert!(
            note(&clean, &keys).is_empty(),
            "{name} fired on clean.jsonl"
        );
        let ps = points(&format!("{name}.jsonl"));
        let fired = note(&ps, &points::Keys::of(&ps));
        assert!(!fired.is_empty(), "{name} did not fire on {name}.jsonl");
        // Notes name the points involved.
        assert!(fired.iter().all(|n| n.contains("C=")), "{name}: {fired:?}");
    }
}

#[test]
fn the_servers_view_gets_columns_and_no_note_when_healthy() {
    let ps = points("clean_server.jsonl");
    assert_eq!(notes::all(&ps), Vec::<String>::new(), "a healthy server");
    let text = stdout(&summarize(&["clean_server.jsonl"]));
    for header in ["KV max %", "preempt", "spec accept", "GPU util %"] {
        assert!(text.contains(header), "{header} missing:\n{text}");
    }
    // No server figures, no server columns.
    let text = stdout(&summarize(&["clean.jsonl"]));
    assert!(!text.contains("KV max"), "{text}");
}

#[test]
fn server_notes_say_what_they_saw() {
    let ps = points("spec_acceptance_falls.jsonl");
    let text = notes::all(&ps).join(" ");
    assert!(text.contains("0.75 at C=1 to 0.57 at C=8"), "{text}");
    assert!(text.contains("each stream decodes"), "{text}");
    let ps = points("kv_full_preempting.jsonl");
    let text = server_notes::kv_full_preempting(&ps, &points::Keys::of(&ps)).join(" ");
    assert!(
        text.contains(
            "KV cache full at C=16 (max 99%, 32 preemptions) where output throughput flattens"
        ),
        "{text}"
    );
    assert!(!text.contains("C=8 "), "{text}");
    let ps = points("gpu_idle_single_stream.jsonl");
    let text = notes::all(&ps).join(" ");
    assert!(text.contains("mean 20% over 2 GPU(s)"), "{text}");
    let ps = points("token_counts_disagree.jsonl");
    let text = notes::all(&ps).join(" ");
    assert!(text.contains("output: server 1344, client 1280"), "{text}");
}

#[test]
fn notes_say_what_they_saw() {
    let ps = points("shorter_output_slower.jsonl");
    let text = notes::shorter_output_slower(&ps, &points::Keys::of(&ps)).join(" ");
    assert!(text.contains("at C=32, out=32 gives"), "{text}");
    assert!(text.contains("longer out=64"), "{text}");
    let ps = points("saturation_knee.jsonl");
    let text = notes::saturation_knee(&ps, &points::Keys::of(&ps)).join(" ");
    assert!(text.contains("saturation knee at C=8"), "{text}");
    let ps = points("errors_or_partial.jsonl");
    let text = notes::errors_or_partial(&ps, &points::Keys::of(&ps)).join(" ");
    assert!(text.contains("3 of 40: 3 timeout"), "{text}");
    assert!(text.contains("cut short (partial): C=8"), "{text}");
}

#[test]
fn single_stream_far_below_the_roofline_is_noted_and_a_healthy_one_is_not() {
    let roof = Roofline::parse("llama-3.1-8b@h200").unwrap();
    let slow = points("single_stream_slow.jsonl");
    let fired = efficiency::single_stream_note(&slow, &roof);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].contains("C=1") && fired[0].contains("llama-3.1-8b on h200"));
    assert!(efficiency::single_stream_note(&points("clean.jsonl"), &roof).is_empty());
    let text = stdout(&summarize(&[
        "single_stream_slow.jsonl",
        "--roofline",
        "llama-3.1-8b@h200",
    ]));
    assert!(
        text.contains("% of mem") && text.contains("single stream at C=1"),
        "{text}"
    );
}

#[test]
fn decode_budget_puts_allreduce_time_beside_tpot() {
    let out = stdout(&summarize(&[
        "coll.jsonl",
        "clean.jsonl",
        "--roofline",
        "llama-3.1-8b@h200",
        "--tp",
        "2",
    ]));
    assert!(out.contains("allreduce is"), "{out}");
    assert!(out.contains("not communication-bound"), "{out}");
    assert!(out.contains("% link"), "{out}");
}

#[test]
fn interpolates_between_measured_sizes() {
    let coll: Vec<CollRecord> = coll_lines(&Labels::new(), 2, 1 << 20, 25.0, 12.0)
        .iter()
        .filter_map(|l| match Record::parse(l) {
            Ok(Record::Coll(c)) => Some(c),
            _ => None,
        })
        .collect();
    assert!(coll.iter().all(|c| c.ts == TS));
    // The mean, as collbench decode reads it: a step pays the sum of its allreduces.
    let curve = MeasuredCurve::from_records(&coll, 2, false).unwrap();
    assert_eq!(curve.ranks, 2);
    assert!((curve.us_at(8.0) - coll[0].time_us.mean).abs() < 1e-9);
    let mid = curve.us_at(3000.0);
    let lo = coll.iter().find(|c| c.bytes == 2048).unwrap().time_us.mean;
    let hi = coll.iter().find(|c| c.bytes == 8192).unwrap().time_us.mean;
    assert!(lo < mid && mid < hi, "{lo} {mid} {hi}");
}

#[test]
fn compare_flags_a_20_percent_change_and_ignores_noise() {
    let base = points("compare_base.jsonl");
    let faster = points("compare_faster.jsonl");
    let rerun = points("compare_rerun.jsonl");
    for m in compare::DEFAULT_METRICS {
        for (b, n) in base.iter().zip(&faster) {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Better, "{} {c:?}", m.name());
        }
        for (b, n) in base.iter().zip(&rerun) {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Noise, "{} {c:?}", m.name());
        }
    }
    let text = stdout(&summarize(&[
        "--compare",
        "compare_base.jsonl",
        "compare_faster.jsonl",
        "--format",
        "csv",
    ]));
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(rows.iter().all(|r| r.contains("1.20x better")), "{text}");
    let text = stdout(&summarize(&[
        "--compare",
        "compare_base.jsonl",
        "compare_rerun.jsonl",
    ]));
    assert!(
        !text.contains("better") || text.contains("0 point(s) better"),
        "{text}"
    );
    assert!(text.contains("4 within noise"), "{text}");
}

#[test]
fn compare_by_label_matches_points_across_its_values() {
    let text = stdout(&summarize(&[
        "engines.jsonl",
        "--compare-by",
        "engine=vllm",
    ]));
    assert!(text.contains("base=engine=vllm"), "{text}");
    assert!(text.contains("engine=sglang"), "{text}");
    assert!(text.contains("better"), "{text}");
    let bad = summarize(&["clean.jsonl", "--compare-by", "engine"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("summarize: error: --compare-by engine"));
}

/// Compares output with an expected file; `SUMMARIZE_UPDATE_EXPECTED=1` rewrites it.
fn snapshot(name: &str, actual: &str) {
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

#[test]
fn markdown_and_csv_output_are_stable() {
    snapshot(
        "clean.md",
        &stdout(&summarize(&["clean.jsonl", "--format", "md"])),
    );
    snapshot(
        "throughput_falls.txt",
        &stdout(&summarize(&["throughput_falls.jsonl"])),
    );
    snapshot(
        "repeats.csv",
        &stdout(&summarize(&["repeats.jsonl", "--format", "csv"])),
    );
    snapshot(
        "coll.tsv",
        &stdout(&summarize(&["coll.jsonl", "--format", "tsv"])),
    );
    snapshot(
        "compare.md",
        &stdout(&summarize(&[
            "--compare",
            "compare_base.jsonl",
            "compare_faster.jsonl",
            "--format",
            "md",
        ])),
    );
    snapshot(
        "pipeline.json",
        &stdout(&summarize(&["pipeline.jsonl", "--format", "json"])),
    );
}

#[test]
fn columns_and_groups_are_chosen_by_flags() {
    let text = stdout(&summarize(&[
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
        stdout(&out);
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
    let text = stdout(&summarize(&["saturation_knee.jsonl", "--plot", "-"]));
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
    let text = stdout(&out);
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
    // A v2 summary whose `point` changed shape: not readable as a v1 summary.
    std::fs::write(
        &newer,
        "{\"kind\":\"summary\",\"v\":2,\"ts\":\"t\",\"labels\":{},\"point\":\"renamed\"}\n",
    )
    .unwrap();
    let out = summarize(&["clean.jsonl", newer.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("v2 is newer"), "{err}");
    assert!(
        err.contains("ignored 1 record(s)") && err.contains("1 summary v2"),
        "{err}"
    );
    assert!(stdout(&out).contains("# load points"));
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
    let text = stdout(&out);
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
        format: summarize::table::Format::Md,
        ..Config::default()
    };
    let mut out = Vec::new();
    summarize::run(&config, &mut out).unwrap();
    let bin = Command::new(testkit::bin("summarize"))
        .args([fixture("clean.jsonl").to_str().unwrap(), "--format", "md"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), stdout(&bin));
}

#[test]
fn lookalike_points_from_different_inputs_are_merged_with_a_warning() {
    let out = summarize(&["throughput_falls.jsonl", "shorter_output_slower.jsonl"]);
    stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 point(s) appear with the same labels in several inputs"),
        "{err}"
    );
    // Host files differ by their host label: merged on purpose, no warning.
    let out = summarize(&["host_a.jsonl", "host_b.jsonl"]);
    stdout(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("same labels"));
}

#[test]
fn open_loop_rate_sweeps_are_tabulated_by_rate() {
    let text = stdout(&summarize(&["rate_sweep.jsonl", "--format", "csv"]));
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("engine,model,in,out,rate,req_s,tok_s"),
        "{header}"
    );
    assert!(!header.split(',').any(|c| c == "conc"), "{header}");
    assert_eq!(text.lines().count(), 5);
    let ps = points("rate_sweep.jsonl");
    assert_eq!(notes::all(&ps), Vec::<String>::new());
    assert_eq!(notes::series(&ps).len(), 1, "one rate series");
}

#[test]
fn by_groups_rows_into_blocks() {
    let text = stdout(&summarize(&[
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

#[test]
fn real_launch_and_kill_records_become_status_tables() {
    let text = stdout(&summarize(&["launch_kill.jsonl"]));
    assert!(
        text.contains("# servers") && text.contains("llama-3.1-8b"),
        "{text}"
    );
    assert!(text.contains("# kills") && text.contains("TERM"), "{text}");
    let kill_row = text.lines().last().unwrap();
    assert!(kill_row.ends_with("ok"), "{text}");
}

/// Real collbench output: `collbench -np 2 -b 8 -e 4M -f 4` (tcp) and `collbench decode --model
/// llama-3.1-8b --tp 2 --batch 1,8,32 --hardware h100` (coll branch 449913d).
#[test]
fn real_collbench_records_become_the_collectives_and_decode_tables() {
    let text = stdout(&summarize(&["collbench_tcp.jsonl", "--hardware", "h100"]));
    assert!(
        text.contains("# collectives: link=NVLink 4 via NVSwitch (HGX 8-GPU): nvswitch 370 GB/s"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("allreduce")).count(),
        10,
        "{text}"
    );
    assert!(text.contains("every result checked OK"), "{text}");
    let out = summarize(&["collbench_decode.jsonl"]);
    let text = stdout(&out);
    assert!(text.contains("# decode allreduce budget"), "{text}");
    assert_eq!(text.matches("note: batch ").count(), 3, "{text}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ignored"));
}

/// Real `loadgen --ramp -c 1 --max-concurrency 64 -n 32 --max-tokens 16 --input-len 32
/// --no-requests` against `srv-sim --ttft 5ms --itl 1ms --max-running-requests 8`.
#[test]
fn a_real_ramp_shows_its_levels_its_outcome_and_the_knee() {
    let out = summarize(&["loadgen_ramp.jsonl"]);
    let text = stdout(&out);
    assert!(
        text.contains("# ramps") && text.contains("saturated"),
        "{text}"
    );
    assert!(text.contains("note: ramp stopped: output"), "{text}");
    assert!(text.contains("saturation knee at C=8"), "{text}");
    // loadgen's best level and summarize's knee are the same point.
    let ramp_row = text
        .lines()
        .skip_while(|l| !l.starts_with("# ramps"))
        .nth(2)
        .unwrap_or_default();
    let cells: Vec<&str> = ramp_row.split_whitespace().collect();
    assert_eq!(cells.get(5), Some(&"8"), "best C in: {ramp_row}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ignored"));
}

/// Real runs: `loadgen -c 1,4 -n 100 --max-tokens 16 --input-len 32 --no-requests` against
/// `srv-sim --ttft 10ms --itl 2ms` (base, rerun; `--repeat 3` for repeats) and against
/// `srv-sim --ttft 8.333ms --itl 1.667ms` (faster), on a busy 2-core machine.
#[test]
fn compare_on_real_runs_finds_the_faster_server_and_calls_a_rerun_noise() {
    let base = points("loadgen_base.jsonl");
    let faster = points("loadgen_faster.jsonl");
    let rerun = points("loadgen_rerun.jsonl");
    for (b, n) in base.iter().zip(&faster) {
        for m in [
            summarize::metrics::Metric::TTFT_P50,
            summarize::metrics::Metric::TPOT_P50,
        ] {
            let c = compare::change(m, b, n).unwrap();
            assert_eq!(c.verdict, compare::Verdict::Better, "{} {c:?}", m.name());
            assert!((0.80..0.87).contains(&c.ratio), "{} {c:?}", m.name());
        }
    }
    for (b, n) in base.iter().zip(&rerun) {
        for m in compare::DEFAULT_METRICS {
            let c = compare::change(m, b, n).unwrap();
            assert!(
                matches!(
                    c.verdict,
                    compare::Verdict::Noise | compare::Verdict::Unknown
                ),
                "a rerun is not a change: {} {c:?}",
                m.name()
            );
        }
    }
    // 100 requests cannot bound a p99 (a p50 they can): no noise estimate, so no claim.
    let run = &base[0].repeats[0];
    assert_eq!(run.ok, 100);
    assert_eq!(
        summarize::metrics::Metric::TTFT_P99.single_run_noise(run),
        None
    );
    assert!(
        summarize::metrics::Metric::TTFT_P50
            .single_run_noise(run)
            .is_some()
    );
    let repeats = points("loadgen_repeats.jsonl");
    assert!(repeats.iter().all(|p| p.repeats.len() == 3));
    let text = stdout(&summarize(&["loadgen_repeats.jsonl"]));
    assert!(text.contains(" ± "), "{text}");
}

#[test]
fn compare_shows_what_changed_in_the_servers_environment_above_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let server = |driver: &str, flags: &[&str]| {
        let mut argv = vec!["vllm", "serve", "m", "--port", "8000"];
        argv.extend_from_slice(flags);
        serde_json::json!({
            "kind": "server", "v": 1, "ts": TS, "labels": {}, "engine": "vllm", "model": "m",
            "host": "gpu1", "pid": 7, "pgid": 7, "start_ticks": 1, "port": 8000,
            "url": "http://127.0.0.1:8000", "command": argv.join(" "), "log": "/tmp/l",
            "ready_s": 30.0, "argv": argv,
            "env": {"engine_version": "0.11.0", "gpu_model": "NVIDIA H100 80GB HBM3",
                    "gpu_count": 8, "driver_version": driver, "cuda_version": "12.4",
                    "kernel": "6.1.0", "cpu_model": "AMD EPYC 9654", "hostname": "gpu1"}
        })
        .to_string()
    };
    let write = |name: &str, server: String, fixture: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{server}\n{}", read(fixture))).unwrap();
        path.to_string_lossy().into_owned()
    };
    let base = write(
        "base.jsonl",
        server("550.54.15", &["--max-num-seqs", "256"]),
        "compare_base.jsonl",
    );
    let new = write(
        "new.jsonl",
        server("560.35.03", &["--max-num-seqs", "512", "--enforce-eager"]),
        "compare_faster.jsonl",
    );
    let text = stdout(&summarize(&["--compare", &base, &new]));
    let env_at = text.find("# environment differences").expect(&text);
    let cmp_at = text.find("# comparison").expect(&text);
    assert!(env_at < cmp_at, "{text}");
    let env = &text[env_at..cmp_at];
    assert!(
        env.contains("driver") && env.contains("550.54.15") && env.contains("560.35.03"),
        "{env}"
    );
    assert!(env.contains("--max-num-seqs 256"), "{env}");
    assert!(env.contains("--enforce-eager --max-num-seqs 512"), "{env}");
    assert!(
        !env.contains("CUDA") && !env.contains("--port"),
        "unchanged: {env}"
    );
    // Without server records there is no such table.
    let text = stdout(&summarize(&[
        "--compare",
        fixture("compare_base.jsonl").to_str().unwrap(),
        fixture("compare_faster.jsonl").to_str().unwrap(),
    ]));
    assert!(!text.contains("environment"), "{text}");
}
