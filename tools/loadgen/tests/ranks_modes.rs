//! loadgen's other modes as ranks of one job: --find-max decides once, conversations and trace
//! rows are split over the ranks, --flush-cache is rank 0's alone (against the capture server of
//! `server/`).

mod job;
mod server;

use job::*;
use serde_json::{Value, json};
use testkit::of_kind;

#[test]
fn find_max_as_ranks_decides_once_on_the_merged_figures() {
    let _one = one_job();
    let srv = server::paced(2, 1);
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--find-max",
        "concurrency",
        "-c",
        "1",
        "--find-max-limit",
        "4",
        "-n",
        "6",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
        "--slo",
        "ttft_ms=5000",
        "--slo-attainment",
        "0.5",
    ]);
    let searches = of_kind(&records, "search");
    assert_eq!(
        searches.len(),
        1,
        "rank 0 alone writes the search: {searches:?}"
    );
    let search = searches[0];
    assert!(search["labels"].get("rank").is_none(), "{search}");
    assert_eq!(search["stopped_by"], "limit", "{search}");
    let probes = search["probes"].as_array().unwrap();
    let loads: Vec<f64> = probes.iter().map(|p| p["load"].as_f64().unwrap()).collect();
    assert_eq!(loads, vec![1.0, 2.0, 4.0], "{search}");
    for p in probes {
        // Judged on the whole probe (6 requests), not on one rank's part of it.
        assert_eq!(p["requests"], 6, "{p}");
    }
    let merged: Vec<&Value> = of_kind(&records, "summary")
        .into_iter()
        .filter(|s| s["ranks"]["merged"] == true)
        .collect();
    assert_eq!(merged.len(), probes.len(), "one merged summary per probe");
    assert_eq!(srv.generations().len(), 18, "3 probes of 6 requests");
}

#[test]
fn conversations_as_ranks_split_the_sessions_like_the_concurrency() {
    let _one = one_job();
    let srv = server::paced(2, 1);
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--api",
        "chat",
        "-c",
        "3",
        "-n",
        "6",
        "--turns",
        "2",
        "--think-time",
        "1ms",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ]);
    let (parts, merged) = summaries(&records);
    for s in &parts {
        assert_eq!(s["ranks"]["share_concurrency"], 1, "{s}");
        assert_eq!(s["workload"]["sessions"], 2, "{s}");
        assert_eq!(s["requests"], 4, "two sessions of two turns: {s}");
    }
    assert_eq!(merged["workload"]["sessions"], 6, "{merged}");
    assert_eq!(merged["requests"], 12, "{merged}");
    assert_eq!(merged["workload"]["turns"], "2", "{merged}");
    let bodies = srv.generations();
    assert_eq!(bodies.len(), 12);
    // Each rank's sessions are its own (a seed per rank): six different first turns.
    let firsts: std::collections::BTreeSet<String> = bodies
        .iter()
        .filter(|b| b["messages"].as_array().unwrap().len() == 1)
        .map(|b| b["messages"][0]["content"].to_string())
        .collect();
    assert_eq!(firsts.len(), 6, "{firsts:?}");
}

#[test]
fn trace_rows_go_round_the_ranks_at_their_times_with_shared_prefixes() {
    let _one = one_job();
    let srv = server::paced(2, 1);
    let url = srv.url();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    // Six rows, 100 ms apart, of lengths 40..45: all share their first block (id 7).
    let rows: String = (0..6u32)
        .map(|i| {
            json!({"timestamp": 100 * i, "input_length": 40 + i, "output_length": 2,
                   "hash_ids": [7, 100 + i, 200 + i]})
            .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&trace, rows).unwrap();
    let records = job_ok(&[
        "--url",
        &url,
        "--trace",
        trace.to_str().unwrap(),
        "--trace-block",
        "16",
    ]);
    let (parts, merged) = summaries(&records);
    assert_eq!(merged["workload"]["trace_rows"], 6, "{merged}");
    assert_eq!(merged["requests"], 6, "{merged}");
    for (r, s) in parts.iter().enumerate() {
        assert_eq!(s["workload"]["trace_rows"], 2, "{s}");
        // Rank r sends rows r and r+3, each at its row's time from the common start.
        let mut sent: Vec<(u64, f64)> = of_kind(&records, "request")
            .into_iter()
            .filter(|q| q["labels"]["rank"] == r.to_string().as_str())
            .map(|q| {
                (
                    q["prompt_tokens_target"].as_u64().unwrap(),
                    q["intended_ms"].as_f64().unwrap(),
                )
            })
            .collect();
        sent.sort_by_key(|a| a.0);
        let r = r as u64;
        let want = [(40 + r, 100.0 * r as f64), (43 + r, 100.0 * (r + 3) as f64)];
        assert_eq!(sent.len(), 2, "rank {r}: {sent:?}");
        for ((len, at), (want_len, want_at)) in sent.iter().zip(want) {
            assert_eq!(*len, want_len, "rank {r}: {sent:?}");
            assert!((at - want_at).abs() < 1e-6, "rank {r}: {sent:?}");
        }
    }
    // Equal hash ids name equal words on every rank: the first block is common to all.
    let prompts: Vec<Vec<String>> = srv
        .generations()
        .iter()
        .map(|b| {
            b["prompt"]
                .as_str()
                .unwrap()
                .split(' ')
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(prompts.len(), 6);
    for p in &prompts[1..] {
        let common = p
            .iter()
            .zip(&prompts[0])
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            common >= 16,
            "{common} words shared: {p:?} vs {:?}",
            prompts[0]
        );
    }
}

#[test]
fn flush_cache_as_ranks_is_rank_0s_alone_before_the_common_start() {
    let _one = one_job();
    let srv = server::paced(2, 1);
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--engine",
        "vllm",
        "--flush-cache",
        "-c",
        "3,6",
        "-n",
        "6",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ]);
    // Per point: one reset, then the point's six requests from all ranks.
    let order: Vec<String> = srv
        .captured()
        .into_iter()
        .map(|c| c.path)
        .filter(|p| p == "/reset_prefix_cache" || p == "/v1/completions")
        .collect();
    let point: Vec<&str> = std::iter::once("/reset_prefix_cache")
        .chain(std::iter::repeat_n("/v1/completions", 6))
        .collect();
    assert_eq!(order, [point.clone(), point].concat());
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 8, "3 parts and the merged one, per point");
    for s in summaries {
        let flushed = match s["labels"]["rank"].as_str() {
            Some("0") | None => json!(true),
            Some(_) => Value::Null,
        };
        assert_eq!(s["workload"]["cache_flushed"], flushed, "{s}");
    }
}
