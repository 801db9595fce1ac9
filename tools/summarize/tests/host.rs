//! The host record in the report: each server's pre-flight warnings under the servers table
//! (the same srv-launch printed before the server started), and `--compare` naming what
//! differs between two runs' boxes above the table. The runs are real one-line loops on
//! stand-in boxes (testkit::host_box: /proc and /sys samples, a stand-in nvidia-smi).

use testkit::host_box::{Fabric, HostBox};

fn run(dir: &std::path::Path, name: &str, b: &HostBox, gpus: &str) -> String {
    let path = dir.join(name);
    testkit::sh_ok(&format!(
        "srv-launch sim --gpus {gpus} --tp 4 --host-root '{}' --nvidia-smi '{}' | loadgen -c 1 -n 3 --max-tokens 8 --input-len 16 | srv-kill > {}",
        b.root(),
        b.program(),
        path.display()
    ));
    path.to_str().unwrap().to_string()
}

#[test]
fn preflight_warnings_are_reported_per_server_and_compare_shows_the_host_differences() {
    let dir = tempfile::tempdir().unwrap();
    let clean_box = HostBox::new(Fabric::DualSocketPcie, false);
    let dirty_box = HostBox::new(Fabric::DualSocketPcie, true);
    let clean = run(dir.path(), "clean.jsonl", &clean_box, "0,1,2,3");
    let dirty = run(dir.path(), "dirty.jsonl", &dirty_box, "0,1,4,5");

    let text = testkit::run_ok("summarize", &[&clean]).out();
    assert!(!text.contains("pre-flight"), "a clean box: {text}");
    // Which --gpus to give a TP engine of each size: one socket's four for TP-4.
    assert!(
        text.contains("best-connected GPUs on localhost: 2: --gpus 0,1 (same PCIe switch); 4: --gpus 0,1,2,3 (host bridges, one socket); 8: --gpus 0,1,2,3,4,5,6,7 (across sockets)"),
        "{text}"
    );
    let text = testkit::run_ok("summarize", &[&clean, "--hardware", "rtx-pro-6000"]).out();
    let note = text
        .lines()
        .find(|l| {
            l.contains(
                "best-connected GPUs on localhost (allreduce of 14336 bytes on rtx-pro-6000)",
            )
        })
        .unwrap_or_else(|| panic!("{text}"));
    let us = |size: &str| -> f64 {
        let at = note.find(&format!("{size}: --gpus")).unwrap();
        let rest = &note[at..];
        let a = rest.find("allreduce ").unwrap() + "allreduce ".len();
        rest[a..].split(' ').next().unwrap().parse().unwrap()
    };
    // The card's model over the group's links: 8 across sockets costs more than 4 on one.
    assert!(us("8") > us("4") && us("4") > us("2"), "{note}");

    let text = testkit::run_ok("summarize", &[&dirty]).out();
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("pre-flight (sim pid "))
        .collect();
    assert_eq!(notes.len(), 5, "{text}");
    for needle in [
        "the TP-4 group on GPUs 0,1,4,5 spans sockets while GPUs 0,1,2,3 share one",
        "P2P is not supported between GPUs 0-4 (CNS)",
        "GPU 5 is throttled before any load (sw_power_cap)",
        "the CPU governor is powersave",
        "kernel.numa_balancing is on",
    ] {
        assert_eq!(
            notes.iter().filter(|l| l.contains(needle)).count(),
            1,
            "{needle}: {text}"
        );
    }

    let text = testkit::run_ok("summarize", &["--compare", &clean, &dirty]).out();
    let env_at = text.find("environment differences").expect(&text);
    let table_at = text[env_at..]
        .find("\n\n")
        .map_or(text.len(), |i| env_at + i);
    let env = &text[env_at..table_at];
    let row = |what: &str| {
        env.lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} row: {env}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        row("CPU governor").ends_with("performance performance powersave"),
        "{env}"
    );
    assert!(row("NUMA balancing").ends_with("off on"), "{env}");
    assert!(
        row("C-state limits").ends_with("- processor.max_cstate=1"),
        "{env}"
    );
    assert!(
        row("slowest GPU link").ends_with("host bridges, one socket across sockets"),
        "{env}"
    );
    // GPU 5 is only the new run's: its throttle reasons are new, the base has none to show.
    assert!(
        row("GPU 5 throttle").ends_with("- gpu_idle sw_power_cap"),
        "{env}"
    );
    // What is the same on both boxes is not listed.
    assert!(!env.contains("THP") && !env.contains("CPUs "), "{env}");

    // --comm-from a run's own server record: the modelled allreduce is its GPUs' on this box.
    let roof = |f: &str| {
        testkit::run_ok(
            "summarize",
            &[
                f,
                "--roofline",
                "llama-3.1-8b@rtx-pro-6000",
                "--comm-from",
                f,
            ],
        )
        .out()
    };
    let text = roof(&clean);
    assert!(
        text.contains(&format!("topology: {clean} (GPUs 0,1,2,3, one socket)")),
        "{text}"
    );
    let text = roof(&dirty);
    assert!(
        text.contains(&format!("topology: {dirty} (GPUs 0,1,4,5, across sockets)")),
        "{text}"
    );
}
