use super::*;
use proptest::prelude::*;

mod strategies;
mod strategies_compute;
mod upgrade;
use strategies::*;
use strategies_compute::*;

proptest! {
    /// Every kind survives writer -> reader unchanged, unknown fields included, and the
    /// written line is stable (a second trip writes the same bytes).
    #[test]
    fn every_kind_round_trips(record in any_record()) {
        let line = record.to_line();
        let back = Record::parse(&line).unwrap();
        prop_assert_eq!(&back, &record);
        prop_assert_eq!(back.to_line(), line.clone());
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(value["kind"].as_str().unwrap(), record.kind());
        prop_assert!(line.starts_with(r#"{"kind":"#), "kind first: {}", line);
    }
}

proptest! {
    /// The fast read path gives what the full parser gives, less the fields outside the schema.
    #[test]
    fn the_lean_request_read_is_the_full_read_without_extra(record in request()) {
        let line = record.to_line();
        let Record::Request(mut full) = Record::parse(&line).unwrap() else {
            panic!("not a request: {line}");
        };
        full.extra.clear();
        prop_assert_eq!(RequestRecord::parse_lean(line.as_bytes()), Some(*full));
    }
}

#[test]
fn the_lean_request_read_leaves_other_kinds_and_broken_lines_to_the_full_parser() {
    let ok = r#"{"kind":"request","v":1,"ts":"t","point":{"index":0},"id":3,"intended_ms":1.0,"send_lag_ms":0.0}"#;
    assert_eq!(RequestRecord::parse_lean(ok.as_bytes()).unwrap().id, 3);
    for line in [
        // Another kind whose name starts like it.
        ok.replace(r#""request""#, r#""request_x""#),
        // kind not first: loadgen never writes it so; the full parser reads it.
        ok.replace(r#"{"kind":"request","v":1,"#, r#"{"v":1,"kind":"request","#),
        // A required field missing: the full parser names it.
        ok.replace(r#","id":3"#, ""),
    ] {
        assert_eq!(RequestRecord::parse_lean(line.as_bytes()), None, "{line}");
    }
}

#[test]
fn unknown_fields_of_known_kinds_are_kept() {
    let line = r#"{"kind":"coll_run","v":1,"ts":"2026-11-30T17:00:00.000Z","labels":{},"op":"allreduce","backend":"tcp","ranks":2,"sizes":3,"avg_busbw_gbps":1.0,"wrong":0,"hosts":1,"zz_new":{"a":[1,2]}}"#;
    let rec = Record::parse(line).unwrap();
    let out: serde_json::Value = serde_json::from_str(&rec.to_line()).unwrap();
    let orig: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(out, orig);
}

#[test]
fn newer_version_parses() {
    let line = r#"{"kind":"coll_run","v":4,"ts":"t","op":"allreduce","backend":"tcp","ranks":2,"sizes":3,"avg_busbw_gbps":1.0,"wrong":0,"hosts":1}"#;
    assert_eq!(Record::parse(line).unwrap().version(), 4);
}

#[test]
fn a_newer_version_this_build_cannot_read_is_kept_whole() {
    // v4 dropped `hosts` and changed `sizes` to a list: not readable as a v3 coll_run.
    let line = r#"{"kind":"coll_run","v":4,"ts":"t","labels":{},"op":"allreduce","backend":"tcp","ranks":2,"sizes":[8,16],"avg_busbw_gbps":1.0,"wrong":0}"#;
    let rec = Record::parse(line).unwrap();
    assert!(matches!(rec, Record::Other(_)), "{rec:?}");
    assert_eq!(rec.kind(), "coll_run");
    assert_eq!(rec.version(), 4);
    let out: serde_json::Value = serde_json::from_str(&rec.to_line()).unwrap();
    assert_eq!(
        out,
        serde_json::from_str::<serde_json::Value>(line).unwrap()
    );
    // The same line claiming v3 (or older) is malformed: this build knows what they require.
    for older in [r#""v":3"#, r#""v":2"#, r#""v":1"#] {
        let err = Record::parse(&line.replace(r#""v":4"#, older)).unwrap_err();
        assert!(err.to_string().contains("bad coll_run record"), "{err}");
    }
}

#[test]
fn malformed_lines_say_why() {
    assert!(matches!(
        Record::parse("{not json"),
        Err(RecordError::NotJson(_))
    ));
    assert!(matches!(
        Record::parse(r#"{"v":1}"#),
        Err(RecordError::NoKind)
    ));
    let err = Record::parse(r#"{"kind":"server","v":1,"ts":"t"}"#).unwrap_err();
    assert!(err.to_string().contains("bad server record"), "{err}");
}

/// A p2p line claiming hundreds of millions of ranks (a matrix of 10^17 cells for any reader
/// sizing by it) is implausible where every reader checks records, not only where one sizes.
#[test]
fn a_p2p_record_claiming_more_ranks_than_a_matrix_can_have_is_implausible() {
    let line = |ranks: u32| {
        format!(
            r#"{{"kind":"p2p","v":2,"ts":"t","backend":"tcp","ranks":{ranks},"src":0,"dst":1,"bytes":8,"uni_gbps":1.0,"bidir_gbps":2.0,"latency_bytes":8,"latency_us":3.0,"iters":1,"warmup":0}}"#
        )
    };
    let p2p = |ranks| match Record::parse(&line(ranks)).unwrap() {
        Record::P2p(r) => r,
        other => panic!("not a p2p record: {other:?}"),
    };
    assert_eq!(p2p(MAX_P2P_RANKS).implausible(), None);
    let why = p2p(400_000_000).implausible().expect("implausible");
    assert!(why.contains("ranks 400000000"), "{why}");
}

/// Any record kind, each from its generator.
fn any_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        server(),
        kill(),
        request(),
        summary(),
        coll(),
        coll_run(),
        decode(),
        ramp(),
        sim_plan(),
        gemm(),
        gemm_step(),
        device_limits(),
        search(),
        other()
    ]
}
