//! Quality beside speed on the real vLLM (see vllm.rs): `loadgen --eval` runs and judges every
//! answer of the tiny random-weights model (its accuracy is a number, not a goal), two launches
//! of that model answer every request identically (`summarize --compare`'s greedy agreement
//! 100.0), and the same model with other random weights (make_tiny_hf.py --seed 1) does not.

mod real_vllm;

use real_vllm::*;
use testkit::run::in_the_schema;
use testkit::{free_port, setup_env};

fn example() -> String {
    format!(
        "{}/../tools/loadgen/examples/arith-12.jsonl",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Launches `model`, runs the example question set against it (one --seed), kills it; the
/// records' file.
fn eval_run(dir: &std::path::Path, name: &str, model: &str) -> String {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    let _leftovers = Leftovers(sub.join("server.jsonl"));
    let port = free_port();
    let (r, _) = launch_model(&sub, port, model, ENGINE_ARGS);
    let url = format!("http://127.0.0.1:{port}");
    let out = testkit::call("loadgen")
        .env("PATH", path_env())
        .url(&url)
        .args(["-c", "4", "--eval", &example(), "--max-tokens", "12"])
        .args(["--seed", "1", "--label", &format!("run={name}")])
        .run_ok();
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
    let text = out.out();
    for (i, line) in text.lines().enumerate() {
        in_the_schema(line, &format!("{name}:{}", i + 1));
    }
    let path = sub.join("records.jsonl");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `summarize --compare base new --format csv`: the greedy agreement row's cells.
fn agreement(base: &str, new: &str) -> Vec<String> {
    let out = tool("summarize")
        .args(["--compare", base, new, "--format", "csv"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("point,matched,identical_pct"));
    assert!(lines.next().is_some(), "no agreement table: {text}");
    lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect()
}

#[test]
fn eval_runs_and_two_launches_agree_while_other_weights_do_not() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let a = eval_run(dir.path(), "a", &model());
    let summary: serde_json::Value = std::fs::read_to_string(&a)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "summary")
        .unwrap();
    let e = &summary["eval"];
    // Every question asked once and every answer judged: right or wrong, a number.
    assert_eq!(u(&e["judged"]) + u(&e["not_judged"]), 12, "{summary}");
    assert_eq!(u(&e["judged"]), 12, "{summary}");
    let accuracy = e["accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&accuracy), "{summary}");

    let again = eval_run(dir.path(), "again", &model());
    let same = agreement(&a, &again);
    assert_eq!(same[1], "12", "{same:?}");
    assert_eq!(same[2].parse::<f64>().unwrap(), 100.0, "{same:?}");

    let other = eval_run(
        dir.path(),
        "other",
        &setup_env("SERVBENCH_TINY_HF_SEED1", "vllm"),
    );
    let differ = agreement(&a, &other);
    eprintln!("accuracy {accuracy}; agreement with itself {same:?}, with other weights {differ:?}");
    let identical: f64 = differ[2].parse().unwrap();
    assert_eq!(differ[1], "12", "{differ:?}");
    assert!(
        identical < 100.0,
        "other weights, the same answers: {differ:?}"
    );
}
