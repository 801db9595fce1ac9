//! The real vLLM CPU build (see vllm.rs) launched with srv-launch `--self-report`: its own
//! flags are accepted, every request carries vLLM's per-request `metrics` (server timing) with
//! a server TTFT no larger than the client's, its FLOP and byte counters are read per point,
//! and summarize prints the TTFT split. One engine at a time, as every vllm*.rs test.

mod real_vllm;

use real_vllm::*;
use serde_json::Value;
use testkit::{json_lines, of_kind};

#[test]
fn vllm_self_report_gives_server_timing_counters_and_the_ttft_split() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.jsonl");
    let records = dir.path().join("records.jsonl");
    let _leftovers = Leftovers(server.clone());
    let script = format!(
        "srv-launch vllm --self-report --model {model} -- {args} | tee {server} \
         | loadgen -c 1,4 -n 8 --input-len 64 --max-tokens 16 \
         | srv-kill | tee {records} | summarize",
        model = model(),
        args = ENGINE_ARGS.join(" "),
        server = server.display(),
        records = records.display(),
    );
    let out = run_bounded(&script, dir.path(), PIPELINE_LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");

    let launched = json_lines(&std::fs::read(&server).unwrap())[0].clone();
    assert_eq!(launched["self_report"], true, "{launched}");
    assert_eq!(
        launched["self_report_flags"],
        serde_json::json!([
            "--enable-per-request-metrics",
            "--enable-logging-iteration-details",
            "--enable-mfu-metrics"
        ])
    );
    let records = json_lines(&std::fs::read(&records).unwrap());
    let requests = of_kind(&records, "request");
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
    for s in of_kind(&records, "summary") {
        let split = &s["ttft_split"];
        assert_eq!(split["requests"], 8, "{s}");
        let srv: &Value = &s["server"];
        assert!(srv["est_flops_per_gpu"].as_f64().unwrap() > 0.0, "{srv}");
        assert!(
            srv["est_read_bytes_per_gpu"].as_f64().unwrap() > 0.0,
            "{srv}"
        );
    }
    for header in [
        "eng queue ms",
        "eng prefill ms",
        "outside ms",
        "eng TF/s/GPU",
    ] {
        assert!(table.contains(header), "{header} missing:\n{table}");
    }
}
