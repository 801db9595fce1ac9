//! The real vLLM CPU build (see vllm.rs) launched with srv-launch `--self-report`: its own
//! flags are accepted, every request carries vLLM's per-request `metrics` (server timing) with
//! a server TTFT no larger than the client's, its FLOP and byte counters are read per point,
//! each point's engine steps are read from its log, and summarize prints the TTFT split and
//! the engine-step budget. One engine at a time, as every vllm*.rs test.
//!
//! The step count's relation: at C=1 every engine step makes exactly one token of the one
//! request running (its prefill step the first, each decode step one more; a 64-token prompt
//! is not chunked), so the C=1 point's steps from the log equal its output tokens over a batch
//! of 1; the acceptance asks it within 5%.

mod real_vllm;

use real_vllm::*;
use serde_json::Value;
use testkit::of_kind;

#[test]
fn vllm_self_report_gives_server_timing_counters_and_the_ttft_split() {
    let run = pipeline(
        "--self-report",
        "loadgen -c 1,4 -n 8 --input-len 64 --max-tokens 16",
    );
    let (launched, records, table, stderr) = (&run.server, &run.records, &run.table, &run.stderr);
    assert_eq!(launched["self_report"], true, "{launched}");
    assert_eq!(
        launched["self_report_flags"],
        serde_json::json!([
            "--enable-per-request-metrics",
            "--enable-logging-iteration-details",
            "--enable-mfu-metrics"
        ])
    );
    let requests = of_kind(records, "request");
    assert_eq!(requests.len(), 16, "{stderr}");
    for r in &requests {
        let t = &r["server_timing"];
        assert_eq!(t["source"], "vllm", "no server timing in {r}");
        let server_ttft = t["ttft_ms"].as_f64().expect("server TTFT");
        let client_ttft = r["ttft_ms"].as_f64().unwrap();
        assert!(
            server_ttft <= client_ttft,
            "server TTFT {server_ttft} ms above the client's {client_ttft} ms: {r}"
        );
        assert!(t["queue_ms"].as_f64().unwrap() >= 0.0 && t["prefill_ms"].as_f64().unwrap() > 0.0);
    }
    for s in of_kind(records, "summary") {
        let split = &s["ttft_split"];
        assert_eq!(split["requests"], 8, "{s}");
        let srv: &Value = &s["server"];
        assert!(srv["est_flops_per_gpu"].as_f64().unwrap() > 0.0, "{srv}");
        assert!(
            srv["est_read_bytes_per_gpu"].as_f64().unwrap() > 0.0,
            "{srv}"
        );
    }
    let c1 = of_kind(records, "summary")
        .into_iter()
        .find(|s| s["point"]["concurrency"] == 1)
        .unwrap();
    let e = &c1["engine_steps"];
    let steps = e["steps"].as_f64().expect("the C=1 point's engine steps");
    let tokens = c1["output_tokens"].as_f64().unwrap();
    assert!(
        (steps - tokens).abs() <= 0.05 * tokens,
        "{steps} engine steps for {tokens} tokens at C=1: {e}"
    );
    assert_eq!(e["malformed_lines"], Value::Null, "{e}");
    // The step is the steps' rate over the busy time; vLLM's logged elapsed time is only the
    // engine core's wait for each result, inside the step (sync scheduling on the CPU build).
    let step = e["step_ms_mean"].as_f64().unwrap();
    let tpot = c1["tpot_ms"]["p50"].as_f64().unwrap();
    assert!(
        step > 0.5 * tpot && step < 2.0 * tpot,
        "engine step {step} ms against TPOT p50 {tpot} ms at C=1: {e}"
    );
    let wait = e["result_wait_ms"]["mean"]
        .as_f64()
        .expect("the wait, under its name");
    assert!(wait > 0.0 && wait <= step * 1.1, "{e}");
    assert_eq!(e["decode_full_batch"], 1, "{e}");
    assert!(
        table.contains("note: C=1: engine step"),
        "no engine-step budget:\n{table}"
    );
    for header in [
        "eng step ms",
        "eng queue ms",
        "eng prefill ms",
        "outside ms",
        "eng TF/s/GPU",
    ] {
        assert!(table.contains(header), "{header} missing:\n{table}");
    }
}
