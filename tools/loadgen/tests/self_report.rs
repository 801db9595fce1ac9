//! The engine's own timing joined with the client's, against srv-sim's truth: with
//! `--enable-per-request-metrics` every request record carries the queue and prefill srv-sim
//! measured for it, the point's TTFT split is their means and the client TTFT beyond them, and
//! summarize prints it; without the flag the records and the table are as before, and a server
//! launched with `--self-report` that does not report gets one line saying so.

use servbench::record::{RequestRecord, SummaryRecord};
use testkit::{loadgen, run_ok};

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn the_ttft_split_is_srv_sims_own_queue_and_prefill() {
    // One request at a time: of two sent together, one waits for the other's whole answer
    // (30 ms to its first token, 9 x 20 ms after), so the queue is really exercised.
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "30ms",
        "--itl",
        "20ms",
        "--max-running-requests",
        "1",
        "--enable-per-request-metrics",
    ]);
    let run = loadgen(&["--url", &url, "-c", "2", "-n", "6", "--max-tokens", "10"]).ok();
    let requests = run.of::<RequestRecord>();
    assert_eq!(requests.len(), 6);
    for r in &requests {
        let t = r
            .server_timing
            .as_ref()
            .expect("server timing in every request");
        assert_eq!(t.source, "vllm");
        let (queue, prefill) = (t.queue_ms.unwrap(), t.prefill_ms.unwrap());
        // srv-sim's schedule is absolute: a first token is never early.
        assert!(prefill >= 30.0, "{t:?}");
        assert!(queue >= 0.0, "{t:?}");
        assert_eq!(t.ttft_ms, Some(queue + prefill));
        // The client's TTFT counts from its send: the engine's is inside it.
        assert!(
            t.ttft_ms.unwrap() <= r.ttft_ms.unwrap(),
            "{t:?} vs {:?}",
            r.ttft_ms
        );
        assert!(t.generation_ms.unwrap() > 0.0 && t.mean_itl_ms.is_some());
    }
    let waited = requests
        .iter()
        .map(|r| r.server_timing.as_ref().unwrap().queue_ms.unwrap())
        .fold(0.0, f64::max);
    assert!(
        waited >= 30.0,
        "no request waited in srv-sim's queue: {waited} ms"
    );

    let summary = run.one::<SummaryRecord>();
    let split = summary.ttft_split.expect("the point's TTFT split");
    assert_eq!((split.requests, split.server_over_client), (6, 0));
    let st = |r: &RequestRecord| r.server_timing.clone().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert!(close(
        split.engine_queue_ms.unwrap(),
        mean(requests.iter().map(|r| st(r).queue_ms.unwrap()))
    ));
    assert!(close(
        split.engine_prefill_ms,
        mean(requests.iter().map(|r| st(r).prefill_ms.unwrap()))
    ));
    assert!(close(
        split.outside_ms,
        mean(
            requests
                .iter()
                .map(|r| r.ttft_ms.unwrap() - st(r).ttft_ms.unwrap())
        )
    ));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, &run.output.stdout).unwrap();
    let table =
        String::from_utf8(run_ok("summarize", &[path.to_str().unwrap()]).output.stdout).unwrap();
    for header in ["eng queue ms", "eng prefill ms", "outside ms"] {
        assert!(table.contains(header), "{header} missing:\n{table}");
    }
    // The cause is the server's gauges' to tell (a full batch where a scrape saw one waiting;
    // this short point may fall between scrapes): the note is there either way.
    assert!(table.contains("ms in the engine's queue at C=2"), "{table}");
}

#[test]
fn without_self_report_the_records_and_the_table_are_as_before() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "5ms", "--itl", "1ms"]);
    let run = loadgen(&["--url", &url, "-c", "1", "-n", "3", "--max-tokens", "4"]).ok();
    assert!(
        run.of::<RequestRecord>()
            .iter()
            .all(|r| r.server_timing.is_none())
    );
    assert!(run.one::<SummaryRecord>().ttft_split.is_none());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(&path, &run.output.stdout).unwrap();
    let table =
        String::from_utf8(run_ok("summarize", &[path.to_str().unwrap()]).output.stdout).unwrap();
    assert!(
        !table.contains("eng queue") && !table.contains("self-report"),
        "{table}"
    );
}

#[test]
fn a_self_report_launch_whose_server_sends_no_timing_gets_one_line_saying_so() {
    // srv-launch --self-report on a --cmd is refused, so the preset: srv-sim with its flags,
    // and a loadgen pointed past it at a srv-sim without them.
    let (_plain, url) = testkit::srv_sim(&["--ttft", "5ms", "--itl", "1ms"]);
    let launch = run_ok("srv-launch", &["sim", "--self-report"]);
    let server = String::from_utf8(launch.output.stdout.clone()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let run = loadgen(&["--url", &url, "-c", "1", "-n", "3", "--max-tokens", "4"]).ok();
    std::fs::write(&path, [server.as_bytes(), &run.output.stdout].concat()).unwrap();
    let record = dir.path().join("server.jsonl");
    std::fs::write(&record, &server).unwrap();
    run_ok("srv-kill", &["--from", record.to_str().unwrap()]);
    let table =
        String::from_utf8(run_ok("summarize", &[path.to_str().unwrap()]).output.stdout).unwrap();
    let lines: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("self-report"))
        .collect();
    assert_eq!(lines.len(), 1, "{table}");
    assert!(lines[0].contains("per-request server timing"), "{table}");
    // srv-launch added the step-log flag and no point has steps: the same line says so.
    assert!(
        lines[0].contains("the engine's step log (its decode budget is the client's TPOT)"),
        "{table}"
    );
    assert!(
        !table.contains("eng queue") && !table.contains("eng step"),
        "{table}"
    );
}
