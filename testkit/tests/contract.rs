//! The record contract across the real binaries: what one tool writes, the next one reads,
//! passes on unchanged and builds on (labels); malformed input is reported by source:line;
//! a reader that goes away ends a tool quietly. These are the properties that make
//! `srv-launch ... | loadgen ... | srv-kill | summarize` one product.

use testkit::run::in_the_schema;
use testkit::stderr;
use testkit::{bash, json_lines, sh};

/// A record of a kind no tool knows, with fields in an unusual order and non-ASCII text.
const FUTURE_KIND: &str = r#"{"zeta":[1,{"b":2}],"kind":"gpu_trace","v":1,"ts":"2026-11-30T17:00:00.000Z","labels":{"who":"upstream"},"note":"μs → ok"}"#;
/// A known kind from a newer schema version, with a field this build does not know.
const NEWER_VERSION: &str = r#"{"kind":"coll_run","v":4,"ts":"2026-11-30T17:00:00.000Z","labels":{},"op":"allreduce","backend":"tcp","ranks":2,"sizes":1,"avg_busbw_gbps":1.5,"wrong":0,"new_field_in_v4":{"x":true}}"#;

#[test]
fn records_pass_through_the_whole_pipeline_unchanged_and_labels_are_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = dir.path().join("upstream.jsonl");
    std::fs::write(&upstream, format!("{FUTURE_KIND}\n{NEWER_VERSION}\n")).unwrap();
    let out = sh(&format!(
        "srv-launch sim --label run=contract -- --ttft 5ms --itl 1ms < {up} \
         | loadgen -c 1 -n 3 --max-tokens 4 --prompts builtin --label stage=load \
         | collbench -np 2 -b 8 -e 8 -n 2 -w 1 \
         | srv-kill",
        up = upstream.display()
    ));
    assert!(out.status.success(), "pipeline failed: {}", stderr(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    // Unknown kinds and newer versions come out byte for byte, first and in order.
    assert_eq!(lines[0], FUTURE_KIND);
    assert_eq!(lines[1], NEWER_VERSION);
    assert!(
        stderr(&out).contains("v4 is newer"),
        "a newer schema version is warned about: {}",
        stderr(&out)
    );

    let records = json_lines(&out.stdout);
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    for kind in ["request", "summary", "coll", "coll_run", "kill"] {
        assert!(kinds.contains(&kind), "no {kind} record in {kinds:?}");
    }
    // srv-kill stopped exactly that server, and passed its record on marked killed, just
    // before its kill record (summarize's environment table reads it); a second srv-kill
    // takes it for no target.
    let at = kinds
        .iter()
        .position(|k| *k == "server")
        .expect("the server record passed on");
    let server = &records[at];
    assert_eq!(server["killed"], true, "{server}");
    assert_eq!(kinds[at + 1], "kill", "{kinds:?}");
    let kill = records.iter().find(|r| r["kind"] == "kill").unwrap();
    assert_eq!(kill["ok"], true, "{kill}");
    assert_eq!(kill["matched"][0]["pid"], server["pid"]);
    let piped = std::process::Stdio::piped;
    let again = testkit::sh_cmd("srv-kill")
        .stdin(piped())
        .stdout(piped())
        .stderr(piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(format!("{server}\n").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(1),
        "nothing to kill: {}",
        stderr(&again)
    );
    assert!(
        stderr(&again).contains("nothing matched"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        json_lines(&again.stdout),
        vec![server.clone()],
        "passed on unchanged"
    );
    // The server's labels reach what loadgen derived from it, plus loadgen's own.
    for r in records
        .iter()
        .filter(|r| r["kind"] == "summary" || r["kind"] == "request")
    {
        let labels = &r["labels"];
        assert_eq!(labels["run"], "contract", "{r}");
        assert_eq!(labels["engine"], "sim", "{r}");
        assert_eq!(labels["stage"], "load", "{r}");
    }
    assert_eq!(kill["labels"]["run"], "contract");
    assert_eq!(kill["labels"]["engine"], "sim");
    // Every record line carries the header.
    for r in &records {
        assert!(
            r["v"].is_u64() && r["ts"].is_string() && r["labels"].is_object(),
            "{r}"
        );
    }
}

#[test]
fn malformed_input_names_source_and_line_and_strict_makes_it_exit_2() {
    let input = format!("{FUTURE_KIND}\nthis is {{not json\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.jsonl");
    std::fs::write(&file, &input).unwrap();
    let file = file.display();
    for tool in testkit::RECORD_READERS {
        let strict = sh(&format!("{tool} --strict < {file}"));
        assert_eq!(
            strict.status.code(),
            Some(2),
            "{tool} --strict: {}",
            stderr(&strict)
        );
        let err = stderr(&strict);
        assert!(
            err.contains("stdin:2") && err.contains("this is {not json"),
            "{tool}: the error names the place and quotes the line: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{tool}: one error line: {err}");
        assert!(
            err.starts_with(tool.split(' ').next().unwrap()),
            "{tool}: errors start with the tool's name: {err}"
        );
    }
    // Without --strict: a warning naming the place, and the good line still goes through.
    let lenient = sh(&format!("srv-kill --missing-ok < {file}"));
    assert_eq!(lenient.status.code(), Some(0), "{}", stderr(&lenient));
    assert!(stderr(&lenient).contains("stdin:2"));
    assert_eq!(
        String::from_utf8_lossy(&lenient.stdout).trim_end(),
        FUTURE_KIND
    );
}

#[test]
fn a_closed_stdout_ends_a_tool_quietly_with_exit_0() {
    // 200,000 records into srv-kill, whose reader takes one line and leaves.
    let out = bash(&format!(
        "yes '{FUTURE_KIND}' | head -n 200000 | srv-kill --missing-ok | head -n 1 >/dev/null; \
         echo \"status=${{PIPESTATUS[2]}}\""
    ));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("status=0"),
        "srv-kill: {report} {}",
        stderr(&out)
    );
    assert!(stderr(&out).is_empty(), "quietly: {}", stderr(&out));

    // loadgen mid-sweep, its reader gone after the first record.
    let out = bash(
        "srv-launch sim -- --ttft 1ms --itl 0 > /tmp/contract-srv.$$ && \
         loadgen -c 2 -n 400 --max-tokens 4 --prompts builtin < /tmp/contract-srv.$$ | head -n 1 >/dev/null; \
         echo \"status=${PIPESTATUS[0]}\"; srv-kill --from /tmp/contract-srv.$$ >/dev/null; rm -f /tmp/contract-srv.$$",
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("status=0"),
        "loadgen: {report} {}",
        stderr(&out)
    );
}

#[test]
fn loadgen_given_a_url_still_passes_the_server_record_on_to_srv_kill() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("server.jsonl");
    let launch = sh(&format!(
        "srv-launch sim -- --ttft 1ms --itl 0 > {}",
        rec.display()
    ));
    assert!(launch.status.success(), "{}", stderr(&launch));
    let server: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&rec).unwrap().trim()).unwrap();
    let url = server["url"].as_str().unwrap();
    let out = sh(&format!(
        "loadgen --url {url} -n 2 --max-tokens 4 --prompts builtin < {} | srv-kill",
        rec.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let kill = records
        .iter()
        .find(|r| r["kind"] == "kill")
        .expect("a kill record");
    assert_eq!(kill["ok"], true, "{kill}");
    assert_eq!(kill["matched"][0]["pid"], server["pid"]);
    assert!(records.iter().any(|r| r["kind"] == "summary"));
}

#[test]
fn every_record_writing_tool_takes_labels() {
    let out = sh(
        "srv-sim --dry-run --label layout=tp1 | collbench -np 1 -b 8 -e 8 -n 1 -w 0 --label net=lo",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    assert_eq!(records[0]["kind"], "sim_plan");
    assert_eq!(records[0]["labels"]["layout"], "tp1");
    let coll = records.iter().find(|r| r["kind"] == "coll").unwrap();
    assert_eq!(coll["labels"]["net"], "lo");
}

const TOOLS: [&str; 6] = [
    "srv-launch",
    "srv-kill",
    "loadgen",
    "collbench",
    "summarize",
    "srv-sim",
];

#[test]
fn a_mistyped_flag_is_one_error_line_with_exit_2_and_help_is_exit_0() {
    for tool in TOOLS {
        let out = testkit::cmd(tool)
            .arg("--versio")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{tool}: {err}");
        assert!(out.stdout.is_empty(), "{tool}: records on a usage error");
        assert_eq!(err.lines().count(), 1, "{tool}: one line: {err}");
        assert!(
            err.starts_with(&format!("{tool}: error: unexpected argument '--versio'"))
                && err.contains("tip: a similar argument exists: '--version'")
                && err.trim_end().ends_with("(see --help)"),
            "{tool}: {err}"
        );

        // --help into a reader that stops early is still a success, and quiet.
        let out = bash(&format!(
            "{tool} --help | head -1 >/dev/null; echo \"rc=${{PIPESTATUS[0]}}\""
        ));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.trim(),
            "rc=0",
            "{tool} --help | head: {}",
            stderr(&out)
        );
        assert_eq!(stderr(&out), "", "{tool} --help | head");
    }
}

/// What each record-writing tool writes, from a run of each that reaches its optional fields:
/// `(file, script)`, run in one directory by `bash -e`. The server launched first is killed
/// on the way out whatever happens.
const EVERY_TOOL: &[(&str, &str)] = &[
    (
        "plans.jsonl",
        "srv-sim --dry-run --label layout=tp1
         srv-sim --dry-run --model llama-3.1-70b --hardware h200 --tp 2 --pp 2 --gpus 8 --spec-tokens 2
         srv-sim --dry-run --model llama-3.1-70b --hardware h100  # the weights do not fit: nulls",
    ),
    (
        "server.jsonl",
        "srv-launch sim --name contract --label run=contract -- --ttft 2ms --itl 1ms --fail-rate 0.1 --seed 7 --lora sql,chat",
    ),
    (
        "pd.jsonl",
        "srv-launch sim --pd 1p1d | loadgen -c 2 -n 4 --max-tokens 4 --no-requests | srv-kill",
    ),
    (
        "closed.jsonl",
        "loadgen -c 1,2 -n 12 --max-tokens 4 --prompts builtin --slo ttft_ms=1000 --label stage=closed < server.jsonl",
    ),
    (
        "open.jsonl",
        "loadgen -r 100 --max-concurrency 4 -n 12 --max-tokens 4 --input-len 16 --repeat 2 < server.jsonl",
    ),
    (
        "ramp.jsonl",
        "loadgen --ramp -c 1 --ramp-max 4 --max-error-rate 1 --slo-attainment 0.5 -n 12 --max-tokens 4 --prompts builtin --slo ttft_ms=1000 --no-requests < server.jsonl",
    ),
    (
        "grid.jsonl",
        "loadgen --step-grid -c 1,2 --input-len 8 --max-tokens 3 -n 6 --no-requests < server.jsonl",
    ),
    (
        "workloads.jsonl",
        r#"loadgen --api chat -c 2 -n 3 --turns 2..3 --think-time 1ms --input-len 8 --max-tokens 2 < server.jsonl
         printf '%s\n' '{"timestamp":0,"input_length":12,"output_length":2,"hash_ids":[1,2]}' '{"timestamp":3,"input_length":13,"output_length":2,"hash_ids":[1,3]}' '{"timestamp":6,"input_length":14,"output_length":2,"hash_ids":[1,4]}' '{"timestamp":9,"input_length":12,"output_length":2,"hash_ids":[1,5]}' '{"timestamp":12,"input_length":13,"output_length":2,"hash_ids":[1,6]}' '{"timestamp":15,"input_length":14,"output_length":2,"hash_ids":[1,7]}' > trace.jsonl
         loadgen --trace trace.jsonl --trace-block 8 --trace-speed 1,2 < server.jsonl
         loadgen --find-max concurrency -c 1 --find-max-limit 2 -n 6 --max-tokens 2 --input-len 8 --slo ttft_ms=1000 --slo-attainment 0.5 < server.jsonl
         loadgen -c 2 -n 8 --max-tokens 40 --input-len 8 --cancel-rate 0.5 --cancel-after 5ms < server.jsonl
         loadgen --api responses -c 2 -n 3 --input-len 8 --max-tokens 3 < server.jsonl
         loadgen --api messages -c 2 -n 3 --input-len 8 --max-tokens 3 < server.jsonl
         loadgen --api embeddings -c 2 -n 4 --input-len 8 < server.jsonl
         loadgen -c 2 -n 6 --max-tokens 2 --input-len 8 --lora sql,chat --lora-assignment zipf < server.jsonl
         echo '{"type":"object","required":["n"],"properties":{"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}}}' > n.schema.json
         loadgen -c 2 -n 6 --max-tokens 12 --input-len 8 --response-format n.schema.json < server.jsonl"#,
    ),
    (
        "ranks.jsonl",
        "loadgen --rank 1 --world 2 -c 3 -n 9 --max-tokens 4 --input-len 16 < server.jsonl & one=$!
         loadgen --rank 0 --world 2 -c 3 -n 9 --max-tokens 4 --input-len 16 < server.jsonl
         wait $one
         loadgen --rank 1 --world 2 -r 50 -n 6 --max-tokens 4 --input-len 16 --rank-output each < server.jsonl & one=$!
         loadgen --rank 0 --world 2 -r 50 -n 6 --max-tokens 4 --input-len 16 --rank-output each < server.jsonl
         wait $one",
    ),
    (
        "kill.jsonl",
        "srv-kill --from server.jsonl
         true & gone=$!; wait $gone; srv-kill --pid $gone || test $? = 1  # nothing matched: a failed kill",
    ),
    (
        "coll.jsonl",
        "collbench -np 2 -b 8 -e 64 -f 8 -n 2 -w 1
         collbench -np 2 --coll broadcast --root 1 -b 8 -e 8 -n 2 -w 1 --mode latency",
    ),
    (
        "decode.jsonl",
        "collbench decode --model llama-3.1-8b --hardware h100 --tp 2 --batch 1,4 -n 2 -w 1",
    ),
    (
        "compute.jsonl",
        r#"echo '{"name":"tiny-moe","layers":2,"hidden":128,"heads":2,"kv_heads":1,"head_dim":64,"params":1e6,"weight_format":"bf16","intermediate":256,"moe":{"experts":8,"experts_per_token":2,"moe_layers":1,"expert_params":49152,"shared_experts":1}}' > tiny-moe.json
         collbench gemm --model tiny-moe.json --batch 1,3 -n 2 -w 1 --step-iters 1 --label stage=gemm
         collbench gemm --shape 8x64x32,1x16x16 -n 2 -w 0
         collbench decode --model tiny-moe.json --tp 2 --batch 2 -n 2 -w 1 --compute --step-iters 1
         collbench limits --bytes 4M -n 2 -w 1"#,
    ),
];

/// The record contract is the schema in shared/src/record/: every record each tool writes
/// reads back as its typed kind with nothing left over in `extra`, so a field written outside
/// the schema fails here (as ripgrep's JSON tests read its output with deny_unknown_fields).
/// And summarize, which writes tables rather than records, reads all of them as typed records.
#[test]
fn every_record_every_tool_writes_is_typed_with_nothing_outside_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let mut script = String::from(
        "trap 'srv-kill --from server.jsonl --missing-ok >/dev/null 2>&1 || true' EXIT\n",
    );
    // Where rank 0 of the loadgen jobs listens (the variable stands for --coordinator).
    script.push_str(&format!(
        "export LOADGEN_COORDINATOR=127.0.0.1:{}\n",
        testkit::free_port()
    ));
    for (file, commands) in EVERY_TOOL {
        script.push_str(&format!("{{\n{commands}\n}} > {file}\n"));
    }
    let out = bash(&format!("set -e\ncd {}\n{script}", dir.path().display()));
    assert!(out.status.success(), "{}", stderr(&out));

    let mut kinds = std::collections::BTreeSet::new();
    for (file, _) in EVERY_TOOL {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(!text.trim().is_empty(), "{file}: no records");
        for line in text.lines() {
            let record = in_the_schema(line, file);
            kinds.insert(record.kind().to_string());
        }
    }
    let every_kind = [
        "server",
        "kill",
        "request",
        "summary",
        "ramp",
        "search",
        "coll",
        "coll_run",
        "decode",
        "sim_plan",
        "gemm",
        "gemm_step",
        "device_limits",
        "step_cell",
    ];
    assert_eq!(
        kinds,
        every_kind.iter().map(|k| k.to_string()).collect(),
        "every kind is written by some tool"
    );

    let files: Vec<&str> = EVERY_TOOL.iter().map(|(file, _)| *file).collect();
    let out = bash(&format!(
        "cd {} && summarize --format json {}",
        dir.path().display(),
        files.join(" ")
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    for table in [
        "servers",
        "load points",
        "ramps",
        "searches",
        "turns",
        "json validity",
        "collectives",
        "decode allreduce budget",
        "gemms",
        "device limits",
        "kills",
    ] {
        assert!(
            text.contains(table),
            "summarize made no {table} table: {text}"
        );
    }
    // It tabulates every kind but the step grid's cells (srv-sim --calibrate-from reads them).
    let err = stderr(&out);
    let ignored: Vec<&str> = err.lines().filter(|l| l.contains("ignored")).collect();
    assert!(
        ignored.len() == 1 && ignored[0].ends_with(": 3 step_cell"),
        "{ignored:?}"
    );
}

/// The READMEs' example records are real lines of the current schema: each reads back as its
/// typed kind with nothing outside the schema.
#[test]
fn the_readmes_example_records_are_in_the_schema() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut readmes = vec![root.join("README.md")];
    for tool in std::fs::read_dir(root.join("tools")).unwrap() {
        readmes.push(tool.unwrap().path().join("README.md"));
    }
    let mut kinds = std::collections::BTreeSet::new();
    for readme in readmes.iter().filter(|p| p.exists()) {
        let text = std::fs::read_to_string(readme).unwrap();
        for line in text.lines().filter(|l| l.starts_with(r#"{"kind":"#)) {
            let where_ = readme.display();
            let record = in_the_schema(line, &where_.to_string());
            // Every kind's example as the tools write it now (the same fields in v1, v2 and v3
            // but for the summary's; in_the_schema checks the summaries').
            let written: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                written["v"],
                servbench::record::SCHEMA_VERSION,
                "{where_}: an example of an older schema: {line}"
            );
            kinds.insert(record.kind().to_string());
        }
    }
    assert!(
        kinds.len() >= 12,
        "README shows one line of each kind: {kinds:?}"
    );
}

/// Telemetry that lies (tried-to-break-it-3.md M2-M6, K8, G5): a `/metrics` with NaN and
/// infinite gauges, negative and out-of-range values, a repeated series and a counter that
/// becomes +Inf, and an nvidia-smi printing 1e308 twice for one GPU. Whatever loadgen writes,
/// alone and as two ranks, reads back as its typed records, and summarize tabulates them.
#[test]
fn hostile_telemetry_still_gives_records_their_own_schema_reads() {
    use servbench::record::Record;
    let page = |running: &str, kv: &str, generated: &str, hits: u64| {
        format!(
            "# TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{model_name=\"m\"}} {running}\n\
             vllm:num_requests_running{{model_name=\"m\"}} 999\n\
             # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} {kv}\n\
             # TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name=\"m\"}} {generated}\n\
             # TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{{model_name=\"m\"}} 10\n\
             # TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{{model_name=\"m\"}} {hits}\n"
        )
    };
    let server = testkit::hostile::hostile_server(
        &[
            page("NaN", "7.5", "0", 0),
            page("-5", "+Inf", "10", 500),
            page("+Inf", "NaN", "+Inf", 1000),
        ],
        None,
    );
    let smi = testkit::hostile::LyingNvidiaSmi::new(&[
        "0, A, 10, 1000, 300, 1980, 60",
        "0, B, 90, 9000, 700, 1980, 90",
        "1, C, 1e308, 1e308, -5, NaN, inf",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let load = format!(
        "--url {} -c 2 -n 8 --max-tokens 4 --input-len 8 --scrape-interval 20ms \
         --gpu-host localhost --nvidia-smi {}",
        server.url,
        smi.program().display()
    );
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let out = bash(&format!(
        "set -e; cd {dir}
         loadgen {load} > alone.jsonl
         loadgen {load} --rank 1 --world 2 --coordinator {coordinator} > rank1.jsonl & one=$!
         loadgen {load} --rank 0 --world 2 --coordinator {coordinator} > rank0.jsonl
         wait $one",
        dir = dir.path().display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let mut notes = 0;
    for file in ["alone.jsonl", "rank0.jsonl", "rank1.jsonl"] {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(!text.contains("null"), "{file}: {text}");
        for line in text.lines() {
            let record = in_the_schema(line, file);
            if let Record::Summary(s) = &record
                && let Some(srv) = &s.server
            {
                assert!(srv.running.is_none_or(|r| r.max < 999.0), "{line}");
                assert!(srv.kv_usage.is_none_or(|k| k.max <= 1.0), "{line}");
                assert!(srv.prefix_hit_rate.is_none(), "{line}");
                notes += srv.notes.len();
            }
        }
    }
    assert!(notes > 0, "what was left out is said");
    let out = bash(&format!(
        "cd {} && summarize --format json alone.jsonl rank0.jsonl",
        dir.path().display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("bad summary"), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("load points"), "{report}");
}
