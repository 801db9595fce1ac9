//! srv-sim speaking SGLang's self-report, read end to end in a real pipeline (srv-launch sim
//! ... | loadgen | srv-kill), each figure equal to srv-sim's own truth: its startup phases with
//! the durations its log printed, each point's `engine_steps` from its `Prefill batch` /
//! `Decode batch` lines (every step it ran), each request's `server_timing` from its `Req Time
//! Stats` line, joined by the answer's id, and the point's FLOPs and bytes per GPU from its
//! counters, one series per TP rank, not summed over the ranks.

use servbench::record::{RequestRecord, ServerRecord, SummaryRecord};
use testkit::sh;

/// Every sample of `name` in Prometheus text.
fn samples(text: &str, name: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn sglangs_steps_counters_and_startup_read_as_srv_sim_reported_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let (requests, max_tokens) = (6u64, 8u64);
    let out = sh(&format!(
        "srv-launch sim -- --startup 2s --self-report-as sglang --decode-log-interval 1 \
         --enable-mfu-metrics --enable-request-time-stats-logging --tp 2 \
         --no-enable-prefix-caching > {d}/server.jsonl && \
         loadgen -c 1 -n {requests} --max-tokens {max_tokens} < {d}/server.jsonl > {d}/run.jsonl; \
         rc=$?; url=$(sed -n 's/.*\"url\":\"\\([^\"]*\\)\".*/\\1/p' {d}/server.jsonl); \
         curl -s \"$url/metrics\" > {d}/metrics.txt; \
         srv-kill --from {d}/server.jsonl > /dev/null; exit $rc"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let server: ServerRecord =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("server.jsonl")).unwrap())
            .unwrap();
    // Startup: SGLang's lines, each phase's duration as srv-sim printed it (1/4 of 2 s).
    let phases = &server.startup.as_ref().expect("startup phases").phases;
    let took = |name: &str| {
        phases
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} in {phases:?}"))
            .took_s
    };
    assert_eq!(took("weights"), Some(0.5));
    assert_eq!(took("graph_capture"), Some(0.5));
    assert!(phases.iter().any(|p| p.name == "ready"), "{phases:?}");
    // The step log: every step srv-sim ran, one request at a time, is one line of the point.
    let run = std::fs::read_to_string(dir.path().join("run.jsonl")).unwrap();
    let summary: SummaryRecord = run
        .lines()
        .find(|l| l.contains(r#""kind":"summary""#))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap();
    // Every request's time stats, by the id its answer carried: the figures of its own line.
    let log = std::fs::read_to_string(&server.log).unwrap();
    let records: Vec<RequestRecord> = run
        .lines()
        .filter(|l| l.contains(r#""kind":"request""#))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len() as u64, requests);
    for r in &records {
        let id = r.response_id.as_deref().expect("the answer's id");
        let t = r
            .server_timing
            .as_ref()
            .expect("server_timing in every record");
        assert_eq!(t.source, "sglang");
        let line = log
            .lines()
            .find(|l| l.contains(&format!("Req Time Stats(rid={id},")))
            .unwrap_or_else(|| panic!("{id} in the log"));
        let (q, f) = (t.queue_ms.unwrap(), t.forward_ms.unwrap());
        assert!(
            line.contains(&format!(
                "queue_duration={q:.2}ms, forward_duration={f:.2}ms"
            )),
            "{line} vs {t:?}"
        );
        assert!(q + f <= r.e2e_ms.unwrap() + 0.01, "{t:?} vs {r:?}");
    }
    let metrics = std::fs::read_to_string(dir.path().join("metrics.txt")).unwrap();
    let ran = samples(&metrics, "srv_sim:engine_steps_total");
    let e = summary.engine_steps.as_ref().expect("engine_steps");
    assert_eq!(e.source, "sglang");
    assert_eq!(e.steps as f64, ran[0], "{e:?}");
    assert_eq!(e.steps, requests * max_tokens);
    assert_eq!(e.ctx_tokens_total, summary.prompt_tokens);
    assert_eq!(e.gen_tokens_total, summary.output_tokens - requests);
    assert_eq!((e.malformed_lines, e.log_cut), (0, false));
    // Its lines carry each decode step's length (tokens over SGLang's gap): inside the busy time.
    assert!(e.step_ms_p50.is_some_and(|p| p > 0.0), "{e:?}");
    // FLOPs and bytes per GPU: srv-sim's counter of one rank (each rank's the same), not
    // their sum; the counters began at 0 and nothing ran outside the point.
    let srv = summary.server.as_ref().expect("server telemetry");
    let flops = samples(&metrics, "sglang:estimated_flops_per_gpu_total");
    let read = samples(&metrics, "sglang:estimated_read_bytes_per_gpu_total");
    assert_eq!(flops.len(), 2, "{metrics}");
    assert_eq!(srv.est_flops_per_gpu, Some(flops[0]), "{srv:?}");
    assert_eq!(srv.est_read_bytes_per_gpu, Some(read[0]));
    assert_eq!(srv.est_write_bytes_per_gpu, Some(0.0));
}
