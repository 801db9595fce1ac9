//! Every field servbench asks nvidia-smi for is one driver 580 lists in `nvidia-smi
//! --help-query-gpu` (recorded on the H200): a field it does not know fails the whole query
//! with exit 2, as driver 580 did for `total_energy_consumption`, and every point lost its
//! counter. The stand-in nvidia-smi the tests use is held to the same list here, as a process.

use servbench::host::smi::{NVIDIA_SMI_QUERIES, OLD_REASONS_FIELD, REASONS_FIELD};
use std::process::Command;
use testkit::nvml::{NVIDIA_SMI_580, listed_query_fields};

#[test]
fn every_field_servbench_asks_nvidia_smi_for_is_one_driver_580_lists() {
    let listed = listed_query_fields();
    assert!(listed.len() > 200, "the recorded list: {}", listed.len());
    for query in NVIDIA_SMI_QUERIES {
        for field in query.split(',') {
            assert!(
                listed.iter().any(|l| l == field),
                "{field} (in {query}) is not a field driver 580's nvidia-smi knows"
            );
        }
    }
    // Both names of the clocks-event reasons answer; the energy counter is no query field.
    for field in [REASONS_FIELD, OLD_REASONS_FIELD] {
        assert!(listed.iter().any(|l| l == field), "{field}");
    }
    assert!(!listed.iter().any(|l| l == "total_energy_consumption"));
}

fn smi(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(NVIDIA_SMI_580).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn driver_580s_nvidia_smi_answers_each_query_and_rejects_an_unlisted_field_with_exit_2() {
    for query in NVIDIA_SMI_QUERIES {
        let (code, out) = smi(&[
            &format!("--query-gpu={query}"),
            "--format=csv,noheader,nounits",
        ]);
        assert_eq!(code, Some(0), "{query}: {out}");
        let cols = out.trim_end().split(", ").count();
        assert_eq!(cols, query.split(',').count(), "{query}: {out}");
    }
    let (code, out) = smi(&[
        "--query-gpu=index,total_energy_consumption",
        "--format=csv,noheader,nounits",
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(
        out.lines().next(),
        Some("Field \"total_energy_consumption\" is not a valid field to query.")
    );
}

/// The host's GPUs as srv-launch's server record reads them, through `smi` at `program`.
fn host_gpus(program: &str) -> servbench::record::HostEnv {
    use servbench::exec::{self, Bounds, SshOptions};
    let local = exec::connect(None, &SshOptions::default()).unwrap();
    let mut host = servbench::record::HostEnv::default();
    let bounds = |cap: usize| Some(Bounds::new(std::time::Duration::from_secs(10), cap));
    servbench::host::smi::read_gpus(&*local, program, &bounds, &mut host);
    host
}

#[test]
fn the_server_records_gpus_read_through_driver_580_name_the_clocks_event_reasons() {
    let host = host_gpus(NVIDIA_SMI_580);
    assert!(host.unreadable.is_empty(), "{:?}", host.unreadable);
    assert_eq!(host.gpus.len(), 1, "{host:?}");
    let g = &host.gpus[0];
    assert_eq!(g.throttle_reasons, Some(vec!["sw_power_cap".to_string()]));
    assert_eq!(g.power_limit_w, Some(700.0));
}

/// A driver from before the rename lists only `clocks_throttle_reasons.active` and refuses the
/// whole query for the new name: asked again by the old one, the reasons are still read.
#[test]
fn a_driver_that_knows_only_the_old_throttle_name_is_asked_again_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let help = std::fs::read_to_string(testkit::nvml::HELP_QUERY_GPU_580).unwrap();
    let older = help.replace(
        "\"clocks_event_reasons.active\" or \"clocks_throttle_reasons.active\"",
        "\"clocks_throttle_reasons.active\"",
    );
    assert_ne!(older, help, "the new name was taken out");
    std::fs::write(dir.path().join("help-query-gpu.txt"), older).unwrap();
    let program = dir.path().join("nvidia-smi");
    std::fs::copy(NVIDIA_SMI_580, &program).unwrap();
    let host = host_gpus(program.to_str().unwrap());
    assert!(host.unreadable.is_empty(), "{:?}", host.unreadable);
    let g = &host.gpus[0];
    assert_eq!(g.throttle_reasons, Some(vec!["sw_power_cap".to_string()]));
}
