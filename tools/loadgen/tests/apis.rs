//! The Responses, Messages and embeddings APIs (`--api responses|messages|embeddings`) against
//! the real srv-sim, which serves each: TTFT and ITL come out at the latencies srv-sim holds,
//! as for chat; embeddings are counted exactly; and a hostile server's bad event of each API is
//! one typed error record.

mod hostile;

use hostile::Answer;
use serde_json::Value;
use servbench::record::{ErrorClass, RequestRecord, SummaryRecord};
use testkit::{check, holds_in_one_of_three, loadgen, loadgen_at, of_kind};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn responses_and_messages_ttft_and_itl_match_what_srv_sim_holds() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "100ms", "--itl", "10ms"]);
    for api in ["responses", "messages"] {
        holds_in_one_of_three(&format!("loadgen --api {api} vs srv-sim"), || {
            let (code, recs, err) = loadgen(&[
                "--url",
                &url,
                "--api",
                api,
                "-c",
                "4",
                "-n",
                "16",
                "--input-len",
                "64",
                "--max-tokens",
                "24",
            ])
            .parts();
            assert_eq!(code, Some(0), "{err}");
            let reqs = of_kind(&recs, "request");
            assert_eq!(reqs.len(), 16);
            let s = of_kind(&recs, "summary")[0];
            assert_eq!(s["ok"], 16, "{s}");
            assert_eq!(s["workload"]["api"], api);
            assert_eq!(
                s["prompt_len_exact"], 16,
                "the prompt's tokens from the API's usage"
            );
            assert_eq!(
                s["output_len_mismatch"], 0,
                "the output's tokens from the API's usage"
            );
            for r in &reqs {
                assert_eq!(
                    (&r["output_tokens"], &r["chunks"]),
                    (&Value::from(24), &Value::from(24)),
                    "{r}"
                );
                assert_eq!(r["output_tokens_source"], "usage", "{r}");
            }
            let field = |name: &str| -> Vec<f64> {
                reqs.iter().map(|r| r[name].as_f64().unwrap()).collect()
            };
            let ttft = median(field("ttft_ms"));
            let itl = median(
                reqs.iter()
                    .flat_map(|r| r["itl_ms"].as_array().unwrap().iter())
                    .map(|x| x.as_f64().unwrap())
                    .collect(),
            );
            // As for chat (tests/srv_sim.rs): at srv-sim's latencies and never early.
            check("TTFT median (ms)", ttft, (100.0..200.0).contains(&ttft))?;
            check("ITL median (ms)", itl, (8.0..20.0).contains(&itl))?;
            Ok(format!("{api}: medians TTFT {ttft:.3} ms, ITL {itl:.3} ms"))
        });
    }
}

#[test]
fn embeddings_are_counted_exactly_with_their_latency() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "40ms", "--itl", "5ms"]);
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "--api",
        "embeddings",
        "-c",
        "4",
        "-n",
        "20",
        "--input-len",
        "48",
    ])
    .parts();
    assert_eq!(code, Some(0), "{err}");
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 20);
    for r in &reqs {
        assert_eq!(r["inputs"], 1, "{r}");
        assert_eq!(r["prompt_tokens"], 48, "{r}");
        assert_eq!(r["output_tokens"], 0, "{r}");
        assert!(
            r.get("ttft_ms").is_none() && r.get("max_tokens").is_none(),
            "{r}"
        );
        let e2e = r["e2e_ms"].as_f64().unwrap();
        assert!(
            e2e >= 40.0,
            "an embedding answered before srv-sim's prefill: {r}"
        );
    }
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(
        (s["ok"].as_u64(), s["inputs"].as_u64()),
        (Some(20), Some(20)),
        "{s}"
    );
    assert_eq!(
        (
            s["prompt_tokens"].as_u64(),
            s["output_len_mismatch"].as_u64()
        ),
        (Some(960), Some(0))
    );
    let inputs_s = s["inputs_s"].as_f64().unwrap();
    let req_s = s["req_s"].as_f64().unwrap();
    assert!(inputs_s > 0.0 && (inputs_s - req_s).abs() < 1e-9, "{s}");
    assert!(s["ttft_ms"].is_null(), "{s}");
    // A flag about the output an embedding does not have is refused, not ignored.
    let (code, _, err) =
        loadgen(&["--url", &url, "--api", "embeddings", "--max-tokens", "8"]).parts();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--max-tokens with --api embeddings: an embedding has no output"),
        "{err}"
    );
}

fn bad_responses_event(path: &str, _req: &Value) -> Answer {
    if path != "/v1/responses" {
        return Answer::Json(404, "{}".into());
    }
    Answer::Stream(vec![
        r#"event: response.created"#.into(),
        r#"data: {"type":"response.created","sequence_number":0,"response":{"usage":null}}"#.into(),
        String::new(),
        r#"event: response.output_text.delta"#.into(),
        r#"data: {"type":"response.output_text.delta","sequence_number":1,"delta":"a"}"#.into(),
        String::new(),
        r#"data: {"type":"response.output_text.delta","sequence_number":2,"delta":7}"#.into(),
        String::new(),
    ])
}

fn messages_error_event(path: &str, _req: &Value) -> Answer {
    if path != "/v1/messages" {
        return Answer::Json(404, "{}".into());
    }
    Answer::Stream(vec![
        r#"event: message_start"#.into(),
        r#"data: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}"#.into(),
        String::new(),
        r#"event: error"#.into(),
        r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        String::new(),
    ])
}

#[test]
fn a_hostile_servers_bad_event_is_one_typed_error_record() {
    const BASE: &[&str] = &["--no-metrics", "--no-gpu", "--timeout", "30s"];
    let args = |api| ["--api", api, "-c", "1", "-n", "1", "--max-tokens", "4"];
    for (server, api, says) in [
        (
            hostile::start(bad_responses_event),
            "responses",
            "malformed SSE data (invalid type: integer `7`",
        ),
        (
            hostile::start(messages_error_event),
            "messages",
            "error in stream (an SSE error field or event): {\"type\":\"error\"",
        ),
    ] {
        let run = loadgen_at(&server.url(), BASE, &args(api));
        let r = run.one::<RequestRecord>();
        let e = r.error.as_ref().unwrap_or_else(|| panic!("{api}: {r:?}"));
        assert_eq!(e.class, ErrorClass::Protocol, "{api}: {e:?}");
        assert!(e.message.starts_with(says), "{api}: {}", e.message);
        assert!(!e.message.contains('\n'), "{api}: {}", e.message);
        let s = run.one::<SummaryRecord>();
        assert_eq!((s.ok, s.errors), (0, 1), "{api}");
        assert_eq!(s.errors_by_class.get("protocol"), Some(&1), "{api}: {s:?}");
    }
}
