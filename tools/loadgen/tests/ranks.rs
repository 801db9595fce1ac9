//! loadgen as several ranks of one job, 3 on this machine: started by hand (`--rank`,
//! `--world`, `--coordinator`) and under a real Open MPI `mpirun`, against srv-sim in its
//! fixed-latency mode. The server must see the total asked for (not one rank's, not three
//! times it), the ranks must start each point together, the merged percentiles must be a
//! single loadgen's at the same load, and a rank that dies must fail the point everywhere,
//! naming it, without a hang. The other modes run as ranks too: --find-max, conversations,
//! trace replay and --flush-cache (against the capture server of `server/`).

mod server;

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use testkit::of_kind;
use testkit::stderr;
use testkit::{Guard, check, holds_in_one_of_three, json_lines, wait_output};

const WORLD: usize = 3;

/// One job at a time: three ranks and a server already fill this machine's cores, and the
/// timing claims (start spread, rates, percentiles) need them to themselves.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_job() -> std::sync::MutexGuard<'static, ()> {
    ONE_JOB.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank started by hand in a process group of its own, stdout and stderr piped; `stdin`
/// a file for rank 0 (else nothing).
fn rank(r: usize, coordinator: &str, args: &[&str], stdin: Option<&std::path::Path>) -> Guard {
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
fn job(args: &[&str], stdin: Option<&std::path::Path>, limit: Duration) -> Vec<Output> {
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
fn metric(url: &str, name: &str) -> f64 {
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
fn wait_for_load(url: &str) {
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
fn summaries(records: &[Value]) -> (Vec<Value>, Value) {
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
fn start_spread_ms(parts: &[Value]) -> f64 {
    let starts: Vec<f64> = parts
        .iter()
        .map(|s| s["ranks"]["start_unix_ms"].as_f64().unwrap())
        .collect();
    let max = starts.iter().copied().fold(f64::MIN, f64::max);
    let min = starts.iter().copied().fold(f64::MAX, f64::min);
    max - min
}

/// Stops the server a `server` record names when the test ends, however it ends.
struct KillAtEnd(std::path::PathBuf);

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

#[test]
fn three_ranks_by_hand_give_the_server_the_total_concurrency_and_start_together() {
    let _one = one_job();
    // Rank 0 takes the target from srv-launch's record on stdin; the others learn it from rank 0.
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.jsonl");
    let launched = testkit::cmd("srv-launch")
        .args(["sim", "--", "--ttft", "20ms", "--itl", "5ms"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(launched.status.success(), "{}", stderr(&launched));
    std::fs::write(&server, &launched.stdout).unwrap();
    let _kill = KillAtEnd(server.clone());
    let url = json_lines(&launched.stdout)[0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    holds_in_one_of_three("3 ranks, c=7", || {
        let args = [
            "-c",
            "7",
            "--duration",
            "3s",
            "--max-tokens",
            "40",
            "--input-len",
            "16",
            "--label",
            "run=ranks",
        ];
        let sampler = running_sampler(&url);
        let outs = job(&args, Some(&server), Duration::from_secs(60));
        for (r, o) in outs.iter().enumerate() {
            assert!(o.status.success(), "rank {r}: {}", stderr(o));
        }
        // Rank 0 writes every rank's records (whole lines); the others write none.
        for o in &outs[1..] {
            assert!(
                o.stdout.is_empty(),
                "{}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
        let records = json_lines(&outs[0].stdout);
        assert_eq!(records[0]["kind"], "server", "upstream records first");
        let (parts, merged) = summaries(&records);
        assert_eq!(parts.len(), WORLD);
        let shares: Vec<u64> = parts
            .iter()
            .map(|s| s["ranks"]["share_concurrency"].as_u64().unwrap())
            .collect();
        assert_eq!(
            shares,
            vec![3, 2, 2],
            "the remainder goes to the first ranks"
        );
        for (r, s) in parts.iter().enumerate() {
            assert_eq!(s["labels"]["rank"], r.to_string());
            assert_eq!(
                s["labels"]["engine"], "sim",
                "the server's labels reach every rank"
            );
            assert_eq!(s["labels"]["run"], "ranks");
            assert!(s["labels"]["host"].is_string());
            assert_eq!(
                s["point"]["concurrency"], 7,
                "every part names the whole point"
            );
            assert_eq!(s["ranks"]["world"], 3);
        }
        let seeds: std::collections::BTreeSet<u64> =
            parts.iter().map(|s| s["seed"].as_u64().unwrap()).collect();
        assert_eq!(seeds.len(), WORLD, "a seed of its own per rank");
        let requests: u64 = parts.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
        assert_eq!(merged["requests"].as_u64().unwrap(), requests);
        assert_eq!(of_kind(&records, "request").len() as u64, requests);
        assert!(merged["labels"].get("rank").is_none(), "{merged}");
        assert_eq!(merged["labels"]["engine"], "sim");

        let running = sampler.join().unwrap();
        let spread = start_spread_ms(&parts);
        let merged_spread = merged["ranks"]["start_spread_ms"].as_f64().unwrap();
        check(
            "server's running requests",
            running,
            (running - 7.0).abs() <= 7.0 * 0.02,
        )?;
        check("start spread (ms)", spread, spread <= 5.0)?;
        check(
            "merged start spread (ms)",
            merged_spread,
            merged_spread <= 5.0,
        )?;
        Ok(format!(
            "server saw {running} running; starts within {spread:.3} ms (merged says {merged_spread:.3})"
        ))
    });
}

/// How a job's ranks are started.
#[derive(Clone, Copy, Debug)]
enum Launcher {
    /// `--rank`, `--world`, `--coordinator` on each process.
    ByHand,
    /// A real Open MPI `mpirun -np 3` (the ranks learn who they are from its variables).
    Mpirun,
}

/// `mpirun -np 3 loadgen --coordinator ... ARGS`, started; and the coordinator it names.
fn mpirun(args: &[&str]) -> (Guard, String) {
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
fn run_job(how: Launcher, args: &[&str]) -> Vec<Value> {
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
fn rate_sampler(url: &str) -> std::thread::JoinHandle<f64> {
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
fn running_sampler(url: &str) -> std::thread::JoinHandle<f64> {
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

/// 150 req/s over 3 ranks (50 each): the server finishes 150 req/s, within 2%.
fn total_rate(how: Launcher) {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "5ms", "--itl", "2ms"]);
    holds_in_one_of_three(&format!("3 ranks {how:?}, 150 req/s"), || {
        let sampler = rate_sampler(&url);
        // Constant arrivals: the rate is exact, so 2% measures loadgen, not Poisson noise.
        let records = run_job(
            how,
            &[
                "--url",
                &url,
                "-r",
                "150",
                "--arrival",
                "constant",
                "--duration",
                "4s",
                "--max-tokens",
                "4",
                "--input-len",
                "16",
            ],
        );
        let rate = sampler.join().unwrap();
        // Every line whole, though three processes' records went through one stdout.
        let (parts, merged) = summaries(&records);
        assert_eq!(parts.len(), WORLD);
        for s in &parts {
            assert_eq!(s["ranks"]["share_rate_rps"], 50.0, "{s}");
            assert_eq!(s["point"]["rate_rps"], 150.0);
        }
        let asked = merged["requests"].as_f64().unwrap();
        check(
            "requests sent (150 req/s for 4 s)",
            asked,
            (asked - 600.0).abs() <= 12.0,
        )?;
        check(
            "server's rate (req/s)",
            rate,
            (rate - 150.0).abs() <= 150.0 * 0.02,
        )?;
        let spread = start_spread_ms(&parts);
        check("start spread (ms)", spread, spread <= 5.0)?;
        Ok(format!(
            "server finished {rate:.1} req/s; {asked} sent; starts within {spread:.3} ms"
        ))
    });
}

#[test]
fn three_ranks_under_mpirun_give_the_server_the_total_rate() {
    let _one = one_job();
    total_rate(Launcher::Mpirun);
}

#[test]
fn three_ranks_by_hand_give_the_server_the_total_rate() {
    let _one = one_job();
    total_rate(Launcher::ByHand);
}

#[test]
fn three_ranks_under_mpirun_give_the_server_the_total_concurrency() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "20ms", "--itl", "5ms"]);
    holds_in_one_of_three("3 ranks under mpirun, c=7", || {
        let sampler = running_sampler(&url);
        let records = run_job(
            Launcher::Mpirun,
            &[
                "--url",
                &url,
                "-c",
                "7",
                "--duration",
                "3s",
                "--max-tokens",
                "40",
                "--input-len",
                "16",
            ],
        );
        let running = sampler.join().unwrap();
        let (parts, merged) = summaries(&records);
        let shares: Vec<u64> = parts
            .iter()
            .map(|s| s["ranks"]["share_concurrency"].as_u64().unwrap())
            .collect();
        assert_eq!(shares, vec![3, 2, 2]);
        check(
            "server's running requests",
            running,
            (running - 7.0).abs() <= 7.0 * 0.02,
        )?;
        let spread = start_spread_ms(&parts);
        let merged_spread = merged["ranks"]["start_spread_ms"].as_f64().unwrap();
        check("start spread (ms)", spread, spread <= 5.0)?;
        Ok(format!(
            "server saw {running} running; starts within {spread:.3} ms (merged says {merged_spread:.3})"
        ))
    });
}

#[test]
fn a_killed_rank_under_mpirun_fails_the_job_naming_it() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "10ms", "--itl", "5ms"]);
    let (mut mpi, coordinator) = mpirun(&[
        "--url",
        &url,
        "-c",
        "6",
        "--duration",
        "60s",
        "--max-tokens",
        "8",
    ]);
    wait_for_load(&url);
    // One of the ranks mpirun started for this job (its own coordinator on the command line).
    let victim = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains(&coordinator) && cmd.starts_with(testkit::bin("loadgen").to_str().unwrap())
        })
        .max()
        .expect("a rank of the job");
    // SAFETY: kill(2) on a rank of the job this test started.
    unsafe {
        libc::kill(victim as i32, libc::SIGKILL);
    }
    let started = Instant::now();
    // Nothing hangs: the job ends long before the point's 60 s.
    let out = wait_output(&mut mpi.child, Duration::from_secs(30));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(" (pid {victim} on ")) && err.contains("closed its connection"),
        "the surviving ranks name the killed one: {err}"
    );
}

#[test]
fn merged_percentiles_are_a_single_loadgens_at_the_same_load() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "30ms", "--itl", "4ms"]);
    let args = [
        "--url",
        &url,
        "-c",
        "6",
        "-n",
        "90",
        "--max-tokens",
        "16",
        "--input-len",
        "16",
    ];
    holds_in_one_of_three("3 ranks vs one loadgen", || {
        let single = testkit::cmd("loadgen")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(single.status.success(), "{}", stderr(&single));
        let single = json_lines(&single.stdout);
        let one = of_kind(&single, "summary")[0].clone();
        let outs = job(&args, None, Duration::from_secs(60));
        for (r, o) in outs.iter().enumerate() {
            assert!(o.status.success(), "rank {r}: {}", stderr(o));
        }
        let records = json_lines(&outs[0].stdout);
        let (_, merged) = summaries(&records);
        assert_eq!(merged["requests"], 90);
        assert_eq!(merged["ok"], 90);

        // summarize reads the ranks' stream to the merged summary's figures exactly (the
        // merged line itself is not counted again beside the ranks' own records).
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ranks.jsonl");
        std::fs::write(&file, &outs[0].stdout).unwrap();
        let table = testkit::cmd("summarize")
            .arg(&file)
            .args([
                "--format",
                "json",
                "--cols",
                "requests,ttft_p50,ttft_p99,tpot_p50",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(table.status.success(), "{}", stderr(&table));
        let report: Value = serde_json::from_slice(&table.stdout).unwrap();
        let row = &report["tables"][0]["rows"][0];
        assert_eq!(row["requests"], 90, "{report}");
        assert_eq!(row["ttft_p50"], merged["ttft_ms"]["p50"], "{report}");
        assert_eq!(row["ttft_p99"], merged["ttft_ms"]["p99"], "{report}");
        assert_eq!(row["tpot_p50"], merged["tpot_ms"]["p50"], "{report}");

        // The merged summary alone (the ranks' records elsewhere) stands for the point.
        let alone = dir.path().join("merged.jsonl");
        std::fs::write(&alone, format!("{merged}\n")).unwrap();
        let table = testkit::cmd("summarize")
            .arg(&alone)
            .args(["--format", "json", "--cols", "requests,ttft_p50"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&table.stdout).unwrap();
        let row = &report["tables"][0]["rows"][0];
        assert_eq!(row["requests"], 90, "{report}");
        assert_eq!(row["ttft_p50"], merged["ttft_ms"]["p50"], "{report}");

        let mut figures = Vec::new();
        for (metric, q) in [("ttft_ms", "p50"), ("ttft_ms", "p90"), ("tpot_ms", "p50")] {
            let a = one[metric][q].as_f64().unwrap();
            let b = merged[metric][q].as_f64().unwrap();
            // Noise: srv-sim's own lateness on a shared box, 1 ms or 5%.
            let noise = (a * 0.05).max(1.0);
            check(
                &format!("{metric} {q}: 3 ranks vs one"),
                b - a,
                (b - a).abs() <= noise,
            )?;
            figures.push(format!("{metric} {q} {a:.3} vs {b:.3}"));
        }
        Ok(figures.join(", "))
    });
}

#[test]
fn a_killed_rank_fails_the_point_on_every_rank_naming_it() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "10ms", "--itl", "5ms"]);
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let args = [
        "--url",
        &url,
        "-c",
        "6",
        "--duration",
        "60s",
        "--max-tokens",
        "8",
    ];
    let mut guards: Vec<Guard> = (0..WORLD)
        .map(|r| rank(r, &coordinator, &args, None))
        .collect();
    wait_for_load(&url);
    let victim = guards[2].pid();
    // SAFETY: kill(2) on the rank this test started.
    unsafe {
        libc::kill(victim as i32, libc::SIGKILL);
    }
    let started = Instant::now();
    // Nothing hangs: the others end long before the point's 60 s.
    let outs: Vec<Output> = guards[..2]
        .iter_mut()
        .map(|g| wait_output(&mut g.child, Duration::from_secs(20)))
        .collect();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let named = format!("rank 2 (pid {victim} on ");
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(1), "rank {r}: {}", stderr(o));
        let err = stderr(o);
        assert!(
            err.contains(&named) && err.contains("closed its connection"),
            "rank {r}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one error line: {err}");
    }
    // Rank 0 kept what was measured: partial summaries that say why.
    let records = json_lines(&outs[0].stdout);
    let summaries = of_kind(&records, "summary");
    assert!(!summaries.is_empty(), "{records:?}");
    for s in summaries {
        assert_eq!(s["partial"], true, "{s}");
        assert_eq!(s["stopped_by"], "rank_failed", "{s}");
        assert!(s["stop_reason"].as_str().unwrap().contains(&named), "{s}");
    }
    assert!(!of_kind(&records, "request").is_empty());
}

#[test]
fn a_rank_gone_silent_is_given_up_after_ten_seconds() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "10ms", "--itl", "5ms"]);
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let args = [
        "--url",
        &url,
        "-c",
        "3",
        "--duration",
        "60s",
        "--max-tokens",
        "8",
    ];
    let mut guards: Vec<Guard> = (0..WORLD)
        .map(|r| rank(r, &coordinator, &args, None))
        .collect();
    wait_for_load(&url);
    let stopped = guards[1].pid();
    // SAFETY: SIGSTOP to the rank this test started; its guard kills it at the end.
    unsafe {
        libc::kill(stopped as i32, libc::SIGSTOP);
    }
    let out = wait_output(&mut guards[0].child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("rank 1 (pid {stopped} on "))
            && err.contains("sent nothing for 10 s"),
        "{err}"
    );
    let other = wait_output(&mut guards[2].child, Duration::from_secs(30));
    assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
}

#[test]
fn ranks_started_with_other_arguments_are_refused_by_rank_0() {
    let _one = one_job();
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let url = "http://127.0.0.1:9";
    // A rank that comes after rank 0 has refused another and left finds nobody listening and
    // retries until --rank-timeout (rank 0 may just not listen yet): 10 s here, not 120.
    let t = ["--rank-timeout", "10s"];
    let mut r0 = rank(
        0,
        &coordinator,
        &[&t[..], &["--url", url, "-c", "4"]].concat(),
        None,
    );
    let mut r1 = rank(
        1,
        &coordinator,
        &[&t[..], &["--url", url, "-c", "8"]].concat(),
        None,
    );
    let mut r2 = rank(
        2,
        &coordinator,
        &[&t[..], &["--url", url, "-c", "4", "--label", "mine=yes"]].concat(),
        None,
    );
    let out = wait_output(&mut r0.child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("rank 1 was started with different arguments"),
        "{err}"
    );
    for g in [&mut r1, &mut r2] {
        let o = wait_output(&mut g.child, Duration::from_secs(30));
        assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    }
}

/// The generation requests the capture server read, in order.
fn generations(srv: &server::TestServer) -> Vec<Value> {
    srv.captured()
        .into_iter()
        .filter(|c| c.path.contains("completions") && c.body["stream"] == json!(true))
        .map(|c| c.body)
        .collect()
}

fn fast_server() -> server::TestServer {
    server::start(server::Behavior {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        ..server::Behavior::default()
    })
}

/// Runs a job of 3 ranks by hand, each to success; rank 0's stream (every rank's records).
fn job_ok(args: &[&str]) -> Vec<Value> {
    let outs = job(args, None, Duration::from_secs(60));
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", stderr(o));
    }
    json_lines(&outs[0].stdout)
}

#[test]
fn find_max_as_ranks_decides_once_on_the_merged_figures() {
    let _one = one_job();
    let srv = fast_server();
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--find-max",
        "concurrency",
        "-c",
        "1",
        "--find-max-limit",
        "4",
        "-n",
        "6",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
        "--slo",
        "ttft_ms=5000",
        "--slo-attainment",
        "0.5",
    ]);
    let searches = of_kind(&records, "search");
    assert_eq!(
        searches.len(),
        1,
        "rank 0 alone writes the search: {searches:?}"
    );
    let search = searches[0];
    assert!(search["labels"].get("rank").is_none(), "{search}");
    assert_eq!(search["stopped_by"], "limit", "{search}");
    let probes = search["probes"].as_array().unwrap();
    let loads: Vec<f64> = probes.iter().map(|p| p["load"].as_f64().unwrap()).collect();
    assert_eq!(loads, vec![1.0, 2.0, 4.0], "{search}");
    for p in probes {
        // Judged on the whole probe (6 requests), not on one rank's part of it.
        assert_eq!(p["requests"], 6, "{p}");
    }
    let merged: Vec<&Value> = of_kind(&records, "summary")
        .into_iter()
        .filter(|s| s["ranks"]["merged"] == true)
        .collect();
    assert_eq!(merged.len(), probes.len(), "one merged summary per probe");
    assert_eq!(generations(&srv).len(), 18, "3 probes of 6 requests");
}

#[test]
fn conversations_as_ranks_split_the_sessions_like_the_concurrency() {
    let _one = one_job();
    let srv = fast_server();
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--api",
        "chat",
        "-c",
        "3",
        "-n",
        "6",
        "--turns",
        "2",
        "--think-time",
        "1ms",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ]);
    let (parts, merged) = summaries(&records);
    for s in &parts {
        assert_eq!(s["ranks"]["share_concurrency"], 1, "{s}");
        assert_eq!(s["sessions"], 2, "{s}");
        assert_eq!(s["requests"], 4, "two sessions of two turns: {s}");
    }
    assert_eq!(merged["sessions"], 6, "{merged}");
    assert_eq!(merged["requests"], 12, "{merged}");
    assert_eq!(merged["turns"], "2", "{merged}");
    let bodies = generations(&srv);
    assert_eq!(bodies.len(), 12);
    // Each rank's sessions are its own (a seed per rank): six different first turns.
    let firsts: std::collections::BTreeSet<String> = bodies
        .iter()
        .filter(|b| b["messages"].as_array().unwrap().len() == 1)
        .map(|b| b["messages"][0]["content"].to_string())
        .collect();
    assert_eq!(firsts.len(), 6, "{firsts:?}");
}

#[test]
fn trace_rows_go_round_the_ranks_at_their_times_with_shared_prefixes() {
    let _one = one_job();
    let srv = fast_server();
    let url = srv.url();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    // Six rows, 100 ms apart, of lengths 40..45: all share their first block (id 7).
    let rows: String = (0..6u32)
        .map(|i| {
            json!({"timestamp": 100 * i, "input_length": 40 + i, "output_length": 2,
                   "hash_ids": [7, 100 + i, 200 + i]})
            .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&trace, rows).unwrap();
    let records = job_ok(&[
        "--url",
        &url,
        "--trace",
        trace.to_str().unwrap(),
        "--trace-block",
        "16",
    ]);
    let (parts, merged) = summaries(&records);
    assert_eq!(merged["trace_rows"], 6, "{merged}");
    assert_eq!(merged["requests"], 6, "{merged}");
    for (r, s) in parts.iter().enumerate() {
        assert_eq!(s["trace_rows"], 2, "{s}");
        // Rank r sends rows r and r+3, each at its row's time from the common start.
        let mut sent: Vec<(u64, f64)> = of_kind(&records, "request")
            .into_iter()
            .filter(|q| q["labels"]["rank"] == r.to_string().as_str())
            .map(|q| {
                (
                    q["prompt_tokens_target"].as_u64().unwrap(),
                    q["intended_ms"].as_f64().unwrap(),
                )
            })
            .collect();
        sent.sort_by_key(|a| a.0);
        let r = r as u64;
        let want = [(40 + r, 100.0 * r as f64), (43 + r, 100.0 * (r + 3) as f64)];
        assert_eq!(sent.len(), 2, "rank {r}: {sent:?}");
        for ((len, at), (want_len, want_at)) in sent.iter().zip(want) {
            assert_eq!(*len, want_len, "rank {r}: {sent:?}");
            assert!((at - want_at).abs() < 1e-6, "rank {r}: {sent:?}");
        }
    }
    // Equal hash ids name equal words on every rank: the first block is common to all.
    let prompts: Vec<Vec<String>> = generations(&srv)
        .iter()
        .map(|b| {
            b["prompt"]
                .as_str()
                .unwrap()
                .split(' ')
                .map(str::to_string)
                .collect()
        })
        .collect();
    assert_eq!(prompts.len(), 6);
    for p in &prompts[1..] {
        let common = p
            .iter()
            .zip(&prompts[0])
            .take_while(|(a, b)| a == b)
            .count();
        assert!(
            common >= 16,
            "{common} words shared: {p:?} vs {:?}",
            prompts[0]
        );
    }
}

#[test]
fn flush_cache_as_ranks_is_rank_0s_alone_before_the_common_start() {
    let _one = one_job();
    let srv = fast_server();
    let url = srv.url();
    let records = job_ok(&[
        "--url",
        &url,
        "--engine",
        "vllm",
        "--flush-cache",
        "-c",
        "3,6",
        "-n",
        "6",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ]);
    // Per point: one reset, then the point's six requests from all ranks.
    let order: Vec<String> = srv
        .captured()
        .into_iter()
        .map(|c| c.path)
        .filter(|p| p == "/reset_prefix_cache" || p == "/v1/completions")
        .collect();
    let point: Vec<&str> = std::iter::once("/reset_prefix_cache")
        .chain(std::iter::repeat_n("/v1/completions", 6))
        .collect();
    assert_eq!(order, [point.clone(), point].concat());
    let summaries = of_kind(&records, "summary");
    assert_eq!(summaries.len(), 8, "3 parts and the merged one, per point");
    for s in summaries {
        let flushed = match s["labels"]["rank"].as_str() {
            Some("0") | None => json!(true),
            Some(_) => Value::Null,
        };
        assert_eq!(s["cache_flushed"], flushed, "{s}");
    }
}

/// One server, one view of it: rank 0 alone scrapes srv-sim's /metrics, and the merged summary
/// carries its window, whose token counts are the whole job's (every rank's requests).
#[test]
fn rank_0_alone_watches_the_server_and_the_merged_summary_carries_it() {
    let _one = one_job();
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let records = job_ok(&[
        "--url",
        &url,
        "-c",
        "3",
        "-n",
        "12",
        "--input-len",
        "16",
        "--max-tokens",
        "8",
        "--no-gpu",
    ]);
    let (parts, merged) = summaries(&records);
    assert!(parts[0].get("server").is_some(), "{}", parts[0]);
    for s in &parts[1..] {
        assert!(s.get("server").is_none(), "only rank 0 scrapes: {s}");
    }
    let server = &merged["server"];
    assert_eq!(server["engine"], "vllm", "{merged}");
    assert_eq!(
        server["generation_tokens"], merged["output_tokens"],
        "{merged}"
    );
    assert_eq!(merged["output_tokens"], 96, "{merged}");
    assert_eq!(
        merged["telemetry_cpu_s"], parts[0]["telemetry_cpu_s"],
        "{merged}"
    );
}
