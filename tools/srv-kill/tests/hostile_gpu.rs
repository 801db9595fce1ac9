//! srv-kill against an nvidia-smi that is not well (tried-to-break-it-3.md G9, G10, G2 and
//! issue 23 item 13): one that hangs (a wedged driver, the very case a kill is for), one that
//! prints without end, one that exits 1 and one that lost a GPU, here and over the loopback
//! sshd. The kill always happens; the GPU check is bounded by `--gpu-wait` and what went wrong
//! with it is a warning in the kill record; no run of the stand-in is left behind.

use std::process::{Command, Output};
use std::time::Duration;
use testkit::smi::{HostileSmi, Smi};
use testkit::stderr;
use testkit::{Guard, Run, json_lines, sshd, wait_gone};

/// A process standing for a server.
fn server() -> Guard {
    let mut c = Command::new("sh");
    c.arg("-c").arg("sleep 60");
    Guard::spawn(c)
}

/// Where srv-kill runs: here with the stand-in first on PATH, or over SSH naming it.
#[derive(Clone, Copy, Debug)]
enum Via {
    Here,
    Ssh,
}

/// srv-kill --pid PID with `smi` (how long it took is the Run's `took`).
fn srv_kill(smi: &HostileSmi, via: Via, pid: u32, extra: &[&str]) -> Run {
    let pid = pid.to_string();
    let c = testkit::call("srv-kill")
        .args(["--pid", &pid, "--grace", "1s"])
        .args(extra);
    match via {
        Via::Here => c.env("PATH", smi.path()),
        Via::Ssh => {
            let s = sshd();
            c.args(s.host_flags())
                .args(["--nvidia-smi"])
                .arg(smi.program())
        }
    }
    .run()
}

/// The one kill record, checked to say the kill itself went as asked.
fn killed(out: &Output, pid: u32) -> serde_json::Value {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let k = json_lines(&out.stdout).remove(0);
    assert_eq!(k["ok"], true, "{k}");
    assert!(testkit::matched_pids(&k).contains(&pid), "{k}");
    assert!(
        wait_gone(&[pid], Duration::from_secs(2)),
        "server alive: {k}"
    );
    k
}

fn warning(k: &serde_json::Value) -> &str {
    k["gpu_warning"]
        .as_str()
        .unwrap_or_else(|| panic!("no gpu_warning in {k}"))
}

#[test]
fn a_hung_nvidia_smi_does_not_delay_the_kill() {
    for via in [Via::Here, Via::Ssh] {
        let smi = HostileSmi::new(Smi::Hangs);
        let s = server();
        let out = srv_kill(&smi, via, s.pid(), &["--gpu-wait", "3s"]);
        let took = out.took;
        let k = killed(&out, s.pid());
        assert!(
            warning(&k).contains("did not finish within 3s"),
            "{via:?}: {k}"
        );
        assert!(k.get("gpu_released").is_none(), "unknown, not claimed: {k}");
        assert!(
            stderr(&out).contains("GPU check: ") && stderr(&out).contains("did not finish"),
            "{}",
            stderr(&out)
        );
        // --gpu-wait 3s, --grace 1s: well within a minute even on a loaded machine.
        assert!(took < Duration::from_secs(60), "{via:?}: {took:?}");
        assert!(!smi.runs().is_empty(), "the stand-in was asked");
        assert!(smi.none_left_running(Duration::from_secs(10)), "{via:?}");
    }
}

#[test]
fn an_endless_or_failing_nvidia_smi_is_a_warning_in_the_kill_record() {
    let cases = [
        (Smi::PrintsForever, "printed more than 1024 KiB"),
        (Smi::Fails, "exited 1: NVIDIA-SMI has failed"),
    ];
    for via in [Via::Here, Via::Ssh] {
        for (kind, says) in cases {
            let smi = HostileSmi::new(kind);
            let s = server();
            let out = srv_kill(&smi, via, s.pid(), &["--gpu-wait", "3s"]);
            let took = out.took;
            let k = killed(&out, s.pid());
            assert!(warning(&k).contains(says), "{via:?} {kind:?}: {k}");
            assert!(k.get("gpu_released").is_none(), "{k}");
            assert!(took < Duration::from_secs(60), "{via:?} {kind:?}: {took:?}");
            assert!(
                smi.none_left_running(Duration::from_secs(10)),
                "{via:?} {kind:?}"
            );
        }
    }
}

#[test]
fn a_lost_gpu_is_named_and_the_memory_lists_stay_aligned_by_index() {
    let smi = HostileSmi::new(Smi::LostGpu0);
    let s = server();
    let out = srv_kill(&smi, Via::Here, s.pid(), &["--gpu-wait", "2s"]);
    let k = killed(&out, s.pid());
    const MIB: u64 = 1 << 20;
    // GPU 0 gave nothing: its place stays, so GPU 1 is still second in both lists.
    let aligned = serde_json::json!([null, 2000 * MIB]);
    assert_eq!(k["gpu_used_before_bytes"], aligned, "{k}");
    assert_eq!(k["gpu_used_after_bytes"], aligned, "{k}");
    let w = warning(&k);
    assert!(
        w.contains("exited 255: Unable to determine the device handle for GPU0000:3B:00.0"),
        "{w}"
    );
    assert!(!w.contains("no nvidia-smi"), "{w}");
}
