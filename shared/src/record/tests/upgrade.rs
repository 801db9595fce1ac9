//! Older schemas' lines read by this (v3) build: a v1 summary's flat workload fields move under
//! `workload` and a v2 summary's `engine_steps` figures to their v3 names, before the typed
//! decode; other kinds, and newer summaries, are read as they are.

use super::super::*;
use serde_json::{Value, json};

/// A v1 summary as loadgen wrote it before v2 (fields trimmed to the required ones, every
/// workload field set), with one field no build knows.
const V1_SUMMARY: &str = r#"{"kind":"summary","v":1,"ts":"2026-12-02T05:10:12.435Z","labels":{"run":"v1"},"point":{"index":0,"concurrency":1,"input_len":64,"max_tokens":16,"repeat":0},"partial":false,"requests":24,"ok":24,"errors":0,"duration_s":0.5,"output_tokens":384,"prompt_tokens":1536,"req_s":48.0,"output_tok_s":768.0,"total_tok_s":3840.0,"model":"llama-3.1-8b","api":"chat","seed":7,"arrival":"gamma:2","max_concurrency":8,"stream":false,"temperature":0.5,"top_p":0.9,"extra_body":{"ignore_eos":true},"prefix_groups":2,"prefix_len":16,"prefix_hit_rate_expected":0.25,"cache_flushed":true,"turns":"2..6","think_time":"10ms","sessions":12,"trace":"trace.jsonl","trace_rows":8,"by_turn":[{"turn":1,"requests":12,"ok":12}],"zz_unknown":[1,2],"hist":{}}"#;

fn summary(line: &str) -> SummaryRecord {
    match Record::parse(line).unwrap() {
        Record::Summary(s) => *s,
        other => panic!("not a summary: {other:?}"),
    }
}

#[test]
fn a_v1_summary_has_its_flat_workload_fields_moved_under_workload() {
    let s = summary(V1_SUMMARY);
    let w = &s.workload;
    assert_eq!(w.api, Some(Api::Chat));
    assert_eq!(w.seed, Some(7));
    assert_eq!(w.arrival, Some(ArrivalProcess::Gamma(2.0)));
    assert_eq!(w.max_concurrency, Some(8));
    assert_eq!(w.stream, Some(false));
    assert_eq!(w.temperature, Some(0.5));
    assert_eq!(w.top_p, Some(0.9));
    assert_eq!(w.extra_body, Some(json!({"ignore_eos": true})));
    assert_eq!((w.prefix_groups, w.prefix_len), (Some(2), Some(16)));
    assert_eq!(w.prefix_hit_rate_expected, Some(0.25));
    assert_eq!(w.cache_flushed, Some(true));
    assert_eq!(w.turns.as_deref(), Some("2..6"));
    assert_eq!(w.think_time.as_deref(), Some("10ms"));
    assert_eq!(w.sessions, Some(12));
    assert_eq!(w.trace.as_deref(), Some("trace.jsonl"));
    assert_eq!(w.trace_rows, Some(8));
    assert!(w.extra.is_empty(), "{:?}", w.extra);
    // What was measured and what names the system stay where they were; an unknown field too.
    assert_eq!(s.model.as_deref(), Some("llama-3.1-8b"));
    assert_eq!(s.by_turn.len(), 1);
    assert_eq!(s.requests, 24);
    assert_eq!(s.extra.keys().collect::<Vec<_>>(), ["zz_unknown"]);
    // Now in this schema's shape, and said so.
    assert_eq!(s.v, SCHEMA_VERSION);
}

#[test]
fn every_v1_workload_field_is_one_v2_writes_under_workload() {
    let s = summary(V1_SUMMARY);
    let line: Value = serde_json::from_str(&s.into_record().to_line()).unwrap();
    let nested = line["workload"].as_object().unwrap();
    let mut written: Vec<&str> = nested.keys().map(String::as_str).collect();
    written.sort_unstable();
    let mut moved = WORKLOAD_FIELDS.to_vec();
    moved.sort_unstable();
    assert_eq!(written, moved);
    for field in WORKLOAD_FIELDS {
        assert!(
            line.get(field).is_none(),
            "{field} at the top level: {line}"
        );
    }
    assert_eq!(line["v"], SCHEMA_VERSION);
}

#[test]
fn a_v1_summary_upgraded_and_written_reads_back_the_same() {
    let s = summary(V1_SUMMARY);
    let line = s.clone().into_record().to_line();
    assert_eq!(summary(&line), s);
    // The same load written as v2 by hand reads the same as the v1 line.
    let mut v2: Value = serde_json::from_str(V1_SUMMARY).unwrap();
    let top = v2.as_object_mut().unwrap();
    let workload: Extra = WORKLOAD_FIELDS
        .iter()
        .filter_map(|f| top.remove(*f).map(|v| (f.to_string(), v)))
        .collect();
    top.insert("workload".into(), Value::Object(workload));
    top.insert("v".into(), json!(2));
    assert_eq!(summary(&v2.to_string()), s);
}

#[test]
fn a_v1_summary_without_workload_fields_reads_with_an_empty_workload() {
    let bare = r#"{"kind":"summary","v":1,"ts":"t","point":{"index":0},"requests":1,"ok":1,"errors":0,"duration_s":1.0,"output_tokens":1,"prompt_tokens":1,"req_s":1.0,"output_tok_s":1.0,"total_tok_s":2.0}"#;
    let s = summary(bare);
    assert_eq!(s.workload, Workload::default());
    assert!(s.extra.is_empty(), "{:?}", s.extra);
}

#[test]
fn a_malformed_v1_summary_is_still_refused_with_its_field() {
    // v1 knew `seed` as a number: a string is malformed, not a newer schema.
    let bad = V1_SUMMARY.replace(r#""seed":7"#, r#""seed":"seven""#);
    let err = Record::parse(&bad).unwrap_err();
    assert!(err.to_string().contains("bad summary record"), "{err}");
    let no_requests = V1_SUMMARY.replace(r#""requests":24,"#, "");
    let err = Record::parse(&no_requests).unwrap_err();
    assert!(err.to_string().contains("requests"), "{err}");
}

#[test]
fn other_kinds_read_the_same_in_v1_and_v2() {
    let v1 = r#"{"kind":"coll_run","v":1,"ts":"t","labels":{},"op":"allreduce","backend":"tcp","ranks":2,"sizes":3,"avg_busbw_gbps":1.0,"wrong":0,"hosts":1,"seed":7}"#;
    let v2 = v1.replace(r#""v":1"#, r#""v":2"#);
    let (Record::CollRun(one), Record::CollRun(two)) =
        (Record::parse(v1).unwrap(), Record::parse(&v2).unwrap())
    else {
        panic!("not coll_run records");
    };
    assert_eq!((one.v, two.v), (1, 2));
    // Only summaries have workload fields: a `seed` elsewhere is not moved.
    assert_eq!(one.extra, two.extra);
    assert_eq!(one.extra["seed"], 7);
}

#[test]
fn a_newer_summary_is_not_upgraded() {
    // v4 with flat fields: read as it is (nothing moved; v4's own `seed` is its business).
    let v4 = V1_SUMMARY.replace(r#""v":1"#, r#""v":4"#);
    let s = summary(&v4);
    assert_eq!(s.v, 4);
    assert_eq!(s.workload, Workload::default());
    assert_eq!(s.extra["seed"], 7);
    // A v4 summary this build cannot read is kept whole, as any newer record.
    let unreadable = v4.replace(r#""requests":24,"#, "");
    let rec = Record::parse(&unreadable).unwrap();
    assert!(matches!(rec, Record::Other(_)), "{rec:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&rec.to_line()).unwrap(),
        serde_json::from_str::<Value>(&unreadable).unwrap()
    );
}

#[test]
fn a_v1_summary_without_its_kind_decodes_as_a_rank_part_of_v2() {
    // loadgen ranks send their summaries without `kind`; a rank of a v1 build sends v1's shape.
    let v1_part = V1_SUMMARY.replace(r#""kind":"summary","#, "");
    let part: SummaryRecord = decode_kind(v1_part.as_bytes()).unwrap();
    assert_eq!(part, summary(V1_SUMMARY));
    let v2_part = serde_json::to_vec(&part).unwrap();
    assert_eq!(decode_kind::<SummaryRecord>(&v2_part).unwrap(), part);
    let err = decode_kind::<SummaryRecord>(br#"{"v":2,"ts":"t"}"#).unwrap_err();
    assert!(err.to_string().contains("bad summary record"), "{err}");
}

/// A v2 summary's `engine_steps` as loadgen wrote it (vLLM's elapsed times under `step_ms_*`).
const V2_STEPS: &str = r#"{"kind":"summary","v":2,"ts":"2026-12-02T05:10:12.435Z","point":{"index":0,"concurrency":4},"requests":8,"ok":8,"errors":0,"duration_s":0.5,"output_tokens":128,"prompt_tokens":512,"req_s":16.0,"output_tok_s":256.0,"total_tok_s":1280.0,"engine_steps":{"source":"vllm","steps":100,"steps_per_s":200.0,"window_s":0.5,"step_ms_mean":0.03,"step_ms_p50":0.03,"step_ms_p90":0.04,"step_ms_max":0.05,"busy_ms":3.0,"ctx_requests_mean":0.1,"ctx_tokens_mean":6.4,"gen_requests_mean":3.9,"gen_tokens_mean":3.9,"ctx_tokens_total":640,"gen_tokens_total":390,"prefill_share":0.1,"decode_steps":90,"decode_step_ms_mean":0.03,"decode_batch_mean":4.0,"decode_full_batch":4,"decode_full_batch_ms_mean":0.03,"log_bytes":20000}}"#;

#[test]
fn a_v2_summarys_elapsed_times_are_read_as_the_wait_they_were_and_the_step_from_its_window() {
    let s = summary(V2_STEPS);
    let e = s.engine_steps.expect("engine_steps");
    let wait = e.result_wait_ms.expect("the wait, under its name");
    assert_eq!(
        (wait.mean, wait.p90, wait.max, wait.sum),
        (0.03, 0.04, 0.05, 3.0)
    );
    // v2 knew only the window: 100 steps in 0.5 s are 5 ms steps.
    assert_eq!((e.busy_s, e.step_ms_mean), (0.5, 5.0));
    assert_eq!((e.step_ms_p50, e.decode_step_ms_mean), (None, None));
    assert_eq!(e.decode_full_batch, Some(4));
    assert!(s.extra.is_empty(), "{:?}", s.extra);
    assert_eq!(s.v, SCHEMA_VERSION);
}
