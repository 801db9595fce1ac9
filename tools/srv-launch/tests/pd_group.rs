//! `srv-launch ENGINE --pd xPyD`: a disaggregated prefill/decode group launched as one unit,
//! with real srv-sim members (its `--pd-role`s) on 127.0.0.1: every member's record, a
//! completion through the proxy, srv-kill taking the whole group, a member that fails taking
//! the started ones down, and the GPUs split per member.

use servbench::record::{KillRecord, PdRole, ServerRecord};
use std::time::Duration;
use testkit::{alive, http, json_body, wait_gone};

/// Stops a launched group however the test ends (srv-kill reads its records).
struct Stop(String);

impl Drop for Stop {
    fn drop(&mut self) {
        testkit::call("srv-kill")
            .args(["--missing-ok", "--grace", "2s"])
            .stdin(self.0.clone())
            .run();
    }
}

fn roles(records: &[ServerRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let pd = r.pd.as_ref().expect("every member has pd");
            format!("{}{}", pd.role, pd.index)
        })
        .collect()
}

#[test]
fn a_group_serves_through_its_proxy_and_srv_kill_takes_every_member() {
    let dir = tempfile::tempdir().unwrap();
    let launched = testkit::call("srv-launch")
        .args(["sim", "--pd", "2p1d", "--label", "run=pd"])
        .args(["--log", dir.path().join("g.log").to_str().unwrap()])
        .run_ok();
    let _stop = Stop(launched.out());
    let servers: Vec<ServerRecord> = launched.of();
    assert_eq!(
        roles(&servers),
        ["prefill0", "prefill1", "decode0", "proxy0"],
        "{}",
        launched.out()
    );
    let group = &servers[0].pd.as_ref().unwrap().group;
    let mut ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    ports.dedup();
    assert_eq!(ports.len(), 4, "a port each: {ports:?}");
    for s in &servers {
        let pd = s.pd.as_ref().unwrap();
        assert_eq!(&pd.group, group);
        assert_eq!(pd.layout.to_string(), "2p1d");
        assert_eq!(s.labels["pd"], "2p1d");
        assert_eq!(s.labels["pd_role"], pd.role.to_string());
        assert_eq!(s.labels["run"], "pd");
        assert_eq!(s.engine.as_str(), "sim");
        assert!(alive(s.pid), "{} runs", s.name.as_deref().unwrap_or(""));
        // Each member's log beside --log, named for it.
        assert!(
            s.log.ends_with(&format!(".{}{}", pd.role, pd.index)),
            "{}",
            s.log
        );
    }
    // The proxy is told every member; the members get their role.
    let proxy = &servers[3];
    for m in &servers[..3] {
        assert!(
            proxy.command.contains(&m.url),
            "{} in {}",
            m.url,
            proxy.command
        );
        let role = m.pd.as_ref().unwrap().role.to_string();
        assert!(m.argv.windows(2).any(|w| w == ["--pd-role", role.as_str()]));
    }
    assert!(launched.err().contains(&format!("load {}", proxy.url)));

    let (status, body) = http(
        &proxy.url,
        "POST",
        "/v1/completions",
        Some(&serde_json::json!({
            "model": proxy.served_model,
            "prompt": "hello there",
            "max_tokens": 4
        })),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_body(&body)["usage"]["completion_tokens"], 4, "{body}");

    let killed = testkit::call("srv-kill").stdin(launched.out()).run_ok();
    let kills: Vec<KillRecord> = killed.of();
    assert_eq!(kills.len(), 4, "a kill record per member");
    for (k, s) in kills.iter().zip(&servers) {
        assert!(k.ok, "{k:?}");
        let pd = s.pd.as_ref().unwrap();
        assert_eq!(
            k.target,
            format!(
                "server sim {}{} pid {} port {}",
                pd.role, pd.index, s.pid, s.port
            )
        );
        assert_eq!(k.port, Some(s.port));
        assert_eq!(k.port_free, Some(true));
        assert_eq!(k.labels["pd_role"], s.labels["pd_role"]);
    }
    let pids: Vec<u32> = servers.iter().map(|s| s.pid).collect();
    assert!(wait_gone(&pids, Duration::from_secs(10)), "{pids:?}");
}

/// The proxy's port is taken: the prefill and decode servers were ready by then, and are
/// stopped; the error names the member that failed.
#[test]
fn a_member_that_fails_takes_the_started_ones_down_and_is_named() {
    let port = testkit::free_port();
    let _holder = testkit::http_server(port);
    let run = testkit::call("srv-launch")
        .args(["sim", "--pd", "1p1d", "--port", &port.to_string()])
        .run();
    assert_eq!(run.code(), Some(2), "{}", run.err());
    assert!(run.out().is_empty(), "no record: {}", run.out());
    let err = testkit::the_error_line(&run.err()).to_string();
    assert!(err.contains("the group's proxy0 failed"), "{err}");
    assert!(err.contains(&format!("port {port}")), "{err}");
    // Both started members, each killed by pid.
    let pids: Vec<u32> = ["prefill0: killed it (pid ", "decode0: killed it (pid "]
        .iter()
        .map(|at| {
            let rest = &err[err.find(at).unwrap_or_else(|| panic!("{at} in {err}")) + at.len()..];
            rest[..rest.find(')').unwrap()].parse().unwrap()
        })
        .collect();
    assert!(wait_gone(&pids, Duration::from_secs(10)), "{pids:?}");
}

#[test]
fn gpus_are_split_per_member_in_start_order_and_a_wrong_count_is_refused() {
    let launched = testkit::call("srv-launch")
        .args(["sim", "--pd", "2p1d", "--tp", "2", "--gpus", "0,1,2,3,4,5"])
        .run_ok();
    let _stop = Stop(launched.out());
    let servers: Vec<ServerRecord> = launched.of();
    let gpus: Vec<Option<&str>> = servers.iter().map(|s| s.gpus.as_deref()).collect();
    assert_eq!(gpus, [Some("0,1"), Some("2,3"), Some("4,5"), None]);
    assert!(servers[..3].iter().all(|s| s.labels["tp"] == "2"));
    assert_eq!(
        servers.last().unwrap().pd.as_ref().unwrap().role,
        PdRole::Proxy
    );
    testkit::call("srv-kill").stdin(launched.out()).run_ok();

    for (args, says) in [
        (
            &["sim", "--pd", "1p1d", "--tp", "2", "--gpus", "0,1,2"][..],
            "--pd 1p1d with --tp 2 --pp 1 needs 4 GPUs (2 servers of 2)",
        ),
        (&["sim", "--pd", "0p1d"][..], "1 to 64"),
        (&["sim", "--pd", "1d1p"][..], "write xPyD"),
        (
            &["llama-cpp", "--model", "m.gguf", "--pd", "1p1d"][..],
            "llama-cpp has no disaggregated prefill/decode mode: --pd takes sglang, vllm, sim",
        ),
    ] {
        let run = testkit::call("srv-launch").args(args).run();
        assert_eq!(run.code(), Some(2), "{args:?}: {}", run.err());
        assert!(run.err().contains(says), "{args:?}: {}", run.err());
        assert!(run.out().is_empty());
    }
}

/// The commands a group runs, without starting it: one argv per member, in start order, the
/// recipe's flags before the user's (which may override them).
#[test]
fn dry_run_prints_every_members_command_with_the_recipes_flags_first() {
    let run = testkit::call("srv-launch")
        .args(["vllm", "--model", "m", "--pd", "1p1d", "--dry-run"])
        .args([
            "--log",
            "/tmp/srv-launch-test/g.log",
            "--",
            "--max-model-len",
            "2048",
        ])
        .run_ok();
    let lines: Vec<Vec<String>> = run
        .out()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", run.out());
    for member in &lines[..2] {
        assert_eq!(member[..3], ["vllm", "serve", "m"]);
        let at = member
            .iter()
            .position(|a| a == "--kv-transfer-config")
            .expect("the connector");
        let cfg: serde_json::Value = serde_json::from_str(&member[at + 1]).unwrap();
        assert_eq!(cfg["kv_connector"], "ExampleConnector");
        let kv = cfg["kv_connector_extra_config"]["shared_storage_path"]
            .as_str()
            .unwrap();
        assert!(
            kv.starts_with("/tmp/srv-launch-test/pd-") && kv.ends_with("-kv"),
            "{kv}"
        );
        assert_eq!(member[member.len() - 2..], ["--max-model-len", "2048"]);
    }
    let proxy = lines[2].join(" ");
    assert!(proxy.contains("srv-sim --pd-role proxy"), "{proxy}");
    assert!(!proxy.contains("--max-model-len"), "{proxy}");
}
