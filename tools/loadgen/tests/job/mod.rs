//! A loadgen job of three ranks on this machine, as the rank tests start it: by hand or under
//! a real Open MPI `mpirun`, one job at a time, with srv-sim's metrics read while it runs.

// Each includer uses a part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::{Guard, json_lines, of_kind, stderr, wait_output};

pub const WORLD: usize = 3;

/// One job at a time: three ranks and a server already fill this machine's cores, and the
/// timing claims (start spread, rates, percentiles) need them to themselves.
pub static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_job() -> std::sync::MutexGuard<'static, ()> {
    ONE_JOB.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank started by hand in a process group of its own, stdout and stderr piped; `stdin`
/// a file for rank 0 (else nothing).
pub fn rank(r: usize, coordinator: &str, args: &[&str], stdin: Option<&std::path::Path>) -> Guard {
    use std::os::unix::process::CommandExt;
    let mut c = testkit::cmd("loadgen");
    c.args(["--rank", &r.to_string(), "--world", &WORLD.to_string()])
        .args(["--coordinator", coordinator])
        .args(args)
        .stdin(match stdin {
            Some(path) => Stdio::from(std::fs::File::open(path).unwrap()),
            None => Stdio::null(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    Guard {
        child: c.spawn().expect("spawn a rank"),
    }
}

/// Starts all ranks (rank 0 last, as a launcher might) and collects their outputs.
pub fn job(args: &[&str], stdin: Option<&std::path::Path>, limit: Duration) -> Vec<Output> {
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let mut guards: Vec<Guard> = (1..WORLD)
        .map(|r| rank(r, &coordinator, args, None))
        .collect();
    guards.insert(0, rank(0, &coordinator, args, stdin));
    guards
        .iter_mut()
        .map(|g| wait_output(&mut g.child, limit))
        .collect()
}

/// One of srv-sim's metrics, summed over its label sets.
pub fn metric(url: &str, name: &str) -> f64 {
    let addr = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("reach srv-sim");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the server has requests in flight (the point began), at most 30 s.
pub fn wait_for_load(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(url, "vllm:num_requests_running") == 0.0 {
        assert!(
            Instant::now() < deadline,
            "the ranks never loaded the server"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The per-rank summaries (by rank) and the merged one, from rank 0's stream.
pub fn summaries(records: &[Value]) -> (Vec<Value>, Value) {
    let all = of_kind(records, "summary");
    let merged: Vec<&Value> = all
        .iter()
        .copied()
        .filter(|s| s["ranks"]["merged"] == true)
        .collect();
    assert_eq!(merged.len(), 1, "one merged summary: {all:?}");
    let mut parts: Vec<Value> = all
        .into_iter()
        .filter(|s| s["ranks"]["merged"] != true)
        .cloned()
        .collect();
    parts.sort_by_key(|s| s["labels"]["rank"].as_str().unwrap().to_string());
    (parts, merged[0].clone())
}

/// Latest minus earliest start of the ranks (one machine: one clock).
pub fn start_spread_ms(parts: &[Value]) -> f64 {
    let starts: Vec<f64> = parts
        .iter()
        .map(|s| s["ranks"]["start_unix_ms"].as_f64().unwrap())
        .collect();
    let max = starts.iter().copied().fold(f64::MIN, f64::max);
    let min = starts.iter().copied().fold(f64::MAX, f64::min);
    max - min
}

/// Stops the server a `server` record names when the test ends, however it ends.
pub struct KillAtEnd(pub std::path::PathBuf);

impl Drop for KillAtEnd {
    fn drop(&mut self) {
        let _ = testkit::cmd("srv-kill")
            .arg("--from")
            .arg(&self.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// How a job's ranks are started.
#[derive(Clone, Copy, Debug)]
pub enum Launcher {
    /// `--rank`, `--world`, `--coordinator` on each process.
    ByHand,
    /// A real Open MPI `mpirun -np 3` (the ranks learn who they are from its variables).
    Mpirun,
}

/// `mpirun -np 3 loadgen --coordinator ... ARGS`, started; and the coordinator it names.
pub fn mpirun(args: &[&str]) -> (Guard, String) {
    let mpirun = testkit::setup_env("SERVBENCH_MPIRUN", "openmpi");
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let mut c = Command::new(&mpirun);
    c.args(["--oversubscribe", "--bind-to", "none", "-np", "3"])
        .arg(testkit::bin("loadgen"))
        .args(["--coordinator", &coordinator])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    (Guard::spawn(c), coordinator)
}

/// Runs a job of 3 ranks to its end, each rank to success: every rank's records (rank 0's
/// stdout, or mpirun's, which is rank 0's).
pub fn run_job(how: Launcher, args: &[&str]) -> Vec<Value> {
    match how {
        Launcher::ByHand => job_ok(args),
        Launcher::Mpirun => {
            let (mut mpi, _) = mpirun(args);
            let out = wait_output(&mut mpi.child, Duration::from_secs(60));
            assert!(out.status.success(), "{}", stderr(&out));
            json_lines(&out.stdout)
        }
    }
}

/// The server's finished requests per second over 2 s in the middle of the point.
pub fn rate_sampler(url: &str) -> std::thread::JoinHandle<f64> {
    let url = url.to_string();
    std::thread::spawn(move || {
        wait_for_load(&url);
        std::thread::sleep(Duration::from_millis(800));
        let (n0, t0) = (metric(&url, "vllm:request_success_total"), Instant::now());
        std::thread::sleep(Duration::from_secs(2));
        let (n1, t1) = (metric(&url, "vllm:request_success_total"), Instant::now());
        (n1 - n0) / (t1 - t0).as_secs_f64()
    })
}

/// The median of the server's running requests over 1.2 s in the middle of the point.
pub fn running_sampler(url: &str) -> std::thread::JoinHandle<f64> {
    let url = url.to_string();
    std::thread::spawn(move || {
        wait_for_load(&url);
        std::thread::sleep(Duration::from_millis(800));
        let mut seen: Vec<f64> = (0..15)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(80));
                metric(&url, "vllm:num_requests_running")
            })
            .collect();
        seen.sort_by(f64::total_cmp);
        seen[seen.len() / 2]
    })
}

/// Runs a job of 3 ranks by hand, each to success; rank 0's stream (every rank's records).
pub fn job_ok(args: &[&str]) -> Vec<Value> {
    let outs = job(args, None, Duration::from_secs(60));
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", stderr(o));
    }
    json_lines(&outs[0].stdout)
}
