//! The server's side of every point: srv-sim's `/metrics` read in both name flavours
//! (speculative acceptance, KV usage and preemption, token counts against the client's), a
//! server without metrics noted once, and GPU telemetry from a stand-in nvidia-smi here, over
//! the loopback sshd, and from a DCGM exporter's text.

use serde_json::Value;
use std::process::Stdio;
use testkit::num;
use testkit::{FakeNvidiaSmi, Guard, of_kind};
use testkit::{call, loadgen};

/// Llama-3.1-8B on an A100-80G: ~8 ms decode steps.
const PRESET: &[&str] = &["--model", "llama-3.1-8b", "--hardware", "a100-80g"];

fn sim(extra: &[&str]) -> (Guard, String) {
    testkit::srv_sim(&[PRESET, extra].concat())
}

#[test]
fn speculative_acceptance_reads_the_same_in_both_name_flavours() {
    for names in ["vllm", "sglang"] {
        let (_sim, url) = sim(&[
            "--spec-tokens",
            "3",
            "--spec-accept",
            "0.7",
            "--metrics-names",
            names,
        ]);
        let (code, recs, err) = loadgen(&[
            "--url",
            &url,
            "-c",
            "4",
            "--duration",
            "3s",
            "--input-len",
            "32",
            "--max-tokens",
            "64",
            "--no-requests",
            "--scrape-interval",
            "100ms",
        ])
        .parts();
        assert_eq!(code, Some(0), "{err}");
        let s = of_kind(&recs, "summary")[0];
        let server = &s["server"];
        assert_eq!(server["engine"], names, "{s}");
        let spec = &server["spec"];
        let alpha = num(spec, "chain_alpha");
        let len = num(spec, "mean_accepted_len");
        assert!((alpha - 0.70).abs() <= 0.03, "{names}: acceptance {alpha}");
        assert!(
            (len - 2.533).abs() <= 0.1,
            "{names}: mean accepted length {len}"
        );
        assert_eq!(
            spec["from"],
            if names == "vllm" {
                "counters"
            } else {
                "gauges"
            }
        );
        // The server counted exactly the client's tokens (srv-sim counts words, as the client).
        assert_eq!(server["generation_tokens"], s["output_tokens"], "{s}");
        assert_eq!(server["prompt_tokens"], s["prompt_tokens"], "{s}");
        assert!(num(server, "/running/max") <= 4.0);
        assert!(s["telemetry_cpu_s"].as_f64().is_some());
        assert!(num(server, "/ttft_ms/mean") > 0.0);
    }
}

#[test]
fn a_small_kv_budget_fills_and_preempts_at_high_concurrency_only() {
    let (_sim, url) = sim(&["--kv-cache-tokens", "2000"]);
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "-c",
        "1,32",
        "--duration",
        "2s",
        "--input-len",
        "64",
        "--max-tokens",
        "128",
        "--no-requests",
        "--scrape-interval",
        "50ms",
    ])
    .parts();
    assert_eq!(code, Some(0), "{err}");
    let s = of_kind(&recs, "summary");
    let (one, many) = (&s[0]["server"], &s[1]["server"]);
    assert_eq!(one["preemptions"], 0, "{one}");
    assert!(num(one, "/kv_usage/max") < 0.2, "{one}");
    assert!(many["preemptions"].as_u64().unwrap() > 0, "{many}");
    assert!(num(many, "/kv_usage/max") >= 0.95, "{many}");
    assert!(num(many, "/waiting/max") > 0.0, "{many}");
}

#[test]
fn a_server_without_metrics_is_noted_once_and_is_no_error() {
    let (_sim, url) = sim(&["--ttft", "5ms", "--itl", "1ms"]);
    let missing = format!("{url}/no-metrics-here");
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "-c",
        "1,2",
        "-n",
        "4",
        "--max-tokens",
        "4",
        "--metrics-url",
        &missing,
    ])
    .parts();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.matches("note: no server metrics").count(), 1, "{err}");
    assert!(err.contains("HTTP 404"), "{err}");
    for s in of_kind(&recs, "summary") {
        assert!(s.get("server").is_none(), "{s}");
    }
    // --no-metrics: not even a note.
    let (code, recs, err) = loadgen(&["--url", &url, "-n", "2", "--no-metrics"]).parts();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("note:"), "{err}");
    assert!(of_kind(&recs, "summary")[0].get("server").is_none());
}

/// The GPU entries of a summary, by index.
fn gpus(s: &Value) -> Vec<(u64, f64)> {
    s["gpus"]
        .as_array()
        .unwrap_or_else(|| panic!("no gpus in {s}"))
        .iter()
        .map(|g| (g["index"].as_u64().unwrap(), num(g, "/util_pct/mean")))
        .collect()
}

#[test]
fn gpu_telemetry_from_a_stand_in_nvidia_smi_here_and_over_ssh() {
    let smi = FakeNvidiaSmi::new();
    let (_sim, url) = sim(&[]);
    let common = [
        "--url",
        &url,
        "--duration",
        "600ms",
        "--max-tokens",
        "16",
        "--no-requests",
        "--scrape-interval",
        "100ms",
    ];
    // Here: the stand-in first on PATH; only GPU 1.
    let path = smi.path();
    let (code, recs, err) = call("loadgen")
        .args(common)
        .args(["--gpu-host", "localhost", "--gpus", "1"])
        .env("PATH", &path)
        .run()
        .parts();
    assert_eq!(code, Some(0), "{err}");
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(gpus(s), vec![(1, 3.0)], "{s}");
    let g = &s["gpus"][0];
    assert_eq!(g["name"], "NVIDIA H100 80GB HBM3");
    assert!(g.get("power_w").is_none(), "[N/A] is no reading: {g}");
    assert_eq!(num(g, "/sm_clock_mhz/max"), 345.0);
    assert!(g["samples"].as_u64().unwrap() >= 2, "{g}");
    // No power, and nvidia-smi has no energy counter: no energy for it at all.
    assert!(g.get("energy_source").is_none(), "{g}");
    assert!(g.get("energy_j").is_none(), "{g}");

    // Over SSH: the host and GPUs named by the upstream server record.
    let sshd = testkit::sshd();
    let record = serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-12-01T00:00:00.000Z", "labels": {},
        "engine": "vllm", "host": sshd.target, "pid": 1, "pgid": 1, "start_ticks": 1,
        "port": 8000, "url": url, "command": "vllm serve m", "log": "/tmp/x.log",
        "ready_s": 1.0, "gpus": "0"
    });
    let program = smi.program();
    let (code, recs, err) = call("loadgen")
        .args(&common[2..])
        .args(["--identity", &sshd.key, "--known-hosts", &sshd.known_hosts])
        .args(["--nvidia-smi", &program])
        .stdin(format!("{record}\n"))
        .run()
        .parts();
    assert_eq!(code, Some(0), "{err}");
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(gpus(s), vec![(0, 87.0)], "{s}");
    assert_eq!(num(s, "/gpus/0/power_w/mean"), 512.5);
    // Over SSH nvidia-smi is what answers, and it has no energy counter: sampled power.
    assert_eq!(s["gpus"][0]["energy_source"], "sampled_power", "{s}");
    assert!(s["gpus"][0].get("energy_j").is_none(), "{s}");
}

#[test]
fn a_missing_nvidia_smi_is_noted_when_asked_for_and_silent_otherwise() {
    let (_sim, url) = sim(&["--ttft", "5ms", "--itl", "1ms"]);
    let empty = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin:/bin", empty.path().display());
    let args = ["--url", &url, "-c", "1,2", "-n", "3", "--max-tokens", "4"];
    let (code, recs, err) = call("loadgen")
        .args(args)
        .args(["--gpu-host", "localhost"])
        .env("PATH", &path)
        .run()
        .parts();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(err.matches("note: no GPU telemetry").count(), 1, "{err}");
    assert!(of_kind(&recs, "summary")[0].get("gpus").is_none());
    // A loopback URL samples this host's GPUs if it has any, and says nothing if not.
    let (code, _, err) = call("loadgen").args(args).env("PATH", &path).run().parts();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("GPU"), "{err}");
}

#[test]
fn gpu_telemetry_from_a_dcgm_exporter() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("metrics"),
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
         # TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
         DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA H200\",Hostname=\"g\"} 64\n\
         DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\",modelName=\"NVIDIA H200\",Hostname=\"g\"} 12\n\
         # TYPE DCGM_FI_PROF_PCIE_RX_BYTES gauge\n\
         DCGM_FI_PROF_PCIE_RX_BYTES{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\",modelName=\"NVIDIA H200\",Hostname=\"g\"} 2500000\n\
         # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
         DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\",modelName=\"NVIDIA H200\",Hostname=\"g\"} 987654321\n",
    )
    .unwrap();
    let port = testkit::free_port();
    let _exporter = testkit::http_server_of(dir.path(), port);
    let (_sim, url) = sim(&[]);
    let dcgm = format!("http://127.0.0.1:{port}/metrics");
    let (code, recs, err) = loadgen(&[
        "--url",
        &url,
        "--duration",
        "500ms",
        "--max-tokens",
        "16",
        "--no-requests",
        "--scrape-interval",
        "100ms",
        "--gpu-metrics",
        &dcgm,
        "--gpus",
        "1",
    ])
    .parts();
    assert_eq!(code, Some(0), "{err}");
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(gpus(s), vec![(1, 12.0)], "{s}");
    assert_eq!(num(s, "/gpus/0/pcie_rx_bytes_s/mean"), 2_500_000.0);
    assert_eq!(s["gpus"][0]["name"], "NVIDIA H200");
    // The exporter's energy counter, first and last scrape of the point (a static page: it
    // did not move).
    assert_eq!(s["gpus"][0]["energy_source"], "counter", "{s}");
    assert_eq!(s["gpus"][0]["energy_j"].as_f64(), Some(0.0), "{s}");
}

/// The prefix cache as the server counted it over each point equals the hit rate the prefix
/// groups promise (the cache emptied before each point), under vLLM's counters and SGLang's
/// (cached over prompt tokens) alike.
#[test]
fn the_servers_prefix_hit_rate_matches_the_prefix_groups_in_both_name_flavours() {
    for names in ["vllm", "sglang"] {
        let (_sim, url) = sim(&["--metrics-names", names]);
        let (code, recs, err) = loadgen(&[
            "--url",
            &url,
            "--engine",
            "sim",
            "--flush-cache",
            "-c",
            "1,4",
            "-n",
            "16",
            "--input-len",
            "256",
            "--prefix-groups",
            "4",
            "--prefix-len",
            "192",
            "--max-tokens",
            "4",
            "--no-requests",
        ])
        .parts();
        assert_eq!(code, Some(0), "{err}");
        let points = of_kind(&recs, "summary");
        assert_eq!(points.len(), 2);
        for s in points {
            let expected = num(s, "/workload/prefix_hit_rate_expected");
            let measured = num(s, "/server/prefix_hit_rate");
            assert!(expected > 0.5, "{s}");
            assert!(
                (measured - expected).abs() < 0.02,
                "{names}: server {measured} vs expected {expected}: {s}"
            );
            assert_eq!(
                s["server"]["prefix_queried_tokens"], s["prompt_tokens"],
                "{s}"
            );
        }
    }
}

/// The scraping thread must not take the client core from a send that is due: it runs at
/// nice 19 while the threads that send stay at the process's own priority, which is the
/// priority this test itself runs at (a suite started under `nice -n 15` is not nice 0).
#[test]
fn the_telemetry_thread_runs_at_the_lowest_priority_and_the_senders_do_not() {
    let (_sim, url) = sim(&[]);
    let mut child = testkit::cmd("loadgen")
        .args([
            "--url",
            &url,
            "-c",
            "2",
            "--duration",
            "4s",
            "--max-tokens",
            "8",
        ])
        .args(["--scrape-interval", "100ms", "--no-requests"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run loadgen");
    // A thread's nice value is field 19 of its stat (after the parenthesised name).
    let nice_in = |stat: &str| -> Option<i64> {
        let after = &stat[stat.rfind(')')? + 2..];
        after.split(' ').nth(16)?.parse().ok()
    };
    let own_nice = std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| nice_in(&s))
        .expect("this test's own nice value");
    let nice_of_threads = |pid: u32| -> Vec<(String, i64)> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| {
                let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
                let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
                Some((comm.trim().to_string(), nice_in(&stat)?))
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut threads = Vec::new();
    while std::time::Instant::now() < deadline {
        threads = nice_of_threads(child.id());
        if threads.iter().any(|(c, _)| c == "loadgen-telemet") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.wait();
    // comm holds 15 characters: "loadgen-telemetry" reads "loadgen-telemet".
    let scraper: Vec<_> = threads
        .iter()
        .filter(|(c, _)| c == "loadgen-telemet")
        .collect();
    assert_eq!(scraper.len(), 1, "one telemetry thread among {threads:?}");
    assert_eq!(scraper[0].1, 19, "{threads:?}");
    assert!(
        threads
            .iter()
            .filter(|(c, _)| c != "loadgen-telemet")
            .all(|(_, n)| *n == own_nice),
        "the other threads keep the process's priority ({own_nice}, this test's): {threads:?}"
    );
}
