//! GPU telemetry on the GPU host itself through NVML (a stand-in `libnvidia-ml.so.1` built from
//! testkit's fixture, first in LD_LIBRARY_PATH: the H200's recorded figures), and through
//! driver 580's nvidia-smi (strict about its fields as the real one) when one is named: the
//! same figures either way, the energy from NVML's counter or from the sampled power.

use serde_json::Value;
use testkit::nvml::{NVIDIA_SMI_580, NvmlMode, NvmlStandIn};
use testkit::{call, num, of_kind};

/// One point sampling GPU 0 here, with no nvidia-smi on PATH and `extra` flags.
fn point(nvml: &NvmlStandIn, mode: NvmlMode, extra: &[&str]) -> (Value, String) {
    let (_sim, url) = testkit::srv_sim(&[]);
    let empty = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin:/bin", empty.path().display());
    let (code, recs, err) = call("loadgen")
        .args(["--url", &url, "--duration", "1s", "--max-tokens", "16"])
        .args(["--no-requests", "--scrape-interval", "100ms", "-c", "1"])
        .args(["--gpu-host", "localhost", "--gpus", "0"])
        .args(extra)
        .env("PATH", path)
        .envs(nvml.env(mode))
        .run()
        .parts();
    assert_eq!(code, Some(0), "{err}");
    (of_kind(&recs, "summary")[0].clone(), err)
}

/// The H200's recorded figures (gpu-h200/run1-telemetry.txt, q.xml), whichever way read.
fn assert_h200(s: &Value) {
    let g = &s["gpus"][0];
    assert_eq!(g["index"], 0, "{s}");
    assert_eq!(g["name"], "NVIDIA H200", "{s}");
    assert_eq!(num(g, "/util_pct/mean"), 99.0);
    assert_eq!(num(g, "/mem_used_mib/max"), 1101.0, "nvidia-smi's figure");
    assert_eq!(num(g, "/power_w/mean"), 669.4);
    assert_eq!(num(g, "/sm_clock_mhz/mean"), 1515.0);
    assert_eq!(num(g, "/temp_c/max"), 56.0);
    let samples = g["samples"].as_u64().unwrap();
    assert!(samples >= 2, "{g}");
    // The clocks-event reasons (0x4): the software power cap, in every sample.
    let reasons = g["clocks_event_reasons"].as_object().unwrap();
    assert_eq!(reasons.len(), 1, "{g}");
    assert_eq!(reasons["sw_power_cap"], samples, "{g}");
}

#[test]
fn gpu_samples_and_the_energy_counter_come_through_nvml_on_the_gpu_host() {
    let nvml = NvmlStandIn::new();
    let (s, err) = point(&nvml, NvmlMode::H200, &[]);
    assert_h200(&s);
    assert_eq!(s["gpus"][0]["energy_source"], "counter", "{s}");
    assert!(num(&s["gpus"][0], "/energy_j") > 0.0, "{s}");
    assert!(!err.contains("note:"), "{err}");
    let calls = nvml.calls();
    for asked in [
        "nvmlInit_v2",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
    ] {
        assert!(calls.iter().any(|c| c == asked), "{asked} in {calls:?}");
    }
    assert_eq!(calls.last().map(String::as_str), Some("nvmlShutdown"));
}

/// A named nvidia-smi is what runs (NVML is not tried): driver 580's answers every field
/// servbench asks (it exits 2 for any it does not list), and has no energy counter.
#[test]
fn a_named_nvidia_smi_of_driver_580_gives_the_same_figures_and_sampled_power() {
    let nvml = NvmlStandIn::new();
    let (s, err) = point(&nvml, NvmlMode::H200, &["--nvidia-smi", NVIDIA_SMI_580]);
    assert_h200(&s);
    assert_eq!(s["gpus"][0]["energy_source"], "sampled_power", "{s}");
    assert!(s["gpus"][0].get("energy_j").is_none(), "{s}");
    assert!(!err.contains("not a valid field"), "{err}");
    assert!(nvml.calls().is_empty(), "NVML asked: {:?}", nvml.calls());
}

/// NVML's library is there but the driver is not, and no nvidia-smi: one line for the missing
/// telemetry, nothing measured wrongly.
#[test]
fn nvml_without_a_driver_and_no_nvidia_smi_is_one_note() {
    let nvml = NvmlStandIn::new();
    let (s, err) = point(&nvml, NvmlMode::NoDriver, &[]);
    assert!(s.get("gpus").is_none(), "{s}");
    assert_eq!(err.matches("note: no GPU telemetry").count(), 1, "{err}");
    assert!(
        err.contains("NVML (libnvidia-ml.so.1) did not start") && err.contains("no nvidia-smi"),
        "{err}"
    );
    assert_eq!(err.matches("NVML").count(), 1, "{err}");
}

/// NVML's library is there but the driver is not, and driver 580's nvidia-smi is on PATH:
/// nvidia-smi answers in NVML's place, with one line saying why and that the energy is the
/// sampled power's.
#[test]
fn nvml_without_a_driver_falls_back_to_nvidia_smi_on_path_with_one_line() {
    let nvml = NvmlStandIn::new();
    let (_sim, url) = testkit::srv_sim(&[]);
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(NVIDIA_SMI_580, bin.path().join("nvidia-smi")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let (code, recs, err) = call("loadgen")
        .args(["--url", &url, "--duration", "1s", "--max-tokens", "16"])
        .args(["--no-requests", "--scrape-interval", "100ms", "-c", "1"])
        .args(["--gpu-host", "localhost", "--gpus", "0"])
        .env("PATH", path)
        .envs(nvml.env(NvmlMode::NoDriver))
        .run()
        .parts();
    assert_eq!(code, Some(0), "{err}");
    let s = &of_kind(&recs, "summary")[0];
    assert_h200(s);
    assert_eq!(s["gpus"][0]["energy_source"], "sampled_power", "{s}");
    assert_eq!(err.matches("NVML").count(), 1, "{err}");
    assert!(
        err.contains("GPU telemetry through nvidia-smi")
            && err.contains("NVML (libnvidia-ml.so.1) did not start"),
        "{err}"
    );
    assert!(!err.contains("no GPU telemetry"), "{err}");
}
