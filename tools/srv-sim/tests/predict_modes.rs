//! `srv-sim --predict --ramp` and `--predict --find-max`: loadgen's searching modes predicted
//! in virtual time, judged by the rules loadgen judges a served run by (shared's). Against
//! srv-sim served on the same card under the real loadgen, a predicted find-max lands on the
//! served answer within its step and a predicted ramp breaks at the served level.
//!
//! The engine: Llama-3.1-8B on an A100 with a 20 ms step overhead (a ~28 ms step) and at most
//! 8 requests running, so a ninth in flight waits for a slot a whole request long (~470 ms)
//! while up to 8 get their first token within two steps (~56 ms): an SLO of 150 ms on TTFT has
//! a wide margin either side, and a busy machine's late steps do not move the answer.

mod common;
use common::*;
use serde_json::Value;
use testkit::{check, holds_in_one_of_three, json_lines, of_kind};

const ENGINE: &[&str] = &[
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "a100-80g",
    "--step-overhead",
    "20ms",
    "--max-running-requests",
    "8",
];

const FIND_MAX: &[&str] = &[
    "--find-max",
    "concurrency",
    "-c",
    "4",
    "--input-len",
    "16",
    "--max-tokens",
    "16",
    "-n",
    "36",
    "--slo",
    "ttft_ms=150",
    "--slo-attainment",
    "0.95",
    "--find-max-tries",
    "1",
    "--seed",
    "5",
];

const RAMP: &[&str] = &[
    "--ramp",
    "-c",
    "1",
    "--max-tokens",
    "8",
    "-n",
    "16",
    "--slo",
    "ttft_ms=150",
    "--slo-attainment",
    "0.95",
    "--seed",
    "5",
];

/// The one record of `kind` in a run's records.
fn the<'a>(recs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(recs, kind);
    assert_eq!(found.len(), 1, "{kind}: {recs:?}");
    found[0]
}

fn predicted(args: &[&str]) -> Vec<Value> {
    let out = predict_on(ENGINE, args);
    assert!(
        out.status.success(),
        "srv-sim --predict {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

#[test]
fn a_predicted_find_max_lands_on_the_served_answer_within_its_step() {
    let recs = predicted(FIND_MAX);
    let p = the(&recs, "search");
    assert_eq!(p["labels"]["source"], "predicted", "{p}");
    assert_eq!(p["stopped_by"], "converged", "{p}");
    // The engine's cliff: 8 running at most.
    assert_eq!(
        (p["max_passing"].as_f64(), p["first_failing"].as_f64()),
        (Some(8.0), Some(9.0)),
        "{p}"
    );
    // Each probe is a point written as loadgen writes it, in virtual time.
    let probes = p["probes"].as_array().unwrap();
    assert_eq!(of_kind(&recs, "summary").len(), probes.len(), "{p}");
    let (plo, phi) = (
        p["max_passing"].as_f64().unwrap(),
        p["first_failing"].as_f64().unwrap(),
    );
    holds_in_one_of_three("predicted find-max against served", || {
        let sim = start(&[ENGINE, &["--realtime"]].concat());
        let served = loadgen_against(&sim, FIND_MAX);
        let s = the(&served, "search");
        let (lo, hi) = (
            s["max_passing"].as_f64().unwrap_or(0.0),
            s["first_failing"].as_f64().unwrap_or(0.0),
        );
        // Within the step: each bracket reaches the other's.
        check("served passing above the predicted failing", lo, lo < phi)?;
        check("served failing below the predicted passing", hi, hi > plo)?;
        Ok(format!("served {lo}..{hi}, predicted {plo}..{phi}"))
    });
}

#[test]
fn a_predicted_ramp_breaks_at_the_served_level() {
    let ramp = [RAMP, &["--input-len", "16"]].concat();
    let recs = predicted(&ramp);
    let p = the(&recs, "ramp");
    let last = |r: &Value| r["levels"].as_array().unwrap().last().unwrap()["concurrency"].as_u64();
    // Doubling from 1 until 16 in flight, where 8 wait for a slot and miss the SLO.
    assert_eq!(
        (p["stopped_by"].as_str(), last(p)),
        (Some("slo"), Some(16)),
        "{p}"
    );
    assert_eq!(p["best_concurrency"], 8, "{p}");
    assert_eq!(p["labels"]["source"], "predicted", "{p}");
    holds_in_one_of_three("predicted ramp against served", || {
        let sim = start(&[ENGINE, &["--realtime"]].concat());
        let served = loadgen_against(&sim, &ramp);
        let s = the(&served, "ramp");
        let said = format!(
            "served {} at {:?}, best {}",
            s["stopped_by"],
            last(s),
            s["best_concurrency"]
        );
        if s["stopped_by"] != p["stopped_by"] || last(s) != last(p) {
            return Err(said);
        }
        Ok(said)
    });
}

/// A ramp or a search over the load of one prompt and output length each, and the refusals the
/// shared rules make, are loadgen's: `--find-max` without an `--slo` is refused in one line.
#[test]
fn predict_takes_loadgens_ramp_and_find_max_rules() {
    let out = predict_on(ENGINE, &["--find-max", "rate", "-r", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--find-max needs the objectives to meet"),
        "{err}"
    );
    let recs = predicted(&[RAMP, &["--input-len", "16,32"]].concat());
    assert_eq!(
        of_kind(&recs, "ramp").len(),
        2,
        "one ramp per prompt length"
    );
}
