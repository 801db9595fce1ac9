//! A disaggregated prefill/decode group through the whole one-line loop (issue 36's
//! acceptance line): `srv-launch sim --pd 1p1d | loadgen -c 1,4,16 | srv-kill | summarize`,
//! with real srv-sim members on 127.0.0.1. loadgen loads the proxy and reads every member's
//! `/metrics` by role; srv-kill takes every member, each port free; nothing is left running.

use servbench::record::{PdRole, Record};
use std::time::Duration;
use testkit::run::in_the_schema;
use testkit::{bash, stderr, wait_gone};

const LOAD: &str = "loadgen -c 1,4,16 -n 16 --max-tokens 16";

#[test]
fn the_acceptance_line_loads_the_proxy_reads_each_member_and_leaves_none_running() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.jsonl");
    // The records, kept with tee for the checks below, and the table a user reads.
    let out = bash(&format!(
        "set -o pipefail; srv-launch sim --pd 1p1d | {LOAD} | srv-kill | tee {r} | summarize",
        r = records.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let text = std::fs::read_to_string(&records).unwrap();
    let (mut servers, mut summaries, mut kills) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        match in_the_schema(line, "the pipeline's records") {
            Record::Server(r) => servers.push(r),
            Record::Summary(r) => summaries.push(*r),
            Record::Kill(r) => kills.push(r),
            _ => {}
        }
    }
    let roles: Vec<PdRole> = servers
        .iter()
        .map(|s| s.pd.as_ref().unwrap().role)
        .collect();
    assert_eq!(roles, [PdRole::Prefill, PdRole::Decode, PdRole::Proxy]);
    let proxy = &servers[2];

    assert_eq!(summaries.len(), 3, "{text}");
    for s in &summaries {
        assert_eq!((s.ok, s.errors), (16, 0), "every request through the proxy");
        assert_eq!(s.labels["pd_role"], "proxy", "loadgen loaded the proxy");
        assert_eq!(s.labels["pd"], "1p1d");
        // Each member's own view: the prefill side made one token a request, the decode
        // side the rest; both saw every request.
        let members: Vec<String> = s
            .pd_members
            .iter()
            .map(|m| format!("{}{}", m.role, m.index))
            .collect();
        assert_eq!(members, ["prefill0", "decode0"], "{s:?}");
        let (prefill, decode) = (&s.pd_members[0], &s.pd_members[1]);
        assert_eq!(prefill.url, servers[0].url);
        let p = prefill.server.as_ref().expect("the prefill's /metrics");
        let d = decode.server.as_ref().expect("the decode's /metrics");
        assert_eq!(p.requests, Some(16), "{p:?}");
        assert_eq!(d.requests, Some(16), "{d:?}");
        assert_eq!(p.generation_tokens, Some(16), "one token each: {p:?}");
        assert_eq!(d.generation_tokens, Some(16 * 16), "{d:?}");
    }

    assert_eq!(kills.len(), 3, "a kill record per member");
    assert!(
        kills.iter().all(|k| k.ok && k.port_free == Some(true)),
        "{kills:?}"
    );
    let pids: Vec<u32> = servers.iter().map(|s| s.pid).collect();
    assert!(wait_gone(&pids, Duration::from_secs(10)), "{pids:?}");

    // The table: a row per member in the kills, and the three points loaded at the proxy.
    for s in &servers {
        let pd = s.pd.as_ref().unwrap();
        let row = format!("server sim {}{} pid {}", pd.role, pd.index, s.pid);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&row) && l.trim_end().ends_with("ok")),
            "{row} ok in:\n{table}"
        );
    }
    assert!(table.contains(&proxy.url), "{table}");
}
