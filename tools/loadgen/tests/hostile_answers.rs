//! Answers round 4 found read wrongly (HS-307, HS-gzip, PT-gen): a redirect is named with where
//! it points, not an empty `http_4xx`; a content-encoded stream is refused by its encoding, not
//! taken for a stream without `[DONE]`; a server generation time longer than the client's whole
//! request is counted with `server_over_client`, not averaged into the TTFT split. Each against
//! a hostile stand-in server (`hostile`).

mod hostile;

use hostile::{Answer, chunk};
use serde_json::Value;
use servbench::record::{ErrorClass, RequestRecord, SummaryRecord};
use testkit::loadgen_at;

const BASE: &[&str] = &["--no-metrics", "--no-gpu", "--timeout", "30s"];

fn redirect(_path: &str, _req: &Value) -> Answer {
    Answer::Raw(
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://10.0.0.9:8000/v1/completions\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_vec(),
    )
}

fn gzipped(_path: &str, _req: &Value) -> Answer {
    // The first bytes of a gzip member: what a compressing proxy sends for the stream.
    let mut a = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n".to_vec();
    a.extend_from_slice(&[0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03, 0x4b, 0x49]);
    Answer::Raw(a)
}

/// A stream whose final chunk carries vLLM's per-request `metrics` with `generation`.
fn timed(req: &Value, generation_ms: f64) -> Answer {
    let metrics = serde_json::json!({
        "queue_time_ms": 0.01,
        "time_to_first_token_ms": 0.01,
        "generation_time_ms": generation_ms,
    });
    Answer::Stream(vec![
        chunk(req, " a"),
        chunk(req, " b"),
        format!(
            "data: {}\n",
            serde_json::json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}, "metrics": metrics})
        ),
        "data: [DONE]".into(),
    ])
}

fn generation_past_the_request(_path: &str, req: &Value) -> Answer {
    timed(req, 999_999.0)
}

fn generation_within_the_request(_path: &str, req: &Value) -> Answer {
    timed(req, 0.001)
}

fn requests_of(url: &str, n: &str) -> Vec<RequestRecord> {
    loadgen_at(url, BASE, &["-c", "1", "-n", n, "--max-tokens", "2"]).of::<RequestRecord>()
}

#[test]
fn hs_307_a_redirect_names_where_it_points() {
    let server = hostile::start(redirect);
    let rs = requests_of(&server.url(), "2");
    assert_eq!(rs.len(), 2, "{rs:?}");
    for r in &rs {
        let e = r.error.as_ref().unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!(e.class, ErrorClass::Protocol, "{e:?}");
        assert_eq!(e.http_status, Some(307), "{e:?}");
        assert_eq!(
            e.message,
            "HTTP 307: a redirect to http://10.0.0.9:8000/v1/completions; loadgen follows no redirect: give --url the address that serves the API"
        );
    }
}

#[test]
fn hs_gzip_a_content_encoded_answer_is_refused_by_its_encoding() {
    let server = hostile::start(gzipped);
    for extra in [&[][..], &["--no-stream"][..]] {
        let mut args = vec!["-c", "1", "-n", "1", "--max-tokens", "2"];
        args.extend_from_slice(extra);
        let r = loadgen_at(&server.url(), BASE, &args).one::<RequestRecord>();
        let e = r.error.as_ref().unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!(e.class, ErrorClass::Protocol, "{extra:?}: {e:?}");
        assert!(
            e.message.starts_with(
                "the answer is content-encoded (gzip), which loadgen did not ask for and does not decode"
            ),
            "{extra:?}: {e:?}"
        );
    }
}

#[test]
fn pt_gen_a_server_generation_past_the_clients_whole_request_is_counted_over() {
    let server = hostile::start(generation_past_the_request);
    let out = loadgen_at(
        &server.url(),
        BASE,
        &["-c", "1", "-n", "4", "--max-tokens", "2"],
    );
    let s = out.one::<SummaryRecord>();
    let split = s
        .ttft_split
        .unwrap_or_else(|| panic!("no ttft_split: {}", out.out()));
    assert_eq!(split.server_over_client, 4, "{split:?}");
    assert_eq!(split.requests, 0, "none in the means: {split:?}");
    assert!(split.engine_generation_ms.is_none(), "{split:?}");
    let by = split.server_over_client_max_ms.unwrap();
    assert!(by > 900_000.0 && by <= 999_999.0, "{split:?}");
    // A generation inside the request is in the split as before.
    let server = hostile::start(generation_within_the_request);
    let s = loadgen_at(
        &server.url(),
        BASE,
        &["-c", "1", "-n", "4", "--max-tokens", "2"],
    )
    .one::<SummaryRecord>();
    let split = s.ttft_split.unwrap();
    assert_eq!(
        (split.requests, split.server_over_client),
        (4, 0),
        "{split:?}"
    );
    let g = split.engine_generation_ms.unwrap();
    assert!((g - 0.001).abs() < 1e-9, "{split:?}");
}
