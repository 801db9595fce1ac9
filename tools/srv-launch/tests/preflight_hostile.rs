//! The pre-flight on a box that answers nonsense (round 4's HR and HP cases): a host file that
//! never ends or never answers costs only itself, named in `host.unreadable`; readings no GPU
//! can have are unreadable, not findings; thousands of foreign processes are one warning per
//! GPU; a `topo -m` that lists a GPU twice is no topology.

use std::path::{Path, PathBuf};
use testkit::host_box::{Fabric, HostBox};
use testkit::json_lines;
use testkit::servers::srv_kill;

fn launch(b: &HostBox, gpus: &str, tp: &str, extra: &[&str]) -> testkit::Run {
    testkit::call("srv-launch")
        .args(["sim", "--gpus", gpus, "--tp", tp, "--host-root", &b.root()])
        .args(extra)
        .env("PATH", b.path())
        .run()
}

/// The stand-in nvidia-smi's sample `name` (gpus.csv, apps.csv, topo.txt).
fn smi_file(b: &HostBox, name: &str) -> PathBuf {
    b.0.dir.path().join("smi").join(name)
}

fn host_file(b: &HostBox, rel: &str) -> PathBuf {
    Path::new(&b.root()).join(rel)
}

fn pre_flight_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains("pre-flight:"))
        .map(String::from)
        .collect()
}

/// A launch that succeeded: its record (the server killed again) and its stderr.
fn launched(out: testkit::Run) -> (serde_json::Value, String) {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let r = json_lines(&out.stdout).remove(0);
    srv_kill(&r, &[]);
    (r, err)
}

#[test]
fn hr_zero_a_host_file_without_end_costs_only_itself() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    for f in ["proc/cpuinfo", "proc/meminfo"] {
        std::fs::remove_file(host_file(&b, f)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", host_file(&b, f)).unwrap();
    }
    let (r, err) = launched(launch(&b, "0,1", "2", &[]));
    let h = &r["env"]["host"];
    // What /dev/zero stood for is absent; every other file was still read.
    assert!(h.get("cpu_count").is_none(), "{h}");
    assert!(h.get("mem_total_bytes").is_none(), "{h}");
    assert_eq!(
        h["cpu_governors"],
        serde_json::json!(["performance"]),
        "{h}\n{err}"
    );
    assert_eq!(h["numa_nodes"], 2, "{h}");
    assert_eq!(h["thp"], "madvise", "{h}");
    assert_eq!(h["cpufreq_driver"], "amd-pstate-epp", "{h}");
    assert_eq!(h["gpus"].as_array().unwrap().len(), 8, "{h}");
}

#[test]
fn hr_fifo_a_host_file_that_never_answers_is_named_in_unreadable() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let cpuinfo = host_file(&b, "proc/cpuinfo");
    std::fs::remove_file(&cpuinfo).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&cpuinfo)
        .status()
        .unwrap();
    assert!(made.success());
    let (r, err) = launched(launch(&b, "0,1", "2", &[]));
    let h = &r["env"]["host"];
    let unreadable: Vec<&str> = h["unreadable"]
        .as_array()
        .unwrap_or_else(|| panic!("no unreadable: {h}"))
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let want = format!(
        "host file {}: no answer within 2 s",
        cpuinfo.to_str().unwrap()
    );
    assert_eq!(unreadable, [want.as_str()], "{h}");
    assert!(
        err.contains(&format!("pre-flight: could not read the host: {want}")),
        "{err}"
    );
    assert!(h.get("cpu_count").is_none(), "{h}");
    assert_eq!(h["mem_total_bytes"], 1584839424u64 * 1024, "{h}");
    assert_eq!(h["cpu_governors"], serde_json::json!(["performance"]));
    assert_eq!(h["numa_balancing"], false, "{h}");
}

#[test]
fn hp_pcie_a_link_above_its_maximum_or_of_width_0_is_unreadable_not_a_warning() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let rows = testkit::host_box::gpu_rows(Fabric::DualSocketPcie, false)
        .replacen("4, 4, 16, 16,", "99, 4, 0, 16,", 1)
        .replacen("4, 4, 16, 16,", "5, 4, 32, 16,", 1);
    std::fs::write(smi_file(&b, "gpus.csv"), rows).unwrap();
    let (r, err) = launched(launch(&b, "0,1", "2", &[]));
    assert!(!err.contains("PCIe link runs at"), "{err}");
    let h = &r["env"]["host"];
    for g in 0..2 {
        let gpu = &h["gpus"][g];
        assert!(gpu.get("pcie_gen_current").is_none(), "{gpu}");
        assert!(gpu.get("pcie_width_max").is_none(), "{gpu}");
    }
    assert_eq!(h["gpus"][2]["pcie_gen_current"], 4, "the sane GPUs kept");
    let unreadable = h["unreadable"].to_string();
    assert!(
        unreadable.contains("GPU 0: nvidia-smi gave a PCIe link of Gen99 x0 against a maximum of Gen4 x16, which no link is; left out"),
        "{unreadable}"
    );
    assert!(
        unreadable.contains(
            "GPU 1: nvidia-smi gave a PCIe link of Gen5 x32 against a maximum of Gen4 x16"
        ),
        "{unreadable}"
    );
}

#[test]
fn hp_mem_memory_used_past_a_pebibyte_is_left_out_and_named() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let rows = testkit::host_box::gpu_rows(Fabric::DualSocketPcie, false);
    let mut lines: Vec<String> = rows.lines().map(String::from).collect();
    lines[0] = lines[0].replace("[N/A], 0", "[N/A], 1e300");
    std::fs::write(smi_file(&b, "gpus.csv"), lines.join("\n") + "\n").unwrap();
    let (r, _) = launched(launch(&b, "0,1", "2", &[]));
    let h = &r["env"]["host"];
    assert!(h["gpus"][0].get("mem_used_bytes").is_none(), "{h}");
    assert_eq!(h["gpus"][1]["mem_used_bytes"], 0, "{h}");
    assert!(
        h["unreadable"]
            .to_string()
            .contains("GPU 0: nvidia-smi gave more than 1 PiB of memory used; left out"),
        "{h}"
    );
}

#[test]
fn hp_apps_thousands_of_foreign_processes_are_one_warning_per_gpu() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let apps: String = (1..=5000)
        .map(|i| format!("00000000:37:00.0, {}, 100, python3\n", 100000 + i))
        .chain(std::iter::once(
            "00000000:47:00.0, 777, 2048, trainer\n".to_string(),
        ))
        .collect();
    std::fs::write(smi_file(&b, "apps.csv"), apps).unwrap();
    let out = launch(&b, "2,3", "2", &["--strict-preflight"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let lines = pre_flight_lines(&out.stderr);
    let on_2: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("GPU 2 already runs"))
        .collect();
    assert_eq!(on_2.len(), 1, "{err}");
    assert!(
        on_2[0].contains(
            "GPU 2 already runs 5000 processes: pid 100001 (python3), pid 100002 (python3), pid 100003 (python3), pid 100004 (python3) and 4996 more, holding 488.3 GiB in all"
        ),
        "{}",
        on_2[0]
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("GPU 3 already runs pid 777 (trainer) holding 2.0 GiB")),
        "{err}"
    );
    assert!(
        err.contains("2 pre-flight warning(s) (foreign_gpu_process, foreign_gpu_process)"),
        "{err}"
    );
    assert!(err.len() < 8192, "stderr stays short: {} bytes", err.len());
}

#[test]
fn hp_topo_dup_a_matrix_naming_a_gpu_twice_is_no_topology() {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let topo = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\t0-63\t0\nGPU0\tNV18\t X \t0-63\t0\n\nLegend:\n";
    std::fs::write(smi_file(&b, "topo.txt"), topo).unwrap();
    let (r, _) = launched(launch(&b, "0,1", "2", &[]));
    let h = &r["env"]["host"];
    assert!(h.get("topology").is_none(), "{h}");
    assert_eq!(h["gpus"].as_array().unwrap().len(), 8, "{h}");
}
