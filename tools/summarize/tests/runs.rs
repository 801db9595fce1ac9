//! Notes that survive real workflows: the shorter-output anomaly across runs labelled apart and
//! at a point cut short, rows whose concurrency was never in flight, speculative gains that
//! collapse with load, and run-to-run spread. Each on a fixture where it fires and one where it
//! stays silent (tests/fixtures, written by examples/gen_fixtures.rs).

use std::path::PathBuf;
use summarize::input;
use summarize::input::points::{self, Point};
use summarize::notes::note::Facts;
use summarize::notes::{runs, sweep};

fn points(name: &str) -> Vec<Point> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut inputs = input::Inputs::default();
    input::load_one(name, text.as_bytes(), true, None, &mut inputs).unwrap();
    points::build(&inputs, &["host".to_string()], None)
}

fn run(note: fn(&Facts) -> Vec<String>, fixture: &str) -> Vec<String> {
    let ps = points(fixture);
    note(&Facts::of_points(&ps))
}

#[test]
fn shorter_output_slower_across_runs_labelled_apart() {
    let fired = run(
        sweep::shorter_output_slower,
        "shorter_output_slower_runs.jsonl",
    );
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].starts_with("at C=32, out=32 (run=round2) gives")
            && fired[0].contains("the longer out=64 (run=round1)"),
        "{fired:?}"
    );
    // Two runs with different outputs and nothing wrong: shorter outputs are slower only by
    // prefill's share, which the note expects.
    assert!(run(sweep::shorter_output_slower, "output_runs_clean.jsonl").is_empty());
}

#[test]
fn shorter_output_slower_at_a_point_that_ended_early() {
    let fired = run(
        sweep::shorter_output_slower,
        "shorter_output_slower_partial.jsonl",
    );
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].contains("out=32 (partial) gives"), "{fired:?}");
    assert!(run(sweep::shorter_output_slower, "errors_or_partial.jsonl").is_empty());
}

#[test]
fn a_row_whose_concurrency_was_never_in_flight_is_named() {
    let fired = run(runs::too_few_requests, "too_few_requests.jsonl");
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].contains("C=64 (32 requests)") && !fired[0].contains("C=16"),
        "{fired:?}"
    );
    assert!(run(runs::too_few_requests, "loadgen_sim.jsonl").is_empty());
}

#[test]
fn speculative_gain_collapsing_with_load_is_noted_and_a_steady_one_is_not() {
    let fired = run(runs::spec_gain_collapses, "spec_gain_collapses.jsonl");
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].contains("2.91 tokens per chunk at C=1 but 1.00 at C=32"),
        "{fired:?}"
    );
    // Three tokens per chunk at every load: a gain that holds.
    assert!(run(runs::spec_gain_collapses, "tokens_per_chunk.jsonl").is_empty());
}

#[test]
fn batched_chunks_from_a_server_that_reports_no_speculation_are_no_collapsing_gain() {
    // The collapsing fixture's chunks, from a server whose view has no speculative figures:
    // its tokens came several to a chunk because the stream was batched, not speculated.
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec_gain_collapses.jsonl");
    let server = r#""server":{"engine":"sim","scrapes":12,"gauge_samples":10,"preemptions":0,"#;
    let text: String = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| match l.starts_with(r#"{"kind":"summary""#) {
            true => format!(
                "{},{}}}}}\n",
                &l[..l.len() - 1],
                &server[..server.len() - 1]
            ),
            false => format!("{l}\n"),
        })
        .collect();
    let mut inputs = input::Inputs::default();
    input::load_one("batched.jsonl", text.as_bytes(), true, None, &mut inputs).unwrap();
    let ps = points::build(&inputs, &["host".to_string()], None);
    assert!(
        ps.iter()
            .all(|p| p.repeats.iter().all(|r| r.server.is_some()))
    );
    let fired = runs::spec_gain_collapses(&Facts::of_points(&ps));
    assert!(fired.is_empty(), "{fired:?}");
}

#[test]
fn runs_labelled_apart_get_a_mean_and_interval_per_point() {
    let fired = run(runs::across_runs, "across_runs.jsonl");
    assert_eq!(fired.len(), 1, "{fired:?}");
    let note = &fired[0];
    assert!(note.starts_with("run to run (run=1,2,3)"), "{note}");
    assert!(
        note.contains("C=1 195 ± ") && note.contains("(3 runs)") && note.contains("C=4 778 ± "),
        "{note}"
    );
    // Repeats inside one run already get their interval in the table; no run label, no note.
    assert!(run(runs::across_runs, "repeats.jsonl").is_empty());
    assert!(run(runs::across_runs, "shorter_output_slower_runs.jsonl").is_empty());
}
