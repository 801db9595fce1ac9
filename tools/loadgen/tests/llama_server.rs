//! `--flush-cache` on a real engine: llama.cpp's llama-server (scripts/setup/llama-server.sh, a
//! tiny random-weights GGUF), launched by srv-launch, its server record telling loadgen the
//! engine. With `--slot-save-path` every slot is erased before each point; without it the
//! server refuses, and loadgen says so once, with the fix. And conversations (`--turns`) on it.

use serde_json::Value;
use testkit::{json_lines, of_kind, setup_env, sh};

/// `srv-launch llama-cpp ... -- EXTRA | loadgen LOADGEN | srv-kill`: the records and stderr.
fn pipeline(extra: &str, loadgen: &str) -> (Vec<Value>, String) {
    let server = setup_env("SERVBENCH_LLAMA_SERVER", "llama-server");
    let model = setup_env("SERVBENCH_TINY_GGUF", "llama-server");
    let out = sh(&format!(
        "srv-launch llama-cpp --bin '{server}' --model '{model}' --timeout 5m \
           -- -t 1 -c 2048 --parallel 2 --cache-ram 0 {extra} \
         | loadgen {loadgen} | srv-kill"
    ));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (json_lines(&out.stdout), err)
}

#[test]
fn flush_cache_erases_llama_server_slots_before_each_point() {
    let dir = tempfile::tempdir().unwrap();
    let load = "--flush-cache -c 1,2 -n 2 --input-len 16 --max-tokens 2 --no-requests";
    let (records, err) = pipeline(
        &format!("--slot-save-path '{}'", dir.path().display()),
        load,
    );
    assert!(!err.contains("--flush-cache"), "{err}");
    let s = of_kind(&records, "summary");
    assert_eq!(s.len(), 2, "{records:?}");
    for s in &s {
        assert_eq!(s["workload"]["cache_flushed"], true, "{s}");
        assert_eq!(s["ok"], 2, "{s}");
        assert_eq!(s["labels"]["engine"], "llama-cpp", "{s}");
    }
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "kill" && r["ok"] == true)
    );

    // Without --slot-save-path llama-server refuses to erase: one warning naming the fix, and
    // the summaries say the cache was not emptied.
    let (records, err) = pipeline("", load);
    assert_eq!(err.matches("--flush-cache").count(), 1, "{err}");
    assert!(
        err.contains("HTTP 501") && err.contains("--slot-save-path"),
        "{err}"
    );
    let s = of_kind(&records, "summary");
    assert_eq!(s.len(), 2);
    assert!(
        s.iter().all(|s| s["workload"]["cache_flushed"] == false),
        "{s:?}"
    );
}

/// A 3-turn conversation on the real llama-server, chat and completions: each turn resends the
/// history, llama-server counts it (prompt tokens grow by the reply and a new message) and
/// reports the slot's cache serving the earlier turns (`prompt_tokens_details.cached_tokens`).
/// One slot and one session at a time: which slot llama-server gives a turn is its own choice,
/// and a turn sent to another session's slot finds nothing cached.
#[test]
fn three_turn_conversation_on_llama_server_resends_the_history() {
    for api in ["chat", "completions"] {
        let (records, _) = pipeline(
            "--parallel 1",
            &format!("--api {api} -c 1 -n 2 --turns 3 --input-len 40 --max-tokens 4"),
        );
        testkit::check_conversation(&records, 2);
        assert!(
            records
                .iter()
                .any(|r| r["kind"] == "kill" && r["ok"] == true)
        );
    }
}
