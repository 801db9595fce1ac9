//! Structured output on the real vLLM (see vllm.rs): `loadgen --response-format` reaches vLLM's
//! guided decoding (its grammar shapes every answer: the tiny random-weights model, free, never
//! starts with `{"`), and every answer is judged, valid or not, with its reason. Whitespace is
//! off (xgrammar's `disable_any_whitespace`), or the model pads `{` with it to the cut.

mod real_vllm;

use real_vllm::*;
use serde_json::Value;
use testkit::run::in_the_schema;
use testkit::{free_port, json_lines, of_kind};

fn schema() -> String {
    format!(
        "{}/../tools/loadgen/examples/person.schema.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Launches the model with `engine_args`, sends 8 structured requests, kills it: the records.
fn structured_run(dir: &std::path::Path, engine_args: &[&str], max_tokens: &str) -> Vec<Value> {
    let _leftovers = Leftovers(dir.join("server.jsonl"));
    let port = free_port();
    let (r, _) = launch_model(dir, port, &model(), engine_args);
    let out = testkit::call("loadgen")
        .env("PATH", path_env())
        .url(&format!("http://127.0.0.1:{port}"))
        .args(["-c", "4", "-n", "8", "--response-format", &schema()])
        .args(["--max-tokens", max_tokens, "--seed", "1"])
        .run_ok();
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
    let text = out.out();
    for (i, line) in text.lines().enumerate() {
        in_the_schema(line, &format!("loadgen stdout:{}", i + 1));
    }
    json_lines(text.as_bytes())
}

fn text(r: &Value) -> String {
    r["output_pieces"]
        .as_array()
        .expect("a structured answer records its text")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn guided_json_shapes_every_answer_and_every_answer_is_judged() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let no_space = [
        ENGINE_ARGS,
        &[
            "--structured-outputs-config",
            r#"{"backend": "xgrammar", "disable_any_whitespace": true}"#,
        ],
    ]
    .concat();
    let records = structured_run(dir.path(), &no_space, "24");
    let summary = of_kind(&records, "summary").remove(0);
    let v = &summary["json_validity"];
    assert_eq!((u(&v["judged"]), u(&v["not_judged"])), (8, 0), "{summary}");
    for r in of_kind(&records, "request") {
        let t = text(r);
        // The grammar's mark: an object with no space, its age (where whole) within 18..99.
        assert!(t.starts_with("{\""), "{t:?}");
        if let Some(age) = t.split(r#""age":"#).nth(1) {
            let n: String = age.chars().take_while(char::is_ascii_digit).collect();
            if !n.is_empty() && age[n.len()..].starts_with(',') {
                assert!((18..=99).contains(&n.parse::<u32>().unwrap()), "{t:?}");
            }
        }
        let j = &r["json"];
        let valid = j["valid"].as_bool().expect("judged");
        assert_eq!(valid, j.get("error").is_none(), "{r}");
        assert_eq!(
            valid,
            serde_json::from_str::<Value>(t.trim()).is_ok(),
            "{t:?}"
        );
    }
}
