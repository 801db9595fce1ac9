//! summarize on recorded inputs (tests/fixtures, written by `examples/gen_fixtures.rs` through
//! the shared record types and statistics): statistics agree with the shared implementation,
//! merges are exact, every note fires on its fixture and stays silent on a clean one. Compare
//! is in compare.rs, formats and input in output.rs, real tools' records in real_records.rs.

#[path = "support/synth.rs"]
mod synth;

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use servbench::presets::MeasuredCurve;
use servbench::record::{CollRecord, Labels, Record};
use servbench::stats::Hist;
use summarize::input;
use summarize::input::points::{self, Point};
use summarize::notes::note::Facts;
use summarize::notes::server as server_notes;
use summarize::notes::sweep;
use summarize::notes::{self, NOTES};
use summarize::roofline::Roofline;
use synth::{TS, coll_lines};
use testkit::ok;
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
    let text = ok(&summarize(&[
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
        let f = p.figure(summarize::input::metrics::Metric::TOK_S).unwrap();
        let values: Vec<f64> = p.repeats.iter().map(|s| s.output_tok_s).collect();
        assert!((f.mean - values.iter().sum::<f64>() / 3.0).abs() < 1e-9);
        let hw = f.half_width.expect("three repeats have an interval");
        assert!(hw > 0.0 && hw < f.mean * 0.1, "{hw} of {}", f.mean);
    }
    let text = ok(&summarize(&["repeats.jsonl"]));
    assert!(text.contains("(mean ± 95% CI over repeats)"), "{text}");
    assert!(text.contains("repeats=3"), "{text}");
    assert!(text.contains(" ± "), "{text}");
}

#[test]
fn each_note_fires_on_its_fixture_and_stays_silent_on_a_clean_run() {
    let clean = points("clean.jsonl");
    assert_eq!(
        notes::all(&Facts::of_points(&clean)),
        Vec::<String>::new(),
        "a clean sweep gets no notes"
    );
    let facts = Facts::of_points(&clean);
    for note in NOTES {
        let name = note.name;
        assert!(
            (note.says)(&facts).is_empty(),
            "{name} fired on clean.jsonl"
        );
        if NEEDS_MORE_THAN_POINTS.contains(&name) {
            continue;
        }
        let ps = points(&format!("{name}.jsonl"));
        let fired = (note.says)(&Facts::of_points(&ps));
        assert!(!fired.is_empty(), "{name} did not fire on {name}.jsonl");
        // Notes name the points involved.
        assert!(fired.iter().all(|n| n.contains("C=")), "{name}: {fired:?}");
    }
}

/// The notes that read more than a sweep's points, so no points-only fixture shows them; each
/// is tested where its records are given: the servers' hosts (tests/host.rs), a self-report
/// launch (loadgen tests/self_report.rs), the energy counters (tests/energy.rs), a roofline
/// (tests/layout.rs, speculative.rs, advice.rs, verdicts.rs, compute_budget.rs, engine_steps.rs,
/// this file), the engine's step log (tests/engine_steps.rs).
const NEEDS_MORE_THAN_POINTS: [&str; 12] = [
    "preflight",
    "best_groups",
    "self_report_unavailable",
    "energy_source",
    "measured_bandwidth",
    "over_limit",
    "single_stream",
    "expert_parallel",
    "utilization",
    "step_budget",
    "engine_step",
    "decode_budget",
];

#[test]
fn every_note_is_in_the_list_once_with_a_fixture_or_named_as_needing_more_than_points() {
    let names: Vec<&str> = NOTES.iter().map(|n| n.name).collect();
    for (i, name) in names.iter().enumerate() {
        assert!(!names[..i].contains(name), "{name} twice in NOTES");
        let fixture = fixture(&format!("{name}.jsonl"));
        let more = NEEDS_MORE_THAN_POINTS.contains(name);
        assert!(
            fixture.exists() != more,
            "{name}: a note has a fixture {name}.jsonl where it fires, or needs more than points (not both)"
        );
    }
    for name in NEEDS_MORE_THAN_POINTS {
        assert!(names.contains(&name), "{name} is not a note");
    }
}

#[test]
fn the_servers_view_gets_columns_and_no_note_when_healthy() {
    let ps = points("clean_server.jsonl");
    assert_eq!(
        notes::all(&Facts::of_points(&ps)),
        Vec::<String>::new(),
        "a healthy server"
    );
    let text = ok(&summarize(&["clean_server.jsonl"]));
    for header in ["KV max %", "preempt", "spec accept", "GPU util %"] {
        assert!(text.contains(header), "{header} missing:\n{text}");
    }
    // No server figures, no server columns.
    let text = ok(&summarize(&["clean.jsonl"]));
    assert!(!text.contains("KV max"), "{text}");
}

#[test]
fn server_notes_say_what_they_saw() {
    let ps = points("spec_acceptance_falls.jsonl");
    let text = notes::all(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("0.75 at C=1 to 0.57 at C=8"), "{text}");
    assert!(text.contains("each stream decodes"), "{text}");
    let ps = points("kv_full_preempting.jsonl");
    let text = server_notes::kv_full_preempting(&Facts::of_points(&ps)).join(" ");
    assert!(
        text.contains(
            "KV cache full at C=16 (max 99%, 32 preemptions) where output throughput flattens"
        ),
        "{text}"
    );
    assert!(!text.contains("C=8 "), "{text}");
    let ps = points("gpu_idle_single_stream.jsonl");
    let text = notes::all(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("mean 20% over 2 GPU(s)"), "{text}");
    let ps = points("token_counts_disagree.jsonl");
    let text = notes::all(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("output: server 1344, client 1280"), "{text}");
}

#[test]
fn notes_say_what_they_saw() {
    let ps = points("shorter_output_slower.jsonl");
    let text = sweep::shorter_output_slower(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("at C=32, out=32 gives"), "{text}");
    assert!(text.contains("longer out=64"), "{text}");
    let ps = points("saturation_knee.jsonl");
    let text = sweep::saturation_knee(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("saturation knee at C=8"), "{text}");
    let ps = points("errors_or_partial.jsonl");
    let text = sweep::errors_or_partial(&Facts::of_points(&ps)).join(" ");
    assert!(text.contains("3 of 40: 3 timeout"), "{text}");
    assert!(text.contains("cut short (partial): C=8"), "{text}");
    let ps = points("cancelled.jsonl");
    let text = sweep::cancelled(&Facts::of_points(&ps)).join(" ");
    assert!(
        text.contains("C=1 (5 of 40, abandoned after 60ms)"),
        "{text}"
    );
    // Not failures: the errors note stays silent on them.
    assert!(sweep::errors_or_partial(&Facts::of_points(&ps)).is_empty());
}

#[test]
fn single_stream_far_below_the_roofline_is_noted_and_a_healthy_one_is_not() {
    let roof = Roofline::parse("llama-3.1-8b@h200").unwrap();
    let slow = points("single_stream_slow.jsonl");
    let none = input::Inputs::default();
    let fired = notes::roofline::single_stream_note(&Facts::new(&none, &slow, Some(&roof), None));
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].contains("C=1") && fired[0].contains("llama-3.1-8b on h200"));
    let clean = points("clean.jsonl");
    let facts = Facts::new(&none, &clean, Some(&roof), None);
    assert!(notes::roofline::single_stream_note(&facts).is_empty());
    let text = ok(&summarize(&[
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
    let out = ok(&summarize(&[
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
