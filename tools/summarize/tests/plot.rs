//! `--plot`, the pictures people look at: for a load sweep, throughput against load, TTFT
//! against throughput, ITL and TPOT against load, and output tokens/s per GPU against tokens/s
//! per user with the points' Pareto front; busbw against message size for collectives; a grid
//! line at each labelled tick only. The SVGs of two real runs are held byte for byte by golden
//! files, which the README shows.

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use summarize::plot::panel::pareto_front;
use testkit::ok;

/// The SVG summarize draws of `inputs`.
fn svg_of(inputs: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plot.svg");
    let mut args = inputs.to_vec();
    args.extend(["--plot", path.to_str().unwrap()]);
    ok(&summarize(&args));
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn the_plots_of_real_runs_are_held_by_their_golden_svgs() {
    // A TP sweep of Qwen3-32B on srv-sim modelling H100s, and collbench's tcp allreduces.
    for (input, golden) in [
        ("tp_sweep_sim.jsonl", "tp_sweep_sim.svg"),
        ("collbench_tcp.jsonl", "collbench_tcp.svg"),
    ] {
        let svg = svg_of(&[input]);
        // The same records draw the same bytes.
        assert_eq!(svg, svg_of(&[input]), "{input}: two drawings differ");
        snapshot(golden, &svg);
    }
}

#[test]
fn the_fourth_panel_is_throughput_per_gpu_against_tokens_per_user_with_its_pareto_front() {
    let svg = svg_of(&["tp_sweep_sim.jsonl"]);
    for text in [
        "Throughput per GPU against tokens/s per user",
        "tokens/s per user (1000 / TPOT p50)",
        "output tokens/s per GPU",
        "Pareto front",
    ] {
        assert!(svg.contains(text), "no '{text}'");
    }
    // Each point labelled by its run (the tp it ran at) and its load.
    for tp in [1, 2, 4] {
        for c in [1, 4, 16, 64] {
            let label = format!(">\ntp={tp} C={c}\n</text>");
            assert!(svg.contains(&label), "no label {label}");
        }
    }
}

#[test]
fn the_pareto_front_keeps_the_points_nothing_beats_on_both_axes() {
    let points = [
        (1.0, 5.0),
        (2.0, 4.0),
        (1.5, 3.0), // below (2, 4) on both
        (3.0, 1.0),
        (3.0, 0.5), // below (3, 1)
        (2.0, 4.0), // the same point twice: once on the front
        (0.5, 5.0), // as high as (1, 5) at a lower x
        (f64::NAN, 9.0),
    ];
    assert_eq!(pareto_front(&points), [(1.0, 5.0), (2.0, 4.0), (3.0, 1.0)]);
    assert!(pareto_front(&[]).is_empty());
}

/// The minor grid plotters draws between ticks (at opacity 0.1: 469 lines over
/// `loadgen_sim.jsonl`'s three panels, packed into grey towards each power of ten on a log
/// axis) is gone; the log axes tick at powers of two, where loads and sizes fall.
#[test]
fn log_axes_have_a_grid_line_at_each_labelled_tick_only() {
    let svg = svg_of(&["loadgen_sim.jsonl"]);
    assert!(!svg.contains(r#"opacity="0.1""#), "a minor grid line");
    for tick in [1, 2, 4, 8, 16] {
        assert!(
            svg.contains(&format!(">\n{tick}\n</text>")),
            "no tick {tick}"
        );
    }
    let svg = svg_of(&["collbench_tcp.jsonl"]);
    assert!(!svg.contains(r#"opacity="0.1""#), "a minor grid line");
    assert!(svg.contains(">\n2M\n</text>"), "sizes tick in binary units");
}
