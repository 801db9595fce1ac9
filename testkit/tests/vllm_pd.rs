//! A real disaggregated 1P1D on vLLM's CPU build (issue 36 item 4): two real vLLM servers with
//! the file-system KV connector (`ExampleConnector`) behind srv-sim's proxy, launched as one
//! group by srv-launch, loaded by loadgen through the proxy, killed as one by srv-kill. The
//! decode server really loads the prefill server's KV cache (its log says so per request; the
//! connector's files are there), each member's `/metrics` is in the summaries by role, and no
//! process of either engine is left. One engine group at a time, every step bounded.

mod real_vllm;

use real_vllm::*;
use serde_json::Value;
use std::time::Duration;
use testkit::{json_lines, of_kind, wait_gone};

#[test]
fn a_real_vllm_1p1d_moves_the_kv_through_files_serves_through_the_proxy_and_dies_as_one() {
    let _one = one_engine_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let group = dir.path().join("group.jsonl");
    let _leftovers = Leftovers(group.clone());
    let log = dir.path().join("g.log");
    // Prompts of 300 tokens: the connector moves whole KV blocks (128 tokens on CPU), so two.
    let out = run_bounded(
        &format!(
            "srv-launch vllm --model {model} --pd 1p1d --timeout 12m --log {log} -- {args} > {group} \
             && loadgen -c 1,2 -n 4 --input-len 300 --max-tokens 8 < {group} > {d}/load.jsonl \
             && srv-kill < {d}/load.jsonl > {d}/kill.jsonl",
            d = dir.path().display(),
            model = model(),
            log = log.display(),
            args = ENGINE_ARGS.join(" "),
            group = group.display(),
        ),
        dir.path(),
        PIPELINE_LIMIT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let records = json_lines(&std::fs::read(dir.path().join("kill.jsonl")).unwrap());

    let servers = of_kind(&records, "server");
    let roles: Vec<&str> = servers
        .iter()
        .map(|s| s["pd"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["prefill", "decode", "proxy"], "{stderr}");
    for s in &servers[..2] {
        assert_eq!(s["engine"], "vllm");
        assert!(
            s["command"].as_str().unwrap().contains("ExampleConnector"),
            "{s}"
        );
    }
    let proxy_command = servers[2]["command"].as_str().unwrap();
    assert!(proxy_command.contains("--pd-role proxy"), "{proxy_command}");

    // Every request answered through the proxy; each side counted its part.
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 2, "{records:?}");
    for s in &summaries {
        assert_eq!((u(&s["ok"]), u(&s["errors"])), (4, 0), "{s}");
        assert_eq!(s["labels"]["pd_role"], "proxy");
        let members = s["pd_members"].as_array().expect("pd_members");
        let side = |role: &str| -> &Value {
            &members
                .iter()
                .find(|m| m["role"] == role)
                .unwrap_or_else(|| panic!("no {role} in {s}"))["server"]
        };
        let (prefill, decode) = (side("prefill"), side("decode"));
        assert_eq!(u(&prefill["requests"]), 4, "{prefill}");
        assert_eq!(u(&prefill["generation_tokens"]), 4, "one token each");
        assert_eq!(u(&decode["requests"]), 4, "{decode}");
        assert_eq!(u(&decode["generation_tokens"]), 4 * 8, "{decode}");
    }

    // The decode server took the prefill's KV cache from the files, not its own prefill.
    let decode_log = std::fs::read_to_string(format!("{}.decode0", log.display())).unwrap();
    let injected = decode_log
        .lines()
        .filter(|l| l.contains("Inject KV cache of 256 tokens"))
        .count();
    assert!(injected >= 8, "a load per measured request: {injected}");
    let kv_files = walk(dir.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .count();
    assert!(kv_files >= 2, "the connector's files: {kv_files}");

    // srv-kill took every member: each tree gone, each port free.
    let kills = of_kind(&records, "kill");
    assert_eq!(kills.len(), 3);
    for (k, s) in kills.iter().zip(&servers) {
        assert_eq!(k["ok"], true, "{k}");
        assert_eq!(k["port_free"], true, "{k}");
        assert!(of_launch(s).is_empty(), "a process of {} left", s["name"]);
        assert!(port_free(u(&s["port"]) as u16));
    }
    let pids: Vec<u32> = kills
        .iter()
        .flat_map(|k| testkit::matched_pids(k))
        .collect();
    assert!(
        pids.len() >= 7,
        "API server, engine core, worker each: {pids:?}"
    );
    assert!(wait_gone(&pids, Duration::from_secs(30)), "{pids:?}");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> impl Iterator<Item = std::path::PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.into_iter()
}
