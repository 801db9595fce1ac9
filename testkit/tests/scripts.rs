//! The recipes in scripts/ that people copy, run as written against srv-sim (and, for the
//! multi-host one, the loopback sshd the test setup starts): they must keep working as the
//! tools change.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use testkit::of_kind;
use testkit::stderr;
use testkit::{Guard, bin_dir, free_port, json_lines, wait_port};

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

/// Runs a script with the workspace's binaries first on PATH.
fn run_script(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg(script(name))
        .args(args)
        .env("PATH", path)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run the script")
}

#[test]
fn relaunch_and_rerun_launches_loads_and_kills_each_run() {
    let out = run_script(
        "relaunch-and-rerun.sh",
        &["sim", "--", "--ttft", "2ms", "--itl", "1ms"],
        &[("RUNS", "2"), ("LOADGEN_ARGS", "-c 1 -n 3 --max-tokens 4")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let summaries = of_kind(&records, "summary");
    let kills = of_kind(&records, "kill");
    assert_eq!(summaries.len(), 2);
    assert_eq!(kills.len(), 2);
    for (run, (s, k)) in summaries.iter().zip(&kills).enumerate() {
        let run = (run + 1).to_string();
        assert_eq!(s["labels"]["run"], run.as_str(), "{s}");
        assert_eq!(s["ok"], 3);
        assert_eq!(k["labels"]["run"], run.as_str(), "{k}");
        assert_eq!(k["ok"], true, "{k}");
    }
}

#[test]
fn tp_sweep_runs_one_server_per_degree() {
    let out = run_script(
        "tp-sweep.sh",
        &[
            "sim",
            "--model",
            "llama-3.1-70b",
            "--",
            "--hardware",
            "h100",
        ],
        &[
            ("TPS", "2 4"),
            ("LOADGEN_ARGS", "-c 1 -n 2 --max-tokens 4 --input-len 16"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let tps: Vec<&str> = of_kind(&records, "summary")
        .iter()
        .map(|s| s["labels"]["tp"].as_str().unwrap())
        .collect();
    assert_eq!(tps, ["2", "4"]);
    let kills = of_kind(&records, "kill");
    assert_eq!(kills.len(), 2);
    assert!(kills.iter().all(|k| k["ok"] == true), "{kills:?}");
}

#[test]
fn context_sweep_runs_every_length_on_one_server() {
    let out = run_script(
        "context-sweep.sh",
        &["sim", "--", "--ttft", "2ms", "--itl", "1ms"],
        &[
            ("LENS", "32,64"),
            ("CONC", "1"),
            ("MAX_TOKENS", "4"),
            ("LOADGEN_ARGS", "-n 3 --label case=long-context"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let summaries = of_kind(&records, "summary");
    let lens: Vec<u64> = summaries
        .iter()
        .map(|s| s["point"]["input_len"].as_u64().unwrap())
        .collect();
    assert_eq!(lens, [32, 64]);
    // LOADGEN_ARGS reach loadgen: 3 requests per point (a 100k-context sweep need not run 100).
    for s in &summaries {
        assert_eq!(s["requests"], 3, "{s}");
        assert_eq!(s["labels"]["case"], "long-context", "{s}");
    }
    assert_eq!(of_kind(&records, "kill").len(), 1);
}

/// The sshd setup exported SERVBENCH_SSH_KEY while the tools read SERVBENCH_SSH_IDENTITY: an
/// `eval "$(scripts/setup/sshd.sh)"` left every tool without its key. Now the exports alone
/// (no --identity, no --known-hosts) take collbench to the loopback sshd.
#[test]
fn sshd_setup_exports_the_variables_the_tools_read() {
    let sshd = testkit::sshd();
    let dir = std::path::Path::new(&sshd.key)
        .parent()
        .expect("the key's directory")
        .to_str()
        .unwrap()
        .to_string();
    // The running server's directory: start is idempotent and prints its exports.
    let setup = script("setup/sshd.sh");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -e; eval \"$(bash {} start)\"; env -u SSH_AUTH_SOCK collbench --hosts \"$SERVBENCH_SSH_TARGET,$SERVBENCH_SSH_TARGET\" -b 8 -e 8 -n 2 -w 1",
            setup.display()
        ))
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("SERVBENCH_SSHD_DIR", &dir)
        .env_remove("SERVBENCH_SSH_IDENTITY")
        .env_remove("SERVBENCH_SSH_KNOWN_HOSTS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    assert_eq!(of_kind(&records, "coll").len(), 1, "{records:?}");
    assert_eq!(of_kind(&records, "coll")[0]["ranks"], 2);
}

/// The GPU check is one command for a machine this project has not had: where it cannot run
/// (no nvidia-smi, a driver that lists no GPU, no PyTorch with CUDA to set figures beside) it
/// says so in one line and exits 2 before building or measuring anything, and leaves no
/// output folder. PATH holds only the tools the script reaches before its checks.
#[test]
fn bench_gpu_without_a_gpu_or_pytorch_says_why_in_one_line_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let which = |tool: &str| {
        let out = Command::new("bash")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    for tool in ["dirname", "grep", "head"] {
        std::os::unix::fs::symlink(which(tool), bin.join(tool)).unwrap();
    }
    // A real Python with its site-packages off (-S -I): no torch, whatever this box has.
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    let bare_python = dir.path().join("python");
    std::fs::write(
        &bare_python,
        format!("#!/bin/sh\nexec {python} -S -I \"$@\"\n"),
    )
    .unwrap();
    let smi = bin.join("nvidia-smi");
    let run = |smi_script: Option<&str>| {
        match smi_script {
            Some(text) => std::fs::write(&smi, format!("#!/bin/sh\n{text}\n")).unwrap(),
            None => {
                let _ = std::fs::remove_file(&smi);
            }
        }
        for exe in [&smi, &bare_python] {
            if exe.exists() {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(exe, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let out = Command::new(which("bash"))
            .arg(script("bench-gpu.sh"))
            .env("PATH", &bin)
            .env("PYTHON", &bare_python)
            .env("OUT", dir.path().join("out"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(out.stdout.is_empty() && !dir.path().join("out").exists());
        err
    };
    let err = run(None);
    assert!(
        err.contains("no NVIDIA GPU here (nvidia-smi not found)")
            && err.contains("scripts/bench-compute.sh"),
        "{err}"
    );
    let err = run(Some(
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
    ));
    assert!(
        err.contains("nvidia-smi lists no GPU (NVIDIA-SMI has failed")
            && err.contains("check the driver"),
        "{err}"
    );
    let err = run(Some(
        "[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'",
    ));
    assert!(
        err.contains("no PyTorch with CUDA in ") && err.contains("PYTHON=/path/to/python"),
        "{err}"
    );
}

/// srv-sim on a free port, in fixed-latency mode.
fn sim() -> (Guard, String) {
    testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"])
}

#[test]
fn multi_host_load_runs_loadgen_on_every_host_and_summarize_merges_them() {
    let sshd = testkit::sshd();
    let (target, port) = (&sshd.target, &sshd.port);
    let ssh_opts = format!(
        "-i {} -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes",
        sshd.key, sshd.known_hosts
    );
    let loadgen = bin_dir().join("loadgen");
    let (_sim, url) = sim();
    let dir = tempfile::tempdir().unwrap();
    let outdir = dir.path().join("runs");
    // The loopback sshd twice, spelled two ways: two "hosts" with their own labels.
    let second = format!("127.0.0.1:{port}");
    let hosts = format!("{target},{second}");
    let rank0_port = free_port().to_string();
    let out = run_script(
        "multi-host-load.sh",
        &[
            "-o",
            outdir.to_str().unwrap(),
            &hosts,
            "--",
            "--url",
            &url,
            "-c",
            "2",
            "-n",
            "6",
            "--max-tokens",
            "4",
            "--input-len",
            "16",
        ],
        &[
            ("LOADGEN", loadgen.to_str().unwrap()),
            ("SSH_OPTS", &ssh_opts),
            ("PORT", &rank0_port),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let mut files: Vec<PathBuf> = std::fs::read_dir(&outdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let mut hosts_seen = Vec::new();
    let mut merged = Vec::new();
    for f in &files {
        let records = json_lines(&std::fs::read(f).unwrap());
        let summaries = of_kind(&records, "summary");
        // The point's load is split: -c 2 -n 6 over two hosts is 1 and 3 requests each.
        let own: Vec<&&Value> = summaries
            .iter()
            .filter(|s| s["ranks"]["merged"] != true)
            .collect();
        assert_eq!(own.len(), 1, "{f:?}");
        assert_eq!(own[0]["ok"], 3);
        assert_eq!(own[0]["ranks"]["share_concurrency"], 1);
        assert_eq!(of_kind(&records, "request").len(), 3);
        hosts_seen.push(own[0]["labels"]["host"].as_str().unwrap().to_string());
        merged.extend(
            summaries
                .iter()
                .filter(|s| s["ranks"]["merged"] == true)
                .map(|s| (*s).clone()),
        );
    }
    hosts_seen.sort();
    let mut want = vec![target.clone(), second.clone()];
    want.sort();
    assert_eq!(hosts_seen, want);
    // Rank 0 (the first host) also wrote the point's merged summary: the whole point.
    assert_eq!(merged.len(), 1, "{merged:?}");
    assert_eq!(merged[0]["ok"], 6);

    // summarize merges the two hosts' point into one row of 6 requests (the merged summary
    // beside the hosts' own records is not counted again).
    let merged = testkit::cmd("summarize")
        .args(&files)
        .args(["--format", "json", "--cols", "conc,requests,ok"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(merged.status.success(), "{}", stderr(&merged));
    let report: Value = serde_json::from_slice(&merged.stdout).unwrap();
    let rows = &report["tables"][0]["rows"];
    assert_eq!(
        rows,
        &serde_json::json!([{"conc": 2, "requests": 6, "ok": 6}]),
        "{report}"
    );

    // A host that cannot be reached: named, non-zero, and the reachable host's loadgen, left
    // without its rank 0, says so and ends within --rank-timeout instead of waiting forever.
    let dead = format!("127.0.0.1:{}", free_port());
    let outdir = dir.path().join("with-a-dead-host");
    let started = std::time::Instant::now();
    let out = run_script(
        "multi-host-load.sh",
        &[
            "-o",
            outdir.to_str().unwrap(),
            &format!("{dead},{second}"),
            "--",
            "--url",
            &url,
            "-n",
            "2",
            "--max-tokens",
            "2",
            "--rank-timeout",
            "3s",
        ],
        &[
            ("LOADGEN", loadgen.to_str().unwrap()),
            ("SSH_OPTS", &ssh_opts),
            ("PORT", &rank0_port),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(255), "ssh's own exit code: {err}");
    assert!(
        err.contains(&format!("multi-host-load: error: {dead}: ")),
        "{err}"
    );
    assert!(
        err.contains(&format!("multi-host-load: error: {second}: "))
            && err.contains("rank 1 cannot reach rank 0"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
}

/// scripts/sbatch-load.sh as written, with stand-ins for what only a Slurm cluster has:
/// `scontrol show hostnames` (this machine) and `srun` (SLURM_NTASKS copies of the command,
/// each told its SLURM_PROCID, their outputs merged as srun merges them into the job's file).
#[test]
fn sbatch_load_splits_the_load_over_the_tasks_srun_starts() {
    let (_sim, url) = sim();
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("slurm");
    std::fs::create_dir(&fake).unwrap();
    let write = |name: &str, text: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = fake.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write("scontrol", "#!/usr/bin/env bash\necho 127.0.0.1\n");
    write(
        "srun",
        "#!/usr/bin/env bash\nrc=0; pids=()\nfor ((i = 0; i < SLURM_NTASKS; i++)); do SLURM_STEP_ID=0 SLURM_PROCID=$i \"$@\" & pids+=($!); done\nfor p in \"${pids[@]}\"; do wait \"$p\" || rc=$?; done\nexit $rc\n",
    );
    let path = format!(
        "{}:{}:{}",
        fake.display(),
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let port = free_port().to_string();
    let out = Command::new("bash")
        .arg(script("sbatch-load.sh"))
        .args([
            "-c",
            "3",
            "-n",
            "9",
            "--max-tokens",
            "4",
            "--input-len",
            "16",
        ])
        .env("PATH", path)
        .env("URL", &url)
        .env("PORT", &port)
        .env("SLURM_JOB_NODELIST", "node[1-3]")
        .env("SLURM_NTASKS", "3")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let summaries = of_kind(&records, "summary");
    assert_eq!(
        summaries.len(),
        4,
        "3 ranks' and the merged one: {summaries:?}"
    );
    for s in &summaries {
        if s["ranks"]["merged"] == true {
            assert_eq!(s["ok"], 9, "{s}");
        } else {
            assert_eq!(s["ok"], 3, "{s}");
            assert_eq!(s["ranks"]["share_concurrency"], 1, "{s}");
        }
    }
    assert_eq!(of_kind(&records, "request").len(), 9);
}

/// scripts/mpirun-load.sh as written, under the real Open MPI mpirun, three ranks here.
#[test]
fn mpirun_load_runs_the_ranks_under_mpirun_and_rank_0_writes_them_all() {
    let mpirun = testkit::setup_env("SERVBENCH_MPIRUN", "openmpi");
    let (_sim, url) = sim();
    let port = free_port().to_string();
    // Our binaries first on PATH, then mpirun from where the setup found it.
    let mpi_dir = std::path::Path::new(&mpirun)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let path = format!(
        "{}:{mpi_dir}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run_script(
        "mpirun-load.sh",
        &[
            "localhost:3",
            "--",
            "--url",
            &url,
            "-r",
            "30",
            "-n",
            "12",
            "--max-tokens",
            "4",
            "--input-len",
            "16",
        ],
        &[
            ("PORT", &port),
            ("MPIRUN_ARGS", "--oversubscribe --bind-to none"),
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            ("PATH", &path),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let records = json_lines(&out.stdout);
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 4, "{summaries:?}");
    let merged: Vec<&&Value> = summaries
        .iter()
        .filter(|s| s["ranks"]["merged"] == true)
        .collect();
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0]["ok"], 12);
    assert_eq!(merged[0]["point"]["rate_rps"], 30.0);
    assert_eq!(of_kind(&records, "request").len(), 12);
}

/// srv-sim's `vllm:num_requests_running`, from its /metrics (a plain HTTP/1.0 GET).
fn running_requests(url: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find(|l| l.starts_with("vllm:num_requests_running"))?
        .split_whitespace()
        .last()?
        .parse::<f64>()
        .ok()
        .map(|v| v as u64)
}

/// Ctrl-C (here SIGTERM) on multi-host-load.sh closes the SSH sessions; each remote loadgen
/// then sees its stdout's reader gone and stops at once, cancelling requests that would
/// otherwise stream for minutes: the server is left with nothing running.
#[test]
fn a_remote_loadgen_stops_sending_when_multi_host_load_is_terminated() {
    let sshd = testkit::sshd();
    let ssh_opts = format!(
        "-i {} -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes",
        sshd.key, sshd.known_hosts
    );
    let loadgen = bin_dir().join("loadgen");
    let port = free_port();
    let mut c = testkit::cmd("srv-sim");
    c.args([
        "--port",
        &port.to_string(),
        "--ttft",
        "1ms",
        "--itl",
        "200ms",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let _sim = Guard::spawn(c);
    assert!(wait_port(port, Duration::from_secs(20)), "srv-sim");
    let url = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let outdir = dir.path().join("runs");
    let host = sshd.target.clone();
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Each request streams 500 tokens 200 ms apart: 100 s, far beyond this test's bounds.
    let mut cmd = Command::new("bash");
    cmd.arg(script("multi-host-load.sh"))
        .args(["-o", outdir.to_str().unwrap(), &host, "--"])
        .args(["--url", &url, "-c", "2", "--duration", "300s"])
        .args(["--max-tokens", "500", "--input-len", "16"])
        .env("PATH", path)
        .env("LOADGEN", &loadgen)
        .env("SSH_OPTS", &ssh_opts)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut script = Guard::spawn(cmd);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while running_requests(&url) != Some(2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the remote loadgen never had 2 requests running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signalling the script this test started, by its pid.
    unsafe {
        libc::kill(script.pid() as i32, libc::SIGTERM);
    }
    let out = testkit::wait_output(&mut script.child, Duration::from_secs(20));
    assert_ne!(out.status.code(), Some(0), "terminated is not a success");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while running_requests(&url) != Some(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the remote loadgen still streams {:?} requests 15 s after the script was terminated",
            running_requests(&url)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
