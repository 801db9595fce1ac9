//! The host in the record and the pre-flight verdict: srv-launch reads the box before the
//! server starts (stand-in /proc and /sys samples under --host-root, a stand-in nvidia-smi
//! answering in nvidia-smi's own shapes: this machine has no GPU), here and over the loopback
//! sshd. A clean box is recorded whole and warns of nothing; a dirty one warns of each thing
//! once; --strict-preflight refuses it with exit 3 and starts nothing.

use testkit::host_box::{Fabric, HostBox};
use testkit::servers::srv_kill;
use testkit::{json_lines, sshd};

fn launch(b: &HostBox, gpus: &str, tp: &str, extra: &[&str]) -> testkit::Run {
    testkit::call("srv-launch")
        .args(["sim", "--gpus", gpus, "--tp", tp, "--host-root", &b.root()])
        .args(extra)
        .env("PATH", b.path())
        .run()
}

/// The pre-flight warnings srv-launch printed.
fn warnings(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("warning: pre-flight:"))
        .map(String::from)
        .collect()
}

#[test]
fn a_clean_dual_socket_box_is_recorded_whole_and_warns_of_nothing() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let out = launch(&b, "0,1,2,3", "4", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(warnings(&out.stderr).is_empty(), "{err}");
    let r = &json_lines(&out.stdout)[0];
    let h = &r["env"]["host"];
    assert_eq!(h["cpu_count"], 4, "{h}");
    assert_eq!(h["cpu_sockets"], 2, "{h}");
    assert_eq!(h["cpufreq_driver"], "amd-pstate-epp", "{h}");
    assert_eq!(
        h["cpu_governors"],
        serde_json::json!(["performance"]),
        "{h}"
    );
    assert_eq!(h["cpu_boost"], true, "{h}");
    assert_eq!(h["numa_nodes"], 2, "{h}");
    assert_eq!(h["numa_balancing"], false, "{h}");
    assert_eq!(h["thp"], "madvise", "{h}");
    assert_eq!(h["mem_total_bytes"], 1584839424u64 * 1024, "{h}");
    assert!(
        h["kernel_cmdline"].as_str().unwrap().contains("iommu=pt"),
        "{h}"
    );
    assert!(
        h.get("cstate_limits").is_none(),
        "no limit on a clean box: {h}"
    );
    let gpus = h["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8, "every GPU of the box: {h}");
    let g4 = &gpus[4];
    assert_eq!(g4["pci_bus_id"], "00000000:57:00.0");
    assert_eq!(g4["pcie_gen_current"], 4);
    assert_eq!(g4["pcie_width_max"], 16);
    assert_eq!(g4["numa_node"], 1);
    assert_eq!(g4["cpu_affinity"], "32-63,96-127");
    assert_eq!(g4["persistence_mode"], true);
    assert_eq!(g4["ecc_enabled"], true);
    assert_eq!(g4["sm_clock_max_mhz"], 2520.0);
    assert_eq!(g4["throttle_reasons"], serde_json::json!(["gpu_idle"]));
    assert_eq!(g4["power_limit_w"], 350.0);
    // [N/A] fields are absent, not guessed.
    assert!(g4.get("mig_enabled").is_none(), "{g4}");
    assert!(gpus[6].get("ecc_enabled").is_none(), "{}", gpus[6]);
    let t = &h["topology"];
    assert_eq!(t["gpus"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(
        t["links"][0][1], "PIX",
        "colour codes and the NIC column gone: {t}"
    );
    assert_eq!(t["links"][0][4], "SYS");
    assert_eq!(t["links"][3][3], "X");
    assert_eq!(t["p2p_read"][0][7], "OK");
    assert_eq!(t["p2p_write"][7][0], "OK");
    srv_kill(r, &[]);
}

#[test]
fn each_preflight_warning_fires_once_on_a_dirty_box_over_ssh() {
    let b = HostBox::new(Fabric::DualSocketPcie, true);
    let s = sshd();
    let ssh = s.host_flags();
    let out = testkit::call("srv-launch")
        .args(["sim", "--gpus", "0,1,4,5", "--tp", "4"])
        .args(ssh)
        .args(["--bin", testkit::bin("srv-sim").to_str().unwrap()])
        .args(["--nvidia-smi", &b.program(), "--host-root", &b.root()])
        .run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let w = warnings(&out.stderr);
    let one = |needle: &str| {
        let n = w.iter().filter(|l| l.contains(needle)).count();
        assert_eq!(n, 1, "{needle} once in:\n{err}");
    };
    one("the CPU governor is powersave");
    one("kernel.numa_balancing is on");
    one("P2P is not supported between GPUs 0-4 (CNS), 0-5 (CNS), 1-4 (CNS), 1-5 (CNS)");
    one("the TP-4 group on GPUs 0,1,4,5 spans sockets while GPUs 0,1,2,3 share one");
    one("GPU 5 is throttled before any load (sw_power_cap)");
    // GPU 3's Gen1 link and pid 4242 on GPU 2 are not this engine's GPUs.
    assert!(!err.contains("GPU 3's PCIe link"), "{err}");
    assert!(!err.contains("pid 4242"), "{err}");
    assert_eq!(w.len(), 5, "{err}");
    let r = &json_lines(&out.stdout)[0];
    let h = &r["env"]["host"];
    assert_eq!(h["numa_balancing"], true, "{h}");
    assert_eq!(
        h["cstate_limits"],
        serde_json::json!(["processor.max_cstate=1"])
    );
    assert_eq!(h["gpus"][3]["pcie_gen_current"], 1, "{h}");
    assert_eq!(h["gpus"][2]["foreign_processes"][0]["pid"], 4242, "{h}");
    assert_eq!(
        h["gpus"][2]["foreign_processes"][0]["used_bytes"],
        20480u64 << 20
    );
    assert_eq!(h["topology"]["p2p_read"][0][4], "CNS");
    srv_kill(r, &ssh);
}

#[test]
fn a_gen1_link_and_a_foreign_process_warn_for_the_gpus_given() {
    let b = HostBox::new(Fabric::DualSocketPcie, true);
    let out = launch(&b, "2,3", "2", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let w = warnings(&out.stderr);
    assert!(
        w.iter().any(|l| l.contains(
            "GPU 3's PCIe link runs at Gen1 x16, below its maximum Gen4 x16: host-to-GPU copies and PCIe P2P get about 12% of the bandwidth"
        )),
        "{err}"
    );
    assert!(
        w.iter()
            .any(|l| l.contains("GPU 2 already runs pid 4242 (python3) holding 20.0 GiB")),
        "{err}"
    );
    // GPUs 2 and 3 share a switch: no socket or P2P warning.
    assert!(
        !err.contains("spans sockets") && !err.contains("P2P is not supported"),
        "{err}"
    );
    srv_kill(&json_lines(&out.stdout)[0], &[]);
}

#[test]
fn strict_preflight_refuses_a_dirty_box_with_exit_3_and_starts_nothing() {
    let b = HostBox::new(Fabric::DualSocketPcie, true);
    let out = launch(&b, "2,3", "2", &["--strict-preflight"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(out.stdout.is_empty(), "no server record: {err}");
    assert!(
        err.contains("error: --strict-preflight: not starting the server on localhost: 4 pre-flight warning(s) (foreign_gpu_process, pcie_link_below_max, powersave_governor, numa_balancing_on)"),
        "{err}"
    );
    assert!(!err.contains(" ready at "), "{err}");
    // A clean box starts under --strict-preflight.
    let clean = HostBox::new(Fabric::DualSocketPcie, false);
    let out = launch(&clean, "0,1,2,3", "4", &["--strict-preflight"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    srv_kill(&json_lines(&out.stdout)[0], &[]);
}

#[test]
fn on_nvswitch_a_group_across_sockets_is_not_warned_of() {
    let b = HostBox::new(Fabric::NvSwitch, false);
    let out = launch(&b, "0,1,4,5", "4", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(warnings(&out.stderr).is_empty(), "{err}");
    let r = &json_lines(&out.stdout)[0];
    assert_eq!(r["env"]["host"]["topology"]["links"][0][7], "NV18");
    assert_eq!(r["env"]["host"]["gpus"][7]["numa_node"], 1);
    srv_kill(r, &[]);
}

#[test]
fn a_box_without_gpus_or_sysfs_records_no_host_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = testkit::call("srv-launch")
        .args(["sim", "--host-root"])
        .arg(dir.path())
        .args(["--nvidia-smi", "/nonexistent/nvidia-smi"])
        .run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(warnings(&out.stderr).is_empty(), "{err}");
    let r = &json_lines(&out.stdout)[0];
    assert!(r["env"].get("host").is_none(), "nothing guessed: {r}");
    srv_kill(r, &[]);
}
