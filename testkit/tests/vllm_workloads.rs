//! loadgen's workloads on a real vLLM (see vllm.rs): --flush-cache and --prefix-groups against
//! its own prefix counters, and a 3-turn conversation resending the history.

mod real_vllm;

use real_vllm::*;
use std::process::Stdio;
use testkit::of_kind;
use testkit::{free_port, json_lines};

/// loadgen `--flush-cache` and `--prefix-groups` on the real vLLM (its reset endpoint is served
/// with VLLM_SERVER_DEV_MODE=1): the cache is emptied before each point, and vLLM's own prefix
/// counters agree with the hit rate loadgen states. The prefixes are 256 tokens, whole blocks of
/// any usual block size: the CPU build caches in larger blocks than the GPU default of 16 (a
/// 64-token prefix hit nothing there).
#[test]
fn flush_cache_and_prefix_groups_on_the_real_vllm() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers(dir.path().join("server.jsonl"));
    let port = free_port();
    let out = tool("srv-launch")
        .args(["vllm", "--model", &model(), "--port", &port.to_string()])
        .args(["--env", "VLLM_SERVER_DEV_MODE=1", "--timeout", "10m", "--"])
        .args(ENGINE_ARGS)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.path().join("server.jsonl"), &out.stdout).unwrap();
    let r = json_lines(&out.stdout)[0].clone();
    let url = format!("http://127.0.0.1:{port}");
    let counters = || {
        let (_, page) = http(&url, "GET", "/metrics", None);
        (
            metric(&page, "vllm:prefix_cache_queries_total"),
            metric(&page, "vllm:prefix_cache_hits_total"),
        )
    };
    let before = counters();
    let records = loadgen_exact(
        &url,
        &[
            "--engine",
            "vllm",
            "--flush-cache",
            "--prefix-groups",
            "2",
            "--prefix-len",
            "256",
            "--input-len",
            "384",
            "--max-tokens",
            "2",
            "-c",
            "1,2",
            "-n",
            "6",
        ],
    );
    let after = counters();
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 2);
    let mut stated = 0.0;
    for s in &summaries {
        assert_eq!(s["workload"]["cache_flushed"], true, "{s}");
        stated += s["workload"]["prefix_hit_rate_expected"].as_f64().unwrap() / 2.0;
    }
    let measured = (after.1 - before.1) / (after.0 - before.0);
    assert!(
        (measured - stated).abs() < 0.05,
        "vLLM counted a hit rate of {measured:.3}, loadgen stated {stated:.3}"
    );
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
}

/// A 3-turn conversation (`--turns 3`) on the real vLLM, chat and completions: each turn
/// resends the history, vLLM counts it (prompt tokens grow by the reply and a new message) and
/// reports its prefix cache serving the earlier turns (`--enable-prompt-tokens-details`:
/// `usage.prompt_tokens_details.cached_tokens`; its CPU build caches whole 128-token blocks).
#[test]
fn three_turn_conversation_on_the_real_vllm_resends_the_history() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers(dir.path().join("server.jsonl"));
    let port = free_port();
    let mut args = ENGINE_ARGS.to_vec();
    args.push("--enable-prompt-tokens-details");
    let (r, _) = launch(dir.path(), port, &args);
    let url = format!("http://127.0.0.1:{port}");
    let hits = || {
        let (_, page) = http(&url, "GET", "/metrics", None);
        metric(&page, "vllm:prefix_cache_hits_total")
    };
    for api in ["chat", "completions"] {
        let before = hits();
        let records = loadgen_exact(
            &url,
            &[
                "--api",
                api,
                "-c",
                "2",
                "-n",
                "2",
                "--turns",
                "3",
                "--input-len",
                "200",
                "--max-tokens",
                "4",
            ],
        );
        testkit::check_conversation(&records, 2);
        // Turn 1 of each session is exactly on target as vLLM counts it.
        let s = of_kind(&records, "summary")[0];
        assert_eq!(u(&s["prompt_len_exact"]), 2, "{api}: {s}");
        assert!(hits() > before, "{api}: vLLM's prefix cache counted no hit");
    }
    let (code, _, err) = srv_kill(&[], Some(&r));
    assert_eq!(code, Some(0), "{err}");
}
