//! The server's side of a point when `/metrics` or nvidia-smi lie (tried-to-break-it-3.md M1,
//! M2, M3, M10, G5): what loadgen writes is still read by its own schema and by summarize,
//! what it could not believe is said in the summary, and a point whose metrics stopped
//! answering is marked so. Each against its clean twin.

use serde_json::Value;
use testkit::hostile::{LyingNvidiaSmi, hostile_server};
use testkit::loadgen;

fn summaries(stdout: &str) -> Vec<Value> {
    testkit::json_lines(stdout.as_bytes())
        .into_iter()
        .filter(|r| r["kind"] == "summary")
        .collect()
}

/// Every line reads back as its typed record with nothing outside the schema.
fn typed(stdout: &str) {
    for line in stdout.lines() {
        testkit::run::in_the_schema(line, "loadgen's stdout");
    }
}

fn page(running: &str, kv: &str, generated: &str) -> String {
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {running}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} {kv}\n\
         # TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name=\"m\"}} {generated}\n"
    )
}

/// One stream for 1.5 s scraped every 100 ms, each scrape within 1 s: time for /metrics to
/// answer three scrapes and then hang.
const LONG_LOAD: &[&str] = &[
    "-c",
    "1",
    "--duration",
    "1500ms",
    "--max-tokens",
    "4",
    "--input-len",
    "8",
    "--scrape-interval",
    "100ms",
    "--timeout",
    "1s",
    "--no-gpu",
];

const LOAD: &[&str] = &[
    "-c",
    "2",
    "-n",
    "8",
    "--max-tokens",
    "4",
    "--input-len",
    "8",
    "--scrape-interval",
    "20ms",
];

/// [`LOAD`] against `url`, its GPUs read from the stand-in nvidia-smi.
fn run_with_smi(url: &str, smi: &LyingNvidiaSmi) -> (Option<i32>, String, String) {
    let program = smi.program();
    let gpus = [
        "--gpu-host",
        "localhost",
        "--nvidia-smi",
        program.to_str().unwrap(),
    ];
    loadgen(&[LOAD, &["--url", url], &gpus].concat()).texts()
}

#[test]
fn nan_gauges_an_infinite_counter_and_overflowing_gpu_values_are_left_out_not_written_null() {
    // M2: NaN and +Inf gauges; M3: a counter that becomes +Inf; G5: 1e308 on two lines.
    let server = hostile_server(
        &[page("NaN", "+Inf", "0"), page("NaN", "0.5", "+Inf")],
        None,
    );
    let smi = LyingNvidiaSmi::new(&[
        "0, A, 10, 1000, 300, 1980, 60",
        "0, A, 1e308, 1e308, 300, 1980, 60",
        "1, B, 1e308, 1e308, -5, NaN, inf",
    ]);
    let (code, stdout, stderr) = run_with_smi(&server.url, &smi);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("null"), "{stdout}");
    typed(&stdout);
    let s = &summaries(&stdout)[0];
    let srv = &s["server"];
    assert!(srv.get("running").is_none(), "{srv}");
    assert!(
        srv.get("generation_tokens").is_none(),
        "not 18446744073709551615: {srv}"
    );
    let notes = srv["notes"].to_string();
    assert!(notes.contains("not a finite number"), "{notes}");
    let gpu1 = &s["gpus"][1];
    assert!(gpu1.get("util_pct").is_none(), "{gpu1}");
    assert!(
        s["gpus"][0]["util_pct"]["mean"].as_f64() == Some(10.0),
        "{}",
        s["gpus"]
    );
    // summarize reads the summary (it refused the whole of it over a null before).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    std::fs::write(&file, &stdout).unwrap();
    let out = testkit::cmd("summarize").arg(&file).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("bad summary"), "{err}");

    // The clean twin: numbers everywhere, figures everywhere, no notes.
    let clean = hostile_server(&[page("1", "0.25", "0"), page("2", "0.5", "32")], None);
    let (code, stdout, stderr) =
        loadgen(&[LOAD, &["--url", &clean.url, "--no-gpu"]].concat()).texts();
    assert_eq!(code, Some(0), "{stderr}");
    let srv = &summaries(&stdout)[0]["server"];
    assert!(srv["running"]["max"].as_f64() == Some(2.0), "{srv}");
    assert_eq!(srv["generation_tokens"], 32);
    assert!(srv.get("notes").is_none(), "{srv}");
}

#[test]
fn metrics_that_hang_mid_point_mark_the_server_view_incomplete() {
    // M10: three scrapes answer, then /metrics hangs.
    let pages = [page("1", "0.1", "0"), page("1", "0.1", "8")];
    let server = hostile_server(&pages, Some(3));
    let args = [LONG_LOAD, &["--url", &server.url, "--no-requests"]].concat();
    let (code, stdout, stderr) = loadgen(&args).texts();
    assert_eq!(code, Some(0), "{stderr}");
    typed(&stdout);
    let srv = &summaries(&stdout)[0]["server"];
    assert_eq!(srv["incomplete"], true, "{srv}");
    assert!(
        stderr.contains("stopped answering during a point") && !stderr.contains("have no `server`"),
        "{stderr}"
    );
    // The clean twin: the same server answering throughout.
    let server = hostile_server(&pages, None);
    let clean = [LONG_LOAD, &["--url", &server.url, "--no-requests"]].concat();
    let (code, stdout, stderr) = loadgen(&clean).texts();
    assert_eq!(code, Some(0), "{stderr}");
    let srv = &summaries(&stdout)[0]["server"];
    assert!(srv.get("incomplete").is_none(), "{srv}");
    assert!(!stderr.contains("stopped answering"), "{stderr}");
}

#[test]
fn an_explicit_metrics_url_answering_json_names_trtllm_serves_prometheus_path() {
    let server = hostile_server(&["{\"iterations\": []}".to_string()], None);
    let url = format!("{}/metrics", server.url);
    let base = [LOAD, &["--url", &server.url, "--no-gpu"]].concat();
    let (code, stdout, stderr) = loadgen(&[&base[..], &["--metrics-url", &url]].concat()).texts();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("/prometheus/metrics (--metrics-url http://127.0.0.1:"),
        "{stderr}"
    );
    assert!(summaries(&stdout)[0].get("server").is_none());
    // The clean twin: Prometheus text there gives the server's view and no hint.
    let good = hostile_server(&[page("1", "0.1", "0")], None);
    let url = format!("{}/metrics", good.url);
    let (_, stdout, stderr) = loadgen(&[&base[..], &["--metrics-url", &url]].concat()).texts();
    assert!(!stderr.contains("/prometheus/metrics"), "{stderr}");
    assert_eq!(summaries(&stdout)[0]["server"]["engine"], "vllm");
}

#[test]
fn a_metrics_page_over_8_mib_is_refused_with_one_note() {
    // M1: engines write well under 1 MiB; a page of 9 MiB is not read whole.
    let mut huge = page("1", "0.1", "0");
    while huge.len() < 9 << 20 {
        huge.push_str(&format!(
            "vllm:generation_tokens_total{{model_name=\"m\",x=\"{:08}\"}} 1\n",
            huge.len()
        ));
    }
    let server = hostile_server(&[huge], None);
    let (code, stdout, stderr) =
        loadgen(&[LOAD, &["--url", &server.url, "--no-gpu"]].concat()).texts();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("note: no server metrics").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("larger than 8 MiB"), "{stderr}");
    assert!(summaries(&stdout)[0].get("server").is_none());
}

#[test]
fn a_five_request_point_has_gauges_from_its_first_and_last_scrapes() {
    // issue 22 item 8: a C=1 health check ends before the first scrape in between.
    let (_sim, url) = testkit::srv_sim(&["--model", "llama-3.1-8b", "--hardware", "a100-80g"]);
    let (code, stdout, stderr) = loadgen(&[
        "--url",
        &url,
        "-c",
        "1",
        "-n",
        "5",
        "--max-tokens",
        "4",
        "--input-len",
        "8",
        "--scrape-interval",
        "60s",
        "--no-gpu",
    ])
    .texts();
    assert_eq!(code, Some(0), "{stderr}");
    let srv = &summaries(&stdout)[0]["server"];
    assert_eq!(srv["gauge_samples"], 2, "{srv}");
    assert!(srv["kv_usage"]["max"].is_f64(), "{srv}");
    assert!(srv["running"]["mean"].is_f64(), "{srv}");
}

/// summarize's table as a user reads it, for loadgen's stdout.
fn summarize(stdout: &str) -> String {
    testkit::run::summarize_table(stdout)
}

#[test]
fn summarize_notes_the_telemetry_loadgen_did_not_believe_and_metrics_gone_silent() {
    // Non-finite gauges and GPU values: the empty cells get a note naming the point and why.
    let server = hostile_server(&[page("NaN", "+Inf", "0"), page("NaN", "0.5", "4")], None);
    let smi = LyingNvidiaSmi::new(&[
        "0, A, 10, 1000, 300, 1980, 60",
        "1, B, 20, 1000, -5, NaN, inf",
    ]);
    let (code, stdout, stderr) = run_with_smi(&server.url, &smi);
    assert_eq!(code, Some(0), "{stderr}");
    let table = summarize(&stdout);
    assert!(
        table.contains(
            "/metrics samples not believed at C=2: vllm:num_requests_running: not a finite number"
        ),
        "{table}"
    );
    assert!(
        table.contains("GPU telemetry samples not believed at C=2: GPU 1: power_w"),
        "{table}"
    );
    assert!(!table.contains("stopped answering /metrics"), "{table}");

    // /metrics hangs after three scrapes: the note says the server figures end early.
    let hangs = hostile_server(&[page("1", "0.1", "0"), page("1", "0.1", "8")], Some(3));
    let silent = [LONG_LOAD, &["--url", &hangs.url]].concat();
    let (code, stdout, stderr) = loadgen(&silent).texts();
    assert_eq!(code, Some(0), "{stderr}");
    let table = summarize(&stdout);
    assert!(
        table.contains("the server stopped answering /metrics during C=1"),
        "{table}"
    );

    // The clean twin: no such note.
    let clean = hostile_server(&[page("1", "0.25", "0"), page("2", "0.5", "32")], None);
    let (code, stdout, stderr) =
        loadgen(&[LOAD, &["--url", &clean.url, "--no-gpu"]].concat()).texts();
    assert_eq!(code, Some(0), "{stderr}");
    let table = summarize(&stdout);
    assert!(
        !table.contains("not believed") && !table.contains("stopped answering"),
        "{table}"
    );
}
