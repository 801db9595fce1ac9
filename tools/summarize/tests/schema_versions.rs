//! Summaries of schema v1 (every file recorded before v2) read as they did: the shared reader
//! moves a v1 summary's flat workload fields under `workload`, so tables, notes and merges are
//! the same whichever schema wrote the lines.

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use serde_json::Value;
use testkit::ok;

/// The load fields v2 nests under `workload`, listed here apart from shared's own list, so a
/// field the reader failed to move would show up as a difference between the two readings.
const MOVED_TO_WORKLOAD: [&str; 17] = [
    "api",
    "seed",
    "arrival",
    "max_concurrency",
    "stream",
    "temperature",
    "top_p",
    "extra_body",
    "prefix_groups",
    "prefix_len",
    "prefix_hit_rate_expected",
    "cache_flushed",
    "turns",
    "think_time",
    "sessions",
    "trace",
    "trace_rows",
];

/// Each line of `text`, with `edit` applied to its summaries.
fn edit_summaries(text: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) -> String {
    text.lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            let map = record.as_object_mut().unwrap();
            if map["kind"] == "summary" {
                edit(map);
            }
            format!("{record}\n")
        })
        .collect()
}

/// `text`'s v1 summaries as a v2 build writes the same run: the load under `workload`, `v` 2.
fn as_v2(text: &str) -> String {
    edit_summaries(text, |s| {
        assert_eq!(s["v"], 1, "a v1 line");
        let workload: serde_json::Map<String, Value> = MOVED_TO_WORKLOAD
            .iter()
            .filter_map(|f| s.remove(*f).map(|v| (f.to_string(), v)))
            .collect();
        assert!(!workload.is_empty(), "every loadgen summary has a workload");
        s.insert("workload".into(), Value::Object(workload));
        s.insert("v".into(), Value::from(2));
    })
}

fn with_host(text: &str, host: &str) -> String {
    edit_summaries(text, |s| {
        s["labels"]["host"] = Value::from(host);
    })
}

/// summarize over `files` (name, contents) written to a directory, and its stderr.
fn summarize_files(files: &[(&str, &str)]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let names: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
    let out = testkit::run_in(dir.path(), "summarize", &names);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (ok(&out), err)
}

/// `v1_workloads.jsonl` is real loadgen output recorded before v2 (main at d2f41f0, schema v1)
/// against `srv-sim --ttft 5ms --itl 1ms` (the rerun against `--ttft 2ms --itl 1ms`):
/// `-c 1,4 -n 24 --max-tokens 16 --input-len 64 --seed 7 --temperature 0.5 --top-p 0.9
/// --extra-body '{"ignore_eos":true}' --prefix-groups 2 --prefix-len 16`; `-r 20 --arrival
/// gamma:2 --max-concurrency 8 -n 24 --no-stream`; `--api chat -c 2 -n 12 --turns 3 --think-time
/// 10ms --max-tokens 8 --input-len 32`; `--engine sim --trace trace.jsonl --flush-cache` (8
/// rows); and the second of two `-c 2 -n 8 --max-tokens 4 --input-len 64 --seed 7` runs, whose
/// prompts the server had cached. All `--no-requests --label run=v1`. `expected/v1_workloads.txt`
/// is that build's `summarize v1_workloads.jsonl`.
#[test]
fn a_v1_summary_reads_as_before() {
    let v1 = summarize(&["v1_workloads.jsonl"]);
    let table = ok(&v1);
    assert_eq!(
        table,
        read("expected/v1_workloads.txt"),
        "the v1 build's table of the same file"
    );
    // The note that reads the workload (its seed and expected prefix hits) is there.
    assert!(
        table.contains("0.0% expected") && table.contains("--seed (seed 7)"),
        "{table}"
    );
    assert!(table.contains("# turns"), "{table}");
    let err = String::from_utf8_lossy(&v1.stderr);
    assert!(!err.contains("ignored") && !err.contains("newer"), "{err}");

    // The same run written as v2 gives the same table, and no warning either.
    let v2 = as_v2(&read("v1_workloads.jsonl"));
    let (v2_table, v2_err) = summarize_files(&[("v2_workloads.jsonl", &v2)]);
    assert_eq!(v2_table, table);
    assert!(
        !v2_err.contains("ignored") && !v2_err.contains("newer"),
        "{v2_err}"
    );
}

#[test]
fn summaries_of_v1_and_v2_merge_as_if_one_schema_wrote_both() {
    // The same points from two hosts, one file recorded before v2 and one after.
    let v1 = read("v1_workloads.jsonl");
    let (a, b) = (with_host(&v1, "a"), with_host(&v1, "b"));
    let (both_v1, _) = summarize_files(&[("a.jsonl", &a), ("b.jsonl", &b)]);
    let (mixed, err) = summarize_files(&[("a.jsonl", &a), ("b.jsonl", &as_v2(&b))]);
    assert_eq!(mixed, both_v1);
    assert!(!err.contains("ignored"), "{err}");
    // Merged (twice the requests of one host's point), the workload's note still there.
    let one_host = ok(&summarize(&["v1_workloads.jsonl"]));
    assert_ne!(mixed, one_host);
    assert!(mixed.contains("--seed (seed 7)"), "{mixed}");
}
