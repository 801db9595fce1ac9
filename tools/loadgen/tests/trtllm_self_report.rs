//! TensorRT-LLM's self-report read for each point, against srv-sim's truth: srv-sim speaking
//! it (`--self-report-as trtllm`, the options file srv-launch `--self-report` writes for
//! trtllm-serve) launched by srv-launch, loaded by loadgen, killed by srv-kill. Every request
//! record carries the timing srv-sim kept for it at `/perf_metrics` (joined by the answer's
//! id), and each point's `engine_steps` are the steps its iteration stats gave, the same steps
//! its `iter = N` log lines tell.

mod steps;

use servbench::record::{RequestRecord, SummaryRecord};
use steps::{every_points_steps, records};
use testkit::sh;

/// Runs `srv-launch sim -- SIM_ARGS | loadgen LOADGEN_ARGS | srv-kill` with the options file
/// srv-launch writes for trtllm-serve; returns (the run's records, srv-sim's log, loadgen's
/// stderr).
fn pipeline(sim: &str, load: &str) -> (String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(
        dir.path().join("opts.yaml"),
        servbench::engines::TRTLLM_SELF_REPORT.text,
    )
    .unwrap();
    let out = sh(&format!(
        "srv-launch sim -- --self-report-as trtllm --extra_llm_api_options {d}/opts.yaml {sim} \
         > {d}/server.jsonl && loadgen {load} < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("server.jsonl")).unwrap())
            .unwrap();
    let log = std::fs::read_to_string(server["log"].as_str().unwrap()).unwrap();
    let run = std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap();
    (run, log, stderr)
}

#[test]
fn trt_every_request_carries_srv_sims_queue_prefill_and_generation() {
    // One request running at a time, two sent: one waits out the other's whole answer (30 ms
    // to its first token, 9 x 20 ms after) in srv-sim's queue.
    let (run, _, stderr) = pipeline(
        "--ttft 30ms --itl 20ms --max-running-requests 1",
        "-c 2 -n 6 --max-tokens 10",
    );
    let requests: Vec<RequestRecord> = records(&run, "request");
    assert_eq!(requests.len(), 6);
    let mut waited: f64 = 0.0;
    for r in &requests {
        let id = r.response_id.as_deref().expect("the answer's id");
        assert!(id.starts_with("cmpl-"), "{id}");
        let t = r
            .server_timing
            .as_ref()
            .expect("server timing in every request");
        assert_eq!(t.source, "trtllm");
        let (queue, prefill, generation) = (
            t.queue_ms.unwrap(),
            t.prefill_ms.unwrap(),
            t.generation_ms.unwrap(),
        );
        // srv-sim's schedule is absolute from a request's start: no token is early.
        assert!(prefill >= 30.0 - 1e-6, "{t:?}");
        assert!(prefill + generation >= 30.0 + 9.0 * 20.0 - 1e-6, "{t:?}");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(t.ttft_ms.unwrap(), queue + prefill), "{t:?}");
        // The engine's times are inside the client's.
        assert!(t.ttft_ms.unwrap() <= r.ttft_ms.unwrap(), "{t:?} vs {r:?}");
        assert!(
            t.ttft_ms.unwrap() + generation <= r.e2e_ms.unwrap(),
            "{t:?} vs {r:?}"
        );
        waited = waited.max(queue);
    }
    assert!(
        waited >= 30.0,
        "no request waited in srv-sim's queue: {waited} ms"
    );
    let summary: Vec<SummaryRecord> = records(&run, "summary");
    let split = summary[0]
        .ttft_split
        .as_ref()
        .expect("the point's TTFT split");
    assert_eq!((split.requests, split.server_over_client), (6, 0));
    assert_eq!(split.source, "trtllm");
    assert!(!stderr.contains("TensorRT-LLM self-report"), "{stderr}");
}

/// (context requests, context tokens, generation tokens) of srv-sim's `iter = N` lines.
fn iter_lines(log: &str) -> Vec<(u64, u64, u64)> {
    let num = |l: &str, key: &str| -> u64 {
        let at = l.find(key).unwrap() + key.len();
        l[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    log.lines()
        .filter(|l| l.contains(" iter = "))
        .map(|l| {
            (
                num(l, "'num_ctx_requests': "),
                num(l, "'num_ctx_tokens': "),
                num(l, "'num_generation_tokens': "),
            )
        })
        .collect()
}

#[test]
fn trt_each_points_steps_are_its_iteration_stats_as_srv_sim_logged_them() {
    let (requests, max_tokens) = (8u64, 8u64);
    let (run, log, stderr) = pipeline(
        "--no-enable-prefix-caching",
        &format!("-c 1,4 -n {requests} --max-tokens {max_tokens}"),
    );
    let lines = iter_lines(&log);
    let points: Vec<SummaryRecord> = records(&run, "summary");
    assert_eq!(points.len(), 2);
    // Every step srv-sim ran was in a point, and each point's are its window's.
    let steps = every_points_steps(&points, lines.len(), &log, requests * max_tokens);
    let mut at = 0;
    for (s, e) in points.iter().zip(&steps) {
        let mine = &lines[at..at + e.steps as usize];
        at += e.steps as usize;
        assert_eq!(e.source, "trtllm");
        assert_eq!(e.ctx_tokens_total, mine.iter().map(|l| l.1).sum::<u64>());
        assert_eq!(e.gen_tokens_total, mine.iter().map(|l| l.2).sum::<u64>());
        assert_eq!(
            e.gen_tokens_total + mine.iter().map(|l| l.0).sum::<u64>(),
            s.output_tokens
        );
        // The GPU's time of each step, which srv-sim's cost model gave.
        assert!(e.step_ms_p50.is_some_and(|p| p > 0.0), "{e:?}");
        assert!(e.host_step_ms.is_some(), "{e:?}");
        let requests: Vec<RequestRecord> = records(&run, "request");
        assert!(requests.iter().all(|r| r.server_timing.is_some()));
    }
    assert_eq!(steps[1].decode_full_batch, Some(4));
    assert!(!stderr.contains("TensorRT-LLM self-report"), "{stderr}");
}

mod hostile;

fn plain(_: &str, req: &serde_json::Value) -> hostile::Answer {
    hostile::Answer::Stream(vec![
        hostile::chunk(req, " a"),
        hostile::chunk(req, " b"),
        "data: [DONE]\n".into(),
    ])
}

/// `/perf_metrics` an object, not the list; `/metrics` a list of things that are not
/// iteration stats: one note each, the requests and the point as without the report.
fn hostile_report(path: &str) -> Option<(u16, String)> {
    match path {
        "/perf_metrics" => Some((200, r#"{"request_id":"x","perf_metrics":[]}"#.into())),
        "/metrics" => Some((200, r#"[{"iter":1},{"iterLatencyMS":-5}]"#.into())),
        _ => None,
    }
}

#[test]
fn trt_hostile_a_report_of_the_wrong_shape_is_one_note_and_no_join() {
    let server = hostile::start_with_gets(plain, hostile_report);
    let url = server.url();
    let port = url.rsplit(':').next().unwrap();
    let record = format!(
        r#"{{"kind":"server","v":3,"ts":"2026-12-05T01:00:00.000Z","labels":{{}},"engine":"trtllm","host":"localhost","pid":1,"pgid":1,"start_ticks":1,"port":{port},"url":"{url}","command":"trtllm-serve m --extra_llm_api_options /tmp/o.yaml","argv":["trtllm-serve","m","--extra_llm_api_options","/tmp/o.yaml"],"log":"","ready_s":0.1,"served_model":"m"}}"#
    );
    let run = testkit::call("loadgen")
        .args([
            "--no-metrics",
            "--no-gpu",
            "-c",
            "1",
            "-n",
            "3",
            "--max-tokens",
            "2",
        ])
        .stdin(format!("{record}\n"))
        .run();
    let err = run.err();
    assert_eq!(run.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&run.output.stdout).into_owned();
    let requests: Vec<RequestRecord> = records(&out, "request");
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.server_timing.is_none()));
    let notes: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("TensorRT-LLM self-report"))
        .collect();
    // /perf_metrics: not a list (once, not once per point); /metrics: unreadable stats.
    assert_eq!(notes.len(), 3, "{err}");
    assert!(
        notes[0].contains("GET /perf_metrics: the answer is an object"),
        "{err}"
    );
    assert!(err.contains("have no record there"), "{err}");
    assert!(
        err.contains("could not be read (first: no `inflightBatchingStats` object)"),
        "{err}"
    );
    let summary: Vec<SummaryRecord> = records(&out, "summary");
    assert!(summary[0].engine_steps.is_none() && summary[0].ttft_split.is_none());
}
