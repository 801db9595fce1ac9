//! `--response-format` against the real srv-sim, which answers a `json_schema` request with
//! JSON made from the schema, and a `--invalid-json-rate` share with broken JSON: the validity
//! rate follows srv-sim's share, each record carries its verdict, answers cut at max_tokens
//! are invalid, and a bad schema file is one error naming it before any request.

use servbench::record::{RequestRecord, SummaryRecord};
use testkit::run::in_the_schema;
use testkit::{loadgen, srv_sim, the_error_line};

/// The example schema shipped for the README.
fn example() -> String {
    format!("{}/examples/person.schema.json", env!("CARGO_MANIFEST_DIR"))
}

/// A run of `n` structured requests of at most `max` tokens against a srv-sim with
/// `--invalid-json-rate rate`.
fn run(rate: &str, (n, max): (&str, &str), extra: &[&str]) -> (SummaryRecord, Vec<RequestRecord>) {
    let (_sim, url) = srv_sim(&[
        "--ttft",
        "2ms",
        "--itl",
        "0ms",
        "--seed",
        "5",
        "--invalid-json-rate",
        rate,
    ]);
    let example = example();
    let mut args = vec![
        "--url",
        &url,
        "-c",
        "8",
        "-n",
        n,
        "--response-format",
        &example,
        "--max-tokens",
        max,
        "--seed",
        "2",
    ];
    args.extend_from_slice(extra);
    let out = loadgen(&args).ok();
    for (i, line) in out.out().lines().enumerate() {
        in_the_schema(line, &format!("loadgen stdout:{}", i + 1));
    }
    (out.one::<SummaryRecord>(), out.of::<RequestRecord>())
}

#[test]
fn a_thirty_percent_invalid_server_gives_seventy_percent_validity() {
    let (s, requests) = run("0.3", ("400", "64"), &[]);
    assert_eq!(
        s.workload.response_format.as_deref(),
        Some(example().as_str())
    );
    let v = s.json_validity.expect("the summary carries the validity");
    assert_eq!((v.judged, v.not_judged), (400, 0));
    let rate = v.accuracy.unwrap();
    assert!((0.65..=0.75).contains(&rate), "validity {rate}");
    let valid = requests
        .iter()
        .filter(|r| r.json.as_ref().unwrap().valid == Some(true))
        .count();
    assert_eq!(valid as u64, v.correct);
    for r in &requests {
        let j = r.json.as_ref().unwrap();
        let text = r
            .output_pieces
            .as_ref()
            .expect("the answer's text")
            .concat();
        let parsed = serde_json::from_str::<serde_json::Value>(text.trim());
        // srv-sim's broken answers are not JSON; its whole ones follow the schema.
        assert_eq!(j.valid == Some(true), parsed.is_ok(), "{r:?}");
        if j.valid == Some(false) {
            assert!(
                j.error.as_deref().unwrap().starts_with("not JSON: "),
                "{j:?}"
            );
        }
    }
}

#[test]
fn a_server_that_always_follows_the_schema_is_all_valid() {
    let (s, requests) = run("0", ("60", "64"), &["--no-stream"]);
    let v = s.json_validity.unwrap();
    assert_eq!((v.correct, v.judged, v.accuracy), (60, 60, Some(1.0)));
    assert!(
        requests
            .iter()
            .all(|r| r.json.as_ref().unwrap().error.is_none())
    );
}

#[test]
fn an_answer_cut_at_max_tokens_is_invalid_and_says_why() {
    // The example's JSON is longer than 4 tokens: srv-sim cuts it there, as vLLM does.
    let (s, requests) = run("0", ("8", "4"), &[]);
    let v = s.json_validity.unwrap();
    assert_eq!((v.correct, v.judged), (0, 8));
    for r in &requests {
        assert_eq!(r.output_tokens, 4, "{r:?}");
        let e = r.json.as_ref().unwrap().error.clone().unwrap();
        assert!(e.starts_with("not JSON: EOF"), "{e}");
    }
}

#[test]
fn a_bad_schema_file_is_one_error_naming_it_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("missing.json", None),
        ("not-json.json", Some("{\"type\": ")),
        ("bad-schema.json", Some("{\"type\": \"no-such-type\"}")),
    ];
    for (name, text) in cases {
        let path = dir.path().join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let path = path.to_str().unwrap();
        // Nothing listens at this port: the error must come before any request.
        let out = loadgen(&[
            "--url",
            "http://127.0.0.1:9",
            "-n",
            "1",
            "--response-format",
            path,
        ]);
        assert_eq!(out.code(), Some(2), "{}", out.err());
        let err = out.err();
        let line = the_error_line(&err);
        assert!(
            line.contains(path) && line.contains("--response-format"),
            "{line}"
        );
        assert!(out.out().is_empty(), "{}", out.out());
    }
}

#[test]
fn response_format_with_an_api_that_does_not_take_it_is_refused() {
    for api in ["responses", "messages", "embeddings"] {
        let out = loadgen(&[
            "--url",
            "http://127.0.0.1:9",
            "-n",
            "1",
            "--api",
            api,
            "--response-format",
            &example(),
        ]);
        assert_eq!(out.code(), Some(2), "{}", out.err());
        let err = out.err();
        let line = the_error_line(&err);
        assert!(
            line.contains(&format!("--response-format with --api {api}")),
            "{line}"
        );
    }
}
