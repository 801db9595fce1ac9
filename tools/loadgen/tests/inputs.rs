//! Inputs loadgen is given, read within bounds and refused with the place named: flag files
//! that never end, trace rows no model could hold, prompts files with unusable counts, flag
//! values no measurement can meet. Against a hostile stand-in server (`hostile`).

mod hostile;

use hostile::{Answer, chunk};
use serde_json::Value;
use servbench::record::RequestRecord;
use std::process::Output;
use testkit::loadgen_at;

/// Every run's flags besides the test's own: no telemetry, a bounded request.
const BASE: &[&str] = &["--no-metrics", "--no-gpu", "--timeout", "30s"];

/// Answers every request with as many tokens as it asked for (at most 8), streamed.
fn obliging(_path: &str, req: &Value) -> Answer {
    let n = req["max_tokens"].as_u64().unwrap_or(1).min(8);
    let mut lines: Vec<String> = (0..n).map(|_| chunk(req, " t")).collect();
    lines.push(format!(
        r#"data: {{"choices":[{{"index":0,"text":"","finish_reason":"length"}}],"usage":{{"prompt_tokens":3,"completion_tokens":{n}}}}}"#
    ));
    lines.push("data: [DONE]".into());
    Answer::Stream(lines)
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Exit 2 and one error line containing every one of `want`.
fn refused(out: &Output, want: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("error:"))
        .unwrap_or_default();
    for w in want {
        assert!(line.contains(w), "{w:?} not in {err}");
    }
}

#[test]
fn flag_files_that_never_end_are_one_error_naming_the_file_and_the_bound() {
    let server = hostile::start(obliging);
    let url = server.url();
    let cases: [(&[&str], &str); 3] = [
        (&["--extra-body", "@/dev/zero", "-n", "1"], "64 MiB"),
        (&["--trace", "/dev/zero"], "16 MiB"),
        (&["--prompts", "/dev/zero", "-n", "1"], "64 MiB"),
    ];
    for (args, bound) in cases {
        let started = std::time::Instant::now();
        let out = loadgen_at(&url, BASE, args);
        refused(&out, &["/dev/zero", bound]);
        assert!(started.elapsed().as_secs() < 60, "{args:?}");
    }
    let out = loadgen_at(
        "https://127.0.0.1:9",
        BASE,
        &["--cacert", "/dev/zero", "-n", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("--cacert: /dev/zero: larger than 16 MiB"),
        "{err}"
    );
}

#[test]
fn trace_rows_no_model_can_hold_are_refused_or_left_out_without_being_built() {
    let server = hostile::start(obliging);
    let dir = tempfile::tempdir().unwrap();
    let huge = write(
        &dir,
        "huge.jsonl",
        "{\"timestamp\": 0, \"input_length\": 4000000000, \"output_length\": 2}\n",
    );
    refused(
        &loadgen_at(&server.url(), BASE, &["--trace", &huge]),
        &["huge.jsonl:1:", "at most 10000000"],
    );
    // Over the server's max_model_len (131072): left out with a count, the rest replayed.
    let over = write(
        &dir,
        "over.jsonl",
        "{\"timestamp\": 0, \"input_length\": 9000000, \"output_length\": 2}\n{\"timestamp\": 1, \"input_length\": 8, \"output_length\": 2}\n",
    );
    let out = loadgen_at(&server.url(), BASE, &["--trace", &over]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "1 of 2 rows need more than the server's max_model_len 131072: they are left out"
        ),
        "{err}"
    );
    let req = out.one::<RequestRecord>();
    assert!(req.error.is_none(), "{req:?}");
}

#[test]
fn a_prompts_max_tokens_that_is_not_a_count_is_refused_naming_file_and_line() {
    let server = hostile::start(obliging);
    let dir = tempfile::tempdir().unwrap();
    for bad in ["4294967297", "-5", "2.9"] {
        let p = write(
            &dir,
            "p.jsonl",
            &format!("{{\"prompt\":\"a b c\",\"max_tokens\":{bad}}}\n"),
        );
        refused(
            &loadgen_at(&server.url(), BASE, &["--prompts", &p, "-n", "1"]),
            &["p.jsonl:1:", "max_tokens"],
        );
    }
}

#[test]
fn sharegpt_prompts_ask_for_their_replys_length_unless_max_tokens_is_given() {
    let server = hostile::start(obliging);
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "sg.json",
        r#"[{"conversations":[{"from":"human","value":"q"},{"from":"gpt","value":"twenty characters ok"}]},
            {"conversations":[{"role":"user","content":"q2"},{"role":"assistant","content":"twenty characters ok"}]},
            {"conversations":[]}]"#,
    );
    let out = loadgen_at(
        &server.url(),
        BASE,
        &["--prompts", &p, "-n", "4", "-c", "1"],
    );
    let err = out.err();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("1 of 3 entries skipped"), "{err}");
    for r in out.of::<RequestRecord>() {
        assert_eq!(
            r.max_tokens,
            Some(5),
            "20 characters, about 5 tokens: {r:?}"
        );
    }
    let out = loadgen_at(
        &server.url(),
        BASE,
        &["--prompts", &p, "-n", "2", "--max-tokens", "7"],
    );
    for r in out.of::<RequestRecord>() {
        assert_eq!(
            r.max_tokens,
            Some(7),
            "--max-tokens forces one length: {r:?}"
        );
    }
}

#[test]
fn flag_values_no_run_can_honour_are_refused_when_parsed() {
    let url = "http://127.0.0.1:9";
    let cases: [(&[&str], &str); 4] = [
        (
            &["--find-max", "rate", "-r", "1", "--slo", "ttft_ms=-5"],
            "positive, finite",
        ),
        (
            &["--find-max", "rate", "-r", "1", "--slo", "ttft_ms=NaN"],
            "positive, finite",
        ),
        (
            &[
                "--find-max",
                "rate",
                "-r",
                "1",
                "--slo",
                "ttft_ms=500",
                "--find-max-precision",
                "1e-300",
            ],
            "--find-max-precision",
        ),
        (&["--turns", "all", "-c", "1"], "--turns all"),
    ];
    for (args, want) in cases {
        refused(&loadgen_at(url, BASE, args), &[want]);
    }
}
