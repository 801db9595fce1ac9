//! scripts/device-gpu.sh, the one command for a lent GPU (issue 25), on a machine without one:
//! every GPU step says in one line why it cannot run, the library probe names every file it
//! looked for, the steps that need no GPU (loadgen against srv-sim, srv-kill --pid, the whole
//! srv-launch | loadgen | srv-kill | summarize loop) run, and it exits 3 with at most 8 files
//! under OUT (what the device tool brings back). scripts/carry-bins.sh carries every binary the
//! script runs.

use std::process::{Command, Stdio};
use testkit::{bin_dir, json_lines, of_kind};

/// What the device script runs, and so what carry-bins.sh must carry.
const DEVICE_BINS: [&str; 6] = [
    "collbench",
    "loadgen",
    "srv-kill",
    "srv-launch",
    "srv-sim",
    "summarize",
];

#[test]
fn carry_bins_carries_every_binary_the_device_script_runs() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/");
    let carry = std::fs::read_to_string(format!("{root}carry-bins.sh")).unwrap();
    let device = std::fs::read_to_string(format!("{root}device-gpu.sh")).unwrap();
    let list = format!("bins=({})", DEVICE_BINS.join(" "));
    assert!(carry.contains(&list), "carry-bins.sh: {list}");
    assert!(
        device.contains(&format!("for b in {}; do", DEVICE_BINS.join(" "))),
        "device-gpu.sh checks for each of {DEVICE_BINS:?}"
    );
}

#[test]
fn device_gpu_without_a_gpu_says_why_per_step_runs_the_rest_and_exits_3() {
    for b in DEVICE_BINS {
        testkit::bin(b);
    }
    let dir = tempfile::tempdir().unwrap();
    // A driver that lists no GPU (as on a box whose driver is gone), first on PATH.
    let fake = dir.path().join("fake");
    std::fs::create_dir(&fake).unwrap();
    let smi = fake.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n",
    )
    .unwrap();
    // A real Python with its site-packages off: no torch, whatever this box has.
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    let bare = fake.join("python");
    std::fs::write(&bare, format!("#!/bin/sh\nexec {python} -S -I \"$@\"\n")).unwrap();
    for exe in [&smi, &bare] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out_dir = dir.path().join("out");
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/device-gpu.sh"
        ))
        .env(
            "PATH",
            format!(
                "{}:{}",
                fake.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("BIN", bin_dir())
        .env("PYTHON", &bare)
        .env("OUT", &out_dir)
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{table}\n{err}");
    let why = "nvidia-smi lists no GPU (NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.)";
    let line = |prefix: &str| {
        let found: Vec<&str> = table.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(found.len(), 1, "one {prefix} line: {table}");
        found[0].to_string()
    };
    let libs = line("libraries: ");
    assert!(
        libs.contains(why)
            && libs.contains("looked for libcuda.so ")
            && libs.contains(" libcublas.so.13 "),
        "{libs}"
    );
    for step in ["gemm", "limits", "nccl", "decode"] {
        assert_eq!(
            line(&format!("{step}: ")),
            format!("{step}: cannot run: {why}")
        );
    }
    assert!(!table.contains("FAILED"), "{table}");
    // The steps that need no GPU ran.
    let telemetry = line("telemetry: ");
    assert!(
        telemetry.starts_with("telemetry: loadgen ran (")
            && !telemetry.starts_with("telemetry: loadgen ran (0 ")
            && telemetry.contains(why),
        "{telemetry}"
    );
    assert!(
        table.contains("kill: the GPU memory check cannot run: "),
        "{table}"
    );
    // The loop people run, whole: two points, the server killed, no GPU to read energy from.
    assert_eq!(
        line("pipeline: "),
        "pipeline: 2 point(s) (C=1,8), srv-kill ok; GPU energy: no GPU samples (see log.txt)"
    );
    assert!(
        table.lines().last().unwrap().starts_with("# no GPU here"),
        "{table}"
    );
    // What comes back: within the device tool's 8 files, the table and every record.
    let files: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(files.len() <= 8, "{files:?}");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("table.txt")).unwrap(),
        table
    );
    let records = json_lines(&std::fs::read(out_dir.join("records.jsonl")).unwrap());
    let kills = of_kind(&records, "kill");
    let kill: Vec<_> = kills
        .iter()
        .filter(|k| k["labels"]["step"] == "kill")
        .collect();
    assert_eq!(kill.len(), 1, "{kills:?}");
    assert_eq!(kill[0]["ok"], true, "{}", kill[0]);
    // The pipeline's srv-kill killed the server srv-launch started.
    assert!(
        kills.iter().any(
            |k| k["ok"] == true && k["target"].as_str().unwrap_or("").starts_with("server sim")
        ),
        "{kills:?}"
    );
    assert!(!of_kind(&records, "summary").is_empty());
}
