//! loadgen as ranks of one job when one fails: a killed rank (by hand or under mpirun) fails the
//! point on every rank naming it, a silent one is given up on, and ranks started with other
//! arguments are refused by rank 0.

mod job;

use job::*;
use std::process::Output;
use std::time::{Duration, Instant};
use testkit::of_kind;
use testkit::stderr;
use testkit::{Guard, json_lines, wait_output};

/// srv-sim answering in 10 ms then 5 ms a token, and WORLD ranks started by hand loading it
/// at `-c concurrency` for 60 s, already sending: the sim and the ranks.
fn ranks_under_load(concurrency: &str) -> (Guard, Vec<Guard>) {
    let (sim, url) = testkit::srv_sim(&["--ttft", "10ms", "--itl", "5ms"]);
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let args = [
        "--url",
        &url,
        "-c",
        concurrency,
        "--duration",
        "60s",
        "--max-tokens",
        "8",
    ];
    let guards = (0..WORLD)
        .map(|r| rank(r, &coordinator, &args, None))
        .collect();
    wait_for_load(&url);
    (sim, guards)
}

/// Sends `sig` to `pid`, a rank this test started.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started, by its pid.
    unsafe {
        libc::kill(pid as i32, sig);
    }
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
    signal(victim, libc::SIGKILL);
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
fn a_killed_rank_fails_the_point_on_every_rank_naming_it() {
    let _one = one_job();
    let (_sim, mut guards) = ranks_under_load("6");
    let victim = guards[2].pid();
    signal(victim, libc::SIGKILL);
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
    let (_sim, mut guards) = ranks_under_load("3");
    let stopped = guards[1].pid();
    // SIGSTOP: its guard kills it at the end.
    signal(stopped, libc::SIGSTOP);
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
