//! `--comm-from` with a host record: the allreduce of the TP group follows the GPUs given on
//! the box srv-launch recorded (the 8-GPU dual-socket PCIe sample of testkit::host_box): the
//! suggested TP-4 group is one socket's four GPUs, and its dry run is faster than a TP-4 group
//! across the sockets.

use servbench::record::{CommSource, SimPlanRecord};
use testkit::host_box::{Fabric, HostBox};
use testkit::run_ok;

/// A server record of the stand-in box, written by srv-launch (and its server stopped).
fn host_record(dir: &std::path::Path) -> String {
    let b = HostBox::new(Fabric::DualSocketPcie, false);
    let path = dir.join("server.jsonl");
    testkit::sh_ok(&format!(
        "srv-launch sim --tp 4 --host-root '{}' --nvidia-smi '{}' | srv-kill > {}",
        b.root(),
        b.program(),
        path.display()
    ));
    path.display().to_string()
}

fn plan(extra: &[&str]) -> SimPlanRecord {
    let mut args = vec![
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "rtx-pro-6000",
        "--tp",
        "4",
        "--dry-run",
    ];
    args.extend_from_slice(extra);
    run_ok("srv-sim", &args).one::<SimPlanRecord>()
}

#[test]
fn the_suggested_tp4_group_is_one_socket_and_its_dry_run_beats_a_group_across_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_record(dir.path());
    let best = plan(&["--comm-from", &host]);
    assert_eq!(
        best.comm_source,
        CommSource::Topology(format!("{host} (GPUs 0,1,2,3, one socket)")),
        "the best-connected 4 GPUs: {best:?}"
    );
    let across = plan(&["--comm-from", &host, "--tp-gpus", "0,1,4,5"]);
    assert_eq!(
        across.comm_source,
        CommSource::Topology(format!("{host} (GPUs 0,1,4,5, across sockets)"))
    );
    assert!(
        across.allreduce_us > best.allreduce_us,
        "{} us across sockets, {} us on one",
        across.allreduce_us,
        best.allreduce_us
    );
    assert!(
        across.decode_step_ms > best.decode_step_ms,
        "{} ms across sockets, {} ms on one",
        across.decode_step_ms,
        best.decode_step_ms
    );
    assert!(
        across
            .comm_level
            .as_deref()
            .unwrap()
            .starts_with("cross-socket (GPUs 0,1,4,5"),
        "{:?}",
        across.comm_level
    );
    // One socket's group costs what the card's own model gives 4 consecutive GPUs.
    let card = plan(&[]);
    assert_eq!(best.allreduce_us, card.allreduce_us);
    // A group that is not --tp GPUs, or GPUs not on the box, is refused naming the flag.
    let bad = testkit::run(
        "srv-sim",
        &[
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "rtx-pro-6000",
            "--tp",
            "4",
            "--dry-run",
            "--comm-from",
            &host,
            "--tp-gpus",
            "0,9,2,3",
        ],
    );
    assert_eq!(bad.code(), Some(2), "{}", bad.err());
    assert!(
        bad.err()
            .contains("--tp-gpus: GPU 9 is not in the host's topology matrix"),
        "{}",
        bad.err()
    );
}
