//! The environment srv-launch records once in the `server` record: the engine's version (its
//! `/version`), the GPUs it was given (a stand-in nvidia-smi first on PATH: this machine has no
//! GPU), driver, CUDA, kernel, CPU, host name and the full argv, here and over the loopback sshd.

use std::process::Command;
use testkit::servers::srv_kill;
use testkit::{FakeNvidiaSmi, json_lines, sshd};

fn sh(script: &str) -> String {
    String::from_utf8_lossy(
        &Command::new("sh")
            .args(["-c", script])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string()
}

#[test]
fn the_environment_is_recorded_once_with_the_gpus_the_server_was_given() {
    let smi = FakeNvidiaSmi::new();
    let out = testkit::call("srv-launch")
        .args(["sim", "--gpus", "1", "--", "--seed", "3"])
        .env("PATH", smi.path())
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out.stdout)[0];
    let env = &r["env"];
    assert_eq!(
        env["engine_version"],
        env!("CARGO_PKG_VERSION"),
        "srv-sim's /version: {r}"
    );
    assert_eq!(env["gpu_model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(env["gpu_count"], 1, "only the --gpus given");
    assert_eq!(env["driver_version"], "550.54.15");
    assert_eq!(env["cuda_version"], "12.4");
    assert_eq!(env["kernel"], sh("uname -r").as_str());
    assert_eq!(env["hostname"], sh("hostname").as_str());
    assert!(!env["cpu_model"].as_str().unwrap_or("").is_empty(), "{env}");
    let argv: Vec<&str> = r["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv[0].ends_with("srv-sim"), "{argv:?}");
    assert!(
        argv.ends_with(&["--seed", "3"]),
        "the full flag set: {argv:?}"
    );
    srv_kill(r, &[]);
}

#[test]
fn over_ssh_the_remote_hosts_environment_is_recorded_and_missing_gpus_left_out() {
    let s = sshd();
    let out = testkit::call("srv-launch")
        .args(s.host_flags())
        .args(["--bin", testkit::bin("srv-sim").to_str().unwrap(), "sim"])
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out.stdout)[0];
    let env = &r["env"];
    assert_eq!(env["engine_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(env["kernel"], sh("uname -r").as_str(), "{env}");
    // The remote shell's PATH has no nvidia-smi: no GPU fields, and no failure.
    assert!(env.get("gpu_model").is_none(), "{env}");
    srv_kill(r, &s.host_flags());
}
