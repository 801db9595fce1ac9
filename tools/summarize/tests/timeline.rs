//! `--plot-kind timeline`: one point's requests as lanes on wall time (sent, queued in the
//! engine, prefill, first token, each chunk, end, failures marked), the requests in flight and
//! the engine's steps per second below, against srv-sim's known timings through the real
//! pipeline (srv-launch, loadgen, srv-kill). The geometry is checked on the lanes the picture
//! draws, as `--plot -` prints them, and the picture's own text.

use serde_json::Value;
use std::path::{Path, PathBuf};
use testkit::{json_lines, num, of_kind, sh};

/// srv-launch sim `sim` --self-report, then loadgen `load` against it, then srv-kill: the run's
/// records file.
fn sim_run(dir: &Path, sim: &str, load: &str) -> PathBuf {
    let d = dir.display();
    let out = sh(&format!(
        "srv-launch sim --self-report {sim} > {d}/server.jsonl && \
         loadgen {load} < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("run.jsonl")
}

/// `summarize RUN --plot - --plot-kind timeline ARGS --format json`: its tables by title
/// (`timeline of ...`, `engine steps per second of ...`), and its stderr.
fn timeline(run: &Path, args: &str) -> (Vec<Value>, String) {
    let out = sh(&format!(
        "summarize {} --plot - --plot-kind timeline --format json {args}",
        run.display()
    ));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    (doc["tables"].as_array().unwrap().clone(), err)
}

fn table<'a>(tables: &'a [Value], title: &str) -> Option<&'a Value> {
    tables
        .iter()
        .find(|t| t["table"].as_str().unwrap().starts_with(title))
}

/// The request record of each lane (by its id).
fn record_of<'a>(requests: &[&'a Value], lane: &Value) -> &'a Value {
    requests
        .iter()
        .find(|r| r["id"] == lane["id"])
        .unwrap_or_else(|| panic!("no request of {lane}"))
}

/// The lanes, in send order (request ids).
fn lanes(tables: &[Value]) -> Vec<Value> {
    table(tables, "timeline of").expect("the lanes' table")["rows"]
        .as_array()
        .unwrap()
        .clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 2e-6
}

/// The SVG summarize draws of `run` with `args`, and its stderr.
fn svg(run: &Path, args: &str) -> (String, String) {
    let path = run.with_extension("svg");
    let out = sh(&format!(
        "summarize {} --plot {} --plot-kind timeline {args}",
        run.display(),
        path.display()
    ));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (std::fs::read_to_string(&path).unwrap(), err)
}

#[test]
fn each_lane_is_its_requests_times_and_srv_sims_fixed_latency_bounds_them() {
    let dir = tempfile::tempdir().unwrap();
    // 100 ms to the first token, 10 ms a token after it, five tokens each.
    let run = sim_run(
        dir.path(),
        "-- --ttft 100ms --itl 10ms",
        "-c 2 -n 6 --max-tokens 5 --input-len 16",
    );
    let records = json_lines(&std::fs::read(&run).unwrap());
    let requests = of_kind(&records, "request");
    let (tables, _) = timeline(&run, "");
    let lanes = lanes(&tables);
    assert_eq!(lanes.len(), 6);
    let ids: Vec<u64> = lanes.iter().map(|l| l["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5], "send order");
    for lane in &lanes {
        // The records' own times from the point's start.
        let r = record_of(&requests, lane);
        let intended = num(r, "intended_ms");
        let sec = |ms: f64| (intended + ms) / 1e3;
        assert!(close(num(lane, "intended_s"), sec(0.0)), "{lane}");
        assert!(
            close(num(lane, "sent_s"), sec(num(r, "send_lag_ms"))),
            "{lane}"
        );
        assert!(
            close(num(lane, "first_token_s"), sec(num(r, "ttft_ms"))),
            "{lane}"
        );
        assert!(close(num(lane, "end_s"), sec(num(r, "e2e_ms"))), "{lane}");
        assert_eq!(lane["chunks"], r["chunks"]);
        assert_eq!(lane["outcome"], "ok");
        // The engine's own queue and prefill (--self-report: per-request metrics), laid from
        // the send.
        let timing = &r["server_timing"];
        assert!((num(lane, "queued_ms") - num(timing, "queue_ms")).abs() < 0.051);
        assert!((num(lane, "prefill_ms") - num(timing, "prefill_ms")).abs() < 0.051);
        // srv-sim's truth: no first token before its 100 ms, no last token before four
        // 10 ms gaps after it (a busy client may read them late, never early).
        let sent = num(lane, "sent_s");
        let first = num(lane, "first_token_s");
        assert!(first - sent >= 0.1 - 1e-6, "first token too soon: {lane}");
        assert!(num(lane, "prefill_ms") >= 100.0 - 1e-3, "{lane}");
        assert!(
            num(lane, "end_s") - sent >= 0.14 - 1e-6,
            "end too soon: {lane}"
        );
        assert!(num(lane, "end_s") >= first, "{lane}");
        assert_eq!(lane["chunks"], 5);
    }
    // Fixed latencies step no batch: no step log, and the picture says so.
    let (picture, err) = svg(&run, "");
    for text in [
        "Timeline of point 0 (C=2)",
        "queued in the engine",
        "prefill (engine)",
        "first token",
        "requests in flight",
        "this point has no engine step log",
    ] {
        assert!(picture.contains(text), "no {text:?} in the SVG");
    }
    assert!(err.contains("no engine step log for this point"), "{err}");
}

#[test]
fn the_engines_steps_per_second_are_placed_on_the_points_time_from_its_step_log() {
    let dir = tempfile::tempdir().unwrap();
    // srv-sim's cost model steps a batch and logs each step (--self-report).
    let run = sim_run(
        dir.path(),
        "",
        "-c 4 --duration 2s --max-tokens 32 --input-len 128",
    );
    let records = json_lines(&std::fs::read(&run).unwrap());
    let summary = of_kind(&records, "summary")[0];
    let e = &summary["engine_steps"];
    let ps = &e["per_second"];
    let counts: Vec<u64> = ps["steps"]
        .as_array()
        .expect("engine_steps.per_second")
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    // Every step of the point's window is in one of the seconds.
    assert_eq!(counts.iter().sum::<u64>(), e["steps"].as_u64().unwrap());
    // The first step comes with the first request: its second began at most a second
    // before it.
    let first_s = num(ps, "first_s");
    assert!((-1.0..=0.5).contains(&first_s), "{ps}");
    let window_s = num(e, "window_s");
    assert!(first_s + counts.len() as f64 - 1.0 <= window_s, "{e}");
    let (tables, _) = timeline(&run, "");
    let rows = table(&tables, "engine steps per second").expect("the seconds' table")["rows"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!rows.is_empty());
    for row in &rows {
        let from = num(row, "from_s");
        let k = (from - first_s).round() as usize;
        // A second wholly inside the point: its steps are its rate.
        if from >= 0.0 && from + 1.0 <= window_s {
            assert!(close(num(row, "steps_per_s"), counts[k] as f64), "{row}");
        }
    }
    let (picture, _) = svg(&run, "");
    assert!(picture.contains("engine steps in each second of its log"));
    assert!(picture.contains("mean over its busy window"));
}

#[test]
fn failed_requests_are_marked_with_their_class() {
    let dir = tempfile::tempdir().unwrap();
    let run = sim_run(
        dir.path(),
        "-- --ttft 20ms --itl 2ms --fail-rate 0.5 --seed 7",
        "-c 2 -n 16 --max-tokens 3 --input-len 16",
    );
    let records = json_lines(&std::fs::read(&run).unwrap());
    let requests = of_kind(&records, "request");
    let (tables, _) = timeline(&run, "");
    let lanes = lanes(&tables);
    let mut failed = 0;
    assert_eq!(lanes.len(), 16);
    for lane in &lanes {
        let r = record_of(&requests, lane);
        let class = r["error"]["class"].as_str().unwrap_or("ok");
        assert_eq!(lane["outcome"], class, "{lane}");
        assert!(close(
            num(lane, "end_s"),
            (num(r, "intended_ms") + num(r, "e2e_ms")) / 1e3
        ));
        failed += usize::from(class != "ok");
    }
    assert!(failed > 0, "no request failed at --fail-rate 0.5");
    let (picture, _) = svg(&run, "");
    assert!(picture.contains("failed (at its end)"));
}

#[test]
fn a_point_and_a_window_choose_the_lanes_and_bad_choices_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let run = sim_run(
        dir.path(),
        "-- --ttft 30ms --itl 5ms",
        "-c 1,2 -n 8 --max-tokens 4 --input-len 16",
    );
    let records = json_lines(&std::fs::read(&run).unwrap());
    let of_point = |i: u64| -> Vec<&Value> {
        of_kind(&records, "request")
            .into_iter()
            .filter(|r| r["point"]["index"] == i)
            .collect()
    };
    // The first point by default; --point 1 the second.
    let (tables, _) = timeline(&run, "");
    assert!(table(&tables, "timeline of point 0 (C=1)").is_some());
    let (tables, _) = timeline(&run, "--point 1");
    assert!(table(&tables, "timeline of point 1 (C=2)").is_some());
    assert_eq!(lanes(&tables).len(), of_point(1).len());
    // A window keeps the requests whose span (due to end) meets it, and only those.
    let span = |r: &Value| {
        let i = num(r, "intended_ms");
        (i / 1e3, (i + num(r, "e2e_ms")) / 1e3)
    };
    let by_id = |id: u64| *of_point(1).iter().find(|r| r["id"] == id).unwrap();
    // From just before request 2's end to just after request 5's due time.
    let (a, b) = (span(by_id(2)).1 - 1e-4, span(by_id(5)).0 + 1e-4);
    let (tables, _) = timeline(&run, &format!("--point 1 --window {a}..{b}"));
    let kept: Vec<u64> = lanes(&tables)
        .iter()
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    let mut expected: Vec<u64> = of_point(1)
        .into_iter()
        .filter(|r| {
            let (s, e) = span(r);
            e >= a && s <= b
        })
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    expected.sort_unstable();
    assert_eq!(kept, expected);
    assert!(kept.contains(&2) && kept.contains(&5) && !kept.contains(&0));
    for (args, says) in [
        (
            "--plot - --plot-kind timeline --point 7",
            "its points: 0, 1",
        ),
        (
            "--plot - --plot-kind timeline --window 3..1",
            "below its END",
        ),
        ("--plot - --plot-kind timeline --window 1..x", "START..END"),
        ("--plot - --point 1", "--plot-kind timeline"),
        (
            "--plot t.txt --plot-kind timeline",
            "name a .svg or .png file",
        ),
        (
            "--plot - --plot-kind timeline --point 1 --window 900..901",
            "no request in the window",
        ),
    ] {
        let out = sh(&format!("summarize {} {args}", run.display()));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args}: {err}");
        assert!(err.contains(says), "{args}: {err}");
        assert_eq!(err.lines().count(), 1, "{args}: one line: {err}");
    }
}

#[test]
fn the_readme_picture_is_drawn_from_its_recorded_vllm_run() {
    // The README's command over the run it was made from: every request a lane, the engine's
    // seconds those loadgen recorded.
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/timeline_vllm.jsonl");
    let records = json_lines(&std::fs::read(&run).unwrap());
    let (tables, _) = timeline(&run, "");
    let lanes = lanes(&tables);
    assert_eq!(lanes.len(), of_kind(&records, "request").len());
    assert!(lanes.iter().all(|l| l["prefill_ms"].as_f64().is_some()));
    let summary = of_kind(&records, "summary")[0];
    let ps = &summary["engine_steps"]["per_second"];
    let rows = table(&tables, "engine steps per second").unwrap()["rows"]
        .as_array()
        .unwrap()
        .clone();
    assert!(close(num(&rows[0], "from_s"), num(ps, "first_s")));
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("timeline.png");
    let out = sh(&format!(
        "summarize {} --plot {} --plot-kind timeline",
        run.display(),
        png.display()
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
}
